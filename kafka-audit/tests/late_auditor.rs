//! Issue 14, "a lagging auditor pages false loss", end to end: traffic now (event
//! time = send time) replicated from cluster A to cluster B with 37 messages dropped in
//! one window and 11 duplicated in another; the downstream auditor is started two
//! windows after the traffic (past the grace of its first windows, as after a deploy)
//! and reads its backlog over several reports.
//! Over the whole run the webhook receiver gets exactly one page per injected fault, in
//! its window, and no page for a window that ends correct — a page that fires and later
//! resolves has still woken someone.

mod e2e;
#[path = "../../audit-service/tests/support/mod.rs"]
mod support;

use std::time::Duration;

use e2e::*;
use store::AuditStore;
use support::*;
use tokio_util::sync::CancellationToken;
use web::engine::{Lifecycle, Verdict};

const PARTITIONS: i32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_downstream_auditor_started_late_pages_only_the_real_faults() {
    let (a, b) = (testkit::kafka_a(), testkit::kafka_b());
    let topic = testkit::unique("late-e2e");
    testkit::create_topic(&a, &topic, PARTITIONS).await;
    testkit::create_topic(&b, &topic, PARTITIONS).await;
    let audit_a = testkit::create_unique_topic(&a, "late-e2e-audit", 3).await;
    let audit_b = testkit::create_unique_topic(&b, "late-e2e-audit", 3).await;

    let (pages, hook) = start_receiver().await;
    let db = testkit::fresh_database("late_e2e").await;
    let store = store::Store::connect(db.url()).await.expect("connect");
    store.migrate().await.expect("migrate");
    let stop = CancellationToken::new();
    let _stop_on_panic = stop.clone().drop_guard();
    let (wal_a, wal_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let upstream = tokio::spawn(audit_service::run(
        tier_config(&a, &topic, &audit_a, "regional", "dc1", wal_a.path()),
        stop.clone(),
    ));
    let collector = tokio::spawn(collector::run(
        collect_config(db.url(), &[("a", &a, &audit_a), ("b", &b, &audit_b)], 500),
        stop.clone(),
    ));
    let state =
        web::AppState::new(serve_config(r#"{ dc1 = "agg" }"#, "30m", &hook), store).expect("state");
    let jobs = state.spawn_jobs(&stop);

    // 45 s of traffic at 100 messages/s: window 1 loses 37, window 2 gets 11 twice.
    let faults = Faults {
        loss: Some((1, 37)),
        dup: Some((2, 11)),
    };
    let traffic = {
        let (a, b, topic) = (a.clone(), b.clone(), topic.clone());
        tokio::task::spawn_blocking(move || {
            replicate_live(
                &a,
                &b,
                &topic,
                PARTITIONS,
                100,
                Duration::from_secs(45),
                faults,
            )
        })
    };
    // The downstream auditor starts two windows (and a grace) after the traffic.
    let started = common::now_ms() / WINDOW_MS * WINDOW_MS;
    sleep_until_ms(started + 2 * WINDOW_MS + 5_000).await;
    // It catches up over several reports: each partition is fetched again only 100 ms
    // after its fetched messages were taken, a few KB at a time.
    let mut late = tier_config(&b, &topic, &audit_b, "aggregate", "agg", wal_b.path());
    for (k, v) in [
        ("queued.min.messages", "1"),
        ("fetch.queue.backoff.ms", "100"),
        ("max.partition.fetch.bytes", "2000"),
    ] {
        late.kafka.consumer.insert(k.into(), v.into());
    }
    let downstream = tokio::spawn(audit_service::run(late, stop.clone()));
    let sent = traffic.await.expect("traffic");
    let (up, down) = sent.total();
    let all_final = wait_final(
        &state,
        &topic,
        (sent.first(), sent.end()),
        &[("regional", up), ("aggregate", down)],
        false,
        Duration::from_secs(90),
    )
    .await;
    let (lossy, duplicated) = (sent.first() + WINDOW_MS, sent.first() + 2 * WINDOW_MS);
    let both_paged = testkit::wait_until_async(Duration::from_secs(20), || {
        let n = pages.of(&topic).len();
        async move { n >= 2 }
    })
    .await;
    let judged = anomalies(&state, &topic, sent.first(), sent.end());
    stop.cancel();
    for t in [upstream, downstream, collector] {
        t.await.expect("service task").expect("service result");
    }
    for j in jobs {
        j.await.expect("job");
    }
    assert!(
        all_final,
        "windows not all final with all counts in: {judged:?} (sent {sent:?})"
    );
    let (l, d) = (sent.windows[&lossy], sent.windows[&duplicated]);
    assert_eq!(
        judged,
        vec![
            (lossy, Verdict::Loss, Lifecycle::Final, l.0, l.1),
            (duplicated, Verdict::Duplication, Lifecycle::Final, d.0, d.1),
        ],
        "sent {sent:?}"
    );
    assert!(both_paged, "pages: {:?}", pages.all());
    let mut got = pages.of(&topic);
    got.sort();
    assert_eq!(
        got,
        vec![
            ("trigger".into(), "duplication".into(), Some(duplicated)),
            ("trigger".into(), "loss".into(), Some(lossy)),
        ],
        "every page of the run: {:#?}",
        pages.all()
    );
}
