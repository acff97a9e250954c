//! The completeness gate (`GET /api/v1/topics/{topic}/completeness`) against real
//! stores: every scenario runs on PostgreSQL (a fresh database) and on SQLite.

use crate::support;

use axum::http::StatusCode;
use serde_json::{json, Value};
use store::Message;
use support::*;
use web::{AppState, Config};

on_both_backends!(
    six_windows_pending_complete_and_short_at_the_default_threshold,
    a_day_of_windows_in_one_call,
    bad_parameters_are_json_400s_that_say_why,
    staged_increments_keep_a_window_pending_until_rolled_up,
);

const GRACE: i64 = 20 * MIN;

/// producer (no progress) → regional one-to-one; regional → aggregate many-to-one
/// (dc1 and dc2 both feed the aggregate cluster `agg`).
const TOPOLOGY: &str = r#"
[topology]
window = "10m"
grace = "20m"
stall_after = "30m"
completeness = 0.999
tiers = [
  { name = "producer", progress = false },
  { name = "regional" },
  { name = "aggregate" },
]
[[topology.edges]]
upstream = "producer"
downstream = "regional"
[[topology.edges]]
upstream = "regional"
downstream = "aggregate"
datacenters = { dc1 = "agg", dc2 = "agg" }
"#;

async fn state(backend: Backend) -> (AppState, Db) {
    let (store, db) = store(backend).await;
    let config: Config = toml::from_str(TOPOLOGY).expect("test config parses");
    (AppState::new(config, store).expect("state"), db)
}

