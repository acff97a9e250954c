//! The bridge from rdkafka messages to audit-lib's aggregator, on the consume thread.
//!
//! Each message is counted where it is polled, straight from librdkafka's buffer: the
//! aggregator reads the borrowed key, value and headers, and allocates nothing once a
//! topic and window are known. No copy and no hand-off: a counting thread fed with
//! copied batches cost more than the counting itself (issue 16: ~0.2 µs per message
//! against ~45 ns for `Aggregator::record`), in copies, cache lines moved between cores
//! and wake-ups. Metrics are counted locally and added to the shared counters once per
//! [`FLUSH_EVERY`] messages and whenever the queue runs dry.
//!
//! The state sits behind a re-entrant lock that the consume loop holds for its whole
//! run ([`Counting::feeder`]): the rebalance callbacks run inside `poll` on that same
//! thread and drain through the same lock, so a report covers exactly the messages
//! polled before it, and counting a message takes no atomic operation. Only the
//! consume thread counts or drains; another thread that tried would wait for the loop
//! to end.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use audit_lib::{
    Aggregator, AuditMessage, Classification, HeaderLookup, Identity, Limits, Observation,
    RecordTimestamp, TimestampType,
};
use parking_lot::{ArcReentrantMutexGuard, RawMutex, RawThreadId, ReentrantMutex};
use prometheus_client::metrics::counter::Counter;
use rdkafka::message::{BorrowedMessage, Headers, Message, Timestamp};

use crate::config::Config;
use crate::metrics::{KindLabel, Metrics};

/// Messages counted between two additions to the shared metric counters.
const FLUSH_EVERY: u32 = 1024;

/// The partition positions a drain reports: (topic, partition, next offset, event-time
/// watermark, see [`Watermark`]).
pub(crate) type Positions = Vec<(String, i32, i64, Option<i64>)>;

type Shared = Arc<ReentrantMutex<RefCell<Worker>>>;

/// The counting state of one consumer (held by the core).
pub(crate) struct Counting {
    shared: Shared,
}

/// The consume loop's handle: holds the counting lock while the loop runs.
pub(crate) struct Feeder {
    held: ArcReentrantMutexGuard<RawMutex, RawThreadId, RefCell<Worker>>,
}

impl Feeder {
    /// Counts one message.
    #[inline]
    pub(crate) fn record(&self, m: &BorrowedMessage<'_>, observed_at_ms: i64) {
        self.held.borrow_mut().record(m, observed_at_ms);
    }

    /// Window statistics held in memory (open, or evicted and waiting for the drain).
    pub(crate) fn windows(&self) -> usize {
        let w = self.held.borrow();
        w.aggregator.open_windows() + w.aggregator.pending_windows()
    }

    /// The queue ran dry: publish the local metric counts.
    pub(crate) fn submit(&self) {
        self.held.borrow_mut().flush_metrics();
    }
}

struct Worker {
    aggregator: Aggregator,
    /// event_time, no_time, malformed, out_of_bounds
    classes: [Counter; 4],
    consumed: Counter,
    consumed_bytes: Counter,
    /// Not yet added to the counters above.
    local: LocalCounts,
    topic: LastTopic,
    parts: Parts,
}

/// The last message's topic: librdkafka's topic handle and a copy of its name. Reading
/// the name from librdkafka (`Message::topic`: an FFI call, `strlen`, UTF-8 check) cost
/// ~8 % of the consume thread; runs of one topic are the rule. A handle is only
/// compared, never dereferenced, and forgotten at every metrics flush and drain: a
/// handle's address could only be reused by another topic after its partitions were
/// revoked, and a revoke drains.
#[derive(Default)]
struct LastTopic {
    handle: usize,
    name: String,
}

impl LastTopic {
    #[inline]
    fn name(&mut self, m: &BorrowedMessage<'_>) -> &str {
        let handle = m.topic_ptr() as usize;
        if handle != self.handle || self.name.is_empty() {
            self.name.clear();
            self.name.push_str(m.topic());
            self.handle = handle;
        }
        &self.name
    }

    fn forget(&mut self) {
        self.handle = 0;
        self.name.clear();
    }
}

/// Every partition read since the counting started; `touched` since the last drain.
#[derive(Default)]
struct Parts {
    all: Vec<PartPos>,
    index: HashMap<Box<str>, HashMap<i32, usize>>,
    /// Index in `all` of the last message's partition (runs of one partition are the
    /// rule).
    last: usize,
}

#[derive(Default)]
struct LocalCounts {
    classes: [u64; 4],
    messages: u32,
    bytes: u64,
}

