//! The restart rule (docs/design.md §5): what to do with a pending WAL entry, given the
//! group's committed offsets and the partitions this instance owns. Pure: the I/O
//! (reading offsets, resending, marking the WAL) is the caller's.
//!
//! In exactly-once mode an entry's messages and its end offsets are committed in one
//! transaction, so for each of its partitions "committed = start" means it was not
//! published, "committed = end" that it was, and anything else that someone else
//! moved on (and recounts). Two kinds of pending entries get different rules:
//! - **earlier session**: left by a previous incarnation, or by a consumer that was
//!   lost or revoked. They are settled when partitions are assigned, before
//!   consumption starts at the committed offsets: resend the ones still at their
//!   start, mark the published ones, and discard everything else, including every
//!   entry whose offsets cannot be read: whoever owns the partitions recounts it.
//! - **ambiguous in this session**: a transaction of this consumer failed in a way
//!   that leaves its outcome unknown (a recreated producer). The consumer is already
//!   past these entries, so discarding one would lose its counts: one that is neither
//!   published nor resendable (or whose offsets cannot be read) is kept, and it and
//!   every later entry wait for the next attempt or the next revoke.

use std::collections::{HashMap, HashSet};

use audit_lib::TopicPartition;

use crate::wal::CommittedRange;

/// A partition's committed offset, as the offset read reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Committed {
    /// The group has no committed offset for the partition.
    None,
    At(i64),
    /// The read failed (for the whole request or this partition): unknown.
    Error,
}

/// Where the pending entries come from (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    EarlierSession,
    AmbiguousThisSession,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Its offsets are committed: it was published; mark it so.
    AlreadyPublished,
    /// Nothing of it was published and this instance owns its partitions: send it
    /// (same UUIDs) with its offsets.
    Resend,
    /// Never send it: its partitions are recounted from the committed offsets.
    Discard,
    /// Leave it and every later entry pending (mid-run only).
    Keep,
}

/// The rule for one reconcile: the committed offsets read once, updated as entries
/// are resent so that a chain of entries settles in order.
pub(crate) struct RestartRule {
    origin: Origin,
    committed: HashMap<TopicPartition, Committed>,
    owned: HashSet<TopicPartition>,
}

impl RestartRule {
    pub(crate) fn new(
        origin: Origin,
        committed: HashMap<TopicPartition, Committed>,
        owned: HashSet<TopicPartition>,
    ) -> RestartRule {
        RestartRule {
            origin,
            committed,
            owned,
        }
    }

    fn at(&self, r: &CommittedRange) -> Committed {
        // A partition the read did not answer for is as unknown as an errored one.
        self.committed
            .get(&r.topic_partition())
            .copied()
            .unwrap_or(Committed::Error)
    }

    /// The decision for the next pending entry (entries are decided in id order).
    pub(crate) fn decide(&self, ranges: &[CommittedRange]) -> Decision {
        let otherwise = match self.origin {
            Origin::EarlierSession => Decision::Discard,
            Origin::AmbiguousThisSession => Decision::Keep,
        };
        if ranges.iter().any(|r| self.at(r) == Committed::Error) {
            return otherwise;
        }
        if !ranges.is_empty() && ranges.iter().all(|r| self.at(r) == Committed::At(r.end)) {
            return Decision::AlreadyPublished;
        }
        let owns_all = ranges
            .iter()
            .all(|r| self.owned.contains(&r.topic_partition()));
        let all_start = ranges.iter().all(|r| {
            self.at(r)
                == match r.start {
                    Some(s) => Committed::At(s),
                    None => Committed::None,
                }
        });
        if owns_all && all_start {
            return Decision::Resend;
        }
        otherwise
    }

    /// After a successful resend its end offsets are the committed ones.
    pub(crate) fn resent(&mut self, ranges: &[CommittedRange]) {
        for r in ranges {
            self.committed
                .insert(r.topic_partition(), Committed::At(r.end));
        }
    }

