//! The HTTP API against real stores: every scenario runs on PostgreSQL (a fresh
//! database) and on SQLite.

use crate::support;

use axum::http::StatusCode;
use std::collections::BTreeSet;

use serde_json::{json, Value};
use support::*;
use web::AppState;

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

/// The served document is the one derived from the code, it is valid OpenAPI 3, and it
/// describes exactly what the router serves: every path of the router (read from the
/// router itself) with every method it answers, except the named routes that are not
/// API. A handler routed without a `#[utoipa::path]` in `web::openapi` fails here.
#[tokio::test]
async fn openapi_document_lists_every_route() {
    let (state, _db) = state(Backend::Sqlite, "").await;
    let r = get(&state, "/api/openapi.json").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers["content-type"], "application/json");
    let doc = r.body;
    // Parsed the same way on both sides (serde_json's float parsing is not exact).
    let derived = serde_json::to_string(&web::openapi::document()).unwrap();
    assert_eq!(doc, serde_json::from_str::<Value>(&derived).unwrap());
    support::assert_valid_openapi_3(&doc);

    // Not API: the dashboard's page and assets, and the document itself.
    let not_api = ["/", "/assets/{file}", "/api/openapi.json"];
    let routes = support::router_paths(&web::app(state.clone()));
    assert!(
        routes.contains("/healthz") && routes.contains("/api/v1/topology"),
        "paths read from the router: {routes:?}"
    );
    let documented: BTreeSet<String> = doc["paths"].as_object().unwrap().keys().cloned().collect();
    let served: BTreeSet<String> = routes
        .iter()
        .filter(|p| !not_api.contains(&p.as_str()))
        .cloned()
        .collect();
    assert_eq!(documented, served, "documented paths vs the router's");
    for path in &served {
        // A concrete URI of the path: `0` fits every parameter (a topic, a time).
        let uri: String = path
            .split('/')
            .map(|s| if s.starts_with('{') { "0" } else { s })
            .collect::<Vec<_>>()
            .join("/");
        for method in ["GET", "POST", "PUT", "DELETE", "PATCH"] {
            let answered =
                request(&state, method, &uri, None).await.status != StatusCode::METHOD_NOT_ALLOWED;
            let op = &doc["paths"][path][method.to_lowercase()];
            assert_eq!(
                answered,
                op.is_object(),
                "{method} {path}: served {answered}, documented {}",
                op.is_object()
            );
        }
    }
}

/// Every answer of a seeded store matches the schema the document gives its status:
/// the schemas are derived from the answer types, and this checks what is not
/// (`value_type` overrides such as the store's offsets, `required` choices).
#[tokio::test]
async fn openapi_schemas_describe_the_answers() {
    let (state, _db) = state(Backend::Sqlite, "").await;
    let w = settled_window();
    seed_loss(&state.store, "orders", w).await;
    state.evaluate(now_ms()).await.expect("evaluate");
    let doc = get(&state, "/api/openapi.json").await.body;
    let range = format!("from={}&to={}", w - WINDOW, w + 2 * WINDOW);
    let calls = [
        ("GET", "/api/v1/topology", "/api/v1/topology".to_string()),
        ("GET", "/api/v1/topics", format!("/api/v1/topics?{range}")),
        (
            "GET",
            "/api/v1/anomalies",
            format!("/api/v1/anomalies?{range}"),
        ),
        (
            "GET",
            "/api/v1/topics/{topic}/windows",
            format!("/api/v1/topics/orders/windows?{range}"),
        ),
        (
            "GET",
            "/api/v1/topics/{topic}/compare",
            format!("/api/v1/topics/orders/compare?{range}"),
        ),
        (
            "GET",
            "/api/v1/topics/{topic}/completeness",
            format!("/api/v1/topics/orders/completeness?tier=regional&datacenter=dc1&{range}"),
        ),
        (
            "GET",
            "/api/v1/topics/{topic}/windows/{window_start}/offsets",
            format!("/api/v1/topics/orders/windows/{w}/offsets"),
        ),
        (
            "GET",
            "/api/v1/topics/{topic}/windows/{window_start}/offsets",
            "/api/v1/topics/orders/windows/0/offsets".to_string(),
        ),
        ("GET", "/api/v1/topics", "/api/v1/topics?page=0".to_string()),
        ("POST", "/api/v1/evaluate", "/api/v1/evaluate".to_string()),
        ("GET", "/healthz", "/healthz".to_string()),
        ("GET", "/readyz", "/readyz".to_string()),
    ];
    for (method, path, uri) in calls {
        let r = request(&state, method, &uri, None).await;
        let status = r.status.as_u16().to_string();
        let content = &doc["paths"][path][method.to_lowercase()]["responses"][&status]["content"]
            ["application/json"]["schema"];
        assert!(
            content.is_object(),
            "{method} {uri}: {status} is not documented"
        );
        assert_conforms(&doc, content, &r.body, &format!("{method} {uri}"));
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
    // The evaluation job runs its first cycle at start (ready), then loads the rest of
    // the horizon (the window 2 h back is not in the first cycle's recent hour): wait
    // until /readyz no longer reports `loading`.
    let ready = testkit::wait_until_async(std::time::Duration::from_secs(20), || {
        let client = client.clone();
        async move {
            match client.get(format!("http://{addr}/readyz")).send().await {
                Ok(r) if r.status() == 200 => r
                    .json::<Value>()
                    .await
                    .is_ok_and(|b| b.get("loading").is_none()),
                _ => false,
            }
        }
    })
    .await;
    assert!(
        ready,
        "server never became ready with the whole horizon loaded"
    );
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

/// A client choosing the HTTP method must not choose the number of series: 1 000
/// requests with made-up methods leave a handful of `method` label values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_methods_do_not_grow_the_method_label() {
    let (state, _db) = state(Backend::Sqlite, "[serve]\nevaluate_every = \"1h\"").await;
    for i in 0..1000 {
        let r = request(&state, &format!("M{i}"), "/x", None).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND);
    }
    request(&state, "GET", "/healthz", None).await;
    let metrics = request(&state, "GET", "/metrics", None).await;
    let text = metrics.body.as_str().unwrap().to_string();
    let methods: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| l.starts_with("kafka_audit_http_requests_total{"))
        .filter_map(|l| l.split("method=\"").nth(1)?.split('"').next())
        .collect();
    assert!(methods.len() <= 5, "{} method values", methods.len());
    assert!(
        methods.contains("other") && methods.contains("GET"),
        "{methods:?}"
    );
}

