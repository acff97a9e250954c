//! Detection at the edges (docs/web.md, Verdicts, rules 3–5) against real stores: the
//! evaluator's verdicts and auditor status after seeding through the store's own write
//! paths. PostgreSQL-only where the rule is about PostgreSQL (staged roll-up).

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::Value;
use store::{Batch, Ingest, Message};
use support::*;
use web::alert::ChannelWorker;
use web::engine::{Lifecycle, Verdict};
use web::{AppState, Config};

/// regional dc1 + dc2 → aggregate `agg` (many-to-one), progress at both tiers.
const MANY_TO_ONE: &str = r#"
[topology]
window = "10m"
grace = "20m"
stall_after = "30m"
tiers = [{ name = "regional" }, { name = "aggregate" }]
[[topology.edges]]
upstream = "regional"
downstream = "aggregate"
datacenters = { dc1 = "agg", dc2 = "agg" }
"#;

on_both_backends!(
    an_open_alert_stays_open_while_its_window_settles_again,
    a_late_upstream_increment_re_arms_its_window,
    many_to_one_region_only_topic,
    lag_zero_is_dated_by_emitted_at,
    window_size_mismatch_is_reported,
    readyz_during_a_cycle_reports_the_last_complete_cycle,
    window_size_is_learned_from_the_store,
    learned_window_reports_older_sizes_as_mismatch
);

async fn write_at(store: &store::Store, messages: Vec<Message>, received_at_ms: i64) {
    store
        .write_batch(&Batch {
            messages,
            rejects: vec![],
            received_at_ms,
        })
        .await
        .expect("seed batch");
}

/// Verdicts of the index for `topic`'s window `w` as (upstream, datacenter, verdict,
/// lifecycle, reason); `ok` verdicts are not kept, so an empty list is all-ok.
fn verdicts(
    state: &AppState,
    topic: &str,
    w: i64,
) -> Vec<(String, String, Verdict, Lifecycle, String)> {
    let index = state.index.read().unwrap();
    index
        .in_range(w, w + 1)
        .filter(|e| e.topic == topic)
        .map(|e| {
            (
                e.upstream.clone(),
                e.datacenter.clone(),
                e.verdict,
                e.lifecycle,
                e.reason.clone(),
            )
        })
        .collect()
}

/// Progress of one partition of `tier`/`dc` by `host`: read up to `record_time`,
/// `lag`, emitted at `emitted_at`.
#[allow(clippy::too_many_arguments)]
fn progress(
    topic: &str,
    tier: &str,
    dc: &str,
    host: &str,
    partition: i32,
    record_time: i64,
    lag: i64,
    emitted_at: i64,
) -> Message {
    progress_of(
        topic,
        tier,
        dc,
        host,
        emitted_at,
        partition,
        5000,
        Some(record_time),
        Some(lag),
    )
}

/// Many-to-one edges (docs/web.md, Verdicts, rule 3): a topic produced only in dc1 (dc2
/// has neither rows nor progress for it) with 5 % lost on the way to the aggregate:
/// loss, final. A topic in both datacenters: ok.
async fn many_to_one_region_only_topic(backend: Backend) {
    let (store, _db) = store(backend).await;
    let config: Config = toml::from_str(MANY_TO_ONE).expect("config parses");
    let state = AppState::new(config, store).expect("state");
    let w = settled_window();
    write(
        &state.store,
        vec![
            increment("payments-eu", "regional", "dc1", w, 100, 7),
            increment("payments-eu", "aggregate", "agg", w, 95, 6),
            caught_up("payments-eu", "regional", "dc1"),
            caught_up("payments-eu", "aggregate", "agg"),
            increment("orders", "regional", "dc1", w, 100, 7),
            increment("orders", "regional", "dc2", w, 50, 3),
            increment("orders", "aggregate", "agg", w, 150, 10),
            caught_up("orders", "regional", "dc1"),
            caught_up("orders", "regional", "dc2"),
            caught_up("orders", "aggregate", "agg"),
        ],
    )
    .await;
    // Long after the stall timeout: before the fix, dc2 "never reported progress" and
    // the window was stalled instead of loss.
    state.evaluate(now_ms() + 60 * MIN).await.expect("cycle");
    assert_eq!(
        verdicts(&state, "payments-eu", w),
        vec![(
            "regional".into(),
            "agg".into(),
            Verdict::Loss,
            Lifecycle::Final,
            "5 of 100 messages missing".into()
        )]
    );
    assert_eq!(verdicts(&state, "orders", w), vec![]);
}

