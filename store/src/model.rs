//! Row types of the store: what the collector writes and what the web service reads.
//!
//! Times are epoch milliseconds (`_ms`), as in audit message v1. Counts are `u64` as on
//! the wire; the store keeps them as signed 64-bit integers, so a value above
//! `i64::MAX` is rejected by [`validate_message`] before it reaches a transaction.

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
/// of the domain; only its SQL row types (rows.rs) are its own.
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
    /// `None`: no increment carried one, e.g. emitters older than issue 24).
    pub max_observed_at_ms: Option<i64>,
    /// `(partition, latest record time counted in it)`, by partition, from the offset
    /// ranges of the increments that carried one: the upstream evidence the engine
    /// asks a downstream tier to have read past (docs/web.md, Verdicts). Empty when
    /// none did, and for a window whose offset rows a capped read did not read whole
    /// (then the engine falls back to `max_observed_at_ms`).
    pub record_times: Vec<(i32, i64)>,
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
    /// `None` from auditors older than issue 24.
    pub max_record_time_ms: Option<i64>,
    /// The partition's records carry LogAppendTime.
    pub log_append_time: bool,
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

/// Longest topic name (Kafka's limit).
pub const MAX_TOPIC_LEN: usize = 249;
/// Longest tier, datacenter or host name.
pub const MAX_NAME_LEN: usize = 255;
/// Most offset ranges of an increment, and most partitions of a progress report.
pub const MAX_PARTITIONS: usize = 10_000;
/// Highest latency bucket index (audit-lib's histogram maps every i64 below it).
pub const MAX_BUCKET_INDEX: i32 = 2_300;
/// Shortest and longest window accepted.
pub const MIN_WINDOW_MS: i64 = 1_000;
pub const MAX_WINDOW_MS: i64 = 86_400_000;
/// Largest count one increment may carry at ingest: 2^48 (about 470 billion messages a
/// second for ten minutes). Sums of many stay far below `i64::MAX`, and saturate if not.
pub const MAX_COUNT: u64 = 1 << 48;
/// Largest `bytes` one increment may carry at ingest.
pub const MAX_BYTES: u64 = 1 << 60;
/// How far in the future (by the collector's clock) `emitted_at`, `window_start` and a
/// partition's `record_time` may be at ingest.
pub const MAX_CLOCK_SKEW_MS: i64 = 3_600_000;
/// Longest reject reason and source kept; longer ones are cut.
pub const MAX_REJECT_REASON_LEN: usize = 1024;
pub const MAX_REJECT_SOURCE_LEN: usize = 512;

/// Text as it may be stored whatever it holds: control characters (NUL among them,
/// which PostgreSQL `text` cannot hold) become U+FFFD, and the result is cut to at most
/// `max` bytes on a character boundary.
pub fn sanitize_text(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max));
    for c in text.chars() {
        let c = if c.is_control() { '\u{FFFD}' } else { c };
        if out.len() + c.len_utf8() > max {
            break;
        }
        out.push(c);
    }
    out
}

impl Reject {
    /// A reject whose reason and source are sanitised and bounded
    /// ([`MAX_REJECT_REASON_LEN`], [`MAX_REJECT_SOURCE_LEN`]) and whose payload holds no
    /// NUL, so storing it cannot fail.
    pub fn sanitized(&self) -> Reject {
        Reject {
            source: sanitize_text(&self.source, MAX_REJECT_SOURCE_LEN),
            reason: sanitize_text(&self.reason, MAX_REJECT_REASON_LEN),
            payload: self.payload.replace('\0', "\u{FFFD}"),
        }
    }
}

fn name(field: &str, value: &str, max: usize, extra: &[u8]) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("{field} is empty"));
    }
    if value.len() > max {
        return Err(format!("{field} longer than {max} bytes"));
    }
    if let Some(bad) = value
        .bytes()
        .find(|b| !(b.is_ascii_alphanumeric() || b".-_".contains(b) || extra.contains(b)))
    {
        return Err(format!(
            "{field} holds byte 0x{bad:02x}; allowed are A-Z a-z 0-9 . _ -{}",
            extra
                .iter()
                .map(|b| format!(" {}", *b as char))
                .collect::<String>()
        ));
    }
    Ok(())
}

fn names(topic: &str, tier: &str, datacenter: &str, host: &str) -> Result<(), String> {
    name("topic", topic, MAX_TOPIC_LEN, b"")?;
    name("tier", tier, MAX_NAME_LEN, b":/")?;
    name("datacenter", datacenter, MAX_NAME_LEN, b":/")?;
    name("host", host, MAX_NAME_LEN, b":/")
}

