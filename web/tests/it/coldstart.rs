//! Cold start: the first cycle judges the recent windows only (serve is ready), the rest
//! of the horizon is judged in the background by load steps, newest first. While
//! loading, `/readyz` says what is loaded, the index answers only for ranges it has
//! judged (503 for the rest, never an "ok" by omission), and the alerts of the judged
//! windows are published with the bound they are judged from (a judged window pages at
//! once; an open alert on an older window is not resolved by absence). Once loaded,
//! every answer equals a full evaluation's.

use crate::support;

use axum::http::StatusCode;
use support::*;
use web::AppState;

on_both_backends!(
    cold_start_loads_recent_windows_first_then_equals_a_full_evaluation,
    the_evaluation_job_loads_the_horizon_in_the_background,
);

const HOUR: i64 = 60 * MIN;

const HORIZON: &str = r#"
[serve]
horizon = "2d"
max_range = "2d"
evaluate_every = "1h"
"#;

/// Losses (10 of 100) spread over the horizon: 40 minutes, 3 h, 10 h and 30 h back;
/// exact windows in between; one window still settling.
async fn seed(state: &AppState, now: i64) {
    let aligned = now.div_euclid(WINDOW) * WINDOW;
    let mut messages = Vec::new();
    for (i, topic) in ["orders", "payments", "refunds"].iter().enumerate() {
        for back in [4, 18, 60, 180] {
            let w = aligned - (back + i as i64) * WINDOW;
            messages.push(increment(topic, "producer", "dc1", w, 100, 1000));
            messages.push(increment(topic, "regional", "dc1", w, 90, 900));
        }
        for back in [2, 7, 30, 100, 200, 280] {
            let w = aligned - (back + i as i64) * WINDOW;
            messages.push(increment(topic, "producer", "dc1", w, 50, 5));
            messages.push(increment(topic, "regional", "dc1", w, 50, 5));
        }
        messages.push(caught_up(topic, "regional", "dc1"));
    }
    // A window still open: only the producer so far.
    messages.push(increment("settling", "producer", "dc1", aligned, 5, 50));
    messages.push(caught_up("settling", "regional", "dc1"));
    write(&state.store, messages).await;
}

fn anomalies_uri(from: i64, to: i64) -> String {
    format!("/api/v1/anomalies?from={from}&to={to}&page_size=1000")
}

