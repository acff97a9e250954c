//! Statistics of one (topic, window) as counted by one emitter; the payload of an
//! increment. Every field merges exactly (sums, wrapping sum, histogram merge, min/max),
//! so increments add up to the same totals however a window was split.

use serde::{Deserialize, Serialize};

use crate::checksum::{message_hash, Checksum};
use crate::extract::Classification;
use crate::histogram::LatencyHistogram;
use crate::observation::Observation;

/// How far past the observer's clock a record time may be before it is capped: an auditor
/// reads its clock once per batch of messages (and before it waits for the next), so a
/// record written just after that read would otherwise be capped below its own
/// CreateTime, and a downstream tier could then "read past" it on records that precede it
/// (the record-time evidence of docs/web.md, Verdicts, rule 4, compares record times). A
/// producer clock ahead by more than this still cannot stamp a record much past "now".
pub const RECORD_TIME_SLACK_MS: i64 = 1_000;

/// Lowest and highest offset counted in one partition, and the latest record time
/// counted there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetSpan {
    pub partition: i32,
    pub min: i64,
    pub max: i64,
    /// The latest Kafka record timestamp of the messages counted in this partition
    /// (epoch ms), each capped at the emitter's clock when it observed the message
    /// (plus [`RECORD_TIME_SLACK_MS`]):
    /// what a downstream tier must have read past in this partition before the window
    /// can be judged (docs/web.md, Verdicts). `None`: unknown (an emitter older than
    /// the field, or no message with a record timestamp).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_record_time: Option<i64>,
}

impl OffsetSpan {
    /// The span of one message at `offset`, with its capped record time if known.
    pub fn new(partition: i32, offset: i64, record_time: Option<i64>) -> Self {
        OffsetSpan {
            partition,
            min: offset,
            max: offset,
            max_record_time: record_time,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowStats {
    /// Messages windowed by a tier-invariant time (a field or header event time, or
    /// the Kafka record timestamp): the count compared across tiers.
    pub count: u64,
    /// Sum of key + value lengths of the messages in `count`.
    pub bytes: u64,
    /// Of `count`: no field or header present, windowed by the record timestamp.
    pub no_time_count: u64,
    /// Of `count`: payload not JSON, or a field or header holding no usable time;
    /// windowed by the record timestamp.
    pub malformed_count: u64,
    /// Of `count`: field or header time outside the skew bounds, windowed by the
    /// record timestamp.
    #[serde(default)]
    pub out_of_bounds_count: u64,
    /// Not in `count`: messages with no tier-invariant time (no usable field, header
    /// or record timestamp), windowed by this tier's observation time. It depends on
    /// the auditor's clock and lag, so it is shown but never compared across tiers.
    #[serde(default)]
    pub observation_time_count: u64,
    /// Multiset checksum of the messages in `count`.
    pub checksum: Checksum,
    /// Latency (observation − window time) of the messages in `count`.
    pub latency: LatencyHistogram,
    /// Not in `count`: messages a producer was told it could not deliver (a delivery
    /// report with an error), windowed like `count`. A producer tier's loss it knows
    /// about, apart from the silent loss the downstream tier's count shows.
    #[serde(default)]
    pub delivery_failed_count: u64,
    /// Per partition offset range of every message of the window (`count` and
    /// `observation_time_count`); absent when offset tracking is off.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub offsets: Vec<OffsetSpan>,
    /// The latest observation time (the emitter's clock) of the messages of the window
    /// (`count` and `observation_time_count`): when this emitter last counted one. The
    /// evidence of an emitter that knows no partitions (a producer counting before
    /// delivery, or offset tracking off): a downstream tier must have read past it
    /// plus the grace period on every partition. `None`: unknown (older emitters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_observed_at: Option<i64>,
}

/// How a message was windowed, as far as its window's counters are concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountedKind {
    EventTime,
    NoTime,
    Malformed,
    OutOfBounds,
    /// No tier-invariant time: `observation_time_count`, outside `count`.
    ObservationTime,
}

/// One message's contribution to its window, computed when it was observed: what a
/// consumer tier keeps until the group commits the message, when it is added
/// ([`WindowStats::add`]) without the message itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counted {
    pub kind: CountedKind,
    /// Key + value length.
    pub bytes: u64,
    /// [`message_hash`] of key and value.
    pub hash: u64,
    /// Observation time − window time.
    pub latency_ms: i64,
    pub partition: i32,
    /// Negative when the message has no offset (a producer with `acks=0`): not tracked.
    pub offset: i64,
    /// When the emitter observed the message (its clock, epoch ms).
    pub observed_at_ms: i64,
    /// The record's Kafka timestamp capped at `observed_at_ms` plus
    /// [`RECORD_TIME_SLACK_MS`]; `None` when it has none.
    pub record_time: Option<i64>,
}

impl Counted {
    /// The contribution of `obs` classified as `class`, whose hash is `hash`.
    #[inline]
    pub fn of(obs: &Observation<'_>, class: &Classification, hash: u64) -> Counted {
        let kind = match class {
            _ if !class.is_tier_invariant() => CountedKind::ObservationTime,
            Classification::EventTime { .. } => CountedKind::EventTime,
            Classification::NoTime(_) => CountedKind::NoTime,
            Classification::Malformed(..) => CountedKind::Malformed,
            Classification::OutOfBounds { .. } => CountedKind::OutOfBounds,
        };
        Counted {
            kind,
            bytes: obs.byte_len(),
            hash,
            latency_ms: obs
                .observed_at_ms
                .saturating_sub(class.counted_at(obs.observed_at_ms)),
            partition: obs.partition,
            offset: obs.offset,
            observed_at_ms: obs.observed_at_ms,
            // Capped at the observer's clock (with the slack of a clock read per
            // batch): a producer with a fast clock cannot stamp a record past "now".
            // Times before the epoch are no times (Kafka's -1 is "none").
            record_time: obs
                .record_timestamp
                .map(|t| {
                    t.ms.min(obs.observed_at_ms.saturating_add(RECORD_TIME_SLACK_MS))
                })
                .filter(|&t| t >= 0),
        }
    }
}

impl WindowStats {
    pub fn is_empty(&self) -> bool {
        self.count == 0 && self.observation_time_count == 0 && self.delivery_failed_count == 0
    }

