//! Per-partition bookkeeping of the auditor: where each owned partition's unreported
//! range starts and ends, what was read of it, its log ends from the statistics, and
//! what progress says about it (next offset, lag, latest record time).

use std::collections::{BTreeMap, HashMap};

use audit_lib::TopicPartition;

/// The position of one partition read since the previous drain (what the counting
/// hands the auditor with its drained counts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Position {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    /// The offset after the last message read.
    pub(crate) next: i64,
    /// The event-time watermark (see `counting::Watermark`).
    pub(crate) watermark: Option<i64>,
    /// The latest record time read since the previous drain (`Watermark::take_latest`).
    pub(crate) latest: Option<i64>,
    /// The last timestamped record read carried LogAppendTime.
    pub(crate) log_append_time: bool,
}

/// The partition positions a drain reports.
pub(crate) type Positions = Vec<Position>;

/// Every partition's state, by topic (a `BTreeMap` so reports list partitions in order).
pub(crate) type Parts = HashMap<String, BTreeMap<i32, PartState>, FastHash>;

/// FxHash-style hashing for the per-message partition lookup: topic names are not
/// attacker-chosen keys here, and SipHash showed in profiles.
#[derive(Clone, Copy, Default)]
pub(crate) struct FastHash;

#[derive(Default)]
pub(crate) struct FastHasher(u64);

impl std::hash::BuildHasher for FastHash {
    type Hasher = FastHasher;
    fn build_hasher(&self) -> FastHasher {
        FastHasher(0)
    }
}

impl std::hash::Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let v = u64::from_le_bytes(c.try_into().expect("8 bytes"));
            self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(K);
        }
        for &b in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ b as u64).wrapping_mul(K);
        }
    }
}

/// Per-partition position: `start` is the committed offset the current (unreported)
/// range began at, `next` the offset after the last consumed message.
#[derive(Debug, Clone, Default)]
pub(crate) struct PartState {
    pub(crate) start: Option<i64>,
    pub(crate) next: Option<i64>,
    pub(crate) record_time: Option<i64>,
    /// The latest record time read and reported (docs/web.md, Verdicts, rule 4), over every report this
    /// instance wrote since it read the partition.
    pub(crate) max_record_time: Option<i64>,
    /// The partition's records carry LogAppendTime (the last timestamped one did).
    pub(crate) log_append_time: bool,
    /// The partition's log ends as the consumer last saw them (statistics).
    pub(crate) ends: Option<LogEnds>,
    /// The consumer's position (next offset to fetch) as of the last report: past
    /// transaction markers, which `next` (last data offset + 1) never is.
    pub(crate) position: Option<i64>,
    /// (offset read up to, when) at each of the last [`READ_HISTORY`] reports that
    /// read further: by when a given offset was read, for the replication evidence's
    /// lag.
    pub(crate) read_at: std::collections::VecDeque<(i64, i64)>,
}

/// Reports whose read offsets a partition keeps ([`PartState::read_at`]).
pub(crate) const READ_HISTORY: usize = 64;

impl PartState {
    /// Notes that the partition is read up to `offset` at `at`.
    pub(crate) fn note_read(&mut self, offset: i64, at: i64) {
        if self.read_at.back().is_some_and(|&(o, _)| o >= offset) {
            return;
        }
        if self.read_at.len() >= READ_HISTORY {
            self.read_at.pop_front();
        }
        self.read_at.push_back((offset, at));
    }

    /// By when offset `x` had been read at the latest: the first noted report that
    /// read past it (the oldest one kept when `x` is older than them all); `None`
    /// when `x` has not been read.
    pub(crate) fn read_by(&self, x: i64) -> Option<i64> {
        self.read_at
            .iter()
            .find(|&&(o, _)| o > x)
            .map(|&(_, at)| at)
    }
}

/// The log ends of every partition from one statistics callback of the consumer, and when
/// they were measured.
#[derive(Debug, Clone, Default)]
pub(crate) struct EndsSnapshot {
    /// Epoch ms as of which the ends hold (None: no statistics yet): when the client
    /// emitted the statistics minus the longest a fetch response can be older than
    /// them (see `kafka::context`).
    pub(crate) at: Option<i64>,
    pub(crate) ends: HashMap<TopicPartition, LogEnds>,
}

/// A partition's log ends from the consumer's statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogEnds {
    /// Log start offset.
    pub(crate) low: i64,
    /// The high watermark (see `kafka::context` for why not the LSO).
    pub(crate) end: i64,
}

