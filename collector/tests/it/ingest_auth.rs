//! Security review C1 (§9 test 1): HTTP ingest with bearer tokens, configured from
//! collect.toml's `[auth]` (tokens from files), SQLite store.

use crate::support;

use std::time::Duration;

use collector::config::CollectConfig;
use store::{Inventory, TimeRange, VerdictReads};
use support::*;
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "8f1c2e0b9a7d4c3e5f60718293a4b5c6";

async fn post(
    addr: std::net::SocketAddr,
    auth: Option<&str>,
    content_type: &str,
    body: String,
) -> (u16, serde_json::Value) {
    let mut request = reqwest::Client::new()
        .post(format!("http://{addr}/api/v1/audit"))
        .header("content-type", content_type)
        .body(body);
    if let Some(auth) = auth {
        request = request.header("authorization", auth);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or_default())
}

fn message(tier: &str, dc: &str, seed: u64) -> serde_json::Value {
    let mut m = serde_json::to_value(increment("orders", 0, 10, seed)).unwrap();
    m["tier"] = tier.into();
    m["datacenter"] = dc.into();
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_needs_a_token_bound_to_what_it_reports() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("ingest-dc1");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let db = dir.path().join("audit.db");
    let config: CollectConfig = toml::from_str(&format!(
        r#"
        [store]
        url = {db:?}
        [http]
        listen = "127.0.0.1:0"
        # T0 is long past: retention would refuse its windows (see bounds.rs).
        [retention]
        enabled = false
        [auth]
        [[auth.tokens]]
        name = "producers-dc1"
        token_file = {token_file:?}
        scopes = ["ingest"]
        tiers = ["producer"]
        datacenters = ["dc1"]
        "#
    ))
    .expect("collect.toml with [auth]");
    let (collector, shutdown) = start_collector(config).await;
    let addr = collector.http_addr.unwrap();
    let ok = message("producer", "dc1", 1);
    let body = format!("[{ok}]");

    let (status, json) = post(addr, None, "application/json", body.clone()).await;
    assert_eq!(status, 401, "no token: {json}");
    assert_eq!(json["error"]["status"], 401, "web's error shape: {json}");
    assert!(json["error"]["message"].is_string(), "{json}");
    let (status, _) = post(
        addr,
        Some("Bearer 00000000000000000000000000000000"),
        "application/json",
        body.clone(),
    )
    .await;
    assert_eq!(status, 401, "wrong token");
    let (status, _) = post(addr, Some(TOKEN), "application/json", body.clone()).await;
    assert_eq!(status, 401, "no Bearer scheme");
    let bearer = format!("bearer {TOKEN}");
    let (status, json) = post(addr, Some(&bearer), "text/plain", body.clone()).await;
    assert_eq!(status, 415, "a simple CORS request is refused: {json}");
    assert_eq!(
        json,
        serde_json::json!({"error": {"status": 415, "message": "expected Content-Type: application/json"}})
    );

    let other_tier = message("regional", "dc1", 2);
    let other_dc = message("producer", "dc2", 3);
    let body = format!("[{ok},{other_tier},{other_dc}]");
    let (status, json) = post(addr, Some(&bearer), "application/json; charset=utf-8", body).await;
    assert_eq!(status, 200, "{json}");
    let results = json["results"].as_array().unwrap();
    assert_eq!(results[0]["status"], "accepted", "{json}");
    for (r, what) in [(&results[1], "tier"), (&results[2], "datacenter")] {
        assert_eq!(r["status"], "forbidden", "{json}");
        assert_eq!(r["code"], 403, "{json}");
        let reason = r["reason"].as_str().unwrap();
        assert!(
            reason.contains("producers-dc1") && reason.contains(what),
            "{reason}"
        );
    }
    assert_eq!(
        (json["accepted"].as_u64(), json["rejected"].as_u64()),
        (Some(1), Some(2))
    );
    let rejects = collector.store.rejects(10).await.unwrap();
    assert!(
        rejects.iter().any(|r| r.source == "http:producers-dc1[1]"),
        "rejects name the token: {rejects:?}"
    );
    let rows = collector
        .store
        .topic_windows("orders", TimeRange::new(T0, T0 + W))
        .await
        .unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| (r.tier.as_str(), r.count))
            .collect::<Vec<_>>(),
        vec![("producer", 10)],
        "only the message within the binding is counted"
    );

    // Ops routes stay open.
    assert_eq!(http_get(addr, "/healthz").await.0, 200);
    assert_eq!(http_get(addr, "/metrics").await.0, 200);

    stop(&shutdown, collector, Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placeholder_and_short_tokens_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.db");
    for token in ["replace-me-ingest-token-0123456789", "short-token-123"] {
        let config: CollectConfig = toml::from_str(&format!(
            r#"
            [store]
            url = {db:?}
            [http]
            listen = "127.0.0.1:0"
            [[auth.tokens]]
            name = "p"
            token = "{token}"
            scopes = ["ingest"]
            "#
        ))
        .unwrap();
        let error = collector::start(config, CancellationToken::new())
            .await
            .err()
            .expect("refused");
        assert!(format!("{error:#}").contains("auth token"), "{error:#}");
    }
}

