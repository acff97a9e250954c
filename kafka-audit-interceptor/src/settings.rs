//! The plugin's configuration: the `kafka_audit.*` properties it claims from the
//! client's own configuration (`on_conf_set`), each checked when it is set, so that a
//! bad value fails the client's creation with librdkafka's usual "Invalid value" error
//! and the plugin's message.
//!
//! | property | meaning |
//! |---|---|
//! | `kafka_audit.datacenter` | required: the datacenter the counts are reported for |
//! | `kafka_audit.tier` | the tier (default `producer` for a producer, `consumer` for a consumer) |
//! | `kafka_audit.event_time.config` | a TOML file holding what audit.toml's `[audit.event_time]` holds |
//! | `kafka_audit.audit_topic` | where audit messages go (default `_kafka_audit`) |
//! | `kafka_audit.bootstrap.servers` | the audit topic's cluster (default: the client's own, with its security settings) |
//! | `kafka_audit.report.interval.ms` | how often counts are reported (default 10 000) |
//! | `kafka_audit.spool.dir` | where reports wait while the audit topic is unreachable (default: memory only) |
//! | `kafka_audit.spool.max.bytes` | the spool's bound (default 64 MiB) |
//! | `kafka_audit.<librdkafka property>` | a property of the audit producer (security: `kafka_audit.security.protocol`, `kafka_audit.sasl.password`, …) |

use std::path::PathBuf;

use audit_lib::{CompiledConfig, EventTimeConfig};

pub const PREFIX: &str = "kafka_audit.";
pub const DEFAULT_AUDIT_TOPIC: &str = "_kafka_audit";
pub const DEFAULT_REPORT_INTERVAL_MS: u64 = 10_000;
pub const DEFAULT_SPOOL_MAX_BYTES: u64 = 64 << 20;

/// What the client's configuration said, property by property.
#[derive(Clone, Default)]
pub struct Settings {
    pub datacenter: Option<String>,
    pub tier: Option<String>,
    /// The file and what it compiled to.
    pub event_time: Option<(PathBuf, CompiledConfig)>,
    pub audit_topic: Option<String>,
    pub bootstrap_servers: Option<String>,
    pub report_interval_ms: Option<u64>,
    pub spool_dir: Option<PathBuf>,
    pub spool_max_bytes: Option<u64>,
    /// `kafka_audit.<x>` properties for the audit producer, as `(x, value)`, in order.
    pub producer: Vec<(String, String)>,
}

/// What a `kafka_audit.*` property was, once checked.
pub enum Claimed {
    /// One of the plugin's own settings, applied.
    Own,
    /// A property for the audit producer: the caller checks librdkafka knows it.
    Producer(String),
}

/// A tier, datacenter or host name as the collector accepts it: 1–255 bytes of
/// `A-Z a-z 0-9 . _ - : /`.
pub fn check_name(what: &str, v: &str) -> Result<(), String> {
    let ok = |b: u8| b.is_ascii_alphanumeric() || b".-_:/".contains(&b);
    if v.is_empty() || v.len() > 255 || !v.bytes().all(ok) {
        return Err(format!(
            "{PREFIX}{what} = {v:?}: must be 1-255 characters of A-Z a-z 0-9 . _ - : /"
        ));
    }
    Ok(())
}

/// Tiers under this prefix carry a replicator's evidence (common's
/// `EVIDENCE_TIER_PREFIX`), which only the auditors of a replicated edge publish: a
/// producer's or consumer's plugin never may.
const RESERVED_TIER_PREFIX: &str = "replicator:";

fn check_not_reserved(tier: &str) -> Result<(), String> {
    if tier
        .get(..RESERVED_TIER_PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(RESERVED_TIER_PREFIX))
    {
        return Err(format!(
            "{PREFIX}tier = {tier:?}: tiers starting with {RESERVED_TIER_PREFIX:?} are reserved for the auditors' replication evidence"
        ));
    }
    Ok(())
}

/// A Kafka topic name: 1–249 bytes of `A-Z a-z 0-9 . _ -`.
fn check_topic(v: &str) -> Result<(), String> {
    let ok = |b: u8| b.is_ascii_alphanumeric() || b".-_".contains(&b);
    if v.is_empty() || v.len() > 249 || !v.bytes().all(ok) || v == "." || v == ".." {
        return Err(format!(
            "{PREFIX}audit_topic = {v:?}: not a Kafka topic name (1-249 characters of A-Z a-z 0-9 . _ -)"
        ));
    }
    Ok(())
}

fn parse_int(name: &str, v: &str, min: u64, max: u64) -> Result<u64, String> {
    match v.trim().parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "{PREFIX}{name} = {v:?}: must be an integer from {min} to {max}"
        )),
    }
}

/// Reads and compiles the event-time file with audit-lib's own code.
pub fn load_event_time(path: &str) -> Result<(PathBuf, CompiledConfig), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{PREFIX}event_time.config: cannot read {path}: {e}"))?;
    let compiled = EventTimeConfig::from_toml(&text)
        .and_then(|c| c.compile())
        .map_err(|e| format!("{PREFIX}event_time.config: {path}: {e}"))?;
    Ok((PathBuf::from(path), compiled))
}

