//! The bridge from rdkafka messages to audit-lib's aggregator, pipelined.
//!
//! The consume thread only copies each message into a batch (a thread-local buffer,
//! so the rebalance callbacks, which run on the same thread inside `poll`, see it
//! too); full batches go over a bounded channel to a worker thread that owns the
//! aggregator. Auditing then runs beside librdkafka's own work instead of on the
//! consume thread. A drain first submits the partial batch and is answered by the
//! worker after every earlier batch (the channel is FIFO), so a report covers exactly
//! the messages polled before it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

use audit_lib::checksum::{key_len_prefix, prefixed_message_hash};
use audit_lib::{
    Aggregator, AuditMessage, Classification, CompiledRule, HeaderLookup, Identity, Limits,
    Observation, RecordTimestamp, TimestampType,
};
use prometheus_client::metrics::counter::Counter;
use rdkafka::message::{BorrowedMessage, Message, Timestamp};

use crate::config::Config;
use crate::metrics::{KindLabel, Metrics};

/// Messages per batch handed to the worker.
const BATCH: usize = 512;
/// Bytes of keys, values and headers per batch: a batch is handed over at whichever
/// of `BATCH` messages or this many bytes comes first, so large messages do not make
/// a batch (and the memory between the threads) grow with them.
const BATCH_BYTES: usize = 1 << 20;
/// Batches in flight: bounds the memory between the threads and back-pressures the
/// consume thread when auditing falls behind.
const IN_FLIGHT: usize = 8;
/// Counted batches go back to the consume thread emptied, their buffers kept: filling
/// a fresh batch reallocated its buffers as they grew (and faulted in new pages at
/// 1 KB messages) and the worker freed memory the other thread had allocated, all per
/// batch. A returned batch whose buffer grew past this (one huge message) is dropped.
const RECYCLE_MAX_BYTES: usize = 2 * BATCH_BYTES;

type Range = (u32, u32);

struct Rec {
    topic: u32,
    partition: i32,
    offset: i64,
    timestamp: Option<RecordTimestamp>,
    key: Option<Range>,
    value: Option<Range>,
    /// Key-length prefix, key and value, contiguous: what the checksum hashes.
    hashed: Range,
    headers: Range,
    observed_at_ms: i64,
}

#[derive(Default)]
struct Batch {
    recs: Vec<Rec>,
    data: Vec<u8>,
    topics: Vec<String>,
    /// (name, value) with values in `data`; only filled when a rule reads headers.
    headers: Vec<(String, Option<Range>)>,
}

impl Batch {
    /// Empties the batch, keeping its buffers' capacity.
    fn clear(&mut self) {
        self.recs.clear();
        self.data.clear();
        self.topics.clear();
        self.headers.clear();
    }

    fn put(&mut self, bytes: Option<&[u8]>) -> Option<Range> {
        bytes.map(|b| {
            let start = self.data.len() as u32;
            self.data.extend_from_slice(b);
            (start, self.data.len() as u32)
        })
    }
}

thread_local! {
    static PENDING: RefCell<Batch> = RefCell::new(Batch::default());
}

/// The partition positions a drain reports: (topic, partition, next offset, event-time
/// watermark, see [`Watermark`]).
pub(crate) type Positions = Vec<(String, i32, i64, Option<i64>)>;

enum Work {
    Batch(Batch),
    Drain(i64, SyncSender<(Vec<AuditMessage>, Positions)>),
}

/// The consume thread's end: feeds messages, drains reports.
#[derive(Clone)]
pub(crate) struct Feeder {
    tx: SyncSender<Work>,
    /// Emptied batches coming back from the worker.
    free: Arc<Mutex<Receiver<Batch>>>,
    needs_headers: bool,
    /// Headers left out because their name is not UTF-8.
    unreadable_headers: Counter,
    windows: Arc<AtomicUsize>,
}

