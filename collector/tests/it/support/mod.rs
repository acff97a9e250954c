//! Helpers of the collector's integration tests (real Kafka and PostgreSQL from
//! deploy/dev, located through testkit).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use audit_lib::{AuditMessage, LatencyHistogram, OffsetSpan};
use collector::config::{
    CollectConfig, HttpConfig, KafkaSourceConfig, RetentionConfig, StoreConfig,
};
use common::KafkaConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use store::{Store, TimeRange, VerdictReads};

// The test producer and the committed-offset readers are testkit's (`committed` is
// the sum over the partitions). Not every test binary that includes this module
// uses them all (kafka-audit's collect_sigkill reads them per partition).
#[allow(unused_imports)]
pub use testkit::{committed_per_partition, committed_total as committed, producer};

pub const W: i64 = 600_000;
pub const T0: i64 = 1_764_410_400_000;

/// An increment of `count` messages of `topic` in window `window` with a checksum and
/// latencies derived from `seed`, so distinct seeds give distinct contributions.
pub fn increment(topic: &str, window: i64, count: u64, seed: u64) -> AuditMessage {
    let mut latency = LatencyHistogram::new();
    latency.record_n(20 + (seed % 200) as i64, count.saturating_sub(1));
    latency.record_n(-5, 1.min(count));
    testkit::increment(topic, T0 + window * W, T0 + (window + 1) * W, count)
        .host(format!("auditor-{}", seed % 3))
        .checksum(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (seed << 7))
        .latency(latency)
        .offsets(vec![OffsetSpan {
            partition: (seed % 4) as i32,
            min: seed as i64,
            max: seed as i64 + count as i64,
            max_record_time: None,
        }])
        .emitted_at(T0 + 10 * W + seed as i64)
        .build()
}

/// Expected (count, checksum, increments) per (topic, window start) of distinct messages.
pub fn truth<'a>(
    messages: impl IntoIterator<Item = &'a AuditMessage>,
) -> BTreeMap<(String, i64), (u64, u64, u64)> {
    let mut t: BTreeMap<(String, i64), (u64, u64, u64)> = BTreeMap::new();
    let mut seen = std::collections::HashSet::new();
    for m in messages {
        if !seen.insert(m.uuid) {
            continue;
        }
        let i = m.as_increment().expect("increments only");
        let e = t.entry((m.topic.clone(), i.window_start)).or_default();
        e.0 += i.stats.count;
        e.1 = e.1.wrapping_add(i.stats.checksum.0);
        e.2 += 1;
    }
    t
}

/// What the store holds, in the shape of [`truth`].
pub async fn stored(store: &Store, topics: &[String]) -> BTreeMap<(String, i64), (u64, u64, u64)> {
    let mut t = BTreeMap::new();
    for topic in topics {
        for row in store
            .topic_windows(topic, TimeRange::new(T0 - 100 * W, T0 + 100 * W))
            .await
            .unwrap()
        {
            assert_eq!(row.tier, "regional");
            t.insert(
                (row.topic, row.window_start_ms),
                (row.count, row.checksum, row.increments),
            );
        }
    }
    t
}

/// Polls the store until it holds `expected` (the roll-up runs behind ingestion) or
/// 60 s pass; returns what it holds last, for the caller's assertion.
pub async fn wait_stored(
    store: &Store,
    topics: &[String],
    expected: &BTreeMap<(String, i64), (u64, u64, u64)>,
) -> BTreeMap<(String, i64), (u64, u64, u64)> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let now = stored(store, topics).await;
        if &now == expected || std::time::Instant::now() >= deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Produces every payload (all in flight at once), waits for every delivery and
/// returns where each landed: (partition, offset).
pub async fn produce(
    producer: &FutureProducer,
    topic: &str,
    payloads: &[(String, Vec<u8>)],
) -> Vec<(i32, i64)> {
    let mut deliveries = Vec::with_capacity(payloads.len());
    for (key, payload) in payloads {
        let record = FutureRecord::to(topic).key(key.as_bytes()).payload(payload);
        let delivery = producer
            .send_result(record)
            .map_err(|(e, _)| e)
            .expect("enqueue record");
        deliveries.push(delivery);
    }
    let mut landed = Vec::with_capacity(deliveries.len());
    for d in deliveries {
        let delivery = d
            .await
            .expect("delivery not cancelled")
            .map_err(|(e, _)| e)
            .expect("delivered");
        landed.push((delivery.partition, delivery.offset));
    }
    landed
}