/// Topics are data: one that has no window left in the horizon (a forged name, a
/// retired topic) leaves `/topics` and its anomaly and completeness series go, so
/// made-up names cannot grow `/metrics` without bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_that_leave_the_horizon_drop_their_series() {
    let (state, _db) = state(
        Backend::Sqlite,
        "[serve]\nevaluate_every = \"1h\"\nhorizon = \"1d\"",
    )
    .await;
    let w = settled_window();
    seed_loss(&state.store, "gone", w).await;
    let now = now_ms();
    state.evaluate(now).await.unwrap();
    let text = |r: Response| r.body.as_str().unwrap().to_string();
    let m = text(get(&state, "/metrics").await);
    assert!(
        m.contains("topic_anomalies{topic=\"gone\",kind=\"loss\"} 1"),
        "{m}"
    );
    // A day and two windows later, nothing of `gone` is in the horizon.
    state
        .evaluate(now + 24 * 3600 * 1000 + 2 * WINDOW)
        .await
        .unwrap();
    let m = text(get(&state, "/metrics").await);
    for family in ["topic_anomalies", "window_completeness"] {
        assert!(
            !m.lines()
                .any(|l| l.starts_with(&format!("kafka_audit_{family}{{topic=\"gone\""))),
            "{family}: {m}"
        );
    }
}

