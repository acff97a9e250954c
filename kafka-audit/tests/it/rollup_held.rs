//! Staged increments hold their windows back (docs/web.md, Verdicts, rule 5), end to
//! end: PostgreSQL's roll-up is held back (`LOCK TABLE audit_window IN EXCLUSIVE MODE`
//! from another connection: reads still allowed, the roll-up blocks) while a downstream
//! auditor started after the traffic catches up. The collector stages its increments
//! and stores its progress, which says it has read past every window; the evaluator
//! must not judge a window final before those increments are added up (before the fix:
//! a final loss of every message, paged, then resolved). Once the lock is released
//! every window is final and ok, and the webhook receiver got no page over the whole
//! run.

use crate::e2e;

use std::time::Duration;

use e2e::*;
use store::VerdictReads;
use web::engine::Lifecycle;

const PARTITIONS: i32 = 2;
const GRACE_MS: i64 = 5_000;

/// The stored (rolled-up) count of `tier` over the windows of `sent`.
async fn tier_count(state: &web::AppState, topic: &str, sent: &Replicated, tier: &str) -> u64 {
    state
        .store
        .topic_windows(topic, store::TimeRange::new(sent.first(), sent.end()))
        .await
        .expect("rows")
        .iter()
        .filter(|r| r.tier == tier)
        .map(|r| r.count)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_final_verdict_while_the_roll_up_is_held_back() {
    let _alone = crate::ALONE.lock().await;
    let t = OneTopic::start("rollup-held-e2e", PARTITIONS).await;
    let (rig, topic, state) = (&t.rig, t.topic.as_str(), &t.state);

    let sent = rig
        .spawn_traffic(
            topic,
            Traffic {
                partitions: PARTITIONS,
                rate: 50,
                duration: Duration::from_secs(12),
                faults: Faults::NONE,
            },
        )
        .await
        .expect("traffic");
    let (up, _) = sent.total();
    let tier_sum = |tier: &'static str| tier_count(state, topic, &sent, tier);
    // The upstream tier's increments are added up before the roll-up is held.
    let upstream_in = testkit::wait_until_async(Duration::from_secs(120), || async {
        tier_sum("regional").await == up
    })
    .await;
    assert!(upstream_in, "the regional increments never all arrived");

    let locker = sqlx::PgPool::connect(rig.db.url()).await.expect("connect");
    let mut lock = locker.begin().await.expect("begin");
    sqlx::query("LOCK TABLE audit_window IN EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .expect("lock");

    // The downstream auditor starts after the last window's grace and catches up.
    sleep_until_ms(sent.end() + GRACE_MS).await;
    let downstream = rig.spawn_auditor(rig.aggregate(&[topic]));
    let settled = sent.end() + GRACE_MS;
    let read_past = testkit::wait_until_async(Duration::from_secs(120), || async {
        let p = state.store.progress(Some(topic)).await.expect("progress");
        let agg: Vec<_> = p.iter().filter(|p| p.tier == "aggregate").collect();
        agg.len() == PARTITIONS as usize
            && agg
                .iter()
                .all(|p| p.lag == Some(0) && p.emitted_at_ms >= settled)
    })
    .await;
    // Evaluations with that progress in, the increments staged, the roll-up held.
    let mut judged_while_held = Vec::new();
    for _ in 0..3 {
        state.evaluate(common::now_ms()).await.expect("cycle");
        judged_while_held.extend(
            anomalies(state, topic, sent.first(), sent.end())
                .into_iter()
                .filter(|j| j.2 == Lifecycle::Final),
        );
    }
    let aggregate_rows_while_held = tier_sum("aggregate").await;
    lock.commit().await.expect("release the lock");

    let all_final = wait_sent_final(state, topic, &sent, Duration::from_secs(240)).await;
    let judged = anomalies(state, topic, sent.first(), sent.end());
    t.shutdown([downstream]).await;

    assert!(
        read_past,
        "the aggregate auditor never reported lag 0 past the windows"
    );
    assert_eq!(
        aggregate_rows_while_held, 0,
        "the lock did not hold the roll-up back"
    );
    assert!(
        judged_while_held.is_empty(),
        "final verdicts while the increments were staged: {judged_while_held:?} (sent {sent:?})"
    );
    assert!(
        all_final,
        "windows not all final: {judged:?} (sent {sent:?})"
    );
    assert!(judged.is_empty(), "anomalies: {judged:?}");
    assert!(
        rig.pages.of(topic).is_empty(),
        "pages: {:#?}",
        rig.pages.all()
    );
}