/// Staged increments (docs/web.md, Verdicts, rule 5): an auditor catching up publishes
/// its last increments of `w` with progress past `w`'s settle time. The collector
/// staged both; the roll-up is held back by a lock on `audit_window` from another
/// connection. No final verdict until the increments are added up; then ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roll_up_held_back_gives_no_final_verdict_postgres() {
    let (state, db) = state(Backend::Postgres, "").await;
    let Db::Pg(db) = db else { unreachable!() };
    let w = settled_window();
    write(
        &state.store,
        vec![increment("orders", "producer", "dc1", w, 100, 7)],
    )
    .await;
    // Hold the roll-up: reads of audit_window are still allowed.
    let locker = sqlx::PgPool::connect(db.url()).await.expect("connect");
    let mut lock = locker.begin().await.expect("begin");
    sqlx::query("LOCK TABLE audit_window IN EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .expect("lock");
    let staged = Batch {
        messages: vec![
            increment("orders", "regional", "dc1", w, 60, 4),
            increment("orders", "regional", "dc1", w, 40, 3),
            caught_up("orders", "regional", "dc1"),
        ],
        rejects: vec![],
        received_at_ms: now_ms(),
    };
    state.store.stage_batch(&staged).await.expect("stage");
    let rollup = {
        let store = state.store.clone();
        tokio::spawn(async move { while store.rollup(1).await.expect("roll-up") > 0 {} })
    };
    for _ in 0..3 {
        state.evaluate(now_ms()).await.expect("cycle");
        let v = verdicts(&state, "orders", w);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(
            (v[0].2, v[0].3),
            (Verdict::Pending, Lifecycle::Settling),
            "{v:?}"
        );
        assert!(v[0].4.contains("roll-up"), "{v:?}");
        assert!(
            !rollup.is_finished(),
            "the lock should hold the roll-up back"
        );
    }
    lock.commit().await.expect("release");
    tokio::time::timeout(Duration::from_secs(60), rollup)
        .await
        .expect("roll-up finishes once the lock is released")
        .expect("roll-up task");
    state.evaluate(now_ms()).await.expect("cycle");
    assert_eq!(verdicts(&state, "orders", w), vec![]);
}

/// Lag 0 as of when measured (docs/web.md, Verdicts, rule 3): lag 0 measured before `w`
/// settled, delivered after a backlog (received now): it says nothing about data
/// written since it was measured. Pending, not loss.
async fn lag_zero_is_dated_by_emitted_at(backend: Backend) {
    let (state, _db) = state(backend, "").await;
    let w = settled_window();
    write(
        &state.store,
        vec![
            increment("orders", "producer", "dc1", w, 100, 7),
            increment("orders", "regional", "dc1", w, 90, 6),
            progress("orders", "regional", "dc1", "r0", 0, w, 0, w + WINDOW),
        ],
    )
    .await;
    state.evaluate(now_ms()).await.expect("cycle");
    let v = verdicts(&state, "orders", w);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(
        (v[0].2, v[0].3),
        (Verdict::Pending, Lifecycle::Settling),
        "{v:?}"
    );
    // A measurement after the settle time: final, and the loss is real.
    write(&state.store, vec![caught_up("orders", "regional", "dc1")]).await;
    state.evaluate(now_ms()).await.expect("cycle");
    let v = verdicts(&state, "orders", w);
    assert_eq!((v[0].2, v[0].3), (Verdict::Loss, Lifecycle::Final), "{v:?}");
}