/// More progress rows than one read returns (a forged topic with 100 001
/// partitions) must not freeze stall detection: an auditor of another topic that
/// stops reporting is still flagged, and flagged on both stores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stall_detection_survives_more_progress_rows_than_a_read_returns() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let (state, _db) = state(backend, "[serve]\nevaluate_every = \"1h\"").await;
        let now = now_ms();
        let rows = store::MAX_READ_ROWS as i64 + 1;
        // Straight into the table: ingest caps partitions per message, the read side
        // must hold even when the table is bigger than one read.
        let bulk = "INSERT INTO audit_progress (topic, tier, datacenter, partition_id, host,
                        next_offset, emitted_at_ms, received_at_ms)
                    SELECT 'bulk', 'regional', 'dc1', g, 'h', 0, $1, $1 FROM ";
        let stalled = "INSERT INTO audit_progress (topic, tier, datacenter, partition_id, host,
                        next_offset, emitted_at_ms, received_at_ms)
                       VALUES ('orders', 'regional', 'dc1', 0, 'h', 0, $1, $1)";
        let hour_ago = now - 3_600_000;
        match &state.store {
            store::Store::Postgres(s) => {
                sqlx::query(&format!("{bulk} generate_series(0, $2 - 1) g"))
                    .bind(now)
                    .bind(rows)
                    .execute(s.pool())
                    .await
                    .unwrap();
                sqlx::query(stalled)
                    .bind(hour_ago)
                    .execute(s.pool())
                    .await
                    .unwrap();
            }
            store::Store::Sqlite(s) => {
                sqlx::query(&format!(
                    "WITH RECURSIVE n(g) AS (SELECT 0 UNION ALL SELECT g + 1 FROM n WHERE g + 1 < $2) \
                     {bulk} n"
                ))
                .bind(now)
                .bind(rows)
                .execute(s.pool())
                .await
                .unwrap();
                sqlx::query(stalled)
                    .bind(hour_ago)
                    .execute(s.pool())
                    .await
                    .unwrap();
            }
        }
        state.evaluate(now).await.unwrap();
        let orders = state
            .index
            .read()
            .unwrap()
            .auditors
            .get(&("orders".into(), "regional".into(), "dc1".into()))
            .cloned();
        assert!(
            orders.as_ref().is_some_and(|a| a.stalled),
            "{backend:?}: {orders:?}"
        );
        let m = get(&state, "/metrics").await;
        let m = m.body.as_str().unwrap();
        assert!(
            m.contains(
                "kafka_audit_auditor_stalled{topic=\"orders\",tier=\"regional\",datacenter=\"dc1\"} 1"
            ),
            "{backend:?}"
        );
    }
}

/// `[serve] tls_cert` / `tls_key`: the API over HTTPS, as the docs' recipe sets it up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_https_with_tls_cert_and_key() {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../common/tests/data");
    let (cert, key) = (data.join("localhost.crt"), data.join("localhost.key"));
    let (state, _db) = state(
        Backend::Sqlite,
        &format!(
            "[serve]\nevaluate_every = \"1h\"\ntls_cert = {:?}\ntls_key = {:?}",
            cert.display().to_string(),
            key.display().to_string()
        ),
    )
    .await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(web::serve(listener, state, shutdown.clone()));
    let root = reqwest::Certificate::from_pem(&std::fs::read(&cert).unwrap()).unwrap();
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
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"status": "ok"}));
    shutdown.cancel();
    server.await.unwrap().unwrap();
}

/// The offsets of one window are read with a bound: a window with more partition
/// ranges than one read returns (forged partitions) cannot exhaust `serve`'s memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_reads_are_bounded() {
    use store::VerdictReads;
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let (state, _db) = state(backend, "[serve]\nevaluate_every = \"1h\"").await;
        let w = settled_window();
        seed_loss(&state.store, "orders", w).await;
        let rows = store::MAX_READ_ROWS as i64 + 1;
        match &state.store {
            store::Store::Postgres(s) => sqlx::query(
                "INSERT INTO audit_window_offset (topic, window_start_ms, window_id, partition_id,
                                                  min_offset, max_offset)
                 SELECT topic, window_start_ms, id, 1000 + g, 0, 1
                 FROM audit_window, generate_series(0, $1 - 1) g
                 WHERE topic = 'orders' AND tier = 'regional'",
            )
            .bind(rows)
            .execute(s.pool())
            .await
            .map(drop)
            .unwrap(),
            store::Store::Sqlite(s) => sqlx::query(
                "WITH RECURSIVE n(g) AS (SELECT 0 UNION ALL SELECT g + 1 FROM n WHERE g + 1 < $1)
                 INSERT INTO audit_window_offset (window_id, partition_id, min_offset, max_offset)
                 SELECT id, 1000 + g, 0, 1 FROM audit_window, n
                 WHERE topic = 'orders' AND tier = 'regional'",
            )
            .bind(rows)
            .execute(s.pool())
            .await
            .map(drop)
            .unwrap(),
        };
        let key = store::WindowKey {
            topic: "orders".into(),
            tier: "regional".into(),
            datacenter: "dc1".into(),
            window_start_ms: w,
        };
        let offsets = state.store.window_offsets(&key).await.unwrap();
        assert_eq!(offsets.len(), store::MAX_READ_ROWS, "{backend:?}");
    }
}

