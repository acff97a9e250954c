//! `collect.toml`: where audit messages come from and where they go.
//!
//! ```toml
//! [store]
//! url = "postgres://kafka_audit@db/kafka_audit"   # or a SQLite file path (default)
//!
//! [[sources]]                 # one per Kafka cluster whose audit topic is collected
//! name = "regional"
//! topics = ["_kafka_audit"]
//! evidence_topics = ["_kafka_audit_evidence"]   # written by auditors alone (ACL)
//! group_id = "kafka-audit-collector"
//! [sources.kafka]             # common::KafkaConfig: bootstrap + librdkafka passthrough
//! bootstrap_servers = "broker-a:9092"
//!
//! [http]                      # POST /api/v1/audit, /metrics, /healthz
//! listen = "0.0.0.0:8091"
//!
//! [[auth.tokens]]             # bearer tokens for POST /api/v1/audit
//! name = "producers-dc1"
//! token_file = "/run/secrets/kafka-audit/ingest-dc1"
//! scopes = ["ingest"]
//! ```
//! Environment overrides: `KAFKA_AUDIT__STORE__URL=...` etc.

use std::net::SocketAddr;
use std::time::Duration;

use common::{KafkaConfig, LogConfig};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CollectConfig {
    pub store: StoreConfig,
    pub sources: Vec<KafkaSourceConfig>,
    pub http: HttpConfig,
    pub batch: BatchConfig,
    pub retry: RetryConfig,
    pub retention: RetentionConfig,
    pub auth: AuthConfig,
    pub ingest: IngestConfig,
    pub log: LogConfig,
}

/// `[ingest]`: what the collector accepts from an emitter, over HTTP and from the
/// audit topics alike: the bounds an honest auditor never reaches. A message outside
/// them is rejected on its own, with its reason (`kafka_audit_collector_bound_rejects`).
///
/// ```toml
/// [ingest]
/// window = "10m"          # the auditors' audit.event_time.window_size
/// max_partitions = 10000  # partition ids at or above are refused
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IngestConfig {
    /// The deployment's window size (every auditor's `audit.event_time.window_size`):
    /// increments of another size are rejected. Unset: the size of the first stored
    /// increment is recorded in the store and kept until this is set (one forged
    /// increment of another size then changes nothing). serve judges in the recorded
    /// size when its own `[topology] window` is unset.
    #[serde(with = "humantime_serde")]
    pub window: Option<Duration>,
    /// Partition ids at or above this are rejected (in progress reports and offset
    /// ranges): a topic's auditor knows its partition count, and ids far beyond any
    /// real one only multiply rows. 10 000 is above any topic Kafka runs well.
    pub max_partitions: u32,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            window: None,
            max_partitions: 10_000,
        }
    }
}

/// Who may `POST /api/v1/audit` (`/metrics` and `/healthz` stay open).
///
/// ```toml
/// [[auth.tokens]]
/// name = "producers-dc1"
/// token_file = "/run/secrets/kafka-audit/ingest-dc1"
/// scopes = ["ingest"]
/// tiers = ["producer"]        # optional: what this token may report
/// datacenters = ["dc1"]
/// ```
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Bearer tokens with scope `ingest` (see `common::auth`). With none, ingest
    /// answers only clients on the loopback interface, unless `allow_unauthenticated`.
    pub tokens: Vec<common::TokenConfig>,
    /// Accept messages without a token from any address (a trusted network only:
    /// anyone who can reach the port can forge every verdict).
    pub allow_unauthenticated: bool,
}

/// Top-level sections the environment may set (see `common::load_config`).
pub const ENV_SECTIONS: &[&str] = &[
    "store",
    "sources",
    "http",
    "batch",
    "retry",
    "retention",
    "auth",
    "ingest",
    "log",
];

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `postgres://...`, or a SQLite file path / `sqlite:PATH`.
    pub url: String,
    /// Apply pending migrations at start.
    pub migrate: bool,
    /// PostgreSQL connection pool size.
    pub max_connections: u32,
    /// How long a write waits for a connection (reconnecting included) before it
    /// fails and is retried with backoff.
    #[serde(with = "humantime_serde")]
    pub acquire_timeout: Duration,
}

