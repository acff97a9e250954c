//! Exactly once into the store from real Kafka (cluster A of deploy/dev) and HTTP,
//! into a fresh PostgreSQL database per test.

use crate::support;

use std::time::Duration;

use store::{Inventory, Store, VerdictReads};
use support::*;

const PARTITIONS: i32 = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_delivered_twice_over_kafka_and_once_over_http_is_stored_once() {
    let (bootstrap, db, audit_topic, group) = kafka_rig("dedup", PARTITIONS).await;
    let (collector, shutdown) =
        start_collector(config(db.url(), &bootstrap, &audit_topic, &group)).await;
    let addr = collector.http_addr.unwrap();

    let twice = increment("orders", 0, 1000, 11);
    let sentinel = increment("payments", 0, 7, 12);
    // Over HTTP first: accepted.
    let body = format!("[{}]", twice.to_json());
    let (status, json) = http_post(addr, body.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(json["results"][0]["status"], "accepted", "{json}");
    // Then twice over Kafka (different partitions, so no ordering helps), plus a sentinel.
    let producer = producer(&bootstrap);
    produce(
        &producer,
        &audit_topic,
        &[("k1".into(), twice.to_json().into_bytes())],
    )
    .await;
    produce(
        &producer,
        &audit_topic,
        &[
            ("other-key".into(), twice.to_json().into_bytes()),
            keyed(&sentinel),
        ],
    )
    .await;

    // Drained: every record's offset committed, which happens after its batch is stored.
    assert!(
        wait_committed(&bootstrap, &group, &audit_topic, PARTITIONS, 3),
        "collector did not commit all 3 records"
    );
    let store = Store::connect(db.url()).await.unwrap();
    let topics = vec!["orders".to_string(), "payments".to_string()];
    let expected = truth([&twice, &sentinel]);
    assert_eq!(wait_stored(&store, &topics, &expected).await, expected);
    let rows = store
        .topic_windows("orders", store::TimeRange::new(T0, T0 + W))
        .await
        .unwrap();
    assert_eq!((rows[0].count, rows[0].increments), (1000, 1));
    // And once more over HTTP, now a duplicate.
    let (_, json) = http_post(addr, body).await;
    assert_eq!(json["results"][0]["status"], "duplicate", "{json}");
    assert_eq!(stored(&store, &topics).await, truth([&twice, &sentinel]));

    let (_, metrics) = http_get(addr, "/metrics").await;
    assert!(
        metrics.contains(
            r#"kafka_audit_collector_messages_total{source="kafka:a",outcome="Duplicate"} 2"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"kafka_audit_collector_messages_total{source="kafka:a",outcome="Accepted"} 1"#
        ),
        "{metrics}"
    );
    stop(&shutdown, collector, Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advances_offset_past_poison_records_and_keeps_their_reason() {
    let (bootstrap, db, audit_topic, group) = kafka_rig("poison", 1).await;
    let good = increment("orders", 1, 42, 21);
    let mut future = serde_json::to_value(increment("orders", 1, 5, 22)).unwrap();
    future["version"] = 2.into();
    let mut huge = serde_json::to_value(increment("orders", 1, 5, 23)).unwrap();
    huge["count"] = serde_json::json!(u64::MAX);
    huge["bytes"] = serde_json::json!(1);
    let poison: Vec<(String, Vec<u8>)> = vec![
        ("p".into(), b"\x00\xffnot json at all".to_vec()),
        ("p".into(), future.to_string().into_bytes()),
        ("p".into(), huge.to_string().into_bytes()),
        ("p".into(), Vec::new()),
    ];
    let producer = producer(&bootstrap);
    produce(&producer, &audit_topic, &poison).await;
    produce(&producer, &audit_topic, &[keyed(&good)]).await;

    let (collector, shutdown) =
        start_collector(config(db.url(), &bootstrap, &audit_topic, &group)).await;
    assert!(
        wait_committed(&bootstrap, &group, &audit_topic, 1, 5),
        "poison must not block the topic: offsets not committed past it"
    );
    let store = Store::connect(db.url()).await.unwrap();
    let expected = truth([&good]);
    assert_eq!(
        wait_stored(&store, &["orders".to_string()], &expected).await,
        expected
    );
    let rejects = store.rejects(10).await.unwrap();
    assert_eq!(rejects.len(), 4);
    let reasons: Vec<&str> = rejects.iter().map(|r| r.reason.as_str()).collect();
    assert!(
        reasons.iter().any(|r| r.contains("version 2")),
        "{reasons:?}"
    );
    assert!(reasons.iter().any(|r| r.contains("exceeds")), "{reasons:?}");
    assert!(
        rejects
            .iter()
            .all(|r| r.source.starts_with(&format!("kafka:a/{audit_topic}/0@"))),
        "{rejects:?}"
    );
    let (_, metrics) = http_get(collector.http_addr.unwrap(), "/metrics").await;
    assert!(
        metrics.contains(
            r#"kafka_audit_collector_messages_total{source="kafka:a",outcome="Rejected"} 4"#
        ),
        "{metrics}"
    );
    stop(&shutdown, collector, Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_messages_on_two_clusters_are_stored_once() {
    let (a, b) = (testkit::kafka_a(), testkit::kafka_b());
    let db = testkit::fresh_database("collector_two_clusters").await;
    let topic_a = testkit::create_unique_topic(&a, "audit-two-a", PARTITIONS).await;
    let topic_b = testkit::create_unique_topic(&b, "audit-two-b", PARTITIONS).await;
    let group = testkit::unique("collector-two");
    let mut config = config(db.url(), &a, &topic_a, &group);
    let mut source_b = config.sources[0].clone();
    source_b.name = "b".into();
    source_b.topics = vec![topic_b.clone()];
    source_b.kafka.bootstrap_servers = b.clone();
    config.sources.push(source_b);

    // 300 messages, each on both clusters (as when an emitter fails over), and 100
    // more on one cluster only.
    let shared: Vec<_> = (0..300u64)
        .map(|s| increment("orders", (s % 3) as i64, 1 + s, 1000 + s))
        .collect();
    let only_b: Vec<_> = (0..100u64)
        .map(|s| increment("orders", 0, 5, 5000 + s))
        .collect();
    let (collector, shutdown) = start_collector(config).await;
    let records: Vec<_> = shared.iter().map(keyed).collect();
    let mut records_b = records.clone();
    records_b.extend(only_b.iter().map(keyed));
    let (pa, pb) = (producer(&a), producer(&b));
    tokio::join!(
        produce(&pa, &topic_a, &records),
        produce(&pb, &topic_b, &records_b)
    );

    assert!(
        testkit::wait_until(Duration::from_secs(60), || {
            committed(&a, &group, &topic_a, PARTITIONS) == 300
                && committed(&b, &group, &topic_b, PARTITIONS) == 400
        }),
        "both sources drained"
    );
    let store = Store::connect(db.url()).await.unwrap();
    let expected = truth(shared.iter().chain(&only_b));
    assert_eq!(
        wait_stored(&store, &["orders".to_string()], &expected).await,
        expected
    );
    let (_, metrics) = http_get(collector.http_addr.unwrap(), "/metrics").await;
    let accepted = |source: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!(r#"kafka_audit_collector_messages_total{{source="{source}",outcome="Accepted"}}"#)))
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert_eq!(accepted("kafka:a") + accepted("kafka:b"), 400, "{metrics}");
    stop(&shutdown, collector, Duration::from_secs(30)).await;
}
