//! The detection engine: pure functions from stored window rows and auditor progress
//! to a verdict per topic, edge, downstream datacenter and window. No I/O, no clock:
//! `now` is an argument, so every rule is table-tested (see `tests.rs`).
//!
//! Rules, in order, for a window `[start, end)` on an edge:
//! 1. `now < end` → lifecycle `open`, verdict `pending`.
//! 2. `now < end + grace` → `settling`, `pending` (late data is still expected).
//! 3. Each auditor involved (downstream tier in the downstream datacenter, upstream tier
//!    in each mapped datacenter; only tiers that report progress) must have read past
//!    `end + grace`. If one has not: `stalled` when its last report is older than
//!    `stall_after`, else `pending` — a lagging auditor never produces a false `loss`.
//! 4. Otherwise the window is `final` and counts are compared: `loss` / `duplication`
//!    when the difference exceeds both thresholds, `mismatch` when the counts are equal
//!    but the multiset checksums differ (loss masked by duplication, or altered data),
//!    `delayed` when the downstream tier's p99 latency exceeds its objective, else `ok`.
//!
//! Late data is just more increments in the same rows: evaluating again after it
//! arrived yields the new verdict (a `loss` becomes `ok`), which is how alerts resolve.

pub mod latency;
pub mod topology;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

pub use latency::{Histogram, Percentiles};
pub use topology::{Edge, Policy, Thresholds, Topology, TopologyConfig, TopologyError};

/// Stored statistics of one (topic, tier, datacenter, window); several rows for the
/// same key (increments) are summed.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowRow {
    pub topic: String,
    pub tier: String,
    pub datacenter: String,
    pub window_start: i64,
    pub count: u64,
    pub checksum: u64,
    pub latency: Histogram,
}

/// Latest progress of one partition as reported by the auditor of one tier in one
/// datacenter, for one topic.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionProgress {
    pub tier: String,
    pub datacenter: String,
    pub partition: i32,
    /// Kafka record timestamp of the last consumed message (epoch ms).
    pub record_time: Option<i64>,
    pub lag: Option<i64>,
    /// When this report was emitted (epoch ms).
    pub reported_at: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
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

    /// Severity order for "worst verdict" summaries (the enum order).
    pub fn severity(self) -> u8 {
        self as u8
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lifecycle {
    Open,
    Settling,
    Final,
}

/// The comparison of one edge, downstream datacenter and window.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
    pub completeness: Option<f64>,
    pub checksums_match: bool,
    pub lifecycle: Lifecycle,
    pub verdict: Verdict,
    /// Why the verdict is what it is, for people.
    pub reason: String,
    pub upstream_latency: Option<Percentiles>,
    pub downstream_latency: Option<Percentiles>,
}

/// State of the auditor of one tier in one datacenter for one topic.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditorStatus {
    pub tier: String,
    pub datacenter: String,
    pub last_report: i64,
    pub stalled: bool,
}

#[derive(Default)]
struct Side {
    count: u64,
    checksum: u64,
    latency: Histogram,
}

impl Side {
    fn add(&mut self, row: &WindowRow) {
        // Stored counts fit in i64; a sum of many could still overflow.
        self.count = self.count.saturating_add(row.count);
        self.checksum = self.checksum.wrapping_add(row.checksum);
        self.latency.merge(&row.latency);
    }
}

struct Auditor {
    last_report: i64,
    partitions: Vec<(Option<i64>, Option<i64>, i64)>,
}

impl Auditor {
    /// Has every partition been read past `t`? Lag 0 counts only if it was reported at
    /// or after `t`: an idle partition that was empty an hour ago says nothing about
    /// data written since.
    fn caught_up(&self, t: i64) -> bool {
        !self.partitions.is_empty()
            && self.partitions.iter().all(|&(record_time, lag, at)| {
                record_time.is_some_and(|r| r >= t) || (lag == Some(0) && at >= t)
            })
    }
}

fn auditors(progress: &[PartitionProgress]) -> BTreeMap<(&str, &str), Auditor> {
    let mut map: BTreeMap<(&str, &str), Auditor> = BTreeMap::new();
    for p in progress {
        let a = map
            .entry((p.tier.as_str(), p.datacenter.as_str()))
            .or_insert(Auditor {
                last_report: i64::MIN,
                partitions: Vec::new(),
            });
        a.last_report = a.last_report.max(p.reported_at);
        a.partitions.push((p.record_time, p.lag, p.reported_at));
    }
    map
}

