//! The detection engine: pure functions from stored window rows and auditor progress
//! to a verdict per topic, edge, downstream datacenter and window. No I/O, no clock:
//! `now` is an argument, so every rule is table-tested (see `tests.rs`).
//!
//! Rules, in order, for a window `[start, end)` on an edge:
//! 1. `now < end` → lifecycle `open`, verdict `pending`.
//! 2. `now < end + grace` → `settling`, `pending` (late data is still expected).
//! 3. Each auditor involved (downstream tier in the downstream datacenter, upstream tier
//!    in each mapped datacenter; only tiers that report progress) must have read every
//!    partition past `end + grace`: its last record time is at or after it (with a
//!    known lag: not the first reports of an auditor that started late), or it
//!    reported lag 0 at or after it, dated by the auditor's `emitted_at` and never
//!    later than the collector received it. If one has not: `stalled` when a partition
//!    that holds it back was last reported longer than `stall_after` ago (per
//!    partition and instance, not the freshest partition), else `pending` — a lagging
//!    auditor never produces a false `loss`.
//!    On a many-to-one edge, an upstream datacenter with neither progress for the
//!    topic nor rows in the window does not carry the topic: it contributes 0 and does
//!    not block. Progress older than `forget_after` is forgotten (a deleted topic stops
//!    being expected).
//! 4. The downstream auditor must have read what the upstream counted (issue 24): for
//!    every partition the upstream counted the window in, a record after the
//!    upstream's latest record time there (over the mapped datacenters), or one at it
//!    and the clock past it + grace; where record times cannot be compared
//!    (LogAppendTime downstream, an auditor without the field, `preserves_partitions =
//!    false`, an upstream that knows no partitions), read past the upstream's latest
//!    time + grace. Lag 0 alone is not evidence. Until then `pending` ("in flight");
//!    a downstream that has read all it has (lag 0 measured past the upstream's time +
//!    grace) without those records is `delayed`, still settling — never a loss. No
//!    upstream record time known (older emitters): this rule does not apply.
//! 5. Increments of the window at an involved tier and datacenter that the store has
//!    received but not yet added up (PostgreSQL's staged roll-up) → `pending`.
//! 6. Otherwise the window is `final` and counts are compared: `loss` / `duplication`
//!    when the difference exceeds both thresholds, `mismatch` when the counts are equal
//!    but the multiset checksums differ (loss masked by duplication, or altered data),
//!    `delayed` when the downstream tier's p99 latency exceeds its objective, else `ok`.
//!
//! Late data is just more increments in the same rows: evaluating again after it
//! arrived yields the new verdict (a `loss` becomes `ok`), which is how alerts resolve;
//! late upstream data raises the upstream's record time, so rule 4 puts its window back
//! to settling until the downstream has read past it.

pub mod topology;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use audit_lib::LatencyHistogram;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub use topology::{Edge, Policy, Thresholds, Topology, TopologyConfig, TopologyError};

/// Stored statistics of one (topic, tier, datacenter, window), as the store reads
/// them: the engine judges the store's rows as they are.
pub use store::WindowRow;

/// Latency summary of one tier in one window.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Percentiles {
    pub count: u64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: u64,
}

/// p50, p95 and p99 of `h` (audit-lib's quantiles: within 1 % of the latency of rank
/// `floor(q * (n - 1))`), never above the largest latency seen, which a bucket's
/// midpoint may overshoot. `None` for an empty histogram.
pub fn percentiles(h: &LatencyHistogram) -> Option<Percentiles> {
    let max_ms = h.max_ms();
    // One pass over the buckets for the three (the cold start computes this for every
    // edge window of the horizon).
    let [p50, p95, p99] = h
        .quantiles([0.50, 0.95, 0.99])
        .map(|v| v.map(|v| v.min(max_ms as f64)));
    Some(Percentiles {
        count: h.count(),
        p50_ms: p50?,
        p95_ms: p95?,
        p99_ms: p99?,
        max_ms: max_ms.max(0) as u64,
    })
}

/// Latest progress of one partition as reported by the auditor of one tier in one
/// datacenter, as the store reads it. `received_at_ms` (the collector's clock) dates
/// staleness; `emitted_at_ms` (the auditor's clock) is what "lag 0" is true as of.
pub use store::ProgressRow;

/// Window starts per (tier, datacenter) with increments the store holds but has not
/// yet added to its window rows (PostgreSQL stages increments and rolls them up
/// later). Such a window's counts are not the answer yet.
pub type Staged = BTreeSet<(String, String, i64)>;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    Pending,
    Delayed,
    Duplication,
    Mismatch,
    Stalled,
    Loss,
}

