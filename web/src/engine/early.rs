//! Rule 0 (issue 28; docs/web.md, Replication evidence): before a window is final, on
//! an edge whose replicator's progress is published, a deficit is *proven* a loss as
//! soon as
//! 1. the replicator has copied past the highest offset the upstream counted in the
//!    window, on every partition and upstream datacenter (its evidence: how far it has
//!    copied, as of when it was read), and
//! 2. the downstream auditor has read its whole log (lag 0) as of a time after that,
//!    on every partition concerned, and
//! 3. the store has added up every increment of the window at both ends.
//! Every record the upstream counted so far must then be in the downstream's count: a
//! shortfall is records lost, however long the window still has to run. Before 1,
//! the shortfall is data in flight (`delayed` once the replicator has held counted
//! records back longer than the edge's objective); before 2 or 3, nothing is said.
//! Nothing here can make a `loss` of data merely late: the upstream's later records
//! only add to what must be copied, the downstream's count only grows.

use std::collections::BTreeMap;

use super::*;

/// How much an auditor's clock may run behind the true time: evidence read at
/// `emitted_at` by the upstream auditor is taken as read up to this much later
/// (never later than the collector received it).
pub(super) const EVIDENCE_CLOCK_SKEW_MS: i64 = 1000;

/// What the replication evidence shows of one window on one edge and downstream
/// datacenter.
#[derive(Debug)]
pub(super) enum Early {
    /// Everything counted upstream so far is copied (as of `copied_at`) and the
    /// downstream read its whole log after that.
    Proven { copied_at: i64 },
    /// The replicator has not copied the upstream's counted records of `partition`
    /// (in `datacenter`) up to `counted_to` yet: it is at `copied_to`, `lag` records
    /// behind its upstream log end; they have waited at least `waited_ms`.
    InFlight {
        datacenter: String,
        partition: i32,
        counted_to: i64,
        copied_to: i64,
        lag: Option<i64>,
        waited_ms: Option<i64>,
    },
    /// Nothing to conclude yet, and why (no evidence, not read downstream since, …).
    Unknown(String),
}

impl Part<'_> {
    /// As of when replication evidence holds at the latest: read by the upstream
    /// auditor at `emitted_at` (its clock, allowed to run behind by
    /// [`EVIDENCE_CLOCK_SKEW_MS`]), and never later than the collector received it.
    fn copied_as_of(&self) -> i64 {
        self.emitted_at
            .saturating_add(EVIDENCE_CLOCK_SKEW_MS)
            .min(self.reported_at)
    }
}

