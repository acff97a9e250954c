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
//! are published with the bound they are judged from.
//! Measured on 6 M window rows (bench/web-anomalies.sh), the full first evaluation
//! took ~75 s, nearly all of it the two queries per topic over the whole horizon
//! (~20 ms for the window rows and ~70 ms for the bucket join, of 6 048 rows each,
//! times 1 000 topics).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Bound;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use audit_lib::WindowSize;
use store::{AuditStore, Store, StoreError, TimeRange};

use crate::engine::topology::TopologyCell;
use crate::engine::{self, EdgeWindow, ProgressRow, Topology, Verdict, WindowRow};
use crate::metrics::{AuditorLabels, EdgeLabels, KindLabels, Metrics, TierLabels, TopicKindLabels};

/// Where a verdict of the index belongs; ordered by window start first, so a range of
/// windows is a range of keys.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VerdictKey {
    pub window_start: i64,
    pub topic: String,
    pub upstream: String,
    pub downstream: String,
    pub datacenter: String,
}

impl VerdictKey {
    /// The smallest key of `topic`'s window `window_start` (`None`: of any topic).
    fn first_of(window_start: i64, topic: Option<&str>) -> VerdictKey {
        VerdictKey {
            window_start,
            topic: topic.unwrap_or_default().to_string(),
            ..VerdictKey::default()
        }
    }
}

pub fn key_of(e: &EdgeWindow) -> VerdictKey {
    VerdictKey {
        window_start: e.window_start,
        topic: e.topic.clone(),
        upstream: e.upstream.clone(),
        downstream: e.downstream.clone(),
        datacenter: e.datacenter.clone(),
    }
}

/// Stored windows of one tier and datacenter whose length is not the topology's
/// window: that tier's auditors count in another window size than web judges in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowMismatch {
    /// A topic where it was seen (the most recent window).
    pub topic: String,
    /// The length of its stored windows (ms).
    pub window_ms: i64,
    /// Start of the most recent such window.
    pub window_start: i64,
}

/// Verdicts of the horizon other than `ok`, by window start.
#[derive(Debug, Default)]
pub struct VerdictIndex {
    pub entries: BTreeMap<VerdictKey, EdgeWindow>,
    pub topics: BTreeSet<String>,
    /// Every auditor that reported progress, by (topic, tier, datacenter).
    pub auditors: BTreeMap<(String, String, String), engine::AuditorStatus>,
    /// The read of auditors was capped (more than `AUDITOR_LIMIT`): `auditors` lacks
    /// some, whose alerts are then neither resolved nor expired.
    pub auditors_capped: bool,
    /// Windows starting before this are not judged.
    pub horizon_start: i64,
    /// When the last successful cycle ran (epoch ms); `None` before the first.
    pub evaluated_at: Option<i64>,
    /// By (tier, datacenter): stored windows in the horizon whose length is not the
    /// topology's window (a misconfigured auditor); `/readyz` lists them.
    pub window_mismatches: BTreeMap<(String, String), WindowMismatch>,
    /// Why nothing is judged yet, when `[topology] window` is not set and the window
    /// size is not learned yet (no window stored); `/readyz` says it.
    pub waiting_for: Option<String>,
    /// Set while the windows of the horizon before [`Loading::loaded_from`] are not
    /// judged yet (cold start: the first cycle judges the recent windows, load steps
    /// the older ones, newest first). `None` once the whole horizon is judged.
    pub loading: Option<Loading>,
    /// Most entries kept (`serve.max_verdicts`; 0: no bound).
    pub max_entries: usize,
    /// The first and last window start of verdicts not kept because the index was
    /// full: absent from the index, they would read as `ok`, so the API answers 503
    /// for ranges that meet them until they leave the horizon.
    pub dropped: Option<(i64, i64)>,
}

/// What a cold start has judged so far; `/readyz` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loading {
    /// Windows starting at or after this are judged; older ones of the horizon not yet.
    pub loaded_from: i64,
    /// Window starts (per topic) judged since the start.
    pub windows_evaluated: u64,
    /// When the first cycle ran (epoch ms).
    pub started_at: i64,
}

impl VerdictIndex {
    /// Anomalous verdicts in the index.
    pub fn anomaly_count(&self) -> usize {
        self.entries
            .values()
            .filter(|e| e.verdict.is_anomaly())
            .count()
    }
}

