//! The HTTP API against real stores: every scenario runs on PostgreSQL (a fresh
//! database) and on SQLite.

mod support;

use axum::http::StatusCode;
use serde_json::{json, Value};
use support::*;
use web::AppState;

macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Backend::Postgres).await
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Backend::Sqlite).await
                }
            )*
        }
    };
}

on_both_backends!(
    loss_is_listed_then_resolved_by_late_data,
    windows_report_stats_and_latency_per_tier,
    compare_judges_every_window_of_the_range,
    offsets_behind_a_window,
    bad_input_is_a_json_400,
    metrics_export_completeness_and_anomalies,
    readiness_waits_for_the_first_evaluation,
    settling_window_is_judged_once_it_settles,
);

async fn state(backend: Backend, extra: &str) -> (AppState, support::Db) {
    let (store, db) = store(backend).await;
    (AppState::new(config(extra), store).expect("state"), db)
}

async fn loss_is_listed_then_resolved_by_late_data(backend: Backend) {
    let (state, _db) = state(backend, "").await;
    let w = settled_window();
    seed_loss(&state.store, "orders", w).await;
    write(
        &state.store,
        vec![
            increment("payments", "producer", "dc1", w, 50, 5),
            increment("payments", "regional", "dc1", w, 50, 5),
            caught_up("payments", "regional", "dc1"),
        ],
    )
    .await;
    state.evaluate(now_ms()).await.expect("evaluate");

    let from = w - WINDOW;
    let to = w + 2 * WINDOW;
    let r = get(&state, &format!("/api/v1/anomalies?from={from}&to={to}")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["total"], 1, "{}", r.body);
    let a = &r.body["anomalies"][0];
    assert_eq!(a["topic"], "orders");
    assert_eq!(a["verdict"], "loss");
    assert_eq!(a["lifecycle"], "final");
    assert_eq!(a["upstream"], "producer");
    assert_eq!(a["downstream"], "regional");
    assert_eq!(a["datacenter"], "dc1");
    assert_eq!(a["window_start"], w);
    assert_eq!(a["expected"], 100);
    assert_eq!(a["observed"], 90);
    assert_eq!(a["difference"], -10);
    assert_eq!(a["completeness"], 0.9);

    // kind filter, RFC 3339 times
    let rfc = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .to_rfc3339()
            .replace('+', "%2B")
    };
    let r = get(
        &state,
        &format!(
            "/api/v1/anomalies?from={}&to={}&kind=duplication",
            rfc(from),
            rfc(to)
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["total"], 0);

    let r = get(&state, &format!("/api/v1/topics?from={from}&to={to}")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let topics: Vec<(String, String)> = r.body["topics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["topic"].as_str().unwrap().into(),
                t["worst"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        topics,
        vec![
            ("orders".into(), "loss".into()),
            ("payments".into(), "ok".into())
        ]
    );

    // The 10 missing messages arrive late.
    write(
        &state.store,
        vec![increment("orders", "regional", "dc1", w, 10, 100)],
    )
    .await;
    state.evaluate(now_ms()).await.expect("evaluate");
    let r = get(&state, &format!("/api/v1/anomalies?from={from}&to={to}")).await;
    assert_eq!(r.body["total"], 0, "{}", r.body);
    let r = get(
        &state,
        &format!("/api/v1/topics/orders/compare?from={w}&to={}", w + WINDOW),
    )
    .await;
    let e = &r.body["edges"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["upstream"] == "producer")
        .unwrap()
        .clone();
    assert_eq!(e["verdict"], "ok", "{e}");
    assert_eq!(e["completeness"], 1.0);
    assert_eq!(e["checksums_match"], true);
}

async fn windows_report_stats_and_latency_per_tier(backend: Backend) {
    let (state, _db) = state(backend, "").await;
    let w = settled_window();
    seed_loss(&state.store, "orders", w).await;
    let r = get(
        &state,
        &format!("/api/v1/topics/orders/windows?from={w}&to={}", w + WINDOW),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let windows = r.body["windows"].as_array().unwrap();
    assert_eq!(windows.len(), 2);
    let regional = windows.iter().find(|x| x["tier"] == "regional").unwrap();
    assert_eq!(regional["count"], 90);
    assert_eq!(regional["bytes"], 9000);
    assert_eq!(regional["checksum"], "0000000000000384");
    assert_eq!(regional["window_end"], w + WINDOW);
    // 89 latencies in bucket 200 (2·1.02^200/2.02 ≈ 51.98 ms), one ≈ 380 ms
    let p50 = regional["latency"]["p50_ms"].as_f64().unwrap();
    assert!((p50 - 51.98).abs() < 0.1, "p50 {p50}");
    assert_eq!(regional["latency"]["max_ms"], 380);
    assert_eq!(r.body["tiers"]["producer"]["count"], 100);

    let r = get(
        &state,
        &format!(
            "/api/v1/topics/orders/windows?from={w}&to={}&tier=producer&datacenter=dc1",
            w + WINDOW
        ),
    )
    .await;
    let windows = r.body["windows"].as_array().unwrap();
    assert_eq!(windows.len(), 1);
    assert_eq!(windows[0]["tier"], "producer");

    let r = get(
        &state,
        &format!("/api/v1/topics/nothing/windows?from={w}&to={}", w + WINDOW),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["windows"], json!([]));
}

async fn compare_judges_every_window_of_the_range(backend: Backend) {
    let (state, _db) = state(backend, "").await;
    let w = settled_window();
    seed_loss(&state.store, "orders", w).await;
    // Three windows: the lossy one, then two empty ones (auditor caught up: ok).
    let r = get(
        &state,
        &format!(
            "/api/v1/topics/orders/compare?from={w}&to={}",
            w + 3 * WINDOW
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let edges: Vec<(i64, String, String)> = r.body["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["upstream"] == "producer")
        .map(|e| {
            (
                e["window_start"].as_i64().unwrap(),
                e["verdict"].as_str().unwrap().into(),
                e["datacenter"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        edges,
        vec![
            (w, "loss".into(), "dc1".into()),
            (w + WINDOW, "ok".into(), "dc1".into()),
            (w + 2 * WINDOW, "ok".into(), "dc1".into()),
        ]
    );
    let first = &r.body["edges"][0];
    assert_eq!(first["upstream_latency"]["count"], 100);
    assert!(first["downstream_latency"]["p99_ms"].as_f64().unwrap() > 50.0);
}

async fn offsets_behind_a_window(backend: Backend) {
    let (state, _db) = state(backend, "").await;
    let w = settled_window();
    seed_loss(&state.store, "orders", w).await;
    let r = get(
        &state,
        &format!("/api/v1/topics/orders/windows/{w}/offsets?tier=regional"),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        r.body["offsets"],
        json!([{ "tier": "regional", "datacenter": "dc1",
                 "partitions": [{ "partition": 0, "min": 1000, "max": 1089 }] }])
    );
    let r = get(
        &state,
        &format!("/api/v1/topics/orders/windows/{w}/offsets"),
    )
    .await;
    assert_eq!(r.body["offsets"].as_array().unwrap().len(), 2);
    let r = get(
        &state,
        &format!("/api/v1/topics/orders/windows/{}/offsets", w + WINDOW),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("no window"));
    let r = get(
        &state,
        &format!("/api/v1/topics/orders/windows/{}/offsets", w + 1),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}

async fn bad_input_is_a_json_400(backend: Backend) {
    let (state, _db) = state(backend, "[serve]\nmax_page_size = 50\nmax_range = \"2d\"").await;
    state.evaluate(now_ms()).await.expect("evaluate");
    let cases: &[(&str, StatusCode, &str)] = &[
        (
            "/api/v1/anomalies?from=yesterday",
            StatusCode::BAD_REQUEST,
            "neither RFC 3339 nor epoch",
        ),
        (
            "/api/v1/anomalies?from=2000&to=1000",
            StatusCode::BAD_REQUEST,
            "must be before",
        ),
        (
            "/api/v1/anomalies?from=0&to=604800000",
            StatusCode::BAD_REQUEST,
            "exceeds the maximum",
        ),
        (
            "/api/v1/anomalies?page_size=51",
            StatusCode::BAD_REQUEST,
            "page_size must be within 1..=50",
        ),
        (
            "/api/v1/anomalies?page=0",
            StatusCode::BAD_REQUEST,
            "page starts at 1",
        ),
        ("/api/v1/anomalies?page=-3", StatusCode::BAD_REQUEST, "page"),
        ("/api/v1/anomalies?kind=ok", StatusCode::BAD_REQUEST, "kind"),
        (
            "/api/v1/anomalies?colour=red",
            StatusCode::BAD_REQUEST,
            "unknown field",
        ),
        (
            "/api/v1/anomalies?from=-5",
            StatusCode::BAD_REQUEST,
            "outside",
        ),
        (
            "/api/v1/anomalies?from=99999999999999999999",
            StatusCode::BAD_REQUEST,
            "neither",
        ),
        (
            "/api/v1/topics?from=0&to=1000",
            StatusCode::BAD_REQUEST,
            "before the evaluated horizon",
        ),
        (
            "/api/v1/topics/x/compare?to=2026-13-01T00:00:00Z",
            StatusCode::BAD_REQUEST,
            "RFC 3339",
        ),
        (
            "/api/v1/topics/x/windows/later/offsets",
            StatusCode::BAD_REQUEST,
            "window_start",
        ),
        ("/api/v1/nope", StatusCode::NOT_FOUND, "no such route"),
    ];
    for (uri, status, message) in cases {
        let r = get(&state, uri).await;
        assert_eq!(r.status, *status, "{uri}: {}", r.body);
        assert_eq!(
            r.body["error"]["status"],
            status.as_u16(),
            "{uri}: {}",
            r.body
        );
        let m = r.body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            m.contains(message),
            "{uri}: message {m:?} lacks {message:?}"
        );
    }
    // An empty value (as HTML forms send) means the default.
    let r = get(&state, "/api/v1/anomalies?from=&to=&kind=").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = request(&state, "DELETE", "/api/v1/anomalies", None).await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.body["error"]["status"], 405);
}

async fn metrics_export_completeness_and_anomalies(backend: Backend) {
    let (state, _db) = state(backend, "").await;
    let w = settled_window();
    seed_loss(&state.store, "orders", w).await;
    state.evaluate(now_ms()).await.expect("evaluate");
    let _ = get(&state, "/api/v1/topology").await;
    let r = get(&state, "/metrics").await;
    assert_eq!(r.status, StatusCode::OK);
    let text = r.body.as_str().expect("text body").to_string();
    for line in [
        "kafka_audit_window_completeness{topic=\"orders\",upstream=\"producer\",downstream=\"regional\",datacenter=\"dc1\"} 0.9",
        &format!("kafka_audit_window_completeness_window_start_ms{{topic=\"orders\",upstream=\"producer\",downstream=\"regional\",datacenter=\"dc1\"}} {w}"),
        "kafka_audit_anomalies{kind=\"loss\"} 1",
        "kafka_audit_anomalies{kind=\"duplication\"} 0",
        "kafka_audit_topic_anomalies{topic=\"orders\",kind=\"loss\"} 1",
        "kafka_audit_topic_anomalies{topic=\"orders\",kind=\"mismatch\"} 0",
        "kafka_audit_anomalies_detected_total{kind=\"loss\"} 1",
        "kafka_audit_auditor_stalled{topic=\"orders\",tier=\"regional\",datacenter=\"dc1\"} 0",
        "kafka_audit_http_requests_total{method=\"GET\",route=\"/api/v1/topology\",status=\"200\"} 1",
        "kafka_audit_evaluations_total 1",
    ] {
        assert!(text.contains(line), "metrics lack {line:?}:\n{text}");
    }
}

async fn readiness_waits_for_the_first_evaluation(backend: Backend) {
    let (state, _db) = state(backend, "").await;
    let r = get(&state, "/readyz").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    let r = get(&state, "/api/v1/anomalies").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    state.evaluate(now_ms()).await.expect("evaluate");
    let r = get(&state, "/readyz").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["store"], "ok");
    let r = get(&state, "/healthz").await;
    assert_eq!(r.body, json!({"status": "ok"}));
}

// ---------- auth (no database content needed; SQLite keeps it quick)

const READ: &str = "read-token-0123456789abcdef";
const ADMIN: &str = "admin-token-0123456789abcdef";

fn auth_config(extra: &str) -> String {
    format!(
        r#"
[auth]
{extra}
[[auth.tokens]]
name = "dashboard"
token = "{READ}"
scopes = ["read"]
[[auth.tokens]]
name = "ops"
token = "{ADMIN}"
scopes = ["admin"]
"#
    )
}

#[tokio::test]
async fn auth_requires_a_token_with_the_right_scope() {
    let (state, _db) = state(Backend::Sqlite, &auth_config("")).await;
    state.evaluate(now_ms()).await.expect("evaluate");
    for uri in [
        "/api/v1/topology",
        "/api/v1/anomalies",
        "/api/openapi.json",
        "/api/v1/topics/x/compare",
    ] {
        let r = request(&state, "GET", uri, None).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{uri}");
        assert_eq!(r.body["error"]["status"], 401);
        assert_eq!(
            r.headers["www-authenticate"],
            "Bearer realm=\"kafka-audit\""
        );
        let r = request(&state, "GET", uri, Some("not-a-token-at-all")).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{uri}");
        let r = request(&state, "GET", uri, Some(READ)).await;
        assert_eq!(r.status, StatusCode::OK, "{uri}: {}", r.body);
        let r = request(&state, "GET", uri, Some(ADMIN)).await;
        assert_eq!(r.status, StatusCode::OK, "{uri}: admin implies read");
    }
    let r = request(&state, "POST", "/api/v1/evaluate", Some(READ)).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("admin"));
    let r = request(&state, "POST", "/api/v1/evaluate", None).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let r = request(&state, "POST", "/api/v1/evaluate", Some(ADMIN)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    // Health and metrics stay open by default.
    for uri in ["/healthz", "/readyz", "/metrics"] {
        let r = request(&state, "GET", uri, None).await;
        assert_eq!(r.status, StatusCode::OK, "{uri}");
    }
}

/// Tokens from files (Kubernetes Secrets), shared with the collector (common::auth):
/// the trailing newline of the file is ignored; placeholders and short tokens are
/// refused at start.
#[tokio::test]
async fn tokens_come_from_files_and_placeholders_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dashboard-token");
    std::fs::write(&file, format!("{READ}\n")).unwrap();
    let (state, _db) = state(
        Backend::Sqlite,
        &format!(
            "[[auth.tokens]]\nname = \"dashboard\"\ntoken_file = {file:?}\nscopes = [\"read\"]\n"
        ),
    )
    .await;
    let r = request(&state, "GET", "/api/v1/topology", Some(READ)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = request(&state, "GET", "/api/v1/topology", None).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);

    for token in ["replace-me-admin-token-0123456789", "sixteen-chars-ok"] {
        let extra =
            format!("[[auth.tokens]]\nname = \"ops\"\ntoken = \"{token}\"\nscopes = [\"admin\"]\n");
        let parsed: web::Config =
            toml::from_str(&format!("{}\n{extra}", support::TOPOLOGY)).unwrap();
        let e = parsed.validate().expect_err("refused");
        assert!(format!("{e:#}").contains("auth token"), "{e:#}");
    }
}

#[tokio::test]
async fn closed_health_and_metrics_need_a_token() {
    let (state, _db) = state(
        Backend::Sqlite,
        &auth_config("open_health = false\nopen_metrics = false"),
    )
    .await;
    for uri in ["/healthz", "/metrics"] {
        let r = request(&state, "GET", uri, None).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{uri}");
        let r = request(&state, "GET", uri, Some(READ)).await;
        assert_eq!(r.status, StatusCode::OK, "{uri}");
    }
}

#[tokio::test]
async fn openapi_document_lists_every_route() {
    let (state, _db) = state(Backend::Sqlite, "").await;
    let r = get(&state, "/api/openapi.json").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.body["openapi"].as_str().map(|v| v.starts_with("3.")),
        Some(true)
    );
    let paths: Vec<&str> = r.body["paths"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for p in [
        "/api/v1/topology",
        "/api/v1/topics",
        "/api/v1/topics/{topic}/windows",
        "/api/v1/topics/{topic}/compare",
        "/api/v1/anomalies",
        "/api/v1/topics/{topic}/windows/{window_start}/offsets",
        "/api/v1/evaluate",
        "/healthz",
        "/readyz",
    ] {
        assert!(paths.contains(&p), "openapi lacks {p}: {paths:?}");
    }
}

/// One test over a real socket: the server as `kafka-audit serve` runs it, with
/// graceful shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_on_a_bound_port_and_shuts_down() {
    let (store, _db) = store(Backend::Postgres).await;
    let w = settled_window();
    seed_loss(&store, "orders", w).await;
    let state = AppState::new(config("[serve]\nevaluate_every = \"1h\""), store).unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let jobs = state.spawn_jobs(&shutdown);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(web::serve(listener, state.clone(), shutdown.clone()));
    let client = reqwest::Client::new();
    // The evaluation job runs its first cycle at start.
    let ready = testkit::wait_until_async(std::time::Duration::from_secs(20), || {
        let client = client.clone();
        async move {
            client
                .get(format!("http://{addr}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        }
    })
    .await;
    assert!(ready, "server never became ready");
    let body: Value = client
        .get(format!(
            "http://{addr}/api/v1/anomalies?from={}&to={}",
            w,
            w + WINDOW
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["total"], 1, "{body}");
    shutdown.cancel();
    tokio::time::timeout(std::time::Duration::from_secs(10), server)
        .await
        .expect("server stops on shutdown")
        .unwrap()
        .unwrap();
    for j in jobs {
        tokio::time::timeout(std::time::Duration::from_secs(10), j)
            .await
            .expect("job stops")
            .unwrap();
    }
}

/// A window evaluated while settling is `pending`; a later cycle, with no new data,
/// judges it once its grace period is over (the evaluator re-judges waiting windows).
async fn settling_window_is_judged_once_it_settles(backend: Backend) {
    let (state, _db) = state(backend, "").await;
    let w = settled_window();
    seed_loss(&state.store, "orders", w).await;
    let during_grace = w + WINDOW + 5 * MIN;
    state.evaluate(during_grace).await.expect("evaluate");
    let range = format!("from={w}&to={}", w + WINDOW);
    let r = get(&state, &format!("/api/v1/topics?{range}")).await;
    assert_eq!(r.body["topics"][0]["worst"], "pending", "{}", r.body);
    assert_eq!(r.body["topics"][0]["pending"], 1);
    let r = get(&state, &format!("/api/v1/anomalies?{range}")).await;
    assert_eq!(r.body["total"], 0, "pending is not an anomaly: {}", r.body);

    state.evaluate(now_ms()).await.expect("evaluate");
    let r = get(&state, &format!("/api/v1/anomalies?{range}")).await;
    assert_eq!(r.body["total"], 1, "{}", r.body);
    assert_eq!(r.body["anomalies"][0]["verdict"], "loss");
}
