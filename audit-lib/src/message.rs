//! The audit message, format version 1 (`docs/audit-message-v1.md`).
//!
//! Readers ignore unknown fields and reject versions they do not know. On the wire the
//! envelope and the kind-specific fields are one flat JSON object; in Rust the kind is
//! an enum so an increment cannot be built without its window.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use uuid::Uuid;

use crate::checksum::Checksum;
use crate::config::{is_reserved_tier, ConfigError};
use crate::histogram::LatencyHistogram;
use crate::stats::{OffsetSpan, WindowStats};
use crate::window::Window;

/// The only format version this library reads and writes.
pub const AUDIT_MESSAGE_VERSION: u32 = 1;

/// Who emitted a message: the observation point.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Identity {
    pub tier: String,
    pub datacenter: String,
    pub host: String,
}

impl Identity {
    /// Any identity, as a value: what a message read from the wire says, or the
    /// identity of a message built by hand (audit-service builds its replication
    /// evidence, of a [`RESERVED_TIER_PREFIX`] tier, with it). It checks nothing; an
    /// identity an application counts under is checked by [`Aggregator::new`]
    /// ([`Identity::check_counting_tier`]).
    ///
    /// [`RESERVED_TIER_PREFIX`]: crate::config::RESERVED_TIER_PREFIX
    /// [`Aggregator::new`]: crate::Aggregator::new
    pub fn new(
        tier: impl Into<String>,
        datacenter: impl Into<String>,
        host: impl Into<String>,
    ) -> Self {
        Identity {
            tier: tier.into(),
            datacenter: datacenter.into(),
            host: host.into(),
        }
    }