/// Forgotten progress (docs/web.md, Verdicts, rule 3): a deleted topic's auditor is
/// stalled after `stall_after`, and forgotten (no auditor status, so no stalled alert)
/// after `forget_after` (24 h by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_topic_is_forgotten_after_forget_after_postgres() {
    let (state, _db) = state(Backend::Postgres, "").await;
    let w = settled_window();
    let last = now_ms() - 60 * MIN;
    write_at(
        &state.store,
        vec![
            increment("deleted", "producer", "dc1", w, 100, 7),
            increment("deleted", "regional", "dc1", w, 100, 7),
            progress("deleted", "regional", "dc1", "r0", 0, w + WINDOW, 0, last),
        ],
        last,
    )
    .await;
    let key = (
        "deleted".to_string(),
        "regional".to_string(),
        "dc1".to_string(),
    );
    state.evaluate(now_ms()).await.expect("cycle");
    assert!(state.index.read().unwrap().auditors[&key].stalled);
    state
        .evaluate(last + 24 * 60 * MIN + MIN)
        .await
        .expect("cycle");
    let index = state.index.read().unwrap();
    assert!(
        !index.auditors.contains_key(&key),
        "{:?}",
        index.auditors.get(&key)
    );
    let alerts = web::alert::desired(
        &index,
        &state.config.alerting,
        state.topology.get().expect("window set").stall_after_ms,
    );
    assert!(alerts.is_empty(), "{alerts:#?}");
}

/// Stall per partition (docs/web.md, Verdicts, rule 3): two instances of the regional
/// auditor; b stopped publishing two hours ago while a keeps reporting: the auditor is
/// stalled, b is named, and the window waiting on b's partition is stalled rather than
/// pending forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_stuck_instance_is_stalled_postgres() {
    let (state, _db) = state(Backend::Postgres, "").await;
    let w = settled_window();
    let now = now_ms();
    let before = now - 120 * MIN;
    write_at(
        &state.store,
        vec![
            increment("orders", "producer", "dc1", w, 100, 7),
            increment("orders", "regional", "dc1", w, 90, 6),
            progress("orders", "regional", "dc1", "regional-b", 1, w, 3, before),
        ],
        before,
    )
    .await;
    write_at(
        &state.store,
        vec![progress(
            "orders",
            "regional",
            "dc1",
            "regional-a",
            0,
            now,
            0,
            now,
        )],
        now,
    )
    .await;
    state.evaluate(now).await.expect("cycle");
    let key = (
        "orders".to_string(),
        "regional".to_string(),
        "dc1".to_string(),
    );
    let status = state.index.read().unwrap().auditors[&key].clone();
    assert!(status.stalled, "{status:?}");
    assert_eq!(status.stalled_instances, vec!["regional-b"]);
    assert_eq!(status.stalled_partitions, vec![1]);
    let v = verdicts(&state, "orders", w);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].2, Verdict::Stalled, "{v:?}");
    assert!(
        v[0].4.contains("partition 1 (instance regional-b)"),
        "{v:?}"
    );
}

/// A local webhook receiver: every request body, in order.
async fn start_receiver() -> (Arc<Mutex<Vec<Value>>>, String) {
    async fn handle(
        State(got): State<Arc<Mutex<Vec<Value>>>>,
        Json(body): Json<Value>,
    ) -> StatusCode {
        got.lock().unwrap().push(body);
        StatusCode::ACCEPTED
    }
    let got = Arc::new(Mutex::new(Vec::new()));
    let app = Router::new()
        .route("/hook", post(handle))
        .with_state(got.clone());
    let base = serve_local(app).await;
    (got, base)
}

