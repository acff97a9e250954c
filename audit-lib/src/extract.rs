//! Classifying one message: where its event time comes from, or why it has none, and
//! which time windows it.
//!
//! Order of preference (docs/design.md §4): the rule's JSON fields in order, then its header.
//! A message with neither is windowed by a time every tier sees alike, the Kafka record
//! timestamp (CreateTime or LogAppendTime, preserved by replication), when the rule
//! allows it and it lies within the skew bounds; only otherwise by this tier's
//! observation time. Why the payload and header gave no time is kept as the reason:
//! `no_time` (no field or header), `malformed` (a payload that is not JSON, or a field
//! or header that holds no usable time) or `out_of_bounds` (a time outside the skew
//! bounds). A message windowed by observation time depends on this tier's clock and
//! lag, so it is counted apart (`observation_time_count`) and never compared across tiers.
//! `null` counts as absent; a payload that is not JSON has no fields, so the header is
//! still tried.
//!
//! Skew bounds are taken against the record timestamp when the message has a usable
//! one (so every tier decides alike), else against observation time.

use serde::{Deserialize, Serialize};

use crate::config::CompiledRule;
use crate::observation::{Observation, RecordTimestamp, TimestampType};
use crate::scan::{find_path, RawValue};
use crate::timeparse::{int_to_ms, number_to_ms, text_to_ms, TimeError, TimeUnit};

/// Where an event time was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeSource {
    /// The rule's JSON field with this index in [`CompiledRule::paths`].
    Field(u16),
    Header,
}

impl TimeSource {
    pub fn as_str(self) -> &'static str {
        match self {
            TimeSource::Field(_) => "field",
            TimeSource::Header => "header",
        }
    }
}

/// Why a message is malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MalformedReason {
    /// The payload is not JSON where the scanner had to read it (empty and binary
    /// payloads included), and no header gave a time.
    NotJson,
    /// The field is present but is not a number or time string (or does not fit).
    BadField,
    /// The header is present but is not a number or time string.
    BadHeader,
}

/// The time that windows a message without a payload or header event time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fallback {
    /// The Kafka record timestamp, within the skew bounds: tier-invariant, so the
    /// message is counted and compared like an event-time one.
    Record(RecordTimestamp),
    /// Only this tier's observation time: counted in `observation_time_count`, not compared.
    Observed,
}

impl Fallback {
    /// `create_time`, `log_append_time` or `observation`.
    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::Record(RecordTimestamp {
                kind: TimestampType::CreateTime,
                ..
            }) => "create_time",
            Fallback::Record(RecordTimestamp {
                kind: TimestampType::LogAppendTime,
                ..
            }) => "log_append_time",
            Fallback::Observed => "observation",
        }
    }
}

/// The verdict for one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classification {
    /// A field or header time within the skew bounds: counted under it, latency
    /// recorded.
    EventTime {
        event_time_ms: i64,
        source: TimeSource,
        unit: TimeUnit,
    },
    /// A field or header time outside the skew bounds (or outside i64 ms, then
    /// saturated); windowed by `fallback`.
    OutOfBounds {
        event_time_ms: i64,
        source: TimeSource,
        unit: TimeUnit,
        fallback: Fallback,
    },
    /// No field or header present; windowed by the fallback.
    NoTime(Fallback),
    /// Windowed by the fallback.
    Malformed(MalformedReason, Fallback),
}

impl Classification {
    /// The label used in reports: `event_time`, `out_of_bounds`, `no_time`, `malformed`.
    pub fn label(&self) -> &'static str {
        match self {
            Classification::EventTime { .. } => "event_time",
            Classification::OutOfBounds { .. } => "out_of_bounds",
            Classification::NoTime(_) => "no_time",
            Classification::Malformed(..) => "malformed",
        }
    }

    /// The time that windows a message without a payload or header event time.
    #[inline]
    pub fn fallback(&self) -> Option<Fallback> {
        match *self {
            Classification::EventTime { .. } => None,
            Classification::OutOfBounds { fallback, .. }
            | Classification::NoTime(fallback)
            | Classification::Malformed(_, fallback) => Some(fallback),
        }
    }

    /// Whether the message is windowed by a time every tier sees alike (event time or
    /// record timestamp), so that its window's count and checksum compare across tiers.
    #[inline]
    pub fn is_tier_invariant(&self) -> bool {
        self.fallback() != Some(Fallback::Observed)
    }

    /// The time the message is windowed by.
    #[inline]
    pub fn counted_at(&self, observed_at_ms: i64) -> i64 {
        match self {
            Classification::EventTime { event_time_ms, .. } => *event_time_ms,
            _ => match self.fallback() {
                Some(Fallback::Record(ts)) => ts.ms,
                _ => observed_at_ms,
            },
        }
    }
}

