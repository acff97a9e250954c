//! From the wire (audit message v1 JSON, parsed by audit-lib) to the store's types.

use audit_lib::{AuditBody, AuditMessage};
use store::{Increment, Latency, Message, OffsetRange, PartitionProgress, Progress};

/// Longest payload excerpt kept with a reject.
pub const REJECT_PAYLOAD_LIMIT: usize = 4096;

/// Parses and validates one payload: the store message, or why it is rejected.
pub fn parse(payload: &[u8]) -> Result<Message, String> {
    let wire =
        AuditMessage::from_json(payload).map_err(|e| format!("not an audit message v1: {e}"))?;
    let message = to_store(wire);
    store::validate_message(&message)?;
    Ok(message)
}

/// Same as [`parse`] for an already-decoded JSON value (HTTP arrays).
pub fn parse_value(value: &serde_json::Value) -> Result<Message, String> {
    use serde::Deserialize;
    let wire =
        AuditMessage::deserialize(value).map_err(|e| format!("not an audit message v1: {e}"))?;
    let message = to_store(wire);
    store::validate_message(&message)?;
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
