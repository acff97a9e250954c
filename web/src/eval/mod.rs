//! The evaluation job: judges windows with the engine on an interval and keeps every
//! verdict that is not `ok` of the horizon in memory ([`VerdictIndex`]), which is what
//! `/anomalies`, `/topics`, the metrics and the alerts read. Reading the verdicts of a
//! day across a thousand topics from the index takes microseconds, where recomputing
//! them per request would read ~1 M window rows.
//!
//! A cycle re-judges only windows whose verdict can have changed: windows that
//! received increments since the previous cycle (late data), windows recent enough to
//! change lifecycle by the passing of time, and windows still `pending` or `stalled`
//! (waiting for an auditor).
//!
//! Cold start: the first cycle judges only the recent windows (the API's default hour,
//! or window + grace when longer), every topic at once with bulk reads of pages of
//! topics, and serve is ready; [`Evaluator::load_step`]s then judge the rest of the
//! horizon three hours at a time, newest first, between cycles. Until the horizon is
//! judged, [`VerdictIndex::loading`] says how far it is (`/readyz`), `/anomalies` and
//! `/topics` answer 503 for ranges reaching before it, and the alerts of the judged windows
//! are published with the bound they are judged from. Judging the whole horizon first
//! kept `/readyz` waiting on two queries per topic over all of it (the figures:
//! docs/web.md, Cold start).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use audit_lib::WindowSize;
use store::{Deployment, Store, StoreError, TimeRange, VerdictReads};

use crate::engine::topology::TopologyCell;
use crate::engine::{self, ProgressRow, Topology};
use crate::metrics::{AuditorLabels, EdgeLabels, Metrics, TierLabels};

mod gauges;
pub(crate) mod index;
mod judge;
mod proofs;

/// The proven-loss hold is the judging path's ([`crate::judging::judge`]); named here
/// too, beside the index whose proofs it reads.
pub use crate::judging::hold_proven_loss;
use index::IndexPlan;
pub use index::{key_of, Loading, Proof, VerdictIndex, VerdictKey, WindowMismatch};
use judge::Pass;

/// Upper bound of the keys of windows with late increments read per cycle, as every
/// other read (keys are up to 250 bytes: 500 000 of them were ~150 MB of serve).
const KEY_LIMIT: u32 = store::MAX_READ_ROWS as u32;
/// `/readyz`'s `waiting_for` while no window is stored and `[topology] window` is not set.
pub const WAITING_FOR_WINDOW: &str =
    "the first audit window, to learn the window size (the auditors' audit.event_time.window_size; [topology] window is not set)";

/// The first cycle judges at least this much before now (the API's default range, so
/// that a default `/anomalies` answers as soon as serve is ready); more when windows
/// stay unsettled longer (window + grace).
const RECENT_SPAN_MS: i64 = 60 * 60_000;
/// How much older history one load step judges. Each step ends with work over the
/// whole index (the alerts' publication), so fewer, longer steps load faster: 3 hours
/// of the 60 M store (bench/store-scale.sh) are ~1 M window rows, a few seconds.
const LOAD_STEP_MS: i64 = 3 * 60 * 60_000;
/// Window rows a bulk read aims at per page (below `store::MAX_READ_ROWS`).
const PAGE_ROWS: usize = 40_000;

/// Late increments are looked for from a little before the previous cycle: a batch
/// stamped before that cycle may have committed after it.
const LATE_MARGIN_MS: i64 = 5 * 60_000;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CycleStats {
    pub windows: usize,
    pub topics: usize,
    pub anomalies: usize,
}

