//! Alert delivery against a local HTTP receiver (an axum server on 127.0.0.1:0):
//! exact payloads of trigger and resolve for each channel kind, rate limiting, retry
//! with backoff, and the alerting job running alone.

use crate::support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use support::*;
use web::metrics::ChannelLabels;
use web::AppState;

#[derive(Clone, Default)]
pub(crate) struct Receiver {
    /// (path, body) of every request answered with success.
    got: Arc<Mutex<Vec<(String, Value)>>>,
    /// Requests of any outcome, per path.
    attempts: Arc<Mutex<Vec<String>>>,
}

impl Receiver {
    pub(crate) fn got(&self) -> Vec<(String, Value)> {
        self.got.lock().unwrap().clone()
    }
    fn attempts(&self, path: &str) -> usize {
        self.attempts
            .lock()
            .unwrap()
            .iter()
            .filter(|p| *p == path)
            .count()
    }
}

/// `/ok/{name}` accepts; `/flaky/{name}` answers 503 twice, then accepts;
/// `/reject/{name}` answers 400; `/echo/{name}` answers 400 with the body it got;
/// `/redirect/{name}` answers 307 to `/ok/{name}`.
pub(crate) async fn start_receiver() -> (Receiver, String) {
    async fn handle(
        State(r): State<Receiver>,
        Path((mode, name)): Path<(String, String)>,
        Json(body): Json<Value>,
    ) -> axum::response::Response {
        let path = format!("/{mode}/{name}");
        let n = {
            let mut a = r.attempts.lock().unwrap();
            a.push(path.clone());
            a.iter().filter(|p| **p == path).count()
        };
        let status = match mode.as_str() {
            "redirect" => StatusCode::TEMPORARY_REDIRECT,
            "flaky" if n <= 2 => StatusCode::SERVICE_UNAVAILABLE,
            "reject" | "echo" => StatusCode::BAD_REQUEST,
            _ => StatusCode::ACCEPTED,
        };
        // `echo` answers 400 with the request body, as some receivers quote it.
        let answer = if mode == "echo" {
            body.to_string()
        } else {
            String::new()
        };
        if status.is_success() {
            r.got.lock().unwrap().push((path, body));
        }
        if status == StatusCode::TEMPORARY_REDIRECT {
            let to = format!("/ok/{name}");
            return (status, [(axum::http::header::LOCATION, to)], answer).into_response();
        }
        (status, answer).into_response()
    }
    let receiver = Receiver::default();
    let app = Router::new()
        .route("/{mode}/{name}", post(handle))
        .with_state(receiver.clone());
    let base = serve_local(app).await;
    (receiver, base)
}

pub(crate) async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let ok = testkit::wait_until_async(Duration::from_secs(20), || {
        let v = cond();
        async move { v }
    })
    .await;
    assert!(ok, "timed out waiting for {what}");
}

fn channels(base: &str, extra: &str) -> String {
    format!(
        r#"
[serve]
evaluate_every = "1h"
[alerting]
initial_backoff = "10ms"
max_backoff = "50ms"
{extra}
[[alerting.channels]]
name = "hook"
kind = "webhook"
url = "{base}/ok/webhook"
[[alerting.channels]]
name = "chat"
kind = "slack"
url = "{base}/ok/slack"
[[alerting.channels]]
name = "pager"
kind = "pagerduty"
url = "{base}/ok/pagerduty"
routing_key = "R0UT1NGKEY"
"#
    )
}