/// What one cycle (or load step) changes in the index, planned from what it read and
/// published under one write lock ([`VerdictIndex::apply`]): readers see the index of
/// the last complete cycle or of this one, never one part-way through its reads.
#[derive(Debug, Default)]
pub(crate) struct IndexPlan {
    /// `Some(why)` while nothing can be judged, `Some(None)` once it can.
    waiting_for: Option<Option<String>>,
    /// Every auditor and whether their read was capped.
    auditors: Option<(BTreeMap<AuditorKey, engine::AuditorStatus>, bool)>,
    /// The new horizon: verdicts of windows before it are dropped.
    horizon_start: Option<i64>,
    /// Per topic judged, the verdicts other than `ok` of every window judged (an empty
    /// list: all `ok`), in the order they were judged.
    windows: Vec<(String, BTreeMap<i64, Vec<EdgeWindow>>)>,
    /// Topics with no window left in the horizon.
    topics_gone: Vec<String>,
    window_mismatches: Option<BTreeMap<(String, String), WindowMismatch>>,
    evaluated_at: Option<i64>,
    loading: Option<Option<Loading>>,
}

impl VerdictIndex {
    /// Publishes `plan`: the one place the evaluator writes the index.
    fn apply(&mut self, plan: IndexPlan) {
        if let Some(waiting_for) = plan.waiting_for {
            self.waiting_for = waiting_for;
        }
        if let Some((auditors, capped)) = plan.auditors {
            self.auditors = auditors;
            self.auditors_capped = capped;
        }
        if let Some(start) = plan.horizon_start {
            self.horizon_start = start;
            self.drop_before(start);
        }
        for (topic, by_window) in plan.windows {
            for (w, vs) in by_window {
                self.replace(&topic, w, vs);
            }
            self.topics.insert(topic);
        }
        for topic in &plan.topics_gone {
            self.topics.remove(topic);
        }
        if let Some(m) = plan.window_mismatches {
            self.window_mismatches = m;
        }
        if let Some(at) = plan.evaluated_at {
            self.evaluated_at = Some(at);
        }
        if let Some(loading) = plan.loading {
            self.loading = loading;
        }
    }

    /// Replaces every verdict of `topic`'s window `window_start`.
    fn replace(&mut self, topic: &str, window_start: i64, verdicts: Vec<EdgeWindow>) {
        let lo = VerdictKey::first_of(window_start, Some(topic));
        let stale: Vec<VerdictKey> = self
            .entries
            .range((Bound::Included(lo), Bound::Unbounded))
            .take_while(|(k, _)| k.window_start == window_start && k.topic == topic)
            .map(|(k, _)| k.clone())
            .collect();
        for k in stale {
            self.entries.remove(&k);
        }
        for v in verdicts {
            if v.verdict == Verdict::Ok {
                continue;
            }
            if self.max_entries > 0 && self.entries.len() >= self.max_entries {
                let (lo, hi) = self.dropped.unwrap_or((v.window_start, v.window_start));
                if self.dropped.is_none() {
                    tracing::error!(
                        max_verdicts = self.max_entries,
                        topic,
                        "the verdict index is full (serve.max_verdicts): verdicts are no longer kept, and the API answers 503 for the windows concerned until they leave the horizon"
                    );
                }
                self.dropped = Some((lo.min(v.window_start), hi.max(v.window_start)));
                continue;
            }
            self.entries.insert(key_of(&v), v);
        }
    }

    fn drop_before(&mut self, start: i64) {
        let keep = self.entries.split_off(&VerdictKey::first_of(start, None));
        self.entries = keep;
        self.dropped = match self.dropped {
            Some((_, hi)) if hi < start => None,
            Some((lo, hi)) => Some((lo.max(start), hi)),
            None => None,
        };
    }

    /// Whether verdicts of windows in `[from, to)` were not kept (the index was full).
    pub fn dropped_within(&self, from: i64, to: i64) -> Option<(i64, i64)> {
        self.dropped.filter(|&(lo, hi)| lo < to && hi >= from)
    }

    /// Verdicts whose window starts in `[from, to)`.
    pub fn in_range(&self, from: i64, to: i64) -> impl Iterator<Item = &EdgeWindow> {
        let lo = VerdictKey::first_of(from, None);
        self.entries
            .range((Bound::Included(lo), Bound::Unbounded))
            .take_while(move |(k, _)| k.window_start < to)
            .map(|(_, v)| v)
    }
}

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

