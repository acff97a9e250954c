//! From the wire (audit message v1 JSON, parsed by audit-lib) to the store's types.

use audit_lib::{AuditBody, AuditMessage};
use store::{Increment, Latency, Message, OffsetRange, PartitionProgress, Progress};

/// Longest payload excerpt kept with a reject.
pub const REJECT_PAYLOAD_LIMIT: usize = 4096;

/// Parses and validates one payload received at `received_at_ms` (the collector's
/// clock): the store message, or why it is rejected. The reason is sanitised (no
/// control characters; bounded), since it may quote the payload.
pub fn parse(payload: &[u8], received_at_ms: i64) -> Result<Message, String> {
    let reason = |r: String| store::sanitize_text(&r, store::MAX_REJECT_REASON_LEN);
    let wire = AuditMessage::from_json(payload)
        .map_err(|e| reason(format!("not an audit message v1: {e}")))?;
    let message = to_store(wire);
    store::validate_ingest(&message, received_at_ms).map_err(reason)?;
    Ok(message)
}

pub fn to_store(m: AuditMessage) -> Message {
    match m.body {
        AuditBody::Increment(i) => {
            let s = i.stats;
            Message::Increment(Increment {
                uuid: m.uuid,
                topic: m.topic,
                tier: m.tier,
                datacenter: m.datacenter,
                host: m.host,
                window_start_ms: i.window_start,
                window_end_ms: i.window_end,
                emitted_at_ms: m.emitted_at,
                count: s.count,
                bytes: s.bytes,
                no_time_count: s.no_time_count,
                malformed_count: s.malformed_count,
                out_of_bounds_count: s.out_of_bounds_count,
                checksum: s.checksum.0,
                latency: Latency {
                    zero_count: s.latency.zero_count(),
                    negative_count: s.latency.negative_count(),
                    // A histogram with only sub-millisecond latencies has max 0.
                    max_ms: u64::try_from(s.latency.max_ms()).unwrap_or(0),
                    buckets: s
                        .latency
                        .buckets()
                        .map(|(index, count)| (i32::try_from(index).unwrap_or(i32::MAX), count))
                        .collect(),
                },
                offsets: s
                    .offsets
                    .iter()
                    .map(|o| OffsetRange {
                        partition: o.partition,
                        min: o.min,
                        max: o.max,
                    })
                    .collect(),
            })
        }
        AuditBody::Progress(parts) => Message::Progress(Progress {
            uuid: m.uuid,
            topic: m.topic,
            tier: m.tier,
            datacenter: m.datacenter,
            host: m.host,
            emitted_at_ms: m.emitted_at,
            partitions: parts
                .into_iter()
                .map(|p| PartitionProgress {
                    partition: p.partition,
                    next_offset: p.next_offset,
                    record_time_ms: p.record_time,
                    lag: p.lag,
                })
                .collect(),
        }),
    }
}

/// The payload as kept with a reject: lossy UTF-8, at most [`REJECT_PAYLOAD_LIMIT`] bytes.
pub fn excerpt(payload: &[u8]) -> String {
    let cut = &payload[..payload.len().min(REJECT_PAYLOAD_LIMIT)];
    String::from_utf8_lossy(cut).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use audit_lib::{Checksum, Identity, LatencyHistogram, Window, WindowStats};

    #[test]
    fn wire_increment_maps_field_by_field() {
        let mut latency = LatencyHistogram::new();
        latency.record_n(-3, 2); // negative: counted in zero_count and negative_count
        latency.record_n(0, 1);
        latency.record_n(50, 4);
        let stats = WindowStats {
            count: 10,
            bytes: 999,
            no_time_count: 1,
            malformed_count: 2,
            out_of_bounds_count: 3,
            checksum: Checksum(u64::MAX - 1),
            latency,
            offsets: vec![audit_lib::OffsetSpan {
                partition: 3,
                min: 7,
                max: 9,
            }],
        };
        let wire = AuditMessage::increment(
            &Identity::new("regional", "dc1", "h"),
            "orders",
            Window {
                start_ms: 600_000,
                end_ms: 1_200_000,
            },
            stats,
            1_234,
        );
        let Message::Increment(i) = parse(wire.to_json().as_bytes(), 2_000_000).unwrap() else {
            panic!("an increment")
        };
        assert_eq!(
            (i.uuid, i.topic.as_str(), i.tier.as_str(), i.host.as_str()),
            (wire.uuid, "orders", "regional", "h")
        );
        assert_eq!(
            (i.window_start_ms, i.window_end_ms, i.emitted_at_ms),
            (600_000, 1_200_000, 1_234)
        );
        assert_eq!(
            (
                i.count,
                i.bytes,
                i.no_time_count,
                i.malformed_count,
                i.out_of_bounds_count
            ),
            (10, 999, 1, 2, 3)
        );
        assert_eq!(i.checksum, u64::MAX - 1);
        assert_eq!(
            (
                i.latency.zero_count,
                i.latency.negative_count,
                i.latency.max_ms
            ),
            (3, 2, 50)
        );
        let index = audit_lib::histogram::bucket_index(50) as i32;
        assert_eq!(i.latency.buckets, vec![(index, 4)]);
        assert_eq!(
            i.offsets,
            vec![OffsetRange {
                partition: 3,
                min: 7,
                max: 9
            }]
        );
    }

    #[test]
    fn a_value_the_store_cannot_hold_is_rejected_with_its_field() {
        let mut v: serde_json::Value = serde_json::json!({
            "version": 1, "uuid": "2b0c5d0e-6f4b-4a4e-9a43-8d5b7c1e2f30", "tier": "t", "datacenter": "d",
            "host": "h", "topic": "x", "window_start": 0, "window_end": 600000, "emitted_at": 1,
            "count": 1, "bytes": 1, "no_time_count": 0, "malformed_count": 0, "out_of_bounds_count": 0,
            "checksum": "0000000000000001",
            "latency": {"zero_count": 0, "negative_count": 0, "buckets": [], "max_ms": 0}
        });
        let parse_value = |v: &serde_json::Value| parse(v.to_string().as_bytes(), 1_000_000);
        assert!(parse_value(&v).is_ok());
        v["bytes"] = serde_json::json!(u64::MAX);
        let reason = parse_value(&v).unwrap_err();
        assert!(reason.contains("bytes"), "{reason}");
        v["bytes"] = 1.into();
        v["topic"] = "".into();
        assert!(parse_value(&v).unwrap_err().contains("topic is empty"));
        v["topic"] = "x".into();
        v["kind"] = "\u{0}".into();
        let reason = parse_value(&v).unwrap_err();
        assert!(
            reason.contains("unknown variant") && !reason.contains('\0'),
            "{reason}"
        );
    }

    #[test]
    fn reject_excerpts_are_bounded_and_lossy() {
        let payload = vec![0xff; REJECT_PAYLOAD_LIMIT * 3];
        let e = excerpt(&payload);
        assert_eq!(e.chars().count(), REJECT_PAYLOAD_LIMIT);
        assert!(e.chars().all(|c| c == '\u{FFFD}'));
        assert_eq!(excerpt(b"{}"), "{}");
    }
}