// Hand-written: the URL's password must not reach a log through `{config:?}`.
impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig")
            .field("url", &store::redact_url(&self.url))
            .field("migrate", &self.migrate)
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .finish()
    }
}

impl StoreConfig {
    pub fn options(&self) -> store::StoreOptions {
        store::StoreOptions {
            max_connections: self.max_connections,
            acquire_timeout: self.acquire_timeout,
        }
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        let defaults = store::StoreOptions::default();
        StoreConfig {
            url: "kafka-audit.db".into(),
            migrate: true,
            max_connections: defaults.max_connections,
            acquire_timeout: defaults.acquire_timeout,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaSourceConfig {
    /// Names the cluster in logs, metrics and reject sources.
    pub name: String,
    /// Audit topics: counts and progress of any tier but replication evidence. Every
    /// audited application may write them (the plugin and the interceptors publish
    /// with the application's own principal).
    pub topics: Vec<String>,
    /// Topics that only auditor principals may write (Kafka ACLs: WRITE granted to the
    /// auditors' principals alone; audit-service's `[audit] evidence_topic`,
    /// `_kafka_audit_evidence` by default), consumed with `topics`. Replication
    /// evidence (`replicator:` tiers) is accepted only from these: a loss it proves
    /// pages at once, so anyone able to write it could forge one. Evidence on any other
    /// topic is rejected with its reason and counted
    /// (`kafka_audit_collector_evidence_rejects`).
    pub evidence_topics: Vec<String>,
    pub group_id: String,
    pub kafka: KafkaConfig,
}

impl KafkaSourceConfig {
    /// What the source subscribes to: `topics`, then the `evidence_topics` not among them.
    pub fn subscription(&self) -> Vec<&str> {
        let mut all: Vec<&str> = self.topics.iter().map(String::as_str).collect();
        for t in &self.evidence_topics {
            if !all.contains(&t.as_str()) {
                all.push(t);
            }
        }
        all
    }

    /// Why a message of `tier` read from `topic` is refused: replication evidence
    /// from a topic not in `evidence_topics`. `None` when it is accepted.
    pub fn evidence_refused(&self, topic: &str, tier: &str) -> Option<String> {
        (common::replication::is_evidence_tier(tier)
            && !self.evidence_topics.iter().any(|t| t == topic))
        .then(|| {
            format!(
                "tier {tier:?} is replication evidence, accepted only from the source's \
                 evidence_topics (writable by auditors alone), and topic {topic:?} is not one \
                 of them ({:?})",
                self.evidence_topics
            )
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    pub enabled: bool,
    pub listen: SocketAddr,
    /// Larger request bodies are refused with 413.
    pub max_body_bytes: usize,
    /// Larger arrays are refused with 413.
    pub max_messages: usize,
    /// A connection that has not sent a whole request head (or finished its TLS
    /// handshake) within this is closed; idle keep-alive connections too.
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// A request (body included) taking longer is answered 408: a body trickled
    /// byte by byte cannot hold a connection and its buffer forever.
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Connections served at once; more wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// Request bodies held in memory at once, in bytes (a body counts with its
    /// `Content-Length`, or `max_body_bytes` without one): a request that finds no
    /// room within `request_timeout` is answered 503. Parsing and storing a body costs
    /// a few times its size, so this bounds ingest's memory whatever the number of
    /// connections.
    pub max_inflight_body_bytes: usize,
    /// Requests per second one token (without tokens: one client address) may post,
    /// with a burst of as many; more are answered 429 with `Retry-After`
    /// (`kafka_audit_collector_http_throttled`). 0: no limit.
    pub token_requests_per_second: u32,
    /// Audit messages per second one token may post (a burst of as many); a request
    /// beyond is answered 429 whole. 0: no limit.
    pub token_messages_per_second: u32,
    /// Serve HTTPS with this PEM certificate chain (leaf first); needs `tls_key`.
    pub tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of `tls_cert` (PKCS#8, PKCS#1 or SEC1).
    pub tls_key: Option<std::path::PathBuf>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            enabled: true,
            listen: SocketAddr::from(([127, 0, 0, 1], 8091)),
            max_body_bytes: 8 << 20,
            max_messages: 10_000,
            header_read_timeout: common::server::DEFAULT_HEADER_READ_TIMEOUT,
            request_timeout: Duration::from_secs(30),
            max_connections: common::server::DEFAULT_MAX_CONNECTIONS,
            max_inflight_body_bytes: 16 << 20,
            token_requests_per_second: 50,
            token_messages_per_second: 50_000,
            tls_cert: None,
            tls_key: None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BatchConfig {
    /// Most Kafka records per database transaction.
    pub max_messages: usize,
    /// Most payload bytes of Kafka records per database transaction (a batch ends
    /// at the record that reaches it): bounds the collector's memory whatever the
    /// size of audit records.
    pub max_bytes: usize,
    /// Most partition entries (progress partitions and offset ranges) per database
    /// transaction; a batch ends at the record that reaches it. What a batch costs
    /// to store is proportional to its entries, not to its records: 5 000 records of
    /// 10 000 partitions each are 50 M rows.
    pub max_entries: usize,
    /// A record larger than this is rejected unread (its excerpt kept): no honest
    /// audit message comes near it (10 000 partitions are ~1 MB).
    pub max_record_bytes: usize,
    /// How long to wait for more records once a batch has one.
    #[serde(with = "humantime_serde")]
    pub max_wait: Duration,
    /// Most stored increments added to their windows per roll-up transaction
    /// (PostgreSQL stages increments on the hot path and rolls them up behind it).
    /// A roll-up costs about one row write per distinct (window, latency bucket) it
    /// touches, so the more it takes at once the cheaper each increment: measured
    /// ~17k increments/s at 50 000 and ~55k/s at 200 000 (bench/collector-store.sh).
    /// Memory: roughly 300 bytes per increment taken.
    pub rollup_max: u32,
    /// Testing aid, 0 in production: waits this long between the store commit of a
    /// Kafka batch and its offset commit, widening the window a crash test must hit
    /// (records stored but not committed, read again after a restart).
    #[serde(with = "humantime_serde")]
    pub test_pause_before_offset_commit: Duration,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            max_messages: 5_000,
            max_bytes: 64 << 20,
            max_entries: 100_000,
            max_record_bytes: 4 << 20,
            max_wait: Duration::from_millis(200),
            rollup_max: 200_000,
            test_pause_before_offset_commit: Duration::ZERO,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    #[serde(with = "humantime_serde")]
    pub initial_backoff: Duration,
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    pub enabled: bool,
    /// Windows whose start is older than this are deleted. PostgreSQL deletes whole
    /// days: a window goes with its day's partition once the whole day is older, so it
    /// is kept up to one day longer. Day partitions are created from this far back.
    #[serde(with = "humantime_serde")]
    pub windows: Duration,
    /// Message UUIDs (deduplication records) and rejects older than this are deleted
    /// (SQLite and rejects: by receive time; PostgreSQL: a UUID by its message's
    /// window start, a progress report's by its emission time, whole days as for
    /// windows). Must outlast any replay of the audit topics (their retention) or a
    /// replayed message would be counted again; at least `windows`, so that a UUID is
    /// never forgotten before its window.
    #[serde(with = "humantime_serde")]
    pub messages: Duration,
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Progress of a partition and emitters not reported for longer than this are
    /// deleted. Longer than serve's `[topology] forget_after` (24 h by default), which
    /// stops expecting them first.
    #[serde(with = "humantime_serde")]
    pub progress: Duration,
    /// Most rejects kept; the oldest beyond are deleted (a flood of invalid messages
    /// cannot fill the database for `messages` long).
    pub max_rejects: u32,
    /// Rows per delete statement: short transactions that never hold ingestion up
    /// (PostgreSQL: for rejects and the default partitions; days are dropped whole).
    pub batch_size: u32,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            enabled: true,
            windows: Duration::from_secs(30 * 86_400),
            messages: Duration::from_secs(30 * 86_400),
            progress: Duration::from_secs(7 * 86_400),
            max_rejects: 20_000,
            interval: Duration::from_secs(600),
            batch_size: 10_000,
        }
    }
}

impl CollectConfig {
    /// Loads defaults ← TOML file ← the environment's [`ENV_SECTIONS`]. [`Self::check`]
    /// runs in `start`, once tracing is up to show its warnings.
    pub fn load(file: Option<&std::path::Path>) -> anyhow::Result<CollectConfig> {
        common::load_config(file, ENV_SECTIONS)
    }

    pub fn check(&self) -> anyhow::Result<()> {
        for (i, s) in self.sources.iter().enumerate() {
            if s.name.is_empty() {
                anyhow::bail!("sources[{i}].name is empty");
            }
            if s.topics.is_empty() && s.evidence_topics.is_empty() {
                anyhow::bail!("source {:?}: topics and evidence_topics are empty", s.name);
            }
            if s.evidence_topics.iter().any(String::is_empty) {
                anyhow::bail!("source {:?}: an evidence_topics entry is empty", s.name);
            }
            if s.group_id.is_empty() {
                anyhow::bail!("source {:?}: group_id is empty", s.name);
            }
            if s.kafka.bootstrap().is_none() {
                anyhow::bail!("source {:?}: kafka.bootstrap_servers is not set", s.name);
            }
        }
        if self.batch.max_messages == 0 {
            anyhow::bail!("batch.max_messages must be at least 1");
        }
        for t in &self.auth.tokens {
            t.check(&[common::Scope::Ingest])?;
        }
        if self.batch.max_bytes == 0 {
            anyhow::bail!("batch.max_bytes must be at least 1");
        }
        if self.batch.max_entries == 0 || self.batch.max_record_bytes == 0 {
            anyhow::bail!("batch.max_entries and batch.max_record_bytes must be at least 1");
        }
        if self.http.max_inflight_body_bytes < self.http.max_body_bytes {
            anyhow::bail!(
                "http.max_inflight_body_bytes ({}) must hold at least one body of http.max_body_bytes ({})",
                self.http.max_inflight_body_bytes,
                self.http.max_body_bytes
            );
        }
        if let Some(w) = self.ingest.window {
            let ms = i64::try_from(w.as_millis()).unwrap_or(i64::MAX);
            if !(store::MIN_WINDOW_MS..=store::MAX_WINDOW_MS).contains(&ms) || ms % 1000 != 0 {
                anyhow::bail!(
                    "ingest.window = {ms} ms: a whole number of seconds from {} ms to {} ms",
                    store::MIN_WINDOW_MS,
                    store::MAX_WINDOW_MS
                );
            }
        }
        if self.ingest.max_partitions == 0 {
            anyhow::bail!("ingest.max_partitions must be at least 1");
        }
        if self.retention.enabled && self.retention.messages < self.retention.windows {
            tracing::warn!(
                "retention.messages is shorter than retention.windows: a message replayed after its UUID \
                 is forgotten would be counted again"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replication evidence is taken only from a source's evidence topics (docs/design.md
    /// §10); every other tier from any of its topics.
    #[test]
    fn evidence_is_accepted_only_from_evidence_topics() {
        let source: KafkaSourceConfig = toml::from_str(
            r#"
name = "a"
topics = ["_kafka_audit"]
evidence_topics = ["_kafka_audit_evidence"]
group_id = "g"
[kafka]
bootstrap_servers = "b:1"
"#,
        )
        .unwrap();
        assert_eq!(
            source.subscription(),
            ["_kafka_audit", "_kafka_audit_evidence"]
        );
        let refused = source
            .evidence_refused("_kafka_audit", "replicator:group/mirror")
            .expect("evidence on the applications' audit topic");
        assert!(refused.contains("evidence_topics"), "{refused}");
        assert_eq!(
            source.evidence_refused("_kafka_audit_evidence", "replicator:mm2/agg"),
            None
        );
        assert_eq!(source.evidence_refused("_kafka_audit", "regional"), None);
        assert_eq!(
            source.evidence_refused("_kafka_audit_evidence", "regional"),
            None
        );
        let bare = KafkaSourceConfig {
            evidence_topics: Vec::new(),
            ..source
        };
        assert!(bare
            .evidence_refused("_kafka_audit", "replicator:group/mirror")
            .is_some());
    }

    /// `{config:?}` in a log line must not publish the database password.
    #[test]
    fn debug_output_masks_the_store_password() {
        let config = StoreConfig {
            url: "postgres://kafka_audit:Pa55w0rd@db:5432/audit".into(),
            ..StoreConfig::default()
        };
        let text = format!("{config:?}");
        assert!(!text.contains("Pa55w0rd"), "{text}");
        assert!(text.contains("kafka_audit:***@db"), "{text}");
    }
}