impl Verdict {
    pub const ALL: [Verdict; 7] = [
        Verdict::Ok,
        Verdict::Pending,
        Verdict::Delayed,
        Verdict::Duplication,
        Verdict::Mismatch,
        Verdict::Stalled,
        Verdict::Loss,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Pending => "pending",
            Verdict::Delayed => "delayed",
            Verdict::Duplication => "duplication",
            Verdict::Mismatch => "mismatch",
            Verdict::Stalled => "stalled",
            Verdict::Loss => "loss",
        }
    }

    pub fn parse(s: &str) -> Option<Verdict> {
        Verdict::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// Verdicts that are anomalies (alerted on, listed by `/anomalies`).
    pub fn is_anomaly(self) -> bool {
        !matches!(self, Verdict::Ok | Verdict::Pending)
    }

    /// Severity order for "worst verdict" summaries (the enum order: the worst last).
    pub fn severity(self) -> u8 {
        self as u8
    }

    /// How on-call is told: the severity order in three steps (a worse verdict is
    /// never less urgent).
    pub fn urgency(self) -> Urgency {
        match self {
            Verdict::Loss | Verdict::Mismatch | Verdict::Stalled => Urgency::Page,
            Verdict::Duplication => Urgency::Warning,
            Verdict::Ok | Verdict::Pending | Verdict::Delayed => Urgency::Notice,
        }
    }
}

/// Steps of [`Verdict::severity`] for alerting, the least urgent first: a page
/// (`error` in the payloads) for data lost, altered or unaudited, warnings otherwise;
/// alerts are delivered the most urgent first under a rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Urgency {
    Notice,
    Warning,
    Page,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Lifecycle {
    Open,
    Settling,
    Final,
}

impl Lifecycle {
    /// As the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Open => "open",
            Lifecycle::Settling => "settling",
            Lifecycle::Final => "final",
        }
    }
}

/// What the downstream auditor was asked to show before the window could be final
/// (docs/web.md, Verdicts, rule 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Evidence {
    /// No upstream record time is known (emitters older than issue 24, or none
    /// counted): the window end + grace alone, as before.
    WindowEnd,
    /// In every partition the upstream counted the window in, the downstream read a
    /// record at or after the upstream's latest record time there.
    RecordTime,
    /// The downstream's record times cannot be compared with the upstream's (its
    /// records carry LogAppendTime, its auditor reports no latest record time, the edge
    /// does not preserve partitions, or the upstream knows no partitions): it must
    /// have read past the upstream's latest time plus the grace period, on the
    /// partitions concerned. Slower, and a paused replicator is a loss after grace.
    Clock,
}

/// The comparison of one edge, downstream datacenter and window.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct EdgeWindow {
    pub topic: String,
    pub upstream: String,
    pub downstream: String,
    /// Downstream datacenter.
    pub datacenter: String,
    pub upstream_datacenters: Vec<String>,
    pub window_start: i64,
    pub window_end: i64,
    pub expected: u64,
    pub observed: u64,
    /// observed − expected.
    pub difference: i64,
    /// observed / expected; 1 when both are 0; null when only downstream saw data.
    #[schema(required = true)]
    pub completeness: Option<f64>,
    pub checksums_match: bool,
    pub lifecycle: Lifecycle,
    pub verdict: Verdict,
    /// Why the verdict is what it is, for people.
    pub reason: String,
    /// How the downstream was judged to have read what the upstream counted.
    pub evidence: Evidence,
    #[schema(required = true)]
    pub upstream_latency: Option<Percentiles>,
    #[schema(required = true)]
    pub downstream_latency: Option<Percentiles>,
    /// Shown, not judged: upstream messages with no tier-invariant time (no usable
    /// field, header or record timestamp), windowed by the auditors' observation time
    /// and kept out of `expected` and the checksum.
    pub upstream_observation_time_count: u64,
    /// The same downstream, kept out of `observed`.
    pub downstream_observation_time_count: u64,
    /// Shown, not judged: upstream messages whose producer was told their delivery
    /// failed (a producer tier's known loss, kept out of `expected`). A `loss` verdict
    /// is the silent loss, which no producer was told about.
    pub upstream_delivery_failed_count: u64,
}

/// State of the auditor of one tier in one datacenter for one topic.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditorStatus {
    pub tier: String,
    pub datacenter: String,
    /// Latest report of any partition.
    pub last_report: i64,
    /// Some partition has not been reported for longer than `stall_after`.
    pub stalled: bool,
    /// Instances (hosts) that last reported a partition that is now stale.
    pub stalled_instances: Vec<String>,
    /// Partitions not reported for longer than `stall_after`.
    pub stalled_partitions: Vec<i32>,
}

