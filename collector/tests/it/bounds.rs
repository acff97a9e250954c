//! Bounds per emitter and per token (docs/operations.md, Ingest bounds): what an honest
//! auditor can send is accepted, the rest is rejected per message with its reason and a
//! counter, or answered 429. SQLite store unless said otherwise.

use crate::support;

use std::time::Duration;

use audit_lib::{AuditMessage, Identity, PartitionProgress, Window};
use store::{Deployment, Inventory, VerdictReads};
use support::*;

fn progress(partitions: &[i32]) -> AuditMessage {
    AuditMessage::progress(
        &Identity::new("regional", "dc1", "h"),
        "orders",
        partitions
            .iter()
            .map(|&partition| PartitionProgress {
                partition,
                next_offset: 1,
                record_time: Some(T0),
                lag: Some(0),
                // None: a report of 10 000 partitions must stay under the producer's 1 MB.
                max_record_time: None,
                log_append_time: false,
            })
            .collect(),
        T0,
    )
}

/// `increment(...)` resized to `[start, start + size)`.
fn sized(start: i64, size: i64, seed: u64) -> AuditMessage {
    let mut m = increment("orders", 0, 5, seed);
    if let audit_lib::AuditBody::Increment(i) = &mut m.body {
        i.window_start = start;
        i.window_end = start + size;
    }
    m
}

