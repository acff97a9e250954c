//! Row types of the store: what the collector writes and what the web service reads.
//!
//! Times are epoch milliseconds (`_ms`), as in audit message v1. Counts are `u64` as on
//! the wire; the store keeps them as signed 64-bit integers, so a value above
//! `i64::MAX` is rejected by [`validate_message`] before it reaches a transaction.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A half-open range `[start_ms, end_ms)` of window starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeRange {
    pub start_ms: i64,
    pub end_ms: i64,
}

impl TimeRange {
    pub fn new(start_ms: i64, end_ms: i64) -> Self {
        Self { start_ms, end_ms }
    }
}

/// Identifies one stored window row.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WindowKey {
    pub topic: String,
    pub tier: String,
    pub datacenter: String,
    pub window_start_ms: i64,
}

/// Lowest and highest offset counted in one partition of the audited topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetRange {
    pub partition: i32,
    pub min: i64,
    pub max: i64,
}

/// Mergeable latency histogram (audit message v1 `latency`): `buckets` are
/// `(index, count)` pairs sorted by index with counts > 0.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Latency {
    pub zero_count: u64,
    pub negative_count: u64,
    pub max_ms: u64,
    pub buckets: Vec<(i32, u64)>,
}

/// One increment of window statistics (audit message v1, `kind = "increment"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Increment {
    pub uuid: Uuid,
    pub topic: String,
    pub tier: String,
    pub datacenter: String,
    pub host: String,
    pub window_start_ms: i64,
    pub window_end_ms: i64,
    pub emitted_at_ms: i64,
    pub count: u64,
    pub bytes: u64,
    pub no_time_count: u64,
    pub malformed_count: u64,
    pub out_of_bounds_count: u64,
    /// Wrapping (mod 2^64) sum of per-message hashes.
    pub checksum: u64,
    pub latency: Latency,
    pub offsets: Vec<OffsetRange>,
}

/// Progress of one audited partition as reported by an auditor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionProgress {
    pub partition: i32,
    pub next_offset: i64,
    pub record_time_ms: Option<i64>,
    pub lag: Option<i64>,
}

/// A progress report (audit message v1, `kind = "progress"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub uuid: Uuid,
    pub topic: String,
    pub tier: String,
    pub datacenter: String,
    pub host: String,
    pub emitted_at_ms: i64,
    pub partitions: Vec<PartitionProgress>,
}

/// An audit message as the store sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Message {
    Increment(Increment),
    Progress(Progress),
}

impl Message {
    pub fn uuid(&self) -> Uuid {
        match self {
            Message::Increment(i) => i.uuid,
            Message::Progress(p) => p.uuid,
        }
    }
}

/// A message that failed validation: kept with its reason, never counted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reject {
    /// Where it came from, e.g. `kafka:regional/audit/3@1234` or `http:127.0.0.1:5555`.
    pub source: String,
    pub reason: String,
    /// The payload, lossily decoded and truncated by the caller.
    pub payload: String,
}

/// What the collector writes in one database transaction.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    pub messages: Vec<Message>,
    pub rejects: Vec<Reject>,
    /// The collector's clock when the batch was written.
    pub received_at_ms: i64,
}

/// Outcome of one message of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteOutcome {
    /// First time this UUID was seen: its increment was added.
    Accepted,
    /// The UUID was already stored (or appeared earlier in the same batch): nothing added.
    Duplicate,
}

/// Per message of [`Batch::messages`], in the same order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    pub outcomes: Vec<WriteOutcome>,
}

impl BatchOutcome {
    pub fn accepted(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|o| **o == WriteOutcome::Accepted)
            .count()
    }
    pub fn duplicates(&self) -> usize {
        self.outcomes.len() - self.accepted()
    }
}

/// The sum of all first-seen increments of one (topic, tier, datacenter, window).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowRow {
    pub topic: String,
    pub tier: String,
    pub datacenter: String,
    pub window_start_ms: i64,
    pub window_end_ms: i64,
    pub count: u64,
    pub bytes: u64,
    pub no_time_count: u64,
    pub malformed_count: u64,
    pub out_of_bounds_count: u64,
    pub checksum: u64,
    /// Merged latency histogram of all increments.
    pub latency: Latency,
    /// How many increments were added into this row.
    pub increments: u64,
    pub first_received_at_ms: i64,
    pub last_received_at_ms: i64,
}

impl WindowRow {
    pub fn key(&self) -> WindowKey {
        WindowKey {
            topic: self.topic.clone(),
            tier: self.tier.clone(),
            datacenter: self.datacenter.clone(),
            window_start_ms: self.window_start_ms,
        }
    }
}

/// One page of windows across topics, ordered by (topic, window_start, tier, datacenter).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowPage {
    pub rows: Vec<WindowRow>,
    /// Pass as `after_topic` to get the next page; `None` when this was the last.
    pub next_after_topic: Option<String>,
}