#[derive(Default)]
struct Side {
    count: u64,
    observation_time_count: u64,
    delivery_failed_count: u64,
    checksum: u64,
    latency: LatencyHistogram,
}

impl Side {
    fn add(&mut self, row: &WindowRow) {
        // Stored counts fit in i64; a sum of many could still overflow.
        self.count = self.count.saturating_add(row.count);
        self.observation_time_count = self
            .observation_time_count
            .saturating_add(row.observation_time_count);
        self.delivery_failed_count = self
            .delivery_failed_count
            .saturating_add(row.delivery_failed_count);
        self.checksum = self.checksum.wrapping_add(row.checksum);
        self.latency.merge(&row.latency);
    }
}

struct Part<'a> {
    partition: i32,
    record_time: Option<i64>,
    lag: Option<i64>,
    reported_at: i64,
    emitted_at: i64,
    host: &'a str,
    /// The latest record time read (`None`: an auditor older than issue 24).
    max_record_time: Option<i64>,
    log_append_time: bool,
}

impl Part<'_> {
    /// Read past `t`: a record at or after it was consumed and the lag is known, or
    /// lag 0 was measured at or after it.
    ///
    /// A record time counts only with a known lag: an auditor that starts late (or
    /// restarts) reports before librdkafka has fetched the high watermark (lag null),
    /// in the middle of its backlog, and the CreateTime of the last record it read
    /// says nothing about the records it has not read yet.
    ///
    /// Lag 0 is dated by the auditor's `emitted_at` (a report delivered late, after an
    /// audit-topic or database backlog, says nothing about data written between its
    /// measurement and its delivery), and never later than the collector received it
    /// (an auditor clock running ahead cannot date it into the future):
    /// `received − emitted ≥ 0` is enforced by taking the minimum.
    fn read_past(&self, t: i64) -> bool {
        (self.lag.is_some() && self.record_time.is_some_and(|r| r >= t))
            || (self.lag == Some(0) && self.measured_at() >= t)
    }

    /// As of when its lag holds: `emitted_at`, never later than it was received.
    fn measured_at(&self) -> i64 {
        self.emitted_at.min(self.reported_at)
    }

    /// Whether the partition's record times can be compared with an upstream's: they
    /// are the CreateTime a replicator preserves, and the auditor reports the latest.
    fn comparable(&self) -> bool {
        !self.log_append_time && self.max_record_time.is_some()
    }

    /// The latest record time read (the watermark is never later, but an auditor
    /// older than issue 24 reports only that).
    fn latest(&self) -> Option<i64> {
        self.max_record_time.max(self.record_time)
    }

    /// How far, in record time, the partition is read with respect to `x`. Within a
    /// partition records are read in offset order; this takes the record times to
    /// follow it (docs/web.md). (A known lag is rule 3's: every partition judged here
    /// has one.)
    fn reading(&self, x: i64) -> Reading {
        match self.latest() {
            Some(m) if m > x => Reading::Past,
            Some(m) if m == x => Reading::At,
            _ => Reading::Before,
        }
    }
}

/// Where a downstream partition is read with respect to an upstream record time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// A record after it was read: every record up to it is.
    Past,
    /// A record at it (the same millisecond): more of that millisecond may follow,
    /// appended after the auditor measured its lag (a lag 0 from the statistics before
    /// the copies came says nothing of them). Settled by the clock.
    At,
    /// Not read up to it.
    Before,
}

struct Auditor<'a> {
    last_report: i64,
    partitions: Vec<Part<'a>>,
}

impl<'a> Auditor<'a> {
    /// Partition `p`'s progress (partitions are sorted by number).
    fn part(&self, p: i32) -> Option<&Part<'a>> {
        self.partitions
            .binary_search_by_key(&p, |x| x.partition)
            .ok()
            .map(|i| &self.partitions[i])
    }

    /// The partition holding the auditor back from `t` whose last report is the
    /// oldest: a stuck instance or partition is stalled even while the others report.
    fn oldest_behind(&self, t: i64) -> Option<&Part<'_>> {
        self.partitions
            .iter()
            .filter(|p| !p.read_past(t))
            .min_by_key(|p| p.reported_at)
        // (An auditor exists only with at least one partition, so `None` means every
        // partition is read past `t`.)
    }
}

/// `topic`'s rows by window start.
fn rows_by_window<'r>(topic: &str, rows: &'r [WindowRow]) -> BTreeMap<i64, Vec<&'r WindowRow>> {
    let mut by_window: BTreeMap<i64, Vec<&WindowRow>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.topic == topic) {
        by_window.entry(r.window_start_ms).or_default().push(r);
    }
    by_window
}

