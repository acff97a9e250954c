//! Retention as configured: the collector's retention task deletes windows older
//! than their horizon in batches, and keeps recent ones (UUID retention is covered by
//! the store's conformance suite). SQLite store.

use crate::support;

use std::time::Duration;

use store::{Deployment, Ingest, TimeRange, Upkeep, VerdictReads};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_windows_are_removed_and_recent_ones_kept() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = http_only_config(&sqlite_in(&dir));
    config.retention.enabled = true;
    config.retention.windows = Duration::from_secs(86_400);
    config.retention.messages = Duration::from_secs(86_400);
    config.retention.interval = Duration::from_secs(1);
    config.retention.batch_size = 2; // 3 old windows: two delete batches
    let (collector, shutdown) = start_collector(config).await;
    let addr = collector.http_addr.unwrap();

    // T0 is long before now: these are past retention. `recent` is in the current window.
    let old: Vec<_> = (0..30u64)
        .map(|s| increment("orders", (s % 3) as i64, 10, s))
        .collect();
    let now = common::now_ms();
    let mut recent: serde_json::Value =
        serde_json::from_str(&increment("orders", 0, 5, 99).to_json()).unwrap();
    let start = now - now % W;
    recent["window_start"] = start.into();
    recent["window_end"] = (start + W).into();
    // Past retention, ingest refuses them (the next pass would delete them): each with
    // its reason. They are stored directly, as a store written before would hold them.
    let body = serde_json::Value::Array(
        old.iter()
            .map(|m| serde_json::from_str(&m.to_json()).unwrap())
            .chain([recent.clone()])
            .collect(),
    );
    let (status, json) = http_post(addr, body.to_string()).await;
    assert_eq!(
        (status, json["accepted"].as_u64(), json["rejected"].as_u64()),
        (200, Some(1), Some(30)),
        "{json}"
    );
    assert!(
        json["results"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("older than retention.windows"),
        "{json}"
    );
    collector
        .store
        .write_batch(&store::Batch {
            messages: old.clone(),
            rejects: vec![],
            received_at_ms: now,
        })
        .await
        .unwrap();

    let store = collector.store.clone();
    let everything = TimeRange::new(0, i64::MAX);
    let gone = testkit::wait_until_async(Duration::from_secs(30), || async {
        store
            .topic_windows("orders", everything)
            .await
            .unwrap()
            .len()
            == 1
    })
    .await;
    assert!(gone, "old windows not deleted");
    let rows = store.topic_windows("orders", everything).await.unwrap();
    assert_eq!((rows[0].window_start_ms, rows[0].count), (start, 5));
    let (_, metrics) = http_get(addr, "/metrics").await;
    assert!(
        metrics
            .contains(r#"kafka_audit_collector_retention_deleted_total{table="audit_window"} 3"#),
        "{metrics}"
    );
    // The recent UUID is still known: a resend is a duplicate.
    let (_, json) = http_post(addr, format!("[{recent}]")).await;
    assert_eq!(json["results"][0]["status"], "duplicate", "{json}");
    stop(&shutdown, collector, Duration::from_secs(10)).await;
}

/// PostgreSQL: the collector creates the day partitions a week ahead at start (retention
/// or not) and its retention drops whole days past the cutoff, counting both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_days_are_created_ahead_and_old_days_dropped_whole() {
    const DAY: i64 = 86_400_000;
    let db = testkit::fresh_database("collector_partitions").await;
    let pg = store::PgStore::connect(db.url()).await.unwrap();
    pg.migrate().await.unwrap();
    let now = common::now_ms();
    let today = now - now % DAY;
    // Days the store already had: four days back, with a window in the oldest.
    pg.prepare_partitions(today - 4 * DAY, today).await.unwrap();
    let mut old: serde_json::Value =
        serde_json::from_str(&increment("orders", 0, 5, 1).to_json()).unwrap();
    old["window_start"] = (today - 4 * DAY).into();
    old["window_end"] = (today - 4 * DAY + W).into();
    let old: store::Message = serde_json::from_value(old).unwrap();
    pg.write_batch(&store::Batch {
        messages: vec![old],
        rejects: vec![],
        received_at_ms: now,
    })
    .await
    .unwrap();

    let mut config = http_only_config(db.url());
    config.retention.enabled = true;
    config.retention.windows = Duration::from_secs(2 * 86_400);
    config.retention.messages = Duration::from_secs(2 * 86_400);
    config.retention.interval = Duration::from_secs(1);
    let (collector, shutdown) = start_collector(config).await;
    let addr = collector.http_addr.unwrap();

    let day_name = |day: i64| {
        let pool = pg.pool().clone();
        async move {
            sqlx::query_scalar::<_, String>(
                "SELECT 'audit_window_p' || to_char(to_timestamp($1 / 1000) AT TIME ZONE 'UTC', 'YYYYMMDD')",
            )
            .bind(day)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    let partitions = || async {
        sqlx::query_scalar::<_, String>(
            "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'audit_window'::regclass",
        )
        .fetch_all(pg.pool())
        .await
        .unwrap()
    };
    let ready = testkit::wait_until_async(Duration::from_secs(30), || async {
        let p = partitions().await;
        p.contains(&day_name(today + 7 * DAY).await)
            && !p.contains(&day_name(today - 4 * DAY).await)
    })
    .await;
    let p = partitions().await;
    assert!(ready, "{p:?}");
    for d in -2..=7 {
        assert!(
            p.contains(&day_name(today + d * DAY).await),
            "day {d}: {p:?}"
        );
    }
    assert!(!p.contains(&day_name(today - 3 * DAY).await), "{p:?}");
    let everything = store::TimeRange::new(0, i64::MAX);
    assert!(collector
        .store
        .topic_windows("orders", everything)
        .await
        .unwrap()
        .is_empty());
    let (_, metrics) = http_get(addr, "/metrics").await;
    // four tables × days 2..=7 created (−4..=1 existed); days −4 and −3 dropped
    assert!(
        metrics.contains("kafka_audit_collector_partitions_created_total 24"),
        "{metrics}"
    );
    let dropped = testkit::wait_until_async(Duration::from_secs(10), || async {
        let (_, m) = http_get(addr, "/metrics").await;
        m.contains("kafka_audit_collector_retention_partitions_dropped_total 8")
    })
    .await;
    assert!(dropped, "{metrics}");
    stop(&shutdown, collector, Duration::from_secs(10)).await;
}