fn rfc(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn body_of<'a>(got: &'a [(String, Value)], path: &str, action: &str) -> &'a Value {
    got.iter()
        .map(|(p, b)| (p, b))
        .find(|(p, b)| {
            p.as_str() == path
                && (b["action"] == action
                    || b["event_action"] == action
                    || b["text"]
                        .as_str()
                        .is_some_and(|t| (action == "resolve") == t.contains("resolved")))
        })
        .map(|(_, b)| b)
        .unwrap_or_else(|| panic!("no {action} on {path} in {got:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_then_resolve_when_late_data_completes_the_window() {
    let (receiver, base) = start_receiver().await;
    let (store, _db) = store(Backend::Postgres).await;
    let w = settled_window();
    seed_loss(&store, "orders", w).await;
    let state = AppState::new(config(&channels(&base, "")), store).unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let jobs = state.spawn_jobs(&shutdown);

    wait_for("three triggers", || receiver.got().len() == 3).await;
    let got = receiver.got();
    let key = format!("kafka-audit:orders:producer->regional:dc1:{w}");
    let summary = format!(
        "loss on orders producer -> regional (dc1), window {}: 90 of 100 messages (90.00 %): 10 of 100 messages missing",
        rfc(w)
    );
    assert_eq!(
        body_of(&got, "/ok/webhook", "trigger"),
        &json!({
            "source": "kafka-audit",
            "action": "trigger",
            "summary": summary,
            "dedup_key": key,
            "verdict": "loss",
            "topic": "orders",
            "upstream": "producer",
            "downstream": "regional",
            "datacenter": "dc1",
            "window_start": w,
            "window_end": w + WINDOW,
            "expected": 100,
            "observed": 90,
            "difference": -10,
            "completeness": 0.9,
            "reason": "10 of 100 messages missing",
        })
    );
    assert_eq!(
        body_of(&got, "/ok/slack", "trigger"),
        &json!({ "text": format!(":rotating_light: kafka-audit: {summary}") })
    );
    assert_eq!(
        body_of(&got, "/ok/pagerduty", "trigger"),
        &json!({
            "routing_key": "R0UT1NGKEY",
            "event_action": "trigger",
            "dedup_key": key,
            "payload": {
                "summary": summary,
                "source": "kafka-audit",
                "severity": "error",
                "component": "orders",
                "group": "producer->regional",
                "class": "loss",
                "custom_details": {
                    "upstream": "producer",
                    "downstream": "regional",
                    "datacenter": "dc1",
                    "window_start": w,
                    "window_end": w + WINDOW,
                    "expected": 100,
                    "observed": 90,
                    "difference": -10,
                    "completeness": 0.9,
                    "reason": "10 of 100 messages missing",
                }
            }
        })
    );

    // Evaluating again without change sends nothing more (deduplicated).
    state.evaluate(now_ms()).await.unwrap();
    // The late 10 messages complete the window: every channel resolves.
    write(
        &state.store,
        vec![increment("orders", "regional", "dc1", w, 10, 100)],
    )
    .await;
    state.evaluate(now_ms()).await.unwrap();
    wait_for("three resolves", || receiver.got().len() == 6).await;
    let got = receiver.got();
    let mut webhook_resolve = body_of(&got, "/ok/webhook", "resolve").clone();
    assert_eq!(webhook_resolve["dedup_key"], key);
    assert_eq!(webhook_resolve["verdict"], "loss");
    webhook_resolve
        .as_object_mut()
        .unwrap()
        .retain(|k, _| k == "action" || k == "source");
    assert_eq!(
        webhook_resolve,
        json!({"action": "resolve", "source": "kafka-audit"})
    );
    assert_eq!(
        body_of(&got, "/ok/slack", "resolve"),
        &json!({ "text": format!(
            ":white_check_mark: kafka-audit: resolved loss on orders producer -> regional (dc1), window {}",
            rfc(w)
        )})
    );
    assert_eq!(
        body_of(&got, "/ok/pagerduty", "resolve"),
        &json!({ "routing_key": "R0UT1NGKEY", "event_action": "resolve", "dedup_key": key })
    );
    // Each channel counts its open alerts at the end of its pass, after the receiver
    // has the resolve.
    for c in ["hook", "chat", "pager"] {
        let open = || {
            state
                .metrics
                .alerts_open
                .get_or_create(&ChannelLabels { channel: c.into() })
                .get()
        };
        wait_for(&format!("no alert open on {c}"), || open() == 0).await;
    }
    shutdown.cancel();
    for j in jobs {
        j.await.unwrap();
    }
    assert_eq!(
        receiver.got().len(),
        6,
        "nothing beyond one trigger and one resolve per channel"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_defers_alerts_beyond_the_limit() {
    let (receiver, base) = start_receiver().await;
    let (store, _db) = store(Backend::Sqlite).await;
    let w = settled_window();
    for t in ["t1", "t2", "t3", "t4", "t5"] {
        seed_loss(&store, t, w).await;
    }
    let cfg = format!(
        r#"
[serve]
evaluate_every = "1h"
[alerting]
rate_limit = 2
rate_period = "1h"
[[alerting.channels]]
name = "hook"
kind = "webhook"
url = "{base}/ok/webhook"
"#
    );
    let state = AppState::new(config(&cfg), store).unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let jobs = state.spawn_jobs(&shutdown);
    let limited = || {
        state
            .metrics
            .alerts_rate_limited
            .get_or_create(&ChannelLabels {
                channel: "hook".into(),
            })
            .get()
    };
    // The pass ends by counting what it deferred.
    wait_for("the rate-limited pass", || limited() == 3).await;
    let got = receiver.got();
    assert_eq!(got.len(), 2, "{got:#?}");
    // In dedup-key order (topic first): t1 and t2 go out, t3..t5 wait.
    let topics: Vec<&str> = got
        .iter()
        .map(|(_, b)| b["topic"].as_str().unwrap())
        .collect();
    assert_eq!(topics, vec!["t1", "t2"]);
    shutdown.cancel();
    for j in jobs {
        j.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_channel_is_retried_with_backoff_and_failures_are_counted() {
    let (receiver, base) = start_receiver().await;
    let (store, _db) = store(Backend::Sqlite).await;
    seed_loss(&store, "orders", settled_window()).await;
    let cfg = format!(
        r#"
[serve]
evaluate_every = "1h"
[alerting]
initial_backoff = "10ms"
max_backoff = "40ms"
attempts = 3
[[alerting.channels]]
name = "flaky"
kind = "webhook"
url = "{base}/flaky/webhook"
[[alerting.channels]]
name = "broken"
kind = "slack"
url = "{base}/reject/slack"
"#
    );
    let state = AppState::new(config(&cfg), store).unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let jobs = state.spawn_jobs(&shutdown);
    let m = |f: &dyn Fn(&ChannelLabels) -> u64, c: &str| f(&ChannelLabels { channel: c.into() });
    let retries = |l: &ChannelLabels| state.metrics.alert_retries.get_or_create(l).get();
    let failures = |l: &ChannelLabels| state.metrics.alert_failures.get_or_create(l).get();
    wait_for("the flaky delivery", || receiver.got().len() == 1).await;
    assert_eq!(
        receiver.attempts("/flaky/webhook"),
        3,
        "two 503s, then success"
    );
    assert_eq!(m(&retries, "flaky"), 2);
    assert_eq!(m(&failures, "flaky"), 0);
    wait_for("the rejected delivery to count", || {
        m(&failures, "broken") == 1
    })
    .await;
    // A 400 is not retried: the payload will not get better.
    assert_eq!(receiver.attempts("/reject/slack"), 1);
    assert_eq!(m(&retries, "broken"), 0);
    shutdown.cancel();
    for j in jobs {
        j.await.unwrap();
    }
}

/// `kafka-audit serve --alerts-only`: evaluation and alerting without HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerting_job_runs_alone() {
    let (receiver, base) = start_receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("audit.db").display());
    let store = store::Store::connect(&url).await.unwrap();
    store::Deployment::migrate(&store).await.unwrap();
    seed_loss(&store, "orders", settled_window()).await;
    let mut cfg = config(&channels(&base, ""));
    cfg.serve.database_url = url;
    cfg.serve.listen = "127.0.0.1:1".parse().unwrap(); // never bound in this mode
    let shutdown = tokio_util::sync::CancellationToken::new();
    let job = tokio::spawn(web::run(cfg, web::Mode::AlertsOnly, shutdown.clone()));
    wait_for("three triggers", || receiver.got().len() == 3).await;
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), job)
        .await
        .expect("stops on shutdown")
        .unwrap()
        .unwrap();
}

/// An auditor that stops reporting is one alert ("audit stalled"), not one per window,
/// and resolves when it reports again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_auditor_is_one_alert_and_resolves_when_it_reports_again() {
    let (receiver, base) = start_receiver().await;
    let (store, _db) = store(Backend::Sqlite).await;
    let w = settled_window();
    let last_report = now_ms() - 120 * MIN;
    let mut messages = Vec::new();
    for i in 0..3 {
        let wi = w + i * WINDOW;
        messages.push(increment("orders", "producer", "dc1", wi, 100, 7));
        messages.push(increment("orders", "regional", "dc1", wi, 100, 7));
    }
    // It had read up to two hours ago (behind these windows' settle time)...
    let mut progress = caught_up("orders", "regional", "dc1");
    if let store::AuditBody::Progress(p) = &mut progress.body {
        p[0].record_time = Some(last_report);
        p[0].lag = Some(5);
    }
    messages.push(progress);
    // ...and was received two hours ago, nothing since: stalled (stall_after = 30 min).
    store::Ingest::write_batch(
        &store,
        &store::Batch {
            messages,
            rejects: vec![],
            received_at_ms: last_report,
        },
    )
    .await
    .unwrap();
    let cfg = one_webhook(&format!("{base}/ok/webhook"));
    let state = AppState::new(config(&cfg), store).unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let jobs = state.spawn_jobs(&shutdown);
    wait_for("the stalled trigger", || receiver.got().len() == 1).await;
    // The auditor's alert pages from the first cycle, before the cold start has loaded
    // these windows (two hours back): the API answers for them once loaded.
    wait_for("the horizon loaded", || {
        state
            .published_alerts()
            .is_some_and(|p| p.judged_from.is_none())
    })
    .await;
    // The windows themselves are listed as stalled by the API...
    let r = get(
        &state,
        &format!(
            "/api/v1/anomalies?from={w}&to={}&kind=stalled",
            w + 3 * WINDOW
        ),
    )
    .await;
    assert_eq!(r.body["total"], 3, "{}", r.body);
    // ...but alerted once, for the auditor.
    assert_eq!(
        receiver.got()[0].1,
        json!({
            "source": "kafka-audit",
            "action": "trigger",
            "summary": format!(
                "audit stalled: orders auditor regional/dc1, last report {}: no progress report for longer than 1800 s",
                rfc(last_report)
            ),
            "dedup_key": "kafka-audit:orders:auditor:regional:dc1",
            "verdict": "stalled",
            "topic": "orders",
            "tier": "regional",
            "datacenter": "dc1",
            "last_report": last_report,
            "reason": "no progress report for longer than 1800 s",
        })
    );
    // The auditor reports again, caught up: the alert resolves and the windows are judged.
    write(&state.store, vec![caught_up("orders", "regional", "dc1")]).await;
    state.evaluate(now_ms()).await.unwrap();
    wait_for("the resolve", || receiver.got().len() == 2).await;
    let resolve = &receiver.got()[1].1;
    assert_eq!(resolve["action"], "resolve");
    assert_eq!(
        resolve["dedup_key"],
        "kafka-audit:orders:auditor:regional:dc1"
    );
    let r = get(
        &state,
        &format!("/api/v1/anomalies?from={w}&to={}", w + 3 * WINDOW),
    )
    .await;
    assert_eq!(r.body["total"], 0, "{}", r.body);
    shutdown.cancel();
    for j in jobs {
        j.await.unwrap();
    }
}