pub fn keyed(m: &AuditMessage) -> (String, Vec<u8>) {
    (m.topic.clone(), m.to_json().into_bytes())
}

/// A collector config: one Kafka source on `audit_topic`, HTTP on a free port.
pub fn config(store_url: &str, bootstrap: &str, audit_topic: &str, group: &str) -> CollectConfig {
    let mut kafka = KafkaConfig::new(bootstrap);
    // A restarted collector takes its partitions back quickly.
    kafka
        .consumer
        .insert("session.timeout.ms".into(), "6000".into());
    kafka
        .consumer
        .insert("heartbeat.interval.ms".into(), "500".into());
    CollectConfig {
        // Fail fast while the database is down, so the retry path is what waits.
        store: StoreConfig {
            url: store_url.into(),
            acquire_timeout: Duration::from_millis(200),
            ..StoreConfig::default()
        },
        sources: vec![KafkaSourceConfig {
            name: "a".into(),
            topics: vec![audit_topic.into()],
            evidence_topics: Vec::new(),
            group_id: group.into(),
            kafka,
        }],
        http: HttpConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            ..HttpConfig::default()
        },
        batch: collector::config::BatchConfig {
            max_messages: 500,
            max_wait: Duration::from_millis(50),
            ..Default::default()
        },
        retry: collector::config::RetryConfig {
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(500),
        },
        retention: RetentionConfig {
            enabled: false,
            ..RetentionConfig::default()
        },
        auth: Default::default(),
        ingest: Default::default(),
        log: common::LogConfig::default(),
    }
}

/// What a Kafka-sourced collector test runs against, all named after `stem`:
/// (cluster A's bootstrap, a fresh database, a new audit topic of `partitions`
/// partitions, a new consumer group).
pub async fn kafka_rig(
    stem: &str,
    partitions: i32,
) -> (String, testkit::TestDatabase, String, String) {
    let bootstrap = testkit::kafka_a();
    let db = testkit::fresh_database(&format!("collector_{}", stem.replace('-', "_"))).await;
    let audit_topic =
        testkit::create_unique_topic(&bootstrap, &format!("audit-{stem}"), partitions).await;
    let group = testkit::unique(&format!("collector-{stem}"));
    (bootstrap, db, audit_topic, group)
}

/// Starts a collector on `config`; cancel the token to stop it.
pub async fn start_collector(
    config: CollectConfig,
) -> (collector::Collector, tokio_util::sync::CancellationToken) {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let collector = collector::start(config, shutdown.clone())
        .await
        .expect("start collector");
    (collector, shutdown)
}

/// A collector config with HTTP ingest only (no Kafka source), storing to `store_url`.
pub fn http_only_config(store_url: &str) -> CollectConfig {
    let mut config = config(store_url, "unused:1", "unused", "g");
    config.sources.clear();
    config
}

/// The URL of a SQLite database file in `dir`.
pub fn sqlite_in(dir: &tempfile::TempDir) -> String {
    dir.path().join("audit.db").to_str().unwrap().to_string()
}

/// Cancels the collector and waits (at most `within`) for it to stop cleanly.
pub async fn stop(
    shutdown: &tokio_util::sync::CancellationToken,
    collector: collector::Collector,
    within: Duration,
) {
    shutdown.cancel();
    tokio::time::timeout(within, collector.wait())
        .await
        .expect("clean shutdown")
        .unwrap();
}

/// Waits (at most 60 s) until `group` has committed `n` records of `topic` in total.
pub fn wait_committed(bootstrap: &str, group: &str, topic: &str, partitions: i32, n: i64) -> bool {
    testkit::wait_until(Duration::from_secs(60), || {
        committed(bootstrap, group, topic, partitions) == n
    })
}

pub async fn http_post(
    addr: SocketAddr,
    body: impl Into<reqwest::Body>,
) -> (u16, serde_json::Value) {
    let response = reqwest::Client::new()
        .post(format!("http://{addr}/api/v1/audit"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("POST /api/v1/audit");
    let status = response.status().as_u16();
    let json = response.json().await.expect("JSON answer");
    (status, json)
}

pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let response = reqwest::get(format!("http://{addr}{path}"))
        .await
        .expect("GET");
    (
        response.status().as_u16(),
        response.text().await.expect("body"),
    )
}
