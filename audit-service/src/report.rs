//! Report building (DESIGN §5 steps 1-2): drain the counts into audit messages plus
//! progress per topic, with the offset range of every owned partition consumed since
//! the previous report, and write them as one WAL entry before anything is sent.

use std::collections::HashMap;

use anyhow::Context;
use audit_lib::{AuditMessage, PartitionProgress, TopicPartition};
use common::now_ms;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::topic_partition_list::Offset;

use crate::metrics::{KindLabel, PartitionLabel};
use crate::service::{AuditContext, Core};
use crate::wal::{CommittedRange, WalMessage};

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
    /// The latest record time read and reported (issue 24), over every report this
    /// instance wrote since it read the partition.
    pub(crate) max_record_time: Option<i64>,
    /// The partition's records carry LogAppendTime (the last timestamped one did).
    pub(crate) log_append_time: bool,
    /// The partition's log ends as librdkafka last saw them (statistics).
    pub(crate) ends: Option<LogEnds>,
    /// The consumer's position (next offset to fetch) as of the last report: past
    /// transaction markers, which `next` (last data offset + 1) never is.
    pub(crate) position: Option<i64>,
}

/// The log ends of every partition from one librdkafka statistics callback, and when
/// they were measured.
#[derive(Debug, Clone, Default)]
pub(crate) struct EndsSnapshot {
    /// Epoch ms as of which the ends hold (None: no statistics yet): when librdkafka
    /// emitted the statistics minus the longest a fetch response can be older than
    /// them (see `AuditContext::stats`).
    pub(crate) at: Option<i64>,
    pub(crate) ends: HashMap<TopicPartition, LogEnds>,
}

/// A partition's log ends from librdkafka's statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogEnds {
    /// Log start offset.
    pub(crate) low: i64,
    /// The high watermark (see `AuditContext::stats` for why not the LSO).
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
    /// lag behind the high watermark (null until librdkafka's statistics have it).
    pub(crate) fn progress(&self, from_log_start: bool) -> Option<(i64, Option<i64>)> {
        let next = self.read_up_to(from_log_start)?;
        Some((next, self.ends.map(|e| (e.end - next).max(0))))
    }
}

/// Whether a partition without a committed offset is read from its log start
/// (`auto.offset.reset` earliest, the auditor's default).
fn starts_at_log_start(cfg: &crate::config::Config) -> bool {
    matches!(
        crate::service::consumer_client_config(cfg).get("auto.offset.reset"),
        None | Some("earliest" | "smallest" | "beginning")
    )
}

/// Why a report is made.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reason {
    Interval,
    Revoke,
    Shutdown,
}

impl Reason {
    fn as_str(self) -> &'static str {
        match self {
            Reason::Interval => "interval",
            Reason::Revoke => "revoke",
            Reason::Shutdown => "shutdown",
        }
    }
}

impl Core {
    /// Takes the log ends of a statistics snapshot for every partition (a partition
    /// the snapshot lacks has no known end: lag null), and the time they were measured
    /// at, which dates the next reports' progress (lag 0 holds as of then, not as of
    /// the report: records written since may be unread).
    ///
    /// A snapshot is not taken while consumption is paused (fetching stopped, so the
    /// ends it carries are from before the pause while its time is new), nor when it
    /// was measured before the last assignment or resume (`ends_from`): its ends may
    /// come from a fetch before it. The ends taken before stay, with their own time.
    pub(crate) fn update_ends(&mut self, snap: &EndsSnapshot) {
        let Some(at) = snap.at else { return };
        if self.paused || at < self.ends_from {
            return;
        }
        for (topic, parts) in &mut self.parts {
            for (&partition, st) in parts.iter_mut() {
                st.ends = snap
                    .ends
                    .get(&TopicPartition::new(topic.as_str(), partition))
                    .copied();
            }
        }
        self.ends_at = Some(at);
    }

    /// Records the consumer's position of every assigned partition. Called on the
    /// consume thread right before a report, so it covers exactly what was polled
    /// (messages and, unlike the drained offsets, transaction markers).
    pub(crate) fn update_positions(&mut self, consumer: &BaseConsumer<AuditContext>) {
        let Ok(tpl) = consumer.position() else {
            return;
        };
        for el in tpl.elements() {
            if let Some(part) = self
                .parts
                .get_mut(el.topic())
                .and_then(|t| t.get_mut(&el.partition()))
            {
                // Invalid (nothing polled since the assignment or a seek): unknown,
                // never an earlier value, which a seek back would make wrong.
                part.position = match el.offset() {
                    Offset::Offset(o) => Some(o),
                    _ => None,
                };
            }
        }
    }

