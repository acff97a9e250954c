//! Golden answers of the read API on a seeded store, on PostgreSQL and SQLite.
//!
//! Refactors of the store and web (one domain vocabulary, the store owning all SQL, a
//! derived OpenAPI document) must not change one byte of what a client reads. This test
//! seeds a fixed scenario (loss, duplication, an exact topic, a window still settling,
//! offsets, latencies, a region with only one tier), asks every read endpoint and
//! compares the raw response bodies with the files in `tests/golden/`.
//!
//! Only what depends on the wall clock is normalised, on the raw text (so key order,
//! spacing and number formatting are still compared byte for byte):
//! - every 13-digit millisecond timestamp becomes `T+<ms after the seeded base window>`
//!   (the seed is placed relative to an aligned base two hours back), except values
//!   within 10 minutes of the real clock (seeding and evaluation times), which become
//!   `"<now>"`;
//! - RFC 3339 times become `<rfc3339>`;
//! - the durations that are measured against the clock (`age_ms`-like fields listed in
//!   `DYNAMIC_KEYS`) become `"<dyn>"`.
//!
//! To record after an intended change of the API: `GOLDEN_RECORD=1 cargo test -p web
//! --test it golden::`, then review the diff of `tests/golden/` like code.

use crate::support;

use axum::http::StatusCode;
use support::*;
use web::AppState;

on_both_backends!(read_api_answers_match_the_recorded_ones);

/// Keys whose values are durations measured against the wall clock.
const DYNAMIC_KEYS: &[&str] = &[
    "age_ms",
    "age_seconds",
    "oldest_pending_age_ms",
    "last_seen_age_ms",
    "since_ms",
    "lag_ms",
    "evaluation_age_ms",
    "last_evaluation_age_ms",
    "last_report_age_ms",
    "stalled_for_ms",
];

const TOPICS: &[&str] = &["orders", "payments", "refunds", "settling"];

async fn seed(state: &AppState, base: i64) {
    let w0 = base;
    let w1 = base + WINDOW;
    let w2 = base + 2 * WINDOW;
    // the window that is open now: 12 windows after the base, always (2 h = 12 × 10 min)
    let open = base + 12 * WINDOW;
    let mut messages = vec![
        // orders: 10 of 100 lost in w0, exact in w1
        increment("orders", "producer", "dc1", w0, 100, 1000),
        increment("orders", "regional", "dc1", w0, 90, 900),
        increment("orders", "producer", "dc1", w1, 40, 400),
        increment("orders", "regional", "dc1", w1, 40, 400),
        // payments: exact in three windows
        increment("payments", "producer", "dc1", w0, 50, 5),
        increment("payments", "regional", "dc1", w0, 50, 5),
        increment("payments", "producer", "dc1", w1, 7, 70),
        increment("payments", "regional", "dc1", w1, 7, 70),
        increment("payments", "producer", "dc1", w2, 1, 1),
        increment("payments", "regional", "dc1", w2, 1, 1),
        // refunds: duplication (110 of 100) in w1, and a second datacenter
        increment("refunds", "producer", "dc1", w1, 100, 1000),
        increment("refunds", "regional", "dc1", w1, 110, 1100),
        increment("refunds", "producer", "dc2", w1, 20, 200),
        increment("refunds", "regional", "dc2", w1, 20, 200),
        // settling: the open window, only the producer so far
        increment("settling", "producer", "dc1", open, 5, 50),
    ];
    for topic in TOPICS {
        messages.push(caught_up(topic, "regional", "dc1"));
    }
    messages.push(caught_up("refunds", "regional", "dc2"));
    write(&state.store, messages).await;
}