/// Records in `mismatches` the rows of `topic` whose window is not `window_ms` long,
/// with a log line the first time a tier and datacenter is seen to mismatch.
fn note_window_mismatches(
    mismatches: &mut BTreeMap<(String, String), WindowMismatch>,
    topic: &str,
    rows: &[store::WindowRow],
    window_ms: i64,
) {
    for r in rows {
        let length = r.window_end_ms.saturating_sub(r.window_start_ms);
        if length == window_ms {
            continue;
        }
        let m = WindowMismatch {
            topic: topic.to_string(),
            window_ms: length,
            window_start: r.window_start_ms,
        };
        match mismatches.entry((r.tier.clone(), r.datacenter.clone())) {
            std::collections::btree_map::Entry::Vacant(v) => {
                tracing::error!(
                    tier = %r.tier,
                    datacenter = %r.datacenter,
                    topic,
                    stored_window_ms = length,
                    topology_window_ms = window_ms,
                    "window size mismatch: this tier's auditors count in windows of another size than serve judges in ([topology] window, or learned from the newest stored window); its verdicts are wrong until every auditor's audit.event_time.window_size agrees"
                );
                v.insert(m);
            }
            std::collections::btree_map::Entry::Occupied(mut o) => {
                if o.get().window_start <= m.window_start {
                    o.insert(m);
                }
            }
        }
    }
}

type AuditorKey = (String, String, String);

/// Most auditors (topic × tier × datacenter) read per cycle.
const AUDITOR_LIMIT: u32 = store::MAX_READ_ROWS as u32;

