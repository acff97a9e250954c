//! What the replicators have copied, as the readers read it and the reports publish
//! it, and what makes a position untrue: a recreated topic, a truncated log, a forged
//! sync.
//!
//! - The latest position read of a partition is the truth, not the largest: for
//!   MirrorMaker 2's offset syncs (a compacted topic keyed by topic-partition, read
//!   from its beginning) the latest record of a key in log order; for a consumer
//!   group, its latest committed offset. A position lower than the last is the
//!   replicator starting again (a recreated topic, a reset group, MirrorMaker 2
//!   restarting from an older commit): it replaces the positions before it, and the
//!   reset is counted (`position_backwards`).
//! - Checked against the log the auditor measured (its consumer's statistics: log
//!   start and high watermark per partition, and as of when they held): a replicator
//!   cannot have copied past the high watermark, so a position read by the time it was
//!   measured and past it is untrue — the log went back (an unclean leader election
//!   truncated it, or the topic was recreated) or the position was made up. The
//!   partition's evidence read by then is dropped (`past_log_end`); the same position
//!   read again (a commit that stays) is not recorded again. A position read after the
//!   measurement and past it, or of a partition whose log was not measured yet, is
//!   held back until a later measurement judges it.
//! - A log start that moved backwards is a recreated topic (retention and deletions
//!   only move it forwards): every partition's evidence of that topic is dropped
//!   (`log_start_backwards`). rdkafka 0.39 does not expose topic ids (only
//!   librdkafka's DescribeTopics admin call has them), so these two are the signals.
//! - Memory: a topic name longer than Kafka's 249 bytes is refused, and each reader
//!   keeps at most [`MAX_PARTITIONS`] partitions and [`MAX_BYTES`] bytes (each
//!   partition charged its topic name and a full queue of readings).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use audit_lib::TopicPartition;

/// Kafka's longest topic name.
pub(crate) const MAX_TOPIC_NAME: usize = 249;

/// Most partitions one reader keeps evidence for: an offset-syncs topic is writable
/// by others, and a flood of syncs for made-up partitions must not grow without
/// bound (past it, or past [`MAX_BYTES`], syncs for new partitions are counted as
/// `over_limit`).
const MAX_PARTITIONS: usize = 1_000_000;

/// Most bytes one reader's evidence takes, by [`ENTRY_BYTES`] and topic name per
/// partition: about 230 000 partitions of 100-byte names.
const MAX_BYTES: usize = 256 << 20;

/// Readings kept per partition while they wait to be published (a reader reads every
/// 250 ms or more: 64 cover the default evidence age many times over).
const MAX_READINGS: usize = 64;

/// What a partition's evidence takes at most besides its topic name: the map's slot
/// and key, the entry and a full queue of readings.
const ENTRY_BYTES: usize = 128 + MAX_READINGS * std::mem::size_of::<(i64, i64)>();

/// Why a position was dropped or refused: the `reason` label of
/// `kafka_audit_replication_evidence_dropped_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DropReason {
    /// A position lower than the last: the replicator started again; the positions
    /// before it are dropped (the lower one is kept).
    PositionBackwards,
    /// Past the log end the auditor measured after it was read.
    PastLogEnd,
    /// The partition's log start moved backwards: the topic was recreated.
    LogStartBackwards,
    /// A topic name longer than Kafka allows (249 bytes).
    TopicNameTooLong,
    /// An offset sync of a topic this auditor does not audit.
    NotAudited,
    /// A new partition past [`MAX_PARTITIONS`] or [`MAX_BYTES`].
    OverLimit,
}

impl DropReason {
    #[cfg(test)]
    pub(crate) const ALL: [DropReason; 6] = [
        DropReason::PositionBackwards,
        DropReason::PastLogEnd,
        DropReason::LogStartBackwards,
        DropReason::TopicNameTooLong,
        DropReason::NotAudited,
        DropReason::OverLimit,
    ];