/// API answers carry counts and checksums: no MIME sniffing, and no cache (a proxy
/// must not keep an authenticated answer for the next client).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_answers_are_not_sniffed_or_cached() {
    let (state, _db) = state(Backend::Sqlite, "[serve]\nevaluate_every = \"1h\"").await;
    state.evaluate(now_ms()).await.unwrap();
    for uri in [
        "/api/v1/topology",
        "/api/v1/anomalies",
        "/api/v1/nope",
        "/readyz",
    ] {
        let r = get(&state, uri).await;
        assert_eq!(r.headers["x-content-type-options"], "nosniff", "{uri}");
        assert_eq!(r.headers["cache-control"], "no-store", "{uri}");
    }
}

/// An open API (no tokens) on a non-loopback address serves every count and checksum
/// to the network: say so at start, in one warning line.
#[tokio::test]
async fn an_open_api_off_loopback_is_warned_about_at_start() {
    let (logs, _guard) = Logs::capture();
    let text = || logs.text();
    for (listen, warned) in [("127.0.0.1:0", false), ("0.0.0.0:0", true)] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        let cfg = config(&format!(
            "[serve]\nevaluate_every = \"1h\"\nlisten = \"{listen}\"\ndatabase_url = \"sqlite:{}\"",
            db.display()
        ));
        logs.0.lock().unwrap().clear();
        let shutdown = tokio_util::sync::CancellationToken::new();
        let run = tokio::spawn(web::run(cfg, web::Mode::All, shutdown.clone()));
        let serving = testkit::wait_until_async(std::time::Duration::from_secs(20), || {
            let t = text();
            async move { t.contains("serving") }
        })
        .await;
        assert!(serving, "{}", text());
        shutdown.cancel();
        run.await.unwrap().unwrap();
        let lines = text()
            .lines()
            .filter(|l| l.contains("WARN") && l.contains("no [auth] tokens"))
            .count();
        assert_eq!(lines, usize::from(warned), "{listen}: {}", text());
    }
}

/// With auth off, `POST /api/v1/evaluate` needs no token: a page on another site
/// must not trigger it through a visitor's browser (a form POST carries no body and
/// needs no preflight). Browsers name the page's origin; a foreign one is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_site_posts_are_refused() {
    use axum::body::Body;
    use tower::ServiceExt;
    let (state, _db) = state(
        Backend::Sqlite,
        "[serve]\nevaluate_every = \"1h\"\nallowed_hosts = [\"kafka-audit.internal\"]",
    )
    .await;
    let post = |origin: Option<&str>| {
        let mut req = axum::http::Request::builder()
            .method("POST")
            .uri("/api/v1/evaluate")
            .header("host", "kafka-audit.internal:8080");
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        web::app(state.clone()).oneshot(req.body(Body::empty()).unwrap())
    };
    let foreign = post(Some("https://evil.example")).await.unwrap();
    assert_eq!(foreign.status(), StatusCode::FORBIDDEN);
    let same = post(Some("http://kafka-audit.internal:8080"))
        .await
        .unwrap();
    assert_eq!(same.status(), StatusCode::OK);
    let none = post(None).await.unwrap();
    assert_eq!(none.status(), StatusCode::OK, "curl sends no Origin");
}

/// At most `serve.max_concurrent_requests` API requests run at once (the rest wait,
/// within `request_timeout`), so slow reads cannot take every pooled connection from
/// the evaluator. Here two `/windows` reads hang on a locked table: a third request,
/// even one that needs no database, waits for a slot until they finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_requests_beyond_the_concurrency_limit_wait() {
    let (state, _db) = state(
        Backend::Postgres,
        "[serve]\nevaluate_every = \"1h\"\nmax_concurrent_requests = 2\nrequest_timeout = \"30s\"",
    )
    .await;
    state.evaluate(now_ms()).await.unwrap();
    let store::Store::Postgres(pg) = &state.store else {
        unreachable!()
    };
    let mut lock = pg.pool().begin().await.unwrap();
    sqlx::query("LOCK TABLE audit_window IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    let now = now_ms();
    let uri = format!(
        "/api/v1/topics/orders/windows?from={}&to={now}",
        now - 3_600_000
    );
    let slow: Vec<_> = (0..2)
        .map(|_| {
            let (state, uri) = (state.clone(), uri.clone());
            tokio::spawn(async move { get(&state, &uri).await.status })
        })
        .collect();
    // Both slow reads hold their slot once they wait on the lock.
    let waiting = testkit::wait_until_async(std::time::Duration::from_secs(20), || {
        let pool = pg.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                 AND datname = current_database()",
            )
            .fetch_one(&pool)
            .await
            .is_ok_and(|n| n >= 2)
        }
    })
    .await;
    assert!(waiting, "the slow reads never waited on the lock");
    let topology = {
        let state = state.clone();
        tokio::spawn(async move { get(&state, "/api/v1/topology").await.status })
    };
    // Served in microseconds when a slot is free; here it must still be waiting.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(
        !topology.is_finished(),
        "served beyond max_concurrent_requests"
    );
    lock.rollback().await.unwrap();
    for s in slow {
        assert_eq!(s.await.unwrap(), StatusCode::OK);
    }
    assert_eq!(topology.await.unwrap(), StatusCode::OK);
}