fn statuses(json: &serde_json::Value) -> Vec<String> {
    json["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect()
}

fn body(messages: &[AuditMessage]) -> String {
    format!(
        "[{}]",
        messages
            .iter()
            .map(AuditMessage::to_json)
            .collect::<Vec<_>>()
            .join(",")
    )
}

/// A topic's auditor knows its partition count: ids at or above
/// `ingest.max_partitions` are refused per message (progress and offset ranges).
/// Before, any id >= 0 was stored: 10 messages of 10 000 made 100 000 progress rows
/// of one (topic, tier, datacenter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_ids_past_max_partitions_are_rejected_per_message() {
    let dir = tempfile::tempdir().unwrap();
    let (collector, shutdown) = start_collector(http_only_config(&sqlite_in(&dir))).await;
    let addr = collector.http_addr.unwrap();
    let mut far_offsets = increment("orders", 0, 5, 1);
    if let audit_lib::AuditBody::Increment(i) = &mut far_offsets.body {
        i.stats.offsets[0].partition = 10_000;
    }
    let (status, json) = http_post(
        addr,
        body(&[
            progress(&[0, 1, 9_999]),
            progress(&[3, 10_000]),
            far_offsets,
            increment("orders", 0, 5, 2),
        ]),
    )
    .await;
    assert_eq!(status, 200, "{json}");
    assert_eq!(
        statuses(&json),
        ["accepted", "rejected", "rejected", "accepted"],
        "{json}"
    );
    for i in [1, 2] {
        let reason = json["results"][i]["reason"].as_str().unwrap();
        assert!(
            reason.contains("partition 10000") && reason.contains("ingest.max_partitions"),
            "{reason}"
        );
    }
    let kept = collector.store.progress(Some("orders")).await.unwrap();
    assert_eq!(kept.len(), 3);
    let (_, metrics) = http_get(addr, "/metrics").await;
    assert!(
        metrics.contains(r#"kafka_audit_collector_bound_rejects_total{bound="partition"} 2"#),
        "{metrics}"
    );
    stop(&shutdown, collector, Duration::from_secs(10)).await;
}

/// Without `[ingest] window`, the first stored increment fixes the window size: an
/// increment of an hour starting on the hour (security review 2, finding 5: serve
/// learned it as the deployment's size), of a second (the review's unaligned flood)
/// or of 20 minutes is rejected. Only configuration changes it. Before, all three
/// were stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_window_size_is_fixed_at_first_sight_and_changed_only_by_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let config = http_only_config(&sqlite_in(&dir));
    assert_eq!(config.ingest.window, None);
    let (collector, shutdown) = start_collector(config.clone()).await;
    let addr = collector.http_addr.unwrap();
    let (_, json) = http_post(addr, body(&[increment("orders", 0, 5, 1)])).await;
    assert_eq!(statuses(&json), ["accepted"], "{json}");
    assert_eq!(collector.store.window_size_ms().await.unwrap(), Some(W));
    let hour = 3_600_000;
    let next_hour = (T0 / hour + 1) * hour;
    let (_, json) = http_post(
        addr,
        body(&[
            sized(next_hour, hour, 2),
            sized(T0 + 1_000, 1_000, 3),
            sized(T0, 2 * W, 4),
        ]),
    )
    .await;
    assert_eq!(
        statuses(&json),
        ["rejected", "rejected", "rejected"],
        "{json}"
    );
    assert!(
        json["results"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("this deployment's windows are 600000 ms"),
        "{json}"
    );
    let (_, metrics) = http_get(addr, "/metrics").await;
    assert!(
        metrics.contains(r#"kafka_audit_collector_bound_rejects_total{bound="window_size"} 3"#),
        "{metrics}"
    );
    stop(&shutdown, collector, Duration::from_secs(10)).await;

    // Reconfigured auditors: `[ingest] window` changes the recorded size.
    let mut config = config;
    config.ingest.window = Some(Duration::from_secs(3600));
    let (collector, shutdown) = start_collector(config).await;
    let addr = collector.http_addr.unwrap();
    assert_eq!(collector.store.window_size_ms().await.unwrap(), Some(hour));
    let (_, json) = http_post(
        addr,
        body(&[sized(next_hour, hour, 5), increment("orders", 0, 5, 6)]),
    )
    .await;
    assert_eq!(statuses(&json), ["accepted", "rejected"], "{json}");
    stop(&shutdown, collector, Duration::from_secs(10)).await;
}

/// Per-token rates (security review 2, finding 6: none before): requests and
/// messages beyond a token's second's worth are answered 429 with `Retry-After`,
/// counted per token; another token is not held back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_beyond_its_rates_is_answered_429() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.db");
    let config: collector::CollectConfig = toml::from_str(&format!(
        r#"
        [store]
        url = {db:?}
        [http]
        listen = "127.0.0.1:0"
        token_requests_per_second = 2
        token_messages_per_second = 4
        [retention]
        enabled = false
        [[auth.tokens]]
        name = "a"
        token = "a-token-of-at-least-24-bytes-1"
        scopes = ["ingest"]
        [[auth.tokens]]
        name = "b"
        token = "b-token-of-at-least-24-bytes-2"
        scopes = ["ingest"]
        "#
    ))
    .unwrap();
    let (collector, shutdown) = start_collector(config).await;
    let addr = collector.http_addr.unwrap();
    let post = |token: &'static str, n: u64| async move {
        let messages: Vec<AuditMessage> = (0..n).map(|s| increment("orders", 0, 1, s)).collect();
        reqwest::Client::new()
            .post(format!("http://{addr}/api/v1/audit"))
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {token}"))
            .body(body(&messages))
            .send()
            .await
            .unwrap()
    };
    let a = "a-token-of-at-least-24-bytes-1";
    let b = "b-token-of-at-least-24-bytes-2";
    assert_eq!(post(a, 1).await.status(), 200);
    assert_eq!(post(a, 1).await.status(), 200);
    let third = post(a, 1).await;
    assert_eq!(third.status(), 429);
    assert!(third.headers().contains_key("retry-after"));
    assert_eq!(post(b, 4).await.status(), 200, "b has its own budget");
    let over = post(b, 1).await;
    assert_eq!(
        over.status(),
        429,
        "b posted its second's worth of messages"
    );
    let (_, metrics) = http_get(addr, "/metrics").await;
    for token in ["a", "b"] {
        assert!(
            metrics.contains(&format!(
                "kafka_audit_collector_http_throttled_total{{token=\"{token}\"}} 1"
            )),
            "{metrics}"
        );
    }
    stop(&shutdown, collector, Duration::from_secs(10)).await;
}