impl PartState {
    /// The offset up to which this partition has been read, for progress: the larger
    /// of the last data offset + 1 (or the committed start) and the consumer's
    /// position, so a trailing commit/abort marker does not count as unread (B5);
    /// for a partition with nothing readable at all (log start = end) and no
    /// position yet, its end (B2: an empty partition is "read", not "never read").
    ///
    /// Nothing read and no committed offset known (a new consumer group, or the
    /// committed offset could not be read): when consumption starts at the log start
    /// (`from_log_start`, `auto.offset.reset` earliest), the log start, else 0 — never
    /// nothing. A partition left out of the report could not hold a window back (the
    /// engine judges an auditor by the partitions it reports) and a negative offset
    /// would get the whole report rejected; reported behind, it blocks until read.
    pub(crate) fn read_up_to(&self, from_log_start: bool) -> Option<i64> {
        let data = self.next.or(self.start).filter(|&o| o >= 0);
        let read = match (data, self.position) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        read.or(match self.ends {
            Some(e) if e.low == e.end => Some(e.end),
            Some(e) if from_log_start => Some(e.low.max(0)),
            _ if from_log_start => Some(0),
            _ => None,
        })
    }

    /// The latest record time to report, with `latest` read since the last report:
    /// the latest over every report written, or 0 when the partition holds no record
    /// at all (log start = end: no copy of anything can be in it, so an upstream's
    /// record time is not read yet), else unknown (nothing read by this instance since
    /// it started: the engine then judges the partition by the clock).
    pub(crate) fn latest_record_time(&self, latest: Option<i64>) -> Option<i64> {
        self.max_record_time
            .max(latest)
            .or_else(|| self.ends.filter(|e| e.low == e.end).map(|_| 0))
    }

