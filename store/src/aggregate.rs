//! Batch-level work shared by both stores: in-batch deduplication and the roll-up of
//! first-seen messages into per-window deltas, so each window, bucket and partition
//! is written once per batch whatever the number of increments behind it.
//!
//! Everything is kept in `BTreeMap`s: writes then touch rows in one global key order,
//! so concurrent collectors cannot deadlock on each other's row locks.

use std::collections::{BTreeMap, HashSet};

use uuid::Uuid;

use crate::domain::{AuditBody, Batch, BatchOutcome, Message, WindowKey, WriteOutcome};
use crate::error::StoreError;
use crate::validate::validate_message;

/// Deduplication, step 1 of 2 (within the batch): indices of the messages of `batch`
/// whose UUID did not occur earlier in the batch, after checking each one. The UUIDs
/// come back sorted (lock order) with their index. Step 2, across batches, is the
/// `audit_message` table (UUID primary key) in the same transaction: `ON CONFLICT
/// (uuid) DO NOTHING` or a probe (`PgStore::stage_in`) on PostgreSQL,
/// `SqliteStore::write_in` on SQLite; a UUID seen before is
/// [`WriteOutcome::Duplicate`].
pub(crate) fn first_in_batch(batch: &Batch) -> Result<Vec<(Uuid, usize)>, StoreError> {
    let mut seen = HashSet::with_capacity(batch.messages.len());
    let mut firsts = Vec::with_capacity(batch.messages.len());
    for (index, message) in batch.messages.iter().enumerate() {
        validate_message(message)
            .map_err(|reason| StoreError::Invalid(format!("message {}: {reason}", message.uuid)))?;
        if seen.insert(message.uuid) {
            firsts.push((message.uuid, index));
        }
    }
    firsts.sort_unstable();
    Ok(firsts)
}

#[derive(Debug, Default, Clone)]
pub(crate) struct WindowDelta {
    pub window_end_ms: i64,
    pub count: i64,
    pub bytes: i64,
    pub no_time_count: i64,
    pub malformed_count: i64,
    pub out_of_bounds_count: i64,
    pub observation_time_count: i64,
    pub delivery_failed_count: i64,
    pub checksum: u64,
    pub zero_count: i64,
    pub negative_count: i64,
    pub max_ms: i64,
    pub increments: i64,
    pub buckets: BTreeMap<i32, i64>,
    /// partition → (min, max, latest record time)
    pub offsets: BTreeMap<i32, (i64, i64, Option<i64>)>,
    /// The latest observation time of the increments (`None`: none carried one).
    pub max_observed_at: Option<i64>,
}

#[derive(Debug, Clone)]
pub(crate) struct ProgressDelta<'m> {
    pub host: &'m str,
    pub next_offset: i64,
    pub record_time_ms: Option<i64>,
    pub lag: Option<i64>,
    pub emitted_at_ms: i64,
    pub max_record_time_ms: Option<i64>,
    pub log_append_time: bool,
}

/// (topic, tier, datacenter, partition), borrowed from the batch's messages: a
/// progress report of 10 000 partitions costs 10 000 small entries, not 40 000 copies
/// of its names.
pub(crate) type ProgressKey<'m> = (&'m str, &'m str, &'m str, i32);
/// (tier, datacenter, host)
pub(crate) type EmitterKey<'m> = (&'m str, &'m str, &'m str);

/// A batch's first-seen messages rolled up, borrowing their names.
#[derive(Debug, Default)]
pub(crate) struct Rollup<'m> {
    pub windows: BTreeMap<WindowKey, WindowDelta>,
    pub progress: BTreeMap<ProgressKey<'m>, ProgressDelta<'m>>,
    /// → (latest emitted_at, messages)
    pub emitters: BTreeMap<EmitterKey<'m>, (i64, i64)>,
}

// Validation guarantees every u64 below fits in i64, and sums of a batch stay far
// below i64::MAX for any realistic batch; saturating keeps a hostile batch from
// panicking in debug builds (the database then rejects nothing silently: sums are
// bounded by i64 in SQL too).
fn add(a: i64, b: u64) -> i64 {
    a.saturating_add(i64::try_from(b).unwrap_or(i64::MAX))
}

impl<'m> Rollup<'m> {
    /// Windows, progress and emitters of `messages`, received at `received_at_ms`.
    pub fn of(messages: impl IntoIterator<Item = &'m Message>, received_at_ms: i64) -> Rollup<'m> {
        Self::build(messages, received_at_ms, true)
    }

    /// Progress and emitters only, what staging writes at once (increments reach their
    /// windows at the roll-up): one pass, no window deltas.
    pub fn staged(
        messages: impl IntoIterator<Item = &'m Message>,
        received_at_ms: i64,
    ) -> Rollup<'m> {
        Self::build(messages, received_at_ms, false)
    }

