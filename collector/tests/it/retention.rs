//! Retention as configured: the collector's retention task deletes windows older
//! than their horizon in batches, and keeps recent ones (UUID retention is covered by
//! the store's conformance suite). SQLite store.

use crate::support;

use std::time::Duration;

use store::{AuditStore, TimeRange};
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
    let body = serde_json::Value::Array(
        old.iter()
            .map(|m| serde_json::from_str(&m.to_json()).unwrap())
            .chain([recent.clone()])
            .collect(),
    );
    let (status, json) = http_post(addr, body.to_string()).await;
    assert_eq!(
        (status, json["accepted"].as_u64()),
        (200, Some(31)),
        "{json}"
    );

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
