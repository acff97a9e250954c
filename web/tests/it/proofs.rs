//! A loss proven before its window is final stays a loss (docs/design.md §6, the
//! proven-loss hold): once the counts catch up, and after a restart of serve (the proof
//! is kept in the store, `web_proven_loss`), in the index, `/compare` and
//! `/completeness` alike.

use crate::support;

use axum::http::StatusCode;
use store::{AuditBody, Message};
use support::*;
use web::engine::{Lifecycle, SoFar, Verdict};
use web::AppState;

/// producer → regional (`support::TOPOLOGY`) on one cluster: the producer tier's
/// acknowledged offsets are their own evidence (`same_cluster`).
const ON_ONE_CLUSTER: &str = r#"replicator = "same_cluster"
[serve]
evaluate_every = "1h"
"#;

/// (verdict, lifecycle, so_far, reason) of producer → regional in dc1 for `w`, from
/// the index (absent: ok).
fn judged(state: &AppState, w: i64) -> Option<(Verdict, Lifecycle, Option<SoFar>, String)> {
    let index = state.index.read().unwrap();
    let found = index
        .in_range(w, w + 1)
        .find(|e| e.topic == "orders" && e.datacenter == "dc1")
        .map(|e| (e.verdict, e.lifecycle, e.so_far, e.reason.clone()));
    found
}

on_both_backends!(
    a_proven_loss_stays_a_loss_after_the_counts_catch_up_and_a_restart,
    a_full_index_keeps_and_records_no_more_proofs,
    one_cycle_records_no_more_proofs_than_there_is_room_for,
    a_proof_withdrawn_through_the_api_resolves_its_page_with_the_reason,
);

fn one_cluster() -> web::Config {
    support::config(ON_ONE_CLUSTER)
}

/// While `w` is open: the producer tier counted 100 records on partition 0, the last
/// at w + 4 min; the regional tier 63; its auditor read partition 0 to the end at
/// w + 4.5 min, after that. Evaluated at w + 5 min: 37 proven missing.
async fn seed_proven(store: &store::Store, w: i64) {
    seed_proven_received(store, w, now_ms()).await;
}

/// [`seed_proven`], received by the collector at `received_at`.
async fn seed_proven_received(store: &store::Store, w: i64, received_at: i64) {
    let mut produced = increment("orders", "producer", "dc1", w, 100, 1000);
    if let AuditBody::Increment(i) = &mut produced.body {
        i.stats.max_observed_at = Some(w + 4 * MIN);
    }
    let read_at = w + 4 * MIN + 30_000;
    let read = progress_of(
        "orders",
        "regional",
        "dc1",
        "regional-dc1-0",
        read_at,
        0,
        2000,
        Some(read_at - 1000),
        Some(0),
    );
    write_received(
        store,
        vec![
            produced,
            increment("orders", "regional", "dc1", w, 63, 630),
            read,
        ],
        received_at,
    )
    .await;
}

async fn write_received(store: &store::Store, messages: Vec<Message>, received_at_ms: i64) {
    use store::Ingest;
    let batch = store::Batch {
        messages,
        rejects: vec![],
        received_at_ms,
    };
    store.write_batch(&batch).await.expect("seed batch");
}

