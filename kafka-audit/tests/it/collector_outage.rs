//! A lag 0 counts as of when the auditor measured it, not when it arrived (docs/web.md,
//! Verdicts, rule 3), end to end: the collector is down for two windows (longer than
//! the 5 s grace) while live traffic goes on, then restarted with one message per batch
//! and a fetch back-off, so the audit-topic backlog drains over tens of seconds. Two
//! topics replicated from cluster A to cluster B: one loses nothing, the other loses 37
//! messages in one window. Over the whole run the webhook receiver gets no page for the
//! clean topic and exactly one for the loss, in its window: progress measured before
//! the outage and delivered after it does not make a window final before its increments
//! are in.

use crate::e2e;
use crate::support;

use std::time::Duration;

use e2e::*;
use support::*;
use tokio_util::sync::CancellationToken;
use web::engine::{Lifecycle, Verdict};

const PARTITIONS: i32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_drain_after_a_collector_outage_pages_only_the_real_loss() {
    let _alone = crate::ALONE.lock().await;
    let rig = TwoTiers::new("outage-e2e").await;
    let clean = testkit::unique("outage-clean");
    let lossy = testkit::unique("outage-lossy");
    for t in [&clean, &lossy] {
        rig.create_topic(t, PARTITIONS).await;
    }
    let topics = [clean.as_str(), lossy.as_str()];
    // Auditors report once a second: the drain below takes about three messages a
    // second from each audit partition, so the backlog shrinks by two a second even
    // on a loaded machine (at 500 ms reports it shrank by one, and a CI machine that
    // drained a little slower never caught up).
    let reporting_each_second = |mut cfg: audit_service::Config| {
        cfg.audit.report_interval = Duration::from_secs(1);
        cfg
    };
    let auditors = [
        rig.spawn_auditor(reporting_each_second(rig.regional(&topics))),
        rig.spawn_auditor(reporting_each_second(rig.aggregate(&topics))),
    ];
    let first_run = CancellationToken::new();
    let collector = rig.spawn_collector(rig.collect(500, ""), &first_run);
    let (state, jobs) = rig.serve("30m").await;

    // 45 s of traffic at 50 messages/s per topic; window 1 of `lossy` loses 37.
    let live = |topic: &str, faults: Faults| {
        rig.spawn_traffic(
            topic,
            Traffic {
                partitions: PARTITIONS,
                rate: 50,
                duration: Duration::from_secs(45),
                faults,
            },
        )
    };
    let traffic = [
        live(&clean, Faults::NONE),
        live(
            &lossy,
            Faults {
                loss: Some((1, 37)),
                ..Faults::NONE
            },
        ),
    ];
    // Down from one window after the traffic started until three windows after.
    let started = common::now_ms() / WINDOW_MS * WINDOW_MS;
    sleep_until_ms(started + WINDOW_MS).await;
    first_run.cancel();
    collector
        .await
        .expect("collector task")
        .expect("collector result");
    sleep_until_ms(started + 3 * WINDOW_MS).await;
    // The drain: one message per batch, and each partition fetched again only 300 ms
    // after its fetched messages were taken (about three audit messages a second per
    // partition against one written), so the backlog takes tens of seconds.
    let collector = rig.spawn_collector(
        rig.collect(
            1,
            r#""queued.min.messages" = 1
"fetch.queue.backoff.ms" = 300
"max.partition.fetch.bytes" = 1"#,
        ),
        &rig.stop,
    );

    let mut sent = Vec::new();
    for t in traffic {
        sent.push(t.await.expect("traffic"));
    }
    let mut all_final = true;
    for (topic, s) in [&clean, &lossy].into_iter().zip(&sent) {
        let (up, down) = s.total();
        all_final &= wait_final(
            &state,
            topic,
            (s.first(), s.end()),
            &[("regional", up), ("aggregate", down)],
            false,
            Duration::from_secs(240),
        )
        .await;
    }
    let loss_window = sent[1].first() + WINDOW_MS;
    let paged = testkit::wait_until_async(Duration::from_secs(20), || {
        let n = rig.pages.of(&lossy).len();
        async move { n >= 1 }
    })
    .await;
    let judged_clean = anomalies(&state, &clean, sent[0].first(), sent[0].end());
    let judged_lossy = anomalies(&state, &lossy, sent[1].first(), sent[1].end());
    rig.shutdown(auditors.into_iter().chain([collector]), jobs)
        .await;
    assert!(
        all_final,
        "windows not all final with all counts in: clean {judged_clean:?}, lossy {judged_lossy:?}"
    );
    assert_eq!(judged_clean, vec![]);
    let l = sent[1].windows[&loss_window];
    assert_eq!(
        judged_lossy,
        vec![(loss_window, Verdict::Loss, Lifecycle::Final, l.0, l.1)],
        "sent {:?}",
        sent[1]
    );
    assert!(paged, "no page: {:?}", rig.pages.all());
    assert_eq!(rig.pages.of(&clean), vec![], "{:#?}", rig.pages.all());
    assert_eq!(
        rig.pages.of(&lossy),
        vec![("trigger".into(), "loss".into(), Some(loss_window))],
        "{:#?}",
        rig.pages.all()
    );
}
