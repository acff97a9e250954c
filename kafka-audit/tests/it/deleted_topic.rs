//! Forgotten progress (docs/web.md, Verdicts, rule 3: `forget_after`), end to end: an
//! audited topic is deleted from both clusters while its auditors keep running (they
//! still audit a second topic). Its auditors stop reporting it: they are alerted
//! stalled after `stall_after`, and after `forget_after` they are no longer expected —
//! no stalled alert stays open in serve's alert state, and it is not resolved either:
//! the topic's audit was never fixed, so its alert expires without a notification
//! (`alerts_expired_total`). The kept topic is never paged. Before the first fix
//! progress rows never expired and the stalled alert stayed open for good; before the
//! second, forgetting sent a "resolved".

use crate::e2e;

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::*;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use store::{Deployment, VerdictReads};
use tokio_util::sync::CancellationToken;
use web::metrics::ChannelLabels;
use web::AppState;

const PARTITIONS: i32 = 2;
/// The rebalance a topic deletion causes (every partition revoked and assigned again)
/// takes milliseconds: the kept topic's auditors report every 500 ms throughout.
const STALL_AFTER: &str = "8s";
/// The longest the kept topic's latest progress may get old, per tier, across the
/// deletion: measured ~0.5 s (one report interval) on an idle machine.
const KEPT_GAP_MS: i64 = 4000;
const FORGET_AFTER: Duration = Duration::from_secs(40);

async fn delete_topic(bootstrap: &str, topic: &str) {
    let admin: AdminClient<DefaultClientContext> =
        testkit::client_config(bootstrap).create().expect("admin");
    for r in admin
        .delete_topics(&[topic], &AdminOptions::new())
        .await
        .expect("delete topics")
    {
        r.unwrap_or_else(|e| panic!("delete {topic}: {e:?}"));
    }
}

/// Whether the evaluator holds a stalled auditor of `topic`.
fn stalled(state: &AppState, topic: &str) -> bool {
    state
        .index
        .read()
        .unwrap()
        .auditors
        .iter()
        .any(|((t, _, _), s)| t == topic && s.stalled)
}

/// Whether the evaluator holds any auditor of `topic` (stalled or not).
fn expected(state: &AppState, topic: &str) -> bool {
    state
        .index
        .read()
        .unwrap()
        .auditors
        .keys()
        .any(|(t, _, _)| t == topic)
}

/// The oldest the latest received progress report of `topic` got, per tier: (age ms,
/// epoch ms when, age of its `emitted_at` ms), polled every 100 ms until `stop`.
type Staleness = BTreeMap<String, (i64, i64, i64)>;