fn at_most(field: &str, value: u64, max: u64) -> Result<(), String> {
    if value > max {
        return Err(format!("{field} = {value} exceeds {max}"));
    }
    Ok(())
}

fn not_negative(field: &str, value: i64) -> Result<(), String> {
    if value < 0 {
        return Err(format!("{field} = {value} is negative"));
    }
    Ok(())
}

/// Why a message cannot be stored. Checked by the collector before writing, so that a
/// poison message is rejected with a reason instead of failing its whole batch; the
/// stores check it again (a failure there is [`crate::StoreError::Invalid`]).
/// [`validate_ingest`] adds the ingest-only bounds.
///
/// The bounds: what the store accepts (this function) and what the collector
/// accepts from the outside ([`validate_ingest`], stricter). Everything that reaches the
/// collector — HTTP bodies, records of the audit topics — is untrusted: a message
/// outside these bounds is a per-message reject with its reason, never a failed batch.
///
/// | what | bound |
/// |---|---|
/// | topic | 1–249 bytes of `A-Z a-z 0-9 . _ -` (Kafka's own rule) |
/// | tier, datacenter, host | 1–255 bytes of `A-Z a-z 0-9 . _ - : /` |
/// | window | `0 ≤ window_start`, size `window_end − window_start` from 1 s to 1 day, `window_start` a multiple of the size (epoch-aligned) |
/// | counts (`count`, `*_count`, latency counts, bucket counts) | ≤ `i64::MAX` in the store; ≤ [`MAX_COUNT`] (2^48) at ingest |
/// | `bytes` | ≤ `i64::MAX` in the store; ≤ [`MAX_BYTES`] (2^60) at ingest |
/// | latency buckets | indexes 0–[`MAX_BUCKET_INDEX`], strictly sorted, counts > 0, total ≤ `count` |
/// | offsets, progress partitions | ≤ [`MAX_PARTITIONS`] entries, partitions ≥ 0, no duplicates, offsets ≥ 0 |
/// | `emitted_at`, `window_start`, `record_time`, `max_record_time`, `max_observed_at` | ≥ 0; at ingest at most [`MAX_CLOCK_SKEW_MS`] (1 h) after the collector's clock |
/// | `lag` | ≥ 0 |
///
/// Window sums in the store saturate at `i64::MAX` rather than fail.
pub fn validate_message(message: &Message) -> Result<(), String> {
    const MAX: u64 = i64::MAX as u64;
    let m = message;
    names(&m.topic, &m.tier, &m.datacenter, &m.host)?;
    not_negative("emitted_at", m.emitted_at)?;
    match &m.body {
        AuditBody::Increment(i) => {
            let s = &i.stats;
            not_negative("window_start", i.window_start)?;
            let size = i.window_end.saturating_sub(i.window_start);
            if !(MIN_WINDOW_MS..=MAX_WINDOW_MS).contains(&size) {
                return Err(format!(
                    "window [{}, {}) is {size} ms long; allowed are {MIN_WINDOW_MS} to {MAX_WINDOW_MS} ms",
                    i.window_start, i.window_end
                ));
            }
            if i.window_start % size != 0 {
                return Err(format!(
                    "window_start {} is not a multiple of the window size {size} ms",
                    i.window_start
                ));
            }
            at_most("count", s.count, MAX)?;
            at_most("bytes", s.bytes, MAX)?;
            at_most("observation_time_count", s.observation_time_count, MAX)?;
            at_most("delivery_failed_count", s.delivery_failed_count, MAX)?;
            at_most("latency.zero_count", s.latency.zero_count(), MAX)?;
            for (name, part) in [
                ("no_time_count", s.no_time_count),
                ("malformed_count", s.malformed_count),
                ("out_of_bounds_count", s.out_of_bounds_count),
            ] {
                if part > s.count {
                    return Err(format!("{name} = {part} exceeds count = {}", s.count));
                }
            }
            // The histogram's own invariants (bucket indexes at most
            // MAX_BUCKET_INDEX, negative_count <= zero_count, max_ms >= 0, buckets
            // sorted and non-empty) hold by construction of `LatencyHistogram`.
            let mut total = s.latency.zero_count();
            for (_, count) in s.latency.buckets() {
                at_most("latency bucket count", count, MAX)?;
                total = total.saturating_add(count);
            }
            if total > s.count {
                return Err(format!(
                    "latency histogram holds {total} values, more than count = {}",
                    s.count
                ));
            }
            if s.offsets.len() > MAX_PARTITIONS {
                return Err(format!(
                    "{} offset ranges; at most {MAX_PARTITIONS} partitions allowed",
                    s.offsets.len()
                ));
            }
            if let Some(t) = s.max_observed_at {
                not_negative("max_observed_at", t)?;
            }
            let mut partitions = std::collections::HashSet::new();
            for o in &s.offsets {
                if o.partition < 0 || o.min < 0 || o.max < o.min {
                    return Err(format!(
                        "offset range of partition {} is invalid: min {} max {}",
                        o.partition, o.min, o.max
                    ));
                }
                if let Some(t) = o.max_record_time {
                    not_negative("max_record_time", t)?;
                }
                if !partitions.insert(o.partition) {
                    return Err(format!("partition {} listed twice in offsets", o.partition));
                }
            }
            Ok(())
        }
        AuditBody::Progress(parts) => {
            if parts.len() > MAX_PARTITIONS {
                return Err(format!(
                    "{} partitions in progress; at most {MAX_PARTITIONS} allowed",
                    parts.len()
                ));
            }
            let mut partitions = std::collections::HashSet::new();
            for part in parts {
                not_negative("partition", i64::from(part.partition))?;
                if part.next_offset < 0 {
                    return Err(format!(
                        "next_offset {} of partition {} is negative",
                        part.next_offset, part.partition
                    ));
                }
                for (field, t) in [
                    ("record_time", part.record_time),
                    ("max_record_time", part.max_record_time),
                ] {
                    if let Some(t) = t {
                        not_negative(field, t)?;
                    }
                }
                if let Some(lag) = part.lag {
                    not_negative("lag", lag)?;
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

/// [`validate_message`] plus the bounds only the collector can check, for messages from
/// the outside: physical limits on counts ([`MAX_COUNT`], [`MAX_BYTES`]) and times no
/// more than [`MAX_CLOCK_SKEW_MS`] ahead of `received_at_ms` (a far-future `emitted_at`
/// would pin a progress watermark; a far-future window would outlive retention).
pub fn validate_ingest(message: &Message, received_at_ms: i64) -> Result<(), String> {
    validate_message(message)?;
    let latest = received_at_ms.saturating_add(MAX_CLOCK_SKEW_MS);
    let not_future = |field: &str, t: i64| {
        if t > latest {
            Err(format!(
                "{field} = {t} is more than {MAX_CLOCK_SKEW_MS} ms after the collector's clock ({received_at_ms})"
            ))
        } else {
            Ok(())
        }
    };
    not_future("emitted_at", message.emitted_at)?;
    match &message.body {
        AuditBody::Increment(i) => {
            let s = &i.stats;
            not_future("window_start", i.window_start)?;
            // Evidence from the future would hold a window back for up to the skew:
            // bounded like the other times.
            if let Some(t) = s.max_observed_at {
                not_future("max_observed_at", t)?;
            }
            for o in &s.offsets {
                if let Some(t) = o.max_record_time {
                    not_future("max_record_time", t)?;
                }
            }
            for (field, v) in [
                ("count", s.count),
                ("latency.zero_count", s.latency.zero_count()),
            ] {
                at_most(field, v, MAX_COUNT)?;
            }
            at_most("bytes", s.bytes, MAX_BYTES)?;
            for (_, count) in s.latency.buckets() {
                at_most("latency bucket count", count, MAX_COUNT)?;
            }
        }
        AuditBody::Progress(parts) => {
            for part in parts {
                for (field, t) in [
                    ("record_time", part.record_time),
                    ("max_record_time", part.max_record_time),
                ] {
                    if let Some(t) = t {
                        not_future(field, t)?;
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn increment() -> Message {
        Message {
            version: audit_lib::AUDIT_MESSAGE_VERSION,
            uuid: Uuid::nil(),
            topic: "orders".into(),
            tier: "regional".into(),
            datacenter: "dc1".into(),
            host: "auditor-0.ns:1".into(),
            emitted_at: 1_200_001,
            body: AuditBody::Increment(Increment {
                window_start: 600_000,
                window_end: 1_200_000,
                stats: WindowStats {
                    count: 10,
                    bytes: 10,
                    ..WindowStats::default()
                },
            }),
        }
    }

    fn inc(m: &mut Message) -> &mut Increment {
        match &mut m.body {
            AuditBody::Increment(i) => i,
            AuditBody::Progress(_) => unreachable!("an increment"),
        }
    }

    fn check(f: impl Fn(&mut Message)) -> Result<(), String> {
        let mut m = increment();
        f(&mut m);
        validate_ingest(&m, 2_000_000)
    }

    #[test]
    fn names_are_bounded_to_a_safe_set() {
        assert_eq!(check(|_| {}), Ok(()));
        for bad in ["a\0b", "a b", "a\"b", "a\nb", "<!channel>", "x}", "é", ""] {
            assert!(check(|m| m.topic = bad.into()).is_err(), "{bad:?}");
            assert!(check(|m| m.host = bad.into()).is_err(), "{bad:?}");
        }
        assert!(check(|m| m.topic = "a:b".into()).is_err(), "Kafka's rule");
        assert!(check(|m| m.topic = "t".repeat(249)).is_ok());
        assert!(check(|m| m.topic = "t".repeat(250)).is_err());
        assert!(check(|m| m.tier = "t".repeat(256)).is_err());
    }

    #[test]
    fn numbers_windows_and_times_are_bounded() {
        assert!(check(|m| inc(m).stats.count = MAX_COUNT + 1).is_err());
        assert!(check(|m| inc(m).stats.count = MAX_COUNT).is_ok());
        assert!(check(|m| inc(m).stats.bytes = MAX_BYTES + 1).is_err());
        assert!(
            check(|m| inc(m).window_start = 600_001).is_err(),
            "unaligned"
        );
        assert!(check(|m| inc(m).window_end = 600_500).is_err(), "too short");
        assert!(check(|m| {
            inc(m).window_start = 0;
            inc(m).window_end = 2 * MAX_WINDOW_MS
        })
        .is_err());
        assert!(check(|m| m.emitted_at = 2_000_000 + MAX_CLOCK_SKEW_MS + 1).is_err());
        assert!(check(|m| m.emitted_at = -1).is_err());
        assert!(
            check(|m| inc(m).stats.latency.record_n(5, 11)).is_err(),
            "more latencies than count"
        );
        assert!(check(|m| {
            inc(m).stats.offsets = (0..=MAX_PARTITIONS as i32)
                .map(|partition| OffsetSpan::new(partition, 0, None))
                .collect()
        })
        .is_err());
        let progress = |n: usize| Message {
            version: audit_lib::AUDIT_MESSAGE_VERSION,
            uuid: Uuid::nil(),
            topic: "orders".into(),
            tier: "regional".into(),
            datacenter: "dc1".into(),
            host: "h".into(),
            emitted_at: 1,
            body: AuditBody::Progress(
                (0..n as i32)
                    .map(|partition| PartitionProgress {
                        partition,
                        next_offset: 0,
                        record_time: Some(1),
                        lag: Some(0),
                        ..PartitionProgress::default()
                    })
                    .collect(),
            ),
        };
        assert!(validate_ingest(&progress(MAX_PARTITIONS), 0).is_ok());
        let reason = validate_ingest(&progress(100_001), 0).unwrap_err();
        assert!(reason.contains("100001 partitions"), "{reason}");
    }

    /// Issue 24: the record-time evidence is bounded like the other times: a
    /// negative or far-future one is a reject, not a window held back for hours.
    #[test]
    fn record_time_evidence_is_bounded() {
        let future = 2_000_000 + MAX_CLOCK_SKEW_MS + 1;
        for t in [-1, future] {
            assert!(
                check(|m| inc(m).stats.max_observed_at = Some(t)).is_err(),
                "{t}"
            );
            assert!(
                check(|m| inc(m).stats.offsets = vec![OffsetSpan::new(0, 5, Some(t))]).is_err(),
                "{t}"
            );
            let progress = Message {
                body: AuditBody::Progress(vec![PartitionProgress {
                    max_record_time: Some(t),
                    ..PartitionProgress::default()
                }]),
                ..increment()
            };
            let reason = validate_ingest(&progress, 2_000_000).unwrap_err();
            assert!(reason.contains("max_record_time"), "{reason}");
        }
        assert!(check(|m| inc(m).stats.max_observed_at = Some(2_000_000)).is_ok());
    }

    #[test]
    fn sanitized_text_has_no_control_characters_and_is_bounded() {
        assert_eq!(sanitize_text("a\0b\nc", 100), "a\u{FFFD}b\u{FFFD}c");
        assert_eq!(sanitize_text("ééé", 5), "éé");
    }
}
