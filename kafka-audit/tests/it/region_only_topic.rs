//! Issue 14, B2 on real brokers: topology `{dc1 = "agg", dc2 = "agg"}`, a topic that
//! exists only in dc1 (cluster A) and is replicated to the aggregate cluster (cluster
//! B) with 5 % of one window dropped. The dc2 auditor knows nothing of the topic. Real
//! auditors on both clusters, the collector into PostgreSQL, and the evaluator: the
//! loss is reported exactly in its window, and no other window is an anomaly. Before
//! the fix every window waited for dc2 (pending, then stalled), and the loss was never
//! reported.

use crate::e2e;
use crate::support;

use std::time::Duration;

use rdkafka::producer::{BaseRecord, Producer};
use store::AuditStore;
use support::*;
use tokio_util::sync::CancellationToken;
use web::engine::{Lifecycle, Verdict};

const PARTITIONS: i32 = 3;
const MESSAGES: u64 = 3000;
const WINDOWS: i64 = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn topic_of_one_upstream_datacenter_reports_its_loss() {
    let _alone = crate::ALONE.lock().await;
    let (a, b) = (testkit::kafka_a(), testkit::kafka_b());
    let topic = testkit::unique("payments-eu");
    testkit::create_topic(&a, &topic, PARTITIONS).await;
    testkit::create_topic(&b, &topic, PARTITIONS).await;
    let audit_a = testkit::create_unique_topic(&a, "region-only-audit", 3).await;
    let audit_b = testkit::create_unique_topic(&b, "region-only-audit", 3).await;

    // dc1 gets every message; the aggregate cluster every one but 5 % of window 2.
    let base = base_time();
    let pa = producer(&a);
    let pb = producer(&b);
    let mut truth = Totals::new();
    produce_known(
        &pa, &topic, PARTITIONS, MESSAGES, 0, base, WINDOWS, &mut truth,
    );
    let lossy = base + 2 * WINDOW_MS;
    let in_lossy = truth[&(topic.clone(), lossy)].count;
    let drop_n = in_lossy / 20;
    let mut dropped = 0;
    for i in 0..MESSAGES {
        let (key, value, window) = known_message(i, base, WINDOWS);
        if window == lossy && dropped < drop_n {
            dropped += 1;
            continue;
        }
        let mut rec = BaseRecord::to(&topic)
            .key(&key)
            .payload(&value)
            .partition((i % PARTITIONS as u64) as i32);
        loop {
            match pb.send(rec) {
                Ok(()) => break,
                Err((_, r)) => {
                    rec = r;
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        }
    }
    pb.flush(Duration::from_secs(60))
        .expect("flush to cluster B");

    // The auditors of regional/dc1 (cluster A) and aggregate/agg (cluster B).
    let stop = CancellationToken::new();
    let wal_a = tempfile::tempdir().unwrap();
    let wal_b = tempfile::tempdir().unwrap();
    let mut cfg_a = audit_config(
        &a,
        std::slice::from_ref(&topic),
        &audit_a,
        &testkit::unique("region-only-dc1"),
        "regional-dc1-0",
        wal_a.path(),
    );
    cfg_a.audit.tier = "regional".into();
    cfg_a.audit.datacenter = "dc1".into();
    let mut cfg_b = audit_config(
        &b,
        std::slice::from_ref(&topic),
        &audit_b,
        &testkit::unique("region-only-agg"),
        "aggregate-agg-0",
        wal_b.path(),
    );
    cfg_b.audit.tier = "aggregate".into();
    cfg_b.audit.datacenter = "agg".into();
    let auditors = [
        tokio::spawn(audit_service::run(cfg_a, stop.clone())),
        tokio::spawn(audit_service::run(cfg_b, stop.clone())),
    ];

    let db = testkit::fresh_database("region_only").await;
    let store = store::Store::connect(db.url()).await.expect("connect");
    store.migrate().await.expect("migrate");
    let collector = tokio::spawn(collector::run(
        e2e::collect_config(db.url(), &[("a", &a, &audit_a), ("b", &b, &audit_b)], 500),
        stop.clone(),
    ));

    let config: web::Config = toml::from_str(
        r#"
[topology]
window = "10s"
grace = "5s"
stall_after = "30m"
tiers = [{ name = "regional" }, { name = "aggregate" }]
[[topology.edges]]
upstream = "regional"
downstream = "aggregate"
datacenters = { dc1 = "agg", dc2 = "agg" }
"#,
    )
    .expect("serve config parses");
    let state = web::AppState::new(config, store).expect("state");
    let windows: Vec<i64> = (0..WINDOWS).map(|i| base + i * WINDOW_MS).collect();
    let all_final = e2e::wait_final(
        &state,
        &topic,
        (windows[0], windows[windows.len() - 1] + 1),
        &[("regional", MESSAGES), ("aggregate", MESSAGES - drop_n)],
        true,
        Duration::from_secs(180),
    )
    .await;
    let anomalies: Vec<_> = state
        .index
        .read()
        .unwrap()
        .in_range(windows[0], windows[windows.len() - 1] + 1)
        .filter(|e| e.topic == topic)
        .map(|e| {
            (
                e.window_start,
                e.verdict,
                e.lifecycle,
                e.expected,
                e.observed,
                e.reason.clone(),
            )
        })
        .collect();
    // Stop the services before asserting: a failed assertion must fail the test, not
    // leave it waiting on their threads.
    eprintln!("all final: {all_final}; stopping the services");
    stop.cancel();
    for a in auditors {
        a.await.expect("auditor task").expect("auditor result");
    }
    collector
        .await
        .expect("collector task")
        .expect("collector result");
    assert!(
        all_final,
        "windows not all final with all counts in: {anomalies:#?}"
    );
    let in_lossy = truth[&(topic.clone(), lossy)].count;
    assert_eq!(
        anomalies,
        vec![(
            lossy,
            Verdict::Loss,
            Lifecycle::Final,
            in_lossy,
            in_lossy - drop_n,
            format!("{drop_n} of {in_lossy} messages missing")
        )]
    );
}
