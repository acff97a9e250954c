//! The auditor's decisions, as plain data and functions (docs/design.md §5): what an
//! assignment starts from, what a revoke forgets, what a report holds, how progress
//! is dated, and what the restart rule does with a pending WAL entry. Nothing here
//! talks to Kafka, reads a clock or touches a file: the shell in `kafka/` does the
//! I/O and passes every answer (committed offsets, statistics, positions, `now`) in.

pub(crate) mod partitions;
pub(crate) mod progress;
pub(crate) mod restart;

use std::collections::{HashMap, HashSet};

use audit_lib::{AuditMessage, Identity, PartitionProgress, TopicPartition};

pub(crate) use partitions::{EndsSnapshot, LogEnds, Parts, Position, Positions};
pub(crate) use progress::Dating;
pub(crate) use restart::{Committed, Decision, Origin, RestartRule};

use crate::wal::CommittedRange;

/// A range start whose committed offset could not be read (never equal to a real
/// committed offset, so such a range is never resent).
pub(crate) const UNKNOWN_START: i64 = -1;

/// Why a report is made.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reason {
    Interval,
    Revoke,
    Shutdown,
}

impl Reason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reason::Interval => "interval",
            Reason::Revoke => "revoke",
            Reason::Shutdown => "shutdown",
        }
    }
}

/// A report as it is to be written to the WAL (docs/design.md §5 steps 1-2): the drained
/// audit messages plus one progress message per topic, and the offset range of every
/// owned partition read since the previous report.
#[derive(Debug)]
pub(crate) struct ReportDraft {
    pub(crate) messages: Vec<AuditMessage>,
    pub(crate) ranges: Vec<CommittedRange>,
    /// The known lag of every partition in the progress (for the lag gauges).
    pub(crate) lags: Vec<(TopicPartition, i64)>,
    /// Whether the draft is worth a WAL entry (see [`Auditor::draft`]).
    pub(crate) write: bool,
    /// The latest record time read per partition since the previous report: kept
    /// only once the entry is written ([`Auditor::written`]).
    latest: HashMap<TopicPartition, i64>,
}

/// Where a partition is read again from after a report that could not be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rewind {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    /// The offset to seek to; None: the log start (no committed offset).
    pub(crate) to: Option<i64>,
}

/// The auditor's state: the partitions it owns and what it has read and reported of
/// them, and whether pending WAL entries wait for the restart rule.
pub(crate) struct Auditor {
    identity: Identity,
    /// Whether a partition without a committed offset is read from its log start
    /// (`auto.offset.reset` earliest, the default).
    from_log_start: bool,
    parts: Parts,
    /// Partitions this instance owns now.
    assigned: HashSet<TopicPartition>,
    /// Pending entries wait for the restart rule (restart.rs): entries of an earlier
    /// consumer session until the next assignment, or entries whose transaction is
    /// ambiguous in this session until a mid-run reconcile settles them.
    pub(crate) unsettled: Option<Origin>,
    paused: bool,
    dating: Dating,
}

impl Auditor {
    /// `pending`: the WAL holds pending entries (of an earlier incarnation).
    pub(crate) fn new(
        identity: Identity,
        from_log_start: bool,
        dating: Dating,
        pending: bool,
    ) -> Auditor {
        Auditor {
            identity,
            from_log_start,
            parts: Parts::default(),
            assigned: HashSet::new(),
            unsettled: pending.then_some(Origin::EarlierSession),
            paused: false,
            dating,
        }
    }

    pub(crate) fn assigned(&self) -> &HashSet<TopicPartition> {
        &self.assigned
    }

    #[cfg(test)]
    pub(crate) fn parts(&self) -> &Parts {
        &self.parts
    }

    pub(crate) fn paused(&self) -> bool {
        self.paused
    }

    #[cfg(test)]
    pub(crate) fn dating(&self) -> &Dating {
        &self.dating
    }

    /// The first half of an assignment: `partitions` are owned from now on (the
    /// restart rule, applied next, resends only entries of owned partitions).
    pub(crate) fn assign(&mut self, partitions: &[TopicPartition]) {
        self.assigned.extend(partitions.iter().cloned());
    }

    /// The second half, once the pending entries are settled: each partition's range
    /// starts at its committed offset, which is where the assignment starts reading.
    /// Unknown (the read failed): the range's start says so, and the restart rule
    /// never resends it. `now`: when the assignment came.
    pub(crate) fn start_reading(
        &mut self,
        partitions: &[TopicPartition],
        committed: &HashMap<TopicPartition, Committed>,
        now: i64,
    ) {
        self.unsettled = None;
        self.paused = false;
        self.dating.assigned(now);
        for tp in partitions {
            let start = match committed.get(tp) {
                Some(Committed::At(o)) => Some(*o),
                Some(Committed::None) => None,
                Some(Committed::Error) | None => Some(UNKNOWN_START),
            };
            let st = self
                .parts
                .entry(tp.topic.clone())
                .or_default()
                .entry(tp.partition)
                .or_default();
            st.start = start;
            st.next = None;
            st.position = None;
        }
        self.dating.restore(&mut self.parts);
    }