impl Feeder {
    /// Copies one message into the current batch; hands the batch over when full.
    #[inline]
    pub(crate) fn record(&self, m: &BorrowedMessage<'_>, observed_at_ms: i64) {
        let full = PENDING.with(|b| {
            let mut b = b.borrow_mut();
            let topic = m.topic();
            let t = match b.topics.last() {
                Some(last) if last == topic => b.topics.len() - 1,
                _ => {
                    b.topics.push(topic.to_string());
                    b.topics.len() - 1
                }
            } as u32;
            let timestamp = match m.timestamp() {
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
            // Laid out as the checksum hashes them (length prefix, key, value), so
            // the worker hashes in one pass instead of copying the parts together.
            let (key, value) = (m.key(), m.payload());
            let p0 = b.data.len() as u32;
            b.data
                .extend_from_slice(&key_len_prefix(key.map_or(0, <[u8]>::len)));
            let key = b.put(key);
            let value = b.put(value);
            let hashed = (p0, b.data.len() as u32);
            let h0 = b.headers.len() as u32;
            if self.needs_headers {
                // Not `m.headers()`: rdkafka unwraps the name's UTF-8 (see
                // `raw_headers`). A name that is not UTF-8 matches no rule, so the
                // header is left out, as if absent: the record is still counted and
                // the rule falls back to its next source of time.
                crate::raw_headers::for_each(m, |name, value| match std::str::from_utf8(name) {
                    Ok(name) => {
                        let v = b.put(value);
                        b.headers.push((name.to_string(), v));
                    }
                    Err(_) => {
                        self.unreadable_headers.inc();
                    }
                });
            }
            let headers = (h0, b.headers.len() as u32);
            b.recs.push(Rec {
                topic: t,
                partition: m.partition(),
                offset: m.offset(),
                timestamp,
                key,
                value,
                hashed,
                headers,
                observed_at_ms,
            });
            b.recs.len() >= BATCH || b.data.len() >= BATCH_BYTES
        });
        if full {
            self.submit();
        }
    }

    /// Window statistics held in memory (open, or evicted and waiting for the drain),
    /// as of the last batch counted.
    pub(crate) fn windows(&self) -> usize {
        self.windows.load(Ordering::Relaxed)
    }

    /// Hands the current (partial) batch to the worker.
    pub(crate) fn submit(&self) {
        if PENDING.with(|b| b.borrow().recs.is_empty()) {
            return;
        }
        let spare = self
            .free
            .lock()
            .ok()
            .and_then(|rx| rx.try_recv().ok())
            .unwrap_or_default();
        let batch = PENDING.with(|b| std::mem::replace(&mut *b.borrow_mut(), spare));
        // The worker lives as long as any feeder; a send error means it panicked,
        // which the drain reports.
        let _ = self.tx.send(Work::Batch(batch));
    }
}

/// The worker thread ends when the last feeder is dropped.
pub(crate) struct Counting {
    feeder: Feeder,
}

struct Worker {
    aggregator: Aggregator,
    /// Where counted batches go back to the consume thread.
    recycle: SyncSender<Batch>,
    /// event_time, no_time, malformed, out_of_bounds
    classes: [Counter; 4],
    consumed: Counter,
    consumed_bytes: Counter,
    /// Record times the watermark ignored (outside the skew bounds).
    watermark_ignored: Counter,
    windows: Arc<AtomicUsize>,
    /// Every partition read since the worker started; `touched` since the last drain.
    /// Keyed by topic, then partition: looked up by `&str`, without building a key.
    positions: HashMap<String, HashMap<i32, PartPos>>,
}

/// A partition's read position and event-time watermark tracker.
struct PartPos {
    next: i64,
    touched: bool,
    watermark: Watermark,
    /// The topic's event-time rule: its skew bounds filter the watermark's times.
    rule: Arc<CompiledRule>,
}

/// Record timestamps a partition's watermark is the minimum of (B8 of issue 14).
pub const WATERMARK_RECENT: usize = 32;

/// The event-time watermark of one partition: the minimum record time over the records
/// read since the last report *and* over the last [`WATERMARK_RECENT`] records, each
/// capped at its observation time, ignoring times outside the topic's skew bounds
/// (`max_future` / `max_past`). One producer with a fast clock therefore cannot push
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
    /// One record with timestamp `ms`, read at `observed_at_ms`, on a topic under
    /// `rule`. Returns false when the time was ignored.
    #[inline]
    pub fn push(&mut self, ms: i64, observed_at_ms: i64, rule: &CompiledRule) -> bool {
        // Outside the skew bounds (audit-lib's check, as classification uses it): one
        // broken or hostile producer's time neither pulls the watermark back nor
        // pushes it forward.
        if !rule.within_skew_bounds(ms, observed_at_ms) {
            return false;
        }
        let t = ms.min(observed_at_ms);
        self.since_report = Some(self.since_report.map_or(t, |m| m.min(t)));
        self.recent[self.at] = t;
        self.at = (self.at + 1) % WATERMARK_RECENT;
        self.filled = (self.filled + 1).min(WATERMARK_RECENT);
        true
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

struct BatchHeaders<'a> {
    batch: &'a Batch,
    range: Range,
}

impl HeaderLookup for BatchHeaders<'_> {
    fn header(&self, name: &str) -> Option<&[u8]> {
        let (a, b) = self.range;
        self.batch.headers[a as usize..b as usize]
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.map(|(s, e)| &self.batch.data[s as usize..e as usize]))
    }
}