/// Progress by (tier, datacenter); partitions not reported for longer than
/// `forget_after` are dropped (their topic was deleted or is no longer audited).
fn auditors<'a>(
    progress: &'a [ProgressRow],
    now: i64,
    forget_after_ms: i64,
) -> BTreeMap<(&'a str, &'a str), Auditor<'a>> {
    let mut map: BTreeMap<(&str, &str), Auditor> = BTreeMap::new();
    for p in progress {
        if now.saturating_sub(p.received_at_ms) > forget_after_ms {
            continue;
        }
        let a = map
            .entry((p.tier.as_str(), p.datacenter.as_str()))
            .or_insert(Auditor {
                last_report: i64::MIN,
                partitions: Vec::new(),
            });
        a.last_report = a.last_report.max(p.received_at_ms);
        a.partitions.push(Part {
            partition: p.partition,
            record_time: p.record_time_ms,
            lag: p.lag,
            reported_at: p.received_at_ms,
            emitted_at: p.emitted_at_ms,
            host: &p.host,
            max_record_time: p.max_record_time_ms,
            log_append_time: p.log_append_time,
        });
    }
    for a in map.values_mut() {
        a.partitions.sort_by_key(|p| p.partition);
    }
    map
}

/// Status of every auditor that reported progress for a topic.
pub fn auditor_status(
    topology: &Topology,
    progress: &[ProgressRow],
    now: i64,
) -> Vec<AuditorStatus> {
    auditors(progress, now, topology.forget_after_ms)
        .into_iter()
        .map(|((tier, dc), a)| {
            let stale: Vec<&Part> = a
                .partitions
                .iter()
                .filter(|p| now.saturating_sub(p.reported_at) > topology.stall_after_ms)
                .collect();
            let instances: BTreeSet<String> = stale.iter().map(|p| p.host.to_string()).collect();
            AuditorStatus {
                tier: tier.to_string(),
                datacenter: dc.to_string(),
                last_report: a.last_report,
                stalled: !stale.is_empty(),
                stalled_instances: instances.into_iter().collect(),
                stalled_partitions: stale.iter().map(|p| p.partition).collect(),
            }
        })
        .collect()
}

/// Latency percentiles per tier (all datacenters merged) for the given rows.
pub fn tier_latency(rows: &[WindowRow]) -> BTreeMap<String, Percentiles> {
    let mut merged: BTreeMap<&str, LatencyHistogram> = BTreeMap::new();
    for r in rows {
        merged.entry(r.tier.as_str()).or_default().merge(&r.latency);
    }
    merged
        .into_iter()
        .filter_map(|(t, h)| Some((t.to_string(), percentiles(&h)?)))
        .collect()
}

/// What the upstream counted in one window, as evidence the downstream must have read
/// past (docs/web.md, Verdicts, rule 4).
#[derive(Debug, Default)]
struct UpstreamEvidence {
    /// Partition → the latest record time counted there (over the mapped upstream
    /// datacenters): the downstream must have read up to it in that partition.
    partitions: BTreeMap<i32, i64>,
    /// The latest time counted where no partition is known (a producer counting
    /// before delivery, offset tracking off, a capped read) or the edge does not
    /// preserve partitions: every downstream partition must have read past it + grace.
    anywhere: Option<i64>,
}

impl UpstreamEvidence {
    fn of(edge: &Edge, up_dcs: &[String], rows: &[&WindowRow]) -> UpstreamEvidence {
        let mut e = UpstreamEvidence::default();
        for r in rows
            .iter()
            .filter(|r| r.tier == edge.upstream && up_dcs.contains(&r.datacenter))
        {
            if r.record_times.is_empty() {
                e.anywhere = e.anywhere.max(r.max_observed_at_ms);
            }
            for &(p, t) in &r.record_times {
                let x = e.partitions.entry(p).or_insert(t);
                *x = (*x).max(t);
            }
        }
        if !edge.preserves_partitions {
            let latest = e.partitions.values().copied().max();
            e.anywhere = e.anywhere.max(latest);
            e.partitions.clear();
        }
        e
    }

    fn is_empty(&self) -> bool {
        self.partitions.is_empty() && self.anywhere.is_none()
    }
}

