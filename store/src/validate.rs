//! The bounds of what the store accepts and what the collector accepts from the
//! outside, and the typed reason a message is rejected ([`RejectReason`]).

use crate::domain::*;

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

/// Why a message is rejected. Its `Display` is the reason stored with the reject and
/// logged (word for word what the store said before the reasons were typed), so
/// stored rejects and their counters read the same.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RejectReason {
    #[error("{field} is empty")]
    EmptyName { field: &'static str },
    #[error("{field} longer than {max} bytes")]
    NameTooLong { field: &'static str, max: usize },
    /// `allowed_extra`: the bytes this field allows beyond `A-Z a-z 0-9 . _ -`.
    #[error(
        "{field} holds byte 0x{byte:02x}; allowed are A-Z a-z 0-9 . _ -{}",
        spaced(allowed_extra)
    )]
    ForbiddenByte {
        field: &'static str,
        byte: u8,
        allowed_extra: &'static [u8],
    },
    #[error("{field} = {value} is negative")]
    Negative { field: &'static str, value: i64 },
    #[error("{field} = {value} exceeds {max}")]
    TooLarge {
        field: &'static str,
        value: u64,
        max: u64,
    },
    #[error("window [{start}, {end}) is {size} ms long; allowed are {MIN_WINDOW_MS} to {MAX_WINDOW_MS} ms")]
    WindowLength { start: i64, end: i64, size: i64 },
    #[error("window_start {start} is not a multiple of the window size {size} ms")]
    WindowUnaligned { start: i64, size: i64 },
    /// A part of `count` (messages without a time, malformed, out of bounds) above it.
    #[error("{field} = {value} exceeds count = {count}")]
    PartExceedsCount {
        field: &'static str,
        value: u64,
        count: u64,
    },
    #[error("latency histogram holds {total} values, more than count = {count}")]
    LatencyExceedsCount { total: u64, count: u64 },
    #[error("{ranges} offset ranges; at most {MAX_PARTITIONS} partitions allowed")]
    TooManyOffsetRanges { ranges: usize },
    #[error("offset range of partition {partition} is invalid: min {min} max {max}")]
    InvalidOffsetRange { partition: i32, min: i64, max: i64 },
    #[error("partition {partition} listed twice in offsets")]
    OffsetPartitionTwice { partition: i32 },
    #[error("{partitions} partitions in progress; at most {MAX_PARTITIONS} allowed")]
    TooManyProgressPartitions { partitions: usize },
    #[error("next_offset {next_offset} of partition {partition} is negative")]
    NegativeNextOffset { partition: i32, next_offset: i64 },
    #[error("partition {partition} listed twice in progress")]
    ProgressPartitionTwice { partition: i32 },
    /// A time more than [`MAX_CLOCK_SKEW_MS`] after the collector's clock.
    #[error("{field} = {value} is more than {MAX_CLOCK_SKEW_MS} ms after the collector's clock ({received_at_ms})")]
    InTheFuture {
        field: &'static str,
        value: i64,
        received_at_ms: i64,
    },
}

impl RejectReason {
    /// The reason as stored with a reject.
    pub fn reason(&self) -> String {
        self.to_string()
    }
}

fn spaced(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!(" {}", *b as char)).collect()
}

fn name(
    field: &'static str,
    value: &str,
    max: usize,
    allowed_extra: &'static [u8],
) -> Result<(), RejectReason> {
    if value.is_empty() {
        return Err(RejectReason::EmptyName { field });
    }
    if value.len() > max {
        return Err(RejectReason::NameTooLong { field, max });
    }
    if let Some(byte) = value
        .bytes()
        .find(|b| !(b.is_ascii_alphanumeric() || b".-_".contains(b) || allowed_extra.contains(b)))
    {
        return Err(RejectReason::ForbiddenByte {
            field,
            byte,
            allowed_extra,
        });
    }
    Ok(())
}

fn names(topic: &str, tier: &str, datacenter: &str, host: &str) -> Result<(), RejectReason> {
    name("topic", topic, MAX_TOPIC_LEN, b"")?;
    name("tier", tier, MAX_NAME_LEN, b":/")?;
    name("datacenter", datacenter, MAX_NAME_LEN, b":/")?;
    name("host", host, MAX_NAME_LEN, b":/")
}

fn at_most(field: &'static str, value: u64, max: u64) -> Result<(), RejectReason> {
    if value > max {
        return Err(RejectReason::TooLarge { field, value, max });
    }
    Ok(())
}

fn not_negative(field: &'static str, value: i64) -> Result<(), RejectReason> {
    if value < 0 {
        return Err(RejectReason::Negative { field, value });
    }
    Ok(())
}

