//! A region-specific topic on a many-to-one edge (docs/web.md, Verdicts, rule 3), on
//! real brokers: topology `{dc1 = "agg", dc2 = "agg"}`, a topic that exists only in dc1
//! (cluster A) and is replicated to the aggregate cluster (cluster B) with 5 % of one
//! window dropped. The dc2 auditor knows nothing of the topic. Real auditors on both
//! clusters, the collector into PostgreSQL, and the evaluator: the loss is reported
//! exactly in its window, and no other window is an anomaly. Before the fix every
//! window waited for dc2 (pending, then stalled), and the loss was never reported. The
//! second test has all three datacenters on real clusters (the aggregate one a private
//! cluster it starts): the region-only topic's loss exactly, and a topic of both
//! datacenters ok.

use crate::e2e;
use crate::support;

use std::time::Duration;

use rdkafka::producer::{BaseRecord, Producer};
use store::Deployment;
use support::*;
use tokio_util::sync::CancellationToken;
use web::engine::{Lifecycle, Verdict};

const PARTITIONS: i32 = 3;
const MESSAGES: u64 = 3000;
const WINDOWS: i64 = 6;

/// serve's config without jobs or alerting: tiers regional and aggregate, datacenters
/// dc1 and dc2 both rolled up into agg.
fn two_datacenters() -> web::Config {
    toml::from_str(
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
    .expect("serve config parses")
}

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
    produce_dropping(&pb, &topic, 0, MESSAGES, base, lossy, drop_n);

    // The auditors of regional/dc1 (cluster A) and aggregate/agg (cluster B).
    let stop = CancellationToken::new();
    let wal_a = tempfile::tempdir().unwrap();
    let wal_b = tempfile::tempdir().unwrap();
    let cfg_a = e2e::tier_config(&a, &topic, &audit_a, "regional", "dc1", wal_a.path());
    let cfg_b = e2e::tier_config(&b, &topic, &audit_b, "aggregate", "agg", wal_b.path());
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

    let state = web::AppState::new(two_datacenters(), store).expect("state");
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

/// Sends messages `seq0..seq0 + n` of the known data set to `topic`, leaving out the
/// first `drop_n` of window `lossy`.
#[allow(clippy::too_many_arguments)]
fn produce_dropping(
    p: &rdkafka::producer::ThreadedProducer<rdkafka::producer::DefaultProducerContext>,
    topic: &str,
    seq0: u64,
    n: u64,
    base: i64,
    lossy: i64,
    drop_n: u64,
) {
    let mut dropped = 0;
    for i in seq0..seq0 + n {
        let (key, value, window) = known_message(i, base, WINDOWS);
        if window == lossy && dropped < drop_n {
            dropped += 1;
            continue;
        }
        send_queued(
            p,
            BaseRecord::to(topic)
                .key(&key)
                .payload(&value)
                .partition((i % PARTITIONS as u64) as i32),
        );
    }
    p.flush(Duration::from_secs(60)).expect("flush");
}

/// The whole bullet on three real clusters: dc1 (cluster A) and dc2 (cluster B) feed
/// the aggregate cluster (a private one started by this test). `only` exists in dc1
/// alone and loses 5 % of one window on the way: that loss, exactly, and nothing else.
/// `both` is produced in both datacenters (different messages) and arrives whole at
/// the aggregate: ok in every window, its expected count the sum of the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn region_only_and_two_region_topics_on_three_clusters() {
    let _alone = crate::ALONE.lock().await;
    let agg = tokio::task::block_in_place(PrivateKafka::start);
    let (a, b, p) = (testkit::kafka_a(), testkit::kafka_b(), agg.bootstrap());
    let only = testkit::unique("only-dc1");
    let both = testkit::unique("both-dcs");
    for (cluster, topics) in [
        (&a, vec![&only, &both]),
        (&b, vec![&both]),
        (&p, vec![&only, &both]),
    ] {
        for t in topics {
            testkit::create_topic(cluster, t, PARTITIONS).await;
        }
    }
    let audit = [
        testkit::create_unique_topic(&a, "three-audit", 3).await,
        testkit::create_unique_topic(&b, "three-audit", 3).await,
        testkit::create_unique_topic(&p, "three-audit", 3).await,
    ];

    let base = base_time();
    let lossy = base + 2 * WINDOW_MS;
    let mut truth = Totals::new();
    let (pa, pb, pp) = (producer(&a), producer(&b), producer(&p));
    produce_known(
        &pa, &only, PARTITIONS, MESSAGES, 0, base, WINDOWS, &mut truth,
    );
    produce_known(
        &pa, &both, PARTITIONS, MESSAGES, 0, base, WINDOWS, &mut truth,
    );
    produce_known(
        &pb, &both, PARTITIONS, MESSAGES, MESSAGES, base, WINDOWS, &mut truth,
    );
    let in_lossy = truth[&(only.clone(), lossy)].count;
    let drop_n = in_lossy / 20;
    produce_dropping(&pp, &only, 0, MESSAGES, base, lossy, drop_n);
    produce_dropping(&pp, &both, 0, 2 * MESSAGES, base, lossy, 0);
    pa.flush(Duration::from_secs(60)).expect("flush");
    pb.flush(Duration::from_secs(60)).expect("flush");

    let stop = CancellationToken::new();
    let _stop_on_drop = stop.clone().drop_guard();
    let wals = [(); 3].map(|_| tempfile::tempdir().unwrap());
    let auditor = |bootstrap: &str, topics: &[&String], audit: &str, tier: &str, dc: &str, wal| {
        let mut cfg = e2e::tier_config(bootstrap, topics[0], audit, tier, dc, wal);
        cfg.audit.topics = topics.iter().map(|t| t.to_string()).collect();
        tokio::spawn(audit_service::run(cfg, stop.clone()))
    };
    let auditors = [
        auditor(
            &a,
            &[&only, &both],
            &audit[0],
            "regional",
            "dc1",
            wals[0].path(),
        ),
        auditor(&b, &[&both], &audit[1], "regional", "dc2", wals[1].path()),
        auditor(
            &p,
            &[&only, &both],
            &audit[2],
            "aggregate",
            "agg",
            wals[2].path(),
        ),
    ];
    let db = testkit::fresh_database("three_clusters").await;
    let store = store::Store::connect(db.url()).await.expect("connect");
    store.migrate().await.expect("migrate");
    let collector = tokio::spawn(collector::run(
        e2e::collect_config(
            db.url(),
            &[
                ("a", &a, &audit[0]),
                ("b", &b, &audit[1]),
                ("p", &p, &audit[2]),
            ],
            500,
        ),
        stop.clone(),
    ));
    let state = web::AppState::new(two_datacenters(), store).expect("state");
    let (from, to) = (base, base + WINDOWS * WINDOW_MS);
    let mut all_final = true;
    for (topic, up, down) in [
        (&only, MESSAGES, MESSAGES - drop_n),
        (&both, 2 * MESSAGES, 2 * MESSAGES),
    ] {
        all_final &= e2e::wait_final(
            &state,
            topic,
            (from, to),
            &[("regional", up), ("aggregate", down)],
            true,
            Duration::from_secs(180),
        )
        .await;
    }
    let judged = |topic: &str| e2e::anomalies(&state, topic, from, to);
    let (judged_only, judged_both) = (judged(&only), judged(&both));
    stop.cancel();
    for t in auditors {
        t.await.expect("auditor task").expect("auditor result");
    }
    collector
        .await
        .expect("collector task")
        .expect("collector result");
    drop(agg);

    assert!(
        all_final,
        "windows not all final with all counts in: only {judged_only:?}, both {judged_both:?}"
    );
    assert_eq!(
        judged_only,
        vec![(
            lossy,
            Verdict::Loss,
            Lifecycle::Final,
            in_lossy,
            in_lossy - drop_n
        )]
    );
    assert_eq!(judged_both, vec![], "the topic of both datacenters");
}
