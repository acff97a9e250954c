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
//! 4. The downstream auditor must have read what the upstream counted: for
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

mod early;
mod judge;
pub mod topology;
mod verdict;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use audit_lib::LatencyHistogram;

pub use early::EvidenceRefusal;
pub use topology::{Edge, Policy, Thresholds, Topology, TopologyConfig, TopologyError};
pub use verdict::*;

/// Stored statistics of one (topic, tier, datacenter, window), as the store reads
/// them: the engine judges the store's rows as they are.
pub use store::WindowRow;

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
    next_offset: i64,
    record_time: Option<i64>,
    lag: Option<i64>,
    reported_at: i64,
    emitted_at: i64,
    host: &'a str,
    /// The latest record time read (`None`: an auditor older than the field).
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
    /// older than `max_record_time` reports only that).
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
            next_offset: p.next_offset,
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

/// What the engine judges one topic from: its window rows, its auditors' progress
/// and the increments the store holds but has not added up yet (rule 5), at `now`.
/// Rows of other topics are ignored.
#[derive(Debug, Clone, Copy)]
pub struct TopicInputs<'a> {
    pub topic: &'a str,
    pub rows: &'a [WindowRow],
    pub progress: &'a [ProgressRow],
    pub staged: &'a Staged,
    pub now: i64,
}

/// [`TopicInputs`] as the rules read them: rows by window, auditors by tier and
/// datacenter, the topic's policy.
struct Prepared<'a> {
    topic: &'a str,
    by_window: BTreeMap<i64, Vec<&'a WindowRow>>,
    auditors: BTreeMap<(&'a str, &'a str), Auditor<'a>>,
    staged: &'a Staged,
    policy: Policy,
    now: i64,
}

impl Prepared<'_> {
    /// The inputs of the window starting at `window_start`.
    fn window(&self, window_start: i64) -> WindowInputs<'_> {
        WindowInputs {
            topic: self.topic,
            window_start,
            rows: self
                .by_window
                .get(&window_start)
                .map(Vec::as_slice)
                .unwrap_or(&[]),
            auditors: &self.auditors,
            staged: self.staged,
            policy: &self.policy,
            now: self.now,
        }
    }
}

/// One window of one topic, as every rule reads it: the window's rows, the topic's
/// auditors, staged increments and policy, at `now`.
#[derive(Clone, Copy)]
struct WindowInputs<'a> {
    topic: &'a str,
    window_start: i64,
    rows: &'a [&'a WindowRow],
    auditors: &'a BTreeMap<(&'a str, &'a str), Auditor<'a>>,
    staged: &'a Staged,
    policy: &'a Policy,
    now: i64,
}

impl Topology {
    fn prepare<'a>(&self, inputs: &TopicInputs<'a>) -> Prepared<'a> {
        Prepared {
            topic: inputs.topic,
            by_window: rows_by_window(inputs.topic, inputs.rows),
            auditors: auditors(inputs.progress, inputs.now, self.forget_after_ms),
            staged: inputs.staged,
            policy: self.policy_for(inputs.topic),
            now: inputs.now,
        }
    }
}

/// Status of every auditor that reported progress for a topic.
pub fn auditor_status(
    topology: &Topology,
    progress: &[ProgressRow],
    now: i64,
) -> Vec<AuditorStatus> {
    auditors(progress, now, topology.forget_after_ms)
        .into_iter()
        // Replication evidence is published by the upstream auditors, whose own
        // progress says whether they stalled.
        .filter(|((tier, _), _)| !common::replication::is_evidence_tier(tier))
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
        // A row of count 0 counted nothing: its record times (an increment of count 0
        // may carry any, up to validation's hour ahead) are nothing the downstream must
        // have read (docs/web.md, Verdicts, rule 4; reviews/security-3.md, M2).
        for r in rows
            .iter()
            .filter(|r| r.tier == edge.upstream && up_dcs.contains(&r.datacenter) && r.count > 0)
        {
            // Nothing the row counted is later than when the collector received it
            // (its clock, not the sender's): a record time ahead of that (validation
            // lets an hour through) holds the window for `grace` after the increment
            // arrived at most, then rule 4 asks no more (docs/web.md, Verdicts: the bound).
            let until = r.last_received_at_ms;
            if r.record_times.is_empty() {
                e.anywhere = e.anywhere.max(r.max_observed_at_ms.map(|t| t.min(until)));
            }
            for &(p, t) in &r.record_times {
                let t = t.min(until);
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