/// Why the downstream has not shown its evidence yet: the partitions behind, by how
/// bad it is.
#[derive(Default)]
struct Behind {
    /// Overdue, read all it has (or reports no such partition) past the upstream's
    /// time plus grace: (partition, (latest record time read, the upstream's), or None
    /// for a partition it does not report).
    overdue: Vec<(i32, Option<(i64, i64)>)>,
    /// A partition that holds it back and was last reported longer than
    /// `stall_after` ago: (partition, instance).
    stalled: Option<(i32, String)>,
    /// Not there yet, within its time.
    pending: Option<String>,
}

fn seconds(ms: i64) -> i64 {
    ms.saturating_add(999) / 1000
}

/// A record time for people: RFC 3339 with milliseconds (epoch ms if out of range).
fn at(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}

impl Behind {
    fn missing(&mut self, p: i32, x: i64, overdue: bool) {
        if overdue {
            self.overdue.push((p, None));
        } else {
            self.pending.get_or_insert_with(|| {
                format!("no progress for partition {p} yet, where the upstream counted this window up to record time {}", at(x))
            });
        }
    }

    fn stale(&mut self, part: &Part, now: i64, stall_after_ms: i64) -> bool {
        let stale = now.saturating_sub(part.reported_at) > stall_after_ms;
        if stale && self.stalled.is_none() {
            self.stalled = Some((part.partition, part.host.to_string()));
        }
        stale
    }

    fn by_record_time(
        &mut self,
        part: &Part,
        x: i64,
        overdue: bool,
        now: i64,
        stall_after_ms: i64,
    ) {
        let latest = part.latest().unwrap_or(i64::MIN);
        if overdue {
            self.overdue.push((part.partition, Some((latest, x))));
        } else if !self.stale(part, now, stall_after_ms) {
            self.pending.get_or_insert_with(|| match part.lag {
                _ if latest == x => format!(
                    "partition {} is read up to the upstream's latest record time of this window ({}); records of the same millisecond may follow until it is read past it, or grace has passed",
                    part.partition,
                    at(x)
                ),
                Some(0) => format!(
                    "in flight: partition {} is read to its end, up to record time {}; the upstream's records of this window there reach {} ({} s more)",
                    part.partition,
                    at(latest),
                    at(x),
                    seconds(x.saturating_sub(latest))
                ),
                _ => format!(
                    "partition {} is read up to record time {} (lag {}); the upstream's records of this window there reach {}",
                    part.partition,
                    at(latest),
                    part.lag.map_or("unknown".into(), |l| l.to_string()),
                    at(x)
                ),
            });
        }
    }

    fn by_clock(&mut self, part: &Part, now: i64, stall_after_ms: i64) {
        if !self.stale(part, now, stall_after_ms) {
            self.pending.get_or_insert_with(|| {
                format!(
                    "partition {} is not read past the upstream's latest time of this window + grace yet",
                    part.partition
                )
            });
        }
    }

    /// Overdue (`delayed`, paged) before stalled (the auditor's own alert covers it)
    /// before pending.
    fn verdict(self, tier: &str, dc: &str) -> Option<(Verdict, String)> {
        if let Some(&(p, how)) = self.overdue.first() {
            let more = match self.overdue.len() {
                1 => String::new(),
                2 => " (1 more partition likewise)".to_string(),
                n => format!(" ({} more partitions likewise)", n - 1),
            };
            let why = match how {
                Some((latest, x)) => {
                    let read = if latest > 0 {
                        format!(
                            "has read all of partition {p}, up to record time {}",
                            at(latest)
                        )
                    } else {
                        format!("has nothing in partition {p}")
                    };
                    let behind = if latest > 0 {
                        format!(", {} s later", seconds(x.saturating_sub(latest)))
                    } else {
                        String::new()
                    };
                    format!(
                        "{tier}/{dc} {read}; the upstream's records of this window there reach {}{behind}, and the grace period after them has passed{more}: they are not in the downstream cluster yet (a replicator paused or behind?)",
                        at(x)
                    )
                }
                None => format!(
                    "{tier}/{dc} reports no partition {p}{more}, where the upstream counted records of this window past the grace period (a downstream topic with fewer partitions, or a replicator that does not preserve partitions: set preserves_partitions = false on the edge)"
                ),
            };
            return Some((Verdict::Delayed, why));
        }
        if let Some((p, host)) = self.stalled {
            return Some((
                Verdict::Stalled,
                format!(
                    "auditor {tier}/{dc} stopped reporting progress for partition {p} (instance {host})"
                ),
            ));
        }
        self.pending
            .map(|why| (Verdict::Pending, format!("auditor {tier}/{dc}: {why}")))
    }
}

fn exceeds(diff: u64, expected: u64, t: &Thresholds) -> bool {
    diff > t.absolute && diff as f64 > t.ratio * expected as f64
}

