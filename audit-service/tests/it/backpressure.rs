//! When the audit topic cannot be written, reports wait in the WAL up to its disk
//! limit, then consumption pauses; once the topic accepts them again everything is
//! published and the counts are exact: nothing dropped.

use crate::support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use support::*;

const PARTITIONS: i32 = 4;

fn scrape(port: u16) -> HashMap<String, f64> {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return HashMap::new();
    };
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body.lines()
        .filter(|l| l.starts_with("kafka_audit_"))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

fn metric(port: u16, name: &str) -> f64 {
    scrape(port).get(name).copied().unwrap_or(-1.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unwritable_audit_topic_fills_the_wal_then_pauses_and_nothing_is_lost() {
    init_tracing();
    let bootstrap = testkit::kafka_a();
    let topic = testkit::create_unique_topic(&bootstrap, "bp", PARTITIONS).await;
    let audit_topic = testkit::unique("bp-audit");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .unwrap();
    // Every audit message is too large for this topic: publication fails.
    testkit::create_topic_with_config(&bootstrap, &audit_topic, 3, &[("max.message.bytes", "100")])
        .await;
    let group = testkit::unique("bp-group");
    let wal = tempfile::tempdir().unwrap();
    let mut cfg = audit_config(
        &bootstrap,
        std::slice::from_ref(&topic),
        &audit_topic,
        &group,
        &testkit::unique("bp"),
        wal.path(),
    );
    cfg.audit.wal_max_bytes = 20_000;
    cfg.audit.publish_timeout = Duration::from_secs(5);
    enable_ops(&mut cfg);

    let base = base_time();
    let p = producer(&bootstrap);
    let mut truth = Totals::new();
    let svc = start_service(cfg).await;
    let port = svc.ops_port();
    let mut seq = 0;
    let paused = tokio::task::block_in_place(|| {
        testkit::wait_until(Duration::from_secs(90), || {
            produce_known(&p, &topic, PARTITIONS, 200, seq, base, 3, &mut truth);
            seq += 200;
            metric(port, "kafka_audit_paused") == 1.0
        })
    });
    assert!(paused, "consumption never paused: {:?}", scrape(port));
    let m = scrape(port);
    assert!(m["kafka_audit_wal_pending_bytes"] > 20_000.0, "{m:?}");
    assert_eq!(
        m.get("kafka_audit_published_entries_total")
            .copied()
            .unwrap_or(0.0),
        0.0
    );
    // While paused nothing more is consumed, however much is written.
    let consumed = metric(port, "kafka_audit_consumed_messages_total");
    produce_known(&p, &topic, PARTITIONS, 2_000, seq, base, 3, &mut truth);
    seq += 2_000;
    let observe_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < observe_until {
        assert_eq!(
            metric(port, "kafka_audit_consumed_messages_total"),
            consumed,
            "consumed while paused"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        committed_total(&bootstrap, &group, &topic, PARTITIONS),
        0,
        "nothing committed while unpublished"
    );

    // The audit topic becomes writable: the backlog is published, consumption resumes.
    let mut alter = AlterConfig::new(ResourceSpecifier::Topic(&audit_topic));
    alter.entries.insert("max.message.bytes", "1048588");
    for r in admin
        .alter_configs([&alter], &AdminOptions::new())
        .await
        .unwrap()
    {
        r.unwrap();
    }
    let mut reader = AuditReader::new(&bootstrap, &audit_topic, 3);
    let total = seq;
    let ok = tokio::task::block_in_place(|| {
        reader.wait_for_count(&topic, total, Duration::from_secs(120))
    });
    assert!(
        ok,
        "{} of {total} counted after recovery",
        reader.total_count(&topic)
    );
    assert!(tokio::task::block_in_place(|| testkit::wait_until(
        Duration::from_secs(30),
        || metric(port, "kafka_audit_paused") == 0.0
    )));
    svc.stop().await;
    assert_windows_exact(&mut reader, &truth, &topic, Duration::from_secs(2));
}
