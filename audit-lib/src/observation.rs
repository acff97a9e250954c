//! One consumed (or produced) Kafka message as the aggregator sees it: borrowed views,
//! nothing copied, so building an `Observation` per message costs nothing.

/// Header access without allocation. The service adapts its client's header type
/// (e.g. rdkafka's `BorrowedHeaders`) with a small wrapper implementing this.
pub trait HeaderLookup {
    /// The value of the first header named `name` (Kafka allows repeats), if any.
    fn header(&self, name: &str) -> Option<&[u8]>;
}

/// No headers at all.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHeaders;

impl HeaderLookup for NoHeaders {
    fn header(&self, _name: &str) -> Option<&[u8]> {
        None
    }
}

impl HeaderLookup for [(&str, &[u8])] {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.iter().find(|(k, _)| *k == name).map(|(_, v)| *v)
    }
}

impl<const N: usize> HeaderLookup for [(&str, &[u8]); N] {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.as_slice().header(name)
    }
}

impl HeaderLookup for Vec<(String, Vec<u8>)> {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_slice())
    }
}

/// Which clock wrote a Kafka record timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// A Kafka record timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecordTimestamp {
    pub ms: i64,
    pub kind: TimestampType,
}

/// One message to audit.
#[derive(Clone, Copy)]
pub struct Observation<'a> {
    pub topic: &'a str,
    pub partition: i32,
    /// Negative when the client does not know it (librdkafka's -1001 in some delivery
    /// reports): counted, but left out of the window's offset ranges.
    pub offset: i64,
    /// `None` for a null key (hashed like an empty key).
    pub key: Option<&'a [u8]>,
    /// `None` for a null value (a tombstone): it has no payload to parse, so it is not
    /// malformed; event time then comes from the header or record timestamp.
    pub value: Option<&'a [u8]>,
    pub headers: &'a dyn HeaderLookup,
    /// `None` when the record has no timestamp (Kafka's `NotAvailable`, or -1).
    pub record_timestamp: Option<RecordTimestamp>,
    /// When this tier observed the message, epoch ms (the caller's clock).
    pub observed_at_ms: i64,
}

impl<'a> Observation<'a> {
    /// A message with only a value, no key, headers or record timestamp.
    pub fn new(topic: &'a str, value: &'a [u8], observed_at_ms: i64) -> Self {
        Observation {
            topic,
            partition: 0,
            offset: 0,
            key: None,
            value: Some(value),
            headers: &NoHeaders,
            record_timestamp: None,
            observed_at_ms,
        }
    }

    /// Bytes counted for this message: key + value length.
    #[inline]
    pub fn byte_len(&self) -> u64 {
        (self.key.map_or(0, <[u8]>::len) + self.value.map_or(0, <[u8]>::len)) as u64
    }
}

impl std::fmt::Debug for Observation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observation")
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .field("offset", &self.offset)
            .field("key_len", &self.key.map(<[u8]>::len))
            .field("value_len", &self.value.map(<[u8]>::len))
            .field("record_timestamp", &self.record_timestamp)
            .field("observed_at_ms", &self.observed_at_ms)
            .finish()
    }
}