    /// Counts one message of `obs` classified as `class`: the accumulation rule of a
    /// window (what [`Self::merge`] adds up). Offsets are tracked when asked to.
    #[inline]
    pub fn record(&mut self, obs: &Observation<'_>, class: &Classification, track_offsets: bool) {
        let hash = message_hash(obs.key, obs.value.unwrap_or_default());
        self.record_hashed(obs, class, track_offsets, hash);
    }

    /// [`Self::record`] with the message's checksum hash already computed: `hash` must be
    /// [`message_hash`] of `obs.key` and `obs.value`.
    #[inline]
    pub fn record_hashed(
        &mut self,
        obs: &Observation<'_>,
        class: &Classification,
        track_offsets: bool,
        hash: u64,
    ) {
        self.add(&Counted::of(obs, class, hash), track_offsets);
    }

    /// Adds one message's contribution (the accumulation rule of a window).
    #[inline]
    pub fn add(&mut self, c: &Counted, track_offsets: bool) {
        if c.kind == CountedKind::ObservationTime {
            self.observation_time_count += 1;
        } else {
            self.count += 1;
            self.bytes += c.bytes;
            self.checksum.add_hash(c.hash);
            self.latency.record(c.latency_ms);
            match c.kind {
                CountedKind::NoTime => self.no_time_count += 1,
                CountedKind::Malformed => self.malformed_count += 1,
                CountedKind::OutOfBounds => self.out_of_bounds_count += 1,
                CountedKind::EventTime | CountedKind::ObservationTime => {}
            }
        }
        // `None < Some`: one compare each, no branch on whether one is known yet.
        self.max_observed_at = self.max_observed_at.max(Some(c.observed_at_ms));
        // A negative offset is one the client does not know (librdkafka's -1001 in the
        // delivery report of a resent idempotent message): nothing to replay, and the
        // collector refuses a range that holds one.
        if track_offsets && c.offset >= 0 && c.partition >= 0 {
            self.track_offset(c.partition, c.offset, c.record_time);
        }
    }