/// Status of every auditor that reported progress for a topic.
pub fn auditor_status(
    topology: &Topology,
    progress: &[PartitionProgress],
    now: i64,
) -> Vec<AuditorStatus> {
    auditors(progress)
        .into_iter()
        .map(|((tier, dc), a)| AuditorStatus {
            tier: tier.to_string(),
            datacenter: dc.to_string(),
            last_report: a.last_report,
            stalled: now.saturating_sub(a.last_report) > topology.stall_after_ms,
        })
        .collect()
}

/// Latency percentiles per tier (all datacenters merged) for the given rows.
pub fn tier_latency(rows: &[WindowRow]) -> BTreeMap<String, Percentiles> {
    let mut merged: BTreeMap<&str, Histogram> = BTreeMap::new();
    for r in rows {
        merged.entry(r.tier.as_str()).or_default().merge(&r.latency);
    }
    merged
        .into_iter()
        .filter_map(|(t, h)| Some((t.to_string(), h.percentiles()?)))
        .collect()
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
        progress: &[PartitionProgress],
        now: i64,
    ) -> Vec<EdgeWindow> {
        let mut by_window: BTreeMap<i64, Vec<&WindowRow>> = BTreeMap::new();
        for r in rows.iter().filter(|r| r.topic == topic) {
            by_window.entry(r.window_start).or_default().push(r);
        }
        let auditors = auditors(progress);
        let policy = self.policy_for(topic);
        let mut out = Vec::new();
        for &w in windows {
            let rows = by_window.get(&w).map(Vec::as_slice).unwrap_or(&[]);
            for edge in &self.edges {
                self.evaluate_edge(topic, edge, w, rows, &auditors, &policy, now, &mut out);
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
        auditors: &BTreeMap<(&'a str, &'a str), Auditor>,
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
        auditors: &BTreeMap<(&'a str, &'a str), Auditor>,
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
        progress: &[PartitionProgress],
        now: i64,
    ) -> Vec<EdgeWindow> {
        let mut by_window: BTreeMap<i64, Vec<&WindowRow>> = BTreeMap::new();
        for r in rows.iter().filter(|r| r.topic == topic) {
            by_window.entry(r.window_start).or_default().push(r);
        }
        let auditors = auditors(progress);
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
        auditors: &BTreeMap<(&'a str, &'a str), Auditor>,
        policy: &Policy,
        now: i64,
    ) -> EdgeWindow {
        let window_end = window_start.saturating_add(self.window_ms);
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
        let down_latency = down.latency.percentiles();
        let (lifecycle, verdict, reason) = if now < window_end {
            (Lifecycle::Open, Verdict::Pending, "window is open".into())
        } else if now < settle_at {
            (
                Lifecycle::Settling,
                Verdict::Pending,
                "within the grace period".into(),
            )
        } else if let Some((v, why)) =
            self.auditors_block(edge, &dc, &up_dcs, auditors, settle_at, now)
        {
            (Lifecycle::Settling, v, why)
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
            upstream_latency: up.latency.percentiles(),
            downstream_latency: down_latency,
        }
    }

    /// `Some` when an auditor of this edge has not read past `settle_at`.
    fn auditors_block(
        &self,
        edge: &Edge,
        dc: &str,
        up_dcs: &[String],
        auditors: &BTreeMap<(&str, &str), Auditor>,
        settle_at: i64,
        now: i64,
    ) -> Option<(Verdict, String)> {
        let involved = std::iter::once((edge.downstream.as_str(), dc))
            .chain(up_dcs.iter().map(|u| (edge.upstream.as_str(), u.as_str())));
        let mut pending = None;
        for (tier, dc) in involved {
            if !self.tier(tier).is_some_and(|t| t.progress) {
                continue;
            }
            match auditors.get(&(tier, dc)) {
                Some(a) if a.caught_up(settle_at) => {}
                Some(a) if now.saturating_sub(a.last_report) <= self.stall_after_ms => {
                    pending.get_or_insert_with(|| {
                        format!("auditor {tier}/{dc} has not read past window end + grace yet")
                    });
                }
                Some(_) => {
                    return Some((
                        Verdict::Stalled,
                        format!("auditor {tier}/{dc} stopped reporting progress"),
                    ))
                }
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