pub struct Evaluator {
    pub store: Store,
    /// Where the proven losses are kept across restarts (a writer; `store` may be a
    /// read replica).
    ledger: Store,
    /// Whether the proofs a previous process recorded are in the index.
    proofs_loaded: bool,
    /// The ledger holds no proof of a window starting before this.
    proofs_forgotten_before: i64,
    pub topology: Arc<TopologyCell>,
    pub index: Arc<RwLock<VerdictIndex>>,
    pub metrics: Arc<Metrics>,
    pub horizon_ms: i64,
    last_cycle: Option<i64>,
    /// Window start of the completeness gauge per edge, so an older window judged
    /// again (late data) does not overwrite a newer one.
    gauge_windows: HashMap<EdgeLabels, i64>,
    /// Newest window judged per topic: a topic whose newest window left the horizon
    /// is dropped with its series (topic names are data; they must not pile up).
    newest_window: HashMap<String, i64>,
    /// Topics with `topic_anomalies` series: those that had an anomaly in the horizon.
    anomalous_topics: BTreeSet<String>,
    /// The `auditor_stalled` series set by the last cycle.
    auditor_series: HashSet<AuditorLabels>,
    /// The `replication_evidence_age_seconds` series set by the last cycle.
    evidence_series: HashSet<TierLabels>,
    /// Replication evidence refused and counted (`replication_evidence_refused`), so
    /// that a piece judged again at every cycle is counted once: its key, when it was
    /// received.
    refused_evidence: HashMap<RefusedEvidence, i64>,
    /// The `window_size_mismatch` series set by the last cycle.
    mismatch_series: HashSet<TierLabels>,
    /// Windows starting at or after this are judged (`None` before the first cycle);
    /// older ones of the horizon wait for a `load_step`.
    loaded_from: Option<i64>,
    /// Windows judged by the first cycle and the load steps.
    windows_loaded: u64,
    /// When the first cycle ran (epoch ms).
    load_started: i64,
    /// Topics per bulk read, adapted to the rows a topic has per read.
    page_topics: u32,
    /// Progress by topic as the last cycle read it (load steps judge with it).
    progress: Arc<HashMap<String, Vec<ProgressRow>>>,
    /// Whether that read hit the store's row cap.
    progress_capped: bool,
    /// When it did: the progress of the page of topics being judged.
    page_progress: Option<Arc<crate::reads::PageProgress>>,
}

/// A piece of replication evidence as received: (topic, tier, datacenter, partition,
/// next offset, emitted at, received at).
type RefusedEvidence = (String, String, String, i32, i64, i64, i64);

/// Most pieces of refused evidence remembered (so as to count each once): past it
/// they are forgotten, and counted again if still refused.
const REFUSED_EVIDENCE_LIMIT: usize = 100_000;

/// Most auditors (topic × tier × datacenter) read per cycle.
const AUDITOR_LIMIT: u32 = store::MAX_READ_ROWS as u32;

impl Evaluator {
    pub fn new(
        store: Store,
        ledger: Store,
        topology: Arc<TopologyCell>,
        index: Arc<RwLock<VerdictIndex>>,
        metrics: Arc<Metrics>,
        horizon_ms: i64,
    ) -> Self {
        Self {
            store,
            ledger,
            proofs_loaded: false,
            proofs_forgotten_before: i64::MIN,
            topology,
            index,
            metrics,
            horizon_ms,
            last_cycle: None,
            gauge_windows: HashMap::new(),
            newest_window: HashMap::new(),
            anomalous_topics: BTreeSet::new(),
            auditor_series: HashSet::new(),
            evidence_series: HashSet::new(),
            refused_evidence: HashMap::new(),
            mismatch_series: HashSet::new(),
            loaded_from: None,
            windows_loaded: 0,
            load_started: 0,
            page_topics: 256,
            progress: Arc::new(HashMap::new()),
            progress_capped: false,
            page_progress: None,
        }
    }

    /// Longest grace of any topic: how long a window can stay unsettled by time.
    fn max_grace_ms(&self) -> i64 {
        let cfg = self.topology.config();
        cfg.overrides
            .iter()
            .filter_map(|o| o.grace)
            .chain([cfg.grace])
            .map(|d| d.as_millis() as i64)
            .max()
            .unwrap_or(0)
    }

    /// One evaluation cycle at time `now` (epoch ms).
    pub async fn cycle(&mut self, now: i64) -> Result<CycleStats, StoreError> {
        let started = Instant::now();
        let mut plan = IndexPlan::default();
        let result = self.cycle_inner(now, &mut plan).await;
        if result.is_err() {
            // The verdicts judged before the failure are published (each is right, and
            // their metrics are counted); the mismatches and the time stay the last
            // complete cycle's.
            plan.window_mismatches = None;
            plan.evaluated_at = None;
            plan.loading = None;
            // Judged again by the next cycle.
            plan.rejudged.clear();
        }
        plan.proven_at = now;
        self.save_proofs(&plan.proven, now).await;
        self.publish(plan);
        // The anomaly gauges from the index just published (none before a topology).
        let result = result.map(|judged| {
            judged.map_or_else(CycleStats::default, |stats| CycleStats {
                anomalies: self.update_anomaly_metrics(),
                ..stats
            })
        });
        self.metrics
            .evaluation_duration
            .observe(started.elapsed().as_secs_f64());
        self.metrics.evaluations.inc();
        match &result {
            Ok(_) => {
                self.metrics.last_evaluation.set(now);
            }
            Err(e) => {
                self.metrics.evaluation_errors.inc();
                tracing::warn!(error = %e, "evaluation cycle failed; retrying at the next one");
            }
        }
        result
    }