impl Topology {
    /// Evaluates every edge of `topic` for each window start in `windows`. `rows` and
    /// `progress` are the topic's (rows of other windows are ignored).
    pub fn evaluate_topic(
        &self,
        topic: &str,
        windows: &[i64],
        rows: &[WindowRow],
        progress: &[ProgressRow],
        now: i64,
    ) -> Vec<EdgeWindow> {
        self.evaluate_topic_staged(topic, windows, rows, progress, &Staged::new(), now)
    }

    /// [`Topology::evaluate_topic`] with the store's staged, not yet rolled-up
    /// increments of the topic: a window with some at an involved tier and datacenter
    /// is not final. Read progress first, then the staged increments, then the rows:
    /// increments that came with the progress are then in one of the two.
    pub fn evaluate_topic_staged(
        &self,
        topic: &str,
        windows: &[i64],
        rows: &[WindowRow],
        progress: &[ProgressRow],
        staged: &Staged,
        now: i64,
    ) -> Vec<EdgeWindow> {
        let by_window = rows_by_window(topic, rows);
        let auditors = auditors(progress, now, self.forget_after_ms);
        let policy = self.policy_for(topic);
        let mut out = Vec::new();
        for &w in windows {
            let rows = by_window.get(&w).map(Vec::as_slice).unwrap_or(&[]);
            for edge in &self.edges {
                self.evaluate_edge(
                    topic, edge, w, rows, &auditors, staged, &policy, now, &mut out,
                );
            }
        }
        out
    }