    /// The label value (dashboards and alerts match it: never rename one).
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            DropReason::PositionBackwards => "position_backwards",
            DropReason::PastLogEnd => "past_log_end",
            DropReason::LogStartBackwards => "log_start_backwards",
            DropReason::TopicNameTooLong => "topic_name_too_long",
            DropReason::NotAudited => "not_audited",
            DropReason::OverLimit => "over_limit",
        }
    }
}

/// A partition's log as the auditor last measured it: its start and high watermark,
/// and a time by which they held (`at`: the high watermark was at most `end` then).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Measured {
    pub(crate) low: i64,
    pub(crate) end: i64,
    pub(crate) at: i64,
}

/// Evidence dropped while a report took it ([`Evidence::of`]): the position (for
/// `log_start_backwards`, the new log start) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dropped {
    pub(crate) partition: TopicPartition,
    pub(crate) position: i64,
    pub(crate) reason: DropReason,
}

/// One partition's evidence.
#[derive(Debug, Default)]
struct Partition {
    /// Each next offset to copy read lately with when it was first read (epoch ms),
    /// oldest first; rising (a lower one replaces them all).
    readings: VecDeque<(i64, i64)>,
    /// The log start last measured.
    low: Option<i64>,
    /// A position dropped as past the log end: read again (a commit that stays), it is
    /// neither kept nor counted again.
    refused: Option<i64>,
}

/// What one replicator has copied, per partition, and the bytes it is charged.
#[derive(Debug, Default)]
struct Slot {
    partitions: HashMap<TopicPartition, Partition>,
    bytes: usize,
}

/// The replication evidence of every configured replicator, shared between the
/// readers (writers) and the reports (readers).
#[derive(Clone, Default)]
pub(crate) struct Evidence {
    /// One slot per `[[audit.replicators]]` entry, in order.
    copied: Arc<Vec<Mutex<Slot>>>,
    /// The partitions this instance audits now: the consumer-group readers ask for
    /// these.
    wanted: Arc<Mutex<Vec<TopicPartition>>>,
}

impl Evidence {
    pub(crate) fn new(replicators: usize) -> Evidence {
        Evidence {
            copied: Arc::new((0..replicators).map(|_| Mutex::default()).collect()),
            wanted: Arc::default(),
        }
    }

    /// The partitions audited now (set at every report).
    pub(crate) fn want(&self, partitions: Vec<TopicPartition>) {
        *self.wanted.lock().unwrap_or_else(|e| e.into_inner()) = partitions;
    }