enum Found {
    Time(i64, TimeUnit),
    OutOfRange(i64, TimeUnit),
    Bad,
}

fn from_result(r: Result<(i64, TimeUnit), TimeError>) -> Found {
    match r {
        Ok((t, u)) => Found::Time(t, u),
        Err(TimeError::OutOfRange { negative, unit }) => {
            Found::OutOfRange(if negative { i64::MIN } else { i64::MAX }, unit)
        }
        Err(TimeError::NotATime) => Found::Bad,
    }
}

/// Whether `t` lies within the rule's skew bounds around `reference`.
#[inline]
fn within_bounds(rule: &CompiledRule, t: i64, reference: i64) -> bool {
    rule.within_skew_bounds(t, reference)
}

/// The record timestamp when the rule uses it and it lies within the skew bounds of
/// observation time; else observation time.
#[inline]
fn fallback(rule: &CompiledRule, obs: &Observation<'_>) -> Fallback {
    match obs.record_timestamp {
        Some(ts) if rule.record_timestamp && within_bounds(rule, ts.ms, obs.observed_at_ms) => {
            Fallback::Record(ts)
        }
        _ => Fallback::Observed,
    }
}

/// Classifies `obs` under `rule`. Allocation-free unless the document's key or value
/// on the path contains JSON escapes.
#[inline]
pub fn classify(rule: &CompiledRule, obs: &Observation<'_>) -> Classification {
    // The commonest case in a few instructions: the first path's field opens a compact
    // document with a plain integer (same answer as the general walk below).
    if let (Some(compact), Some(value)) = (&rule.compact, obs.value) {
        if let Some(v) = compact.int(value) {
            let found = from_result(int_to_ms(v, rule.unit));
            return finish(
                rule,
                obs,
                found,
                TimeSource::Field(0),
                MalformedReason::BadField,
            );
        }
    }
    classify_general(rule, obs)
}

#[inline(never)]
fn classify_general(rule: &CompiledRule, obs: &Observation<'_>) -> Classification {
    // A payload that is not JSON has no fields; the header may still give a time.
    let mut not_json = false;
    if let Some(value) = obs.value {
        for (idx, path) in rule.paths.iter().enumerate() {
            let found = match find_path(value, path) {
                Err(_) => {
                    not_json = true;
                    break;
                }
                Ok(None) | Ok(Some(RawValue::Null)) => continue,
                Ok(Some(RawValue::Int(v))) => from_result(int_to_ms(v, rule.unit)),
                Ok(Some(RawValue::Number(n))) => from_result(number_to_ms(n, rule.unit)),
                Ok(Some(RawValue::String(s))) => from_result(text_to_ms(&s, rule.unit)),
                Ok(Some(RawValue::Bool(_) | RawValue::Compound)) => Found::Bad,
            };
            let source = TimeSource::Field(idx.min(u16::MAX as usize) as u16);
            return finish(rule, obs, found, source, MalformedReason::BadField);
        }
    }
    if let Some(name) = &rule.header {
        if let Some(h) = obs.headers.header(name) {
            let found = match std::str::from_utf8(h) {
                Ok(text) => from_result(text_to_ms(text, rule.header_unit)),
                Err(_) => Found::Bad,
            };
            let bad = if not_json {
                MalformedReason::NotJson
            } else {
                MalformedReason::BadHeader
            };
            return finish(rule, obs, found, TimeSource::Header, bad);
        }
    }
    let fallback = fallback(rule, obs);
    if not_json {
        Classification::Malformed(MalformedReason::NotJson, fallback)
    } else {
        Classification::NoTime(fallback)
    }
}