impl Evaluator {
    pub fn new(
        store: Store,
        topology: Arc<TopologyCell>,
        index: Arc<RwLock<VerdictIndex>>,
        metrics: Arc<Metrics>,
        horizon_ms: i64,
    ) -> Self {
        Self {
            store,
            topology,
            index,
            metrics,
            horizon_ms,
            last_cycle: None,
            gauge_windows: HashMap::new(),
            newest_window: HashMap::new(),
            anomalous_topics: BTreeSet::new(),
            auditor_series: HashSet::new(),
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
        }
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
        for (topic, tier, datacenter, last_report) in reports {
            // An auditor silent for `forget_after` (deleted or no longer audited
            // topic) is no longer expected.
            if now.saturating_sub(last_report) > topo.forget_after_ms {
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
        plan.auditors = Some((auditors, auditors_capped));
        let progress = Arc::new(progress);
        self.progress = progress.clone();
        self.progress_capped = progress_capped;
        // Staged, not yet rolled-up increments: read after the progress and before the
        // window rows (see `AuditStore::staged_windows`).
        let staged = self.staged_from(horizon_start, i64::MAX).await?;

        plan.horizon_start = Some(horizon_start);
        let mut mismatches = self
            .index
            .read()
            .expect("verdict index lock")
            .window_mismatches
            .clone();
        mismatches.retain(|_, m| m.window_start >= horizon_start);
        let mut stats = CycleStats::default();
        match (self.last_cycle, self.loaded_from) {
            (Some(last), Some(loaded_from)) => {
                let from_window = horizon_start.max(loaded_from);
                // Windows whose settle time (end + grace) passed since the last cycle,
                // and the newer ones: every topic at once, with bulk reads.
                let span_from = last
                    .saturating_sub(window_ms + self.max_grace_ms() + LATE_MARGIN_MS)
                    .max(from_window);
                self.load_range(
                    &topo,
                    TimeRange::new(span_from, range_end),
                    &staged,
                    now,
                    &mut mismatches,
                    &mut stats,
                    plan,
                )
                .await?;
                // Older windows with late increments or waiting for an auditor: per topic;
                // when their read was capped, all of them (see `incremental_work`).
                let work = match self.incremental_work(last, from_window, span_from).await? {
                    Some(work) => work,
                    None => {
                        self.load_range(
                            &topo,
                            TimeRange::new(from_window, span_from),
                            &staged,
                            now,
                            &mut mismatches,
                            &mut stats,
                            plan,
                        )
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
                    self.judge_topic(
                        &topo,
                        &topic,
                        Some(windows),
                        &rows,
                        (cut, b + 1),
                        &staged,
                        now,
                        &mut mismatches,
                        &mut stats,
                        plan,
                    )
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
                self.load_range(
                    &topo,
                    TimeRange::new(from, range_end),
                    &staged,
                    now,
                    &mut mismatches,
                    &mut stats,
                    plan,
                )
                .await?;
                self.loaded_from = Some(from);
                self.load_started = now;
            }
        }
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
        // increments, then window rows, as a cycle reads them.
        let staged = self.staged_from(from, loaded_from).await?;
        let mut mismatches = self
            .index
            .read()
            .expect("verdict index lock")
            .window_mismatches
            .clone();
        let mut stats = CycleStats::default();
        let mut plan = IndexPlan::default();
        let result = self
            .load_range(
                &topo,
                TimeRange::new(from, loaded_from),
                &staged,
                now,
                &mut mismatches,
                &mut stats,
                &mut plan,
            )
            .await;
        self.update_mismatch_metrics(&mismatches);
        plan.window_mismatches = Some(mismatches);
        if result.is_ok() {
            self.loaded_from = Some(from);
            self.windows_loaded += stats.windows as u64;
            plan.loading = Some(self.loading_of(horizon_start));
        }
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

    /// Staged increments by topic whose window starts in `[from, to)`.
    async fn staged_from(
        &self,
        from: i64,
        to: i64,
    ) -> Result<HashMap<String, engine::Staged>, StoreError> {
        let mut staged: HashMap<String, engine::Staged> = HashMap::new();
        for (topic, tier, dc, w) in self.store.staged_windows(None, from).await? {
            if w < to {
                staged.entry(topic).or_default().insert((tier, dc, w));
            }
        }
        Ok(staged)
    }

    /// Topic → windows older than `span_from` (and from `from_window` on) a cycle after
    /// the first re-judges: those with late increments and those waiting for an auditor;
    /// `None` when the read of late windows reached its cap.
    async fn incremental_work(
        &self,
        last: i64,
        from_window: i64,
        span_from: i64,
    ) -> Result<Option<BTreeMap<String, BTreeSet<i64>>>, StoreError> {
        // Windows that received late increments. A read cut at its cap returned some
        // in no order: judging only those would leave a late loss out for good (its
        // key is not read again), so the caller judges every older window instead.
        let mut keys = self
            .store
            .changed_windows(last - LATE_MARGIN_MS, from_window, KEY_LIMIT)
            .await?;
        if keys.len() >= KEY_LIMIT as usize {
            tracing::warn!(
                limit = KEY_LIMIT,
                "more windows with late increments than one read holds (a flood of new topics?): every older window of the horizon is judged again"
            );
            return Ok(None);
        }
        // Windows waiting for an auditor, or for the downstream's evidence (pending,
        // stalled, or delayed while settling: issue 24).
        {
            let index = self.index.read().expect("verdict index lock");
            keys.extend(
                index
                    .entries
                    .values()
                    .filter(|e| e.lifecycle != engine::Lifecycle::Final)
                    .map(|e| (e.topic.clone(), e.window_start)),
            );
        }
        let mut work: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
        for (t, w) in keys {
            // Windows not loaded yet are judged by the load step that reaches them;
            // those from `span_from` on were just judged.
            if w >= from_window && w < span_from {
                work.entry(t).or_default().insert(w);
            }
        }
        Ok(Some(work))
    }

    /// Judges every window with rows in `range`, all topics, reading them in pages of
    /// topics (a few bulk reads instead of two queries per topic).
    #[allow(clippy::too_many_arguments)]
    async fn load_range(
        &mut self,
        topo: &Topology,
        range: TimeRange,
        staged: &HashMap<String, engine::Staged>,
        now: i64,
        mismatches: &mut BTreeMap<(String, String), WindowMismatch>,
        stats: &mut CycleStats,
        plan: &mut IndexPlan,
    ) -> Result<(), StoreError> {
        let store = self.store.clone();
        let fetch = move |after: Option<String>, limit: u32| {
            let store = store.clone();
            tokio::spawn(
                async move { store.windows_in_range(range, after.as_deref(), limit).await },
            )
        };
        // `requested`: the `after_topic` of the page in flight.
        let mut requested: Option<String> = None;
        let mut next = Some(fetch(None, self.page_topics));
        while let Some(read) = next.take() {
            let page = read.await.expect("a page read does not panic")?;
            // A capped page may have cut a topic short: read fewer topics at a time.
            if page.rows.len() >= store::MAX_READ_ROWS && self.page_topics > 1 {
                self.page_topics = (self.page_topics / 2).max(1);
                next = Some(fetch(requested.clone(), self.page_topics));
                continue;
            }
            // One topic alone fills a read: its windows from the last row's start on
            // may be cut short, and are not judged (see `reads`).
            let cut =
                crate::reads::rows_cut(&page.rows).zip(page.rows.last().map(|r| r.topic.clone()));
            let rows_read = page.rows.len();
            let topics = page
                .rows
                .windows(2)
                .filter(|p| p[0].topic != p[1].topic)
                .count()
                + usize::from(!page.rows.is_empty());
            if let Some(per_topic) = rows_read.checked_div(topics) {
                self.page_topics = (PAGE_ROWS / per_topic.max(1)).clamp(1, 10_000) as u32;
            }
            // The next page is read while this one is judged.
            requested = page.next_after_topic;
            if let Some(after) = &requested {
                next = Some(fetch(Some(after.clone()), self.page_topics));
            }
            // The read of every topic's progress was capped: read this page's topics'
            // progress in one read (a read per topic was one query per topic judged).
            self.page_progress = None;
            if let (true, Some(first), Some(last)) =
                (self.progress_capped, page.rows.first(), page.rows.last())
            {
                self.page_progress = Some(Arc::new(
                    crate::reads::PageProgress::read(
                        &self.store,
                        &first.topic,
                        &last.topic,
                        topo,
                        now,
                    )
                    .await?,
                ));
            }
            // Rows come by topic: each topic's run is judged in place (no copy).
            let mut rest = page.rows.as_slice();
            while let Some(first) = rest.first() {
                let n = rest.partition_point(|r| r.topic == first.topic);
                let (group, next) = rest.split_at(n);
                rest = next;
                let topic_cut = cut
                    .as_ref()
                    .filter(|(_, t)| *t == first.topic)
                    .map(|(w, _)| *w);
                self.judge_topic(
                    topo,
                    &first.topic,
                    None,
                    group,
                    (topic_cut, range.end_ms),
                    staged,
                    now,
                    mismatches,
                    stats,
                    plan,
                )
                .await?;
            }
        }
        // Only for the page it was read for.
        self.page_progress = None;
        Ok(())
    }

    /// Judges `windows` of `topic` (`None`: every window `rows` has that is aligned on
    /// the topology's window) from its `rows` and puts the verdicts into the index.
    /// `read`: where the read of `rows` was cut (see `reads::rows_cut`) and the end of
    /// its range: windows from the cut on are answered `pending`, never judged from a
    /// part of their rows.
    #[allow(clippy::too_many_arguments)]
    async fn judge_topic(
        &mut self,
        topo: &Topology,
        topic: &str,
        windows: Option<Vec<i64>>,
        rows: &[WindowRow],
        read: (Option<i64>, i64),
        staged: &HashMap<String, engine::Staged>,
        now: i64,
        mismatches: &mut BTreeMap<(String, String), WindowMismatch>,
        stats: &mut CycleStats,
        plan: &mut IndexPlan,
    ) -> Result<(), StoreError> {
        let (cut, range_end) = read;
        note_window_mismatches(mismatches, topic, rows, topo.window.as_millis());
        let aligned = |w: &i64| topo.window.window_of(*w).start_ms == *w;
        let mut windows: Vec<i64> = match windows {
            Some(mut ws) => {
                ws.retain(aligned);
                ws
            }
            None => {
                // Rows come by window start: sorting them is one pass.
                let mut ws: Vec<i64> = rows
                    .iter()
                    .map(|r| r.window_start_ms)
                    .filter(aligned)
                    .collect();
                ws.sort_unstable();
                ws.dedup();
                ws
            }
        };
        let fetched;
        let progress = self.progress.clone();
        let page = self.page_progress.clone();
        let (p, progress_capped): (&[ProgressRow], bool) = match progress.get(topic) {
            Some(p) if !self.progress_capped => (p, false),
            // The read of every topic's progress was capped: this page's read, when
            // it holds the topic whole (a topic of no rows there has none)...
            _ if self.progress_capped => match page.as_deref().filter(|pg| pg.holds(topic)) {
                Some(page) => (page.rows_of(topic), false),
                // ... else this topic's own (a missing auditor would look stalled),
                // itself bounded.
                None => {
                    fetched = crate::reads::progress(&self.store, Some(topic), topo, now).await?;
                    (&fetched.rows, fetched.capped)
                }
            },
            _ => (&[], false),
        };
        let unread = crate::reads::Unread::of(rows, cut, progress_capped);
        let not_read = unread.windows_not_read(topo, range_end);
        if !not_read.is_empty() && windows.is_empty() {
            windows = not_read.clone();
        } else if !not_read.is_empty() {
            windows.extend(&not_read);
            windows.sort_unstable();
            windows.dedup();
        }
        let rows = crate::reads::of_window(rows, topo);
        let no_staged = engine::Staged::new();
        let staged = staged.get(topic).unwrap_or(&no_staged);
        let mut verdicts = topo.evaluate_topic_staged(topic, &windows, &rows, p, staged, now);
        if !unread.is_empty() {
            unread.add_unjudged(topo, topic, &not_read, &rows, p, staged, now, &mut verdicts);
            unread.hold(topo, &mut verdicts);
        }
        stats.windows += windows.len();
        stats.topics += 1;
        self.apply(topic, &windows, verdicts, plan);
        Ok(())
    }

    /// Sets the anomaly gauges (per kind, per topic and kind) from the index; returns
    /// the number of anomalies.
    fn update_anomaly_metrics(&mut self) -> usize {
        let index = self.index.read().expect("verdict index lock");
        let mut by_kind: BTreeMap<Verdict, i64> = BTreeMap::new();
        let mut by_topic: HashMap<(&str, Verdict), i64> = HashMap::new();
        for e in index.entries.values() {
            *by_kind.entry(e.verdict).or_default() += 1;
            *by_topic.entry((e.topic.as_str(), e.verdict)).or_default() += 1;
        }
        // Series for the topics with an anomaly, and those that had one (set to 0 once
        // it resolved, rather than keeping their last value) while their topic is in
        // the horizon: not for every topic, whose names are data (a flood of new
        // topics would be five series each).
        self.anomalous_topics.retain(|t| index.topics.contains(t));
        for &(topic, v) in by_topic.keys() {
            if v.is_anomaly() && !self.anomalous_topics.contains(topic) {
                self.anomalous_topics.insert(topic.to_string());
            }
        }
        for topic in &self.anomalous_topics {
            for v in Verdict::ALL.into_iter().filter(|v| v.is_anomaly()) {
                let n = by_topic.get(&(topic.as_str(), v)).copied().unwrap_or(0);
                self.metrics
                    .topic_anomalies
                    .get_or_create(&TopicKindLabels {
                        topic: topic.into(),
                        kind: v.as_str().into(),
                    })
                    .set(n);
            }
        }
        drop(by_topic);
        drop(index);
        let mut anomalies = 0;
        for v in Verdict::ALL.into_iter().filter(|v| v.is_anomaly()) {
            let n = by_kind.get(&v).copied().unwrap_or(0);
            self.metrics
                .anomalies
                .get_or_create(&KindLabels {
                    kind: v.as_str().into(),
                })
                .set(n);
            anomalies += n as usize;
        }
        anomalies
    }

    /// One `window_size_mismatch` series per (tier, datacenter) with mismatched
    /// windows in the horizon; series of the previous cycle that are gone are removed.
    fn update_mismatch_metrics(&mut self, mismatches: &BTreeMap<(String, String), WindowMismatch>) {
        let now: HashSet<TierLabels> = mismatches
            .iter()
            .map(|((tier, datacenter), m)| {
                let labels = TierLabels {
                    tier: tier.as_str().into(),
                    datacenter: datacenter.as_str().into(),
                };
                self.metrics
                    .window_size_mismatch
                    .get_or_create(&labels)
                    .set(m.window_ms);
                labels
            })
            .collect();
        for gone in self.mismatch_series.difference(&now) {
            self.metrics.window_size_mismatch.remove(gone);
        }
        self.mismatch_series = now;
    }

    /// Forgets topics with no window in the horizon: out of `/topics`, and their
    /// anomaly and completeness series removed.
    fn drop_topics_before(&mut self, horizon_start: i64) -> Vec<String> {
        let gone: Vec<String> = self
            .newest_window
            .iter()
            .filter(|(_, w)| **w < horizon_start)
            .map(|(t, _)| t.clone())
            .collect();
        if gone.is_empty() {
            return gone;
        }
        for topic in &gone {
            self.newest_window.remove(topic);
            for v in Verdict::ALL.into_iter().filter(|v| v.is_anomaly()) {
                self.metrics.topic_anomalies.remove(&TopicKindLabels {
                    topic: topic.into(),
                    kind: v.as_str().into(),
                });
            }
        }
        let names: std::collections::HashSet<&str> = gone.iter().map(String::as_str).collect();
        self.gauge_windows.retain(|labels, _| {
            let keep = !names.contains(labels.topic.as_str());
            if !keep {
                self.metrics.completeness.remove(labels);
                self.metrics.completeness_window.remove(labels);
            }
            keep
        });
        gone
    }

    /// Plans the verdicts of one topic's windows into `plan`.
    fn apply(
        &mut self,
        topic: &str,
        windows: &[i64],
        verdicts: Vec<EdgeWindow>,
        plan: &mut IndexPlan,
    ) {
        let newest = self
            .newest_window
            .entry(topic.to_string())
            .or_insert(i64::MIN);
        *newest = (*newest).max(windows.iter().copied().max().unwrap_or(i64::MIN));
        let mut by_window: BTreeMap<i64, Vec<EdgeWindow>> =
            windows.iter().map(|w| (*w, Vec::new())).collect();
        for v in &verdicts {
            if v.lifecycle == engine::Lifecycle::Final {
                self.update_completeness(v);
            }
        }
        // Only this evaluator writes the index: it holds the previous verdicts.
        let index = self.index.read().expect("verdict index lock");
        for v in verdicts {
            if v.verdict.is_anomaly() {
                let known = index
                    .entries
                    .get(&key_of(&v))
                    .is_some_and(|old| old.verdict == v.verdict);
                if !known {
                    self.metrics
                        .anomalies_detected
                        .get_or_create(&KindLabels {
                            kind: v.verdict.as_str().into(),
                        })
                        .inc();
                }
            }
            // A window's entry is kept even when all `ok`: it clears the old verdicts.
            let judged = by_window.entry(v.window_start).or_default();
            if v.verdict != Verdict::Ok {
                judged.push(v);
            }
        }
        drop(index);
        plan.windows.push((topic.to_string(), by_window));
    }

    fn update_completeness(&mut self, v: &EdgeWindow) {
        let labels = EdgeLabels {
            topic: (&v.topic).into(),
            upstream: (&v.upstream).into(),
            downstream: (&v.downstream).into(),
            datacenter: (&v.datacenter).into(),
        };
        let newest = self.gauge_windows.get(&labels).copied().unwrap_or(i64::MIN);
        if v.window_start >= newest {
            // Completeness is undefined when only downstream saw data: report the
            // surplus ratio as +Inf so a `< 1` rule does not fire and a `> 1` one does.
            let c = v.completeness.unwrap_or(f64::INFINITY);
            self.metrics.completeness.get_or_create(&labels).set(c);
            self.metrics
                .completeness_window
                .get_or_create(&labels)
                .set(v.window_start);
            self.gauge_windows.insert(labels, v.window_start);
        }
    }

    /// Sets `auditor_stalled` for every auditor and removes the series of auditors
    /// whose progress rows are gone.
    /// After a capped read (`capped`) the series of auditors it left out stay: their
    /// auditors were not judged, so their last value is still the best known.
    fn update_auditor_metrics(
        &mut self,
        auditors: &BTreeMap<AuditorKey, engine::AuditorStatus>,
        capped: bool,
    ) {
        let mut seen = HashSet::with_capacity(auditors.len());
        for ((topic, tier, datacenter), st) in auditors {
            let labels = AuditorLabels {
                topic: topic.into(),
                tier: tier.into(),
                datacenter: datacenter.into(),
            };
            self.metrics
                .auditor_stalled
                .get_or_create(&labels)
                .set(i64::from(st.stalled));
            seen.insert(labels);
        }
        if capped {
            self.auditor_series.extend(seen);
            return;
        }
        for gone in self.auditor_series.difference(&seen) {
            self.metrics.auditor_stalled.remove(gone);
        }
        self.auditor_series = seen;
    }
}