/// The auditor of `tier`/`dc` has read `topic` up to `record_time` and is still
/// behind (lag 3), reporting now.
fn read_up_to(topic: &str, tier: &str, dc: &str, record_time: i64) -> Message {
    let host = format!("{tier}-{dc}-0");
    progress_of(
        topic,
        tier,
        dc,
        &host,
        now_ms(),
        0,
        4000,
        Some(record_time),
        Some(3),
    )
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Six settled windows `w0 .. w5` of `orders` at tier `aggregate` in `agg`, whose
/// reference is `regional` summed over dc1 and dc2:
/// - w0, w3: no data at either tier;
/// - w1: 1000 + 1000 regional, 1999 aggregate (99.95 %);
/// - w2: 600 + 400 regional, 990 aggregate (99.0 %);
/// - w4: 500 + 500 regional, 1000 aggregate (100 %, only when dc2 is summed in);
/// - w5: 100 + 100 regional, 150 aggregate, and the aggregate auditor has not yet
///   read past w5's end + grace: pending.
async fn seed_six(state: &AppState) -> i64 {
    let w5 = settled_window();
    let w = |i: i64| w5 - (5 - i) * WINDOW;
    let t = "orders";
    write(
        &state.store,
        vec![
            increment(t, "regional", "dc1", w(1), 1000, 1),
            increment(t, "regional", "dc2", w(1), 1000, 2),
            increment(t, "aggregate", "agg", w(1), 1999, 3),
            increment(t, "regional", "dc1", w(2), 600, 4),
            increment(t, "regional", "dc2", w(2), 400, 5),
            increment(t, "aggregate", "agg", w(2), 990, 6),
            increment(t, "regional", "dc1", w(4), 500, 7),
            increment(t, "regional", "dc2", w(4), 500, 8),
            increment(t, "aggregate", "agg", w(4), 1000, 15),
            increment(t, "regional", "dc1", w(5), 100, 9),
            increment(t, "regional", "dc2", w(5), 100, 10),
            increment(t, "aggregate", "agg", w(5), 150, 11),
            // The one-to-one edge for dc1 in w1: producer 1000, regional 1000.
            increment(t, "producer", "dc1", w(1), 1000, 1),
            caught_up(t, "regional", "dc1"),
            caught_up(t, "regional", "dc2"),
            read_up_to(t, "aggregate", "agg", w(5) + WINDOW + GRACE - 1),
        ],
    )
    .await;
    w(0)
}

/// window_start, observed, reference, ratio, no_data, lifecycle, complete, status
type Row = (i64, u64, u64, Value, bool, String, bool, String);

fn windows(body: &Value) -> Vec<Row> {
    body["windows"]
        .as_array()
        .unwrap_or_else(|| panic!("no windows: {body}"))
        .iter()
        .map(|x| {
            (
                x["window_start"].as_i64().unwrap(),
                x["observed"].as_u64().unwrap(),
                x["reference"].as_u64().unwrap(),
                x["ratio"].clone(),
                x["no_data"].as_bool().unwrap(),
                x["lifecycle"].as_str().unwrap().to_string(),
                x["complete"].as_bool().unwrap(),
                x["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

async fn six_windows_pending_complete_and_short_at_the_default_threshold(backend: Backend) {
    let (state, _db) = state(backend).await;
    let w0 = seed_six(&state).await;
    let w = |i: i64| w0 + i * WINDOW;
    let end = w(6);
    // RFC 3339 and epoch milliseconds, as every route takes them.
    let uri = format!(
        "/api/v1/topics/orders/completeness?tier=aggregate&datacenter=agg&from={}&to={end}",
        rfc3339(w0)
    );
    let r = get(&state, &uri).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let b = &r.body;
    assert_eq!(b["topic"], "orders");
    assert_eq!(b["tier"], "aggregate");
    assert_eq!(b["datacenter"], "agg");
    assert_eq!(b["reference_tier"], "regional");
    assert_eq!(b["reference_datacenters"], json!(["dc1", "dc2"]));
    assert_eq!(b["from"], w0);
    assert_eq!(b["to"], end);
    assert_eq!(b["window_ms"], WINDOW);
    assert_eq!(
        b["threshold"], 0.999,
        "the default of [topology] completeness"
    );
    let final_ = "final".to_string();
    assert_eq!(
        windows(b),
        vec![
            (
                w(0),
                0,
                0,
                json!(1.0),
                true,
                final_.clone(),
                true,
                "complete".into()
            ),
            (
                w(1),
                1999,
                2000,
                json!(0.9995),
                false,
                final_.clone(),
                true,
                "complete".into()
            ),
            (
                w(2),
                990,
                1000,
                json!(0.99),
                false,
                final_.clone(),
                false,
                "incomplete".into()
            ),
            (
                w(3),
                0,
                0,
                json!(1.0),
                true,
                final_.clone(),
                true,
                "complete".into()
            ),
            // Only with dc2 summed into the reference is this 1000 / 1000.
            (
                w(4),
                1000,
                1000,
                json!(1.0),
                false,
                final_.clone(),
                true,
                "complete".into()
            ),
            (
                w(5),
                150,
                200,
                json!(0.75),
                false,
                "settling".into(),
                false,
                "pending".into()
            ),
        ],
        "{b}"
    );
    assert_eq!(b["windows"][2]["verdict"], "loss");
    assert_eq!(b["windows"][5]["verdict"], "pending");
    assert!(
        b["windows"][5]["reason"]
            .as_str()
            .unwrap()
            .contains("auditor aggregate/agg"),
        "{b}"
    );
    assert_eq!(b["complete"], false);
    assert_eq!(b["status"], "incomplete", "a final window is short: {b}");
    assert_eq!(b["windows_total"], 6);
    assert_eq!(b["windows_complete"], 4);
    assert_eq!(b["windows_pending"], 1);
    assert_eq!(b["windows_incomplete"], 1);
    assert_eq!(b["observed"], 1999 + 990 + 1000 + 150);
    assert_eq!(b["reference"], 2000 + 1000 + 1000 + 200);

    // A looser threshold of the request makes the 99 % window complete; the range
    // still waits for the pending one.
    let r = get(&state, &format!("{uri}&threshold=0.99")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["threshold"], 0.99);
    assert_eq!(r.body["windows"][2]["complete"], true, "{}", r.body);
    assert_eq!(r.body["windows_complete"], 5);
    assert_eq!(r.body["status"], "pending");
    assert_eq!(r.body["complete"], false);

    // Late data completes the last window and the aggregate auditor catches up.
    write(
        &state.store,
        vec![
            increment("orders", "aggregate", "agg", w(5), 50, 8),
            caught_up("orders", "aggregate", "agg"),
        ],
    )
    .await;
    let r = get(&state, &format!("{uri}&threshold=0.99")).await;
    assert_eq!(r.body["windows"][5]["complete"], true, "{}", r.body);
    assert_eq!(r.body["windows"][5]["lifecycle"], "final");
    assert_eq!(r.body["windows"][5]["ratio"], 1.0);
    assert_eq!(r.body["complete"], true, "{}", r.body);
    assert_eq!(r.body["status"], "complete");
    let r = get(&state, &uri).await;
    assert_eq!(r.body["complete"], false, "99 % is still short of 0.999");

    // A one-to-one edge: regional in dc1 against the producers of dc1.
    let r = get(
        &state,
        &format!(
            "/api/v1/topics/orders/completeness?tier=regional&datacenter=dc1&from={}&to={}",
            w(1),
            w(2)
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["reference_tier"], "producer");
    assert_eq!(r.body["reference_datacenters"], json!(["dc1"]));
    assert_eq!(
        windows(&r.body),
        vec![(
            w(1),
            1000,
            1000,
            json!(1.0),
            false,
            final_,
            true,
            "complete".into()
        )]
    );
    assert_eq!(r.body["complete"], true);
}

async fn a_day_of_windows_in_one_call(backend: Backend) {
    let (state, _db) = state(backend).await;
    let w0 = seed_six(&state).await;
    let to = w0 + 6 * WINDOW;
    let from = to - 24 * 60 * MIN;
    let r = get(
        &state,
        &format!(
            "/api/v1/topics/orders/completeness?tier=aggregate&datacenter=agg&from={}&to={}",
            rfc3339(from),
            rfc3339(to)
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let ws = windows(&r.body);
    assert_eq!(ws.len(), 144, "a day of 10-minute windows");
    assert_eq!(ws[0].0, from);
    assert_eq!(r.body["windows_total"], 144);
    // The 138 windows before w0 have no data and are final: complete with ratio 1.
    assert!(ws[..138]
        .iter()
        .all(|x| x.4 && x.3 == json!(1.0) && x.6 && x.7 == "complete"));
    assert_eq!(r.body["windows_complete"], 138 + 4);
    // An hour, from a time inside a window: the window it falls in is included.
    let r = get(
        &state,
        &format!(
            "/api/v1/topics/orders/completeness?tier=aggregate&datacenter=agg&from={}&to={}",
            w0 + 5 * MIN,
            w0 + 60 * MIN
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["windows_total"], 6);
    assert_eq!(r.body["windows"][0]["window_start"], w0);
}

async fn bad_parameters_are_json_400s_that_say_why(backend: Backend) {
    let (state, _db) = state(backend).await;
    let w = settled_window();
    let range = format!("from={w}&to={}", w + WINDOW);
    let cases: Vec<(String, &str)> = vec![
        (
            format!("tier=nope&datacenter=agg&{range}"),
            "tier \"nope\" is not in the topology (tiers: producer, regional, aggregate)",
        ),
        (
            format!("tier=producer&datacenter=dc1&{range}"),
            "tier \"producer\" has no upstream edge",
        ),
        (
            format!("tier=producer&datacenter=dc1&{range}"),
            "it is the reference of regional",
        ),
        (
            format!("tier=aggregate&datacenter=dc1&{range}"),
            "datacenter \"dc1\" is not a downstream datacenter of regional → aggregate (agg)",
        ),
        (format!("datacenter=agg&{range}"), "tier is required"),
        (format!("tier=aggregate&{range}"), "datacenter is required"),
        (
            format!("tier=aggregate&datacenter=agg&to={}", w + WINDOW),
            "from and to are required",
        ),
        (
            format!("tier=aggregate&datacenter=agg&{range}&threshold=1.5"),
            "threshold",
        ),
        (
            format!("tier=aggregate&datacenter=agg&{range}&threshold=NaN"),
            "threshold",
        ),
        (
            format!("tier=aggregate&datacenter=agg&{range}&threshold=high"),
            "threshold",
        ),
        (
            format!(
                "tier=aggregate&datacenter=agg&from={w}&to={}",
                w + 8 * 24 * 60 * MIN
            ),
            "exceeds the maximum",
        ),
        (
            format!("tier=aggregate&datacenter=agg&from=yesterday&to={w}"),
            "neither RFC 3339 nor epoch",
        ),
        (
            format!("tier=aggregate&datacenter=agg&{range}&colour=red"),
            "unknown field",
        ),
        (
            format!("tier=regional&upstream=aggregate&datacenter=dc1&{range}"),
            "no edge aggregate → regional",
        ),
    ];
    // Nothing known of the topic, or of the datacenter: a 404 rather than a gate that
    // waits for an auditor that does not exist.
    seed_six(&state).await;
    for query in [
        format!("/api/v1/topics/orderz/completeness?tier=aggregate&datacenter=agg&{range}"),
        format!("/api/v1/topics/orders/completeness?tier=regional&datacenter=dc9&{range}"),
    ] {
        let r = get(&state, &query).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{query}: {}", r.body);
        let m = r.body["error"]["message"].as_str().unwrap_or_default();
        assert!(m.contains("nothing is known of topic"), "{query}: {m}");
    }
    for (query, message) in cases {
        let uri = format!("/api/v1/topics/orders/completeness?{query}");
        let r = get(&state, &uri).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{uri}: {}", r.body);
        assert_eq!(r.body["error"]["status"], 400, "{uri}: {}", r.body);
        let m = r.body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            m.contains(message),
            "{uri}: message {m:?} lacks {message:?}"
        );
    }
}

/// The OpenAPI document describes the route as it answers: the keys of a real
/// response and of its windows are the schema's required keys and the example's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_describes_the_completeness_route_as_it_answers() {
    let (state, _db) = state(Backend::Sqlite).await;
    let w0 = seed_six(&state).await;
    let r = get(
        &state,
        &format!(
            "/api/v1/topics/orders/completeness?tier=aggregate&datacenter=agg&from={w0}&to={}",
            w0 + 6 * WINDOW
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let doc = get(&state, "/api/openapi.json").await.body;
    let keys = |v: &Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    let required = |v: &Value| {
        let mut k: Vec<String> = v["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect();
        k.sort();
        k
    };
    let schemas = &doc["components"]["schemas"];
    assert_eq!(required(&schemas["Completeness"]), keys(&r.body));
    assert_eq!(
        required(&schemas["CompletenessWindow"]),
        keys(&r.body["windows"][0])
    );
    assert_eq!(keys(&schemas["Completeness"]["properties"]), keys(&r.body));
    let op = &doc["paths"]["/api/v1/topics/{topic}/completeness"]["get"];
    let params: Vec<&str> = op["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        params,
        vec![
            "topic",
            "tier",
            "datacenter",
            "from",
            "to",
            "threshold",
            "upstream"
        ]
    );
    let examples = op["responses"]["200"]["content"]["application/json"]["examples"]
        .as_object()
        .expect("response examples");
    assert!(!examples.is_empty());
    for (name, e) in examples {
        assert_eq!(keys(&e["value"]), keys(&r.body), "example {name}");
        for w in e["value"]["windows"].as_array().unwrap() {
            assert_eq!(keys(w), keys(&r.body["windows"][0]), "example {name}");
        }
    }
    // The six-window example is this test's scenario.
    let six = &examples["six_windows"]["value"];
    for k in [
        "windows_complete",
        "windows_pending",
        "windows_incomplete",
        "status",
    ] {
        assert_eq!(six[k], r.body[k], "{k}");
    }
    let topology = get(&state, "/api/v1/topology").await.body;
    assert_eq!(required(&schemas["Topology"]), keys(&topology));
}

/// On PostgreSQL the collector stages increments and adds them to their windows at a
/// later roll-up, but stores progress at once: until the roll-up, a window can look
/// final with part of its counts. Here the reference tier's 150 messages are staged
/// only: read as they stand, regional's 100 against a reference of 0 would pass the
/// gate as complete. The gate says pending until they are rolled up, then incomplete.
async fn staged_increments_keep_a_window_pending_until_rolled_up(backend: Backend) {
    let (state, _db) = state(backend).await;
    let w = settled_window();
    write(
        &state.store,
        vec![increment("orders", "regional", "dc1", w, 100, 1)],
    )
    .await;
    let staged = store::Batch {
        messages: vec![
            increment("orders", "producer", "dc1", w, 150, 2),
            caught_up("orders", "regional", "dc1"),
        ],
        rejects: vec![],
        received_at_ms: now_ms(),
    };
    store::Ingest::stage_batch(&state.store, &staged)
        .await
        .expect("stage");
    let uri = format!(
        "/api/v1/topics/orders/completeness?tier=regional&datacenter=dc1&from={w}&to={}",
        w + WINDOW
    );
    let r = get(&state, &uri).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    match backend {
        Backend::Postgres => {
            assert_eq!(r.body["status"], "pending", "{}", r.body);
            assert_eq!(r.body["windows"][0]["complete"], false);
            assert!(
                r.body["windows"][0]["reason"]
                    .as_str()
                    .unwrap()
                    .contains("roll-up"),
                "{}",
                r.body
            );
        }
        // SQLite adds increments up as it stores them.
        Backend::Sqlite => assert_eq!(r.body["status"], "incomplete", "{}", r.body),
    }
    while store::Ingest::rollup(&state.store, 1000)
        .await
        .expect("roll-up")
        > 0
    {}
    let r = get(&state, &uri).await;
    assert_eq!(r.body["status"], "incomplete", "{}", r.body);
    assert_eq!(r.body["windows"][0]["observed"], 100);
    assert_eq!(r.body["windows"][0]["reference"], 150);
}