    /// What progress reports for this partition: [`PartState::read_up_to`], and the
    /// lag behind the high watermark (null until the consumer's statistics have it).
    pub(crate) fn progress(&self, from_log_start: bool) -> Option<(i64, Option<i64>)> {
        let next = self.read_up_to(from_log_start)?;
        Some((next, self.ends.map(|e| (e.end - next).max(0))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One row of a progress table: the partition's state before a report, whether
    /// consumption starts at the log start, and the (next offset, lag) reported (None:
    /// the partition is left out of the report).
    struct Row {
        what: &'static str,
        state: PartState,
        from_log_start: bool,
        expect: Option<(i64, Option<i64>)>,
    }

    fn ends(low: i64, end: i64) -> Option<LogEnds> {
        Some(LogEnds { low, end })
    }

    fn check(rule: &str, table: Vec<Row>) {
        let failures: Vec<String> = table
            .iter()
            .filter_map(|r| {
                let got = r.state.progress(r.from_log_start);
                (got != r.expect)
                    .then(|| format!("{}: expected {:?}, got {:?}", r.what, r.expect, got))
            })
            .collect();
        assert!(failures.is_empty(), "{rule}:\n{}", failures.join("\n"));
    }

    /// Lag from the consumer position, which the client advances past
    /// transaction markers, against the high watermark (not the last stable offset).
    #[test]
    fn b5_lag_from_the_position_past_transaction_markers() {
        let read = |next, position, end| PartState {
            start: Some(0),
            next: Some(next),
            position,
            ends: ends(0, end),
            ..PartState::default()
        };
        check(
            "B5",
            vec![
                Row {
                    what: "last data offset 9, commit marker at 10, position 11 = hwm: lag 0",
                    state: read(10, Some(11), 11),
                    from_log_start: true,
                    // reverted (last data offset + 1): Some((10, Some(1)))
                    expect: Some((11, Some(0))),
                },
                Row {
                    what: "an aborted batch and its marker after the last data: lag 0",
                    state: read(10, Some(15), 15),
                    from_log_start: true,
                    // reverted: Some((10, Some(5)))
                    expect: Some((15, Some(0))),
                },
                Row {
                    what: "nothing consumed since the last report, position past a marker",
                    state: PartState {
                        next: None,
                        ..read(0, Some(11), 11)
                    },
                    from_log_start: true,
                    // reverted: Some((0, Some(11))) (the committed start)
                    expect: Some((11, Some(0))),
                },
                Row {
                    what: "an open transaction (hwm past the LSO): not caught up",
                    state: read(10, Some(10), 14),
                    from_log_start: true,
                    expect: Some((10, Some(4))),
                },
                Row {
                    what: "plain topic, caught up",
                    state: read(10, Some(10), 10),
                    from_log_start: true,
                    expect: Some((10, Some(0))),
                },
                Row {
                    what: "position unknown (after a seek back): the data offset",
                    state: read(10, None, 11),
                    from_log_start: true,
                    expect: Some((10, Some(1))),
                },
                Row {
                    what: "statistics not in yet: lag null, never 0",
                    state: PartState {
                        ends: None,
                        ..read(10, Some(11), 0)
                    },
                    from_log_start: true,
                    // reverted: Some((10, None))
                    expect: Some((11, None)),
                },
            ],
        );
    }

    /// The latest record time a report gives (what the engine compares with
    /// the upstream's): kept over reports, 0 for a partition that holds nothing,
    /// unknown for one with records this instance has not read.
    #[test]
    fn latest_record_time_is_kept_zero_when_empty_else_unknown() {
        let st = |max_record_time, ends| PartState {
            max_record_time,
            ends,
            ..PartState::default()
        };
        let table: Vec<(&str, PartState, Option<i64>, Option<i64>)> = vec![
            ("read now", st(None, ends(0, 9)), Some(70), Some(70)),
            (
                "read before, not since",
                st(Some(80), ends(0, 9)),
                None,
                Some(80),
            ),
            (
                "read before and since: the latest",
                st(Some(80), ends(0, 9)),
                Some(70),
                Some(80),
            ),
            // reverted (no 0 for an empty log): None, judged by the clock: a paused
            // replicator looked like a loss after grace again
            (
                "never written, nothing read",
                st(None, ends(0, 0)),
                None,
                Some(0),
            ),
            (
                "emptied by retention",
                st(None, ends(500, 500)),
                None,
                Some(0),
            ),
            (
                "records not read by this instance (restarted)",
                st(None, ends(0, 9)),
                None,
                None,
            ),
            ("no statistics yet", st(None, None), None, None),
        ];
        let failures: Vec<String> = table
            .iter()
            .filter_map(|(what, st, latest, want)| {
                let got = st.latest_record_time(*latest);
                (got != *want).then(|| format!("{what}: expected {want:?}, got {got:?}"))
            })
            .collect();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    /// Empty partitions (auditor side): an empty partition reports lag 0; and the
    /// lagging auditor: a partition a new group has not read yet is reported behind,
    /// never left out (a partition left out cannot hold a window back).
    #[test]
    fn b2_empty_partitions_report_lag_0_and_unread_ones_are_behind() {
        let unread = |ends| PartState {
            ends,
            ..PartState::default()
        };
        check(
            "B2 / unread partitions",
            vec![
                Row {
                    what: "never written (log 0..0), nothing read: read, lag 0",
                    state: unread(ends(0, 0)),
                    from_log_start: true,
                    expect: Some((0, Some(0))),
                },
                Row {
                    what: "emptied by retention (log 500..500): read, lag 0",
                    state: unread(ends(500, 500)),
                    from_log_start: false,
                    // reverted (empty partitions read): None, left out
                    expect: Some((500, Some(0))),
                },
                Row {
                    what: "new group, log 100..500 not read yet: behind at the log start",
                    state: unread(ends(100, 500)),
                    from_log_start: true,
                    // reverted (4c8bc67): None, left out
                    expect: Some((100, Some(400))),
                },
                Row {
                    what: "new group, no statistics yet: behind at 0, lag null",
                    state: unread(None),
                    from_log_start: true,
                    // reverted (4c8bc67): None, left out
                    expect: Some((0, None)),
                },
                Row {
                    what: "committed offset unreadable (negative): never a negative offset",
                    state: PartState {
                        start: Some(-1001),
                        ..unread(ends(0, 50))
                    },
                    from_log_start: true,
                    // reverted (4c8bc67): None
                    expect: Some((0, Some(50))),
                },
                Row {
                    what:
                        "auto.offset.reset latest, nothing read: left out (nothing older is read)",
                    state: unread(ends(100, 500)),
                    from_log_start: false,
                    expect: None,
                },
                Row {
                    what: "committed offset 300 of 500, nothing read yet: behind at 300",
                    state: PartState {
                        start: Some(300),
                        ..unread(ends(100, 500))
                    },
                    from_log_start: true,
                    expect: Some((300, Some(200))),
                },
            ],
        );
    }
}
