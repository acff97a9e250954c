//! Start-up checks: the audit topic exists (created when configured
//! to), and with replicators the evidence topic (docs/design.md §10); the durability settings of
//! those and, as a report, of the audited topics: replication factor >= 3,
//! `min.insync.replicas` >= 2, no unclean leader election. Findings are warnings unless `strict_checks` is set.

use std::time::Duration;

use anyhow::Context;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;

use crate::config::Config;

const TIMEOUT: Duration = Duration::from_secs(30);
/// How long the audit topic's metadata may take to settle (leaders and replicas of
/// every partition visible) before its durability check gives up.
const SETTLE: Duration = Duration::from_secs(30);
/// The same for the audited topics together (they are only reported on).
const SETTLE_AUDITED: Duration = Duration::from_secs(10);
const SETTLE_POLL: Duration = Duration::from_millis(100);

/// One durability finding about one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub topic: String,
    pub problem: String,
}

fn admin(cfg: &Config) -> anyhow::Result<AdminClient<DefaultClientContext>> {
    cfg.kafka
        .client_config(common::KafkaRole::Admin, &[])
        .create()
        .context("cannot create Kafka admin client")
}

/// Makes sure the audit topic exists, and with replicators the evidence topic
/// (docs/design.md §10); returns the durability findings about them and about `audited` topics.
pub async fn run_checks(cfg: &Config, audited: &[String]) -> anyhow::Result<Vec<Finding>> {
    let admin = admin(cfg)?;
    let a = &cfg.audit;
    let mut own = vec![(a.audit_topic.as_str(), "audit topic")];
    if !a.replicators.is_empty() {
        own.push((a.evidence_topic.as_str(), "evidence topic"));
    }
    let mut created = Vec::new();
    for &(topic, what) in &own {
        created.push(ensure_topic(&admin, cfg, topic, what).await?);
    }
    if !a.durability_checks {
        tracing::info!("durability checks skipped (audit.durability_checks = false)");
        return Ok(Vec::new());
    }
    let mut findings = Vec::new();
    for (&(topic, what), created) in own.iter().zip(created) {
        // Created just now, or existing: either way judged on settled metadata only.
        let expected = created.then_some(a.audit_topic_partitions.max(1) as usize);
        match describe(&admin, topic, expected, SETTLE).await {
            Ok(f) => findings.extend(f),
            // A check that cannot run is not a finding; only strict mode makes it fatal.
            Err(e) if !a.strict_checks => {
                tracing::warn!(topic = %topic, error = %format!("{e:#}"), "cannot check the {what}'s durability settings");
            }
            Err(e) => return Err(e),
        }
    }
    // Audited topics only as a report: a bounded sample keeps start-up fast with
    // thousands of topics.
    let audited_deadline = tokio::time::Instant::now() + SETTLE_AUDITED;
    for t in audited.iter().take(50) {
        let settle = audited_deadline.saturating_duration_since(tokio::time::Instant::now());
        match describe(&admin, t, None, settle).await {
            Ok(f) => findings.extend(f),
            Err(e) => {
                tracing::warn!(topic = %t, error = %format!("{e:#}"), "cannot check durability settings")
            }
        }
    }
    for f in &findings {
        tracing::warn!(topic = %f.topic, problem = %f.problem, "durability check");
    }
    if let Some(&(topic, what)) = own
        .iter()
        .find(|(t, _)| a.strict_checks && findings.iter().any(|f| f.topic == *t))
    {
        anyhow::bail!("durability checks of {what} {topic} failed (audit.strict_checks)");
    }
    Ok(findings)
}

/// Makes sure `topic`, the auditor's own (`what`: audit or evidence topic), exists,
/// creating it when `create_audit_topic` says so with the audit topic's partitions
/// and replication. Whether it was created.
async fn ensure_topic(
    admin: &AdminClient<DefaultClientContext>,
    cfg: &Config,
    topic: &str,
    what: &str,
) -> anyhow::Result<bool> {
    let a = &cfg.audit;
    let md = admin
        .inner()
        .fetch_metadata(Some(topic), TIMEOUT)
        .with_context(|| format!("cannot fetch metadata of {what} {topic}"))?;
    let exists: bool = md
        .topics()
        .first()
        .is_some_and(|t| t.error().is_none() && !t.partitions().is_empty());
    if exists {
        return Ok(false);
    }
    anyhow::ensure!(
        a.create_audit_topic,
        "{what} {topic} does not exist and audit.create_audit_topic is false"
    );
    let new = NewTopic::new(
        topic,
        a.audit_topic_partitions,
        TopicReplication::Fixed(a.audit_topic_replication),
    )
    .set(
        "min.insync.replicas",
        if a.audit_topic_replication >= 3 {
            "2"
        } else {
            "1"
        },
    );
    let res = admin
        .create_topics(
            [&new],
            &AdminOptions::new().operation_timeout(Some(TIMEOUT)),
        )
        .await
        .with_context(|| format!("cannot create {what} {topic}"))?;
    for r in res {
        match r {
            Ok(_) => {
                tracing::info!(
                    topic,
                    partitions = a.audit_topic_partitions,
                    replication = a.audit_topic_replication,
                    "created {what}"
                )
            }
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, e)) => anyhow::bail!("cannot create {what} {t}: {e}"),
        }
    }
    Ok(true)
}