/// Rejects keep their reason whatever their number, but the excerpts of one request
/// are bounded in total (security review 2, finding 6: 10 000 rejects of 4 KB each
/// were 40 MB a request, kept 30 days); the table is bounded too
/// (`retention.max_rejects`, see below).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_excerpts_of_a_request_are_bounded_in_total() {
    let dir = tempfile::tempdir().unwrap();
    let (collector, shutdown) = start_collector(http_only_config(&sqlite_in(&dir))).await;
    let addr = collector.http_addr.unwrap();
    let junk = format!("{{\"version\":1,\"junk\":\"{}\"}}", "x".repeat(8_000));
    let (status, json) = http_post(addr, format!("[{}]", vec![junk; 100].join(","))).await;
    assert_eq!(status, 200);
    assert_eq!(json["rejected"], 100, "{json}");
    let rejects = collector.store.rejects(1000).await.unwrap();
    assert_eq!(rejects.len(), 100);
    assert!(rejects.iter().all(|r| !r.reason.is_empty()));
    let kept: usize = rejects.iter().map(|r| r.payload.len()).sum();
    assert_eq!(kept, collector::convert::BATCH_EXCERPT_BUDGET, "{kept}");
    stop(&shutdown, collector, Duration::from_secs(10)).await;
}

/// Retention of what emitters send outside time partitions (security review 2,
/// finding 6: never deleted before): progress and emitters not heard from for
/// `retention.progress`, and rejects beyond the newest `retention.max_rejects`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_progress_emitters_and_rejects_are_deleted() {
    for backend in ["sqlite", "postgres"] {
        let dir = tempfile::tempdir().unwrap();
        let pg;
        let url = if backend == "sqlite" {
            sqlite_in(&dir)
        } else {
            pg = testkit::fresh_database("collector_stale").await;
            pg.url().to_string()
        };
        let mut config = http_only_config(&url);
        config.retention.enabled = true;
        config.retention.progress = Duration::from_secs(2);
        config.retention.max_rejects = 3;
        config.retention.interval = Duration::from_secs(1);
        let (collector, shutdown) = start_collector(config).await;
        let addr = collector.http_addr.unwrap();
        let junk = ["{\"version\":1}"; 10].join(",");
        let (_, json) = http_post(addr, format!("[{junk}]")).await;
        assert_eq!(json["rejected"], 10, "{json}");
        let (_, json) = http_post(addr, body(&[progress(&[0, 1, 2])])).await;
        assert_eq!(json["accepted"], 1, "{json}");
        let store = collector.store.clone();
        let forgotten = testkit::wait_until_async(Duration::from_secs(30), || async {
            store.progress(None).await.unwrap().is_empty()
                && store.emitters().await.unwrap().is_empty()
                && store.rejects(100).await.unwrap().len() == 3
        })
        .await;
        assert!(
            forgotten,
            "{backend}: {:?} {:?} {}",
            store.progress(None).await.unwrap(),
            store.emitters().await.unwrap(),
            store.rejects(100).await.unwrap().len()
        );
        let (_, metrics) = http_get(addr, "/metrics").await;
        for table in ["audit_progress", "audit_emitter", "audit_reject"] {
            assert!(
                metrics.contains(&format!(
                    "kafka_audit_collector_retention_deleted_total{{table=\"{table}\"}}"
                )),
                "{backend} {table}: {metrics}"
            );
        }
        stop(&shutdown, collector, Duration::from_secs(10)).await;
    }
}

fn window(start: i64, size: i64) -> Window {
    Window {
        start_ms: start,
        end_ms: start + size,
    }
}