/// A replicator's progress report (its evidence tier) of `orders` partition 0.
fn evidence(tier: &str, next_offset: i64) -> serde_json::Value {
    let m = audit_lib::AuditMessage::progress(
        &audit_lib::Identity::new(tier, "dc1", "forger"),
        "orders",
        vec![audit_lib::PartitionProgress {
            partition: 0,
            next_offset,
            record_time: None,
            lag: Some(0),
            max_record_time: None,
            log_append_time: false,
        }],
        common::now_ms(),
    );
    serde_json::to_value(m).unwrap()
}

/// Replication evidence is accepted over HTTP only from a token that names its tier. A
/// token whose `tiers` is omitted ("any") may report every counting tier but no
/// evidence, and a collector without tokens (loopback) takes none: each such element is
/// refused alone, with its reason, and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evidence_needs_a_token_that_names_its_tier() {
    const AUDITOR: &str = "2d7e91c4b5a60f38e1d2c3b4a5968778";
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.db");
    let config: CollectConfig = toml::from_str(&format!(
        r#"
        [store]
        url = {db:?}
        [http]
        listen = "127.0.0.1:0"
        [retention]
        enabled = false
        [[auth.tokens]]
        name = "any-tier"
        token = "{TOKEN}"
        scopes = ["ingest"]
        [[auth.tokens]]
        name = "regional-auditor"
        token = "{AUDITOR}"
        scopes = ["ingest"]
        tiers = ["regional", "replicator:group/mirror"]
        "#
    ))
    .unwrap();
    let (collector, shutdown) = start_collector(config).await;
    let addr = collector.http_addr.unwrap();
    let forged = evidence("replicator:group/mirror", 1 << 62);
    let counts = message("regional", "dc1", 4);
    let (status, json) = post(
        addr,
        Some(&format!("Bearer {TOKEN}")),
        "application/json",
        format!("[{forged},{counts}]"),
    )
    .await;
    assert_eq!(status, 200, "the batch is not failed: {json}");
    let results = json["results"].as_array().unwrap();
    assert_eq!(results[0]["status"], "forbidden", "{json}");
    assert_eq!(results[0]["code"], 403, "{json}");
    let reason = results[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("any-tier") && reason.contains("evidence"),
        "{reason}"
    );
    assert_eq!(
        results[1]["status"], "accepted",
        "any tier still counts: {json}"
    );

    let (status, json) = post(
        addr,
        Some(&format!("Bearer {AUDITOR}")),
        "application/json",
        format!("[{}]", evidence("replicator:group/mirror", 42)),
    )
    .await;
    assert_eq!(status, 200, "{json}");
    assert_eq!(
        json["results"][0]["status"], "accepted",
        "a token naming the evidence tier sends it: {json}"
    );
    let (_, metrics) = http_get(addr, "/metrics").await;
    assert!(
        metrics.contains("kafka_audit_collector_evidence_rejects_total{source=\"http\"} 1"),
        "{metrics}"
    );
    let rejects = collector.store.rejects(10).await.unwrap();
    assert!(
        rejects
            .iter()
            .any(|r| r.source == "http:any-tier[0]" && r.reason.contains("evidence")),
        "{rejects:?}"
    );
    stop(&shutdown, collector, Duration::from_secs(10)).await;

    // Without tokens (loopback clients only), no evidence at all.
    let store = sqlite_in(&dir);
    let (collector, shutdown) = start_collector(http_only_config(&store)).await;
    let addr = collector.http_addr.unwrap();
    let (status, json) = http_post(addr, format!("[{}]", evidence("replicator:mm2/agg", 7))).await;
    assert_eq!(status, 200, "{json}");
    assert_eq!(json["results"][0]["status"], "forbidden", "{json}");
    stop(&shutdown, collector, Duration::from_secs(10)).await;
}
