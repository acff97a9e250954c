//! Rule 0 (docs/web.md, Replication evidence): before a window is final, on an edge
//! whose replicator's progress is published, part of a shortfall is *proven* lost once
//! 1. there is evidence, for every partition and upstream datacenter the upstream
//!    counted the window in, of how far the replicator has copied (its next offset to
//!    copy, as of when it was read),
//! 2. the downstream auditor has read its whole log (lag 0) as of a time after that
//!    evidence, on every partition concerned, and
//! 3. the store has added up every increment of the window at both ends.
//!
//! Every counted record below the replicator's position must then be in the
//! downstream's count; those at or above it number at most the offsets from the
//! position to the highest counted, per partition (`in_flight`). A shortfall larger
//! than that is records lost, however long the window still has to run: it is paged
//! at once as `loss` (`so_far = loss`). A shortfall within it is data in flight
//! (`delayed` once the first record not copied has waited longer than the edge's
//! objective). Nothing here can make a `loss` of data merely late: the upstream's
//! later records only add to what may be in flight, the downstream's count only grows.

use std::collections::BTreeMap;

use super::*;

/// How much an auditor's clock may run behind the true time: evidence read at
/// `emitted_at` by the upstream auditor is taken as read up to this much later
/// (never later than the collector received it).
pub(super) const EVIDENCE_CLOCK_SKEW_MS: i64 = 1000;

/// Evidence emitted (by its auditor's clock) more than this after the collector
/// received it is not used: honest evidence is published `replication_evidence_age`
/// (5 s) after it was read, so only a clock far ahead, or a forged row, dates it
/// later. (The store keeps a partition's row with the larger `emitted_at`: a row
/// dated an hour ahead would otherwise stand for the hour.)
pub(super) const EVIDENCE_FUTURE_MS: i64 = 60_000;

/// Why a piece of replication evidence (one partition's progress of an evidence tier)
/// is not used (docs/web.md, Replication evidence). Counted by the evaluator,
/// `replication_evidence_refused_total{reason}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EvidenceRefusal {
    /// Emitted more than [`EVIDENCE_FUTURE_MS`] after the collector received it.
    EmittedInFuture,
    /// Its position is past the log end the upstream auditor measured there (its
    /// next offset + lag): no replicator copies what is not in the log.
    PastLogEnd,
    /// The upstream auditor reports no progress for the partition to check it
    /// against.
    NoLogEnd,
}

impl EvidenceRefusal {
    pub fn as_str(self) -> &'static str {
        match self {
            EvidenceRefusal::EmittedInFuture => "emitted_in_future",
            EvidenceRefusal::PastLogEnd => "past_log_end",
            EvidenceRefusal::NoLogEnd => "no_log_end",
        }
    }
}

/// Whether the evidence of one partition — its next offset to copy, its `emitted_at`
/// and when the collector received it — is plausible, given the upstream auditor's
/// progress there (`(next_offset, lag)`); why not, for people, when it is not.
fn refusal(
    next_offset: i64,
    emitted_at: i64,
    received_at: i64,
    upstream: Option<(i64, Option<i64>)>,
) -> Option<(EvidenceRefusal, String)> {
    let ahead = emitted_at.saturating_sub(received_at);
    if ahead > EVIDENCE_FUTURE_MS {
        return Some((
            EvidenceRefusal::EmittedInFuture,
            format!(
                "emitted at {}, {} s after the collector received it",
                at(emitted_at),
                seconds(ahead)
            ),
        ));
    }
    let Some((read_to, lag)) = upstream else {
        return Some((
            EvidenceRefusal::NoLogEnd,
            "the upstream auditor reports no progress there to check it against".into(),
        ));
    };
    // Lag unknown (an auditor that has not fetched the high watermark yet): what it
    // has read is the log end known.
    let log_end = read_to.saturating_add(lag.unwrap_or(0).max(0));
    if next_offset > log_end {
        return Some((
            EvidenceRefusal::PastLogEnd,
            format!(
                "it says the replicator copied up to offset {next_offset}, past the log end the upstream auditor measured ({log_end})"
            ),
        ));
    }
    None
}

/// How many partitions' evidence a proof's reason names (then how many more).
const REST_ON_SHOWN: usize = 4;

/// What the replication evidence shows of one window on one edge and downstream
/// datacenter.
#[derive(Debug)]
pub(super) enum Early {
    /// Evidence for every partition the upstream counted in: `in_flight` is how many
    /// of the upstream's counted records may not be copied yet (at most the offsets
    /// from the replicator's position to the highest counted, per partition), and
    /// `read` whether the downstream has read its whole log since the copies were
    /// known. `behind` names the partition furthest behind, if any.
    Evidence {
        in_flight: u64,
        read: Result<i64, String>,
        behind: Option<Behind>,
        /// What a proof rests on, for people and the proof ledger: each partition's
        /// evidence (position, who sent it, when); empty on one cluster.
        rests_on: String,
    },
    /// Nothing to conclude, and why (no evidence, increments not added up, …).
    Unknown(String),
}