async fn cold_start_loads_recent_windows_first_then_equals_a_full_evaluation(backend: Backend) {
    let (full, _db) = state(backend, HORIZON).await;
    let now = now_ms();
    seed(&full, now).await;
    full.evaluate(now).await.expect("full evaluation");
    // A second serve on the same store, starting cold.
    let cold = AppState::new(config(HORIZON), full.store.clone()).expect("state");

    let r = get(&cold, "/readyz").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", r.body);

    // The first cycle: the recent windows only.
    cold.evaluate_cycle(now).await.expect("first cycle");
    let r = get(&cold, "/readyz").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert_eq!(r.body["status"], "ready");
    let loading = &r.body["loading"];
    assert!(loading.is_object(), "loading reported: {:?}", r.body);
    let loaded_from = loading["loaded_from"].as_i64().expect("loaded_from");
    assert!(
        loaded_from <= now - HOUR,
        "the default hour is loaded: {loading:?}"
    );
    assert!(
        loaded_from > now - 3 * HOUR,
        "not more than the recent windows: {loading:?}"
    );
    assert!(
        loading["windows_evaluated"].as_i64().unwrap() > 0,
        "{loading:?}"
    );
    assert!(
        loading["horizon_remaining_ms"].as_i64().unwrap() > 40 * HOUR,
        "{loading:?}"
    );
    // The loaded range answers, with the recent loss of every topic.
    let recent = get(&cold, &anomalies_uri(loaded_from, now)).await;
    assert_eq!(recent.status, StatusCode::OK, "{:?}", recent.body);
    assert_eq!(recent.body["total"], 3, "{:?}", recent.body);
    // A range reaching before the loaded part is refused, not answered "no anomaly".
    for uri in [
        anomalies_uri(now - 24 * HOUR, now),
        format!("/api/v1/topics?from={}&to={now}", now - 24 * HOUR),
    ] {
        let r = get(&cold, &uri).await;
        assert_eq!(
            r.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{uri}: {:?}",
            r.body
        );
        let error = r.body["error"]["message"].as_str().unwrap_or_default();
        assert!(error.contains("loading"), "{uri}: {error}");
    }
    // The alerts of the judged windows are published at once: the recent losses page
    // while the rest loads, exactly those a full evaluation pages in that range.
    let expected = full.published_alerts().expect("full evaluation published");
    let judged = |from: i64| -> Vec<String> {
        expected
            .iter()
            .filter(|(_, a)| match &a.subject {
                web::alert::Subject::Window { window_start, .. } => *window_start >= from,
                web::alert::Subject::Auditor { .. } | web::alert::Subject::Evidence { .. } => true,
            })
            .map(|(k, _)| k.clone())
            .collect()
    };
    let partial = cold.published_alerts().expect("published while loading");
    assert_eq!(partial.judged_from, Some(loaded_from));
    assert_eq!(
        partial.keys().cloned().collect::<Vec<_>>(),
        judged(loaded_from)
    );
    assert_eq!(
        partial.len(),
        3,
        "the recent loss of each topic: {partial:?}"
    );

    // The background steps, newest first, until the horizon is loaded.
    let mut steps = 0;
    while !cold.load_step(now).await.expect("load step") {
        steps += 1;
        assert!(steps < 1000, "loading never ends");
        let r = get(&cold, "/readyz").await;
        let from = r.body["loading"]["loaded_from"]
            .as_i64()
            .expect("still loading");
        assert!(from < loaded_from, "each step loads older windows");
        // Never a page a full evaluation would not send (no fire-then-resolve).
        let partial = cold.published_alerts().expect("published while loading");
        assert_eq!(partial.judged_from, Some(from));
        assert_eq!(partial.keys().cloned().collect::<Vec<_>>(), judged(from));
    }
    assert!(steps > 1, "the horizon takes several steps ({steps})");
    let r = get(&cold, "/readyz").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.body);
    assert!(r.body.get("loading").is_none(), "{:?}", r.body);

    // Every answer equals the full evaluation's.
    for uri in [
        anomalies_uri(now - 48 * HOUR + WINDOW, now),
        anomalies_uri(now - 24 * HOUR, now),
        format!("/api/v1/topics?from={}&to={now}", now - 48 * HOUR + WINDOW),
    ] {
        let (a, b) = (get(&full, &uri).await, get(&cold, &uri).await);
        assert_eq!(a.status, StatusCode::OK, "{uri}: {:?}", a.body);
        assert_eq!(a.body, b.body, "{uri}");
    }
    let all = get(&cold, &anomalies_uri(now - 48 * HOUR + WINDOW, now)).await;
    assert_eq!(all.body["total"], 12, "{:?}", all.body);
    {
        let (a, b) = (full.index.read().unwrap(), cold.index.read().unwrap());
        assert_eq!(a.entries, b.entries);
        assert_eq!(a.topics, b.topics);
    }
    // The anomaly gauges (set once the load is done, not after every step) too.
    let gauges = |state: &AppState| -> Vec<String> {
        let mut lines: Vec<String> = state
            .metrics
            .encode()
            .lines()
            .filter(|l| {
                l.starts_with("kafka_audit_anomalies{")
                    || l.starts_with("kafka_audit_topic_anomalies{")
            })
            .map(str::to_string)
            .collect();
        lines.sort();
        lines
    };
    let expected_gauges = gauges(&full);
    assert!(
        expected_gauges.iter().any(|l| l.ends_with(" 12")),
        "{expected_gauges:?}"
    );
    assert_eq!(gauges(&cold), expected_gauges);
    // Alerts are published once loaded, the same as the full evaluation's.
    let desired = cold
        .published_alerts()
        .expect("alerts published once loaded");
    let expected = full.published_alerts().expect("full evaluation published");
    assert_eq!(
        desired.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    assert_eq!(desired.judged_from, None, "the whole horizon is judged");
    assert!(!desired.is_empty());
}

/// The evaluation job (what `serve` runs) on a seeded store: its first cycle makes serve
/// ready, its load steps judge the rest, and its answers then equal a full evaluation's.
async fn the_evaluation_job_loads_the_horizon_in_the_background(backend: Backend) {
    let (full, _db) = state(backend, HORIZON).await;
    let now = now_ms();
    seed(&full, now).await;
    let served = AppState::new(config(HORIZON), full.store.clone()).expect("state");
    let shutdown = tokio_util::sync::CancellationToken::new();
    let jobs = served.spawn_jobs(&shutdown);
    let loaded = testkit::wait_until_async(std::time::Duration::from_secs(60), || async {
        let r = get(&served, "/readyz").await;
        r.status == StatusCode::OK && r.body.get("loading").is_none()
    })
    .await;
    assert!(loaded, "the job loads the whole horizon");
    assert!(
        served.published_alerts().is_some(),
        "alerts published once loaded"
    );
    shutdown.cancel();
    for j in jobs {
        j.await.unwrap();
    }
    // The job's cycle ran at its own clock: compare with a full evaluation at that time.
    let at = served
        .index
        .read()
        .unwrap()
        .evaluated_at
        .expect("evaluated");
    full.evaluate(at).await.expect("full evaluation");
    let uri = anomalies_uri(now - 48 * HOUR + WINDOW, now);
    let (a, b) = (get(&full, &uri).await, get(&served, &uri).await);
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    assert_eq!(a.body, b.body);
    assert_eq!(a.body["total"], 12, "{:?}", a.body);
}
