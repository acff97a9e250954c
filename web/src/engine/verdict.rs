//! What the engine answers: a verdict, its lifecycle and evidence per edge,
//! datacenter and window ([`EdgeWindow`]), the status of each auditor, and the rows it
//! judges from (the store's).

use std::collections::{BTreeMap, BTreeSet};

use audit_lib::LatencyHistogram;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

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
    /// No upstream record time is known (emitters older than the record-time fields, or
    /// none counted): the window end + grace alone, as before.
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

/// What the replicator's evidence says of a window before it is final, on an edge
/// with a replicator (rule 0; docs/web.md, Replication evidence).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SoFar {
    /// Every record the upstream has counted in the window so far is copied, the
    /// downstream has read its whole log since, and its count is short: a loss,
    /// proven while the window is open (the verdict is `loss` and pages at once).
    Loss,
    /// The replicator has not copied every record the upstream counted yet: data in
    /// flight, never a loss (`delayed` past the edge's `replication_lag_objective`).
    InFlight,
    /// Everything counted upstream so far is copied and read downstream: nothing is
    /// missing so far.
    Ok,
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
    /// Before the window is final, on an edge with a replicator: what its evidence
    /// shows so far (null: no replicator, final, or no evidence to judge by). A loss
    /// proven so stays `loss`, also once the window is final.
    #[schema(required = true)]
    pub so_far: Option<SoFar>,
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

/// State of one replicator's evidence from one upstream datacenter, all topics together
/// (docs/web.md, Alerts): evidence is not an auditor, so it stops as one thing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvidenceStatus {
    /// When the newest evidence of any topic was received (epoch ms).
    pub last_report: i64,
    /// How long ago that was at the cycle's time.
    pub age_ms: i64,
    /// Older than `stall_after`.
    pub stale: bool,
}

/// The status of each replicator's evidence from when it was last received, at `now`.
pub fn evidence_status(
    newest: BTreeMap<(String, String), i64>,
    now: i64,
    stall_after_ms: i64,
) -> BTreeMap<(String, String), EvidenceStatus> {
    newest
        .into_iter()
        .map(|(key, last_report)| {
            let age_ms = now.saturating_sub(last_report).max(0);
            let stale = age_ms > stall_after_ms;
            (
                key,
                EvidenceStatus {
                    last_report,
                    age_ms,
                    stale,
                },
            )
        })
        .collect()
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