/// The downstream auditor starts late (a restart or a deploy) and catches up. Its
/// first report comes before librdkafka knows the partition's high watermark: it is in
/// the middle of its backlog (60 of 100 messages of `w` read), lag null, and the last
/// record it read has a CreateTime past `w`'s settle time. (Seen on the real broker:
/// an auditor started after 60 000 messages reported partition 0 at offset 6 832 of
/// 10 000 with `lag: null` and the record time of that record.) Every evaluation and
/// every page a webhook receiver gets over the whole run is checked, not only the final
/// verdict: a page that later resolves has still woken someone. A control topic with
/// real loss shows the channel delivers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_auditor_catching_up_pages_nothing_postgres() {
    let (got, base) = start_receiver().await;
    let cfg = one_webhook(&format!("{base}/hook"));
    let (state, _db) = state(Backend::Postgres, &cfg).await;
    let mut hook = ChannelWorker::new(
        state.config.alerting.channels[0].clone(),
        state.config.alerting.clone(),
        state.metrics.clone(),
        None,
    );
    let step = |state: &AppState| {
        let index = state.index.read().unwrap();
        web::alert::desired(
            &index,
            &state.config.alerting,
            state.topology.get().expect("window set").stall_after_ms,
        )
    };
    let w = settled_window();
    let now = now_ms();
    write(
        &state.store,
        [
            vec![increment("orders", "producer", "dc1", w, 100, 10)],
            seed_control(w),
        ]
        .concat(),
    )
    .await;
    // The first report of the late auditor.
    write(
        &state.store,
        vec![
            increment("orders", "regional", "dc1", w, 60, 6),
            progress_of(
                "orders",
                "regional",
                "dc1",
                "regional-dc1-0",
                now,
                0,
                6832,
                Some(now - 1000),
                None,
            ),
        ],
    )
    .await;
    state.evaluate(now).await.expect("cycle");
    hook.sync(&step(&state), now).await;
    let first = verdicts(&state, "orders", w);
    // The next report: the rest of the backlog, lag 0.
    write(
        &state.store,
        vec![
            increment("orders", "regional", "dc1", w, 40, 4),
            progress(
                "orders",
                "regional",
                "dc1",
                "regional-dc1-0",
                0,
                now_ms(),
                0,
                now_ms(),
            ),
        ],
    )
    .await;
    let later = now_ms();
    state.evaluate(later).await.expect("cycle");
    hook.sync(&step(&state), later).await;
    assert_eq!(verdicts(&state, "orders", w), vec![]);
    let pages = got.lock().unwrap().clone();
    let keys: Vec<(&str, &str)> = pages
        .iter()
        .map(|p| {
            (
                p["action"].as_str().unwrap(),
                p["dedup_key"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        vec![(
            "trigger",
            format!("kafka-audit:control:producer->regional:dc1:{w}").as_str()
        )],
        "{pages:#?}"
    );
    assert_eq!(
        (first[0].2, first[0].3),
        (Verdict::Pending, Lifecycle::Settling),
        "{first:?}"
    );
}

/// A final window in duplication pages; then a newer report of its downstream auditor
/// says the partition is behind again, with an older record time (a lag of 0 computed
/// on a stale high watermark, corrected by the next statistics), so the window is
/// settling again; then final again with the same duplication. The on-call must get
/// one page, not trigger, resolve, trigger (seen in the end-to-end `untimed` run: the
/// worker resolved every open alert whose window was not final at that moment).
async fn an_open_alert_stays_open_while_its_window_settles_again(backend: Backend) {
    let (got, base) = start_receiver().await;
    let cfg = one_webhook(&format!("{base}/hook"));
    let (state, _db) = state(backend, &cfg).await;
    let mut hook = ChannelWorker::new(
        state.config.alerting.channels[0].clone(),
        state.config.alerting.clone(),
        state.metrics.clone(),
        None,
    );
    let cycle = |state: &AppState| state.published_alerts().expect("published");
    let w = settled_window();
    let report = |record_time: i64, lag: i64| {
        progress(
            "orders",
            "regional",
            "dc1",
            "regional-dc1-0",
            0,
            record_time,
            lag,
            now_ms(),
        )
    };
    write(
        &state.store,
        vec![
            increment("orders", "producer", "dc1", w, 100, 10),
            increment("orders", "regional", "dc1", w, 110, 11),
            report(now_ms(), 0),
        ],
    )
    .await;
    let mut lifecycles = vec![];
    for step in 0..3 {
        if step == 1 {
            write(&state.store, vec![report(w + MIN, 5)]).await;
        }
        if step == 2 {
            write(&state.store, vec![report(now_ms(), 0)]).await;
        }
        let now = now_ms();
        state.evaluate(now).await.expect("cycle");
        let v = verdicts(&state, "orders", w);
        lifecycles.push(v.iter().map(|e| (e.2, e.3)).collect::<Vec<_>>());
        hook.sync_judged(&cycle(&state), now).await;
    }
    assert_eq!(
        lifecycles,
        vec![
            vec![(Verdict::Duplication, Lifecycle::Final)],
            vec![(Verdict::Pending, Lifecycle::Settling)],
            vec![(Verdict::Duplication, Lifecycle::Final)],
        ],
        "the scenario: final, settling again, final"
    );
    let pages: Vec<(String, String)> = got
        .lock()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["action"].as_str().unwrap().to_string(),
                p["dedup_key"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        pages,
        vec![(
            "trigger".to_string(),
            format!("kafka-audit:orders:producer->regional:dc1:{w}")
        )],
        "one page over the whole run"
    );
}

/// `control` lost 10 of 100 between producer and regional in `w`, caught up.
fn seed_control(w: i64) -> Vec<Message> {
    vec![
        increment("control", "producer", "dc1", w, 100, 1000),
        increment("control", "regional", "dc1", w, 90, 900),
        caught_up("control", "regional", "dc1"),
    ]
}

/// Writes window `w` of `orders` as an honest producer and a regional auditor configured
/// with window_size = "5m" under the 10-minute topology would.
async fn write_a_short_regional_window(store: &store::Store, w: i64) {
    let mut short = increment("orders", "regional", "dc1", w, 100, 1000);
    if let store::AuditBody::Increment(i) = &mut short.body {
        i.window_end = w + 5 * MIN;
    }
    write(
        store,
        vec![
            increment("orders", "producer", "dc1", w, 100, 1000),
            short,
            caught_up("orders", "regional", "dc1"),
        ],
    )
    .await;
}

/// The window size is configured in two processes (the auditor's
/// `audit.event_time.window_size`, web's `[topology] window`). When they disagree, the
/// evaluator says so at run time: a log line, the `kafka_audit_window_size_mismatch`
/// gauge per tier and datacenter, and `/readyz` naming the tier. When the mismatched
/// windows leave the horizon, all three go away.
async fn window_size_mismatch_is_reported(backend: Backend) {
    let (state, _db) = state(backend, "").await;
    let w = settled_window();
    write_a_short_regional_window(&state.store, w).await;
    state.evaluate(now_ms()).await.expect("cycle");

    let metrics = state.metrics.encode();
    assert!(
        metrics.contains(
            "kafka_audit_window_size_mismatch{tier=\"regional\",datacenter=\"dc1\"} 300000"
        ),
        "{metrics}"
    );
    assert!(
        !metrics.contains("kafka_audit_window_size_mismatch{tier=\"producer\""),
        "{metrics}"
    );
    let ready = get(&state, "/readyz").await;
    assert_eq!(ready.status, StatusCode::OK);
    assert_eq!(
        ready.body["window_size_mismatch"],
        serde_json::json!([{
            "tier": "regional",
            "datacenter": "dc1",
            "topic": "orders",
            "window_ms": 300_000,
            "topology_window_ms": WINDOW,
        }]),
        "{}",
        ready.body
    );

    // Eight days later (horizon: 7 days) the window has left it: nothing is reported any more.
    state
        .evaluate(now_ms() + 8 * 24 * 60 * MIN)
        .await
        .expect("cycle");
    let metrics = state.metrics.encode();
    assert!(
        !metrics.contains("kafka_audit_window_size_mismatch{"),
        "{metrics}"
    );
    let ready = get(&state, "/readyz").await;
    assert!(
        ready.body.get("window_size_mismatch").is_none(),
        "{}",
        ready.body
    );
}

/// `/readyz` answers from the last complete cycle while the next one runs: the cycle
/// is driven one poll at a time (each `Pending` is the cycle waiting in a store read),
/// and between polls `/readyz` must still name the mismatched tier the first cycle
/// found. An index written piece by piece (mismatches taken out while the windows are
/// read) answered none there.
async fn readyz_during_a_cycle_reports_the_last_complete_cycle(backend: Backend) {
    let (state, _db) = state(backend, "").await;
    let w = settled_window();
    write_a_short_regional_window(&state.store, w).await;
    state.evaluate(now_ms()).await.expect("first cycle");
    let expected = serde_json::json!([{
        "tier": "regional",
        "datacenter": "dc1",
        "topic": "orders",
        "window_ms": 300_000,
        "topology_window_ms": WINDOW,
    }]);
    let ready = get(&state, "/readyz").await;
    assert_eq!(
        ready.body["window_size_mismatch"], expected,
        "{}",
        ready.body
    );

    // A cycle whose reads all answer before it is polled again never suspends (a
    // loaded machine): cycles are run until one did, at most 20.
    let mut suspended = 0;
    for cycle_no in 1..=20 {
        let mut cycle = std::pin::pin!(state.evaluate_cycle(now_ms() + cycle_no * MIN));
        loop {
            let step = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(std::future::Future::poll(cycle.as_mut(), cx))
            })
            .await;
            match step {
                std::task::Poll::Ready(r) => {
                    r.expect("cycle");
                    break;
                }
                std::task::Poll::Pending => {
                    suspended += 1;
                    let ready = get(&state, "/readyz").await;
                    assert_eq!(
                        ready.body["window_size_mismatch"], expected,
                        "while the cycle waits in a store read (suspension {suspended}): {}",
                        ready.body
                    );
                }
            }
        }
        if suspended > 0 {
            break;
        }
    }
    assert!(suspended > 0, "the cycle never waited for the store");
    let ready = get(&state, "/readyz").await;
    assert_eq!(
        ready.body["window_size_mismatch"], expected,
        "{}",
        ready.body
    );
}