/// A partition's read position and event-time watermark tracker.
struct PartPos {
    topic: Box<str>,
    partition: i32,
    next: i64,
    touched: bool,
    watermark: Watermark,
}

/// Record timestamps a partition's watermark is the minimum of (B8 of issue 14).
pub const WATERMARK_RECENT: usize = 32;

/// The event-time watermark of one partition: the minimum record time over the records
/// read since the last report *and* over the last [`WATERMARK_RECENT`] records, each
/// capped at its observation time. One producer with a fast clock therefore cannot push
/// it forward: its records are outvoted by every other record of the report interval
/// and of the recent window, and a time ahead of the auditor's clock counts as "now".
/// (The last record's time, used before, let one such record make a lagging partition
/// look caught up.) Per record: one `min`, one store.
#[doc(hidden)]
#[derive(Clone)]
pub struct Watermark {
    recent: [i64; WATERMARK_RECENT],
    filled: usize,
    at: usize,
    since_report: Option<i64>,
}

impl Default for Watermark {
    fn default() -> Self {
        Watermark {
            recent: [i64::MAX; WATERMARK_RECENT],
            filled: 0,
            at: 0,
            since_report: None,
        }
    }
}

impl Watermark {
    /// One record with timestamp `ms`, read at `observed_at_ms`.
    #[inline]
    pub fn push(&mut self, ms: i64, observed_at_ms: i64) {
        let t = ms.min(observed_at_ms);
        self.since_report = Some(self.since_report.map_or(t, |m| m.min(t)));
        self.recent[self.at] = t;
        self.at = (self.at + 1) % WATERMARK_RECENT;
        self.filled = (self.filled + 1).min(WATERMARK_RECENT);
    }

    /// The watermark for a report, or None when no timestamped record was read since
    /// the previous one (the report keeps the previous watermark). Starts a new
    /// report interval.
    pub fn take(&mut self) -> Option<i64> {
        let since = self.since_report.take()?;
        let recent = self.recent[..self.filled].iter().copied().min();
        Some(recent.map_or(since, |r| r.min(since)))
    }
}

/// The headers of a polled message, read in place when a rule asks for one.
struct MessageHeaders<'a, 'b>(&'a BorrowedMessage<'b>);

impl HeaderLookup for MessageHeaders<'_, '_> {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.0
            .headers()?
            .iter()
            .find(|h| h.key == name)
            .and_then(|h| h.value)
    }
}

impl Parts {
    #[inline]
    fn get(&mut self, topic: &str, partition: i32) -> &mut PartPos {
        let hit = self
            .all
            .get(self.last)
            .is_some_and(|p| p.partition == partition && *p.topic == *topic);
        if !hit {
            self.last = self.find_or_add(topic, partition);
        }
        &mut self.all[self.last]
    }

    #[cold]
    fn find_or_add(&mut self, topic: &str, partition: i32) -> usize {
        if let Some(&i) = self.index.get(topic).and_then(|t| t.get(&partition)) {
            return i;
        }
        let i = self.all.len();
        self.all.push(PartPos {
            topic: topic.into(),
            partition,
            next: 0,
            touched: false,
            watermark: Watermark::default(),
        });
        self.index
            .entry(topic.into())
            .or_default()
            .insert(partition, i);
        i
    }
}

impl Worker {
    #[inline]
    fn record(&mut self, m: &BorrowedMessage<'_>, observed_at_ms: i64) {
        let topic = self.topic.name(m);
        let partition = m.partition();
        let offset = m.offset();
        let record_timestamp = match m.timestamp() {
            Timestamp::CreateTime(ms) if ms >= 0 => Some(RecordTimestamp {
                ms,
                kind: TimestampType::CreateTime,
            }),
            Timestamp::LogAppendTime(ms) if ms >= 0 => Some(RecordTimestamp {
                ms,
                kind: TimestampType::LogAppendTime,
            }),
            _ => None,
        };
        let obs = Observation {
            topic,
            partition,
            offset,
            key: m.key(),
            value: m.payload(),
            headers: &MessageHeaders(m),
            record_timestamp,
            observed_at_ms,
        };
        let i = match self.aggregator.record(&obs) {
            Classification::EventTime { .. } => 0,
            Classification::NoTime => 1,
            Classification::Malformed(_) => 2,
            Classification::OutOfBounds { .. } => 3,
        };
        let local = &mut self.local;
        local.classes[i] += 1;
        local.bytes += obs.byte_len();
        local.messages += 1;
        let pos = self.parts.get(topic, partition);
        pos.next = offset + 1;
        pos.touched = true;
        if let Some(t) = record_timestamp {
            pos.watermark.push(t.ms, observed_at_ms);
        }
        if self.local.messages >= FLUSH_EVERY {
            self.flush_metrics();
        }
    }

