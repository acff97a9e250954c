//! The `kafka-audit audit` configuration: one TOML file plus `KAFKA_AUDIT__*`
//! environment overrides (sections `kafka`, `audit`, `ops`, `log`).
//!
//! ```toml
//! [kafka]
//! bootstrap_servers = "127.0.0.1:19092"
//! [kafka.properties]              # any librdkafka property, all clients
//! [audit]
//! instance_id = "auditor-0"       # stable per instance: transactional.id, WAL dir
//! tier = "regional"
//! datacenter = "dc1"
//! group_id = "kafka-audit-regional"
//! topics = ["orders"]             # exact names
//! topic_regex = ["^app\\..*"]     # and/or regular expressions
//! exclude_regex = ["^tmp\\."]
//! audit_topic = "_kafka_audit"
//! evidence_topic = "_kafka_audit_evidence"   # replicators' evidence: auditors alone write it
//! mode = "exactly-once"           # or "at-least-once" (no transactions; may count
//!                                 # twice when partitions change owner)
//! report_interval = "10s"
//! wal_dir = "/var/lib/kafka-audit/wal"
//! [audit.event_time]              # audit-lib's EventTimeConfig
//! window_size = "10m"
//! [audit.event_time.default]
//! fields = ["ts"]
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{KafkaConfig, LogConfig, OpsConfig};
use serde::{Deserialize, Serialize};

use crate::wal::FsyncPolicy;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub kafka: KafkaConfig,
    pub audit: AuditConfig,
    pub ops: OpsConfig,
    pub log: LogConfig,
}

/// librdkafka's default `max.poll.interval.ms`: the rebalance timeout of a classic
/// consumer-group member.
const DEFAULT_MAX_POLL_INTERVAL_MS: u64 = 300_000;

/// Sections the environment may override.
pub const ENV_SECTIONS: &[&str] = &["kafka", "audit", "ops", "log"];