/// A 5-minute window: the auditors' `window_size = "5m"`.
fn five_minute(topic: &str, tier: &str, w: i64, count: u64) -> Message {
    let mut m = increment(topic, tier, "dc1", w, count, count * 10);
    if let store::AuditBody::Increment(i) = &mut m.body {
        i.window_end = w + 5 * MIN;
    }
    m
}

/// `[topology]` without `window`: serve learns the size from the auditors' windows.
async fn state_without_window(backend: Backend) -> (AppState, Db) {
    let (store, db) = store(backend).await;
    let topology = TOPOLOGY.replace("window = \"10m\"\n", "");
    assert!(!topology.contains("window ="), "{topology}");
    let config: Config = toml::from_str(&topology).expect("config parses");
    config.validate().expect("config without window is valid");
    (AppState::new(config, store).expect("state"), db)
}

/// With no `[topology] window`, the auditors' `audit.event_time.window_size` is the
/// one source of truth: until the store holds a window, serve is not ready and says
/// why; then it judges in the stored windows' size (5 minutes here, not the old 10-minute
/// default), with no mismatch reported.
async fn window_size_is_learned_from_the_store(backend: Backend) {
    let (state, _db) = state_without_window(backend).await;
    state
        .evaluate(now_ms())
        .await
        .expect("cycle on an empty store");
    let ready = get(&state, "/readyz").await;
    assert_eq!(
        ready.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        ready.body
    );
    assert_eq!(ready.body["status"], "not ready", "{}", ready.body);
    assert!(
        ready.body["waiting_for"]
            .as_str()
            .is_some_and(|s| s.contains("window size")),
        "{}",
        ready.body
    );
    // The API that needs the window size answers 503 until it is known.
    let topology = get(&state, "/api/v1/topology").await;
    assert_eq!(
        topology.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        topology.body
    );

    // Two 5-minute windows, the second not aligned on 10 minutes; 10 % loss in each.
    let w = settled_window();
    let w2 = w + 5 * MIN;
    write(
        &state.store,
        vec![
            five_minute("orders", "producer", w, 100),
            five_minute("orders", "regional", w, 90),
            five_minute("orders", "producer", w2, 100),
            five_minute("orders", "regional", w2, 90),
            caught_up("orders", "regional", "dc1"),
        ],
    )
    .await;
    state.evaluate(now_ms()).await.expect("cycle");

    let ready = get(&state, "/readyz").await;
    assert_eq!(ready.status, StatusCode::OK, "{}", ready.body);
    assert!(ready.body.get("waiting_for").is_none(), "{}", ready.body);
    assert!(
        ready.body.get("window_size_mismatch").is_none(),
        "{}",
        ready.body
    );
    let metrics = state.metrics.encode();
    assert!(
        !metrics.contains("kafka_audit_window_size_mismatch{"),
        "{metrics}"
    );
    let topology = get(&state, "/api/v1/topology").await;
    assert_eq!(topology.status, StatusCode::OK, "{}", topology.body);
    assert_eq!(topology.body["window_ms"], 5 * MIN, "{}", topology.body);
    for start in [w, w2] {
        let v = verdicts(&state, "orders", start);
        assert_eq!(v.len(), 1, "window {start}: {v:?}");
        assert_eq!(v[0].2, Verdict::Loss, "window {start}: {v:?}");
    }
}

