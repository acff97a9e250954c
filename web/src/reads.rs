//! Bounded reads, and the verdicts they cannot support. Every read of the store is
//! capped (`store::MAX_READ_ROWS` rows, `store::MAX_BUCKET_ROWS` latency buckets), so
//! that no data, forged or not, can exhaust serve's memory. A capped read is never
//! judged as if it were the whole truth: what it could not return ([`Unread`]) turns
//! the verdicts it could change into `pending`, with the reason, so that nothing
//! reads as `ok`, `complete` or "never reported progress" for lack of rows.
//!
//! - Window rows come ordered by window start: when a read returns the cap's worth,
//!   every window before the last row's start was read whole, that one and later ones
//!   perhaps not ([`Unread::rows_from`]).
//! - Progress is read within serve's forget horizon (in SQL, before the bound), so
//!   forgotten rows cannot push the others out; a topic whose progress still exceeds
//!   the cap has no final window ([`Unread::progress`]).
//! - A window whose latency buckets were past the bucket cap has an empty histogram
//!   standing for an unknown one: it cannot be `ok` where a latency objective applies
//!   ([`Unread::latency`]).
//! - Rows whose window is not the topology's (another size, or not aligned on it) are
//!   not judged at all ([`of_window`]); the evaluator reports them as a mismatch.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};

use store::{Store, StoreError, VerdictReads, MAX_BUCKET_ROWS, MAX_READ_ROWS};

use crate::engine::{
    EdgeWindow, Lifecycle, ProgressRow, TopicInputs, Topology, Verdict, WindowRow,
};

/// Latest progress of one topic within the forget horizon.
#[derive(Debug, Default, Clone)]
pub struct TopicProgress {
    pub rows: Vec<ProgressRow>,
    /// More rows than one read holds: the engine must not judge from these.
    pub capped: bool,
}

/// The start of serve's forget horizon at `now`: progress received before it is no
/// longer expected (`[topology] forget_after`).
pub fn forget_since(topo: &Topology, now: i64) -> i64 {
    now.saturating_sub(topo.forget_after_ms)
}

/// Progress of `topic` (every topic: `None`) received within the forget horizon.
pub async fn progress(
    store: &Store,
    topic: Option<&str>,
    topo: &Topology,
    now: i64,
) -> Result<TopicProgress, StoreError> {
    let mut rows = store
        .progress_since(topic, forget_since(topo, now), MAX_READ_ROWS as u32 + 1)
        .await?;
    let capped = rows.len() > MAX_READ_ROWS;
    if capped {
        rows.truncate(MAX_READ_ROWS);
        tracing::warn!(
            topic = topic.unwrap_or("*"),
            cap = MAX_READ_ROWS,
            "progress read reached its cap: the windows it covers are not judged"
        );
    }
    Ok(TopicProgress { rows, capped })
}

/// `rows` (ordered by topic) grouped by topic, without copying them.
pub fn by_topic(rows: Vec<ProgressRow>) -> HashMap<String, Vec<ProgressRow>> {
    let mut by_topic: HashMap<String, Vec<ProgressRow>> = HashMap::new();
    for p in rows {
        match by_topic.get_mut(&p.topic) {
            Some(v) => v.push(p),
            None => {
                by_topic.insert(p.topic.clone(), vec![p]);
            }
        }
    }
    by_topic
}

/// Progress of the topics from `first` to `last` (a page the evaluator judges), read
/// at once when the read of every topic's progress was capped (a read per topic was
/// one query per topic judged).
#[derive(Debug)]
pub struct PageProgress {
    first: String,
    last: String,
    /// The topic from which on the read was cut: it and the later ones need a read of
    /// their own; the topics before it were read whole.
    cut: Option<String>,
    by_topic: HashMap<String, Vec<ProgressRow>>,
}

impl PageProgress {
    pub async fn read(
        store: &Store,
        first: &str,
        last: &str,
        topo: &Topology,
        now: i64,
    ) -> Result<PageProgress, StoreError> {
        let mut rows = store
            .progress_of_topics(
                first,
                last,
                forget_since(topo, now),
                MAX_READ_ROWS as u32 + 1,
            )
            .await?;
        let cut = (rows.len() > MAX_READ_ROWS).then(|| rows[MAX_READ_ROWS - 1].topic.clone());
        if let Some(cut) = &cut {
            rows.truncate(rows.partition_point(|p| p.topic < *cut));
        }
        Ok(PageProgress {
            first: first.to_string(),
            last: last.to_string(),
            cut,
            by_topic: by_topic(rows),
        })
    }

    /// Whether the read holds every row of `topic`'s progress: `topic` is in the
    /// page's range, before the cut.
    pub fn holds(&self, topic: &str) -> bool {
        self.first.as_str() <= topic
            && topic <= self.last.as_str()
            && self.cut.as_deref().is_none_or(|c| topic < c)
    }

