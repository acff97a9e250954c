//! A loss proven before its window is final (issue 28) stays a loss: once the counts
//! catch up, and after a restart of serve (the proof is kept in the store,
//! `web_proven_loss`), in the index, `/compare` and `/completeness` alike.

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
);

fn one_cluster() -> web::Config {
    support::config(ON_ONE_CLUSTER)
}

/// While `w` is open: the producer tier counted 100 records on partition 0, the last
/// at w + 4 min; the regional tier 63; its auditor read partition 0 to the end at
/// w + 4.5 min, after that. Evaluated at w + 5 min: 37 proven missing.
async fn seed_proven(store: &store::Store, w: i64) {
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
    write(
        store,
        vec![
            produced,
            increment("orders", "regional", "dc1", w, 63, 630),
            read,
        ],
    )
    .await;
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