impl Settings {
    /// Applies `kafka_audit.<name> = value` (`name` without the prefix); `None` resets
    /// it to its default.
    pub fn set(&mut self, name: &str, value: Option<&str>) -> Result<Claimed, String> {
        let v = value.map(str::trim);
        match name {
            "datacenter" => {
                if let Some(v) = v {
                    check_name("datacenter", v)?;
                }
                self.datacenter = v.map(str::to_owned);
            }
            "tier" => {
                if let Some(v) = v {
                    check_name("tier", v)?;
                    check_not_reserved(v)?;
                }
                self.tier = v.map(str::to_owned);
            }
            "event_time.config" => {
                self.event_time = v.map(load_event_time).transpose()?;
            }
            "audit_topic" => {
                if let Some(v) = v {
                    check_topic(v)?;
                }
                self.audit_topic = v.map(str::to_owned);
            }
            "bootstrap.servers" => {
                if v == Some("") {
                    return Err(format!("{PREFIX}bootstrap.servers is empty"));
                }
                self.bootstrap_servers = v.map(str::to_owned);
            }
            "report.interval.ms" => {
                self.report_interval_ms = v
                    .map(|v| parse_int("report.interval.ms", v, 100, 3_600_000))
                    .transpose()?;
            }
            "spool.dir" => {
                if let Some(v) = v {
                    std::fs::create_dir_all(v)
                        .map_err(|e| format!("{PREFIX}spool.dir: cannot create {v}: {e}"))?;
                }
                self.spool_dir = v.map(PathBuf::from);
            }
            "spool.max.bytes" => {
                self.spool_max_bytes = v
                    .map(|v| parse_int("spool.max.bytes", v, 1 << 16, 1 << 40))
                    .transpose()?;
            }
            other => {
                let value = value.unwrap_or_default().to_owned();
                self.producer.retain(|(k, _)| k != other);
                self.producer.push((other.to_owned(), value.clone()));
                return Ok(Claimed::Producer(value));
            }
        }
        Ok(Claimed::Own)
    }

    pub fn audit_topic(&self) -> &str {
        self.audit_topic.as_deref().unwrap_or(DEFAULT_AUDIT_TOPIC)
    }

    pub fn report_interval_ms(&self) -> u64 {
        self.report_interval_ms
            .unwrap_or(DEFAULT_REPORT_INTERVAL_MS)
    }

    pub fn spool_max_bytes(&self) -> u64 {
        self.spool_max_bytes.unwrap_or(DEFAULT_SPOOL_MAX_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_setting_is_checked_when_it_is_set() {
        let mut s = Settings::default();
        assert!(s.set("datacenter", Some("dc1")).is_ok());
        assert_eq!(s.datacenter.as_deref(), Some("dc1"));
        let e = s.set("datacenter", Some("dc 1")).err().unwrap();
        assert!(e.contains("kafka_audit.datacenter"), "{e}");
        assert!(s.set("tier", Some("")).is_err());
        // A replicator's evidence is the auditors' alone (docs/design.md §10).
        for reserved in ["replicator:group/mirror", "Replicator:mm2/agg"] {
            let e = s.set("tier", Some(reserved)).err().unwrap();
            assert!(e.contains("reserved"), "{e}");
        }
        assert!(s.set("tier", Some("replicator-edge")).is_ok());
        assert!(s.set("audit_topic", Some("a/b")).is_err());
        assert!(s.set("report.interval.ms", Some("10")).is_err());
        assert!(s.set("report.interval.ms", Some("ten")).is_err());
        assert!(s.set("report.interval.ms", Some("2500")).is_ok());
        assert_eq!(s.report_interval_ms(), 2500);
        s.set("report.interval.ms", None).ok();
        assert_eq!(s.report_interval_ms(), DEFAULT_REPORT_INTERVAL_MS);
        let e = s
            .set("event_time.config", Some("/nonexistent/et.toml"))
            .err()
            .unwrap();
        assert!(e.contains("/nonexistent/et.toml"), "{e}");
    }

    #[test]
    fn the_event_time_file_is_read_by_audit_libs_code() {
        let dir = std::env::temp_dir().join(format!("kai-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.toml");
        std::fs::write(
            &good,
            "window_size = \"30s\"\n[[rules]]\ntopic = \"orders*\"\nfield = \"meta.t\"\n",
        )
        .unwrap();
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "window_size = \"30s\"\nbogus = 1\n").unwrap();
        let mut s = Settings::default();
        s.set("event_time.config", Some(good.to_str().unwrap()))
            .ok()
            .unwrap();
        assert_eq!(
            s.event_time.as_ref().unwrap().1.window_size.as_millis(),
            30_000
        );
        let e = s
            .set("event_time.config", Some(bad.to_str().unwrap()))
            .err()
            .unwrap();
        assert!(e.contains("bogus"), "unknown keys are errors: {e}");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn other_properties_go_to_the_audit_producer_once_each() {
        let mut s = Settings::default();
        s.set("security.protocol", Some("ssl")).ok().unwrap();
        s.set("security.protocol", Some("sasl_ssl")).ok().unwrap();
        assert_eq!(
            s.producer,
            vec![("security.protocol".to_string(), "sasl_ssl".to_string())]
        );
    }
}