#[inline]
fn finish(
    rule: &CompiledRule,
    obs: &Observation<'_>,
    found: Found,
    source: TimeSource,
    bad: MalformedReason,
) -> Classification {
    let fallback = fallback(rule, obs);
    let (t, unit) = match found {
        Found::Time(t, u) => (t, u),
        Found::OutOfRange(t, unit) => {
            return Classification::OutOfBounds {
                event_time_ms: t,
                source,
                unit,
                fallback,
            }
        }
        Found::Bad => return Classification::Malformed(bad, fallback),
    };
    // Against the record timestamp when there is a usable one: every tier that
    // preserves it decides alike, however late it reads the message.
    let reference = match fallback {
        Fallback::Record(ts) => ts.ms,
        Fallback::Observed => obs.observed_at_ms,
    };
    if within_bounds(rule, t, reference) {
        Classification::EventTime {
            event_time_ms: t,
            source,
            unit,
        }
    } else {
        Classification::OutOfBounds {
            event_time_ms: t,
            source,
            unit,
            fallback,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{EventTimeConfig, TimeRule};

    const NOW: i64 = 1_764_410_400_000;

    fn rule(f: impl FnOnce(&mut TimeRule)) -> CompiledRule {
        let mut c = EventTimeConfig::default();
        f(&mut c.default);
        let cc = c.compile().unwrap();
        (**cc.rule_for("t")).clone()
    }

    fn obs(value: &[u8]) -> Observation<'_> {
        Observation::new("t", value, NOW)
    }

    fn create_time(ms: i64) -> RecordTimestamp {
        RecordTimestamp {
            ms,
            kind: TimestampType::CreateTime,
        }
    }

    #[test]
    fn default_rule_prefers_ts_then_timestamp() {
        let r = rule(|_| {});
        let c = classify(&r, &obs(br#"{"timestamp":1764410399,"ts":1764410399000}"#));
        assert_eq!(
            c,
            Classification::EventTime {
                event_time_ms: 1_764_410_399_000,
                source: TimeSource::Field(0),
                unit: TimeUnit::Millis
            }
        );
        let c = classify(&r, &obs(br#"{"timestamp":"2025-11-29T09:59:00Z"}"#));
        assert_eq!(
            c,
            Classification::EventTime {
                event_time_ms: NOW - 60_000,
                source: TimeSource::Field(1),
                unit: TimeUnit::Rfc3339
            }
        );
    }

    #[test]
    fn fallbacks_header_then_record_timestamp_then_observation() {
        let r = rule(|r| r.header = Some("event-time".into()));
        let headers = [("event-time", &b"1764410390000"[..])];
        let mut o = obs(br#"{"other":1}"#);
        o.headers = &headers;
        let lat = RecordTimestamp {
            ms: NOW - 5,
            kind: TimestampType::LogAppendTime,
        };
        o.record_timestamp = Some(lat);
        assert!(matches!(
            classify(&r, &o),
            Classification::EventTime {
                event_time_ms: 1_764_410_390_000,
                source: TimeSource::Header,
                ..
            }
        ));
        o.headers = &crate::observation::NoHeaders;
        let c = classify(&r, &o);
        assert_eq!(c, Classification::NoTime(Fallback::Record(lat)));
        assert_eq!(c.counted_at(NOW + 1_000_000), NOW - 5);
        assert!(c.is_tier_invariant());
        o.record_timestamp = None;
        let c = classify(&r, &o);
        assert_eq!(c, Classification::NoTime(Fallback::Observed));
        assert_eq!(c.counted_at(NOW + 1), NOW + 1);
        assert!(!c.is_tier_invariant());
        let r = rule(|r| r.record_timestamp = false);
        o.record_timestamp = Some(create_time(NOW));
        assert_eq!(classify(&r, &o), Classification::NoTime(Fallback::Observed));
    }

    /// B1: what has no payload or header time is windowed by the record timestamp,
    /// whatever the reason, so a lagging tier puts it in the same window.
    #[test]
    fn untimed_messages_are_windowed_by_the_record_timestamp() {
        let r = rule(|_| {});
        let ts = create_time(NOW - 3_600_000);
        let late = NOW + 20 * 60_000; // a tier that reads it 20 min later
        for (payload, want) in [
            (
                &b"\x00\x01\xffavro"[..],
                Classification::Malformed(MalformedReason::NotJson, Fallback::Record(ts)),
            ),
            (
                br#"{"other":1}"#,
                Classification::NoTime(Fallback::Record(ts)),
            ),
            (
                br#"{"ts":"soon"}"#,
                Classification::Malformed(MalformedReason::BadField, Fallback::Record(ts)),
            ),
        ] {
            for at in [NOW, late] {
                let mut o = Observation::new("t", payload, at);
                o.record_timestamp = Some(ts);
                let c = classify(&r, &o);
                assert_eq!(c, want, "{payload:?}");
                assert_eq!(c.counted_at(at), ts.ms, "{payload:?}");
            }
        }
        // A field time far in the future of the record timestamp: out of bounds at
        // every tier, windowed by the record timestamp.
        let far = format!(r#"{{"ts":{}}}"#, ts.ms + 2 * 3_600_000);
        for at in [NOW, late] {
            let mut o = Observation::new("t", far.as_bytes(), at);
            o.record_timestamp = Some(ts);
            let c = classify(&r, &o);
            assert!(
                matches!(
                    c,
                    Classification::OutOfBounds {
                        fallback: Fallback::Record(t),
                        ..
                    } if t == ts
                ),
                "{c:?}"
            );
            assert_eq!(c.counted_at(at), ts.ms);
        }
    }

    #[test]
    fn a_non_json_payload_still_takes_the_header() {
        let r = rule(|r| r.header = Some("event-time".into()));
        let headers = [("event-time", &b"1764410390000"[..])];
        let mut o = obs(b"\x00\x01\xff");
        o.headers = &headers;
        assert!(matches!(
            classify(&r, &o),
            Classification::EventTime {
                source: TimeSource::Header,
                ..
            }
        ));
        let bad = [("event-time", &b"soon"[..])];
        o.headers = &bad;
        assert_eq!(
            classify(&r, &o),
            Classification::Malformed(MalformedReason::NotJson, Fallback::Observed)
        );
    }

    #[test]
    fn a_record_timestamp_outside_the_skew_bounds_leaves_observation_time() {
        let r = rule(|r| {
            r.max_future = Some(std::time::Duration::from_secs(60));
            r.max_past = Some(std::time::Duration::from_secs(3600));
        });
        for ts in [NOW + 60_001, NOW - 3_600_001] {
            let mut o = obs(b"\xff");
            o.record_timestamp = Some(create_time(ts));
            let c = classify(&r, &o);
            assert_eq!(
                c,
                Classification::Malformed(MalformedReason::NotJson, Fallback::Observed)
            );
            assert_eq!(c.counted_at(NOW), NOW);
            assert!(!c.is_tier_invariant());
            // A field time is then bounded against observation time.
            let doc = format!(r#"{{"ts":{NOW}}}"#);
            let mut o = obs(doc.as_bytes());
            o.record_timestamp = Some(create_time(ts));
            assert!(matches!(classify(&r, &o), Classification::EventTime { .. }));
        }
        for ts in [NOW + 60_000, NOW - 3_600_000] {
            let mut o = obs(b"\xff");
            o.record_timestamp = Some(create_time(ts));
            assert_eq!(
                classify(&r, &o),
                Classification::Malformed(
                    MalformedReason::NotJson,
                    Fallback::Record(create_time(ts))
                )
            );
        }
    }

    #[test]
    fn malformed_payloads_and_values() {
        let r = rule(|_| {});
        for p in [&b""[..], b"\x00\x01\xff", b"{\"ts\":", b"not json"] {
            assert_eq!(
                classify(&r, &obs(p)),
                Classification::Malformed(MalformedReason::NotJson, Fallback::Observed),
                "{p:?}"
            );
        }
        for p in [
            &br#"{"ts":true}"#[..],
            br#"{"ts":"soon"}"#,
            br#"{"ts":{"a":1}}"#,
        ] {
            assert_eq!(
                classify(&r, &obs(p)),
                Classification::Malformed(MalformedReason::BadField, Fallback::Observed),
                "{p:?}"
            );
        }
        // A null field is absent: falls through to the next field.
        assert!(matches!(
            classify(&r, &obs(br#"{"ts":null,"timestamp":1764410400}"#)),
            Classification::EventTime {
                source: TimeSource::Field(1),
                ..
            }
        ));
    }

    #[test]
    fn tombstones_are_not_malformed() {
        let r = rule(|_| {});
        let mut o = obs(b"");
        o.value = None;
        assert_eq!(classify(&r, &o), Classification::NoTime(Fallback::Observed));
    }

    #[test]
    fn skew_bounds_classify_not_drop() {
        let r = rule(|r| {
            r.max_future = Some(std::time::Duration::from_secs(60));
            r.max_past = Some(std::time::Duration::from_secs(3600));
        });
        let at = |t: i64| classify(&r, &obs(format!(r#"{{"ts":{t}}}"#).as_bytes()).clone());
        assert!(matches!(at(NOW + 60_000), Classification::EventTime { .. }));
        assert!(matches!(
            at(NOW + 60_001),
            Classification::OutOfBounds { .. }
        ));
        assert!(matches!(
            at(NOW - 3_600_000),
            Classification::EventTime { .. }
        ));
        assert!(matches!(
            at(NOW - 3_600_001),
            Classification::OutOfBounds { .. }
        ));
        let huge = classify(&r, &obs(br#"{"ts":1e40}"#));
        assert!(matches!(
            huge,
            Classification::OutOfBounds {
                event_time_ms: i64::MAX,
                ..
            }
        ));
        let r = rule(|r| {
            r.max_future = None;
            r.max_past = None;
        });
        assert!(matches!(
            classify(&r, &obs(br#"{"ts":-1}"#)),
            Classification::EventTime {
                event_time_ms: -1000,
                ..
            }
        ));
    }
}
