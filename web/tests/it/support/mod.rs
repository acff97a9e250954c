//! Shared by the integration tests: real stores (a fresh PostgreSQL database from
//! testkit, or a SQLite file in a temp dir), seeding through the store's own write
//! path, and requests through `app(state)` with `tower::ServiceExt::oneshot`.
#![allow(dead_code)]

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::Value;
use store::{
    AuditBody, Batch, Deployment, Increment, Ingest, LatencyHistogram, Message, PartitionProgress,
    Store, WindowStats,
};
use tower::ServiceExt;
use uuid::Uuid;
use web::{AppState, Config};

/// Runs each named `async fn NAME(backend: Backend)` of the test file as two tests,
/// `postgres::NAME` and `sqlite::NAME` (`main.rs` declares `#[macro_use] mod support;`
/// before the test modules, which bring `Backend` into scope with `use support::*`).
#[allow(unused_macros)]
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

pub const MIN: i64 = 60_000;
pub const WINDOW: i64 = 10 * MIN;

/// A database that lives as long as the test.
pub enum Db {
    Pg(testkit::TestDatabase),
    Sqlite(tempfile::TempDir),
}

#[derive(Clone, Copy, Debug)]
pub enum Backend {
    Postgres,
    Sqlite,
}

pub async fn store(backend: Backend) -> (Store, Db) {
    let (store, db) = match backend {
        Backend::Postgres => {
            let db = testkit::fresh_database("web").await;
            let store = Store::connect(db.url())
                .await
                .expect("connect to test database");
            (store, Db::Pg(db))
        }
        Backend::Sqlite => {
            let dir = tempfile::tempdir().expect("temp dir");
            let path = dir.path().join("audit.db");
            let store = Store::connect(&format!("sqlite:{}", path.display()))
                .await
                .expect("open sqlite");
            (store, Db::Sqlite(dir))
        }
    };
    store.migrate().await.expect("migrate");
    (store, db)
}

/// producer (no progress) → regional, one-to-one. (Many-to-one aggregation is
/// covered by the engine's table tests.)
pub const TOPOLOGY: &str = r#"
[topology]
window = "10m"
grace = "20m"
stall_after = "30m"
tiers = [
  { name = "producer", progress = false },
  { name = "regional" },
]
[[topology.edges]]
upstream = "producer"
downstream = "regional"
"#;

pub fn config(extra: &str) -> Config {
    let config: Config =
        toml::from_str(&format!("{TOPOLOGY}\n{extra}")).expect("test config parses");
    config.validate().expect("test config is valid");
    config
}

/// A state on a fresh `backend` store with `config(extra)`.
pub async fn state(backend: Backend, extra: &str) -> (AppState, Db) {
    let (store, db) = store(backend).await;
    (AppState::new(config(extra), store).expect("state"), db)
}

/// Config of one webhook channel, "hook", posting to `url`; evaluation hourly, so the
/// test drives the cycles.
pub fn one_webhook(url: &str) -> String {
    format!(
        r#"
[serve]
evaluate_every = "1h"
[[alerting.channels]]
name = "hook"
kind = "webhook"
url = "{url}"
"#
    )
}

pub use common::now_ms;

/// The start of a window that settled a while ago (2 h before now).
pub fn settled_window() -> i64 {
    (now_ms() - 120 * MIN).div_euclid(WINDOW) * WINDOW
}

pub fn increment(
    topic: &str,
    tier: &str,
    dc: &str,
    window_start: i64,
    count: u64,
    checksum: u64,
) -> Message {
    // latencies 1.02^200 ≈ 52 ms (count - 1 of them) and one at 1.02^300 ≈ 380 ms
    let buckets = if count == 0 {
        vec![]
    } else if count == 1 {
        vec![(300, 1)]
    } else {
        vec![(200, count - 1), (300, 1)]
    };
    Message {
        version: audit_lib::AUDIT_MESSAGE_VERSION,
        uuid: Uuid::new_v4(),
        topic: topic.into(),
        tier: tier.into(),
        datacenter: dc.into(),
        host: format!("{tier}-{dc}-0"),
        emitted_at: now_ms(),
        body: AuditBody::Increment(Increment {
            window_start,
            window_end: window_start + WINDOW,
            stats: WindowStats {
                count,
                bytes: count * 100,
                checksum: audit_lib::Checksum(checksum),
                latency: LatencyHistogram::from_buckets(0, 0, 380, buckets).unwrap(),
                // No record times: as an emitter older than the record-time fields (the
                // tests of the record-time rule add them).
                offsets: vec![store::OffsetSpan {
                    max: 1000 + count as i64 - 1,
                    ..store::OffsetSpan::new(0, 1000, None)
                }],
                ..WindowStats::default()
            },
        }),
    }
}