impl Worker {
    fn run(mut self, rx: Receiver<Work>) {
        while let Ok(work) = rx.recv() {
            match work {
                Work::Batch(mut batch) => {
                    self.count(&batch);
                    if batch.data.capacity() <= RECYCLE_MAX_BYTES {
                        batch.clear();
                        // Full: the consume thread has spares enough; drop this one.
                        let _ = self.recycle.try_send(batch);
                    }
                }
                Work::Drain(now, reply) => {
                    let messages = self.aggregator.drain(now);
                    let positions =
                        self.positions
                            .iter_mut()
                            .flat_map(|(t, parts)| {
                                parts.iter_mut().filter(|(_, pos)| pos.touched).map(
                                    move |(p, pos)| {
                                        pos.touched = false;
                                        (t.clone(), *p, pos.next, pos.watermark.take())
                                    },
                                )
                            })
                            .collect();
                    self.windows.store(0, Ordering::Relaxed);
                    let _ = reply.send((messages, positions));
                }
            }
        }
    }

    fn count(&mut self, batch: &Batch) {
        let mut classes = [0u64; 4];
        let mut bytes = 0u64;
        let slice = |r: Option<Range>| r.map(|(s, e)| &batch.data[s as usize..e as usize]);
        let mut last: Option<(u32, i32)> = None;
        let mut pos: Option<&mut PartPos> = None;
        for rec in &batch.recs {
            let topic = batch.topics[rec.topic as usize].as_str();
            let headers = BatchHeaders {
                batch,
                range: rec.headers,
            };
            let obs = Observation {
                topic,
                partition: rec.partition,
                offset: rec.offset,
                key: slice(rec.key),
                value: slice(rec.value),
                headers: &headers,
                record_timestamp: rec.timestamp,
                observed_at_ms: rec.observed_at_ms,
            };
            bytes += obs.byte_len();
            let hash =
                prefixed_message_hash(&batch.data[rec.hashed.0 as usize..rec.hashed.1 as usize]);
            let i = match self.aggregator.record_hashed(&obs, hash) {
                Classification::EventTime { .. } => 0,
                Classification::NoTime(_) => 1,
                Classification::Malformed(..) => 2,
                Classification::OutOfBounds { .. } => 3,
            };
            classes[i] += 1;
            // Positions: runs of one partition are common, so look up per run.
            let key = (rec.topic, rec.partition);
            if last != Some(key) {
                last = Some(key);
                if !self.positions.contains_key(topic) {
                    self.positions.insert(topic.to_string(), HashMap::new());
                }
                let parts = self.positions.get_mut(topic).expect("inserted above");
                let config = self.aggregator.config();
                pos = Some(parts.entry(rec.partition).or_insert_with(|| PartPos {
                    next: 0,
                    touched: false,
                    watermark: Watermark::default(),
                    rule: config.rule_for(topic).clone(),
                }));
            }
            if let Some(p) = pos.as_deref_mut() {
                p.next = rec.offset + 1;
                p.touched = true;
                if let Some(t) = rec.timestamp {
                    if !p.watermark.push(t.ms, rec.observed_at_ms, &p.rule) {
                        self.watermark_ignored.inc();
                    }
                }
            }
        }
        for (c, n) in self.classes.iter().zip(classes) {
            if n > 0 {
                c.inc_by(n);
            }
        }
        self.consumed.inc_by(batch.recs.len() as u64);
        self.consumed_bytes.inc_by(bytes);
        self.windows.store(
            self.aggregator.open_windows() + self.aggregator.pending_windows(),
            Ordering::Relaxed,
        );
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
        let needs_headers =
            et.default.header.is_some() || et.rules.iter().any(|r| r.header.is_some());
        let c = |k: &str| {
            metrics
                .classified
                .get_or_create(&KindLabel {
                    kind: k.to_string(),
                })
                .clone()
        };
        let windows = Arc::new(AtomicUsize::new(0));
        let (recycle, free) = sync_channel(IN_FLIGHT + 2);
        let worker = Worker {
            aggregator,
            recycle,
            classes: [
                c("event_time"),
                c("no_time"),
                c("malformed"),
                c("out_of_bounds"),
            ],
            consumed: metrics.consumed_messages.clone(),
            consumed_bytes: metrics.consumed_bytes.clone(),
            watermark_ignored: metrics.watermark_ignored_times.clone(),
            windows: windows.clone(),
            positions: HashMap::new(),
        };
        let (tx, rx) = sync_channel(IN_FLIGHT);
        std::thread::Builder::new()
            .name("audit-counting".into())
            .spawn(move || worker.run(rx))
            .map_err(|e| anyhow::anyhow!("cannot start the counting thread: {e}"))?;
        Ok(Counting {
            feeder: Feeder {
                tx,
                free: Arc::new(Mutex::new(free)),
                needs_headers,
                unreadable_headers: metrics.unreadable_headers.clone(),
                windows,
            },
        })
    }

