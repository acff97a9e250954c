//! The verdict index that `/anomalies`, `/topics`, the metrics and the alerts read,
//! and the plan a cycle publishes into it at once ([`IndexPlan`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;

use crate::engine::{self, EdgeWindow, Verdict};

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

/// A loss proven before its window was final, as the index holds it: the proof (the
/// verdict's reason when it was proven: the shortfall, the replicator's position and
/// when it was read) and when it was proven (epoch ms; the ledger's `proven_at_ms`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proof {
    pub reason: String,
    pub proven_at: i64,
}

impl std::fmt::Display for Proof {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
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
    /// Replication evidence by (evidence tier, upstream datacenter), for the tiers an
    /// edge names (docs/web.md, Alerts): one entry per replicator, whatever its topics.
    pub evidence: BTreeMap<(String, String), engine::EvidenceStatus>,
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
    /// Windows whose loss the replicator's evidence proved before they were final, with
    /// the proof's reason: a proven loss stays the verdict whatever the counts do later
    /// (docs/design.md §6, the proven-loss hold: [`crate::judging::hold_proven_loss`]).
    /// Windows of the horizon, as many as `max_entries` at most.
    pub proven: HashMap<VerdictKey, Proof>,
    /// Proofs an operator withdrew (`DELETE .../proof`), with who and why:
    /// an open alert of such a window resolves with it, and a proof of it read from the
    /// ledger by a cold start that raced the withdrawal is not kept. Windows of the
    /// horizon; a new proof of the window replaces it.
    pub withdrawn: HashMap<VerdictKey, String>,
    /// (topic, window start) of the windows the next cycle judges again whatever their
    /// lifecycle (a proof of them was withdrawn): final windows are otherwise judged
    /// again only when increments arrive.
    pub rejudge: BTreeSet<(String, i64)>,
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
    pub(super) waiting_for: Option<Option<String>>,
    /// Every auditor and whether their read was capped.
    pub(super) auditors: Option<(BTreeMap<AuditorKey, engine::AuditorStatus>, bool)>,
    /// Every replicator's evidence (read with the auditors).
    pub(super) evidence: Option<BTreeMap<(String, String), engine::EvidenceStatus>>,
    /// The new horizon: verdicts of windows before it are dropped.
    pub(super) horizon_start: Option<i64>,
    /// Per topic judged, the verdicts other than `ok` of every window judged (an empty
    /// list: all `ok`), in the order they were judged.
    pub(super) windows: Vec<(String, BTreeMap<i64, Vec<EdgeWindow>>)>,
    /// Topics with no window left in the horizon.
    pub(super) topics_gone: Vec<String>,
    pub(super) window_mismatches: Option<BTreeMap<(String, String), WindowMismatch>>,
    pub(super) evaluated_at: Option<i64>,
    pub(super) loading: Option<Option<Loading>>,
    /// Losses proven for the first time.
    pub(super) proven: Vec<(VerdictKey, String)>,
    /// When they were proven (the cycle's time).
    pub(super) proven_at: i64,
    /// The windows of [`VerdictIndex::rejudge`] this cycle judged again.
    pub(super) rejudged: BTreeSet<(String, i64)>,
}

impl VerdictIndex {
    /// Publishes `plan`: the one place the evaluator writes the index.
    pub(super) fn apply(&mut self, plan: IndexPlan) {
        if let Some(waiting_for) = plan.waiting_for {
            self.waiting_for = waiting_for;
        }
        if let Some((auditors, capped)) = plan.auditors {
            self.auditors = auditors;
            self.auditors_capped = capped;
        }
        if let Some(evidence) = plan.evidence {
            self.evidence = evidence;
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
        for (key, reason) in plan.proven {
            if self.max_entries == 0 || self.proven.len() < self.max_entries {
                self.withdrawn.remove(&key);
                self.proven.entry(key).or_insert(Proof {
                    reason,
                    proven_at: plan.proven_at,
                });
            }
        }
        for w in &plan.rejudged {
            self.rejudge.remove(w);
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

    /// Withdraws the proof of `key`: the window is judged again by the next
    /// cycle, and an alert open on it resolves with `note` (who withdrew it and why)
    /// when the counts no longer say loss. The proof it held, if any.
    pub fn withdraw(&mut self, key: &VerdictKey, note: String) -> Option<Proof> {
        let proof = self.proven.remove(key);
        self.rejudge.insert((key.topic.clone(), key.window_start));
        self.withdrawn.insert(key.clone(), note);
        proof
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
        self.proven.retain(|k, _| k.window_start >= start);
        self.withdrawn.retain(|k, _| k.window_start >= start);
        self.rejudge.retain(|(_, w)| *w >= start);
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

/// Records in `mismatches` the rows of `topic` whose window is not `window_ms` long,
/// with a log line the first time a tier and datacenter is seen to mismatch.
pub(super) fn note_window_mismatches(
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

pub(super) type AuditorKey = (String, String, String);