/// A progress report of one partition by the auditor `host` of `tier`/`dc`.
#[allow(clippy::too_many_arguments)]
pub fn progress_of(
    topic: &str,
    tier: &str,
    dc: &str,
    host: &str,
    emitted_at: i64,
    partition: i32,
    next_offset: i64,
    record_time: Option<i64>,
    lag: Option<i64>,
) -> Message {
    Message {
        version: audit_lib::AUDIT_MESSAGE_VERSION,
        uuid: Uuid::new_v4(),
        topic: topic.into(),
        tier: tier.into(),
        datacenter: dc.into(),
        host: host.into(),
        emitted_at,
        body: AuditBody::Progress(vec![PartitionProgress {
            partition,
            next_offset,
            record_time,
            lag,
            ..Default::default()
        }]),
    }
}

/// The auditor of `tier`/`dc` has read `topic` up to now.
pub fn caught_up(topic: &str, tier: &str, dc: &str) -> Message {
    let host = format!("{tier}-{dc}-0");
    progress_of(
        topic,
        tier,
        dc,
        &host,
        now_ms(),
        0,
        5000,
        Some(now_ms()),
        Some(0),
    )
}

pub async fn write(store: &Store, messages: Vec<Message>) {
    let batch = Batch {
        messages,
        rejects: vec![],
        received_at_ms: now_ms(),
    };
    store.write_batch(&batch).await.expect("seed batch");
}

/// `topic` lost 10 of 100 messages between producer and regional in `window`.
pub async fn seed_loss(store: &Store, topic: &str, window: i64) {
    write(
        store,
        vec![
            increment(topic, "producer", "dc1", window, 100, 1000),
            increment(topic, "regional", "dc1", window, 90, 900),
            caught_up(topic, "regional", "dc1"),
        ],
    )
    .await;
}

pub struct Response {
    pub status: StatusCode,
    pub headers: axum::http::HeaderMap,
    pub body: Value,
}

pub async fn request(state: &AppState, method: &str, uri: &str, token: Option<&str>) -> Response {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let response = web::app(state.clone())
        .oneshot(req.body(Body::empty()).expect("request"))
        .await
        .expect("infallible service");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 16 << 20)
        .await
        .expect("body");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
    };
    Response {
        status,
        headers,
        body,
    }
}

pub async fn get(state: &AppState, uri: &str) -> Response {
    request(state, "GET", uri, None).await
}