/// The same floods through the audit topic, where anyone with produce rights writes
/// (security review 2, finding 3): unaligned and misaligned windows, progress of
/// partitions up to 100 000, records larger than `batch.max_record_bytes`, and new
/// topic names. Every forged record is a reject with its reason (the new topics are
/// valid and stored); batches are cut at `batch.max_entries`; the source keeps
/// consuming and commits past the flood, and the honest records behind it are stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_through_the_audit_topic_is_rejected_and_the_source_moves_on() {
    let (bootstrap, db, audit_topic, group) = kafka_rig("bounds-flood", 2).await;
    let mut config = support::config(db.url(), &bootstrap, &audit_topic, &group);
    config.ingest.window = Some(Duration::from_secs(600));
    config.batch.max_entries = 12_000;
    config.batch.max_record_bytes = 512 << 10;
    let (collector, shutdown) = start_collector(config).await;
    let identity = Identity::new("producer", "dc1", "forger");
    let mut forged = Vec::new();
    for s in 0..200u64 {
        let stats = increment("orders", 0, 0, s)
            .as_increment()
            .unwrap()
            .stats
            .clone();
        // 1–1.2 s windows inside w0, and 20-minute windows aligned on 20 minutes.
        let size = 1_000 + (s as i64 % 200);
        let unaligned = window((T0 / size + 1 + s as i64) * size, size);
        forged.push(AuditMessage::increment(
            &identity,
            "orders",
            unaligned,
            stats.clone(),
            T0,
        ));
        let misaligned = window(T0 - T0 % (2 * W) + s as i64 * 2 * W, 2 * W);
        forged.push(AuditMessage::increment(
            &identity, "orders", misaligned, stats, T0,
        ));
    }
    // Ten reports of 5 000 partitions each, ids 10 000..60 000: rejected by id. And
    // two of 12 000 partitions (~850 KB, under Kafka's 1 MB): past max_record_bytes,
    // not even parsed.
    for i in 0..10 {
        let first = 10_000 + i * 5_000;
        forged.push(progress(&(first..first + 5_000).collect::<Vec<i32>>()));
    }
    let oversized: Vec<AuditMessage> = (0..2)
        .map(|_| progress(&(0..12_000).collect::<Vec<_>>()))
        .collect();
    // Valid reports of 5 000 partitions: 30 000 entries, batches cut at 12 000.
    let big: Vec<AuditMessage> = (0..6)
        .map(|_| progress(&(0..5_000).collect::<Vec<_>>()))
        .collect();
    // New topic names: valid, stored, and of no consequence to `orders`.
    let new_topics: Vec<AuditMessage> = (0..500u64)
        .map(|s| increment(&format!("forged-{s}"), 0, 1, s))
        .collect();
    let honest: Vec<AuditMessage> = (0..20u64)
        .map(|s| increment("orders", 1, 10, 1_000 + s))
        .collect();
    let producer = producer(&bootstrap);
    let records: Vec<(String, Vec<u8>)> = forged
        .iter()
        .chain(&oversized)
        .chain(&big)
        .chain(&new_topics)
        .map(keyed)
        .collect();
    // Some records are ~900 KB: produce them under the broker's default 1 MB limit.
    produce(&producer, &audit_topic, &records).await;
    let flooded = std::time::Instant::now();
    produce(
        &producer,
        &audit_topic,
        &honest.iter().map(keyed).collect::<Vec<_>>(),
    )
    .await;
    let total = (records.len() + honest.len()) as i64;
    assert!(
        wait_committed(&bootstrap, &group, &audit_topic, 2, total),
        "the source did not commit past the flood"
    );
    let expected = truth(&honest);
    let stored = wait_stored(&collector.store, &["orders".to_string()], &{
        let mut e = expected.clone();
        e.retain(|(t, _), _| t == "orders");
        e
    })
    .await;
    eprintln!(
        "honest records stored {:?} after the flood was produced",
        flooded.elapsed()
    );
    let honest_window = stored.get(&("orders".to_string(), T0 + W));
    assert_eq!(honest_window, expected.get(&("orders".to_string(), T0 + W)));
    assert!(
        stored.keys().all(|(_, w)| (*w - T0) % W == 0),
        "only windows of the deployment's size: {stored:?}"
    );
    let rejects = collector.store.rejects(10_000).await.unwrap();
    assert_eq!(rejects.len(), forged.len() + oversized.len());
    assert!(
        rejects
            .iter()
            .filter(|r| r.reason.contains("batch.max_record_bytes"))
            .count()
            == 2
    );
    let addr = collector.http_addr.unwrap();
    assert_eq!(http_get(addr, "/healthz").await.0, 200);
    let (_, metrics) = http_get(addr, "/metrics").await;
    assert!(
        metrics.contains("kafka_audit_collector_batches_cut_total{source=\"kafka:a\"}"),
        "{metrics}"
    );
    stop(&shutdown, collector, Duration::from_secs(10)).await;
}