/// The read requests a client makes, with a file name for each answer.
fn requests(base: i64) -> Vec<(String, String)> {
    let from = base - WINDOW;
    let to = base + 14 * WINDOW;
    let range = format!("from={from}&to={to}");
    let mut r = vec![
        ("topology".to_string(), "/api/v1/topology".to_string()),
        ("topics".into(), format!("/api/v1/topics?{range}")),
        ("anomalies".into(), format!("/api/v1/anomalies?{range}")),
        (
            "anomalies_loss_page".into(),
            format!("/api/v1/anomalies?{range}&kind=loss&page=1&page_size=1"),
        ),
        ("healthz".into(), "/healthz".into()),
        ("readyz".into(), "/readyz".into()),
    ];
    for topic in TOPICS {
        r.push((
            format!("windows_{topic}"),
            format!("/api/v1/topics/{topic}/windows?{range}"),
        ));
        r.push((
            format!("compare_{topic}"),
            format!("/api/v1/topics/{topic}/compare?{range}"),
        ));
        r.push((
            format!("completeness_{topic}"),
            format!("/api/v1/topics/{topic}/completeness?{range}&tier=regional&datacenter=dc1"),
        ));
    }
    r.push((
        "windows_refunds_dc2".into(),
        format!("/api/v1/topics/refunds/windows?{range}&datacenter=dc2&tier=regional"),
    ));
    r.push((
        "offsets_orders".into(),
        format!("/api/v1/topics/orders/windows/{base}/offsets"),
    ));
    r.push((
        "offsets_orders_regional".into(),
        format!("/api/v1/topics/orders/windows/{base}/offsets?tier=regional"),
    ));
    r
}

async fn raw_get(state: &AppState, uri: &str) -> (StatusCode, String) {
    use tower::ServiceExt;
    let request = axum::http::Request::builder()
        .uri(uri)
        .body(axum::body::Body::empty())
        .expect("request");
    let response = web::app(state.clone())
        .oneshot(request)
        .await
        .expect("infallible service");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 16 << 20)
        .await
        .expect("body");
    (
        status,
        String::from_utf8(bytes.to_vec()).expect("UTF-8 body"),
    )
}

/// The clock-dependent parts of `text` replaced (see the module comment).
fn normalise(text: &str, base: i64, now: i64) -> String {
    let keys = DYNAMIC_KEYS.join("|");
    let dynamic = regex::Regex::new(&format!(r#""({keys})":-?[0-9.]+"#)).unwrap();
    let text = dynamic.replace_all(text, r#""$1":"<dyn>""#);
    let rfc =
        regex::Regex::new(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)").unwrap();
    let text = rfc.replace_all(&text, "<rfc3339>");
    let millis = regex::Regex::new(r"\b1\d{12}\b").unwrap();
    millis
        .replace_all(&text, |c: &regex::Captures| {
            let v: i64 = c[0].parse().unwrap();
            if (v - now).abs() <= 10 * MIN {
                "\"<now>\"".to_string()
            } else {
                format!("\"T{:+}\"", v - base)
            }
        })
        .into_owned()
}

async fn read_api_answers_match_the_recorded_ones(backend: Backend) {
    let (state, _db) = state(backend, "").await;
    let base = settled_window();
    seed(&state, base).await;
    state.evaluate(now_ms()).await.expect("evaluate");

    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let record = std::env::var_os("GOLDEN_RECORD").is_some();
    let mut differ = Vec::new();
    for (name, uri) in requests(base) {
        let (status, body) = raw_get(&state, &uri).await;
        let now = now_ms();
        let answer = format!(
            "{uri_shape}\n{status}\n{}\n",
            normalise(&body, base, now),
            uri_shape = normalise(&uri, base, now)
        );
        let path = dir.join(format!("{name}.txt"));
        if record {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &answer).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (record with GOLDEN_RECORD=1)", path.display()));
        if expected != answer {
            differ.push(format!(
                "{name} ({backend:?}):\n--- recorded\n{expected}--- now\n{answer}"
            ));
        }
    }
    assert!(
        differ.is_empty(),
        "{} answers differ from tests/golden/:\n{}",
        differ.len(),
        differ.join("\n")
    );
}