    /// A revoke (after its report, if not `lost`): every partition goes, and with it
    /// whatever waited for the restart rule (the shell discarded what was left).
    /// Returns the partitions given up.
    pub(crate) fn revoke(&mut self, lost: bool) -> Vec<TopicPartition> {
        self.unsettled = None;
        self.dating.revoked(&self.parts, &self.assigned, lost);
        self.parts.clear();
        self.assigned.drain().collect()
    }

    /// The consumer was lost: nothing counted since the last report can be committed
    /// any more; pending entries (`pending`) wait for the next assignment. Returns the
    /// partitions given up.
    pub(crate) fn consumer_lost(&mut self, pending: bool) -> Vec<TopicPartition> {
        self.parts.clear();
        self.dating.consumer_lost();
        self.paused = false;
        self.unsettled = pending.then_some(Origin::EarlierSession);
        self.assigned.drain().collect()
    }

    /// Takes the log ends of a statistics snapshot ([`Dating::take`]).
    pub(crate) fn take_ends(&mut self, snap: &EndsSnapshot) {
        self.dating.take(&mut self.parts, snap, self.paused);
    }

    /// Consumption paused (WAL back-pressure) or resumed at `now`.
    pub(crate) fn set_paused(&mut self, paused: bool, now: i64) {
        if !paused {
            self.dating.resumed(now);
        }
        self.paused = paused;
    }

    /// The consumer's position of each partition (None: invalid, nothing polled since
    /// the assignment or a seek — unknown, never an earlier value, which a seek back
    /// would make wrong). Taken right before a report, so it covers exactly what was
    /// polled (messages and, unlike the drained offsets, transaction markers).
    pub(crate) fn set_positions<'a>(
        &mut self,
        positions: impl IntoIterator<Item = (&'a str, i32, Option<i64>)>,
    ) {
        for (topic, partition, position) in positions {
            if let Some(part) = self
                .parts
                .get_mut(topic)
                .and_then(|t| t.get_mut(&partition))
            {
                part.position = position;
            }
        }
    }

    /// The restart rule for the pending entries, given the committed offsets read.
    pub(crate) fn restart_rule(
        &self,
        origin: Origin,
        committed: HashMap<TopicPartition, Committed>,
    ) -> RestartRule {
        RestartRule::new(origin, committed, self.assigned.clone())
    }

    /// A report made at `now` from the drained `messages` and `positions`. Not worth
    /// writing: nothing at all; nothing but progress outside the interval reports;
    /// or nothing but progress while entries are `stuck` pending (the audit topic
    /// unwritable: progress alone would only grow the WAL, and the stuck entries
    /// carry progress already).
    pub(crate) fn draft(
        &mut self,
        mut messages: Vec<AuditMessage>,
        positions: Positions,
        now: i64,
        reason: Reason,
        stuck: bool,
    ) -> ReportDraft {
        // The latest record times read since the last report are what this report's
        // increments count: kept only once its WAL entry is written (after a failed
        // write the records are read again, and until then no progress may claim them).
        let mut latest: HashMap<TopicPartition, i64> = HashMap::new();
        for pos in positions {
            if let Some(t) = pos.latest {
                latest.insert(TopicPartition::new(pos.topic.as_str(), pos.partition), t);
            }
            let st = self
                .parts
                .entry(pos.topic)
                .or_default()
                .entry(pos.partition)
                .or_default();
            st.next = Some(pos.next);
            if pos.watermark.is_some() {
                st.record_time = pos.watermark;
                st.log_append_time = pos.log_append_time;
            }
        }
        let dated = self.dating.date(now);
        let mut ranges = Vec::new();
        let mut lags = Vec::new();
        for (topic, parts) in self.parts.iter_mut() {
            let mut progress = Vec::new();
            for (&partition, st) in parts.iter_mut() {
                let tp = TopicPartition::new(topic.as_str(), partition);
                if !self.assigned.contains(&tp) {
                    continue;
                }
                if let Some(end) = st.next {
                    ranges.push(CommittedRange {
                        topic: topic.clone(),
                        partition,
                        start: st.start,
                        end,
                    });
                }
                if let Some((next, lag)) = st.progress(self.from_log_start) {
                    st.note_read(next, now);
                    if let Some(lag) = lag {
                        lags.push((tp.clone(), lag));
                    }
                    progress.push(PartitionProgress {
                        partition,
                        next_offset: next,
                        record_time: st.record_time,
                        lag,
                        max_record_time: st.latest_record_time(latest.get(&tp).copied()),
                        log_append_time: st.log_append_time,
                    });
                }
            }
            if !progress.is_empty() {
                messages.push(AuditMessage::progress(
                    &self.identity,
                    topic.clone(),
                    progress,
                    dated,
                ));
            }
        }
        let progress_only = messages.iter().all(|m| m.as_progress().is_some());
        let write = !(ranges.is_empty()
            && ((progress_only && !matches!(reason, Reason::Interval))
                || messages.is_empty()
                || (stuck && progress_only)));
        ReportDraft {
            messages,
            ranges,
            lags,
            write,
            latest,
        }
    }