fn watch_staleness(
    store: store::Store,
    topic: String,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<Staleness> {
    tokio::spawn(async move {
        let mut worst = Staleness::new();
        while !stop.is_cancelled() {
            let now = common::now_ms();
            let mut latest: BTreeMap<String, (i64, i64)> = BTreeMap::new();
            for r in store.progress(Some(&topic)).await.expect("progress") {
                let l = latest.entry(r.tier).or_default();
                *l = (l.0.max(r.received_at_ms), l.1.max(r.emitted_at_ms));
            }
            for (tier, (received, emitted)) in latest {
                let w = worst.entry(tier).or_default();
                if now - received > w.0 {
                    *w = (now - received, now, now - emitted);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        worst
    })
}

/// The cause of this test's flake (a stalled, then resolved, kept topic): every rig's
/// regional auditor was instance `regional-dc1-0`, so transactional id
/// `kafka-audit-regional-dc1-0`, on the shared cluster. Another end-to-end test running
/// at the same time (another test binary, another worktree) started the same
/// transactional id: each producer's `init_transactions` fenced the other's, every
/// transaction failed with "fenced by a newer instance", and neither auditor published
/// progress until the other stopped. Two rigs' auditors must never share a
/// transactional id; one auditor's configs (a restart) keep theirs.
#[test]
fn two_rigs_auditors_never_share_a_transactional_id() {
    let wal = tempfile::tempdir().unwrap();
    let tier = |tier, dc| tier_config("127.0.0.1:1", "t", "t-audit", tier, dc, wal.path());
    let (one, other) = (tier("regional", "dc1"), tier("regional", "dc1"));
    assert_eq!(one.audit.instance_id, other.audit.instance_id);
    assert_ne!(
        one.audit.transactional_id(),
        other.audit.transactional_id(),
        "two rigs' regional auditors fence each other"
    );
    let (a, b) = (tier("aggregate", "agg"), tier("aggregate", "agg"));
    assert_ne!(a.audit.transactional_id(), b.audit.transactional_id());
    let restarted = one.clone();
    assert_eq!(
        one.audit.transactional_id(),
        restarted.audit.transactional_id()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_topic_stops_being_expected_after_forget_after() {
    let _alone = crate::ALONE.lock().await;
    let rig = TwoTiers::new("deleted-e2e").await;
    let deleted = testkit::unique("deleted-e2e");
    let kept = testkit::unique("kept-e2e");
    for t in [&deleted, &kept] {
        rig.create_topic(t, PARTITIONS).await;
    }
    // librdkafka learns of a deleted topic at its next metadata refresh (5 min by
    // default): every 2 s here, so the auditors drop it from their assignment soon.
    let refresh = |mut cfg: audit_service::Config| {
        cfg.kafka
            .consumer
            .insert("topic.metadata.refresh.interval.ms".into(), "2000".into());
        cfg
    };
    let upstream = rig.spawn_auditor(refresh(rig.regional(&[&deleted, &kept])));
    let downstream = rig.spawn_auditor(refresh(rig.aggregate(&[&deleted, &kept])));
    let collector = rig.spawn_collector(rig.collect(500, ""), &rig.stop);
    let store = store::Store::connect(rig.db.url()).await.expect("connect");
    store.migrate().await.expect("migrate");
    let mut cfg = serve_config(r#"{ dc1 = "agg" }"#, STALL_AFTER, &rig.hook);
    cfg.topology.forget_after = FORGET_AFTER;
    let state = AppState::new(cfg, store).expect("state");
    let jobs = state.spawn_jobs(&rig.stop);

    // A few seconds of clean traffic on both topics, judged ok.
    let traffic = |topic: &str| {
        rig.spawn_traffic(
            topic,
            Traffic {
                partitions: PARTITIONS,
                rate: 50,
                duration: Duration::from_secs(3),
                faults: Faults::NONE,
            },
        )
    };
    let (sent_deleted, sent_kept) = (traffic(&deleted), traffic(&kept));
    let (sent_deleted, sent_kept) = (
        sent_deleted.await.expect("traffic"),
        sent_kept.await.expect("traffic"),
    );
    let mut all_final = true;
    for (topic, sent) in [(&deleted, &sent_deleted), (&kept, &sent_kept)] {
        all_final &= wait_sent_final(&state, topic, sent, Duration::from_secs(240)).await;
    }

    // Deleted from both clusters: its auditors stop reporting it. Stalled after
    // stall_after, then forgotten after forget_after: the alert expires unresolved.
    let watching = CancellationToken::new();
    let watch = watch_staleness(state.store.clone(), kept.clone(), watching.clone());
    delete_topic(&rig.a, &deleted).await;
    delete_topic(&rig.b, &deleted).await;
    let deleted_at = std::time::Instant::now();
    let was_stalled = testkit::wait_until_async(Duration::from_secs(90), || {
        let s = stalled(&state, &deleted) && !stalled(&state, &kept);
        async move { s }
    })
    .await;
    let hook = ChannelLabels {
        channel: "hook".into(),
    };
    let forgotten = testkit::wait_until_async(FORGET_AFTER + Duration::from_secs(60), || {
        let s = stalled(&state, &deleted);
        let e = expected(&state, &deleted);
        let expired = state.metrics.alerts_expired.get_or_create(&hook).get();
        let open = state.metrics.alerts_open.get_or_create(&hook).get();
        async move { !s && !e && expired >= 1 && open == 0 }
    })
    .await;
    let forgotten_after = deleted_at.elapsed();
    watching.cancel();
    let staleness = watch.await.expect("watch");
    let kept_judged = anomalies(&state, &kept, sent_kept.first(), sent_kept.end());
    let kept_stalled = stalled(&state, &kept);
    let now = common::now_ms();
    let deleted_progress: Vec<(String, i32, i64)> = state
        .store
        .progress(Some(&deleted))
        .await
        .expect("progress")
        .into_iter()
        .map(|p| (p.tier, p.partition, now - p.received_at_ms))
        .collect();
    rig.shutdown([upstream, downstream, collector], jobs).await;

    assert!(all_final, "windows of both topics not final and complete");
    assert!(kept_judged.is_empty(), "kept topic: {kept_judged:?}");
    assert!(!kept_stalled, "the kept topic's auditors are stalled");
    eprintln!(
        "kept topic, oldest latest progress per tier (age ms, at, emitted age ms): {staleness:?}"
    );
    assert!(
        staleness.len() == 2 && staleness.values().all(|(age, _, _)| *age < KEPT_GAP_MS),
        "the kept topic's progress went {KEPT_GAP_MS} ms or more without a report across the \
         deletion (tier: age ms, at, emitted age ms): {staleness:?}"
    );
    assert!(
        rig.pages.of(&kept).is_empty(),
        "kept topic paged: {:#?}",
        rig.pages.all()
    );
    assert!(
        was_stalled,
        "the deleted topic's auditors were never stalled alone: its progress (tier, \
         partition, ms since received): {deleted_progress:?}; pages {:#?}",
        rig.pages.all()
    );
    assert!(
        forgotten,
        "the deleted topic's auditors still expected or alerted {forgotten_after:?} after the \
         deletion (forget_after {FORGET_AFTER:?}); its progress (tier, partition, ms since \
         received): {deleted_progress:?}; pages {:#?}",
        rig.pages.all()
    );
    let pages = rig.pages.of(&deleted);
    assert!(
        pages.contains(&("trigger".into(), "stalled".into(), None))
            && !pages.iter().any(|(action, _, _)| action == "resolve"),
        "pages of the deleted topic: a stalled trigger, never a resolve: {pages:?}"
    );
}