    /// Widens the offset range of `partition` to include `offset`, and its latest
    /// record time to `record_time`. A linear scan: a window of one topic sees few
    /// partitions per auditor instance.
    #[inline]
    pub fn track_offset(&mut self, partition: i32, offset: i64, record_time: Option<i64>) {
        for r in self.offsets.iter_mut() {
            if r.partition == partition {
                r.min = r.min.min(offset);
                r.max = r.max.max(offset);
                r.max_record_time = r.max_record_time.max(record_time);
                return;
            }
        }
        self.offsets
            .push(OffsetSpan::new(partition, offset, record_time));
    }

    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &WindowStats) {
        // Saturating: only hostile increments get near 2^64, and they must not panic.
        self.count = self.count.saturating_add(other.count);
        self.bytes = self.bytes.saturating_add(other.bytes);
        self.no_time_count = self.no_time_count.saturating_add(other.no_time_count);
        self.malformed_count = self.malformed_count.saturating_add(other.malformed_count);
        self.out_of_bounds_count = self
            .out_of_bounds_count
            .saturating_add(other.out_of_bounds_count);
        self.observation_time_count = self
            .observation_time_count
            .saturating_add(other.observation_time_count);
        self.delivery_failed_count = self
            .delivery_failed_count
            .saturating_add(other.delivery_failed_count);
        self.checksum.merge(other.checksum);
        self.latency.merge(&other.latency);
        self.max_observed_at = self.max_observed_at.max(other.max_observed_at);
        for r in &other.offsets {
            self.track_offset(r.partition, r.min, r.max_record_time);
            self.track_offset(r.partition, r.max, None);
        }
        self.offsets.sort_by_key(|r| r.partition);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A producer embedding audit-lib counts delivery reports, and librdkafka reports
    /// offset -1001 (unknown) for a message an idempotent producer resent after a
    /// broker failover and that a later batch's answer acknowledged (found on a
    /// replicated cluster under broker kills). The message counts; its unknown offset
    /// is no offset to replay: kept in the range, it made the collector reject the
    /// whole increment ("offset range of partition 0 is invalid: min -1001"), a false
    /// loss.
    #[test]
    fn an_unknown_offset_is_counted_but_not_tracked() {
        let mut s = WindowStats::default();
        let class = Classification::EventTime {
            event_time_ms: 1_000,
            source: crate::extract::TimeSource::Field(0),
            unit: crate::timeparse::TimeUnit::Millis,
        };
        for offset in [7, -1001, 9] {
            let obs = Observation {
                offset,
                ..Observation::new("t", b"{}", 1_000)
            };
            s.record(&obs, &class, true);
        }
        assert_eq!(s.count, 3);
        // reverted: [(0, -1001, 9)]
        let spans: Vec<_> = s
            .offsets
            .iter()
            .map(|o| (o.partition, o.min, o.max))
            .collect();
        assert_eq!(spans, vec![(0, 7, 9)]);
    }

    #[test]
    fn merging_hostile_counts_saturates_instead_of_panicking() {
        let json = r#"{"count":18446744073709551615,"bytes":18446744073709551615,"no_time_count":0,"malformed_count":0,"checksum":"0000000000000000","latency":{"zero_count":18446744073709551615,"negative_count":0,"buckets":[[1,18446744073709551615]],"max_ms":5}}"#;
        let a: WindowStats = serde_json::from_str(json).unwrap();
        let mut b = a.clone();
        b.merge(&a);
        assert_eq!(b.count, u64::MAX);
        assert_eq!(b.latency.count(), u64::MAX);
        assert!(b.latency.quantile(0.5).is_some());
    }

    #[test]
    fn merge_adds_everything() {
        let mut a = WindowStats {
            count: 3,
            bytes: 30,
            no_time_count: 1,
            malformed_count: 0,
            out_of_bounds_count: 1,
            observation_time_count: 4,
            checksum: Checksum(u64::MAX),
            ..Default::default()
        };
        a.latency.record(10);
        a.track_offset(1, 5, Some(100));
        a.track_offset(1, 7, None);
        a.max_observed_at = Some(300);
        let mut b = WindowStats {
            count: 2,
            bytes: 5,
            no_time_count: 0,
            malformed_count: 2,
            out_of_bounds_count: 0,
            observation_time_count: 1,
            checksum: Checksum(2),
            ..Default::default()
        };
        b.latency.record(20);
        b.track_offset(0, 9, None);
        b.track_offset(1, 2, Some(150));
        a.merge(&b);
        assert_eq!(a.count, 5);
        assert_eq!(a.bytes, 35);
        assert_eq!(a.no_time_count, 1);
        assert_eq!(a.malformed_count, 2);
        assert_eq!(a.out_of_bounds_count, 1);
        assert_eq!(a.observation_time_count, 5);
        assert_eq!(a.checksum, Checksum(1)); // wrapped
        assert_eq!(a.latency.count(), 2);
        assert_eq!(
            a.offsets,
            vec![
                OffsetSpan {
                    partition: 0,
                    min: 9,
                    max: 9,
                    max_record_time: None
                },
                OffsetSpan {
                    partition: 1,
                    min: 2,
                    max: 7,
                    max_record_time: Some(150)
                }
            ]
        );
        // The latest of both, an unknown one (an older emitter) being no evidence.
        assert_eq!(a.max_observed_at, Some(300));
    }
}