/// The partition whose counted records the replicator holds back the most.
#[derive(Debug)]
pub(super) struct Behind {
    datacenter: String,
    partition: i32,
    counted_to: i64,
    copied_to: i64,
    lag: Option<i64>,
    /// How long the first record not copied has waited at least since the upstream
    /// auditor read it (the evidence's `record_time`), over every partition.
    waited_ms: Option<i64>,
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
    pub(super) fn early(
        &self,
        w: &WindowInputs,
        edge: &Edge,
        dc: &str,
        up_dcs: &[String],
    ) -> Option<Early> {
        let (rows, auditors, now) = (w.rows, w.auditors, w.now);
        let replicator = edge.replicator.as_ref()?;
        // The highest offset counted per (upstream datacenter, partition).
        let mut counted: BTreeMap<(&str, i32), i64> = BTreeMap::new();
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
        }
        if counted.is_empty() {
            return None;
        }
        if let Some((tier, sdc)) =
            super::judge::staged_end(edge, dc, up_dcs, w.staged, w.window_start)
        {
            return Some(Early::Unknown(format!(
                "increments of {tier}/{sdc} for this window are stored but not yet added up"
            )));
        }
        let mut copied_at = i64::MIN;
        let mut in_flight = 0u64;
        let mut behind: Option<Behind> = None;
        let mut waited = None;
        let mut rests_on = Vec::new();
        let evidence_tier = match (replicator, edge.evidence_tier.as_deref()) {
            (_, Some(tier)) => Some(tier),
            // One cluster: what the upstream counted is in the log as soon as it is
            // counted (a producer tier counts what the cluster acknowledged), as of its
            // latest observation (its clock + the allowance, never later than received).
            (common::replication::Replicator::SameCluster, None) => {
                for r in rows.iter().filter(|r| {
                    r.tier == edge.upstream && up_dcs.contains(&r.datacenter) && r.count > 0
                }) {
                    let Some(t) = r.max_observed_at_ms else {
                        return Some(Early::Unknown(format!(
                            "{}/{}'s increments of this window carry no observation time",
                            r.tier, r.datacenter
                        )));
                    };
                    copied_at = copied_at.max(
                        t.saturating_add(EVIDENCE_CLOCK_SKEW_MS)
                            .min(r.last_received_at_ms),
                    );
                }
                None
            }
            (_, None) => return None,
        };
        // What the replicator may still hold back: the offsets from its position to
        // the highest counted, on every partition (a bound: offsets of other windows,
        // transaction markers and compacted records are in it too).
        if let Some(evidence_tier) = evidence_tier {
            for (&(u, p), &m) in &counted {
                let Some(e) = auditors.get(&(evidence_tier, u)).and_then(|a| a.part(p)) else {
                    return Some(Early::Unknown(format!(
                        "no evidence from {evidence_tier} for {u} partition {p} (are the {} auditors of {u} configured with this replicator?)",
                        edge.upstream
                    )));
                };
                let up = auditors
                    .get(&(edge.upstream.as_str(), u))
                    .and_then(|a| a.part(p))
                    .map(|x| (x.next_offset, x.lag));
                if let Some((_, why)) = refusal(e.next_offset, e.emitted_at, e.reported_at, up) {
                    return Some(Early::Unknown(format!(
                        "the evidence of {evidence_tier} for {u} partition {p} is not used: {why}"
                    )));
                }
                copied_at = copied_at.max(e.copied_as_of());
                if rests_on.len() < REST_ON_SHOWN {
                    rests_on.push(format!(
                        "{u} partition {p} copied to offset {} (sent by {}, emitted {}, received {})",
                        e.next_offset,
                        e.host,
                        at(e.emitted_at),
                        at(e.reported_at)
                    ));
                } else if rests_on.len() == REST_ON_SHOWN {
                    rests_on.push(format!("{} more partitions", counted.len() - REST_ON_SHOWN));
                }
                let held = m.saturating_add(1).saturating_sub(e.next_offset).max(0);
                in_flight = in_flight.saturating_add(held as u64);
                if held > 0 {
                    // The evidence's record time: by when the upstream auditor had read the
                    // first record not copied.
                    let w = e.record_time.map(|t| now.saturating_sub(t));
                    waited = waited.max(w);
                    if behind.as_ref().is_none_or(|b| held > b.held()) {
                        behind = Some(Behind {
                            datacenter: u.to_string(),
                            partition: p,
                            counted_to: m,
                            copied_to: e.next_offset,
                            lag: e.lag,
                            waited_ms: None,
                        });
                    }
                }
            }
        }
        if let Some(b) = behind.as_mut() {
            b.waited_ms = waited;
        }
        // The downstream auditor must have read its whole log after the copies were
        // known, on every partition that can hold them.
        let read = match auditors.get(&(edge.downstream.as_str(), dc)) {
            None => Err(format!("no progress from {}/{dc} yet", edge.downstream)),
            Some(down) => {
                let unread = |part: &Part| !(part.lag == Some(0) && part.measured_at() > copied_at);
                let not_read = if edge.preserves_partitions {
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
                match not_read {
                    Some(p) => Err(format!(
                        "{}/{dc} has not read partition {p} to its end since the replicator's evidence",
                        edge.downstream
                    )),
                    None => Ok(copied_at),
                }
            }
        };
        let rests_on = match evidence_tier {
            Some(tier) if !rests_on.is_empty() => {
                format!("the evidence of {tier}: {}", rests_on.join(", "))
            }
            _ => String::new(),
        };
        Some(Early::Evidence {
            in_flight,
            read,
            behind,
            rests_on,
        })
    }
}

