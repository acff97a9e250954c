//! The store's domain types, public: what the collector writes (batches of audit
//! messages and rejects) and what readers get back (window, progress, emitter and
//! reject rows). How the database holds them is db_rows.rs.
//!
//! Times are epoch milliseconds (`_ms`), as in audit message v1. Counts are `u64` as on
//! the wire; the store keeps them as signed 64-bit integers, so a value above
//! `i64::MAX` is rejected by [`crate::validate_message`] before it reaches a transaction.

use serde::{Deserialize, Serialize};

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

/// An audit message as the store takes it: audit-lib's own type (message format v1),
/// an increment of window statistics or a progress report. The store keeps no copy
/// of the domain; only its SQL row types (db_rows.rs) are its own.
pub use audit_lib::{
    AuditBody, AuditMessage as Message, Increment, LatencyHistogram, OffsetSpan, PartitionProgress,
    WindowStats,
};

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
    /// Not in `count`: messages with no tier-invariant time, windowed by the
    /// auditor's observation time; shown, never compared across tiers.
    pub observation_time_count: u64,
    /// Not in `count`: messages a producer tier was told it could not deliver (its
    /// known loss; silent loss is the next tier's count below this one's).
    pub delivery_failed_count: u64,
    pub checksum: u64,
    /// Merged latency histogram of all increments.
    pub latency: LatencyHistogram,
    /// How many increments were added into this row.
    pub increments: u64,
    pub first_received_at_ms: i64,
    pub last_received_at_ms: i64,
    /// The read's bucket cap ([`crate::MAX_BUCKET_ROWS`]) left this row without its
    /// latency: `latency` is empty because it was not read, not because nothing was
    /// measured (a delay cannot be ruled out).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub latency_unread: bool,
    /// The latest observation time of the row's increments (their emitters' clocks;
    /// `None`: no increment carried one, e.g. emitters older than the field).
    pub max_observed_at_ms: Option<i64>,
    /// `(partition, latest record time counted in it)`, by partition, from the offset
    /// ranges of the increments that carried one: the upstream evidence the engine
    /// asks a downstream tier to have read past (docs/web.md, Verdicts). Empty when
    /// none did, and for a window whose offset rows a capped read did not read whole
    /// (then the engine falls back to `max_observed_at_ms`).
    pub record_times: Vec<(i32, i64)>,
    /// `(partition, highest offset counted in it)`, by partition, from the offset
    /// ranges of every increment: what a replicator must have copied before the
    /// downstream's count can prove a loss while the window is open (docs/design.md §6,
    /// rule 0). Empty when the increments carried no offset ranges, and for a window
    /// whose offset rows a capped read did not read whole: then nothing can be proven
    /// early.
    #[serde(default)]
    pub max_offsets: Vec<(i32, i64)>,
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
    /// The latest record time the auditor read on the partition (capped at its clock);
    /// `None` from auditors older than the field.
    pub max_record_time_ms: Option<i64>,
    /// The partition's records carry LogAppendTime.
    pub log_append_time: bool,
}

/// A loss the replicator's evidence proved before its window was final (docs/design.md
/// §6, rule 0): web keeps judging the window lost whatever arrives later (the
/// proven-loss hold).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProvenLoss {
    pub window_start_ms: i64,
    pub topic: String,
    pub upstream: String,
    pub downstream: String,
    pub datacenter: String,
    /// The proof, as the verdict's reason said it.
    pub reason: String,
    /// When it was recorded (epoch ms): as read back, `save_proven_loss`'s `now_ms`
    /// (ignored on save).
    pub proven_at_ms: i64,
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

/// What one [`crate::Ingest::rollup_counted`] did with the staged increments it took
/// off the queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RollupOutcome {
    /// Increments taken off the queue (what [`crate::Ingest::rollup`] returns).
    pub taken: u64,
    /// Of those, increments whose staged message was not found (or could not be read
    /// back): nothing was added for them, and each was kept as a reject (source
    /// `rollup`) naming its key. Never silent: retention takes the queued keys of
    /// the days it deletes off the queue itself.
    pub missing: u64,
}

impl RollupOutcome {
    /// Increments added to their windows (or quarantined as refused by the database).
    pub fn rolled_up(&self) -> u64 {
        self.taken - self.missing
    }
}

/// What one retention pass removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionOutcome {
    /// Rows deleted one by one (SQLite; PostgreSQL: from the default partitions).
    pub windows: u64,
    pub messages: u64,
    pub rejects: u64,
    /// Whole day partitions dropped (PostgreSQL), of every partitioned table.
    pub partitions: u64,
    /// Steps that failed in this call (PostgreSQL; each logged with its cause). The
    /// steps are independent: the others ran. Not part of [`RetentionOutcome::total`].
    pub failed_steps: u64,
}

impl RetentionOutcome {
    /// Rows and partitions removed.
    pub fn total(&self) -> u64 {
        self.windows + self.messages + self.rejects + self.partitions
    }
}
