//! Classifying one message: where its event time comes from, or why it has none.
//!
//! Order of preference (DESIGN §4): the rule's JSON fields in order, then its header,
//! then the Kafka record timestamp; otherwise `no_time` (counted under observation
//! time). A payload that cannot be parsed on the scanner's path, or a field or header
//! that is present but holds no usable time, is `malformed`; a time outside the skew
//! bounds is `out_of_bounds`. `null` counts as absent. Malformed, no-time and
//! out-of-bounds messages are all counted under observation time, each in its own
//! counter.

use serde::{Deserialize, Serialize};

use crate::config::CompiledRule;
use crate::observation::{Observation, TimestampType};
use crate::scan::{find_path, RawValue};
use crate::timeparse::{int_to_ms, number_to_ms, text_to_ms, TimeError, TimeUnit};

/// Where an event time was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeSource {
    /// The rule's JSON field with this index in [`CompiledRule::paths`].
    Field(u16),
    Header,
    RecordTimestamp(TimestampType),
}

impl TimeSource {
    pub fn as_str(self) -> &'static str {
        match self {
            TimeSource::Field(_) => "field",
            TimeSource::Header => "header",
            TimeSource::RecordTimestamp(TimestampType::CreateTime) => "create_time",
            TimeSource::RecordTimestamp(TimestampType::LogAppendTime) => "log_append_time",
        }
    }
}

/// Why a message is malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MalformedReason {
    /// The payload is not JSON where the scanner had to read it (empty and binary
    /// payloads included).
    NotJson,
    /// The field is present but is not a number or time string (or does not fit).
    BadField,
    /// The header is present but is not a number or time string.
    BadHeader,
}

/// The verdict for one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classification {
    /// Counted under its event time, latency recorded.
    EventTime {
        event_time_ms: i64,
        source: TimeSource,
        unit: TimeUnit,
    },
    /// A time was found but lies outside the skew bounds (or outside i64 ms, then
    /// saturated); counted under observation time.
    OutOfBounds {
        event_time_ms: i64,
        source: TimeSource,
        unit: TimeUnit,
    },
    /// No time found anywhere; counted under observation time.
    NoTime,
    /// Counted under observation time.
    Malformed(MalformedReason),
}

impl Classification {
    /// The label used in reports: `event_time`, `out_of_bounds`, `no_time`, `malformed`.
    pub fn label(&self) -> &'static str {
        match self {
            Classification::EventTime { .. } => "event_time",
            Classification::OutOfBounds { .. } => "out_of_bounds",
            Classification::NoTime => "no_time",
            Classification::Malformed(_) => "malformed",
        }
    }

    /// The time the message is counted under.
    pub fn counted_at(&self, observed_at_ms: i64) -> i64 {
        match self {
            Classification::EventTime { event_time_ms, .. } => *event_time_ms,
            _ => observed_at_ms,
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
    if let Some(value) = obs.value {
        for (idx, path) in rule.paths.iter().enumerate() {
            let found = match find_path(value, path) {
                Err(_) => return Classification::Malformed(MalformedReason::NotJson),
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
            return finish(
                rule,
                obs,
                found,
                TimeSource::Header,
                MalformedReason::BadHeader,
            );
        }
    }
    if rule.record_timestamp {
        if let Some(ts) = obs.record_timestamp {
            let found = Found::Time(ts.ms, TimeUnit::Millis);
            return finish(
                rule,
                obs,
                found,
                TimeSource::RecordTimestamp(ts.kind),
                MalformedReason::BadField,
            );
        }
    }
    Classification::NoTime
}

#[inline]
fn finish(
    rule: &CompiledRule,
    obs: &Observation<'_>,
    found: Found,
    source: TimeSource,
    bad: MalformedReason,
) -> Classification {
    let (t, unit) = match found {
        Found::Time(t, u) => (t, u),
        Found::OutOfRange(t, unit) => {
            return Classification::OutOfBounds {
                event_time_ms: t,
                source,
                unit,
            }
        }
        Found::Bad => return Classification::Malformed(bad),
    };
    let ahead = t as i128 - obs.observed_at_ms as i128;
    let too_new = rule.max_future_ms.is_some_and(|m| ahead > m as i128);
    let too_old = rule.max_past_ms.is_some_and(|m| -ahead > m as i128);
    if too_new || too_old {
        Classification::OutOfBounds {
            event_time_ms: t,
            source,
            unit,
        }
    } else {
        Classification::EventTime {
            event_time_ms: t,
            source,
            unit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{EventTimeConfig, TimeRule};
    use crate::observation::RecordTimestamp;

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
    fn fallbacks_header_then_record_timestamp_then_no_time() {
        let r = rule(|r| r.header = Some("event-time".into()));
        let headers = [("event-time", &b"1764410390000"[..])];
        let mut o = obs(br#"{"other":1}"#);
        o.headers = &headers;
        o.record_timestamp = Some(RecordTimestamp {
            ms: NOW - 5,
            kind: TimestampType::LogAppendTime,
        });
        assert!(matches!(
            classify(&r, &o),
            Classification::EventTime {
                event_time_ms: 1_764_410_390_000,
                source: TimeSource::Header,
                ..
            }
        ));
        o.headers = &crate::observation::NoHeaders;
        assert!(matches!(
            classify(&r, &o),
            Classification::EventTime {
                source: TimeSource::RecordTimestamp(TimestampType::LogAppendTime),
                ..
            }
        ));
        o.record_timestamp = None;
        assert_eq!(classify(&r, &o), Classification::NoTime);
        let r = rule(|r| r.record_timestamp = false);
        o.record_timestamp = Some(RecordTimestamp {
            ms: NOW,
            kind: TimestampType::CreateTime,
        });
        assert_eq!(classify(&r, &o), Classification::NoTime);
    }

    #[test]
    fn malformed_payloads_and_values() {
        let r = rule(|_| {});
        for p in [&b""[..], b"\x00\x01\xff", b"{\"ts\":", b"not json"] {
            assert_eq!(
                classify(&r, &obs(p)),
                Classification::Malformed(MalformedReason::NotJson),
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
                Classification::Malformed(MalformedReason::BadField),
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
        assert_eq!(classify(&r, &o), Classification::NoTime);
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