    fn build(
        messages: impl IntoIterator<Item = &'m Message>,
        received_at_ms: i64,
        windows: bool,
    ) -> Rollup<'m> {
        let mut rollup = Rollup::default();
        for message in messages {
            let m = message;
            match &m.body {
                AuditBody::Increment(_) if !windows => {
                    rollup.emit(&m.tier, &m.datacenter, &m.host, m.emitted_at);
                }
                AuditBody::Increment(i) => {
                    let s = &i.stats;
                    let key = WindowKey {
                        topic: m.topic.clone(),
                        tier: m.tier.clone(),
                        datacenter: m.datacenter.clone(),
                        window_start_ms: i.window_start,
                    };
                    let w = rollup.windows.entry(key).or_default();
                    w.window_end_ms = w.window_end_ms.max(i.window_end);
                    w.count = add(w.count, s.count);
                    w.bytes = add(w.bytes, s.bytes);
                    w.no_time_count = add(w.no_time_count, s.no_time_count);
                    w.malformed_count = add(w.malformed_count, s.malformed_count);
                    w.out_of_bounds_count = add(w.out_of_bounds_count, s.out_of_bounds_count);
                    w.observation_time_count =
                        add(w.observation_time_count, s.observation_time_count);
                    w.delivery_failed_count = add(w.delivery_failed_count, s.delivery_failed_count);
                    w.checksum = w.checksum.wrapping_add(s.checksum.0);
                    w.zero_count = add(w.zero_count, s.latency.zero_count());
                    w.negative_count = add(w.negative_count, s.latency.negative_count());
                    w.max_ms = w.max_ms.max(s.latency.max_ms());
                    w.increments += 1;
                    for (bucket, count) in s.latency.buckets() {
                        let c = w.buckets.entry(bucket as i32).or_default();
                        *c = add(*c, count);
                    }
                    w.max_observed_at = w.max_observed_at.max(s.max_observed_at);
                    for o in &s.offsets {
                        w.offsets
                            .entry(o.partition)
                            .and_modify(|(min, max, record_time)| {
                                *min = (*min).min(o.min);
                                *max = (*max).max(o.max);
                                *record_time = (*record_time).max(o.max_record_time);
                            })
                            .or_insert((o.min, o.max, o.max_record_time));
                    }
                    rollup.emit(&m.tier, &m.datacenter, &m.host, m.emitted_at);
                }
                AuditBody::Progress(parts) => {
                    for part in parts {
                        let key = (
                            m.topic.as_str(),
                            m.tier.as_str(),
                            m.datacenter.as_str(),
                            part.partition,
                        );
                        let delta = ProgressDelta {
                            host: m.host.as_str(),
                            next_offset: part.next_offset,
                            record_time_ms: part.record_time,
                            lag: part.lag,
                            emitted_at_ms: m.emitted_at,
                            max_record_time_ms: part.max_record_time,
                            log_append_time: part.log_append_time,
                        };
                        // Same rule as in SQL: the latest emitted_at wins, ties go to
                        // the later message. All of a batch was received at once, so
                        // capping each at that time orders them as SQL does: one
                        // dated in the future does not outrank the later ones.
                        let sent = |d: &ProgressDelta| d.emitted_at_ms.min(received_at_ms);
                        match rollup.progress.get(&key) {
                            Some(old) if sent(old) > sent(&delta) => {}
                            _ => {
                                rollup.progress.insert(key, delta);
                            }
                        }
                    }
                    rollup.emit(&m.tier, &m.datacenter, &m.host, m.emitted_at);
                }
            }
        }
        rollup
    }

    fn emit(&mut self, tier: &'m str, datacenter: &'m str, host: &'m str, emitted_at_ms: i64) {
        let e = self
            .emitters
            .entry((tier, datacenter, host))
            .or_insert((emitted_at_ms, 0));
        e.0 = e.0.max(emitted_at_ms);
        e.1 += 1;
    }
}

/// The size (ms) of the first increment of `batch` the store accepted.
pub(crate) fn first_window_ms(batch: &Batch, outcome: &BatchOutcome) -> Option<i64> {
    batch
        .messages
        .iter()
        .zip(&outcome.outcomes)
        .filter(|(_, o)| **o == WriteOutcome::Accepted)
        .find_map(|(m, _)| m.as_increment())
        .map(|i| i.window_end - i.window_start)
}

/// The deployment's window size as a store last read or fixed it (0: not known).
#[derive(Debug, Clone, Default)]
pub(crate) struct WindowSizeCache(std::sync::Arc<std::sync::atomic::AtomicI64>);

impl WindowSizeCache {
    pub fn get(&self) -> Option<i64> {
        Some(self.0.load(std::sync::atomic::Ordering::Relaxed)).filter(|&ms| ms > 0)
    }

    pub fn set(&self, ms: i64) {
        self.0.store(ms, std::sync::atomic::Ordering::Relaxed);
    }
}