    /// That this identity may count (an application's producer or consumer, an
    /// auditor): its tier is not a replicator's evidence tier (docs/design.md §10).
    /// Evidence comes only from the replicator's auditors, so a reserved tier here is a
    /// configuration error, [`ConfigError::ReservedTier`].
    pub fn check_counting_tier(&self) -> Result<(), ConfigError> {
        if is_reserved_tier(&self.tier) {
            return Err(ConfigError::ReservedTier {
                tier: self.tier.clone(),
            });
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    #[default]
    Increment,
    Progress,
}

/// Window statistics observed since the previous increment of the same window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Increment {
    pub window_start: i64,
    pub window_end: i64,
    pub stats: WindowStats,
}

/// How far one partition has been read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionProgress {
    pub partition: i32,
    /// The offset the auditor has read the partition up to: the consumer position
    /// (past transaction markers), or the committed offset before anything was polled;
    /// the log end for a partition with nothing readable.
    pub next_offset: i64,
    /// Event-time watermark: the minimum record timestamp over the records read since
    /// the previous report and the last 32 (docs/audit-message-v1.md).
    pub record_time: Option<i64>,
    /// High watermark minus `next_offset`, when known.
    pub lag: Option<i64>,
    /// The latest record timestamp read on the partition, capped at the auditor's
    /// clock when it read it (records outside the topic's skew bounds left out, as
    /// for `record_time`): what the engine compares with the upstream's latest record
    /// time of a window (docs/web.md, Verdicts). Absent: unknown (older auditors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_record_time: Option<i64>,
    /// The partition's records carry LogAppendTime (the broker's clock at append),
    /// not the CreateTime a replicator preserves: its record times cannot be compared
    /// with the upstream's. Written only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub log_append_time: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuditBody {
    Increment(Increment),
    Progress(Vec<PartitionProgress>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditMessage {
    pub version: u32,
    pub uuid: Uuid,
    pub tier: String,
    pub datacenter: String,
    pub host: String,
    pub topic: String,
    /// Epoch ms when the message was created; for progress, when its lags were
    /// measured (docs/audit-message-v1.md, Progress).
    pub emitted_at: i64,
    pub body: AuditBody,
}

impl AuditMessage {
    /// A new increment with a fresh random UUID.
    pub fn increment(
        identity: &Identity,
        topic: impl Into<String>,
        window: Window,
        stats: WindowStats,
        emitted_at: i64,
    ) -> Self {
        Self::with_body(
            identity,
            topic,
            emitted_at,
            AuditBody::Increment(Increment {
                window_start: window.start_ms,
                window_end: window.end_ms,
                stats,
            }),
        )
    }

    /// A new progress report with a fresh random UUID.
    pub fn progress(
        identity: &Identity,
        topic: impl Into<String>,
        partitions: Vec<PartitionProgress>,
        emitted_at: i64,
    ) -> Self {
        Self::with_body(identity, topic, emitted_at, AuditBody::Progress(partitions))
    }

    fn with_body(
        identity: &Identity,
        topic: impl Into<String>,
        emitted_at: i64,
        body: AuditBody,
    ) -> Self {
        AuditMessage {
            version: AUDIT_MESSAGE_VERSION,
            uuid: Uuid::new_v4(),
            tier: identity.tier.clone(),
            datacenter: identity.datacenter.clone(),
            host: identity.host.clone(),
            topic: topic.into(),
            emitted_at,
            body,
        }
    }

    pub fn kind(&self) -> MessageKind {
        match self.body {
            AuditBody::Increment(_) => MessageKind::Increment,
            AuditBody::Progress(_) => MessageKind::Progress,
        }
    }

    pub fn as_increment(&self) -> Option<&Increment> {
        match &self.body {
            AuditBody::Increment(i) => Some(i),
            AuditBody::Progress(_) => None,
        }
    }

    pub fn as_progress(&self) -> Option<&[PartitionProgress]> {
        match &self.body {
            AuditBody::Progress(p) => Some(p),
            AuditBody::Increment(_) => None,
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("audit message serialisation cannot fail")
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

/// The flat wire form, borrowed for writing.
#[derive(Serialize)]
struct WireOut<'a> {
    version: u32,
    kind: MessageKind,
    uuid: &'a Uuid,
    tier: &'a str,
    datacenter: &'a str,
    host: &'a str,
    topic: &'a str,
    emitted_at: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    window_start: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    window_end: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    no_time_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    malformed_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    out_of_bounds_count: Option<u64>,
    /// Written only when not 0, so increments without such messages stay byte-for-byte
    /// what readers older than the field expect.
    #[serde(skip_serializing_if = "Option::is_none")]
    observation_time_count: Option<u64>,
    /// Written only when not 0, like `observation_time_count`.
    #[serde(skip_serializing_if = "Option::is_none")]
    delivery_failed_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    checksum: Option<Checksum>,
    #[serde(skip_serializing_if = "Option::is_none")]
    latency: Option<&'a LatencyHistogram>,
    #[serde(skip_serializing_if = "Option::is_none")]
    offsets: Option<&'a [OffsetSpan]>,
    /// Written when known, so increments of emitters that know none stay what
    /// readers older than the field expect.
    #[serde(skip_serializing_if = "Option::is_none")]
    max_observed_at: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    partitions: Option<&'a [PartitionProgress]>,
}

impl Serialize for AuditMessage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut w = WireOut {
            version: self.version,
            kind: self.kind(),
            uuid: &self.uuid,
            tier: &self.tier,
            datacenter: &self.datacenter,
            host: &self.host,
            topic: &self.topic,
            emitted_at: self.emitted_at,
            window_start: None,
            window_end: None,
            count: None,
            bytes: None,
            no_time_count: None,
            malformed_count: None,
            out_of_bounds_count: None,
            observation_time_count: None,
            delivery_failed_count: None,
            checksum: None,
            latency: None,
            offsets: None,
            max_observed_at: None,
            partitions: None,
        };
        match &self.body {
            AuditBody::Increment(i) => {
                let st = &i.stats;
                w.window_start = Some(i.window_start);
                w.window_end = Some(i.window_end);
                w.count = Some(st.count);
                w.bytes = Some(st.bytes);
                w.no_time_count = Some(st.no_time_count);
                w.malformed_count = Some(st.malformed_count);
                w.out_of_bounds_count = Some(st.out_of_bounds_count);
                w.observation_time_count =
                    (st.observation_time_count != 0).then_some(st.observation_time_count);
                w.delivery_failed_count =
                    (st.delivery_failed_count != 0).then_some(st.delivery_failed_count);
                w.checksum = Some(st.checksum);
                w.latency = Some(&st.latency);
                if !st.offsets.is_empty() {
                    w.offsets = Some(&st.offsets);
                }
                w.max_observed_at = st.max_observed_at;
            }
            AuditBody::Progress(p) => w.partitions = Some(p),
        }
        w.serialize(s)
    }
}

/// The flat wire form, owned for reading; unknown fields are ignored (no
/// `deny_unknown_fields`), as the contract requires for forward compatibility.
#[derive(Deserialize)]
struct WireIn {
    version: u32,
    #[serde(default)]
    kind: MessageKind,
    uuid: Uuid,
    tier: String,
    datacenter: String,
    host: String,
    topic: String,
    emitted_at: i64,
    window_start: Option<i64>,
    window_end: Option<i64>,
    count: Option<u64>,
    bytes: Option<u64>,
    no_time_count: Option<u64>,
    malformed_count: Option<u64>,
    out_of_bounds_count: Option<u64>,
    observation_time_count: Option<u64>,
    delivery_failed_count: Option<u64>,
    checksum: Option<Checksum>,
    latency: Option<LatencyHistogram>,
    offsets: Option<Vec<OffsetSpan>>,
    max_observed_at: Option<i64>,
    partitions: Option<Vec<PartitionProgress>>,
}

fn required<T, E: serde::de::Error>(v: Option<T>, field: &str) -> Result<T, E> {
    v.ok_or_else(|| E::custom(format!("increment: missing field `{field}`")))
}

impl<'de> Deserialize<'de> for AuditMessage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = WireIn::deserialize(d)?;
        if w.version != AUDIT_MESSAGE_VERSION {
            return Err(D::Error::custom(format!(
                "unsupported audit message version {} (this reader knows {AUDIT_MESSAGE_VERSION})",
                w.version
            )));
        }
        let body = match w.kind {
            MessageKind::Increment => {
                let window_start: i64 = required(w.window_start, "window_start")?;
                let window_end: i64 = required(w.window_end, "window_end")?;
                if window_end <= window_start {
                    return Err(D::Error::custom(format!(
                        "increment: window_end {window_end} is not after window_start {window_start}"
                    )));
                }
                let stats = WindowStats {
                    count: required(w.count, "count")?,
                    bytes: required(w.bytes, "bytes")?,
                    no_time_count: required(w.no_time_count, "no_time_count")?,
                    malformed_count: required(w.malformed_count, "malformed_count")?,
                    // Optional for producers written before the field existed.
                    out_of_bounds_count: w.out_of_bounds_count.unwrap_or(0),
                    // Optional: 0 when absent (writers before the field, or none seen).
                    observation_time_count: w.observation_time_count.unwrap_or(0),
                    // Optional: 0 when absent (every emitter but a producer tier that
                    // was told of failed deliveries).
                    delivery_failed_count: w.delivery_failed_count.unwrap_or(0),
                    checksum: required(w.checksum, "checksum")?,
                    latency: required(w.latency, "latency")?,
                    offsets: w.offsets.unwrap_or_default(),
                    // Optional: unknown when absent (emitters before the field).
                    max_observed_at: w.max_observed_at,
                };
                let parts = stats.no_time_count as u128
                    + stats.malformed_count as u128
                    + stats.out_of_bounds_count as u128;
                if parts > stats.count as u128 {
                    return Err(D::Error::custom(format!(
                        "increment: no_time_count + malformed_count + out_of_bounds_count ({parts}) exceeds count ({})",
                        stats.count
                    )));
                }
                AuditBody::Increment(Increment {
                    window_start,
                    window_end,
                    stats,
                })
            }
            MessageKind::Progress => {
                AuditBody::Progress(required(w.partitions, "partitions").map_err(
                    |_: D::Error| D::Error::custom("progress: missing field `partitions`"),
                )?)
            }
        };
        Ok(AuditMessage {
            version: w.version,
            uuid: w.uuid,
            tier: w.tier,
            datacenter: w.datacenter,
            host: w.host,
            topic: w.topic,
            emitted_at: w.emitted_at,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../docs/audit-message-v1.example.json");

    #[test]
    fn documented_example_parses_and_round_trips() {
        let m: AuditMessage = serde_json::from_str(EXAMPLE).unwrap();
        assert_eq!(m.kind(), MessageKind::Increment);
        let inc = m.as_increment().unwrap();
        assert_eq!(inc.window_end - inc.window_start, 600_000);
        assert_eq!(inc.stats.count, 1000);
        assert_eq!(inc.stats.checksum, Checksum(0x9f86d081884c7d65));
        let again: AuditMessage = serde_json::from_str(&m.to_json()).unwrap();
        assert_eq!(again, m);
        let a: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
        let b: serde_json::Value = serde_json::to_value(&m).unwrap();
        assert_eq!(a, b, "serialisation must reproduce the documented example");
    }

    #[test]
    fn unknown_fields_are_ignored_and_kind_defaults_to_increment() {
        let mut v: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
        let o = v.as_object_mut().unwrap();
        o.remove("kind");
        o.insert("future_field".into(), serde_json::json!({"x": [1, 2]}));
        let m: AuditMessage = serde_json::from_value(v).unwrap();
        assert_eq!(m.kind(), MessageKind::Increment);
    }

    #[test]
    fn unknown_version_is_rejected() {
        let mut v: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
        v["version"] = 2.into();
        let e = serde_json::from_value::<AuditMessage>(v).unwrap_err();
        assert!(e.to_string().contains("version 2"), "{e}");
    }

    #[test]
    fn increment_missing_a_field_is_rejected_with_its_name() {
        let mut v: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
        v.as_object_mut().unwrap().remove("checksum");
        let e = serde_json::from_value::<AuditMessage>(v).unwrap_err();
        assert!(e.to_string().contains("checksum"), "{e}");
    }

    #[test]
    fn inconsistent_counts_are_rejected() {
        let mut v: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
        v["malformed_count"] = 5000.into();
        assert!(serde_json::from_value::<AuditMessage>(v).is_err());
    }

    #[test]
    fn observation_time_count_is_optional_and_outside_count() {
        // Written before the field existed: 0.
        let m: AuditMessage = serde_json::from_str(EXAMPLE).unwrap();
        assert_eq!(m.as_increment().unwrap().stats.observation_time_count, 0);
        assert!(!m.to_json().contains("observation_time_count"));
        // Not part of `count`: a window with only observation-time messages is valid,
        // and the reason counters are still bounded by `count` alone.
        let mut v: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
        v["count"] = 0.into();
        v["bytes"] = 0.into();
        v["no_time_count"] = 0.into();
        v["malformed_count"] = 0.into();
        v["out_of_bounds_count"] = 0.into();
        v["observation_time_count"] = u64::MAX.into();
        let m: AuditMessage = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(
            m.as_increment().unwrap().stats.observation_time_count,
            u64::MAX
        );
        let again = AuditMessage::from_json(m.to_json().as_bytes()).unwrap();
        assert_eq!(again, m);
        v["malformed_count"] = 1.into();
        let e = serde_json::from_value::<AuditMessage>(v.clone()).unwrap_err();
        assert!(e.to_string().contains("exceeds count"), "{e}");
        v["malformed_count"] = 0.into();
        v["observation_time_count"] = (-1).into();
        assert!(serde_json::from_value::<AuditMessage>(v).is_err());
    }

    #[test]
    fn progress_round_trips() {
        let id = Identity::new("regional", "dc1", "auditor-0");
        let m = AuditMessage::progress(
            &id,
            "orders",
            vec![
                PartitionProgress {
                    partition: 0,
                    next_offset: 10,
                    record_time: Some(1_764_410_400_000),
                    lag: Some(0),
                    max_record_time: Some(1_764_410_400_100),
                    log_append_time: true,
                },
                PartitionProgress {
                    partition: 1,
                    next_offset: 0,
                    record_time: None,
                    lag: None,
                    ..PartitionProgress::default()
                },
            ],
            1_764_410_400_500,
        );
        let json = m.to_json();
        // Written when known (and the flag when set) only: an older auditor's report
        // is byte for byte what it was.
        assert_eq!(json.matches("max_record_time").count(), 1, "{json}");
        assert_eq!(json.matches("log_append_time").count(), 1, "{json}");
        assert!(json.contains(r#""kind":"progress""#));
        assert!(!json.contains("window_start"));
        let back = AuditMessage::from_json(json.as_bytes()).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.as_progress().unwrap().len(), 2);
    }

    /// The record-time evidence of an increment is optional both ways: an increment of
    /// an older emitter reads as "unknown", and one with it keeps it.
    #[test]
    fn record_time_evidence_is_optional_and_round_trips() {
        let mut v: serde_json::Value = serde_json::from_str(EXAMPLE).unwrap();
        let m: AuditMessage = serde_json::from_value(v.clone()).unwrap();
        let st = &m.as_increment().unwrap().stats;
        assert_eq!(st.max_observed_at, Some(1_764_411_011_000));
        assert_eq!(st.offsets[0].max_record_time, Some(1_764_411_010_500));
        v.as_object_mut().unwrap().remove("max_observed_at");
        v["offsets"][0]
            .as_object_mut()
            .unwrap()
            .remove("max_record_time");
        let old: AuditMessage = serde_json::from_value(v).unwrap();
        let st = &old.as_increment().unwrap().stats;
        assert_eq!(
            (st.max_observed_at, st.offsets[0].max_record_time),
            (None, None)
        );
        let json = old.to_json();
        assert!(!json.contains("max_observed_at") && !json.contains("max_record_time"));
        assert_eq!(AuditMessage::from_json(json.as_bytes()).unwrap(), old);
    }

    /// `replicator:` tiers, in any case, are the auditors' evidence; a tier that only
    /// looks like one is an ordinary tier.
    #[test]
    fn a_reserved_tier_may_not_count() {
        for reserved in [
            "replicator:group/mirror",
            "Replicator:mm2/agg",
            "REPLICATOR:",
        ] {
            assert!(is_reserved_tier(reserved), "{reserved}");
            let e = Identity::new(reserved, "dc1", "app-1")
                .check_counting_tier()
                .unwrap_err();
            assert!(matches!(&e, ConfigError::ReservedTier { tier } if tier == reserved));
            let e = e.to_string();
            assert!(e.contains(reserved), "{e}");
            assert!(e.contains("\"replicator:\" are reserved"), "{e}");
            assert!(e.contains("only from the replicator's auditors"), "{e}");
        }
        for ordinary in [
            "producer",
            "replicator",
            "replicator-edge",
            "my-replicator:x",
            "r\u{e9}plicator:x",
            "",
        ] {
            assert!(!is_reserved_tier(ordinary), "{ordinary}");
            Identity::new(ordinary, "dc1", "app-1")
                .check_counting_tier()
                .unwrap();
        }
        // The evidence itself is still built as a value (audit-service does).
        let m = AuditMessage::progress(
            &Identity::new("replicator:group/mirror", "dc1", "auditor-0"),
            "orders",
            vec![],
            1,
        );
        assert_eq!(m.tier, "replicator:group/mirror");
    }

    #[test]
    fn fresh_messages_get_distinct_uuids() {
        let id = Identity::new("t", "d", "h");
        let w = Window {
            start_ms: 0,
            end_ms: 10,
        };
        let a = AuditMessage::increment(&id, "x", w, WindowStats::default(), 1);
        let b = AuditMessage::increment(&id, "x", w, WindowStats::default(), 1);
        assert_ne!(a.uuid, b.uuid);
        assert_eq!(a.version, 1);
    }
}