    /// The topology, with the window size the store recorded (fixed by the
    /// collector's `[ingest] window` or by the first stored increment, never by the
    /// newest window, which anyone who can write one could set) when `[topology]
    /// window` is not set; `None` (and why in the index) while none is recorded.
    async fn known_topology(
        &self,
        plan: &mut IndexPlan,
    ) -> Result<Option<Arc<Topology>>, StoreError> {
        if let Some(t) = self.topology.get() {
            return Ok(Some(t));
        }
        let waiting = match self.store.window_size_ms().await? {
            None => WAITING_FOR_WINDOW.to_string(),
            Some(ms) => match WindowSize::from_millis(ms)
                .map_err(|e| e.to_string())
                .and_then(|w| self.topology.learn(w).map_err(|e| e.to_string()))
            {
                Ok(t) => {
                    tracing::info!(
                        window_ms = t.window.as_millis(),
                        "window size as the store recorded it (the collector's [ingest] window, or the first stored increment's; [topology] window is not set)"
                    );
                    plan.waiting_for = Some(None);
                    return Ok(Some(t));
                }
                // Stored rows are validated on the way in; this only guards the loop.
                Err(e) => format!(
                    "the recorded window size is {ms} ms, which is no window size ({e}); set [topology] window"
                ),
            },
        };
        let index = self.index.read().expect("verdict index lock");
        if index.waiting_for.as_deref() != Some(waiting.as_str()) {
            tracing::info!(waiting_for = %waiting, "not evaluating yet");
        }
        plan.waiting_for = Some(Some(waiting));
        Ok(None)
    }