    /// Progress messages of a replicator's evidence tier (rule 0, docs/design.md §6): for each
    /// partition this instance owns that `copied` names, the next offset the
    /// replicator will copy, its lag behind the log end the consumer last saw, and as
    /// `record_time` by when this auditor had read that offset (null: not read yet);
    /// dated by the latest read among them (every one holds as of then: copies stay).
    pub(crate) fn evidence(
        &self,
        tier: &str,
        copied: Vec<(TopicPartition, i64, i64)>,
    ) -> Vec<AuditMessage> {
        let identity = Identity::new(tier, &self.identity.datacenter, &self.identity.host);
        let mut by_topic: std::collections::BTreeMap<String, (i64, Vec<PartitionProgress>)> =
            Default::default();
        for (tp, next, at) in copied {
            if !self.assigned.contains(&tp) {
                continue;
            }
            let st = self
                .parts
                .get(tp.topic.as_str())
                .and_then(|t| t.get(&tp.partition));
            let ends = st.and_then(|st| st.ends);
            let e = by_topic.entry(tp.topic).or_insert((i64::MIN, Vec::new()));
            e.0 = e.0.max(at);
            e.1.push(PartitionProgress {
                partition: tp.partition,
                next_offset: next,
                // By when this auditor had read the first record not copied yet: how
                // long the replicator has held it back, at least.
                record_time: st.and_then(|st| st.read_by(next)),
                lag: ends.map(|e| (e.end - next).max(0)),
                max_record_time: None,
                log_append_time: false,
            });
        }
        by_topic
            .into_iter()
            .map(|(topic, (at, mut partitions))| {
                partitions.sort_by_key(|p| p.partition);
                AuditMessage::progress(&identity, topic, partitions, at)
            })
            .collect()
    }

    /// The log ends of an owned partition as the consumer last saw them, and a time by
    /// which its high watermark was at most that end (the replication evidence is
    /// checked against them). None before its first statistics.
    pub(crate) fn measured(&self, tp: &TopicPartition) -> Option<(LogEnds, i64)> {
        let ends = self
            .parts
            .get(tp.topic.as_str())?
            .get(&tp.partition)?
            .ends?;
        Some((ends, self.dating.ends_at()?))
    }

    /// The draft's WAL entry is written: every partition's range starts at the
    /// entry's end, and its latest record times are reported.
    pub(crate) fn written(&mut self, draft: &ReportDraft) {
        for r in &draft.ranges {
            if let Some(st) = self
                .parts
                .get_mut(&r.topic)
                .and_then(|t| t.get_mut(&r.partition))
            {
                st.start = Some(r.end);
                st.next = None;
            }
        }
        for (tp, &t) in &draft.latest {
            if let Some(st) = self
                .parts
                .get_mut(tp.topic.as_str())
                .and_then(|p| p.get_mut(&tp.partition))
            {
                st.max_record_time = st.max_record_time.max(Some(t));
            }
        }
    }

    /// After a report whose WAL entry could not be written: its drained counts are
    /// lost, so every owned partition it covered is read again from the start of its
    /// unreported range (the end of the last entry written, or the committed offset).
    /// None when a start is unknown: the consumer must then be recreated, which
    /// restarts from the committed offsets.
    pub(crate) fn rewind(&mut self) -> Option<Vec<Rewind>> {
        let mut seeks = Vec::new();
        for (topic, parts) in &mut self.parts {
            for (&partition, st) in parts.iter_mut() {
                if st.next.take().is_none()
                    || !self
                        .assigned
                        .contains(&TopicPartition::new(topic.as_str(), partition))
                {
                    continue;
                }
                let to = match st.start {
                    Some(o) if o >= 0 => Some(o),
                    // No committed offset: consumption began at the log start.
                    None => None,
                    Some(_) => return None,
                };
                st.position = None;
                seeks.push(Rewind {
                    topic: topic.clone(),
                    partition,
                    to,
                });
            }
        }
        Some(seeks)
    }
}

#[cfg(test)]
mod tests;