/// `/readyz` is open by default: when the store fails it says so without the store's
/// error text (database, user and host names), which goes to the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_does_not_publish_store_errors() {
    let (state, db) = state(Backend::Postgres, "[serve]\nevaluate_every = \"1h\"").await;
    state.evaluate(now_ms()).await.unwrap();
    let support::Db::Pg(db) = &db else {
        unreachable!()
    };
    let name = db.name().to_string();
    let admin = testkit::fresh_database("web_admin").await;
    let conn = store::Store::connect(admin.url()).await.unwrap();
    let store::Store::Postgres(pg) = &conn else {
        unreachable!()
    };
    sqlx::raw_sql(&format!("DROP DATABASE \"{name}\" WITH (FORCE)"))
        .execute(pg.pool())
        .await
        .unwrap();
    let r = get(&state, "/readyz").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    assert_eq!(r.body["store"], "unavailable", "{}", r.body);
    assert!(!r.body.to_string().contains(&name), "{}", r.body);
}

/// Slowloris: half a request line and silence is cut off after
/// `serve.header_read_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_request_head_is_closed_after_the_header_timeout() {
    let (state, _db) = state(
        Backend::Sqlite,
        "[serve]\nevaluate_every = \"1h\"\nheader_read_timeout = \"500ms\"",
    )
    .await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(web::serve(listener, state, shutdown.clone()));
    let closed = common::server::testing::stalled_header_closed_after(addr).await;
    assert!(closed.is_some(), "connection still open after 20 s");
    shutdown.cancel();
    tokio::time::timeout(std::time::Duration::from_secs(10), server)
        .await
        .expect("server stops on shutdown")
        .unwrap()
        .unwrap();
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

/// DNS rebinding with auth off (security review 2, finding 7): a page on
/// `evil.example` whose name is rebound to serve's address sends `Host` and `Origin`
/// of its own name, equal to each other, so the Origin check alone let it read the
/// API and post `/evaluate`. With no tokens, only IP addresses, `localhost` and
/// `serve.allowed_hosts` are served; with tokens the browser has none to send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebound_host_name_is_refused_while_auth_is_off() {
    use axum::body::Body;
    use tower::ServiceExt;
    let call = |state: &web::AppState, method: &str, uri: &str, host: &str| {
        let req = axum::http::Request::builder()
            .method(method)
            .uri(uri)
            .header("host", host)
            .header("origin", format!("http://{host}"))
            .body(Body::empty())
            .unwrap();
        web::app(state.clone()).oneshot(req)
    };
    let (open, _db) = state(
        Backend::Sqlite,
        "[serve]\nevaluate_every = \"1h\"\nallowed_hosts = [\"audit.corp.example\"]",
    )
    .await;
    open.evaluate(now_ms()).await.unwrap();
    for (method, uri) in [
        ("GET", "/api/v1/topics"),
        ("POST", "/api/v1/evaluate"),
        ("GET", "/"),
    ] {
        let r = call(&open, method, uri, "evil.example:8080").await.unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{method} {uri}");
    }
    for host in [
        "127.0.0.1:8080",
        "[::1]:8080",
        "localhost:8080",
        "audit.corp.example",
        "10.0.0.7",
    ] {
        let r = call(&open, "GET", "/api/v1/topics", host).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{host}");
    }
    let token = "a-read-token-of-at-least-24-bytes";
    let (closed, _db2) = state(
        Backend::Sqlite,
        &format!(
            "[serve]\nevaluate_every = \"1h\"\n[[auth.tokens]]\nname = \"t\"\ntoken = \"{token}\"\nscopes = [\"read\"]"
        ),
    )
    .await;
    closed.evaluate(now_ms()).await.unwrap();
    let req = axum::http::Request::builder()
        .uri("/api/v1/topics")
        .header("host", "any-name.example")
        .header("authorization", format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    let r = web::app(closed.clone()).oneshot(req).await.unwrap();
    assert_eq!(
        r.status(),
        StatusCode::OK,
        "with tokens, Host is not checked"
    );
}