async fn a_proven_loss_stays_a_loss_after_the_counts_catch_up_and_a_restart(backend: Backend) {
    let (store, _db) = support::store(backend).await;
    let w = settled_window();
    seed_proven(&store, w).await;
    let first = AppState::new(one_cluster(), store.clone()).expect("state");
    first.evaluate(w + 5 * MIN).await.unwrap();
    let (verdict, lifecycle, so_far, proof) = judged(&first, w).expect("a verdict");
    assert_eq!(
        (verdict, lifecycle, so_far),
        (Verdict::Loss, Lifecycle::Open, Some(SoFar::Loss)),
        "{proof}"
    );
    assert!(proof.contains("at least 37 "), "{proof}");
    drop(first);

    // The 37 records arrive after all (the counts alone now say ok), the regional
    // auditor reads past the window's end + grace, and serve restarts.
    let caught_up: Vec<Message> = vec![
        increment("orders", "regional", "dc1", w, 37, 370),
        caught_up("orders", "regional", "dc1"),
    ];
    write(&store, caught_up).await;
    let second = AppState::new(one_cluster(), store.clone()).expect("state");
    second.evaluate(now_ms()).await.unwrap();
    let (verdict, lifecycle, so_far, reason) = judged(&second, w).expect("a verdict");
    assert_eq!(
        (verdict, lifecycle, so_far),
        (Verdict::Loss, Lifecycle::Final, Some(SoFar::Loss)),
        "{reason}"
    );
    assert_eq!(
        reason,
        format!("a loss was proven while the window was open ({proof}); now ok: complete")
    );
    // The API says the same.
    let range = format!("from={w}&to={}", w + WINDOW);
    let r = get(&second, &format!("/api/v1/topics/orders/compare?{range}")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let edge = &r.body["edges"][0];
    assert_eq!(
        (
            &edge["expected"],
            &edge["observed"],
            &edge["verdict"],
            &edge["so_far"]
        ),
        (
            &serde_json::json!(100),
            &serde_json::json!(100),
            &serde_json::json!("loss"),
            &serde_json::json!("loss")
        ),
        "{}",
        r.body
    );
    let r = get(
        &second,
        &format!("/api/v1/topics/orders/completeness?tier=regional&datacenter=dc1&{range}"),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["status"], "incomplete", "{}", r.body);
}

/// Proofs are bounded as verdicts are (`serve.max_verdicts`): a full index keeps no
/// more, and records none in the store (forged evidence would otherwise write its
/// proofs again at every cycle).
async fn a_full_index_keeps_and_records_no_more_proofs(backend: Backend) {
    use store::AlertLedger;
    let (store, _db) = support::store(backend).await;
    let w = settled_window();
    let mut cfg = one_cluster();
    cfg.serve.max_verdicts = 1;
    let state = AppState::new(cfg, store.clone()).expect("state");
    seed_proven(&store, w).await;
    state.evaluate(w + 5 * MIN).await.unwrap();
    let next = w + WINDOW;
    seed_proven(&store, next).await;
    for _ in 0..3 {
        state.evaluate(next + 5 * MIN).await.unwrap();
    }
    let kept: Vec<i64> = state
        .index
        .read()
        .unwrap()
        .proven
        .keys()
        .map(|k| k.window_start)
        .collect();
    assert_eq!(kept, vec![w]);
    let recorded: Vec<i64> = store
        .proven_losses(0, 10)
        .await
        .unwrap()
        .iter()
        .map(|p| p.window_start_ms)
        .collect();
    assert_eq!(recorded, vec![w]);
}

/// The room for proofs is checked against what the cycle already planned too
/// (reviews/security-3.md, M4): two windows provable in one cycle with room for one
/// record one proof, and the other is counted as refused.
async fn one_cycle_records_no_more_proofs_than_there_is_room_for(backend: Backend) {
    use store::AlertLedger;
    let (store, _db) = support::store(backend).await;
    let w = settled_window();
    let next = w + WINDOW;
    let mut cfg = one_cluster();
    cfg.serve.max_verdicts = 1;
    let state = AppState::new(cfg, store.clone()).expect("state");
    seed_proven(&store, w).await;
    seed_proven(&store, next).await;
    state.evaluate(next + 5 * MIN).await.unwrap();
    let kept = state.index.read().unwrap().proven.len();
    let recorded = store.proven_losses(0, 10).await.unwrap().len();
    assert_eq!((kept, recorded), (1, 1), "{backend:?}");
    let m = state.metrics.encode();
    assert!(
        m.contains("kafka_audit_proofs_refused_total 1"),
        "{backend:?}: {m}"
    );
}

/// An admin withdraws a proof whose evidence was wrong (docs/design.md §6, the
/// proven-loss hold). The page resolves with who withdrew it and why, `/compare` and
/// `/completeness` follow the counts, the ledger row is gone, the withdrawal is counted
/// and logged with the token's name. A read token is refused, and an unknown proof is
/// 404. The window is final and no increment of it arrives after the withdrawal (every
/// batch was received 10 minutes ago): only the withdrawal makes the next cycle judge
/// it again.
async fn a_proof_withdrawn_through_the_api_resolves_its_page_with_the_reason(backend: Backend) {
    use crate::alerts::{start_receiver, wait_for};
    use store::AlertLedger;
    const READ: &str = "read-token-0123456789abcdef";
    const ADMIN: &str = "admin-token-0123456789abcdef";
    let (receiver, base) = start_receiver().await;
    let cfg = support::config(&format!(
        r#"{ON_ONE_CLUSTER}
[alerting]
initial_backoff = "10ms"
max_backoff = "50ms"
[[alerting.channels]]
name = "hook"
kind = "webhook"
url = "{base}/ok/webhook"
[[auth.tokens]]
name = "dashboard"
token = "{READ}"
scopes = ["read"]
[[auth.tokens]]
name = "ops"
token = "{ADMIN}"
scopes = ["admin"]
"#
    ));
    let (store, _db) = support::store(backend).await;
    let w = settled_window();
    let received = now_ms() - 10 * MIN;
    seed_proven_received(&store, w, received).await;
    let state = AppState::new(cfg, store.clone()).expect("state");
    state.evaluate(w + 5 * MIN).await.unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let _jobs = state.spawn_jobs(&shutdown);
    wait_for("the loss page", || receiver.got().len() == 1).await;
    assert_eq!(receiver.got()[0].1["action"], "trigger");
    assert_eq!(receiver.got()[0].1["verdict"], "loss");

    // The records arrive after all (received 10 minutes ago), the regional auditor
    // reads past the window: the proof holds the final window as loss.
    write_received(
        &store,
        vec![increment("orders", "regional", "dc1", w, 37, 370)],
        received,
    )
    .await;
    write(&store, vec![caught_up("orders", "regional", "dc1")]).await;
    state.evaluate(now_ms()).await.unwrap();
    let (verdict, lifecycle, _, reason) = judged(&state, w).expect("a verdict");
    assert_eq!(
        (verdict, lifecycle),
        (Verdict::Loss, Lifecycle::Final),
        "{reason}"
    );
    // `/compare` shows what holds it: when it was proven, and the shortfall.
    let range = format!("from={w}&to={}", w + WINDOW);
    let compare = format!("/api/v1/topics/orders/compare?{range}");
    let r = support::request(&state, "GET", &compare, Some(READ)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let proofs = r.body["proofs"].as_array().expect("proofs").clone();
    assert_eq!(proofs.len(), 1, "{}", r.body);
    assert_eq!(
        (
            &proofs[0]["window_start"],
            &proofs[0]["upstream"],
            &proofs[0]["downstream"],
            &proofs[0]["datacenter"],
            &proofs[0]["proven_at"]
        ),
        (
            &serde_json::json!(w),
            &serde_json::json!("producer"),
            &serde_json::json!("regional"),
            &serde_json::json!("dc1"),
            &serde_json::json!(w + 5 * MIN)
        ),
        "{}",
        r.body
    );
    let proof = proofs[0]["proof"].as_str().unwrap().to_string();
    assert!(proof.contains("at least 37 "), "{proof}");

    let withdraw = |window: i64| {
        format!(
            "/api/v1/topics/orders/windows/{window}/proof?upstream=producer&downstream=regional&datacenter=dc1&reason=forged%20evidence%20(incident%2042)"
        )
    };
    // A read token may not; no reason, or an unknown proof: refused, nothing changes.
    let r = support::request(&state, "DELETE", &withdraw(w), Some(READ)).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    let r = support::request(
        &state,
        "DELETE",
        &format!("/api/v1/topics/orders/windows/{w}/proof?upstream=producer&downstream=regional&datacenter=dc1"),
        Some(ADMIN),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    let r = support::request(&state, "DELETE", &withdraw(w + WINDOW), Some(ADMIN)).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert_eq!(r.body["error"]["status"], 404, "{}", r.body);
    assert_eq!(store.proven_losses(0, 10).await.unwrap().len(), 1);

    let (logs, guard) = Logs::capture();
    let r = support::request(&state, "DELETE", &withdraw(w), Some(ADMIN)).await;
    drop(guard);
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(
        (
            &r.body["withdrawn_by"],
            &r.body["reason"],
            &r.body["proof"],
            &r.body["proven_at"]
        ),
        (
            &serde_json::json!("token \"ops\""),
            &serde_json::json!("forged evidence (incident 42)"),
            &serde_json::json!(proof),
            &serde_json::json!(w + 5 * MIN)
        ),
        "{}",
        r.body
    );
    let log = logs.text();
    assert!(
        log.contains("WARN")
            && log.contains("a proof of a loss was withdrawn")
            && log.contains(r#"withdrawn_by=token "ops""#)
            && log.contains("forged evidence (incident 42)")
            && !log.contains(ADMIN),
        "{log}"
    );
    assert!(store.proven_losses(0, 10).await.unwrap().is_empty());
    let m = state.metrics.encode();
    assert!(m.contains("kafka_audit_proofs_withdrawn_total 1"), "{m}");
    // Withdrawn once: a second time there is nothing to withdraw.
    let r = support::request(&state, "DELETE", &withdraw(w), Some(ADMIN)).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);

    // The next cycle judges the window again by its counts: ok, and the page resolves
    // with who withdrew the proof and why.
    state.evaluate(now_ms()).await.unwrap();
    assert_eq!(judged(&state, w), None);
    wait_for("the resolve", || receiver.got().len() == 2).await;
    let resolve = &receiver.got()[1].1;
    assert_eq!(
        (&resolve["action"], &resolve["verdict"], &resolve["reason"]),
        (
            &serde_json::json!("resolve"),
            &serde_json::json!("loss"),
            &serde_json::json!(
                "the proof of a loss was withdrawn by token \"ops\": forged evidence (incident 42)"
            )
        ),
        "{resolve}"
    );
    let r = support::request(&state, "GET", &compare, Some(READ)).await;
    assert_eq!(r.body["edges"][0]["verdict"], "ok", "{}", r.body);
    assert_eq!(r.body["proofs"], serde_json::json!([]), "{}", r.body);
    let r = support::request(
        &state,
        "GET",
        &format!("/api/v1/topics/orders/completeness?tier=regional&datacenter=dc1&{range}"),
        Some(READ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["status"], "complete", "{}", r.body);
    // A restart reads no proof back: still ok.
    shutdown.cancel();
    let restarted = AppState::new(state.config.as_ref().clone(), store.clone()).unwrap();
    restarted.evaluate(now_ms()).await.unwrap();
    assert_eq!(judged(&restarted, w), None);
}
