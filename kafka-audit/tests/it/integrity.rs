//! A token bound to one tier can never change what another tier's data says
//! (docs/design.md §10). The scenario as a new user deploys it, on both backends: the
//! collector with HTTP ingest and two tokens (producer/dc1, regional/dc1), serve
//! judging producer → regional in pinned 10-minute windows. Six past windows of honest
//! data, a loss of 37 in w2; then the producer token's flood of progress reports of
//! 10 000 partitions each, which at 75ceca0 put all six windows to settling/stalled
//! (the loss no longer reported, the gate unable to answer).

use std::net::SocketAddr;
use std::time::Duration;

use audit_lib::{AuditMessage, Identity, PartitionProgress};
use serde_json::Value;
use store::VerdictReads;

pub const WINDOW: i64 = 600_000;
pub const PRODUCER_TOKEN: &str = "producer-dc1-3f9a1c07e5b2d8640a1f";
pub const REGIONAL_TOKEN: &str = "regional-dc1-7c2e94b1d0a35f8e6b4c";

pub fn collect_toml(store_url: &str) -> String {
    format!(
        r#"
[store]
url = "{store_url}"
[http]
listen = "127.0.0.1:0"
[batch]
max_wait = "50ms"
[ingest]
window = "10m"
[[auth.tokens]]
name = "producers-dc1"
token = "{PRODUCER_TOKEN}"
scopes = ["ingest"]
tiers = ["producer"]
datacenters = ["dc1"]
[[auth.tokens]]
name = "regional-dc1"
token = "{REGIONAL_TOKEN}"
scopes = ["ingest"]
tiers = ["regional"]
datacenters = ["dc1"]
"#
    )
}

pub fn serve_toml(store_url: &str) -> String {
    format!(
        r#"
[serve]
database_url = "{store_url}"
evaluate_every = "1h"
request_timeout = "60s"
[topology]
window = "10m"
grace = "20m"
stall_after = "30m"
[[topology.tiers]]
name = "producer"
progress = false
[[topology.tiers]]
name = "regional"
[[topology.edges]]
upstream = "producer"
downstream = "regional"
"#
    )
}

/// The six windows' starts: w5 ended well past its grace.
pub fn six_windows() -> Vec<i64> {
    let now = common::now_ms();
    let w5 = (now - 2 * 3_600_000).div_euclid(WINDOW) * WINDOW;
    (0..6).map(|i| w5 - (5 - i) * WINDOW).collect()
}

pub fn increment(tier: &str, window: i64, count: u64) -> AuditMessage {
    testkit::increment("orders", window, window + WINDOW, count)
        .tier(tier)
        .emitted_at(common::now_ms())
        .build()
}

/// producer 1 000 in each window, regional 1 000 except 963 in w2, and regional's
/// progress at lag 0: what each token posts.
pub fn honest(windows: &[i64]) -> (Vec<AuditMessage>, Vec<AuditMessage>) {
    let producer = windows
        .iter()
        .map(|&w| increment("producer", w, 1000))
        .collect();
    let mut regional: Vec<AuditMessage> = windows
        .iter()
        .enumerate()
        .map(|(i, &w)| increment("regional", w, if i == 2 { 963 } else { 1000 }))
        .collect();
    let now = common::now_ms();
    regional.push(AuditMessage::progress(
        &Identity::new("regional", "dc1", "regional-0"),
        "orders",
        (0..4)
            .map(|partition| PartitionProgress {
                partition,
                next_offset: 5000,
                record_time: Some(now),
                lag: Some(0),
                max_record_time: Some(now),
                log_append_time: false,
            })
            .collect(),
        now,
    ));
    (producer, regional)
}

/// A progress report of `orders` by producer/dc1 with 10 000 partitions from `first`.
pub fn forged_progress(first: i32) -> AuditMessage {
    let now = common::now_ms();
    AuditMessage::progress(
        &Identity::new("producer", "dc1", "forger"),
        "orders",
        (first..first + 10_000)
            .map(|partition| PartitionProgress {
                partition,
                next_offset: 0,
                record_time: Some(now - 86_400_000),
                lag: Some(1_000_000),
                max_record_time: None,
                log_append_time: false,
            })
            .collect(),
        now,
    )
}

pub async fn post(addr: SocketAddr, token: &str, body: String) -> (u16, Value) {
    let (status, json) = try_post(addr, token, body).await;
    assert_ne!(status, 0, "POST /api/v1/audit: {json}");
    (status, json)
}