    /// The progress of `topic` (none: no rows), when [`PageProgress::holds`] it.
    pub fn rows_of(&self, topic: &str) -> &[ProgressRow] {
        self.by_topic.get(topic).map_or(&[], Vec::as_slice)
    }
}

/// The rows of `rows` whose window is the topology's (its size, aligned on it); the
/// slice itself when all are.
pub fn of_window<'r>(rows: &'r [WindowRow], topo: &Topology) -> Cow<'r, [WindowRow]> {
    let fits = |r: &WindowRow| {
        r.window_end_ms.saturating_sub(r.window_start_ms) == topo.window.as_millis()
            && topo.window.window_of(r.window_start_ms).start_ms == r.window_start_ms
    };
    if rows.iter().all(fits) {
        Cow::Borrowed(rows)
    } else {
        Cow::Owned(rows.iter().filter(|r| fits(r)).cloned().collect())
    }
}

/// The start of the first window a read of `rows` (ordered by window start, from a
/// read bounded to [`MAX_READ_ROWS`]) may not have returned whole.
pub fn rows_cut(rows: &[WindowRow]) -> Option<i64> {
    (rows.len() >= MAX_READ_ROWS)
        .then(|| rows.last().map(|r| r.window_start_ms))
        .flatten()
}

/// What the reads behind one topic's verdicts could not return.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Unread {
    /// Windows starting at or after this may lack rows (the row cap was reached).
    pub rows_from: Option<i64>,
    /// The topic's progress exceeded the read's cap.
    pub progress: bool,
    /// (tier, datacenter, window start) of rows read without their latency.
    pub latency: BTreeSet<(String, String, i64)>,
}