impl Config {
    pub fn load(file: Option<&Path>) -> anyhow::Result<Config> {
        let cfg: Config = common::load_config(file, ENV_SECTIONS)?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        let a = &self.audit;
        anyhow::ensure!(
            self.kafka.bootstrap().is_some(),
            "kafka.bootstrap_servers is required"
        );
        anyhow::ensure!(
            !a.instance_id.is_empty(),
            "audit.instance_id is required (stable per instance)"
        );
        anyhow::ensure!(
            a.instance_id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
            "audit.instance_id {:?} may only hold [A-Za-z0-9._-] (it names a directory and a transactional.id)",
            a.instance_id
        );
        // The collector rejects every message whose names leave this set (its ingest
        // bounds): say so at start rather than in audit_reject.
        for (key, value) in [("tier", &a.tier), ("datacenter", &a.datacenter)] {
            anyhow::ensure!(
                !value.is_empty()
                    && value.len() <= 255
                    && value
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.:/".contains(c)),
                "audit.{key} {value:?} must be 1-255 characters of [A-Za-z0-9._:/-] (the collector rejects other names)"
            );
        }
        anyhow::ensure!(!a.group_id.is_empty(), "audit.group_id is required");
        for r in &a.replicators {
            r.validate()
                .map_err(|why| anyhow::anyhow!("audit.replicators: {why}"))?;
            anyhow::ensure!(
                *r != common::replication::Replicator::SameCluster,
                "audit.replicators: same_cluster names no replicator to read (it belongs on serve's edge only)"
            );
            anyhow::ensure!(
                !matches!(r, common::replication::Replicator::ConsumerGroup(g) if *g == a.group_id),
                "audit.replicators: consumer group {:?} is the auditor's own group",
                a.group_id
            );
        }
        // A revoke reports and commits every partition, then forgets them all: that
        // is the eager protocol. Incremental (cooperative) revokes would leave
        // partitions whose ranges are no longer tracked, and their counts would be
        // published without their offsets (counted twice later). KIP-848's
        // `group.protocol = consumer` is always incremental.
        let consumer = self.kafka.properties_for(common::KafkaRole::Consumer);
        if let Some(protocol) = consumer.get("group.protocol") {
            anyhow::ensure!(
                protocol.eq_ignore_ascii_case("classic"),
                "group.protocol {protocol:?}: the auditor needs the classic consumer-group protocol \
                 with an eager assignor (range, roundrobin); the \"consumer\" protocol (KIP-848) \
                 revokes partitions incrementally, which would count messages twice"
            );
        }
        if let Some(strategy) = consumer.get("partition.assignment.strategy") {
            anyhow::ensure!(
                !strategy.contains("cooperative"),
                "partition.assignment.strategy {strategy:?}: the auditor needs an eager strategy (range, roundrobin)"
            );
        }
        // A revoke reports and publishes inside the rebalance callback, while the rest
        // of the group waits in its JoinGroup for at most the rebalance timeout (the
        // classic protocol's is max.poll.interval.ms). Past it this member is dropped
        // from the group and its revoke report can no longer commit. The revoke stops
        // starting publications at revoke_timeout; one started just before may take
        // publish_timeout more.
        let rebalance_ms = consumer
            .get("max.poll.interval.ms")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(DEFAULT_MAX_POLL_INTERVAL_MS);
        let revoke_bound = a.revoke_timeout.saturating_add(a.publish_timeout);
        anyhow::ensure!(
            revoke_bound < Duration::from_millis(rebalance_ms),
            "audit.revoke_timeout ({:?}) plus audit.publish_timeout ({:?}) must stay below the \
             rebalance timeout, the consumer's max.poll.interval.ms ({rebalance_ms} ms): a revoke \
             that outlasts it is dropped from the group before its report is committed",
            a.revoke_timeout,
            a.publish_timeout
        );
        anyhow::ensure!(!a.audit_topic.is_empty(), "audit.audit_topic is required");
        if !a.replicators.is_empty() {
            anyhow::ensure!(
                !a.evidence_topic.is_empty() && a.evidence_topic != a.audit_topic,
                "audit.evidence_topic must name a topic of its own, not audit.audit_topic \
                 ({:?}): every audited application may write the audit topic, so the collector \
                 accepts replication evidence only from a topic that auditors alone may write",
                a.audit_topic
            );
        }
        anyhow::ensure!(
            !a.topics.is_empty() || !a.topic_regex.is_empty(),
            "nothing to audit: set audit.topics and/or audit.topic_regex"
        );
        for r in a.topic_regex.iter().chain(&a.exclude_regex) {
            regex::Regex::new(r).map_err(|e| anyhow::anyhow!("invalid topic regex {r:?}: {e}"))?;
        }
        anyhow::ensure!(
            a.report_interval >= Duration::from_millis(100),
            "audit.report_interval below 100ms"
        );
        a.event_time
            .compile()
            .map_err(|e| anyhow::anyhow!("audit.event_time: {e}"))?;
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Audit messages and offsets in one Kafka transaction (docs/design.md §5).
    #[default]
    ExactlyOnce,
    /// For clusters without transactions: idempotent producer, then commit offsets.
    /// An increment published but whose offsets were not committed (a crash, a failed
    /// commit, a rebalance in between) is resent with the same UUID if this instance
    /// gets its partitions back (the collector deduplicates); if another instance
    /// takes them first, it counts those messages again under new UUIDs: counted
    /// twice, at most one report's worth per partition move.
    AtLeastOnce,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    pub instance_id: String,
    pub tier: String,
    pub datacenter: String,
    pub group_id: String,
    pub topics: Vec<String>,
    pub topic_regex: Vec<String>,
    pub exclude_regex: Vec<String>,
    /// How often the topic list is re-evaluated, so new topics are picked up; also
    /// the consumer's `topic.metadata.refresh.interval.ms` (unless set), so partitions
    /// it did not know at its last join are assigned within it.
    #[serde(with = "humantime_serde")]
    pub topic_refresh: Duration,
    pub audit_topic: String,
    /// Where the replication evidence of `replicators` is published, in the same
    /// transaction as the report (docs/design.md §10): a topic only auditor principals may write
    /// (Kafka ACLs), named in the collector source's `evidence_topics`, which accepts
    /// evidence from nowhere else. The audit topic cannot carry it: every application
    /// with the plugin or the interceptors writes that one with its own principal.
    /// Created like the audit topic (when `create_audit_topic`) if there are
    /// replicators; unused without.
    pub evidence_topic: String,
    pub create_audit_topic: bool,
    pub audit_topic_partitions: i32,
    pub audit_topic_replication: i32,
    pub mode: Mode,
    #[serde(with = "humantime_serde")]
    pub report_interval: Duration,
    /// Base directory; the WAL lives in `<wal_dir>/<instance_id>`.
    pub wal_dir: PathBuf,
    pub wal_fsync: FsyncPolicy,
    /// Pending WAL bytes above which consumption pauses.
    pub wal_max_bytes: u64,
    /// `transactional.id` is this prefix + `instance_id`.
    pub transactional_id_prefix: String,
    /// Use `group.instance.id = instance_id` (static membership: a restart within the
    /// session timeout does not rebalance).
    pub static_membership: bool,
    /// Bound on one publication (transaction commit or produce + commit).
    #[serde(with = "humantime_serde")]
    pub publish_timeout: Duration,
    /// Bound on the report made when partitions are revoked; must stay below the
    /// rebalance timeout.
    #[serde(with = "humantime_serde")]
    pub revoke_timeout: Duration,
    /// Record offsets per partition in increments (for replaying a window).
    pub track_offsets: bool,
    /// Open (topic, window) statistics that trigger an early report: bounds memory
    /// when late data keeps many windows open across many topics.
    pub max_windows_per_report: usize,
    /// Warn only (default) or fail when the durability checks at start fail.
    pub strict_checks: bool,
    /// Check the durability settings of the audit topic and of the audited topics at
    /// start (needs DescribeConfigs; librdkafka's mock cluster does not answer it).
    pub durability_checks: bool,
    /// Event-time extraction and window size (audit-lib's configuration), as
    /// `[audit.event_time]`.
    pub event_time: audit_lib::EventTimeConfig,
    /// Replicators that copy this cluster's audited topics elsewhere, whose progress
    /// this auditor reads and publishes with every report (rule 0, docs/design.md §6), so serve can
    /// prove a loss before the window is final: `[[audit.replicators]]` with
    /// `consumer_group = "…"` (its committed offsets on this cluster) or
    /// `mirror_maker2 = { target = "…" }` (MirrorMaker 2's offset syncs on this
    /// cluster). The same value as the `replicator` of serve's edge.
    pub replicators: Vec<common::replication::Replicator>,
    /// How old replication evidence is when published: the downstream auditor must
    /// show it read its whole log *after* the evidence, and its "lag 0" is dated by
    /// its statistics — up to `fetch.wait.max.ms` + 1 s + one statistics interval
    /// (its report interval) before its report. Evidence younger than that can never
    /// be overtaken. Longer: more records may count as in flight (at R messages per
    /// second, about R × this), so a smaller loss waits for its window to end.
    #[serde(with = "humantime_serde")]
    pub replication_evidence_age: Duration,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            instance_id: String::new(),
            tier: "regional".into(),
            datacenter: "default".into(),
            group_id: "kafka-audit".into(),
            topics: Vec::new(),
            topic_regex: Vec::new(),
            exclude_regex: Vec::new(),
            topic_refresh: Duration::from_secs(30),
            audit_topic: "_kafka_audit".into(),
            evidence_topic: "_kafka_audit_evidence".into(),
            create_audit_topic: true,
            audit_topic_partitions: 12,
            audit_topic_replication: 3,
            mode: Mode::ExactlyOnce,
            report_interval: Duration::from_secs(10),
            wal_dir: PathBuf::from("/var/lib/kafka-audit/wal"),
            wal_fsync: FsyncPolicy::Always,
            wal_max_bytes: 1 << 30,
            transactional_id_prefix: "kafka-audit-".into(),
            static_membership: true,
            publish_timeout: Duration::from_secs(30),
            revoke_timeout: Duration::from_secs(20),
            track_offsets: true,
            max_windows_per_report: 2_000,
            strict_checks: false,
            durability_checks: true,
            event_time: audit_lib::EventTimeConfig::default(),
            replicators: Vec::new(),
            replication_evidence_age: Duration::from_secs(5),
        }
    }
}