on_both_backends!(
    open_alerts_survive_a_restart,
    a_cold_start_pages_judged_windows_and_resolves_only_judged_ones,
    an_alert_whose_window_leaves_the_horizon_is_not_resolved,
    alerts_of_a_forgotten_topic_are_not_resolved,
    an_alert_whose_window_left_the_horizon_while_serve_was_down_is_not_resolved,
    open_alerts_wait_while_nothing_is_judged,
);

/// The alerts a channel delivered are stored: a restarted process does not trigger
/// them again, and resolves them when late data completes the window.
async fn open_alerts_survive_a_restart(backend: Backend) {
    let (receiver, base) = start_receiver().await;
    let (store, _db) = store(backend).await;
    let w = settled_window();
    seed_loss(&store, "orders", w).await;
    let cfg = one_webhook(&format!("{base}/ok/webhook"));
    let first = AppState::new(config(&cfg), store.clone()).unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let jobs = first.spawn_jobs(&shutdown);
    wait_for("the trigger", || receiver.got().len() == 1).await;
    shutdown.cancel();
    for j in jobs {
        j.await.unwrap();
    }

    // A new process on the same database: its first pass finds the alert open.
    let second = AppState::new(config(&cfg), store).unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let jobs = second.spawn_jobs(&shutdown);
    let open = || {
        second
            .metrics
            .alerts_open
            .get_or_create(&ChannelLabels {
                channel: "hook".into(),
            })
            .get()
    };
    let passed = || second.metrics.evaluations.get() >= 1;
    wait_for("the second process's first pass", || {
        passed() && open() == 1
    })
    .await;
    assert_eq!(
        receiver.got().len(),
        1,
        "not triggered again after the restart: {:#?}",
        receiver.got()
    );

    write(
        &second.store,
        vec![increment("orders", "regional", "dc1", w, 10, 100)],
    )
    .await;
    second.evaluate(now_ms()).await.unwrap();
    wait_for("the resolve", || receiver.got().len() == 2).await;
    let got = receiver.got();
    assert_eq!(got[1].1["action"], "resolve");
    assert_eq!(got[1].1["dedup_key"], got[0].1["dedup_key"]);
    wait_for("the open alert to be forgotten", || open() == 0).await;
    shutdown.cancel();
    for j in jobs {
        j.await.unwrap();
    }
}

fn loss_alert(topic: &str, window_start: i64) -> web::alert::Alert {
    let subject = web::alert::Subject::Window {
        upstream: "producer".into(),
        downstream: "regional".into(),
        datacenter: "dc1".into(),
        window_start,
        window_end: window_start + WINDOW,
        expected: 100,
        observed: 90,
        difference: -10,
        completeness: Some(0.9),
    };
    web::alert::Alert {
        dedup_key: format!("kafka-audit:{topic}:producer->regional:dc1:{window_start}"),
        verdict: web::engine::Verdict::Loss,
        topic: topic.into(),
        subject,
        reason: "10 of 100 messages missing".into(),
    }
}