impl Behind {
    /// The counted records it may hold back there (offsets up to `i64::MAX` pass
    /// validation: saturating).
    fn held(&self) -> i64 {
        self.counted_to
            .saturating_add(1)
            .saturating_sub(self.copied_to)
    }

    fn describe(&self, in_flight: u64) -> String {
        let lag = self.lag.map_or(String::new(), |l| {
            format!(", {l} records behind its log end")
        });
        let waited = self.waited_ms.map_or(String::new(), |w| {
            format!(
                "; the first record not copied was read upstream {} s ago or more",
                seconds(w)
            )
        });
        format!(
            "in flight: up to {in_flight} counted records not copied yet; the replicator has copied {} partition {} up to offset {}{lag}, the upstream counted this window there up to offset {}{waited}",
            self.datacenter, self.partition, self.copied_to, self.counted_to
        )
    }
}

impl Topology {
    /// The replication evidence among `progress` (one topic's) that rule 0 does not
    /// use, and why: each row of an evidence tier an edge names, checked against its
    /// edge's upstream auditor as [`Topology::early`] checks it. Progress older than
    /// `forget_after` is left out, as the engine leaves it out.
    pub fn refused_evidence<'p>(
        &self,
        progress: &'p [ProgressRow],
        now: i64,
    ) -> Vec<(&'p ProgressRow, EvidenceRefusal)> {
        let tiers: std::collections::BTreeSet<(&str, &str)> = self
            .edges
            .iter()
            .filter_map(|e| Some((e.evidence_tier.as_deref()?, e.upstream.as_str())))
            .collect();
        if tiers.is_empty() {
            return Vec::new();
        }
        let live = |r: &&ProgressRow| now.saturating_sub(r.received_at_ms) <= self.forget_after_ms;
        let positions: std::collections::HashMap<(&str, &str, i32), (i64, Option<i64>)> = progress
            .iter()
            .filter(live)
            .map(|r| {
                (
                    (r.tier.as_str(), r.datacenter.as_str(), r.partition),
                    (r.next_offset, r.lag),
                )
            })
            .collect();
        progress
            .iter()
            .filter(live)
            .filter_map(|r| {
                tiers
                    .iter()
                    .filter(|(t, _)| *t == r.tier)
                    .find_map(|&(_, upstream)| {
                        let up = positions
                            .get(&(upstream, r.datacenter.as_str(), r.partition))
                            .copied();
                        refusal(r.next_offset, r.emitted_at_ms, r.received_at_ms, up)
                    })
                    .map(|(why, _)| (r, why))
            })
            .collect()
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
        let (in_flight, read, behind, rests_on) = match self {
            Early::Unknown(why) => {
                return match verdict {
                    Verdict::Pending => (None, verdict, format!("{reason}; {why}")),
                    _ => (None, verdict, reason),
                }
            }
            Early::Evidence {
                in_flight,
                read,
                behind,
                rests_on,
            } => (in_flight, read, behind, rests_on),
        };
        // Proven missing: what the downstream lacks beyond all that may be in flight.
        let proven = expected.saturating_sub(observed).saturating_sub(in_flight);
        if let Ok(copied_at) = read {
            if proven > 0 && exceeds(proven, expected, &policy.thresholds) {
                let more = match in_flight {
                    0 => String::new(),
                    n => format!(" (and up to {n} more may still be in flight)"),
                };
                let copied = match edge.replicator {
                    Some(common::replication::Replicator::SameCluster) => "they were in the log",
                    _ => "the replicator had copied past them",
                };
                let rests_on = if rests_on.is_empty() {
                    String::new()
                } else {
                    format!(" ({rests_on})")
                };
                return (
                    Some(SoFar::Loss),
                    Verdict::Loss,
                    format!(
                        "proven before the window is final: at least {proven} of the {expected} messages counted upstream so far are missing downstream{more}; {copied} as of {}{rests_on} and the downstream has read its whole log since",
                        at(copied_at)
                    ),
                );
            }
        }
        match behind {
            Some(b) => {
                let overdue = edge
                    .replication_lag_objective_ms
                    .zip(b.waited_ms)
                    .is_some_and(|(objective, w)| w > objective);
                let why = b.describe(in_flight);
                match verdict {
                    Verdict::Pending if overdue => (Some(SoFar::InFlight), Verdict::Delayed, why),
                    Verdict::Pending => (Some(SoFar::InFlight), verdict, why),
                    _ => (Some(SoFar::InFlight), verdict, reason),
                }
            }
            None => match read {
                Ok(_) => (Some(SoFar::Ok), verdict, reason),
                Err(why) => match verdict {
                    Verdict::Pending => (None, verdict, format!("{reason}; copied; {why}")),
                    _ => (None, verdict, reason),
                },
            },
        }
    }
}
