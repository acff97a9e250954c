//! HTTP ingest against the real service on a bound port, SQLite store (the embedded
//! default), no Kafka source.

use crate::support;

use std::time::Duration;

use store::{Inventory, TimeRange, VerdictReads};
use support::*;
use tokio_util::sync::CancellationToken;

async fn start_http_only(dir: &tempfile::TempDir) -> (collector::Collector, CancellationToken) {
    let mut config = http_only_config(&sqlite_in(dir));
    config.http.max_body_bytes = 64 * 1024;
    config.http.max_messages = 50;
    start_collector(config).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_accepted_duplicate_or_rejected_per_message() {
    let dir = tempfile::tempdir().unwrap();
    let (collector, shutdown) = start_http_only(&dir).await;
    let addr = collector.http_addr.unwrap();
    let a = increment("orders", 0, 100, 1);
    let b = increment("orders", 0, 50, 2);
    let mut bad_counts: serde_json::Value =
        serde_json::from_str(&increment("orders", 0, 5, 3).to_json()).unwrap();
    bad_counts["no_time_count"] = 6.into();
    let mut future_version: serde_json::Value =
        serde_json::from_str(&increment("orders", 0, 5, 4).to_json()).unwrap();
    future_version["version"] = 9.into();
    future_version["uuid"] = "6a4b7f0e-0000-4000-8000-000000000001".into();
    let body = serde_json::json!([
        serde_json::from_str::<serde_json::Value>(&a.to_json()).unwrap(),
        serde_json::from_str::<serde_json::Value>(&a.to_json()).unwrap(),
        future_version,
        bad_counts,
        serde_json::from_str::<serde_json::Value>(&b.to_json()).unwrap(),
    ]);
    let (status, json) = http_post(addr, body.to_string()).await;
    assert_eq!(status, 200, "{json}");
    let statuses: Vec<&str> = json["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        ["accepted", "duplicate", "rejected", "rejected", "accepted"]
    );
    assert!(
        json["results"][2]["reason"]
            .as_str()
            .unwrap()
            .contains("version 9"),
        "{json}"
    );
    assert_eq!(
        json["results"][2]["uuid"],
        "6a4b7f0e-0000-4000-8000-000000000001"
    );
    assert!(
        json["results"][3]["reason"]
            .as_str()
            .unwrap()
            .contains("exceeds count"),
        "{json}"
    );
    assert_eq!(
        (
            json["accepted"].as_u64(),
            json["duplicate"].as_u64(),
            json["rejected"].as_u64()
        ),
        (Some(2), Some(1), Some(2))
    );

    // A resend of the whole array changes nothing.
    let (_, again) = http_post(addr, body.to_string()).await;
    assert_eq!(
        (again["accepted"].as_u64(), again["duplicate"].as_u64()),
        (Some(0), Some(3))
    );

    let rows = collector
        .store
        .topic_windows("orders", TimeRange::new(T0, T0 + W))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].count, 150);
    assert_eq!(
        rows[0].checksum,
        a.as_increment()
            .unwrap()
            .stats
            .checksum
            .0
            .wrapping_add(b.as_increment().unwrap().stats.checksum.0)
    );
    let rejects = collector.store.rejects(10).await.unwrap();
    assert_eq!(rejects.len(), 4, "two rejects per array, kept with reasons");
    assert!(rejects
        .iter()
        .any(|r| r.reason.contains("version 9") && r.source == "http[2]"));

    let (status, metrics) = http_get(addr, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains(
            r#"kafka_audit_collector_messages_total{source="http",outcome="Accepted"} 2"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"kafka_audit_collector_messages_total{source="http",outcome="Duplicate"} 4"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"kafka_audit_collector_messages_total{source="http",outcome="Rejected"} 4"#
        ),
        "{metrics}"
    );
    assert_eq!(http_get(addr, "/healthz").await.0, 200);

    stop(&shutdown, collector, Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_bad_bodies_with_json_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (collector, shutdown) = start_http_only(&dir).await;
    let addr = collector.http_addr.unwrap();

    // The error shape of every `/api/v1` answer (web's too, `common::ApiError`):
    // `{"error": {"status": <the HTTP status>, "message": "..."}}` and nothing else.
    let error_message = |status: u16, json: &serde_json::Value| -> String {
        assert_eq!(json["error"]["status"], status, "{json}");
        assert_eq!(json.as_object().unwrap().len(), 1, "{json}");
        assert_eq!(json["error"].as_object().unwrap().len(), 2, "{json}");
        json["error"]["message"].as_str().unwrap().to_string()
    };
    let (status, json) = http_post(addr, r#"{"not": "an array"}"#).await;
    assert_eq!(status, 400);
    assert!(error_message(400, &json).contains("JSON array"), "{json}");

    let (status, json) = http_post(addr, "[1, 2").await;
    assert_eq!(status, 400, "{json}");
    error_message(400, &json);

    let big = format!("[{}]", vec!["0"; 40_000].join(","));
    let (status, json) = http_post(addr, big).await;
    assert_eq!(status, 413, "{json}");
    assert!(error_message(413, &json).contains("larger than"), "{json}");

    let many = serde_json::Value::Array(
        (0..51)
            .map(|i| serde_json::from_str(&increment("t", 0, 1, i).to_json()).unwrap())
            .collect(),
    );
    let (status, json) = http_post(addr, many.to_string()).await;
    assert_eq!(status, 413, "{json}");
    assert!(error_message(413, &json).contains("at most 50"), "{json}");
    assert!(
        collector.store.list_topics().await.unwrap().is_empty(),
        "nothing stored from refused requests"
    );

    stop(&shutdown, collector, Duration::from_secs(10)).await;
}

/// Slowloris on ingest: half a request line and silence is cut off after
/// `http.header_read_timeout`; a body that stops halfway is answered 408 after
/// `http.request_timeout` instead of holding the connection forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_heads_and_bodies_are_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let mut config = http_only_config(&sqlite_in(&dir));
    config.http.header_read_timeout = Duration::from_millis(500);
    config.http.request_timeout = Duration::from_secs(1);
    let (collector, shutdown) = start_collector(config).await;
    let addr = collector.http_addr.unwrap();
    let closed = common::server::testing::stalled_header_closed_after(addr).await;
    assert!(closed.is_some(), "a stalled head kept the connection 20 s");

    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        b"POST /api/v1/audit HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          Content-Length: 1000\r\n\r\n[{\"version\":",
    )
    .await
    .unwrap();
    let mut reply = String::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_string(&mut reply))
        .await
        .expect("a stalled body kept the connection 20 s")
        .unwrap();
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    let body = reply.split("\r\n\r\n").nth(1).unwrap_or_default();
    assert_eq!(
        body, r#"{"error":{"status":408,"message":"request timed out"}}"#,
        "the API's error shape: {reply}"
    );
    shutdown.cancel();
    collector.wait().await.unwrap();
}

/// `[http] tls_cert` / `tls_key`: ingest (and its /healthz) over HTTPS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_https_with_tls_cert_and_key() {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../common/tests/data");
    let dir = tempfile::tempdir().unwrap();
    let mut config = http_only_config(&sqlite_in(&dir));
    config.http.tls_cert = Some(data.join("localhost.crt"));
    config.http.tls_key = Some(data.join("localhost.key"));
    let (collector, shutdown) = start_collector(config).await;
    let port = collector.http_addr.unwrap().port();
    let root = reqwest::Certificate::from_pem(&std::fs::read(data.join("localhost.crt")).unwrap())
        .unwrap();
    let client = reqwest::Client::builder()
        .add_root_certificate(root)
        .build()
        .unwrap();
    let r = client
        .get(format!("https://localhost:{port}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    shutdown.cancel();
    collector.wait().await.unwrap();
}