    pub(crate) fn feeder(&self) -> Feeder {
        self.feeder.clone()
    }

    /// Everything counted so far, including the batch being filled: increments and
    /// the position of every partition read since the previous drain. Must be called
    /// on the consume thread.
    pub(crate) fn drain(&mut self, now_ms: i64) -> (Vec<AuditMessage>, Positions) {
        self.feeder.submit();
        let (reply_tx, reply_rx) = sync_channel(1);
        self.feeder
            .tx
            .send(Work::Drain(now_ms, reply_tx))
            .expect("counting thread alive");
        reply_rx.recv().expect("counting thread answers drains")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_764_410_400_000;
    const HOUR: i64 = 3_600_000;
    const DAY: i64 = 24 * HOUR;

    /// The default rule: skew bounds max_future 1h, max_past 30d.
    fn rule() -> Arc<CompiledRule> {
        audit_lib::EventTimeConfig::default()
            .compile()
            .unwrap()
            .rule_for("t")
            .clone()
    }

    /// B8 of issue 14, one table: each row is a sequence of report intervals, each a
    /// list of (record time, observed at) read in it, and the watermark each interval's
    /// report gives.
    #[test]
    fn watermark_table() {
        type Interval = Vec<(i64, i64)>;
        let run = |n: i64, from: i64| -> Interval { (0..n).map(|i| (from + i, NOW)).collect() };
        // (what, intervals, watermark of each interval's report)
        type Row = (&'static str, Vec<Interval>, Vec<Option<i64>>);
        let rows: Vec<Row> = vec![
            (
                "lagging backlog, then one record an hour fast last: not pushed forward",
                vec![[run(100, NOW - HOUR), vec![(NOW + HOUR, NOW)]].concat()],
                // reverted (last record's time): [Some(NOW + HOUR)]
                vec![Some(NOW - HOUR)],
            ),
            (
                "a fast record alone in its interval is outvoted by the recent records",
                vec![run(40, NOW - HOUR), vec![(NOW + HOUR, NOW + 5)]],
                // reverted: [Some(NOW - HOUR + 39), Some(NOW + HOUR)]
                vec![Some(NOW - HOUR), Some(NOW - HOUR + 9)],
            ),
            (
                "a whole interval from a fast producer: capped at the auditor's clock",
                vec![run(40, NOW + HOUR)],
                // reverted: [Some(NOW + HOUR + 39)]
                vec![Some(NOW)],
            ),
            (
                "a late auditor reading its backlog: the oldest record of the interval",
                vec![run(500, NOW - 1000), run(500, NOW - 500)],
                // reverted: [Some(NOW - 501), Some(NOW - 1)]
                vec![Some(NOW - 1000), Some(NOW - 500)],
            ),
            (
                "one record 40 days old (beyond max_past): ignored, not the min for 32 records",
                vec![
                    run(40, NOW - 100),
                    [vec![(NOW - 40 * DAY, NOW)], run(5, NOW - 50)].concat(),
                    run(5, NOW - 40),
                ],
                // reverted: [Some(NOW - 100), Some(NOW - 40 * DAY), Some(NOW - 40 * DAY)]
                vec![Some(NOW - 100), Some(NOW - 87), Some(NOW - 82)],
            ),
            (
                "only times beyond max_future: ignored, no new watermark (not capped to now)",
                vec![run(3, NOW - 10), run(40, NOW + 2 * HOUR)],
                // reverted: [Some(NOW - 10), Some(NOW)]
                vec![Some(NOW - 10), None],
            ),
            (
                "nothing read in an interval: no new watermark (the last one is kept)",
                vec![run(3, NOW - 10), vec![]],
                // reverted: [Some(NOW - 8), None]
                vec![Some(NOW - 10), None],
            ),
        ];
        let rule = rule();
        let mut failures = Vec::new();
        for (what, intervals, want) in rows {
            let mut w = Watermark::default();
            let got: Vec<Option<i64>> = intervals
                .iter()
                .map(|recs| {
                    for &(ms, obs) in recs {
                        w.push(ms, obs, &rule);
                    }
                    w.take()
                })
                .collect();
            if got != want {
                failures.push(format!("{what}: expected {want:?}, got {got:?}"));
            }
        }
        assert!(failures.is_empty(), "B8:\n{}", failures.join("\n"));
    }

    #[test]
    fn one_fast_producer_does_not_push_the_watermark() {
        // A lagging backlog (an hour old), then a whole batch from a producer whose
        // clock is an hour fast, read in the same report interval.
        let r = rule();
        let mut w = Watermark::default();
        for i in 0..100 {
            w.push(NOW - HOUR + i, NOW, &r);
        }
        for i in 0..500 {
            w.push(NOW + HOUR + i, NOW, &r);
        }
        assert_eq!(w.take(), Some(NOW - HOUR));
        // Next interval: the fast record alone is outvoted by the recent records.
        for i in 0..40 {
            w.push(NOW - HOUR + 100 + i, NOW, &r);
        }
        let _ = w.take();
        w.push(NOW + HOUR, NOW, &r);
        assert_eq!(w.take(), Some(NOW - HOUR + 100 + 9));
    }

    #[test]
    fn times_ahead_of_the_clock_count_as_the_observation_time() {
        let r = rule();
        let mut w = Watermark::default();
        w.push(NOW + HOUR, NOW, &r);
        assert_eq!(w.take(), Some(NOW));
        // Nothing read since: no new watermark (the report keeps the previous one).
        assert_eq!(w.take(), None);
    }

    #[test]
    fn in_order_records_give_the_oldest_of_the_recent_ones() {
        let r = rule();
        let mut w = Watermark::default();
        for i in 0..1000 {
            w.push(NOW - 1000 + i, NOW, &r);
        }
        // The last 32 records: the watermark trails the last one by 31 records.
        assert_eq!(w.take(), Some(NOW - 1000));
        w.push(NOW, NOW, &r);
        assert_eq!(w.take(), Some(NOW - 1000 + 969));
    }
}