impl Unread {
    /// What a read of `rows` left out: windows from `rows_from` on (see [`rows_cut`]),
    /// the latency of some rows, and the topic's progress when `progress_capped`.
    pub fn of(rows: &[WindowRow], rows_from: Option<i64>, progress_capped: bool) -> Unread {
        Unread {
            rows_from,
            progress: progress_capped,
            latency: rows
                .iter()
                .filter(|r| r.latency_unread)
                .map(|r| (r.tier.clone(), r.datacenter.clone(), r.window_start_ms))
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rows_from.is_none() && !self.progress && self.latency.is_empty()
    }

    /// Window starts of `[rows_from, end)` (aligned), the ones a capped read may have
    /// returned no row of: they must be answered `pending`, not left out (left out
    /// reads as `ok`).
    pub fn windows_not_read(&self, topo: &Topology, end: i64) -> Vec<i64> {
        match self.rows_from {
            Some(from) if from < end => topo
                .window
                .windows_between(from, end)
                .map(|w| w.start_ms)
                .collect(),
            _ => Vec::new(),
        }
    }

    /// `pending` verdicts for the windows of `windows` that have none in `verdicts`,
    /// one per edge and downstream datacenter the topic has rows or progress in (a
    /// mapped edge: its mapping's): a window the read did not reach is not judged,
    /// which must show.
    pub fn add_unjudged(
        &self,
        topo: &Topology,
        inputs: &TopicInputs,
        windows: &[i64],
        verdicts: &mut Vec<EdgeWindow>,
    ) {
        let judged: BTreeSet<i64> = verdicts.iter().map(|v| v.window_start).collect();
        let missing: Vec<i64> = windows
            .iter()
            .copied()
            .filter(|w| !judged.contains(w))
            .collect();
        if missing.is_empty() {
            return;
        }
        let mut seen: BTreeSet<&str> = inputs.rows.iter().map(|r| r.datacenter.as_str()).collect();
        seen.extend(inputs.progress.iter().map(|p| p.datacenter.as_str()));
        for edge in &topo.edges {
            let dcs: BTreeSet<&str> = if edge.is_one_to_one() {
                seen.clone()
            } else {
                edge.datacenters.values().map(String::as_str).collect()
            };
            for dc in dcs {
                verdicts.extend(topo.evaluate_edge_datacenter(inputs, edge, dc, &missing));
            }
        }
    }

    /// Turns the verdicts the unread part could change into `pending` with the reason.
    pub fn hold(&self, topo: &Topology, verdicts: &mut [EdgeWindow]) {
        if self.is_empty() {
            return;
        }
        for v in verdicts.iter_mut() {
            if let Some(reason) = self.reason(topo, v) {
                if v.lifecycle == Lifecycle::Open {
                    continue;
                }
                v.lifecycle = Lifecycle::Settling;
                v.verdict = Verdict::Pending;
                v.reason = reason;
            }
        }
    }

    fn reason(&self, topo: &Topology, v: &EdgeWindow) -> Option<String> {
        if self.progress {
            return Some(format!(
                "not judged: the auditors' progress of this topic exceeds the read's cap of {MAX_READ_ROWS} rows (far more tiers, datacenters or partitions than a deployment has: see the collector's rejects)"
            ));
        }
        if self.rows_from.is_some_and(|from| v.window_start >= from) {
            return Some(format!(
                "not judged: the read of this topic's windows reached its cap of {MAX_READ_ROWS} rows before this window (far more tiers and datacenters than a deployment has: see the collector's rejects)"
            ));
        }
        // Only a verdict a latency could change: `ok` where the downstream tier has an
        // objective (counts are read whole; a loss stays a loss).
        let objective = topo
            .tier(&v.downstream)
            .is_some_and(|t| t.latency_p99_objective.is_some());
        let unread =
            self.latency
                .contains(&(v.downstream.clone(), v.datacenter.clone(), v.window_start));
        (objective && unread && v.verdict == Verdict::Ok).then(|| {
            format!(
                "not judged: this window's latency buckets were past the read's cap of {MAX_BUCKET_ROWS} rows, so a delay cannot be ruled out"
            )
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::engine::TopologyConfig;

    pub(crate) const MIN: i64 = 60_000;
    pub(crate) const W: i64 = 1_764_410_400_000; // a window start, multiple of 10 min
    pub(crate) const NOW: i64 = W + 40 * MIN; // past the end, the 20 min grace and caught up

    /// producer → regional, regional with a latency objective, 10-minute windows.
    fn topology() -> Topology {
        let cfg: TopologyConfig = toml::from_str(
            r#"
            window = "10m"
            tiers = [
              { name = "producer", progress = false },
              { name = "regional", latency_p99_objective = "1m" },
            ]
            [[edges]]
            upstream = "producer"
            downstream = "regional"
            "#,
        )
        .unwrap();
        Topology::new(cfg).unwrap()
    }

    /// `count` records of `orders` at `tier`/dc1 in window `W`, with one latency
    /// sample unless its buckets were `latency_unread`.
    pub(crate) fn row(tier: &str, count: u64, latency_unread: bool) -> WindowRow {
        let mut latency = audit_lib::LatencyHistogram::new();
        if !latency_unread {
            latency.record(100);
        }
        WindowRow {
            topic: "orders".into(),
            tier: tier.into(),
            datacenter: "dc1".into(),
            window_start_ms: W,
            window_end_ms: W + 10 * MIN,
            count,
            bytes: 0,
            no_time_count: 0,
            malformed_count: 0,
            out_of_bounds_count: 0,
            observation_time_count: 0,
            delivery_failed_count: 0,
            checksum: 0,
            latency,
            increments: 1,
            first_received_at_ms: 0,
            last_received_at_ms: 0,
            latency_unread,
            max_observed_at_ms: None,
            record_times: vec![],
            max_offsets: vec![],
        }
    }

    /// The regional/dc1 auditor has read `orders` past `W`'s end + grace, at lag 0.
    pub(crate) fn caught_up() -> Vec<ProgressRow> {
        vec![ProgressRow {
            topic: "orders".into(),
            tier: "regional".into(),
            datacenter: "dc1".into(),
            partition: 0,
            host: "regional-dc1-0".into(),
            next_offset: 0,
            record_time_ms: Some(W + 35 * MIN),
            lag: Some(0),
            emitted_at_ms: NOW,
            received_at_ms: NOW,
            max_record_time_ms: Some(W + 35 * MIN),
            log_append_time: false,
        }]
    }

    /// (verdict, lifecycle, reason) of the window, judged as the evaluator, `/compare`
    /// and the gate do: the rows' [`Unread`] holds what it could change.
    fn judged(regional: u64, latency_unread: bool) -> (Verdict, Lifecycle, String) {
        let topo = topology();
        let rows = vec![
            row("producer", 1_000, false),
            row("regional", regional, latency_unread),
        ];
        let progress = caught_up();
        let mut verdicts = topo.evaluate_topic("orders", &[W], &rows, &progress, NOW);
        Unread::of(&rows, None, false).hold(&topo, &mut verdicts);
        assert_eq!(verdicts.len(), 1, "{verdicts:?}");
        let v = verdicts.remove(0);
        (v.verdict, v.lifecycle, v.reason)
    }

    /// Security review 2, finding 7: a window whose latency buckets were past the
    /// bucket cap (`MAX_BUCKET_ROWS`) came back with an empty histogram and was judged
    /// `ok` where a latency objective applies, hiding a `delayed`. It is `pending` with
    /// the reason; the same window read whole is `ok`; a loss stays a loss.
    #[test]
    fn a_window_without_its_latency_is_pending_where_an_objective_applies() {
        assert_eq!(
            judged(1_000, false),
            (Verdict::Ok, Lifecycle::Final, judged(1_000, false).2)
        );
        let (verdict, lifecycle, reason) = judged(1_000, true);
        assert_eq!(
            (verdict, lifecycle),
            (Verdict::Pending, Lifecycle::Settling),
            "{reason}"
        );
        assert!(
            reason.contains("latency buckets were past the read's cap"),
            "{reason}"
        );
        assert_eq!(judged(963, true).0, Verdict::Loss);
    }
}