/// A flood of (forged) anomalies on one topic that sorts first must not hold back
/// another topic's page: with 5 notifications per period, `payments` goes out in
/// the first pass, not after the 100 of `!x` (about 20 periods later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_on_one_topic_cannot_delay_another_topics_page() {
    let (receiver, base) = start_receiver().await;
    let w = settled_window();
    let mut desired = std::collections::BTreeMap::new();
    for i in 0..100 {
        let a = loss_alert("!x", w - i * WINDOW);
        desired.insert(a.dedup_key.clone(), a);
    }
    let a = loss_alert("payments", w);
    desired.insert(a.dedup_key.clone(), a);
    let cfg = config(&format!(
        r#"
[alerting]
rate_limit = 5
rate_period = "1h"
[[alerting.channels]]
name = "hook"
kind = "webhook"
url = "{base}/ok/webhook"
"#
    ));
    let metrics = Arc::new(web::metrics::Metrics::new());
    let mut worker = web::alert::ChannelWorker::new(
        cfg.alerting.channels[0].clone(),
        cfg.alerting.clone(),
        metrics,
        None,
    );
    worker.sync(&desired, now_ms()).await;
    let topics: Vec<String> = receiver
        .got()
        .iter()
        .map(|(_, b)| b["topic"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(topics.len(), 5, "{topics:?}");
    assert!(topics.iter().any(|t| t == "payments"), "{topics:?}");
    // Within a topic, the newest window first.
    let first_x = receiver
        .got()
        .iter()
        .find(|(_, b)| b["topic"] == "!x")
        .map(|(_, b)| b["window_start"].as_i64().unwrap());
    assert_eq!(first_x, Some(w));
}

/// Topic, tier and datacenter names are data: in Slack text, `<!channel>` would ping
/// the whole channel and `<https://…|label>` would post a disguised link as the
/// trusted bot. Slack's rule: escape `&`, `<` and `>`.
#[test]
fn slack_text_escapes_mentions_links_and_entities() {
    let hostile = "<!channel> act now: <https://sso-reset.example|reset SSO> &amp; <@U123>";
    let cfg = config(
        r#"
[[alerting.channels]]
name = "chat"
kind = "slack"
url = "http://127.0.0.1:9/slack"
"#,
    );
    let channel = &cfg.alerting.channels[0];
    let alert = loss_alert(hostile, settled_window());
    for action in [web::alert::Action::Trigger, web::alert::Action::Resolve] {
        let body = web::alert::payload(channel, action, &alert);
        let text = body["text"].as_str().unwrap();
        // No `<` at all: Slack's controls all start with one.
        assert!(!text.contains('<'), "{text}");
        assert!(
            text.contains(
                "&lt;!channel&gt; act now: &lt;https://sso-reset.example|reset SSO&gt; \
                 &amp;amp; &lt;@U123&gt;"
            ),
            "{text}"
        );
    }
}

/// PagerDuty refuses a `payload.summary` over 1024 characters with a 400, which is
/// not retried: a long (512-byte) topic name must not lose the page.
#[test]
fn pagerduty_summary_fits_its_limit() {
    let cfg = config(
        r#"
[[alerting.channels]]
name = "pager"
kind = "pagerduty"
routing_key = "R0UT1NGKEY"
"#,
    );
    let topic = "é".repeat(600);
    let alert = loss_alert(&topic, settled_window());
    let body = web::alert::payload(
        &cfg.alerting.channels[0],
        web::alert::Action::Trigger,
        &alert,
    );
    let summary = body["payload"]["summary"].as_str().unwrap();
    assert!(summary.len() <= 1024, "{} bytes", summary.len());
    assert!(summary.starts_with("loss on éé"), "{summary}");
}

/// A Slack or webhook URL is the credential (`/services/T…/B…/secret`) and the
/// routing key is PagerDuty's: a failed delivery logs the channel and host only.
/// (Current-thread runtime: the subscriber set here sees the worker's logs.)
#[tokio::test]
async fn failed_deliveries_log_neither_url_paths_nor_keys() {
    let (_receiver, base) = start_receiver().await;
    let (logs, _guard) = Logs::capture();
    let cfg = config(&format!(
        r#"
[alerting]
attempts = 1
[[alerting.channels]]
name = "chat"
kind = "slack"
url = "{base}/reject/T000-B000-XXXXSECRET"
[[alerting.channels]]
name = "hook"
kind = "webhook"
url = "http://127.0.0.1:1/services/T000/B000/XXXXSECRET"
[[alerting.channels]]
name = "pager"
kind = "pagerduty"
url = "{base}/echo/pagerduty"
routing_key = "R0UT1NGKEYSECRET"
"#
    ));
    let alert = loss_alert("orders", settled_window());
    let desired = std::collections::BTreeMap::from([(alert.dedup_key.clone(), alert)]);
    for channel in &cfg.alerting.channels {
        let mut worker = web::alert::ChannelWorker::new(
            channel.clone(),
            cfg.alerting.clone(),
            Arc::new(web::metrics::Metrics::new()),
            None,
        );
        worker.sync(&desired, now_ms()).await;
    }
    let text = logs.text();
    assert_eq!(text.matches("alert delivery failed").count(), 3, "{text}");
    for secret in ["SECRET", "/services/", "/reject/", "/echo/"] {
        assert!(!text.contains(secret), "{secret:?} in the log:\n{text}");
    }
    for host in ["channel \"chat\"", "channel \"hook\"", "host 127.0.0.1"] {
        assert!(text.contains(host), "{host:?} not in the log:\n{text}");
    }
}

/// A receiver that answers with a redirect does not get to send the alert (and its
/// routing key) on to another address: redirects are not followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_not_followed() {
    let (receiver, base) = start_receiver().await;
    let cfg = config(&format!(
        r#"
[alerting]
attempts = 1
[[alerting.channels]]
name = "hook"
kind = "webhook"
url = "{base}/redirect/elsewhere"
"#
    ));
    let alert = loss_alert("orders", settled_window());
    let desired = std::collections::BTreeMap::from([(alert.dedup_key.clone(), alert)]);
    let metrics = Arc::new(web::metrics::Metrics::new());
    let mut worker = web::alert::ChannelWorker::new(
        cfg.alerting.channels[0].clone(),
        cfg.alerting.clone(),
        metrics.clone(),
        None,
    );
    worker.sync(&desired, now_ms()).await;
    assert_eq!(receiver.attempts("/redirect/elsewhere"), 1);
    assert!(receiver.got().is_empty(), "{:?}", receiver.got());
    let failures = metrics
        .alert_failures
        .get_or_create(&ChannelLabels {
            channel: "hook".into(),
        })
        .get();
    assert_eq!(failures, 1);
}

