//! Start-up checks (issue #4 item 6): the audit topic exists (created when configured
//! to) and the durability settings of the audit topic and, as a report, of the audited
//! topics: replication factor >= 3, `min.insync.replicas` >= 2, no unclean leader
//! election. Findings are warnings unless `strict_checks` is set.

use std::time::Duration;

use anyhow::Context;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;

use crate::config::Config;

const TIMEOUT: Duration = Duration::from_secs(30);

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

/// Makes sure the audit topic exists; returns the durability findings about it and
/// about `audited` topics.
pub async fn run_checks(cfg: &Config, audited: &[String]) -> anyhow::Result<Vec<Finding>> {
    let admin = admin(cfg)?;
    let a = &cfg.audit;
    let md = admin
        .inner()
        .fetch_metadata(Some(&a.audit_topic), TIMEOUT)
        .with_context(|| format!("cannot fetch metadata of audit topic {}", a.audit_topic))?;
    let exists = md
        .topics()
        .first()
        .is_some_and(|t| t.error().is_none() && !t.partitions().is_empty());
    if !exists {
        anyhow::ensure!(
            a.create_audit_topic,
            "audit topic {} does not exist and audit.create_audit_topic is false",
            a.audit_topic
        );
        let topic = NewTopic::new(
            &a.audit_topic,
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
                [&topic],
                &AdminOptions::new().operation_timeout(Some(TIMEOUT)),
            )
            .await
            .with_context(|| format!("cannot create audit topic {}", a.audit_topic))?;
        for r in res {
            match r {
                Ok(_) => {
                    tracing::info!(topic = %a.audit_topic, partitions = a.audit_topic_partitions, replication = a.audit_topic_replication, "created audit topic")
                }
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((t, e)) => anyhow::bail!("cannot create audit topic {t}: {e}"),
            }
        }
    }
    if !a.durability_checks {
        tracing::info!("durability checks skipped (audit.durability_checks = false)");
        return Ok(Vec::new());
    }
    let mut findings = match describe(&admin, &a.audit_topic).await {
        Ok(f) => f,
        // A check that cannot run is not a finding; only strict mode makes it fatal.
        Err(e) if !a.strict_checks => {
            tracing::warn!(topic = %a.audit_topic, error = %format!("{e:#}"), "cannot check the audit topic's durability settings");
            Vec::new()
        }
        Err(e) => return Err(e),
    };
    // Audited topics only as a report: a bounded sample keeps start-up fast with
    // thousands of topics.
    for t in audited.iter().take(50) {
        match describe(&admin, t).await {
            Ok(f) => findings.extend(f),
            Err(e) => {
                tracing::warn!(topic = %t, error = %format!("{e:#}"), "cannot check durability settings")
            }
        }
    }
    for f in &findings {
        tracing::warn!(topic = %f.topic, problem = %f.problem, "durability check");
    }
    if a.strict_checks && findings.iter().any(|f| f.topic == a.audit_topic) {
        anyhow::bail!(
            "durability checks of audit topic {} failed (audit.strict_checks)",
            a.audit_topic
        );
    }
    Ok(findings)
}

async fn describe(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
) -> anyhow::Result<Vec<Finding>> {
    let mut out = Vec::new();
    let md = admin
        .inner()
        .fetch_metadata(Some(topic), TIMEOUT)
        .with_context(|| format!("cannot fetch metadata of {topic}"))?;
    if let Some(t) = md.topics().first() {
        let rf = t
            .partitions()
            .iter()
            .map(|p| p.replicas().len())
            .min()
            .unwrap_or(0);
        if rf < 3 {
            out.push(Finding {
                topic: topic.into(),
                problem: format!("replication factor {rf} < 3"),
            });
        }
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