impl Topology {
    /// Rule 0 for `edge` in downstream datacenter `dc` on the window of `rows`.
    /// `None`: the edge has no replicator, or the upstream counted nothing.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn early(
        &self,
        edge: &Edge,
        dc: &str,
        up_dcs: &[String],
        rows: &[&WindowRow],
        auditors: &BTreeMap<(&str, &str), Auditor>,
        staged: &Staged,
        window_start: i64,
        now: i64,
    ) -> Option<Early> {
        let evidence_tier = edge.evidence_tier.as_deref()?;
        // The highest offset counted per (upstream datacenter, partition), and when
        // the upstream last counted in each datacenter.
        let mut counted: BTreeMap<(&str, i32), i64> = BTreeMap::new();
        let mut observed: BTreeMap<&str, i64> = BTreeMap::new();
        for r in rows
            .iter()
            .filter(|r| r.tier == edge.upstream && up_dcs.contains(&r.datacenter) && r.count > 0)
        {
            if r.max_offsets.is_empty() {
                return Some(Early::Unknown(format!(
                    "{}/{}'s increments of this window carry no offset ranges: nothing can be proven before the window is final",
                    r.tier, r.datacenter
                )));
            }
            for &(p, o) in &r.max_offsets {
                let x = counted.entry((r.datacenter.as_str(), p)).or_insert(o);
                *x = (*x).max(o);
            }
            if let Some(t) = r.max_observed_at_ms {
                let x = observed.entry(r.datacenter.as_str()).or_insert(t);
                *x = (*x).max(t);
            }
        }
        if counted.is_empty() {
            return None;
        }
        if let Some((tier, sdc)) = std::iter::once((edge.downstream.as_str(), dc))
            .chain(up_dcs.iter().map(|u| (edge.upstream.as_str(), u.as_str())))
            .find(|(t, d)| staged.contains(&(t.to_string(), d.to_string(), window_start)))
        {
            return Some(Early::Unknown(format!(
                "increments of {tier}/{sdc} for this window are stored but not yet added up"
            )));
        }
        // 1. Copied: the replicator is past every counted offset. The partition
        // furthest behind (in offsets) is the one named.
        let mut copied_at = i64::MIN;
        let mut in_flight: Option<Early> = None;
        let mut furthest = i64::MIN;
        for (&(u, p), &m) in &counted {
            let Some(e) = auditors.get(&(evidence_tier, u)).and_then(|a| a.part(p)) else {
                return Some(Early::Unknown(format!(
                    "no evidence from {evidence_tier} for {u} partition {p} (are the {} auditors of {u} configured with this replicator?)",
                    edge.upstream
                )));
            };
            if e.next_offset > m {
                copied_at = copied_at.max(e.copied_as_of());
            } else if m - e.next_offset > furthest {
                furthest = m - e.next_offset;
                in_flight = Some(Early::InFlight {
                    datacenter: u.to_string(),
                    partition: p,
                    counted_to: m,
                    copied_to: e.next_offset,
                    lag: e.lag,
                    waited_ms: observed.get(u).map(|t| now.saturating_sub(*t)),
                });
            }
        }
        if let Some(f) = in_flight {
            return Some(f);
        }
        // 2. Read: the downstream auditor read its whole log after the copies were
        // made, on every partition that can hold them.
        let Some(down) = auditors.get(&(edge.downstream.as_str(), dc)) else {
            return Some(Early::Unknown(format!(
                "copied; no progress from {}/{dc} yet",
                edge.downstream
            )));
        };
        let unread = |part: &Part| !(part.lag == Some(0) && part.measured_at() > copied_at);
        let behind = if edge.preserves_partitions {
            let partitions: std::collections::BTreeSet<i32> =
                counted.keys().map(|&(_, p)| p).collect();
            partitions
                .into_iter()
                .find(|&p| down.part(p).is_none_or(unread))
        } else {
            down.partitions
                .iter()
                .find(|part| unread(part))
                .map(|part| part.partition)
        };
        if let Some(p) = behind {
            return Some(Early::Unknown(format!(
                "copied; {}/{dc} has not read partition {p} to its end since",
                edge.downstream
            )));
        }
        Some(Early::Proven { copied_at })
    }
}

impl Early {
    /// The verdict of a window that is not final, given the counts so far and the
    /// verdict the other rules gave it. `(so_far, verdict, reason)`.
    pub(super) fn judge(
        self,
        edge: &Edge,
        expected: u64,
        observed: u64,
        policy: &Policy,
        (verdict, reason): (Verdict, String),
    ) -> (Option<SoFar>, Verdict, String) {
        match self {
            Early::Proven { copied_at } => {
                if observed < expected && exceeds(expected - observed, expected, &policy.thresholds)
                {
                    (
                        Some(SoFar::Loss),
                        Verdict::Loss,
                        format!(
                            "proven before the window is final: {} of the {expected} messages counted upstream so far are missing downstream, though the replicator has copied past all of them (as of {}) and the downstream has read its whole log since",
                            expected - observed,
                            at(copied_at)
                        ),
                    )
                } else {
                    (Some(SoFar::Ok), verdict, reason)
                }
            }
            Early::InFlight {
                datacenter,
                partition,
                counted_to,
                copied_to,
                lag,
                waited_ms,
            } => {
                let lag = lag.map_or(String::new(), |l| format!(", {l} records behind its log end"));
                let waited = waited_ms.map_or(String::new(), |w| {
                    format!("; counted upstream {} s ago or more", seconds(w))
                });
                let why = format!(
                    "in flight: the replicator has copied {datacenter} partition {partition} up to offset {copied_to}{lag}; the upstream counted this window there up to offset {counted_to}{waited}"
                );
                let overdue = edge
                    .replication_lag_objective_ms
                    .zip(waited_ms)
                    .is_some_and(|(objective, w)| w > objective);
                match verdict {
                    Verdict::Pending if overdue => (Some(SoFar::InFlight), Verdict::Delayed, why),
                    Verdict::Pending => (Some(SoFar::InFlight), verdict, why),
                    _ => (Some(SoFar::InFlight), verdict, reason),
                }
            }
            Early::Unknown(why) => match verdict {
                Verdict::Pending => (None, verdict, format!("{reason}; {why}")),
                _ => (None, verdict, reason),
            },
        }
    }
}
