//! A consumer tier counts what its group committed, not what it read: `on_consume`
//! keeps each message's contribution (window and statistics, ~48 bytes, not the
//! message) per partition until a commit of this client covers its offset, so a
//! restart or rebalance that reads uncommitted messages again counts them once.
//!
//! After the group's assignment changed (a SyncGroup response, or a KIP-848 heartbeat),
//! a partition's kept messages are only this client's to count if it goes on reading
//! the partition where it was: the next message read is the next offset. Otherwise the
//! partition was read again from its committed offset, or moved to another member and
//! back, and whoever commits those messages counts them; they are discarded here.
//! The kept messages are bounded (`MAX_UNCOMMITTED` per client): beyond it the oldest
//! are dropped uncounted (`uncommitted_overflow`). A consumer that never commits
//! (`enable.auto.commit=false` and no commit) therefore counts nothing.

use std::collections::{HashMap, VecDeque};

use audit_lib::Counted;

/// Messages kept per client until committed: ~48 MB at most.
pub const MAX_UNCOMMITTED: usize = 1_000_000;

#[derive(Default)]
struct PartitionLog {
    /// Set by an assignment change: the next message read decides whether the kept
    /// ones are still this client's.
    suspect: bool,
    /// (window index, contribution), in offset order.
    kept: VecDeque<(i64, Counted)>,
}

pub struct Uncommitted {
    partitions: HashMap<(Box<str>, i32), PartitionLog>,
    kept: usize,
    max: usize,
    /// Discarded since the last [`Self::take_discarded`]: (re-read or moved, overflow).
    discarded: (u64, u64),
}

impl Uncommitted {
    pub fn new(max: usize) -> Self {
        Uncommitted {
            partitions: HashMap::new(),
            kept: 0,
            max: max.max(1),
            discarded: (0, 0),
        }
    }

    /// Keeps a message read from `topic` `partition` (its offset is `counted.offset`).
    pub fn consumed(&mut self, topic: &str, partition: i32, index: i64, counted: Counted) {
        let log = match self.partitions.get_mut(&(topic.into(), partition)) {
            Some(log) => log,
            None => self
                .partitions
                .entry((topic.into(), partition))
                .or_default(),
        };
        let offset = counted.offset;
        if log.suspect {
            log.suspect = false;
            let continues = log.kept.back().is_none_or(|(_, c)| c.offset + 1 == offset);
            if !continues {
                self.discarded.0 += log.kept.len() as u64;
                self.kept -= log.kept.len();
                log.kept.clear();
            }
        }
        // Read again (a seek back, or a fetch retried): the copies kept from the first
        // read are replaced.
        while log.kept.back().is_some_and(|(_, c)| c.offset >= offset) {
            log.kept.pop_back();
            self.kept -= 1;
            self.discarded.0 += 1;
        }
        log.kept.push_back((index, counted));
        self.kept += 1;
        if self.kept > self.max {
            log.kept.pop_front();
            self.kept -= 1;
            self.discarded.1 += 1;
        }
    }

    /// A commit of this client set `topic` `partition`'s committed offset to `offset`
    /// (the next to read): every kept message below it is counted, through `count`.
    pub fn committed(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        mut count: impl FnMut(i64, &Counted),
    ) -> u64 {
        let Some(log) = self.partitions.get_mut(&(topic.into(), partition)) else {
            return 0;
        };
        let mut n = 0;
        while let Some((index, c)) = log.kept.front() {
            if c.offset >= offset {
                break;
            }
            count(*index, c);
            log.kept.pop_front();
            n += 1;
        }
        self.kept -= n as usize;
        n
    }

    /// The group's assignment changed.
    pub fn assignment_changed(&mut self) {
        for log in self.partitions.values_mut() {
            log.suspect = true;
        }
    }

    /// Discards everything kept (the client closes: its successor reads it again).
    pub fn discard_all(&mut self) {
        self.discarded.0 += self.kept as u64;
        self.kept = 0;
        self.partitions.clear();
    }

    pub fn kept(&self) -> usize {
        self.kept
    }

    /// (re-read or moved, overflow) since the last call.
    pub fn take_discarded(&mut self) -> (u64, u64) {
        std::mem::take(&mut self.discarded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use audit_lib::CountedKind;

    fn at(offset: i64) -> Counted {
        Counted {
            kind: CountedKind::EventTime,
            bytes: 10,
            hash: offset as u64,
            latency_ms: 1,
            partition: 0,
            offset,
            observed_at_ms: 1_000,
            record_time: Some(900),
        }
    }

    fn commit(u: &mut Uncommitted, offset: i64) -> Vec<i64> {
        let mut got = Vec::new();
        u.committed("t", 0, offset, |_, c| got.push(c.offset));
        got
    }

    #[test]
    fn a_commit_counts_what_it_covers_once() {
        let mut u = Uncommitted::new(100);
        for o in 0..10 {
            u.consumed("t", 0, 0, at(o));
        }
        assert_eq!(commit(&mut u, 4), vec![0, 1, 2, 3]);
        assert_eq!(
            commit(&mut u, 4),
            Vec::<i64>::new(),
            "committed again: nothing new"
        );
        assert_eq!(commit(&mut u, 10), (4..10).collect::<Vec<_>>());
        assert_eq!(u.kept(), 0);
    }

    #[test]
    fn messages_read_again_replace_their_first_read() {
        let mut u = Uncommitted::new(100);
        for o in 0..10 {
            u.consumed("t", 0, 0, at(o));
        }
        // The application seeks back to 5 and reads 5..10 again.
        for o in 5..10 {
            u.consumed("t", 0, 0, at(o));
        }
        assert_eq!(commit(&mut u, 10), (0..10).collect::<Vec<_>>());
        assert_eq!(u.take_discarded(), (5, 0));
    }

    #[test]
    fn after_a_rebalance_only_a_partition_read_on_where_it_was_keeps_its_messages() {
        let mut u = Uncommitted::new(100);
        for o in 0..5 {
            u.consumed("t", 0, 0, at(o));
            u.consumed(
                "t",
                1,
                0,
                Counted {
                    partition: 1,
                    ..at(o)
                },
            );
        }
        u.assignment_changed();
        // Partition 0 goes on at 5: still ours. Partition 1 comes back at 20 (another
        // member committed up to it): its kept messages were counted by that member.
        u.consumed("t", 0, 0, at(5));
        u.consumed(
            "t",
            1,
            0,
            Counted {
                partition: 1,
                ..at(20)
            },
        );
        assert_eq!(commit(&mut u, 6), (0..6).collect::<Vec<_>>());
        let mut got = Vec::new();
        u.committed("t", 1, 21, |_, c| got.push(c.offset));
        assert_eq!(got, vec![20]);
        assert_eq!(u.take_discarded(), (5, 0));
    }

    #[test]
    fn the_buffer_is_bounded_and_says_what_it_dropped() {
        let mut u = Uncommitted::new(3);
        for o in 0..5 {
            u.consumed("t", 0, 0, at(o));
        }
        assert_eq!(u.kept(), 3);
        assert_eq!(u.take_discarded(), (0, 2));
        assert_eq!(commit(&mut u, 5), vec![2, 3, 4]);
    }
}