    /// Drains the counts into a WAL entry (fsynced) and advances every partition's
    /// range start to the entry's end. Returns false when there was nothing to write.
    pub(crate) fn write_report(&mut self, reason: Reason) -> anyhow::Result<bool> {
        let now = now_ms();
        let (mut messages, positions) = self.counting.drain(now);
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
        let from_log_start = starts_at_log_start(&self.cfg);
        // Progress is dated by when the log ends were measured: a lag of 0 says the
        // auditor has read everything written *before then* (records appended since
        // may be unread, and a consumer past a stale end is no more caught up). The
        // engine trusts lag 0 as of `emitted_at` (docs/audit-message-v1.md).
        // Before any statistics, no lag is known and the date only orders reports: an
        // early one, so the first dated by statistics is not older.
        let dated = self.ends_at.unwrap_or(self.undated).min(now);
        let mut ranges = Vec::new();
        for (topic, parts) in &mut self.parts {
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
                if let Some((next, lag)) = st.progress(from_log_start) {
                    if let Some(lag) = lag {
                        self.metrics
                            .partition_lag
                            .get_or_create(&PartitionLabel {
                                topic: topic.clone(),
                                partition,
                            })
                            .set(lag);
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
        self.metrics
            .reports
            .get_or_create(&KindLabel {
                kind: reason.as_str().into(),
            })
            .inc();
        if ranges.is_empty()
            && messages.iter().all(|m| m.as_progress().is_some())
            && !matches!(reason, Reason::Interval)
        {
            return Ok(false);
        }
        if messages.is_empty() && ranges.is_empty() {
            return Ok(false);
        }
        if ranges.is_empty()
            && self.wal.pending_count() > 0
            && messages.iter().all(|m| m.as_progress().is_some())
        {
            // Entries are stuck (audit topic unwritable): progress alone would only
            // grow the WAL; the stuck entries carry progress already.
            return Ok(false);
        }
        let wal_messages = messages
            .iter()
            .map(|m| WalMessage {
                key: m.topic.clone(),
                payload: m.to_json(),
            })
            .collect();
        let id = self
            .wal
            .append(ranges.clone(), wal_messages)
            .context("cannot write report to the WAL")?;
        tracing::debug!(
            id,
            reason = reason.as_str(),
            messages = messages.len(),
            ranges = ranges.len(),
            "report written to WAL"
        );
        for r in ranges {
            if let Some(st) = self
                .parts
                .get_mut(&r.topic)
                .and_then(|t| t.get_mut(&r.partition))
            {
                st.start = Some(r.end);
                st.next = None;
            }
        }
        for (tp, t) in latest {
            if let Some(st) = self
                .parts
                .get_mut(tp.topic.as_str())
                .and_then(|p| p.get_mut(&tp.partition))
            {
                st.max_record_time = st.max_record_time.max(Some(t));
            }
        }
        self.update_wal_metrics();
        Ok(true)
    }

    /// After a report whose WAL entry could not be written: its drained counts are
    /// lost, so every partition it covered is read again from the start of its
    /// unreported range (the end of the last entry written, or the committed offset).
    /// False when a position cannot be reset: the caller then recreates the consumer,
    /// which restarts from the committed offsets.
    pub(crate) fn rewind_unreported(&mut self, consumer: &BaseConsumer<AuditContext>) -> bool {
        let timeout = self.cfg.audit.publish_timeout;
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
                    Some(o) if o >= 0 => Offset::Offset(o),
                    // No committed offset: consumption began at the log start.
                    None => Offset::Beginning,
                    Some(_) => return false,
                };
                st.position = None;
                if let Err(e) = consumer.seek(topic, partition, to, timeout) {
                    tracing::warn!(%topic, partition, offset = ?to, error = %e, "cannot seek back");
                    return false;
                }
            }
        }
        true
    }

    pub(crate) fn update_wal_metrics(&self) {
        self.metrics
            .wal_pending_entries
            .set(self.wal.pending_count() as i64);
        self.metrics
            .wal_pending_bytes
            .set(self.wal.pending_bytes() as i64);
        self.metrics
            .wal_disk_bytes
            .set(self.wal.disk_bytes() as i64);
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

    /// B5 of issue 14: lag from the consumer position, which librdkafka advances past
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

    /// Issue 24: the latest record time a report gives (what the engine compares with
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

    /// B2 of issue 14 (auditor side): an empty partition reports lag 0; and the
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