/// [`post`], with status 0 when the connection failed (the error in the value).
pub async fn try_post(addr: SocketAddr, token: &str, body: String) -> (u16, Value) {
    let sent = reqwest::Client::new()
        .post(format!("http://{addr}/api/v1/audit"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(body)
        .send()
        .await;
    match sent {
        Ok(r) => {
            let status = r.status().as_u16();
            (status, r.json().await.unwrap_or_default())
        }
        Err(e) => (0, Value::String(e.to_string())),
    }
}

pub fn array(messages: &[AuditMessage]) -> String {
    format!(
        "[{}]",
        messages
            .iter()
            .map(AuditMessage::to_json)
            .collect::<Vec<_>>()
            .join(",")
    )
}

/// (verdict, lifecycle) per window of producer → regional in dc1, from `/compare`.
async fn verdicts(state: &web::AppState, windows: &[i64]) -> Vec<(String, String)> {
    let uri = format!(
        "/api/v1/topics/orders/compare?from={}&to={}",
        windows[0],
        windows[5] + WINDOW
    );
    let body = get(state, &uri).await;
    windows
        .iter()
        .map(|&w| {
            let e = body["edges"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["window_start"] == w && e["datacenter"] == "dc1")
                .unwrap_or_else(|| panic!("window {w} missing: {body}"));
            (
                e["verdict"].as_str().unwrap().to_string(),
                e["lifecycle"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

async fn get(state: &web::AppState, uri: &str) -> Value {
    use tower::ServiceExt;
    let response = web::app(state.clone())
        .oneshot(
            axum::http::Request::builder()
                .uri(uri)
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{uri}");
    let bytes = axum::body::to_bytes(response.into_body(), 16 << 20)
        .await
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

async fn gate(state: &web::AppState, windows: &[i64]) -> Value {
    get(
        state,
        &format!(
            "/api/v1/topics/orders/completeness?tier=regional&datacenter=dc1&from={}&to={}",
            windows[0],
            windows[5] + WINDOW
        ),
    )
    .await
}

/// The index's verdicts of the six windows (absent: `ok`).
fn indexed(state: &web::AppState, windows: &[i64]) -> Vec<Option<(String, String)>> {
    let index = state.index.read().unwrap();
    windows
        .iter()
        .map(|&w| {
            index
                .in_range(w, w + 1)
                .find(|e| e.topic == "orders")
                .map(|e| (e.verdict.as_str().to_string(), format!("{:?}", e.lifecycle)))
        })
        .collect()
}

/// The collector's `/metrics` page.
pub async fn metrics(addr: SocketAddr) -> String {
    reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

async fn scenario(store_url: &str) {
    let config: collector::CollectConfig =
        toml::from_str(&collect_toml(store_url)).expect("collect.toml");
    let shutdown = tokio_util::sync::CancellationToken::new();
    let collector = collector::start(config, shutdown.clone())
        .await
        .expect("collector starts");
    let addr = collector.http_addr.unwrap();
    let serve: web::Config = toml::from_str(&serve_toml(store_url)).expect("serve.toml");
    let store = store::Store::connect(store_url).await.unwrap();
    let state = web::AppState::new(serve, store).unwrap();

    let windows = six_windows();
    let (producer, regional) = honest(&windows);
    for (token, messages) in [(PRODUCER_TOKEN, &producer), (REGIONAL_TOKEN, &regional)] {
        let (status, json) = post(addr, token, array(messages)).await;
        assert_eq!(status, 200, "{json}");
        assert_eq!(json["accepted"], messages.len(), "{json}");
    }
    let expected: Vec<(String, String)> = (0..6)
        .map(|i| {
            let v = if i == 2 { "loss" } else { "ok" };
            (v.to_string(), "final".to_string())
        })
        .collect();
    // PostgreSQL adds increments up behind ingestion (the roll-up).
    let settled = testkit::wait_until_async(Duration::from_secs(60), || async {
        verdicts(&state, &windows).await == expected
    })
    .await;
    assert!(settled, "{:?}", verdicts(&state, &windows).await);
    state.evaluate(common::now_ms()).await.unwrap();
    let mut judged = vec![None; 6];
    judged[2] = Some(("loss".to_string(), "Final".to_string()));
    assert_eq!(indexed(&state, &windows), judged);
    let g = gate(&state, &windows).await;
    assert_eq!(g["status"], "incomplete", "{g}");

    // The flood: ten requests with the producer token, each one progress report of
    // 10 000 partitions (ids 0..100 000 in all).
    for i in 0..10 {
        let (status, json) =
            post(addr, PRODUCER_TOKEN, array(&[forged_progress(i * 10_000)])).await;
        assert_eq!(status, 200, "{json}");
        let result = &json["results"][0];
        if i == 0 {
            // Partitions 0..10 000 are a topic Kafka can have: stored, and ignored,
            // since the producer tier reports no progress in this topology.
            assert_eq!(result["status"], "accepted", "{json}");
        } else {
            assert_eq!(result["status"], "rejected", "{json}");
            assert!(
                result["reason"]
                    .as_str()
                    .unwrap()
                    .contains("ingest.max_partitions"),
                "{json}"
            );
        }
    }
    state.evaluate(common::now_ms() + 1).await.unwrap();
    assert_eq!(verdicts(&state, &windows).await, expected);
    assert_eq!(indexed(&state, &windows), judged);
    let g = gate(&state, &windows).await;
    assert_eq!(g["status"], "incomplete", "{g}");
    assert_eq!(g["windows_complete"], 5, "{g}");
    let p = collector
        .store
        .progress(Some("orders"))
        .await
        .unwrap()
        .into_iter()
        .filter(|p| p.tier == "producer")
        .count();
    assert_eq!(
        p, 10_000,
        "only the partitions below ingest.max_partitions are kept"
    );
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(30), collector.wait())
        .await
        .expect("collector stops")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_token_cannot_change_another_tiers_verdicts_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("audit.db").display());
    scenario(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_token_cannot_change_another_tiers_verdicts_postgres() {
    let db = testkit::fresh_database("integrity_scenario").await;
    scenario(db.url()).await;
}