    /// Plans the cycle into `plan`; `None`: nothing judged (the window size is not
    /// known yet).
    async fn cycle_inner(
        &mut self,
        now: i64,
        plan: &mut IndexPlan,
    ) -> Result<Option<CycleStats>, StoreError> {
        let Some(topo) = self.known_topology(plan).await? else {
            return Ok(None);
        };
        let window_ms = topo.window.as_millis();
        let horizon_start = topo
            .window
            .window_of(now.saturating_sub(self.horizon_ms))
            .start_ms;
        let range_end = now + window_ms;
        self.keep_proofs(horizon_start).await?;
        let forget_after_ms = topo.forget_after_ms;
        self.refused_evidence
            .retain(|_, received| now.saturating_sub(*received) <= forget_after_ms);
        if self.refused_evidence.len() > REFUSED_EVIDENCE_LIMIT {
            self.refused_evidence.clear();
        }

        // Every topic's auditors, also of idle topics (no windows to judge), so that
        // an auditor that stops reporting is flagged even when its topic is quiet.
        // Within the forget horizon only, in SQL: forgotten rows cannot fill the read.
        // The last cycle's rows go first: two reads' worth at once is serve's memory.
        self.progress = Arc::new(HashMap::new());
        let crate::reads::TopicProgress {
            rows: all_progress,
            capped: progress_capped,
        } = crate::reads::progress(&self.store, None, &topo, now).await?;
        // A capped read judges nothing (topics are read per page instead): not kept.
        let progress = if progress_capped {
            drop(all_progress);
            HashMap::new()
        } else {
            crate::reads::by_topic(all_progress)
        };
        // Auditor status from one row per auditor, not from the per-partition rows
        // above: those are capped, and a capped read must not freeze stall alerts.
        let mut auditors = BTreeMap::new();
        let reports = self
            .store
            .auditor_reports_since(crate::reads::forget_since(&topo, now), AUDITOR_LIMIT)
            .await?;
        let auditors_capped = reports.len() >= AUDITOR_LIMIT as usize;
        if auditors_capped {
            tracing::warn!(limit = AUDITOR_LIMIT, "more auditors than one read holds: stall alerts of those left out are neither raised nor resolved");
        }
        // Replication evidence is not an auditor (its upstream auditors' own progress
        // says whether they stalled): its age is one series per replicator and
        // datacenter, not a stalled auditor per topic.
        let mut evidence: BTreeMap<(String, String), i64> = BTreeMap::new();
        for (topic, tier, datacenter, last_report) in reports {
            // An auditor silent for `forget_after` (deleted or no longer audited
            // topic) is no longer expected.
            if now.saturating_sub(last_report) > topo.forget_after_ms {
                continue;
            }
            if common::replication::is_evidence_tier(&tier) {
                if topo
                    .edges
                    .iter()
                    .any(|e| e.evidence_tier.as_deref() == Some(tier.as_str()))
                {
                    let newest = evidence.entry((tier, datacenter)).or_insert(last_report);
                    *newest = (*newest).max(last_report);
                }
                continue;
            }
            let a = engine::AuditorStatus {
                stalled: now.saturating_sub(last_report) > topo.stall_after_ms,
                tier,
                datacenter,
                last_report,
                stalled_instances: Vec::new(),
                stalled_partitions: Vec::new(),
            };
            auditors.insert((topic, a.tier.clone(), a.datacenter.clone()), a);
        }
        // With every partition row at hand, judge stall per partition and instance
        // (one stuck instance is stalled while the others report); a capped read keeps
        // the per-auditor answer above for what it could not see.
        if !progress_capped {
            auditors.retain(|(topic, _, _), _| progress.contains_key(topic));
            for (topic, p) in &progress {
                for a in engine::auditor_status(&topo, p, now) {
                    auditors.insert((topic.clone(), a.tier.clone(), a.datacenter.clone()), a);
                }
            }
        }
        self.update_auditor_metrics(&auditors, auditors_capped);
        let evidence = engine::evidence_status(evidence, now, topo.stall_after_ms);
        self.update_evidence_age_metrics(&evidence, auditors_capped);
        plan.evidence = Some(evidence);
        plan.auditors = Some((auditors, auditors_capped));
        let progress = Arc::new(progress);
        self.progress = progress.clone();
        self.progress_capped = progress_capped;
        // Staged, not yet rolled-up increments: read after the progress and before the
        // window rows (the read order of `crate::judging`).
        let staged = crate::judging::staged_by_topic(&self.store, horizon_start, i64::MAX).await?;

        plan.horizon_start = Some(horizon_start);
        let mut pass = self.pass(&topo, &staged, now);
        pass.mismatches
            .retain(|_, m| m.window_start >= horizon_start);
        match (self.last_cycle, self.loaded_from) {
            (Some(last), Some(loaded_from)) => {
                let from_window = horizon_start.max(loaded_from);
                // Windows whose settle time (end + grace) passed since the last cycle,
                // and the newer ones: every topic at once, with bulk reads.
                let span_from = last
                    .saturating_sub(window_ms + self.max_grace_ms() + LATE_MARGIN_MS)
                    .max(from_window);
                self.load_range(&mut pass, TimeRange::new(span_from, range_end), plan)
                    .await?;
                // Older windows with late increments or waiting for an auditor: per topic;
                // when their read was capped, all of them (see `incremental_work`).
                // Those whose proof was withdrawn are among them: judged by this cycle,
                // they leave `rejudge` when it is published.
                plan.rejudged = self
                    .index
                    .read()
                    .expect("verdict index lock")
                    .rejudge
                    .clone();
                let work = match self.incremental_work(last, from_window, span_from).await? {
                    Some(work) => work,
                    None => {
                        self.load_range(&mut pass, TimeRange::new(from_window, span_from), plan)
                            .await?;
                        BTreeMap::new()
                    }
                };
                for (topic, windows) in work {
                    let (Some(&a), Some(&b)) = (windows.first(), windows.last()) else {
                        continue;
                    };
                    let rows = self
                        .store
                        .topic_windows(&topic, TimeRange::new(a, b + 1))
                        .await?;
                    let cut = crate::reads::rows_cut(&rows);
                    let windows: Vec<i64> = windows.into_iter().collect();
                    self.judge_topic(&mut pass, &topic, Some(windows), &rows, (cut, b + 1), plan)
                        .await?;
                }
            }
            // The first cycle (cold start): the recent windows only, every topic at
            // once; the older ones of the horizon are judged by `load_step`s.
            _ => {
                let span = RECENT_SPAN_MS.max(window_ms + self.max_grace_ms() + LATE_MARGIN_MS);
                let from = topo
                    .window
                    .window_of(now.saturating_sub(span))
                    .start_ms
                    .max(horizon_start);
                self.load_range(&mut pass, TimeRange::new(from, range_end), plan)
                    .await?;
                self.loaded_from = Some(from);
                self.load_started = now;
            }
        }
        let Pass {
            mismatches, stats, ..
        } = pass;
        self.metrics.evaluated_windows.inc_by(stats.windows as u64);
        plan.topics_gone = self.drop_topics_before(horizon_start);

        self.update_mismatch_metrics(&mismatches);
        plan.evaluated_at = Some(now);
        plan.window_mismatches = Some(mismatches);
        self.windows_loaded += stats.windows as u64;
        plan.loading = Some(self.loading_of(horizon_start));
        self.last_cycle = Some(now);
        Ok(Some(stats))
    }

