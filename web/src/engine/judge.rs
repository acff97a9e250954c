//! The rules of `mod.rs`'s list applied per topic, edge, downstream datacenter and
//! window ([`Topology::evaluate_topic`]).

use std::collections::{BTreeMap, BTreeSet};

use super::*;

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
    /// is not final. Read progress first, then the staged increments, then the rows
    /// (`crate::judging` reads so): increments that came with the progress are then
    /// in one of the two.
    pub fn evaluate_topic_staged(
        &self,
        topic: &str,
        windows: &[i64],
        rows: &[WindowRow],
        progress: &[ProgressRow],
        staged: &Staged,
        now: i64,
    ) -> Vec<EdgeWindow> {
        let inputs = TopicInputs {
            topic,
            rows,
            progress,
            staged,
            now,
        };
        self.evaluate_windows(&inputs, windows)
    }

    /// Evaluates every edge of the topic of `inputs` for each window start in
    /// `windows` (rows of other windows are ignored).
    pub fn evaluate_windows(&self, inputs: &TopicInputs, windows: &[i64]) -> Vec<EdgeWindow> {
        let topic = self.prepare(inputs);
        let mut out = Vec::new();
        for &w in windows {
            let w = topic.window(w);
            for edge in &self.edges {
                for dc in self.downstream_datacenters(edge, w.rows, w.auditors) {
                    out.push(self.evaluate_edge_at(&w, edge, dc));
                }
            }
        }
        out
    }

    /// Downstream datacenters to judge on `edge`: the mapping's targets, or for a
    /// one-to-one edge every datacenter either tier has data or progress in.
    pub(super) fn downstream_datacenters<'a>(
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

    /// Evaluates `edge` on each window of `windows` for downstream datacenter
    /// `datacenter`, whether or not it has data or progress there: the completeness
    /// gate asks about a datacenter by name, and "nothing arrived" is an answer too.
    pub fn evaluate_edge_datacenter(
        &self,
        inputs: &TopicInputs,
        edge: &Edge,
        datacenter: &str,
        windows: &[i64],
    ) -> Vec<EdgeWindow> {
        let topic = self.prepare(inputs);
        windows
            .iter()
            .map(|&w| self.evaluate_edge_at(&topic.window(w), edge, datacenter.to_string()))
            .collect()
    }

    /// Every rule, for `edge` in downstream datacenter `dc` on the window of `w`.
    fn evaluate_edge_at(&self, w: &WindowInputs, edge: &Edge, dc: String) -> EdgeWindow {
        let WindowInputs {
            topic,
            window_start,
            rows,
            staged,
            policy,
            now,
            ..
        } = *w;
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
            w,
            edge,
            &dc,
            &UpstreamEvidence::of(edge, &up_dcs, rows),
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
        } else if let Some((v, why)) = self.auditors_block(w, edge, &dc, &up_dcs, settle_at) {
            (Lifecycle::Settling, v, why)
        } else if let Some((v, why)) = unproven {
            (Lifecycle::Settling, v, why)
        } else if let Some((tier, sdc)) = staged_end(edge, &dc, &up_dcs, staged, window_start) {
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
        // Rule 0: before the window is final, the replicator's evidence.
        let (so_far, verdict, reason) = match lifecycle {
            Lifecycle::Final => (None, verdict, reason),
            _ => match self.early(w, edge, &dc, &up_dcs) {
                Some(e) => e.judge(edge, up.count, down.count, policy, (verdict, reason)),
                None => (None, verdict, reason),
            },
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
            so_far,
            upstream_latency: percentiles(&up.latency),
            downstream_latency: down_latency,
            upstream_observation_time_count: up.observation_time_count,
            downstream_observation_time_count: down.observation_time_count,
            upstream_delivery_failed_count: up.delivery_failed_count,
        }
    }

    /// `Some` when an auditor of this edge has not read past `settle_at`.
    fn auditors_block(
        &self,
        w: &WindowInputs,
        edge: &Edge,
        dc: &str,
        up_dcs: &[String],
        settle_at: i64,
    ) -> Option<(Verdict, String)> {
        let (rows, auditors, now) = (w.rows, w.auditors, w.now);
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
    fn evidence_blocks(
        &self,
        w: &WindowInputs,
        edge: &Edge,
        dc: &str,
        wanted: &UpstreamEvidence,
        evidence: &mut Evidence,
    ) -> Option<(Verdict, String)> {
        let (auditors, policy, now) = (w.auditors, w.policy, w.now);
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

    pub(super) fn judge(
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

/// A (tier, datacenter) of `edge` in downstream datacenter `dc` with increments of the
/// window the store holds but has not added up yet (rule 5).
pub(super) fn staged_end<'a>(
    edge: &'a Edge,
    dc: &'a str,
    up_dcs: &'a [String],
    staged: &Staged,
    window_start: i64,
) -> Option<(&'a str, &'a str)> {
    std::iter::once((edge.downstream.as_str(), dc))
        .chain(up_dcs.iter().map(|u| (edge.upstream.as_str(), u.as_str())))
        .find(|(t, d)| staged.contains(&(t.to_string(), d.to_string(), window_start)))
}