/// Latest progress watermark of one partition at one tier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgressRow {
    pub topic: String,
    pub tier: String,
    pub datacenter: String,
    pub partition: i32,
    pub host: String,
    pub next_offset: i64,
    pub record_time_ms: Option<i64>,
    pub lag: Option<i64>,
    pub emitted_at_ms: i64,
    pub received_at_ms: i64,
}

/// When an emitter (auditor instance) was last heard from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmitterRow {
    pub tier: String,
    pub datacenter: String,
    pub host: String,
    /// Latest `emitted_at` of its accepted messages (its clock).
    pub last_emitted_at_ms: i64,
    /// When the collector last accepted a message of it (the collector's clock).
    pub last_received_at_ms: i64,
    pub messages: u64,
}

/// A stored reject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectRow {
    pub id: i64,
    pub received_at_ms: i64,
    pub source: String,
    pub reason: String,
    pub payload: String,
}

/// What one retention pass removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionOutcome {
    pub windows: u64,
    pub messages: u64,
    pub rejects: u64,
}

impl RetentionOutcome {
    pub fn total(&self) -> u64 {
        self.windows + self.messages + self.rejects
    }
}

/// Why a message cannot be stored. Checked by the collector before writing, so that a
/// poison message is rejected with a reason instead of failing its whole batch.
pub fn validate_message(message: &Message) -> Result<(), String> {
    fn text(field: &str, value: &str) -> Result<(), String> {
        if value.is_empty() {
            return Err(format!("{field} is empty"));
        }
        if value.len() > MAX_NAME_LEN {
            return Err(format!("{field} longer than {MAX_NAME_LEN} bytes"));
        }
        Ok(())
    }
    fn fits(field: &str, value: u64) -> Result<(), String> {
        if value > i64::MAX as u64 {
            return Err(format!("{field} = {value} exceeds {}", i64::MAX));
        }
        Ok(())
    }
    match message {
        Message::Increment(i) => {
            text("topic", &i.topic)?;
            text("tier", &i.tier)?;
            text("datacenter", &i.datacenter)?;
            text("host", &i.host)?;
            if i.window_end_ms <= i.window_start_ms {
                return Err(format!(
                    "window_end {} is not after window_start {}",
                    i.window_end_ms, i.window_start_ms
                ));
            }
            fits("count", i.count)?;
            fits("bytes", i.bytes)?;
            fits("latency.zero_count", i.latency.zero_count)?;
            fits("latency.max_ms", i.latency.max_ms)?;
            for (name, part) in [
                ("no_time_count", i.no_time_count),
                ("malformed_count", i.malformed_count),
                ("out_of_bounds_count", i.out_of_bounds_count),
            ] {
                if part > i.count {
                    return Err(format!("{name} = {part} exceeds count = {}", i.count));
                }
            }
            if i.latency.negative_count > i.latency.zero_count {
                return Err(format!(
                    "latency.negative_count = {} exceeds latency.zero_count = {}",
                    i.latency.negative_count, i.latency.zero_count
                ));
            }
            let mut previous: Option<i32> = None;
            let mut total = i.latency.zero_count;
            for &(index, count) in &i.latency.buckets {
                if previous.is_some_and(|p| p >= index) {
                    return Err(format!(
                        "latency.buckets not strictly sorted at index {index}"
                    ));
                }
                if count == 0 {
                    return Err(format!("latency bucket {index} has count 0"));
                }
                fits("latency bucket count", count)?;
                total = total.saturating_add(count);
                previous = Some(index);
            }
            if total > i.count {
                return Err(format!(
                    "latency histogram holds {total} values, more than count = {}",
                    i.count
                ));
            }
            let mut partitions = std::collections::HashSet::new();
            for o in &i.offsets {
                if o.min < 0 || o.max < o.min {
                    return Err(format!(
                        "offset range of partition {} is invalid: min {} max {}",
                        o.partition, o.min, o.max
                    ));
                }
                if !partitions.insert(o.partition) {
                    return Err(format!("partition {} listed twice in offsets", o.partition));
                }
            }
            Ok(())
        }
        Message::Progress(p) => {
            text("topic", &p.topic)?;
            text("tier", &p.tier)?;
            text("datacenter", &p.datacenter)?;
            text("host", &p.host)?;
            let mut partitions = std::collections::HashSet::new();
            for part in &p.partitions {
                if part.next_offset < 0 {
                    return Err(format!(
                        "next_offset {} of partition {} is negative",
                        part.next_offset, part.partition
                    ));
                }
                if !partitions.insert(part.partition) {
                    return Err(format!(
                        "partition {} listed twice in progress",
                        part.partition
                    ));
                }
            }
            Ok(())
        }
    }
}

/// Longest topic, tier, datacenter or host name accepted (Kafka topics are ≤ 249).
pub const MAX_NAME_LEN: usize = 512;