    pub(crate) fn wanted(&self) -> Vec<TopicPartition> {
        self.wanted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What replicator `i` had copied of `partitions` as of `until` (epoch ms): per
    /// partition the latest position read at or before it, and when it was first
    /// read — (partition, next offset to copy, read at). Older readings are let go.
    /// Each partition's evidence is first checked against its log as the auditor
    /// measured it (None: not measured yet, nothing published); what that drops is
    /// returned beside, to be counted.
    ///
    /// Evidence is published `[audit] replication_evidence_age` late on purpose: the
    /// downstream auditor's "read everything" is dated by its statistics, seconds
    /// behind its reports, and can only prove a loss with evidence older than that.
    pub(crate) fn of(
        &self,
        i: usize,
        partitions: &[(TopicPartition, Option<Measured>)],
        until: i64,
    ) -> (Vec<(TopicPartition, i64, i64)>, Vec<Dropped>) {
        let Some(slot) = self.copied.get(i) else {
            return Default::default();
        };
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        let mut dropped = Vec::new();
        // A log start that moved backwards: the topic is a new one, none of the
        // evidence of its partitions (measured now or not) is about it.
        let mut recreated = HashSet::new();
        for (tp, m) in partitions {
            let (Some(m), Some(p)) = (m, slot.partitions.get(tp)) else {
                continue;
            };
            if p.low.is_some_and(|low| m.low < low) && recreated.insert(tp.topic.as_str()) {
                dropped.push(Dropped {
                    partition: tp.clone(),
                    position: m.low,
                    reason: DropReason::LogStartBackwards,
                });
            }
        }
        if !recreated.is_empty() {
            for (tp, p) in &mut slot.partitions {
                if recreated.contains(tp.topic.as_str()) {
                    *p = Partition::default();
                }
            }
        }
        let mut copied = Vec::new();
        for (tp, m) in partitions {
            let Some(p) = slot.partitions.get_mut(tp) else {
                continue;
            };
            if let Some(m) = m {
                p.low = Some(m.low);
                // Read by the time the log end was measured: at most that end.
                let judged = p.readings.iter().take_while(|&&(_, at)| at <= m.at).count();
                if let Some(&(o, _)) = judged.checked_sub(1).and_then(|j| p.readings.get(j)) {
                    if o > m.end {
                        // The highest judged one is past it (readings rise): the log
                        // went back, or positions were made up; none read by then
                        // holds.
                        p.readings.drain(..judged);
                        p.refused = Some(o);
                        dropped.push(Dropped {
                            partition: tp.clone(),
                            position: o,
                            reason: DropReason::PastLogEnd,
                        });
                    }
                }
            }
            let n = p
                .readings
                .iter()
                .take_while(|&&(_, at)| at <= until)
                .count();
            // Keep the one in use: the next ones become due after it.
            p.readings.drain(..n.saturating_sub(1));
            let Some(&(o, at)) = p.readings.front().filter(|&&(_, at)| at <= until) else {
                continue;
            };
            // Past the end measured before it was read, or no end measured yet: not
            // judged yet, held back.
            if m.is_none_or(|m| o > m.end) {
                continue;
            }
            copied.push((tp.clone(), o, at));
        }
        (copied, dropped)
    }

    /// Records that replicator `i` had copied `tp` up to `next` (the next offset to
    /// copy) when read at `at`. Some: counted as that (`PositionBackwards` is kept,
    /// replacing the positions before it; the others are refused).
    pub(crate) fn record(
        &self,
        i: usize,
        tp: TopicPartition,
        next: i64,
        at: i64,
    ) -> Option<DropReason> {
        if tp.topic.len() > MAX_TOPIC_NAME {
            return Some(DropReason::TopicNameTooLong);
        }
        let mut slot = self.copied[i].lock().unwrap_or_else(|e| e.into_inner());
        let slot = &mut *slot;
        if !slot.partitions.contains_key(&tp) {
            let cost = ENTRY_BYTES + tp.topic.len();
            if slot.partitions.len() >= MAX_PARTITIONS || slot.bytes + cost > MAX_BYTES {
                return Some(DropReason::OverLimit);
            }
            slot.bytes += cost;
        }
        let p = slot.partitions.entry(tp).or_default();
        if p.refused == Some(next) {
            return None;
        }
        p.refused = None;
        match p.readings.back() {
            // The same position read again keeps the time it was first read (copied
            // by then: the tighter evidence).
            Some(&(o, _)) if o == next => None,
            // The replicator started again: what it copied before is not evidence
            // of what it copies now.
            Some(&(o, _)) if next < o => {
                p.readings.clear();
                p.readings.push_back((next, at));
                Some(DropReason::PositionBackwards)
            }
            _ => {
                if p.readings.len() >= MAX_READINGS {
                    p.readings.pop_front();
                }
                p.readings.push_back((next, at));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition::new(topic, partition)
    }

    fn measured(low: i64, end: i64, at: i64) -> Option<Measured> {
        Some(Measured { low, end, at })
    }

    /// A log measured before every reading, longer than any position.
    const LONG: Option<Measured> = Some(Measured {
        low: 0,
        end: i64::MAX,
        at: 0,
    });

    /// `of` for `tp` alone.
    fn of(
        e: &Evidence,
        tp: &TopicPartition,
        m: Option<Measured>,
        until: i64,
    ) -> (Vec<(TopicPartition, i64, i64)>, Vec<Dropped>) {
        e.of(0, &[(tp.clone(), m)], until)
    }

    #[test]
    fn evidence_is_the_latest_copy_read_by_then_dated_by_its_first_reading() {
        let e = Evidence::new(1);
        let tp = tp("t", 0);
        let copied = |until| of(&e, &tp, LONG, until).0;
        assert_eq!(e.record(0, tp.clone(), 10, 100), None);
        assert_eq!(
            e.record(0, tp.clone(), 10, 150),
            None,
            "same position again"
        );
        assert_eq!(e.record(0, tp.clone(), 12, 300), None);
        assert_eq!(copied(99), vec![], "nothing read by then");
        assert_eq!(copied(250), vec![(tp.clone(), 10, 100)]);
        assert_eq!(copied(300), vec![(tp.clone(), 12, 300)]);
        // Older readings are gone once a later one is due.
        assert_eq!(copied(250), vec![]);
        assert_eq!(e.of(1, &[], 0), Default::default());
        for x in 13..13 + MAX_READINGS as i64 + 10 {
            e.record(0, tp.clone(), x, 400 + x);
        }
        assert_eq!(
            e.copied[0].lock().unwrap().partitions[&tp].readings.len(),
            MAX_READINGS
        );
    }

    /// M3: a lower position is the replicator starting again (a recreated topic, a
    /// reset group), or MirrorMaker 2's later sync of a key read from the beginning
    /// of its compacted topic: it replaces what was read before. Before the fix, the
    /// first (largest) position stayed: `of` gave 1 000 000.
    #[test]
    fn a_lower_position_replaces_the_ones_before_it() {
        let e = Evidence::new(1);
        let tp = tp("t", 0);
        assert_eq!(e.record(0, tp.clone(), 1_000_000, 100), None);
        assert_eq!(of(&e, &tp, LONG, 150).0, vec![(tp.clone(), 1_000_000, 100)]);
        assert_eq!(
            e.record(0, tp.clone(), 5, 200),
            Some(DropReason::PositionBackwards)
        );
        assert_eq!(e.record(0, tp.clone(), 5, 250), None, "read again");
        assert_eq!(of(&e, &tp, LONG, 150).0, vec![], "not read by then");
        assert_eq!(of(&e, &tp, LONG, 300).0, vec![(tp.clone(), 5, 200)]);
        assert_eq!(e.record(0, tp.clone(), 9, 400), None, "rising again");
        assert_eq!(of(&e, &tp, LONG, 400).0, vec![(tp.clone(), 9, 400)]);
    }

    /// A position read by the time the log end was measured and past it is dropped
    /// and counted once: the same position read again (a commit that stays) is not
    /// kept again. One read after the measurement waits for a later one, and nothing
    /// is published of a partition whose log was not measured yet.
    #[test]
    fn a_position_past_the_measured_log_end_is_dropped_once() {
        let e = Evidence::new(1);
        let tp = tp("t", 0);
        e.record(0, tp.clone(), 40, 100);
        e.record(0, tp.clone(), 5_000, 200);
        assert_eq!(of(&e, &tp, None, 1_000), Default::default(), "not measured");
        let (copied, dropped) = of(&e, &tp, measured(0, 50, 300), 1_000);
        assert_eq!(copied, vec![]);
        assert_eq!(
            dropped,
            vec![Dropped {
                partition: tp.clone(),
                position: 5_000,
                reason: DropReason::PastLogEnd
            }]
        );
        assert_eq!(e.record(0, tp.clone(), 5_000, 400), None, "the same again");
        assert_eq!(of(&e, &tp, measured(0, 50, 500), 1_000), Default::default());
        // A new position, within the end: evidence again.
        assert_eq!(e.record(0, tp.clone(), 45, 600), None);
        assert_eq!(
            of(&e, &tp, measured(0, 50, 700), 1_000).0,
            vec![(tp.clone(), 45, 600)]
        );
        // Read after the end was measured, past it: held back, not dropped yet.
        e.record(0, tp.clone(), 60, 800);
        assert_eq!(of(&e, &tp, measured(0, 50, 700), 1_000), Default::default());
        // A later measurement covers it.
        assert_eq!(
            of(&e, &tp, measured(0, 70, 900), 1_000).0,
            vec![(tp.clone(), 60, 800)]
        );
        // Read after the measurement, within its end: evidence.
        e.record(0, tp.clone(), 65, 950);
        assert_eq!(
            of(&e, &tp, measured(0, 80, 700), 1_000).0,
            vec![(tp.clone(), 65, 950)]
        );
    }

    /// A log start that moved backwards is a recreated topic: the evidence of every
    /// partition of it is dropped, counted once per topic; other topics keep theirs.
    #[test]
    fn a_log_start_moved_backwards_drops_the_topics_evidence() {
        let e = Evidence::new(1);
        let (a0, a1, b0) = (tp("a", 0), tp("a", 1), tp("b", 0));
        for p in [&a0, &a1, &b0] {
            e.record(0, p.clone(), 1_500, 100);
        }
        let ends = |low_a0| {
            vec![
                (a0.clone(), measured(low_a0, 2_000, 200)),
                (b0.clone(), measured(1_000, 2_000, 200)),
            ]
        };
        let (copied, dropped) = e.of(0, &ends(1_000), 300);
        assert_eq!(copied.len(), 2);
        assert!(dropped.is_empty());
        let (copied, dropped) = e.of(0, &ends(0), 300);
        assert_eq!(copied, vec![(b0.clone(), 1_500, 100)]);
        assert_eq!(
            dropped,
            vec![Dropped {
                partition: a0.clone(),
                position: 0,
                reason: DropReason::LogStartBackwards
            }]
        );
        // a1, not measured by this instance, lost its evidence too.
        assert_eq!(e.of(0, &[(a1.clone(), LONG)], 300).0, vec![]);
        // The new log start is the one compared from now on.
        e.record(0, a0.clone(), 3, 400);
        assert_eq!(
            e.of(0, &ends(0), 500),
            (vec![(a0.clone(), 3, 400), (b0, 1_500, 100)], vec![])
        );
    }

    /// Memory: topic names longer than Kafka's limit are refused, and a reader's
    /// partitions are bounded by bytes as well as by count.
    #[test]
    fn long_topic_names_and_partitions_past_the_byte_bound_are_refused() {
        let e = Evidence::new(1);
        let long = "x".repeat(MAX_TOPIC_NAME + 1);
        assert_eq!(
            e.record(0, tp(&long, 0), 1, 1),
            Some(DropReason::TopicNameTooLong)
        );
        assert_eq!(e.record(0, tp(&long[1..], 0), 1, 1), None, "249 bytes");
        let name = "y".repeat(MAX_TOPIC_NAME);
        let fit = MAX_BYTES / (ENTRY_BYTES + MAX_TOPIC_NAME);
        let mut refused = 0;
        for p in 0..fit as i32 + 10 {
            if e.record(0, tp(&name, p), 1, 1) == Some(DropReason::OverLimit) {
                refused += 1;
            }
        }
        // `fit` partitions fit, the 249-byte one above among them.
        assert_eq!(refused, 11);
        let slot = e.copied[0].lock().unwrap();
        assert!(slot.bytes <= MAX_BYTES, "{}", slot.bytes);
        drop(slot);
        // A partition already kept goes on being recorded.
        assert_eq!(e.record(0, tp(&name, 0), 2, 2), None);
    }

    #[test]
    fn drop_reason_labels_are_stable() {
        let labels = DropReason::ALL.map(DropReason::as_str);
        assert_eq!(
            labels,
            [
                "position_backwards",
                "past_log_end",
                "log_start_backwards",
                "topic_name_too_long",
                "not_audited",
                "over_limit"
            ]
        );
    }
}