    /// Downstream datacenters to judge on `edge`: the mapping's targets, or for a
    /// one-to-one edge every datacenter either tier has data or progress in.
    fn downstream_datacenters<'a>(
        &self,
        edge: &'a Edge,
        rows: &[&'a WindowRow],
        auditors: &BTreeMap<(&'a str, &'a str), Auditor<'a>>,
    ) -> BTreeSet<String> {
        if !edge.is_one_to_one() {
            return edge.datacenters.values().cloned().collect();
        }
        let tiers = [edge.upstream.as_str(), edge.downstream.as_str()];
        rows.iter()
            .filter(|r| tiers.contains(&r.tier.as_str()))
            .map(|r| r.datacenter.clone())
            .chain(
                auditors
                    .keys()
                    .filter(|(t, _)| tiers.contains(t))
                    .map(|(_, d)| d.to_string()),
            )
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn evaluate_edge<'a>(
        &self,
        topic: &str,
        edge: &'a Edge,
        window_start: i64,
        rows: &[&'a WindowRow],
        auditors: &BTreeMap<(&'a str, &'a str), Auditor<'a>>,
        staged: &Staged,
        policy: &Policy,
        now: i64,
        out: &mut Vec<EdgeWindow>,
    ) {
        for dc in self.downstream_datacenters(edge, rows, auditors) {
            out.push(self.evaluate_edge_at(
                topic,
                edge,
                dc,
                window_start,
                rows,
                auditors,
                staged,
                policy,
                now,
            ));
        }
    }

    /// Evaluates `edge` on one window for every downstream datacenter named in
    /// `datacenters`, whether or not it has data or progress there: the completeness
    /// gate asks about a datacenter by name, and "nothing arrived" is an answer too.
    #[allow(clippy::too_many_arguments)]
    pub fn evaluate_edge_datacenter(
        &self,
        topic: &str,
        edge: &Edge,
        datacenter: &str,
        windows: &[i64],
        rows: &[WindowRow],
        progress: &[ProgressRow],
        staged: &Staged,
        now: i64,
    ) -> Vec<EdgeWindow> {
        let by_window = rows_by_window(topic, rows);
        let auditors = auditors(progress, now, self.forget_after_ms);
        let policy = self.policy_for(topic);
        windows
            .iter()
            .map(|&w| {
                let rows = by_window.get(&w).map(Vec::as_slice).unwrap_or(&[]);
                self.evaluate_edge_at(
                    topic,
                    edge,
                    datacenter.to_string(),
                    w,
                    rows,
                    &auditors,
                    staged,
                    &policy,
                    now,
                )
            })
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn evaluate_edge_at<'a>(
        &self,
        topic: &str,
        edge: &'a Edge,
        dc: String,
        window_start: i64,
        rows: &[&'a WindowRow],
        auditors: &BTreeMap<(&'a str, &'a str), Auditor<'a>>,
        staged: &Staged,
        policy: &Policy,
        now: i64,
    ) -> EdgeWindow {
        let window_end = window_start.saturating_add(self.window.as_millis());
        let settle_at = window_end.saturating_add(policy.grace_ms);
        let up_dcs = edge.upstream_datacenters(&dc);
        let mut up = Side::default();
        let mut down = Side::default();
        for r in rows {
            if r.tier == edge.upstream && up_dcs.contains(&r.datacenter) {
                up.add(r);
            } else if r.tier == edge.downstream && r.datacenter == dc {
                down.add(r);
            }
        }
        let difference = (i128::from(down.count) - i128::from(up.count))
            .clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
        let completeness = match (up.count, down.count) {
            (0, 0) => Some(1.0),
            (0, _) => None,
            (e, o) => Some(o as f64 / e as f64),
        };
        let checksums_match = up.checksum == down.checksum;
        let down_latency = percentiles(&down.latency);
        // Rule 4 is judged whatever comes first, so that `evidence` says what the
        // downstream is asked to show in every lifecycle.
        let mut evidence = Evidence::WindowEnd;
        let unproven = self.evidence_blocks(
            edge,
            &dc,
            &UpstreamEvidence::of(edge, &up_dcs, rows),
            auditors,
            policy,
            now,
            &mut evidence,
        );
        let (lifecycle, verdict, reason) = if now < window_end {
            (Lifecycle::Open, Verdict::Pending, "window is open".into())
        } else if now < settle_at {
            (
                Lifecycle::Settling,
                Verdict::Pending,
                "within the grace period".into(),
            )
        } else if let Some((v, why)) =
            self.auditors_block(edge, &dc, &up_dcs, rows, auditors, settle_at, now)
        {
            (Lifecycle::Settling, v, why)
        } else if let Some((v, why)) = unproven {
            (Lifecycle::Settling, v, why)
        } else if let Some((tier, sdc)) = std::iter::once((edge.downstream.as_str(), dc.as_str()))
            .chain(up_dcs.iter().map(|u| (edge.upstream.as_str(), u.as_str())))
            .find(|(t, d)| staged.contains(&(t.to_string(), d.to_string(), window_start)))
        {
            (
                Lifecycle::Settling,
                Verdict::Pending,
                format!(
                    "increments of {tier}/{sdc} for this window are stored but not yet added up (the collector's roll-up is behind)"
                ),
            )
        } else {
            let judged = self.judge(
                edge,
                up.count,
                down.count,
                checksums_match,
                down_latency.as_ref(),
                policy,
            );
            (Lifecycle::Final, judged.0, judged.1)
        };
        EdgeWindow {
            topic: topic.to_string(),
            upstream: edge.upstream.clone(),
            downstream: edge.downstream.clone(),
            datacenter: dc,
            upstream_datacenters: up_dcs,
            window_start,
            window_end,
            expected: up.count,
            observed: down.count,
            difference,
            completeness,
            checksums_match,
            lifecycle,
            verdict,
            reason,
            evidence,
            upstream_latency: percentiles(&up.latency),
            downstream_latency: down_latency,
            upstream_observation_time_count: up.observation_time_count,
            downstream_observation_time_count: down.observation_time_count,
            upstream_delivery_failed_count: up.delivery_failed_count,
        }
    }

    /// `Some` when an auditor of this edge has not read past `settle_at`.
    #[allow(clippy::too_many_arguments)]
    fn auditors_block(
        &self,
        edge: &Edge,
        dc: &str,
        up_dcs: &[String],
        rows: &[&WindowRow],
        auditors: &BTreeMap<(&str, &str), Auditor>,
        settle_at: i64,
        now: i64,
    ) -> Option<(Verdict, String)> {
        let involved = std::iter::once((edge.downstream.as_str(), dc, false)).chain(
            up_dcs
                .iter()
                .map(|u| (edge.upstream.as_str(), u.as_str(), !edge.is_one_to_one())),
        );
        let mut pending = None;
        for (tier, dc, optional) in involved {
            if !self.tier(tier).is_some_and(|t| t.progress) {
                continue;
            }
            // One upstream datacenter of a many-to-one edge that has neither progress
            // for the topic nor rows in the window does not carry the topic (a
            // region-specific topic): it contributes 0 and must not hold the others.
            if optional
                && !auditors.contains_key(&(tier, dc))
                && !rows.iter().any(|r| r.tier == tier && r.datacenter == dc)
            {
                continue;
            }
            match auditors.get(&(tier, dc)) {
                Some(a) => match a.oldest_behind(settle_at) {
                    None => {}
                    Some(p) if now.saturating_sub(p.reported_at) <= self.stall_after_ms => {
                        pending.get_or_insert_with(|| {
                            format!(
                                "auditor {tier}/{dc} has not read past window end + grace yet"
                            )
                        });
                    }
                    Some(p) => {
                        return Some((
                            Verdict::Stalled,
                            format!(
                                "auditor {tier}/{dc} stopped reporting progress for partition {} (instance {})",
                                p.partition, p.host
                            ),
                        ))
                    }
                },
                // Never heard of: stalled once the stall timeout has passed since the
                // window settled, pending before (it may just be starting up).
                None if now.saturating_sub(settle_at) > self.stall_after_ms => {
                    return Some((
                        Verdict::Stalled,
                        format!("auditor {tier}/{dc} never reported progress"),
                    ))
                }
                None => {
                    pending
                        .get_or_insert_with(|| format!("no progress from auditor {tier}/{dc} yet"));
                }
            }
        }
        pending.map(|why| (Verdict::Pending, why))
    }

    /// Rule 4 (docs/web.md, Verdicts): `Some` while the downstream auditor of `edge`
    /// in `dc` has not shown that it read what the upstream counted in the window
    /// (`wanted`). `evidence` is set to what it was asked to show.
    #[allow(clippy::too_many_arguments)]
    fn evidence_blocks(
        &self,
        edge: &Edge,
        dc: &str,
        wanted: &UpstreamEvidence,
        auditors: &BTreeMap<(&str, &str), Auditor>,
        policy: &Policy,
        now: i64,
        evidence: &mut Evidence,
    ) -> Option<(Verdict, String)> {
        let tier = edge.downstream.as_str();
        // A tier without progress (it reads nothing, e.g. a producer) cannot show it.
        if wanted.is_empty() || !self.tier(tier).is_some_and(|t| t.progress) {
            return None;
        }
        *evidence = if wanted.anywhere.is_some() {
            Evidence::Clock
        } else {
            Evidence::RecordTime
        };
        // Rule 3 waits for every involved auditor to report.
        let down = auditors.get(&(tier, dc))?;
        let grace = policy.grace_ms;
        let mut behind = Behind::default();
        for (&p, &x) in &wanted.partitions {
            let Some(part) = down.part(p) else {
                behind.missing(p, x, now.saturating_sub(x) >= grace);
                continue;
            };
            if !part.comparable() {
                *evidence = Evidence::Clock;
                if !part.read_past(x.saturating_add(grace)) {
                    behind.by_clock(part, now, self.stall_after_ms);
                }
            } else {
                match part.reading(x) {
                    Reading::Past => {}
                    Reading::At if part.read_past(x.saturating_add(grace)) => {}
                    // It has read up to the upstream's time: never overdue.
                    Reading::At => behind.by_record_time(part, x, false, now, self.stall_after_ms),
                    Reading::Before => {
                        // Overdue only when the auditor has read everything its
                        // cluster has (lag 0), measured after the upstream's time +
                        // grace: the records are not there. An auditor still reading
                        // (a late or slow one) is pending, as rule 3 has it.
                        let overdue =
                            part.lag == Some(0) && part.measured_at() >= x.saturating_add(grace);
                        behind.by_record_time(part, x, overdue, now, self.stall_after_ms);
                    }
                }
            }
        }
        if let Some(x) = wanted.anywhere {
            for part in down
                .partitions
                .iter()
                .filter(|part| !part.read_past(x.saturating_add(grace)))
            {
                behind.by_clock(part, now, self.stall_after_ms);
            }
        }
        behind.verdict(tier, dc)
    }

    fn judge(
        &self,
        edge: &Edge,
        expected: u64,
        observed: u64,
        checksums_match: bool,
        down_latency: Option<&Percentiles>,
        policy: &Policy,
    ) -> (Verdict, String) {
        let t = &policy.thresholds;
        if observed < expected && exceeds(expected - observed, expected, t) {
            return (
                Verdict::Loss,
                format!("{} of {expected} messages missing", expected - observed),
            );
        }
        if observed > expected && exceeds(observed - expected, expected, t) {
            return (
                Verdict::Duplication,
                format!("{} messages more than expected", observed - expected),
            );
        }
        if observed == expected && !checksums_match {
            return (
                Verdict::Mismatch,
                "equal counts but different checksums (loss masked by duplication, or altered messages)"
                    .into(),
            );
        }
        let objective = self
            .tier(&edge.downstream)
            .and_then(|t| t.latency_p99_objective);
        if let (Some(obj), Some(p)) = (objective, down_latency) {
            if p.p99_ms > obj.as_millis() as f64 {
                return (
                    Verdict::Delayed,
                    format!(
                        "p99 latency {:.0} ms above the objective of {} ms",
                        p.p99_ms,
                        obj.as_millis()
                    ),
                );
            }
        }
        (Verdict::Ok, "complete".into())
    }
}