/// Read replicas: `serve.database_url` is a replica (here a second database whose
/// sessions are read-only, as on a hot standby: every write fails), and
/// `serve.alert_database_url` the writer that keeps the open alerts. Verdicts come from
/// the reader (the loss is seeded there only); the alert's trigger and resolve are
/// stored in the writer and nothing is written to the reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_state_goes_to_the_writer_and_reads_to_the_replica() {
    use store::AlertLedger;
    let (receiver, base) = start_receiver().await;
    let (reader_rw, _reader_db) = store(Backend::Postgres).await;
    let (writer, _writer_db) = store(Backend::Postgres).await;
    let reader_url = match &_reader_db {
        Db::Pg(db) => db.url().to_string(),
        Db::Sqlite(_) => unreachable!(),
    };
    let writer_url = match &_writer_db {
        Db::Pg(db) => db.url().to_string(),
        Db::Sqlite(_) => unreachable!(),
    };
    let read_only = format!("{reader_url}?options=-c%20default_transaction_read_only%3Don");
    let w = settled_window();
    seed_loss(&reader_rw, "orders", w).await;
    let cfg = format!(
        r#"
[serve]
database_url = "{read_only}"
alert_database_url = "{writer_url}"
migrate = false
evaluate_every = "1s"
[[alerting.channels]]
name = "hook"
kind = "webhook"
url = "{base}/ok/webhook"
"#
    );
    let shutdown = tokio_util::sync::CancellationToken::new();
    let run = tokio::spawn(web::run(
        config(&cfg),
        web::Mode::AlertsOnly,
        shutdown.clone(),
    ));
    wait_for("the trigger", || receiver.got().len() == 1).await;
    let open = |store: &store::Store| {
        let store = store.clone();
        async move { store.open_alerts("hook").await.expect("open alerts").len() }
    };
    assert!(
        testkit::wait_until_async(Duration::from_secs(20), || async {
            open(&writer).await == 1
        })
        .await,
        "the open alert is stored in the writer"
    );
    assert_eq!(
        open(&reader_rw).await,
        0,
        "nothing is written to the reader"
    );
    // The late messages reach the replica: the alert resolves, and the writer forgets it.
    write(
        &reader_rw,
        vec![increment("orders", "regional", "dc1", w, 10, 100)],
    )
    .await;
    wait_for("the resolve", || receiver.got().len() == 2).await;
    assert_eq!(receiver.got()[1].1["action"], "resolve");
    assert!(
        testkit::wait_until_async(Duration::from_secs(20), || async {
            open(&writer).await == 0
        })
        .await,
        "the resolved alert is forgotten in the writer"
    );
    assert_eq!(open(&reader_rw).await, 0);
    shutdown.cancel();
    run.await.unwrap().expect("serve ran");
}

/// A restart on a long horizon: the recent loss pages while the older windows are still
/// loading; an alert open before the restart on an older window stays open until its
/// window is judged, then resolves only if it is now ok (the other stays open). Pages
/// over the run are exactly those of a full evaluation: no fire-then-resolve.
async fn a_cold_start_pages_judged_windows_and_resolves_only_judged_ones(backend: Backend) {
    let (receiver, base) = start_receiver().await;
    let (store, _db) = store(backend).await;
    let cfg = format!(
        r#"
[serve]
evaluate_every = "1h"
horizon = "2d"
max_range = "2d"
[[alerting.channels]]
name = "hook"
kind = "webhook"
url = "{base}/ok/webhook"
"#
    );
    let now = now_ms();
    let aligned = now.div_euclid(WINDOW) * WINDOW;
    // Two losses 20 h back (within max_window_age, far outside the first cycle's load).
    let (old_a, old_b) = (aligned - 120 * WINDOW, aligned - 121 * WINDOW);
    seed_loss(&store, "orders", old_a).await;
    seed_loss(&store, "payments", old_b).await;
    let worker = |state: &AppState| {
        web::alert::ChannelWorker::new(
            state.config.alerting.channels[0].clone(),
            state.config.alerting.clone(),
            state.metrics.clone(),
            Some(state.store.clone()),
        )
    };
    let first = AppState::new(config(&cfg), store.clone()).unwrap();
    first.evaluate(now).await.unwrap();
    let mut w = worker(&first);
    let published = first.published_alerts().unwrap();
    w.sync_judged(&published, now).await;
    assert_eq!(receiver.got().len(), 2, "{:#?}", receiver.got());

    // While serve is down: late data makes `orders` ok; a new loss arrives.
    write(
        &store,
        vec![increment("orders", "regional", "dc1", old_a, 10, 100)],
    )
    .await;
    let recent = aligned - 4 * WINDOW;
    seed_loss(&store, "refunds", recent).await;

    let second = AppState::new(config(&cfg), store.clone()).unwrap();
    let mut w = worker(&second);
    w.load_open().await;
    second.evaluate_cycle(now).await.unwrap();
    let published = second.published_alerts().expect("published while loading");
    let loaded_from = published.judged_from.expect("still loading");
    assert!(loaded_from > old_a, "the old windows are not loaded yet");
    // What the channel's task does when woken by a publication.
    assert!(w.on_publication(&published, now).await);
    let got = receiver.got();
    assert_eq!(got.len(), 3, "the recent loss pages at once: {got:#?}");
    assert_eq!(got[2].1["action"], "trigger");
    assert_eq!(got[2].1["topic"], "refunds");

    let mut steps = 0;
    loop {
        let done = second.load_step(now).await.unwrap();
        let published = second.published_alerts().unwrap();
        w.on_publication(&published, now).await;
        // Nothing resolves before its window loads; `orders` resolves at the step that
        // judges it (not at the load's end); `payments`, still a loss, never pages again.
        let want = match published.judged_from {
            Some(from) if from > old_a => 3,
            _ => 4,
        };
        let got = receiver.got();
        assert_eq!(
            got.len(),
            want,
            "judged from {:?}: {got:#?}",
            published.judged_from
        );
        steps += 1;
        assert!(steps < 1000, "loading never ends");
        if done {
            break;
        }
    }
    assert!(steps > 1);
    let got = receiver.got();
    assert_eq!(got.len(), 4, "{got:#?}");
    assert_eq!(got[3].1["action"], "resolve");
    assert_eq!(got[3].1["topic"], "orders");
    // The same pages a full evaluation of the store sends to a worker with the same
    // open alerts: nothing more.
    let full = AppState::new(config(&cfg), store).unwrap();
    full.evaluate(now).await.unwrap();
    let published = full.published_alerts().unwrap();
    assert_eq!(published.judged_from, None);
    w.sync_judged(&published, now).await;
    assert_eq!(receiver.got().len(), 4, "{:#?}", receiver.got());
    let keys: Vec<&String> = published.keys().collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
}