/// Checks that a message can be stored: `Err` says why not. Checked by the collector before writing, so that a
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
pub fn validate_message(message: &Message) -> Result<(), RejectReason> {
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
                return Err(RejectReason::WindowLength {
                    start: i.window_start,
                    end: i.window_end,
                    size,
                });
            }
            if i.window_start % size != 0 {
                return Err(RejectReason::WindowUnaligned {
                    start: i.window_start,
                    size,
                });
            }
            at_most("count", s.count, MAX)?;
            at_most("bytes", s.bytes, MAX)?;
            at_most("observation_time_count", s.observation_time_count, MAX)?;
            at_most("delivery_failed_count", s.delivery_failed_count, MAX)?;
            at_most("latency.zero_count", s.latency.zero_count(), MAX)?;
            for (field, value) in [
                ("no_time_count", s.no_time_count),
                ("malformed_count", s.malformed_count),
                ("out_of_bounds_count", s.out_of_bounds_count),
            ] {
                if value > s.count {
                    return Err(RejectReason::PartExceedsCount {
                        field,
                        value,
                        count: s.count,
                    });
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
                return Err(RejectReason::LatencyExceedsCount {
                    total,
                    count: s.count,
                });
            }
            if s.offsets.len() > MAX_PARTITIONS {
                return Err(RejectReason::TooManyOffsetRanges {
                    ranges: s.offsets.len(),
                });
            }
            if let Some(t) = s.max_observed_at {
                not_negative("max_observed_at", t)?;
            }
            let mut partitions = std::collections::HashSet::new();
            for o in &s.offsets {
                if o.partition < 0 || o.min < 0 || o.max < o.min {
                    return Err(RejectReason::InvalidOffsetRange {
                        partition: o.partition,
                        min: o.min,
                        max: o.max,
                    });
                }
                if let Some(t) = o.max_record_time {
                    not_negative("max_record_time", t)?;
                }
                if !partitions.insert(o.partition) {
                    return Err(RejectReason::OffsetPartitionTwice {
                        partition: o.partition,
                    });
                }
            }
            Ok(())
        }
        AuditBody::Progress(parts) => {
            if parts.len() > MAX_PARTITIONS {
                return Err(RejectReason::TooManyProgressPartitions {
                    partitions: parts.len(),
                });
            }
            let mut partitions = std::collections::HashSet::new();
            for part in parts {
                not_negative("partition", i64::from(part.partition))?;
                if part.next_offset < 0 {
                    return Err(RejectReason::NegativeNextOffset {
                        partition: part.partition,
                        next_offset: part.next_offset,
                    });
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
                    return Err(RejectReason::ProgressPartitionTwice {
                        partition: part.partition,
                    });
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
pub fn validate_ingest(message: &Message, received_at_ms: i64) -> Result<(), RejectReason> {
    validate_message(message)?;
    let latest = received_at_ms.saturating_add(MAX_CLOCK_SKEW_MS);
    let not_future = |field: &'static str, value: i64| {
        if value > latest {
            Err(RejectReason::InTheFuture {
                field,
                value,
                received_at_ms,
            })
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

    fn check(f: impl Fn(&mut Message)) -> Result<(), RejectReason> {
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
        let reason = validate_ingest(&progress(100_001), 0).unwrap_err().reason();
        assert!(reason.contains("100001 partitions"), "{reason}");
    }

    /// The record-time evidence (docs/web.md, Verdicts, rule 4) is bounded like the
    /// other times: a negative or far-future one is a reject, not a window held back
    /// for hours.
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
            let reason = validate_ingest(&progress, 2_000_000).unwrap_err().reason();
            assert!(reason.contains("max_record_time"), "{reason}");
        }
        assert!(check(|m| inc(m).stats.max_observed_at = Some(2_000_000)).is_ok());
    }

    #[test]
    fn sanitized_text_has_no_control_characters_and_is_bounded() {
        assert_eq!(sanitize_text("a\0b\nc", 100), "a\u{FFFD}b\u{FFFD}c");
        assert_eq!(sanitize_text("ééé", 5), "éé");
    }

    /// Every reject reason, word for word as stored with a reject and logged: the
    /// typed reasons must print exactly what the strings said before them.
    #[test]
    fn each_reject_reason_reads_as_it_always_has() {
        let progress = |parts: Vec<PartitionProgress>| Message {
            body: AuditBody::Progress(parts),
            ..increment()
        };
        let part = |partition: i32| PartitionProgress {
            partition,
            ..PartitionProgress::default()
        };
        let offsets = |m: &mut Message, spans: Vec<OffsetSpan>| inc(m).stats.offsets = spans;
        let far = 2_000_000 + MAX_CLOCK_SKEW_MS + 1;
        let mut table: Vec<(Message, &str)> = Vec::new();
        let mut row = |f: &dyn Fn(&mut Message), reason: &'static str| {
            let mut m = increment();
            f(&mut m);
            table.push((m, reason));
        };
        row(&|m| m.topic = String::new(), "topic is empty");
        row(
            &|m| m.topic = "t".repeat(250),
            "topic longer than 249 bytes",
        );
        row(&|m| m.tier = "t".repeat(256), "tier longer than 255 bytes");
        row(
            &|m| m.topic = "a:b".into(),
            "topic holds byte 0x3a; allowed are A-Z a-z 0-9 . _ -",
        );
        row(
            &|m| m.host = "a b".into(),
            "host holds byte 0x20; allowed are A-Z a-z 0-9 . _ - : /",
        );
        row(
            &|m| m.datacenter = "a\0".into(),
            "datacenter holds byte 0x00; allowed are A-Z a-z 0-9 . _ - : /",
        );
        row(&|m| m.emitted_at = -1, "emitted_at = -1 is negative");
        row(
            &|m| inc(m).window_end = 600_500,
            "window [600000, 600500) is 500 ms long; allowed are 1000 to 86400000 ms",
        );
        row(
            &|m| inc(m).window_start = 600_001,
            "window_start 600001 is not a multiple of the window size 599999 ms",
        );
        row(
            &|m| inc(m).stats.count = MAX_COUNT + 1,
            "count = 281474976710657 exceeds 281474976710656",
        );
        row(
            &|m| inc(m).stats.count = u64::MAX,
            "count = 18446744073709551615 exceeds 9223372036854775807",
        );
        row(
            &|m| inc(m).stats.bytes = MAX_BYTES + 1,
            "bytes = 1152921504606846977 exceeds 1152921504606846976",
        );
        row(
            &|m| inc(m).stats.malformed_count = 11,
            "malformed_count = 11 exceeds count = 10",
        );
        row(
            &|m| inc(m).stats.latency.record_n(5, 11),
            "latency histogram holds 11 values, more than count = 10",
        );
        row(
            &|m| inc(m).stats.max_observed_at = Some(-1),
            "max_observed_at = -1 is negative",
        );
        row(&|m| inc(m).stats.max_observed_at = Some(far), "max_observed_at = 5600001 is more than 3600000 ms after the collector's clock (2000000)");
        row(
            &|m| m.emitted_at = far,
            "emitted_at = 5600001 is more than 3600000 ms after the collector's clock (2000000)",
        );
        row(
            &|m| {
                offsets(
                    m,
                    (0..=MAX_PARTITIONS as i32)
                        .map(|p| OffsetSpan::new(p, 0, None))
                        .collect(),
                )
            },
            "10001 offset ranges; at most 10000 partitions allowed",
        );
        row(
            &|m| {
                let mut span = OffsetSpan::new(3, 5, None);
                span.max = 4;
                offsets(m, vec![span])
            },
            "offset range of partition 3 is invalid: min 5 max 4",
        );
        row(
            &|m| offsets(m, vec![OffsetSpan::new(3, 5, Some(-2))]),
            "max_record_time = -2 is negative",
        );
        row(&|m| offsets(m, vec![OffsetSpan::new(3, 5, Some(far))]), "max_record_time = 5600001 is more than 3600000 ms after the collector's clock (2000000)");
        row(
            &|m| {
                offsets(
                    m,
                    vec![OffsetSpan::new(3, 5, None), OffsetSpan::new(3, 6, None)],
                )
            },
            "partition 3 listed twice in offsets",
        );
        table.push((
            progress((0..=MAX_PARTITIONS as i32).map(part).collect()),
            "10001 partitions in progress; at most 10000 allowed",
        ));
        table.push((progress(vec![part(-1)]), "partition = -1 is negative"));
        let mut behind = part(2);
        behind.next_offset = -1;
        table.push((
            progress(vec![behind]),
            "next_offset -1 of partition 2 is negative",
        ));
        let mut lagging = part(2);
        lagging.lag = Some(-1);
        table.push((progress(vec![lagging]), "lag = -1 is negative"));
        let mut stamped = part(2);
        stamped.record_time = Some(far);
        table.push((
            progress(vec![stamped]),
            "record_time = 5600001 is more than 3600000 ms after the collector's clock (2000000)",
        ));
        table.push((
            progress(vec![part(2), part(2)]),
            "partition 2 listed twice in progress",
        ));
        for (message, reason) in &table {
            assert_eq!(
                validate_ingest(message, 2_000_000).unwrap_err().to_string(),
                *reason
            );
        }
    }
}