    /// What to do when a resend failed.
    pub(crate) fn resend_failed(&self) -> Decision {
        match self.origin {
            // Consumption has not started: recounting from the committed offsets is
            // always safe.
            Origin::EarlierSession => Decision::Discard,
            Origin::AmbiguousThisSession => Decision::Keep,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Committed as C;
    use Decision as D;
    use Origin::*;

    fn r(p: i32, start: Option<i64>, end: i64) -> CommittedRange {
        CommittedRange {
            topic: "t".into(),
            partition: p,
            start,
            end,
        }
    }

    fn rule(origin: Origin, committed: &[(i32, Committed)], owned: &[i32]) -> RestartRule {
        RestartRule::new(
            origin,
            committed
                .iter()
                .map(|(p, c)| (TopicPartition::new("t", *p), *c))
                .collect(),
            owned.iter().map(|p| TopicPartition::new("t", *p)).collect(),
        )
    }

    /// Every branch, for one entry: (origin, committed of p0, owned?) → decision.
    #[test]
    fn one_entry_every_branch() {
        let e = [r(0, Some(10), 20)];
        let no_start = [r(0, None, 20)];
        #[rustfmt::skip]
        let table: &[(Origin, &[CommittedRange], Committed, bool, Decision)] = &[
            // committed == start: resend only if owned
            (EarlierSession,       &e, C::At(10), true,  D::Resend),
            (EarlierSession,       &e, C::At(10), false, D::Discard),
            (AmbiguousThisSession, &e, C::At(10), true,  D::Resend),
            (AmbiguousThisSession, &e, C::At(10), false, D::Keep),
            // committed == end: published, owned or not
            (EarlierSession,       &e, C::At(20), true,  D::AlreadyPublished),
            (EarlierSession,       &e, C::At(20), false, D::AlreadyPublished),
            (AmbiguousThisSession, &e, C::At(20), true,  D::AlreadyPublished),
            // committed elsewhere: someone moved on
            (EarlierSession,       &e, C::At(15), true,  D::Discard),
            (EarlierSession,       &e, C::At(30), true,  D::Discard),
            (AmbiguousThisSession, &e, C::At(15), true,  D::Keep),
            // no committed offset
            (EarlierSession,       &e, C::None,   true,  D::Discard),
            (AmbiguousThisSession, &e, C::None,   true,  D::Keep),
            (EarlierSession, &no_start, C::None,  true,  D::Resend),
            (EarlierSession, &no_start, C::None,  false, D::Discard),
            (EarlierSession, &no_start, C::At(20), true, D::AlreadyPublished),
            (EarlierSession, &no_start, C::At(5), true,  D::Discard),
            // the read errored: never resend, never "published"
            (EarlierSession,       &e, C::Error,  true,  D::Discard),
            (AmbiguousThisSession, &e, C::Error,  true,  D::Keep),
            (EarlierSession, &no_start, C::Error, true,  D::Discard),
            (AmbiguousThisSession, &no_start, C::Error, true, D::Keep),
        ];
        for (i, (origin, ranges, committed, owned, want)) in table.iter().enumerate() {
            let owned: &[i32] = if *owned { &[0] } else { &[] };
            let got = rule(*origin, &[(0, *committed)], owned).decide(ranges);
            assert_eq!(
                got, *want,
                "row {i}: {origin:?} {committed:?} owned {owned:?}"
            );
        }
    }

    #[test]
    fn a_partition_missing_from_the_answer_counts_as_errored() {
        let e = [r(0, Some(10), 20), r(1, Some(0), 5)];
        assert_eq!(
            rule(EarlierSession, &[(0, C::At(10))], &[0, 1]).decide(&e),
            D::Discard
        );
        assert_eq!(
            rule(AmbiguousThisSession, &[(0, C::At(20))], &[0, 1]).decide(&e),
            D::Keep
        );
    }

    #[test]
    fn several_partitions_must_all_agree() {
        let e = [r(0, Some(10), 20), r(1, Some(0), 5)];
        let all = [0, 1];
        let case = |c0, c1, owned: &[i32]| {
            (
                rule(EarlierSession, &[(0, c0), (1, c1)], owned).decide(&e),
                rule(AmbiguousThisSession, &[(0, c0), (1, c1)], owned).decide(&e),
            )
        };
        assert_eq!(case(C::At(10), C::At(0), &all), (D::Resend, D::Resend));
        assert_eq!(case(C::At(10), C::At(0), &[0]), (D::Discard, D::Keep));
        assert_eq!(
            case(C::At(20), C::At(5), &[]),
            (D::AlreadyPublished, D::AlreadyPublished)
        );
        // half published, half not: a mix no transaction produces; never resend
        assert_eq!(case(C::At(20), C::At(0), &all), (D::Discard, D::Keep));
        assert_eq!(case(C::At(10), C::Error, &all), (D::Discard, D::Keep));
    }

    #[test]
    fn a_chain_of_entries_settles_in_order() {
        let first = [r(0, Some(10), 20)];
        let second = [r(0, Some(20), 30)];
        let mut rule = rule(EarlierSession, &[(0, C::At(10))], &[0]);
        assert_eq!(rule.decide(&first), D::Resend);
        // before the first is resent, the second is not at its start
        assert_eq!(rule.decide(&second), D::Discard);
        rule.resent(&first);
        assert_eq!(rule.decide(&first), D::AlreadyPublished);
        assert_eq!(rule.decide(&second), D::Resend);
    }

    #[test]
    fn a_failed_resend_discards_only_at_assignment() {
        assert_eq!(rule(EarlierSession, &[], &[]).resend_failed(), D::Discard);
        assert_eq!(
            rule(AmbiguousThisSession, &[], &[]).resend_failed(),
            D::Keep
        );
    }

    #[test]
    fn an_entry_without_ranges_is_resent() {
        // progress only: no offsets to commit, harmless to send again
        assert_eq!(rule(EarlierSession, &[], &[]).decide(&[]), D::Resend);
    }
}
