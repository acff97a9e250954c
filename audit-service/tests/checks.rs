//! Start-up checks against the real broker: the audit topic is created when missing
//! (or start fails when creation is off), and weak durability settings are reported.

mod support;

use std::time::Duration;

use audit_service::checks::run_checks;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_audit_topic_is_created_and_weak_durability_is_reported() {
    let bootstrap = testkit::kafka_a();
    let audited = testkit::unique("chk");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .unwrap();
    let nt = NewTopic::new(&audited, 1, TopicReplication::Fixed(1))
        .set("unclean.leader.election.enable", "true");
    for r in admin
        .create_topics(
            [&nt],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .unwrap()
    {
        r.unwrap();
    }
    let audit_topic = testkit::unique("chk-audit");
    let wal = tempfile::tempdir().unwrap();
    let mut cfg = audit_config(
        &bootstrap,
        std::slice::from_ref(&audited),
        &audit_topic,
        "g",
        "i",
        wal.path(),
    );

    cfg.audit.create_audit_topic = false;
    let err = run_checks(&cfg, std::slice::from_ref(&audited))
        .await
        .unwrap_err();
    assert!(err.to_string().contains(&audit_topic), "{err:#}");

    cfg.audit.create_audit_topic = true;
    let findings = run_checks(&cfg, std::slice::from_ref(&audited))
        .await
        .unwrap();
    let md = admin
        .inner()
        .fetch_metadata(Some(&audit_topic), Duration::from_secs(10))
        .unwrap();
    assert_eq!(
        md.topics()[0].partitions().len(),
        3,
        "audit topic created with the configured partitions"
    );
    let about = |t: &str, p: &str| {
        findings
            .iter()
            .any(|f| f.topic == t && f.problem.contains(p))
    };
    assert!(
        about(&audit_topic, "replication factor 1 < 3"),
        "{findings:?}"
    );
    assert!(
        about(&audit_topic, "min.insync.replicas 1 < 2"),
        "{findings:?}"
    );
    assert!(
        about(&audited, "unclean.leader.election.enable=true"),
        "{findings:?}"
    );
    assert!(!about(&audit_topic, "unclean"), "{findings:?}");

    cfg.audit.strict_checks = true;
    let err = run_checks(&cfg, &[]).await.unwrap_err();
    assert!(err.to_string().contains("strict_checks"), "{err:#}");
}