/// Log lines, for tests that check what reaches the log.
#[derive(Clone, Default)]
pub struct Logs(pub std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Logs {
    /// Captures this thread's log lines until the guard is dropped.
    pub fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let guard = tracing::subscriber::set_default(
            tracing_subscriber::fmt()
                .with_writer(logs.clone())
                .with_ansi(false)
                .finish(),
        );
        (logs, guard)
    }

    /// What was logged so far.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

/// Serves `app` on 127.0.0.1 (a free port) in the background; its base URL.
pub async fn serve_local(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

/// The paths `router` serves, read from its `Debug` form (axum has no other way to
/// list them; the caller checks that known paths are found, so a change of that form
/// fails rather than passes). Axum's internal fallback paths are left out.
pub fn router_paths(router: &axum::Router) -> std::collections::BTreeSet<String> {
    format!("{router:?}")
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with('/') && !s.contains("__private__"))
        .map(str::to_string)
        .collect()
}

/// What makes an OpenAPI 3 document usable beyond its JSON: utoipa's model reads it,
/// every `$ref` resolves, operation ids are unique, every path template parameter is
/// declared as a required path parameter (and no other), parameters are unique and
/// have a schema, every operation answers at least one status with a description, and
/// security requirements name declared schemes.
pub fn assert_valid_openapi_3(doc: &Value) {
    use std::collections::BTreeSet;
    assert!(
        doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")),
        "openapi: {}",
        doc["openapi"]
    );
    assert!(doc["info"]["title"].is_string() && doc["info"]["version"].is_string());
    let _: utoipa::openapi::OpenApi =
        serde_json::from_value(doc.clone()).expect("utoipa's OpenAPI model reads the document");
    fn refs<'v>(v: &'v Value, out: &mut Vec<&'v str>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    out.push(r);
                }
                m.values().for_each(|x| refs(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    refs(doc, &mut all);
    assert!(!all.is_empty());
    for r in all {
        let target = r.strip_prefix('#').and_then(|p| doc.pointer(p));
        assert!(target.is_some(), "$ref {r} does not resolve");
    }
    let schemes = &doc["components"]["securitySchemes"];
    let check_security = |s: &Value, at: &str| {
        for requirement in s.as_array().into_iter().flatten() {
            for name in requirement.as_object().expect("requirement").keys() {
                assert!(
                    schemes[name].is_object(),
                    "{at}: unknown security scheme {name}"
                );
            }
        }
    };
    check_security(&doc["security"], "document");
    let mut ids = BTreeSet::new();
    let paths = doc["paths"].as_object().expect("paths");
    assert!(!paths.is_empty());
    for (path, item) in paths {
        assert!(path.starts_with('/'), "{path}");
        let template: BTreeSet<&str> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .collect();
        for (method, op) in item.as_object().expect("path item") {
            if ["summary", "description", "parameters", "servers"].contains(&method.as_str()) {
                continue;
            }
            let at = format!("{method} {path}");
            assert!(
                ["get", "put", "post", "delete", "options", "head", "patch", "trace"]
                    .contains(&method.as_str()),
                "{at}: not a method"
            );
            let id = op["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{at}: operationId"));
            assert!(ids.insert(id.to_string()), "{at}: operationId {id} twice");
            let mut seen = BTreeSet::new();
            let mut in_path = BTreeSet::new();
            for p in op["parameters"].as_array().into_iter().flatten() {
                let name = p["name"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{at}: parameter name"));
                let place = p["in"].as_str().unwrap_or_default();
                assert!(
                    ["query", "header", "path", "cookie"].contains(&place),
                    "{at}: {name} in {place:?}"
                );
                assert!(seen.insert((name, place)), "{at}: parameter {name} twice");
                assert!(
                    p["schema"].is_object() || p["content"].is_object(),
                    "{at}: {name} schema"
                );
                if place == "path" {
                    assert_eq!(p["required"], true, "{at}: path parameter {name} required");
                    in_path.insert(name);
                }
            }
            assert_eq!(in_path, template, "{at}: path parameters");
            let responses = op["responses"]
                .as_object()
                .unwrap_or_else(|| panic!("{at}: responses"));
            assert!(!responses.is_empty(), "{at}: no responses");
            for (status, response) in responses {
                assert!(
                    status == "default"
                        || status.parse::<u16>().is_ok_and(|s| (100..600).contains(&s)),
                    "{at}: status {status}"
                );
                assert!(
                    response["description"].is_string() || response["$ref"].is_string(),
                    "{at} {status}: description"
                );
            }
            check_security(&op["security"], &at);
        }
    }
}

/// Checks `value` against `schema` of the OpenAPI document `doc`, for the JSON Schema
/// a derived document uses: `$ref`, `oneOf`, `type` (one or a list), `enum`, object
/// `properties`/`required`/`additionalProperties` (a key the schema does not name
/// fails), array `items`. Panics with the JSON path of the first mismatch.
pub fn assert_conforms(doc: &Value, schema: &Value, value: &Value, at: &str) {
    if let Err(e) = conforms(doc, schema, value, at) {
        panic!("{e}");
    }
}

fn conforms(doc: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    if let Some(r) = schema["$ref"].as_str() {
        let target = doc.pointer(r.trim_start_matches('#'));
        let target = target.ok_or_else(|| format!("{at}: {r} does not resolve"))?;
        return conforms(doc, target, value, at);
    }
    if let Some(alternatives) = schema["oneOf"].as_array() {
        let fits = alternatives
            .iter()
            .filter(|s| conforms(doc, s, value, at).is_ok())
            .count();
        return match fits {
            1 => Ok(()),
            n => Err(format!("{at}: {value} fits {n} of {alternatives:?}")),
        };
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let is = |t: &str| match t {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => false,
    };
    if !types.is_empty() && !types.iter().any(|t| is(t)) {
        return Err(format!("{at}: {value} is not {types:?}"));
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(value) {
            return Err(format!("{at}: {value} not in {allowed:?}"));
        }
    }
    if let Some(object) = value.as_object() {
        for key in schema["required"].as_array().into_iter().flatten() {
            let key = key.as_str().unwrap_or_default();
            if !object.contains_key(key) {
                return Err(format!("{at}: required {key} missing"));
            }
        }
        for (key, v) in object {
            let at = format!("{at}.{key}");
            match (&schema["properties"][key], &schema["additionalProperties"]) {
                (Value::Object(_), _) => conforms(doc, &schema["properties"][key], v, &at)?,
                (_, Value::Object(_)) => conforms(doc, &schema["additionalProperties"], v, &at)?,
                _ => return Err(format!("{at}: not in the schema")),
            }
        }
    }
    if let (Some(items), Some(schema)) = (value.as_array(), schema.get("items")) {
        for (i, v) in items.iter().enumerate() {
            conforms(doc, schema, v, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
}