/// A publication that brings a channel nothing new runs no pass: during a cold start
/// every load step publishes a new bound, and the load's completion another, with the
/// same alerts. Such a wake must neither send a rejected delivery again (and count it
/// again) nor count the deferred alerts again: those wait for the periodic pass. A
/// publication with a new alert runs a pass at once (with what waits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publication_without_new_work_runs_no_pass() {
    let (receiver, base) = start_receiver().await;
    let (store, _db) = store(Backend::Sqlite).await;
    // Final, and recent enough for the first cycle of a cold start.
    let w = now_ms().div_euclid(WINDOW) * WINDOW - 4 * WINDOW;
    for t in ["t1", "t2", "t3", "t4"] {
        seed_loss(&store, t, w).await;
    }
    let cfg = format!(
        r#"
[serve]
evaluate_every = "1h"
horizon = "2d"
max_range = "2d"
[alerting]
rate_limit = 3
rate_period = "1h"
[[alerting.channels]]
name = "broken"
kind = "slack"
url = "{base}/reject/slack"
[[alerting.channels]]
name = "hook"
kind = "webhook"
url = "{base}/ok/webhook"
"#
    );
    let state = AppState::new(config(&cfg), store.clone()).unwrap();
    let worker = |i: usize| {
        web::alert::ChannelWorker::new(
            state.config.alerting.channels[i].clone(),
            state.config.alerting.clone(),
            state.metrics.clone(),
            Some(state.store.clone()),
        )
    };
    let (mut broken, mut hook) = (worker(0), worker(1));
    let label = |c: &str| ChannelLabels { channel: c.into() };
    // (rejected attempts, failures, deferred on "broken", deferred on "hook", delivered)
    let seen = || {
        let m = &state.metrics;
        (
            receiver.attempts("/reject/slack"),
            m.alert_failures.get_or_create(&label("broken")).get(),
            m.alerts_rate_limited.get_or_create(&label("broken")).get(),
            m.alerts_rate_limited.get_or_create(&label("hook")).get(),
            receiver.got().len(),
        )
    };
    let now = now_ms();
    state.evaluate_cycle(now).await.unwrap();
    let published = state.published_alerts().unwrap();
    assert!(
        published.judged_from.is_some(),
        "a cold start: still loading"
    );
    assert_eq!(published.len(), 4, "{published:?}");
    assert!(broken.on_publication(&published, now).await);
    assert!(hook.on_publication(&published, now).await);
    let before = seen();
    assert_eq!(before, (3, 3, 1, 1, 3));

    // Every load step and the completion: the same alerts, a new bound.
    let mut steps = 0;
    loop {
        let done = state.load_step(now).await.unwrap();
        let published = state.published_alerts().unwrap();
        let passes = (
            broken.on_publication(&published, now).await,
            hook.on_publication(&published, now).await,
        );
        assert_eq!(
            seen(),
            before,
            "step {steps}: nothing sent nor counted again"
        );
        assert_eq!(passes, (false, false));
        steps += 1;
        assert!(steps < 1000, "loading never ends");
        if done {
            assert_eq!(published.judged_from, None);
            break;
        }
    }
    assert!(steps > 1);

    // A new alert: a pass at once, which defers all (no token left this period).
    seed_loss(&store, "t5", w).await;
    state.evaluate_cycle(now).await.unwrap();
    let published = state.published_alerts().unwrap();
    assert_eq!(published.len(), 5);
    assert!(broken.on_publication(&published, now).await);
    assert!(hook.on_publication(&published, now).await);
    assert_eq!(seen(), (3, 3, 1 + 5, 1 + 2, 3));
}

