//! PostgreSQL binary COPY encoding of `audit_message` rows: the collector's bulk path
//! (and the baseline of the ingest benchmark, which copies the very same bytes).

use crate::domain::{AuditBody, Message};

/// The statement the rows of [`encode_messages`] are written with.
pub const COPY_MESSAGES: &str = "COPY audit_message (uuid, kind, topic, tier, datacenter, host,
    window_start_ms, emitted_at_ms, received_at_ms, count, checksum, window_end_ms, bytes,
    no_time_count, malformed_count, out_of_bounds_count, latency_zero_count,
    latency_negative_count, latency_max_ms, bucket_index, bucket_count, offset_partition,
    offset_min, offset_max, observation_time_count, partition_ms, max_observed_at_ms,
    offset_max_record_time, delivery_failed_count) FROM STDIN (FORMAT binary)";

const COLUMNS: i16 = 29;
const INT4_OID: i32 = 23;
const INT8_OID: i32 = 20;

struct Row<'a>(&'a mut Vec<u8>);

impl Row<'_> {
    fn field(&mut self, bytes: &[u8]) {
        self.0
            .extend_from_slice(&(bytes.len() as i32).to_be_bytes());
        self.0.extend_from_slice(bytes);
    }
    fn null(&mut self) {
        self.0.extend_from_slice(&(-1i32).to_be_bytes());
    }
    fn int2(&mut self, v: i16) {
        self.field(&v.to_be_bytes());
    }
    fn int8(&mut self, v: i64) {
        self.field(&v.to_be_bytes());
    }
    fn text(&mut self, s: &str) {
        self.field(s.as_bytes());
    }
    fn opt_int8(&mut self, v: Option<i64>) {
        match v {
            Some(v) => self.int8(v),
            None => self.null(),
        }
    }
    /// A one-dimensional array without NULLs (binary array format).
    fn array<T: Copy>(
        &mut self,
        oid: i32,
        items: impl ExactSizeIterator<Item = T>,
        width: i32,
        put: impl Fn(&mut Vec<u8>, T),
    ) {
        let n = items.len() as i32;
        let len = if n == 0 { 12 } else { 20 + n * (4 + width) };
        self.0.extend_from_slice(&len.to_be_bytes());
        self.0
            .extend_from_slice(&(if n == 0 { 0i32 } else { 1 }).to_be_bytes()); // dimensions
        self.0.extend_from_slice(&0i32.to_be_bytes()); // no NULLs
        self.0.extend_from_slice(&oid.to_be_bytes());
        if n > 0 {
            self.0.extend_from_slice(&n.to_be_bytes());
            self.0.extend_from_slice(&1i32.to_be_bytes()); // lower bound
            for item in items {
                self.0.extend_from_slice(&width.to_be_bytes());
                put(self.0, item);
            }
        }
    }
    fn int4_array(&mut self, items: impl ExactSizeIterator<Item = i32>) {
        self.array(INT4_OID, items, 4, |out, v| {
            out.extend_from_slice(&v.to_be_bytes())
        });
    }
    /// A one-dimensional int8 array whose elements may be NULL.
    fn opt_int8_array(&mut self, items: impl ExactSizeIterator<Item = Option<i64>> + Clone) {
        let n = items.len() as i32;
        let nulls = items.clone().filter(Option::is_none).count() as i32;
        let len = if n == 0 {
            12
        } else {
            20 + n * 4 + (n - nulls) * 8
        };
        self.0.extend_from_slice(&len.to_be_bytes());
        self.0
            .extend_from_slice(&(if n == 0 { 0i32 } else { 1 }).to_be_bytes()); // dimensions
        self.0
            .extend_from_slice(&i32::from(nulls > 0).to_be_bytes()); // has NULLs
        self.0.extend_from_slice(&INT8_OID.to_be_bytes());
        if n > 0 {
            self.0.extend_from_slice(&n.to_be_bytes());
            self.0.extend_from_slice(&1i32.to_be_bytes()); // lower bound
            for item in items {
                match item {
                    Some(v) => {
                        self.0.extend_from_slice(&8i32.to_be_bytes());
                        self.0.extend_from_slice(&v.to_be_bytes());
                    }
                    None => self.0.extend_from_slice(&(-1i32).to_be_bytes()),
                }
            }
        }
    }
    fn int8_array(&mut self, items: impl ExactSizeIterator<Item = i64>) {
        self.array(INT8_OID, items, 8, |out, v| {
            out.extend_from_slice(&v.to_be_bytes())
        });
    }
}

/// The time `audit_message` is partitioned by: the window start of an increment, the
/// emission time of a progress report. Both come from the message itself, so a
/// re-delivered message meets its first copy in the same partition.
pub fn partition_ms(message: &Message) -> i64 {
    match &message.body {
        AuditBody::Increment(i) => i.window_start,
        AuditBody::Progress(_) => message.emitted_at,
    }
}

fn i(v: u64) -> i64 {
    // validate_message bounds every stored u64 by i64::MAX.
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Binary COPY data (header, rows, trailer) for [`COPY_MESSAGES`]. Messages must have
/// passed `validate_message`.
pub fn encode_messages(messages: &[&Message], received_at_ms: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + messages.len() * 400);
    out.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
    out.extend_from_slice(&0i32.to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes());
    for message in messages {
        out.extend_from_slice(&COLUMNS.to_be_bytes());
        let mut row = Row(&mut out);
        let m = message;
        match &m.body {
            AuditBody::Increment(inc) => {
                let s = &inc.stats;
                row.field(m.uuid.as_bytes());
                row.int2(0);
                row.text(&m.topic);
                row.text(&m.tier);
                row.text(&m.datacenter);
                row.text(&m.host);
                row.int8(inc.window_start);
                row.int8(m.emitted_at);
                row.int8(received_at_ms);
                row.int8(i(s.count));
                row.int8(s.checksum.0 as i64);
                row.int8(inc.window_end);
                row.int8(i(s.bytes));
                row.int8(i(s.no_time_count));
                row.int8(i(s.malformed_count));
                row.int8(i(s.out_of_bounds_count));
                row.int8(i(s.latency.zero_count()));
                row.int8(i(s.latency.negative_count()));
                row.int8(s.latency.max_ms());
                let buckets: Vec<(u32, u64)> = s.latency.buckets().collect();
                row.int4_array(buckets.iter().map(|b| b.0 as i32));
                row.int8_array(buckets.iter().map(|b| i(b.1)));
                row.int4_array(s.offsets.iter().map(|o| o.partition));
                row.int8_array(s.offsets.iter().map(|o| o.min));
                row.int8_array(s.offsets.iter().map(|o| o.max));
                row.int8(i(s.observation_time_count));
                row.int8(inc.window_start);
                row.opt_int8(s.max_observed_at);
                row.opt_int8_array(s.offsets.iter().map(|o| o.max_record_time));
                row.int8(i(s.delivery_failed_count));
            }
            AuditBody::Progress(_) => {
                row.field(m.uuid.as_bytes());
                row.int2(1);
                row.text(&m.topic);
                row.text(&m.tier);
                row.text(&m.datacenter);
                row.text(&m.host);
                row.null();
                row.int8(m.emitted_at);
                row.int8(received_at_ms);
                for _ in 0..15 {
                    row.opt_int8(None);
                }
                // observation_time_count is NOT NULL (0 for rows that are not increments).
                row.int8(0);
                row.int8(m.emitted_at);
                row.null();
                row.null();
                // delivery_failed_count is NOT NULL too.
                row.int8(0);
            }
        }
    }
    out.extend_from_slice(&(-1i16).to_be_bytes());
    out
}