/// Durability findings about one topic, judged once its metadata has settled (waits
/// up to `settle` for that; an error, not a finding, if it does not).
pub async fn check_topic(
    cfg: &Config,
    topic: &str,
    settle: Duration,
) -> anyhow::Result<Vec<Finding>> {
    describe(&admin(cfg)?, topic, None, settle).await
}

/// One partition as metadata shows it: its leader (-1: none) and its replica count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PartitionView {
    pub leader: i32,
    pub replicas: usize,
}

/// The replication factor a topic's metadata shows, or why it cannot be judged yet: a
/// topic just created reaches the broker's metadata a moment after CreateTopics
/// returns (the topic unknown, partitions missing, without leader or replicas), and
/// judging that snapshot would report "replication factor 0".
pub(crate) fn settled_replication(
    error: Option<&str>,
    partitions: &[PartitionView],
    expected_partitions: Option<usize>,
) -> Result<usize, String> {
    if let Some(e) = error {
        return Err(format!("metadata error {e}"));
    }
    if partitions.is_empty() {
        return Err("no partitions in metadata".into());
    }
    if let Some(n) = expected_partitions {
        if partitions.len() < n {
            return Err(format!(
                "{} of {n} partitions in metadata",
                partitions.len()
            ));
        }
    }
    // A topic just created (its partition count known) is settled once every
    // partition has a leader too; an existing one whose leader is away (a broker
    // restarting) still shows its replicas and is judged on them.
    let just_created = expected_partitions.is_some();
    if let Some((p, _)) = partitions
        .iter()
        .enumerate()
        .find(|(_, p)| p.replicas == 0 || (just_created && p.leader < 0))
    {
        return Err(format!("partition {p} has no leader or no replicas yet"));
    }
    Ok(partitions.iter().map(|p| p.replicas).min().unwrap_or(0))
}

/// Polls the topic's metadata until it has settled ([`settled_replication`]) or
/// `settle` has passed; returns the replication factor.
async fn settled_metadata(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
    expected_partitions: Option<usize>,
    settle: Duration,
) -> anyhow::Result<usize> {
    let deadline = tokio::time::Instant::now() + settle;
    loop {
        let md = admin
            .inner()
            .fetch_metadata(Some(topic), TIMEOUT.min(settle.max(Duration::from_secs(1))))
            .with_context(|| format!("cannot fetch metadata of {topic}"))?;
        let why = match md.topics().iter().find(|t| t.name() == topic) {
            None => "topic absent from metadata".to_string(),
            Some(t) => {
                let parts: Vec<PartitionView> = t
                    .partitions()
                    .iter()
                    .map(|p| PartitionView {
                        leader: p.leader(),
                        replicas: p.replicas().len(),
                    })
                    .collect();
                let error = t
                    .error()
                    .map(|e| format!("{:?}", RDKafkaErrorCode::from(e)));
                match settled_replication(error.as_deref(), &parts, expected_partitions) {
                    Ok(rf) => return Ok(rf),
                    Err(why) => why,
                }
            }
        };
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "metadata of {topic} not settled after {settle:?}: {why}"
        );
        tokio::time::sleep(SETTLE_POLL).await;
    }
}

async fn describe(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
    expected_partitions: Option<usize>,
    settle: Duration,
) -> anyhow::Result<Vec<Finding>> {
    let mut out = Vec::new();
    let rf = settled_metadata(admin, topic, expected_partitions, settle).await?;
    if rf < 3 {
        out.push(Finding {
            topic: topic.into(),
            problem: format!("replication factor {rf} < 3"),
        });
    }
    let res = admin
        .describe_configs(
            [&ResourceSpecifier::Topic(topic)],
            &AdminOptions::new().request_timeout(Some(TIMEOUT)),
        )
        .await
        .with_context(|| format!("cannot describe configs of {topic}"))?;
    for r in res {
        let r = r.map_err(|e| anyhow::anyhow!("cannot describe configs of {topic}: {e}"))?;
        let get = |name: &str| r.get(name).and_then(|e| e.value.clone());
        if let Some(v) = get("min.insync.replicas") {
            if v.parse::<i64>().unwrap_or(0) < 2 {
                out.push(Finding {
                    topic: topic.into(),
                    problem: format!("min.insync.replicas {v} < 2"),
                });
            }
        }
        if get("unclean.leader.election.enable").as_deref() == Some("true") {
            out.push(Finding {
                topic: topic.into(),
                problem: "unclean.leader.election.enable=true".into(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(leader: i32, replicas: usize) -> PartitionView {
        PartitionView { leader, replicas }
    }

    #[test]
    fn unsettled_metadata_is_never_judged() {
        let not_yet = |e: Option<&str>, parts: &[PartitionView], n| {
            settled_replication(e, parts, n).expect_err("not settled")
        };
        not_yet(Some("UnknownTopicOrPartition"), &[], None);
        not_yet(None, &[], None);
        not_yet(None, &[p(1, 1), p(-1, 1)], Some(2));
        // an existing topic whose leader is away is judged on its replicas
        assert_eq!(settled_replication(None, &[p(1, 3), p(-1, 3)], None), Ok(3));
        not_yet(None, &[p(1, 1), p(1, 0)], None);
        not_yet(None, &[p(1, 3), p(1, 3)], Some(3));
        assert_eq!(
            settled_replication(None, &[p(1, 3), p(2, 1)], Some(2)),
            Ok(1)
        );
        assert_eq!(settled_replication(None, &[p(1, 3)], None), Ok(3));
    }
}
