//! From the wire (audit message v1 JSON, parsed by audit-lib) to what the store
//! takes: audit-lib's own `AuditMessage`, once validated.

use audit_lib::AuditMessage;

/// Longest payload excerpt kept with a reject.
pub const REJECT_PAYLOAD_LIMIT: usize = 4096;

/// Parses and validates one payload received at `received_at_ms` (the collector's
/// clock): the store message, or why it is rejected. The reason is sanitised (no
/// control characters; bounded), since it may quote the payload.
pub fn parse(payload: &[u8], received_at_ms: i64) -> Result<AuditMessage, String> {
    let reason = |r: String| store::sanitize_text(&r, store::MAX_REJECT_REASON_LEN);
    let message = AuditMessage::from_json(payload)
        .map_err(|e| reason(format!("not an audit message v1: {e}")))?;
    store::validate_ingest(&message, received_at_ms).map_err(|r| reason(r.reason()))?;
    Ok(message)
}

/// Partition entries of a message: progress partitions or offset ranges, at least 1
/// (what storing it costs beyond its own row).
pub fn entries(message: &AuditMessage) -> usize {
    match &message.body {
        audit_lib::AuditBody::Progress(parts) => parts.len().max(1),
        audit_lib::AuditBody::Increment(i) => i.stats.offsets.len().max(1),
    }
}

/// The payload as kept with a reject: lossy UTF-8, at most [`REJECT_PAYLOAD_LIMIT`] bytes.
pub fn excerpt(payload: &[u8]) -> String {
    let cut = &payload[..payload.len().min(REJECT_PAYLOAD_LIMIT)];
    String::from_utf8_lossy(cut).into_owned()
}

/// Excerpt bytes kept over all the rejects of one batch (a request, a Kafka batch):
/// 10 000 rejects of 4 KB each would otherwise store 40 MB per request.
pub const BATCH_EXCERPT_BUDGET: usize = 64 << 10;

/// The excerpts of one batch's rejects, [`BATCH_EXCERPT_BUDGET`] bytes in all: once
/// it is used up, rejects keep their source and reason but no excerpt.
pub struct Excerpts {
    left: usize,
    /// Rejects whose excerpt was cut or dropped for the budget.
    pub dropped: u64,
}

impl Default for Excerpts {
    fn default() -> Self {
        Excerpts {
            left: BATCH_EXCERPT_BUDGET,
            dropped: 0,
        }
    }
}

impl Excerpts {
    /// [`excerpt`] of `payload`, cut to what is left of the budget.
    pub fn take(&mut self, payload: &[u8]) -> String {
        let wanted = payload.len().min(REJECT_PAYLOAD_LIMIT);
        let n = wanted.min(self.left);
        if n < wanted {
            self.dropped += 1;
        }
        let excerpt = String::from_utf8_lossy(&payload[..n]).into_owned();
        self.left = self.left.saturating_sub(excerpt.len());
        excerpt
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use audit_lib::{Checksum, Identity, LatencyHistogram, Window, WindowStats};

    #[test]
    fn a_wire_increment_is_stored_as_sent() {
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
            observation_time_count: 4,
            delivery_failed_count: 5,
            checksum: Checksum(u64::MAX - 1),
            latency,
            offsets: vec![audit_lib::OffsetSpan {
                max: 9,
                ..audit_lib::OffsetSpan::new(3, 7, Some(1_100_000))
            }],
            max_observed_at: Some(1_150_000),
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
        assert_eq!(parse(wire.to_json().as_bytes(), 2_000_000).unwrap(), wire);
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
        // An old auditor's message has no observation_time_count; a hostile one too large
        // for the store is rejected with its field.
        v["observation_time_count"] = serde_json::json!(u64::MAX);
        let reason = parse_value(&v).unwrap_err();
        assert!(reason.contains("observation_time_count"), "{reason}");
        v["observation_time_count"] = 0.into();
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
    fn a_batch_keeps_excerpts_within_its_budget() {
        let mut excerpts = Excerpts::default();
        let payload = vec![b'x'; REJECT_PAYLOAD_LIMIT * 2];
        let kept: usize = (0..10_000).map(|_| excerpts.take(&payload).len()).sum();
        assert_eq!(kept, BATCH_EXCERPT_BUDGET);
        assert_eq!(
            excerpts.dropped,
            10_000 - (BATCH_EXCERPT_BUDGET / REJECT_PAYLOAD_LIMIT) as u64
        );
        assert_eq!(excerpts.take(b"{}"), "");
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