/// The periodic pass retries a failed delivery even while publications keep waking
/// the channel with nothing new (a cold start's load steps): a wake that runs no pass
/// does not postpone the periodic one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wakes_without_new_work_do_not_postpone_the_periodic_retry() {
    let (receiver, base) = start_receiver().await;
    let cfg = format!(
        r#"
[serve]
evaluate_every = "1h"
[alerting]
rate_period = "300ms"
[[alerting.channels]]
name = "broken"
kind = "slack"
url = "{base}/reject/slack"
"#
    );
    let cfg = config(&cfg);
    let metrics = Arc::new(web::metrics::Metrics::new());
    let worker = web::alert::ChannelWorker::new(
        cfg.alerting.channels[0].clone(),
        cfg.alerting.clone(),
        metrics.clone(),
        None,
    );
    let alert = loss_alert("orders", settled_window());
    let publication = move |from: i64| {
        Some(Arc::new(web::alert::Published {
            alerts: [(alert.dedup_key.clone(), alert.clone())].into(),
            judged_from: Some(from),
            ..Default::default()
        }))
    };
    let (tx, rx) = tokio::sync::watch::channel(publication(0));
    let shutdown = tokio_util::sync::CancellationToken::new();
    let run = tokio::spawn(worker.run(rx, shutdown.clone()));
    // A new bound every 20 ms, the same alert: more often than the 300 ms retry.
    let stepping = {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let mut from = 0;
            while !shutdown.is_cancelled() {
                from += 1;
                tx.send_replace(publication(from));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let failures = || {
        metrics
            .alert_failures
            .get_or_create(&ChannelLabels {
                channel: "broken".into(),
            })
            .get()
    };
    wait_for("two periodic retries", || failures() >= 3).await;
    assert!(receiver.attempts("/reject/slack") >= 3);
    shutdown.cancel();
    run.await.unwrap();
    stepping.await.unwrap();
}

const DAY: i64 = 24 * 60 * MIN;

/// (action, dedup key) of every notification the receiver got, in order.
fn actions(receiver: &Receiver) -> Vec<(String, String)> {
    receiver
        .got()
        .iter()
        .map(|(_, b)| {
            (
                b["action"].as_str().unwrap_or_default().to_string(),
                b["dedup_key"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// A channel worker of `state`'s first channel whose open alerts are stored.
fn stored_worker(state: &AppState) -> web::alert::ChannelWorker {
    web::alert::ChannelWorker::new(
        state.config.alerting.channels[0].clone(),
        state.config.alerting.clone(),
        state.metrics.clone(),
        Some(state.store.clone()),
    )
}

/// `alerts_expired_total` and `alerts_open` of the channel "hook".
fn expired_and_open(state: &AppState) -> (u64, i64) {
    let hook = ChannelLabels {
        channel: "hook".into(),
    };
    (
        state.metrics.alerts_expired.get_or_create(&hook).get(),
        state.metrics.alerts_open.get_or_create(&hook).get(),
    )
}

/// One evaluation at `now` and the channel's pass on what it published.
async fn evaluate_and_sync(state: &AppState, hook: &mut web::alert::ChannelWorker, now: i64) {
    state.evaluate(now).await.unwrap();
    let published = state.published_alerts().expect("published");
    hook.sync_judged(&published, now).await;
}

/// A loss pages and nobody fixes it. Days later its window leaves the horizon
/// (`serve.horizon`, 7 days) and is no longer judged: its alert must not be resolved by
/// its absence (on-call would read "resolved" for a loss that was never fixed). It
/// expires quietly: no notification, its stored row goes (the alert state does not grow
/// with them), and a restarted serve neither pages it again nor resolves it.
async fn an_alert_whose_window_leaves_the_horizon_is_not_resolved(backend: Backend) {
    let (receiver, base) = start_receiver().await;
    let (store, _db) = store(backend).await;
    let w = settled_window();
    seed_loss(&store, "orders", w).await;
    let cfg = one_webhook(&format!("{base}/ok/webhook"));
    let state = AppState::new(config(&cfg), store.clone()).unwrap();
    let horizon = state.config.serve.horizon.as_millis() as i64;
    let mut hook = stored_worker(&state);
    hook.load_open().await;
    let now = now_ms();
    let key = format!("kafka-audit:orders:producer->regional:dc1:{w}");
    let one_page = vec![("trigger".to_string(), key.clone())];
    evaluate_and_sync(&state, &mut hook, now).await;
    assert_eq!(actions(&receiver), one_page);
    // Within the horizon (past max_window_age, 24 h) the window is still judged: open.
    for later in [now + 2 * DAY, w + horizon] {
        evaluate_and_sync(&state, &mut hook, later).await;
        assert_eq!(
            store::AlertLedger::open_alerts(&store, "hook")
                .await
                .unwrap()
                .len(),
            1
        );
    }
    // The window leaves the horizon.
    for later in [w + horizon + WINDOW, now + horizon + DAY] {
        evaluate_and_sync(&state, &mut hook, later).await;
        assert!(
            !state
                .index
                .read()
                .unwrap()
                .entries
                .values()
                .any(|e| e.window_start == w),
            "the window left the index"
        );
    }
    assert_eq!(actions(&receiver), one_page, "over the whole run");
    assert_eq!(
        store::AlertLedger::open_alerts(&store, "hook")
            .await
            .unwrap(),
        vec![],
        "no stored row is left behind"
    );
    assert_eq!(expired_and_open(&state), (1, 0));
    // A restart: nothing to load, nothing sent.
    let second = AppState::new(config(&cfg), store.clone()).unwrap();
    let mut hook = stored_worker(&second);
    hook.load_open().await;
    evaluate_and_sync(&second, &mut hook, now + horizon + DAY).await;
    assert_eq!(actions(&receiver), one_page, "after a restart");
    assert_eq!(expired_and_open(&second), (0, 0), "nothing left to expire");
}

/// A topic deleted (or no longer audited) with an unfixed loss: its auditor stops
/// reporting and pages `stalled`; after `forget_after` (24 h) its progress is forgotten,
/// and a week later the loss window leaves the horizon. Neither alert was fixed: neither
/// may be resolved by its absence, and nothing is left in the alert state.
async fn alerts_of_a_forgotten_topic_are_not_resolved(backend: Backend) {
    let (receiver, base) = start_receiver().await;
    let (store, _db) = store(backend).await;
    let w = settled_window();
    let now = now_ms();
    // Read past the window's settle time an hour ago, then nothing: stalled.
    let last = now - 60 * MIN;
    store::Ingest::write_batch(
        &store,
        &store::Batch {
            messages: vec![
                increment("deleted", "producer", "dc1", w, 100, 1000),
                increment("deleted", "regional", "dc1", w, 90, 900),
                progress_of(
                    "deleted",
                    "regional",
                    "dc1",
                    "regional-dc1-0",
                    last,
                    0,
                    5000,
                    Some(last),
                    Some(0),
                ),
            ],
            rejects: vec![],
            received_at_ms: last,
        },
    )
    .await
    .unwrap();
    let cfg = one_webhook(&format!("{base}/ok/webhook"));
    let state = AppState::new(config(&cfg), store.clone()).unwrap();
    let horizon = state.config.serve.horizon.as_millis() as i64;
    let mut hook = stored_worker(&state);
    hook.load_open().await;
    evaluate_and_sync(&state, &mut hook, now).await;
    let mut pages = actions(&receiver);
    pages.sort();
    let two_pages = vec![
        (
            "trigger".to_string(),
            "kafka-audit:deleted:auditor:regional:dc1".to_string(),
        ),
        (
            "trigger".to_string(),
            format!("kafka-audit:deleted:producer->regional:dc1:{w}"),
        ),
    ];
    assert_eq!(pages, two_pages);
    // Forgotten after forget_after; then the window leaves the horizon.
    for later in [
        last + DAY + MIN,
        last + 2 * DAY,
        w + horizon + WINDOW,
        now + horizon + DAY,
    ] {
        evaluate_and_sync(&state, &mut hook, later).await;
        assert!(
            actions(&receiver).iter().all(|(a, _)| a == "trigger"),
            "at {}: {:#?}",
            later - now,
            receiver.got()
        );
    }
    assert!(state.index.read().unwrap().auditors.is_empty());
    assert_eq!(actions(&receiver).len(), 2, "{:#?}", receiver.got());
    assert_eq!(
        store::AlertLedger::open_alerts(&store, "hook")
            .await
            .unwrap(),
        vec![]
    );
    assert_eq!(expired_and_open(&state), (2, 0));
    let second = AppState::new(config(&cfg), store.clone()).unwrap();
    let mut hook = stored_worker(&second);
    hook.load_open().await;
    evaluate_and_sync(&second, &mut hook, now + horizon + DAY).await;
    assert_eq!(actions(&receiver).len(), 2, "after a restart");
    assert_eq!(expired_and_open(&second), (0, 0), "nothing left to expire");
}

/// serve is down while an open alert's window leaves the horizon. The restarted process
/// loads the alert and, from its first publication (cold start, still loading), expires
/// it: no resolve, no page, no stored row left.
async fn an_alert_whose_window_left_the_horizon_while_serve_was_down_is_not_resolved(
    backend: Backend,
) {
    let (receiver, base) = start_receiver().await;
    let (store, _db) = store(backend).await;
    let w = settled_window();
    seed_loss(&store, "orders", w).await;
    let cfg = one_webhook(&format!("{base}/ok/webhook"));
    let first = AppState::new(config(&cfg), store.clone()).unwrap();
    let horizon = first.config.serve.horizon.as_millis() as i64;
    let mut hook = stored_worker(&first);
    let now = now_ms();
    evaluate_and_sync(&first, &mut hook, now).await;
    let one_page = vec![(
        "trigger".to_string(),
        format!("kafka-audit:orders:producer->regional:dc1:{w}"),
    )];
    assert_eq!(actions(&receiver), one_page);

    let later = now + horizon + DAY;
    let second = AppState::new(config(&cfg), store.clone()).unwrap();
    let mut hook = stored_worker(&second);
    hook.load_open().await;
    assert_eq!(expired_and_open(&second), (0, 1), "loaded");
    second.evaluate_cycle(later).await.unwrap();
    let published = second.published_alerts().expect("published");
    assert!(published.judged_from.is_some(), "still loading");
    hook.on_publication(&published, later).await;
    assert_eq!(expired_and_open(&second), (1, 0));
    assert_eq!(
        store::AlertLedger::open_alerts(&store, "hook")
            .await
            .unwrap(),
        vec![]
    );
    while !second.load_step(later).await.unwrap() {
        hook.on_publication(&second.published_alerts().unwrap(), later)
            .await;
    }
    hook.sync_judged(&second.published_alerts().unwrap(), later)
        .await;
    assert_eq!(actions(&receiver), one_page, "over the whole run");
}

/// serve restarts on a store that holds no window yet, with `[topology] window` unset
/// (its alert state may be another database, `alert_database_url`): nothing is judged
/// until the window size is known. The alerts open before the restart are neither
/// resolved nor expired by that: nothing is published until a cycle has judged.
async fn open_alerts_wait_while_nothing_is_judged(backend: Backend) {
    let (receiver, base) = start_receiver().await;
    let (store, _db) = store(backend).await;
    let topology = TOPOLOGY.replace("window = \"10m\"\n", "");
    assert!(!topology.contains("window ="), "{topology}");
    let cfg: web::Config = toml::from_str(&format!(
        "{topology}\n{}",
        one_webhook(&format!("{base}/ok/webhook"))
    ))
    .unwrap();
    cfg.validate().unwrap();
    let now = now_ms();
    let loss = loss_alert("orders", settled_window());
    let stalled = web::alert::Alert {
        dedup_key: web::alert::auditor_key("orders", "regional", "dc1"),
        verdict: web::engine::Verdict::Stalled,
        topic: "orders".into(),
        subject: web::alert::Subject::Auditor {
            tier: "regional".into(),
            datacenter: "dc1".into(),
            last_report: now - 60 * MIN,
        },
        reason: "no progress report for longer than 1800 s".into(),
    };
    for a in [&loss, &stalled] {
        store::AlertLedger::save_open_alert(
            &store,
            "hook",
            &a.dedup_key,
            &serde_json::to_string(a).unwrap(),
            now,
        )
        .await
        .unwrap();
    }
    let state = AppState::new(cfg, store.clone()).unwrap();
    let mut hook = stored_worker(&state);
    hook.load_open().await;
    state.evaluate(now).await.unwrap();
    assert!(state.index.read().unwrap().waiting_for.is_some());
    if let Some(published) = state.published_alerts() {
        hook.sync_judged(&published, now).await;
    }
    assert_eq!(actions(&receiver), vec![]);
    assert_eq!(expired_and_open(&state), (0, 2));
    assert_eq!(
        store::AlertLedger::open_alerts(&store, "hook")
            .await
            .unwrap()
            .len(),
        2
    );
}

/// More auditors than the evaluator reads at once (`store::MAX_READ_ROWS`): the read of
/// auditors is capped, and an auditor left out of it is neither judged ok nor forgotten.
/// Its open stall alert must stay open — neither resolved nor expired — until a read
/// that sees every auditor says otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auditor_left_out_of_a_capped_read_keeps_its_alert_open() {
    let (receiver, base) = start_receiver().await;
    let cfg = config(&one_webhook(&format!("{base}/ok/webhook")));
    let metrics = Arc::new(web::metrics::Metrics::new());
    let mut hook = web::alert::ChannelWorker::new(
        cfg.alerting.channels[0].clone(),
        cfg.alerting.clone(),
        metrics.clone(),
        None,
    );
    let key = web::alert::auditor_key("orders", "regional", "dc1");
    let stalled = web::alert::Alert {
        dedup_key: key.clone(),
        verdict: web::engine::Verdict::Stalled,
        topic: "orders".into(),
        subject: web::alert::Subject::Auditor {
            tier: "regional".into(),
            datacenter: "dc1".into(),
            last_report: now_ms() - 120 * MIN,
        },
        reason: "no progress report for longer than 1800 s".into(),
    };
    let now = now_ms();
    let page = web::alert::Published {
        alerts: [(key.clone(), stalled)].into(),
        auditors: Some([key.clone()].into()),
        ..Default::default()
    };
    hook.sync_judged(&page, now).await;
    let one_page = vec![("trigger".to_string(), key.clone())];
    assert_eq!(actions(&receiver), one_page);
    // A capped read that did not reach this auditor.
    let capped = web::alert::Published {
        auditors: Some(BTreeSet::new()),
        auditors_capped: true,
        ..Default::default()
    };
    hook.sync_judged(&capped, now + MIN).await;
    assert_eq!(actions(&receiver), one_page, "neither resolved nor expired");
    let hook_labels = ChannelLabels {
        channel: "hook".into(),
    };
    assert_eq!(metrics.alerts_expired.get_or_create(&hook_labels).get(), 0);
    assert_eq!(metrics.alerts_open.get_or_create(&hook_labels).get(), 1);
    // A whole read: the auditor is known and no longer stalled: resolved.
    let whole = web::alert::Published {
        auditors: Some([key.clone()].into()),
        ..Default::default()
    };
    hook.sync_judged(&whole, now + 2 * MIN).await;
    assert_eq!(
        actions(&receiver),
        vec![
            ("trigger".to_string(), key.clone()),
            ("resolve".to_string(), key)
        ]
    );
}