    /// Publishes what a cycle or load step planned (see [`IndexPlan`]).
    fn publish(&self, plan: IndexPlan) {
        self.index.write().expect("verdict index lock").apply(plan);
    }

    /// One step of the cold start: judges the next older part of the horizon not judged
    /// yet (`LOAD_STEP_MS` of windows, every topic). Returns whether the whole horizon
    /// is judged (`true` before the first cycle too: nothing is loading then).
    pub async fn load_step(&mut self, now: i64) -> Result<bool, StoreError> {
        let (Some(loaded_from), Some(topo)) = (self.loaded_from, self.topology.get()) else {
            return Ok(true);
        };
        let horizon_start = self.index.read().expect("verdict index lock").horizon_start;
        if loaded_from <= horizon_start {
            self.publish(IndexPlan {
                loading: Some(self.loading_of(horizon_start)),
                ..IndexPlan::default()
            });
            return Ok(true);
        }
        let from = topo
            .window
            .window_of(loaded_from.saturating_sub(LOAD_STEP_MS))
            .start_ms
            .max(horizon_start);
        let started = Instant::now();
        // Progress of the last cycle (read before these window rows), then staged
        // increments, then window rows: the read order of `crate::judging`.
        let staged = crate::judging::staged_by_topic(&self.store, from, loaded_from).await?;
        let mut pass = self.pass(&topo, &staged, now);
        let mut plan = IndexPlan::default();
        let result = self
            .load_range(&mut pass, TimeRange::new(from, loaded_from), &mut plan)
            .await;
        let Pass {
            mismatches, stats, ..
        } = pass;
        self.update_mismatch_metrics(&mismatches);
        plan.window_mismatches = Some(mismatches);
        if result.is_ok() {
            self.loaded_from = Some(from);
            self.windows_loaded += stats.windows as u64;
            plan.loading = Some(self.loading_of(horizon_start));
        }
        plan.proven_at = now;
        self.save_proofs(&plan.proven, now).await;
        self.publish(plan);
        result?;
        self.metrics.evaluated_windows.inc_by(stats.windows as u64);
        tracing::debug!(from, to = loaded_from, windows = stats.windows, topics = stats.topics,
            elapsed = ?started.elapsed(), "cold start: load step");
        let done = from <= horizon_start;
        if done {
            // The anomaly gauges walk the whole index: set once the load is done (and by
            // every cycle meanwhile), not after every step (a walk of a growing index per
            // step made the load quadratic).
            self.update_anomaly_metrics();
            tracing::info!(
                windows = self.windows_loaded,
                elapsed_ms = common::now_ms().saturating_sub(self.load_started),
                "cold start: the whole horizon is evaluated"
            );
        }
        Ok(done)
    }

    /// Whether windows of the horizon are still to be judged for the first time.
    pub fn loading(&self) -> bool {
        self.index
            .read()
            .expect("verdict index lock")
            .loading
            .is_some()
    }

    /// The index's `loading` from how far the load has come.
    fn loading_of(&self, horizon_start: i64) -> Option<Loading> {
        match self.loaded_from {
            Some(from) if from > horizon_start => Some(Loading {
                loaded_from: from,
                windows_evaluated: self.windows_loaded,
                started_at: self.load_started,
            }),
            _ => None,
        }
    }
}
