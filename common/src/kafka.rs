//! Kafka client configuration: a bootstrap address plus a passthrough of every
//! librdkafka property (SASL/SSL included), with per-role overrides.
//!
//! ```toml
//! [kafka]
//! bootstrap_servers = "broker:9092"
//! [kafka.properties]            # every client
//! "security.protocol" = "SASL_SSL"
//! "sasl.mechanisms" = "SCRAM-SHA-512"
//! [kafka.consumer]              # consumers only
//! "fetch.max.bytes" = 52428800
//! [kafka.producer]              # producers only
//! "compression.type" = "zstd"
//! ```
//! Environment: `KAFKA_AUDIT__KAFKA__PROPERTIES__SASL_PASSWORD=...`. Property names are
//! normalised by replacing `_` with `.` (no string-settable librdkafka property has an
//! underscore), so environment variables can name them.

use std::collections::BTreeMap;
use std::fmt;

use rdkafka::config::ClientConfig;
use serde::{Deserialize, Deserializer, Serialize};

/// Which kind of client a configuration is built for; selects the per-role overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KafkaRole {
    Consumer,
    Producer,
    Admin,
}

#[derive(Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    /// `bootstrap.servers`; may also be given as a property.
    pub bootstrap_servers: String,
    /// librdkafka properties for every client.
    #[serde(deserialize_with = "scalar_map")]
    pub properties: BTreeMap<String, String>,
    /// librdkafka properties for consumers only (override `properties`).
    #[serde(deserialize_with = "scalar_map")]
    pub consumer: BTreeMap<String, String>,
    /// librdkafka properties for producers only (override `properties`).
    #[serde(deserialize_with = "scalar_map")]
    pub producer: BTreeMap<String, String>,
    /// librdkafka properties for admin clients only (override `properties`).
    #[serde(deserialize_with = "scalar_map")]
    pub admin: BTreeMap<String, String>,
}

/// Properties whose values must never be logged.
const SECRET_MARKERS: [&str; 4] = ["password", "secret", "key.pem", "token"];

impl KafkaConfig {
    pub fn new(bootstrap_servers: impl Into<String>) -> Self {
        KafkaConfig {
            bootstrap_servers: bootstrap_servers.into(),
            ..Default::default()
        }
    }

    /// The effective properties for `role`: bootstrap, then `properties`, then the
    /// role's overrides. Keys are normalised (`_` → `.`).
    pub fn properties_for(&self, role: KafkaRole) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        if !self.bootstrap_servers.is_empty() {
            out.insert(
                "bootstrap.servers".to_string(),
                self.bootstrap_servers.clone(),
            );
        }
        let role_map = match role {
            KafkaRole::Consumer => &self.consumer,
            KafkaRole::Producer => &self.producer,
            KafkaRole::Admin => &self.admin,
        };
        for (k, v) in self.properties.iter().chain(role_map.iter()) {
            out.insert(normalise_key(k), v.clone());
        }
        out
    }

    /// A `ClientConfig` for `role`, with `overrides` applied last (settings the
    /// service needs for correctness, e.g. `enable.auto.commit=false`).
    pub fn client_config(&self, role: KafkaRole, overrides: &[(&str, &str)]) -> ClientConfig {
        let mut cfg = ClientConfig::new();
        for (k, v) in self.properties_for(role) {
            cfg.set(k, v);
        }
        for (k, v) in overrides {
            cfg.set(*k, *v);
        }
        cfg
    }

    /// Like `client_config`, but `defaults` are applied *before* the user's
    /// properties (so the user can change them) and `overrides` after.
    pub fn client_config_with_defaults(
        &self,
        role: KafkaRole,
        defaults: &[(&str, &str)],
        overrides: &[(&str, &str)],
    ) -> ClientConfig {
        let mut cfg = ClientConfig::new();
        for (k, v) in defaults {
            cfg.set(*k, *v);
        }
        for (k, v) in self.properties_for(role) {
            cfg.set(k, v);
        }
        for (k, v) in overrides {
            cfg.set(*k, *v);
        }
        cfg
    }

    /// The effective bootstrap address (field or property), for messages and checks.
    pub fn bootstrap(&self) -> Option<String> {
        self.properties_for(KafkaRole::Admin)
            .get("bootstrap.servers")
            .cloned()
    }
}

/// Debug output masks secrets so a config can be logged at start.
impl fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mask = |m: &BTreeMap<String, String>| -> BTreeMap<String, String> {
            m.iter()
                .map(|(k, v)| (normalise_key(k), masked(k, v)))
                .collect()
        };
        f.debug_struct("KafkaConfig")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("properties", &mask(&self.properties))
            .field("consumer", &mask(&self.consumer))
            .field("producer", &mask(&self.producer))
            .field("admin", &mask(&self.admin))
            .finish()
    }
}

fn masked(key: &str, value: &str) -> String {
    let key = normalise_key(key);
    if SECRET_MARKERS.iter().any(|m| key.contains(m)) {
        "***".to_string()
    } else {
        value.to_string()
    }
}

fn normalise_key(key: &str) -> String {
    key.replace('_', ".")
}

/// Accepts strings, numbers and booleans as property values: TOML users write
/// `"fetch.max.bytes" = 52428800`, environment values arrive parsed.
fn scalar_map<'de, D>(de: D) -> Result<BTreeMap<String, String>, D::Error>
where
    D: Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Scalar {
        S(String),
        I(i64),
        U(u64),
        F(f64),
        B(bool),
    }
    let raw = BTreeMap::<String, Scalar>::deserialize(de)?;
    Ok(raw
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                Scalar::S(s) => s,
                Scalar::I(i) => i.to_string(),
                Scalar::U(u) => u.to_string(),
                Scalar::F(f) => f.to_string(),
                Scalar::B(b) => b.to_string(),
            };
            (k, v)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, Serialize, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Root {
        kafka: KafkaConfig,
    }

    #[test]
    fn role_overrides_and_passthrough() {
        let root: Root = crate::config::from_toml_str(
            r#"
            [kafka]
            bootstrap_servers = "b:1"
            [kafka.properties]
            "security.protocol" = "SASL_SSL"
            "sasl.password" = "hunter2"
            "fetch.max.bytes" = 1000
            [kafka.consumer]
            "fetch.max.bytes" = 2000
            "#,
        )
        .unwrap();
        let c = root.kafka.properties_for(KafkaRole::Consumer);
        assert_eq!(c["bootstrap.servers"], "b:1");
        assert_eq!(c["fetch.max.bytes"], "2000");
        assert_eq!(c["security.protocol"], "SASL_SSL");
        let p = root.kafka.properties_for(KafkaRole::Producer);
        assert_eq!(p["fetch.max.bytes"], "1000");
        let cfg = root
            .kafka
            .client_config(KafkaRole::Consumer, &[("enable.auto.commit", "false")]);
        assert_eq!(cfg.get("enable.auto.commit"), Some("false"));
        let dbg = format!("{:?}", root.kafka);
        assert!(!dbg.contains("hunter2"), "{dbg}");
    }

    #[test]
    fn env_style_keys_are_normalised() {
        let mut k = KafkaConfig::new("x:1");
        k.properties
            .insert("sasl_mechanisms".into(), "PLAIN".into());
        assert_eq!(
            k.properties_for(KafkaRole::Admin)["sasl.mechanisms"],
            "PLAIN"
        );
    }
}