    fn flush_metrics(&mut self) {
        self.topic.forget();
        let local = std::mem::take(&mut self.local);
        for (c, n) in self.classes.iter().zip(local.classes) {
            if n > 0 {
                c.inc_by(n);
            }
        }
        if local.messages > 0 {
            self.consumed.inc_by(local.messages.into());
            self.consumed_bytes.inc_by(local.bytes);
        }
    }

    fn drain(&mut self, now_ms: i64) -> (Vec<AuditMessage>, Positions) {
        self.flush_metrics();
        let messages = self.aggregator.drain(now_ms);
        let positions = self
            .parts
            .all
            .iter_mut()
            .filter(|pos| pos.touched)
            .map(|pos| {
                pos.touched = false;
                (
                    pos.topic.to_string(),
                    pos.partition,
                    pos.next,
                    pos.watermark.take(),
                )
            })
            .collect();
        (messages, positions)
    }
}

impl Counting {
    pub(crate) fn new(
        cfg: &Config,
        identity: Identity,
        metrics: &Metrics,
    ) -> anyhow::Result<Counting> {
        let et = &cfg.audit.event_time;
        let limits = Limits {
            track_offsets: cfg.audit.track_offsets,
            max_open_windows: cfg.audit.max_windows_per_report.max(1),
        };
        let aggregator = Aggregator::new(identity, et.clone(), limits)
            .map_err(|e| anyhow::anyhow!("audit.event_time: {e}"))?;
        let c = |k: &str| {
            metrics
                .classified
                .get_or_create(&KindLabel {
                    kind: k.to_string(),
                })
                .clone()
        };
        let worker = Worker {
            aggregator,
            classes: [
                c("event_time"),
                c("no_time"),
                c("malformed"),
                c("out_of_bounds"),
            ],
            consumed: metrics.consumed_messages.clone(),
            consumed_bytes: metrics.consumed_bytes.clone(),
            local: LocalCounts::default(),
            topic: LastTopic::default(),
            parts: Parts {
                last: usize::MAX,
                ..Parts::default()
            },
        };
        Ok(Counting {
            shared: Arc::new(ReentrantMutex::new(RefCell::new(worker))),
        })
    }

    /// The consume loop's handle; it holds the counting lock until dropped, so call it
    /// on the consume thread only.
    pub(crate) fn feeder(&self) -> Feeder {
        Feeder {
            held: self.shared.lock_arc(),
        }
    }

    /// Everything counted so far: increments and the position of every partition read
    /// since the previous drain. Must be called on the consume thread (the loop, or a
    /// rebalance callback inside its `poll`).
    pub(crate) fn drain(&mut self, now_ms: i64) -> (Vec<AuditMessage>, Positions) {
        self.shared.lock().borrow_mut().drain(now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_764_410_400_000;
    const HOUR: i64 = 3_600_000;

    #[test]
    fn one_fast_producer_does_not_push_the_watermark() {
        // A lagging backlog (an hour old), then a whole batch from a producer whose
        // clock is an hour fast, read in the same report interval.
        let mut w = Watermark::default();
        for i in 0..100 {
            w.push(NOW - HOUR + i, NOW);
        }
        for i in 0..500 {
            w.push(NOW + HOUR + i, NOW);
        }
        assert_eq!(w.take(), Some(NOW - HOUR));
        // Next interval: the fast record alone is outvoted by the recent records.
        for i in 0..40 {
            w.push(NOW - HOUR + 100 + i, NOW);
        }
        let _ = w.take();
        w.push(NOW + HOUR, NOW);
        assert_eq!(w.take(), Some(NOW - HOUR + 100 + 9));
    }

    #[test]
    fn times_ahead_of_the_clock_count_as_the_observation_time() {
        let mut w = Watermark::default();
        w.push(NOW + HOUR, NOW);
        assert_eq!(w.take(), Some(NOW));
        // Nothing read since: no new watermark (the report keeps the previous one).
        assert_eq!(w.take(), None);
    }

    #[test]
    fn in_order_records_give_the_oldest_of_the_recent_ones() {
        let mut w = Watermark::default();
        for i in 0..1000 {
            w.push(NOW - 1000 + i, NOW);
        }
        // The last 32 records: the watermark trails the last one by 31 records.
        assert_eq!(w.take(), Some(NOW - 1000));
        w.push(NOW, NOW);
        assert_eq!(w.take(), Some(NOW - 1000 + 969));
    }
}