/// Stored windows of two sizes without `[topology] window` (the auditors were
/// reconfigured, or one emitter sent another size): the size fixed at first sight
/// rules, and the other is reported as a mismatch. Before, serve learned the newest
/// window's size, so one increment of any size starting last (security review 2,
/// finding 5) changed which windows every tier was judged in.
async fn learned_window_reports_older_sizes_as_mismatch(backend: Backend) {
    let (state, _db) = state_without_window(backend).await;
    let old = settled_window() - 60 * MIN;
    let w = settled_window();
    write(
        &state.store,
        vec![
            // Before: 10-minute windows at both tiers.
            increment("orders", "producer", "dc1", old, 100, 1000),
            increment("orders", "regional", "dc1", old, 100, 1000),
            // Now: 5-minute windows.
            five_minute("orders", "producer", w, 100),
            five_minute("orders", "regional", w, 100),
            caught_up("orders", "regional", "dc1"),
        ],
    )
    .await;
    state.evaluate(now_ms()).await.expect("cycle");
    let ready = get(&state, "/readyz").await;
    assert_eq!(ready.status, StatusCode::OK, "{}", ready.body);
    let reported: Vec<(String, i64, i64)> = ready.body["window_size_mismatch"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", ready.body))
        .iter()
        .map(|m| {
            (
                m["tier"].as_str().unwrap().to_string(),
                m["window_ms"].as_i64().unwrap(),
                m["topology_window_ms"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        reported,
        vec![
            ("producer".to_string(), 5 * MIN, WINDOW),
            ("regional".to_string(), 5 * MIN, WINDOW),
        ],
        "{}",
        ready.body
    );
    assert_eq!(
        get(&state, "/api/v1/topology").await.body["window_ms"],
        WINDOW
    );
}

/// An increment of `tier`/`dc` counting `count` records of window `w` in partition 0
/// whose latest record time there is `record_time` (the upstream's evidence of
/// docs/web.md, Verdicts, rule 4).
fn counted(tier: &str, dc: &str, w: i64, count: u64, checksum: u64, record_time: i64) -> Message {
    let mut m = increment("orders", tier, dc, w, count, checksum);
    if let store::AuditBody::Increment(i) = &mut m.body {
        i.stats.offsets[0].max_record_time = Some(record_time);
        i.stats.max_observed_at = Some(record_time);
    }
    m
}

/// The aggregate/agg auditor has read partition 0 to its end, up to record time
/// `latest` (measured now).
fn aggregate_read(latest: i64) -> Message {
    let mut m = progress(
        "orders",
        "aggregate",
        "agg",
        "aggregate-agg-0",
        0,
        latest,
        0,
        now_ms(),
    );
    if let store::AuditBody::Progress(p) = &mut m.body {
        p[0].max_record_time = Some(latest);
    }
    m
}

/// Late data re-arms settling (docs/web.md, Verdicts, rule 4). Two windows of an
/// hour-old replay are judged (`ok` is ok, `lossy` a loss of 10, paged); then the
/// upstream counts 10 more of each (a later record time) that the downstream has not
/// read yet: both go back to settling — no loss page for `ok`, and `lossy`'s open alert
/// neither resolves nor pages again — and the evaluator re-judges them because their
/// upstream increments arrived. Once the downstream has read past (with the 10 late
/// ones of each and the 10 `lossy` missed), both are final and ok: `lossy`'s alert
/// resolves. The pages are checked after every cycle, so a resolve and a new trigger in
/// between would show.
async fn a_late_upstream_increment_re_arms_its_window(backend: Backend) {
    let (got, base) = start_receiver().await;
    let (store, _db) = store(backend).await;
    let config: Config = toml::from_str(&format!(
        "{MANY_TO_ONE}\n{}",
        one_webhook(&format!("{base}/hook"))
    ))
    .expect("config parses");
    let state = AppState::new(config, store).expect("state");
    let mut hook = ChannelWorker::new(
        state.config.alerting.channels[0].clone(),
        state.config.alerting.clone(),
        state.metrics.clone(),
        None,
    );
    let ok = settled_window();
    let lossy = ok + WINDOW;
    let replayed = now_ms() - 5 * MIN;
    let late = replayed + 3 * MIN;
    let pages = || -> Vec<(String, i64)> {
        got.lock()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["action"].as_str().unwrap().to_string(),
                    p["window_start"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    let steps: Vec<Vec<Message>> = vec![
        vec![
            counted("regional", "dc1", ok, 100, 7, replayed),
            counted("regional", "dc1", lossy, 100, 7, replayed),
            counted("aggregate", "agg", ok, 100, 7, replayed),
            counted("aggregate", "agg", lossy, 90, 6, replayed),
            caught_up("orders", "regional", "dc1"),
            aggregate_read(replayed + 1_000),
        ],
        vec![
            counted("regional", "dc1", ok, 10, 1, late),
            counted("regional", "dc1", lossy, 10, 1, late),
            caught_up("orders", "regional", "dc1"),
        ],
        vec![
            counted("aggregate", "agg", ok, 10, 1, late),
            counted("aggregate", "agg", lossy, 20, 2, late),
            aggregate_read(late + 1),
        ],
    ];
    let mut seen = vec![];
    for messages in steps {
        write(&state.store, messages).await;
        let now = now_ms();
        state.evaluate(now).await.expect("cycle");
        hook.sync_judged(&state.published_alerts().expect("published"), now)
            .await;
        let judged = |w| {
            verdicts(&state, "orders", w)
                .iter()
                .map(|e| (e.2, e.3))
                .collect()
        };
        let judged: (Vec<_>, Vec<_>) = (judged(ok), judged(lossy));
        seen.push((judged, pages()));
    }
    let settling = vec![(Verdict::Pending, Lifecycle::Settling)];
    let trigger = ("trigger".to_string(), lossy);
    assert_eq!(
        seen,
        vec![
            (
                (vec![], vec![(Verdict::Loss, Lifecycle::Final)]),
                vec![trigger.clone()]
            ),
            // reverted (rule 4's re-arming): `ok` final loss (10 of 110 missing), paged
            ((settling.clone(), settling), vec![trigger.clone()]),
            (
                (vec![], vec![]),
                vec![trigger, ("resolve".to_string(), lossy)]
            ),
        ],
        "(verdicts of ok and lossy, pages so far) after each cycle"
    );
}