impl AuditConfig {
    pub fn transactional_id(&self) -> String {
        format!("{}{}", self.transactional_id_prefix, self.instance_id)
    }
    pub fn instance_wal_dir(&self) -> PathBuf {
        self.wal_dir.join(&self.instance_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_parses_and_typos_fail() {
        let cfg: Config = common::config::from_toml_str(
            r#"
            [kafka]
            bootstrap_servers = "b:9092"
            [audit]
            instance_id = "a-0"
            topics = ["orders"]
            topic_regex = ["^app\\..*"]
            mode = "at-least-once"
            report_interval = "5s"
            wal_fsync = "never"
            "#,
        )
        .unwrap();
        cfg.validate().unwrap();
        assert_eq!(cfg.audit.mode, Mode::AtLeastOnce);
        assert_eq!(cfg.audit.report_interval, Duration::from_secs(5));
        assert_eq!(cfg.audit.transactional_id(), "kafka-audit-a-0");
        let err = common::config::from_toml_str::<Config>("[audit]\nreport_intreval = \"5s\"\n")
            .unwrap_err();
        assert!(format!("{err:#}").contains("report_intreval"));
    }

    /// The replicators as the shipped configs write them, and the names the
    /// collector (or the auditor itself) could not take refused at start.
    #[test]
    fn replicators_parse_and_bad_ones_are_refused() {
        let base = "[kafka]\nbootstrap_servers = \"b:1\"\n[audit]\ninstance_id = \"x\"\ntopics = [\"t\"]\n";
        let parse = |extra: &str| {
            common::config::from_toml_str::<Config>(&format!("{base}{extra}"))
                .and_then(|c| c.validate().map(|()| c))
        };
        let cfg = parse(
            "replicators = [{ mirror_maker2 = { target = \"agg\" } }, { consumer_group = \"mm1\" }]\nreplication_evidence_age = \"3s\"\n",
        )
        .unwrap();
        let tiers: Vec<String> = cfg
            .audit
            .replicators
            .iter()
            .filter_map(|r| r.evidence_tier())
            .collect();
        assert_eq!(tiers, ["replicator:mm2/agg", "replicator:group/mm1"]);
        assert_eq!(cfg.audit.replication_evidence_age, Duration::from_secs(3));
        assert_eq!(cfg.audit.evidence_topic, "_kafka_audit_evidence");
        for (bad, why) in [
            (
                "replicators = [{ consumer_group = \"a b\" }]\n",
                "must be 1-200 characters",
            ),
            (
                "replicators = [{ consumer_group = \"kafka-audit\" }]\n",
                "the auditor's own group",
            ),
            (
                "replicators = [{ mirror_maker3 = { target = \"agg\" } }]\n",
                "mirror_maker3",
            ),
            (
                "replicators = [\"same_cluster\"]\n",
                "names no replicator to read",
            ),
            (
                "replicators = [{ consumer_group = \"mm1\" }]\nevidence_topic = \"_kafka_audit\"\n",
                "evidence_topic must name a topic of its own",
            ),
        ] {
            let err = format!("{:#}", parse(bad).unwrap_err());
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn invalid_settings_are_reported() {
        let mut cfg = Config::default();
        cfg.kafka.bootstrap_servers = "b:1".into();
        assert!(cfg
            .validate()
            .unwrap_err()
            .to_string()
            .contains("instance_id"));
        cfg.audit.instance_id = "x/../y".into();
        assert!(cfg.validate().is_err());
        cfg.audit.instance_id = "x".into();
        cfg.audit.tier = "dc 1<b>".into();
        assert!(cfg
            .validate()
            .unwrap_err()
            .to_string()
            .contains("audit.tier"));
        cfg.audit.tier = "regional".into();
        assert!(cfg
            .validate()
            .unwrap_err()
            .to_string()
            .contains("nothing to audit"));
        cfg.audit.topic_regex = vec!["(".into()];
        assert!(cfg
            .validate()
            .unwrap_err()
            .to_string()
            .contains("invalid topic regex"));
        cfg.audit.topic_regex = vec!["^x".into()];
        cfg.kafka.consumer.insert(
            "partition.assignment.strategy".into(),
            "cooperative-sticky".into(),
        );
        assert!(cfg.validate().unwrap_err().to_string().contains("eager"));
    }

    /// The revoke report must be committed before the group gives up on this member:
    /// a revoke bound at or past the rebalance timeout is a configuration error.
    #[test]
    fn a_revoke_deadline_past_the_rebalance_timeout_is_refused() {
        let mut cfg = Config::default();
        cfg.kafka.bootstrap_servers = "b:1".into();
        cfg.audit.instance_id = "x".into();
        cfg.audit.topics = vec!["t".into()];
        cfg.validate()
            .expect("the defaults (20 s + 30 s < 300 s) are valid");
        cfg.kafka
            .consumer
            .insert("max.poll.interval.ms".into(), "50000".into());
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains("audit.revoke_timeout"), "{err}");
        assert!(err.contains("max.poll.interval.ms (50000 ms)"), "{err}");
        cfg.audit.revoke_timeout = Duration::from_secs(19);
        cfg.validate().expect("19 s + 30 s < 50 s");
        cfg.kafka.consumer.remove("max.poll.interval.ms");
        cfg.audit.revoke_timeout = Duration::from_secs(290);
        assert!(cfg
            .validate()
            .unwrap_err()
            .to_string()
            .contains("revoke_timeout"));
    }

    /// KIP-848 is refused however it is set: `[kafka.properties]`, `[kafka.consumer]`
    /// or the environment (which names properties with `_` for `.`).
    #[test]
    fn the_consumer_group_protocol_is_refused_however_it_is_set() {
        let base = "[kafka]\nbootstrap_servers = \"b:1\"\n[audit]\ninstance_id = \"x\"\ntopics = [\"t\"]\n";
        let refused = |cfg: Config| {
            let err = cfg.validate().unwrap_err().to_string();
            assert!(
                err.contains("group.protocol") && err.contains("classic"),
                "{err}"
            );
        };
        for section in ["properties", "consumer"] {
            for value in ["consumer", "CONSUMER"] {
                refused(
                    common::config::from_toml_str(&format!(
                        "{base}[kafka.{section}]\n\"group.protocol\" = \"{value}\"\n"
                    ))
                    .unwrap(),
                );
            }
        }
        let ok: Config = common::config::from_toml_str(&format!(
            "{base}[kafka.consumer]\n\"group.protocol\" = \"classic\"\n"
        ))
        .unwrap();
        ok.validate().unwrap();

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("audit.toml");
        std::fs::write(&file, base).unwrap();
        // No other test of this binary reads the environment.
        std::env::set_var("KAFKA_AUDIT__KAFKA__CONSUMER__GROUP_PROTOCOL", "consumer");
        let loaded = Config::load(Some(&file));
        std::env::remove_var("KAFKA_AUDIT__KAFKA__CONSUMER__GROUP_PROTOCOL");
        let err = format!("{:#}", loaded.unwrap_err());
        assert!(err.contains("group.protocol"), "{err}");
    }
}
