//! A partition whose last record is a commit marker settles (docs/audit-message-v1.md,
//! Progress), end to end: transactional producers at both tiers write one partition of
//! a two-partition topic, commit and stop (the other partition is never written). Real
//! auditors on cluster A (regional) and B (aggregate), the collector into PostgreSQL,
//! the evaluator and its alerts: every window settles (final, counts exact) and the
//! loss of 37 is paged once, in its window. Before the fix the trailing commit marker
//! kept the partition's lag at 1 for good: every window stayed pending and the loss was
//! never reported. Second: a partition a new auditor group has read nothing of (its
//! records in a transaction still open) holds its windows back.

use crate::e2e;
use crate::support;

use std::time::Duration;

use e2e::*;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use store::VerdictReads;
use support::*;
use web::engine::{Lifecycle, Verdict};

const MESSAGES: u64 = 600;
const WINDOWS: i64 = 4;
const LOST: u64 = 37;

/// Writes the known messages (`skip` says which to leave out) to partition 0 of
/// `topic` on `bootstrap` in one transaction, commits it and closes the producer.
fn produce_transaction(
    bootstrap: &str,
    topic: &str,
    base: i64,
    mut skip: impl FnMut(u64, i64) -> bool,
) {
    let txn: ThreadedProducer<DefaultProducerContext> = testkit::client_config(bootstrap)
        .set("transactional.id", testkit::unique("e2e-txn"))
        .create()
        .expect("transactional producer");
    txn.init_transactions(Duration::from_secs(30)).unwrap();
    txn.begin_transaction().unwrap();
    for i in 0..MESSAGES {
        let (key, value, window) = known_message(i, base, WINDOWS);
        if skip(i, window) {
            continue;
        }
        // The record timestamp is the event time, as a producer stamping its events
        // (and a replicator preserving them) gives: a watermark an hour old, so the
        // later windows settle only with lag 0.
        let ts = window + i as i64 % WINDOW_MS;
        send_queued(
            &txn,
            BaseRecord::to(topic)
                .key(&key)
                .payload(&value)
                .partition(0)
                .timestamp(ts),
        );
    }
    txn.commit_transaction(Duration::from_secs(60)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn windows_of_an_idle_transactional_partition_settle() {
    let _alone = crate::ALONE.lock().await;
    let rig = TwoTiers::new("txn-e2e").await;
    let (a, b) = (&rig.a, &rig.b);
    let topic = testkit::unique("txn-e2e");
    testkit::create_topic(a, &topic, 2).await;
    testkit::create_topic(b, &topic, 2).await;

    let base = base_time();
    let lossy = base + WINDOW_MS;
    let mut in_lossy = 0;
    produce_transaction(a, &topic, base, |_, w| {
        in_lossy += u64::from(w == lossy);
        false
    });
    let mut dropped = 0;
    produce_transaction(b, &topic, base, |_, w| {
        let drop = w == lossy && dropped < LOST;
        dropped += u64::from(drop);
        drop
    });

    let services = [
        rig.spawn_auditor(rig.regional(&[&topic])),
        rig.spawn_auditor(rig.aggregate(&[&topic])),
        rig.spawn_collector(rig.collect(500, ""), &rig.stop),
    ];
    let (state, jobs) = rig.serve("30m").await;

    let range = (base, base + WINDOWS * WINDOW_MS);
    let counts = [("regional", MESSAGES), ("aggregate", MESSAGES - LOST)];
    let all_final = wait_final(
        &state,
        &topic,
        range,
        &counts,
        false,
        Duration::from_secs(180),
    )
    .await;
    let loss_paged = testkit::wait_until_async(Duration::from_secs(20), || {
        let n = rig.pages.of(&topic).len();
        async move { n >= 1 }
    })
    .await;
    let judged = anomalies(&state, &topic, range.0, range.1);
    rig.shutdown(services, jobs).await;
    assert!(
        all_final,
        "windows not all final with all counts in: {judged:?}"
    );
    assert_eq!(
        judged,
        vec![(
            lossy,
            Verdict::Loss,
            Lifecycle::Final,
            in_lossy,
            in_lossy - LOST
        )]
    );
    assert!(loss_paged, "no page: {:?}", rig.pages.all());
    assert_eq!(
        rig.pages.of(&topic),
        vec![("trigger".into(), "loss".into(), Some(lossy))]
    );
}

/// A partition of the downstream cluster whose records all sit in a transaction still
/// open (a replicator's, not committed yet): a new auditor group has read nothing of
/// it. Its windows are not judged while it is unread, so nothing is paged, and once
/// the transaction commits they come out exact. Before the fix the auditor left the
/// unread partition out of its reports, the other partition was caught up, and the
/// windows were judged final loss — a page for a topic that lost nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partition_not_read_yet_holds_its_windows_back() {
    let _alone = crate::ALONE.lock().await;
    const N: u64 = 200;
    let rig = TwoTiers::new("unread-e2e").await;
    let (a, b) = (&rig.a, &rig.b);
    let topic = testkit::unique("unread-e2e");
    testkit::create_topic(a, &topic, 2).await;
    testkit::create_topic(b, &topic, 2).await;

    // Upstream: every message, committed. Downstream: partition 1 committed, partition
    // 0 in an open transaction.
    let base = base_time();
    let (pa, pb) = (producer(a), producer(b));
    let txn: ThreadedProducer<DefaultProducerContext> = testkit::client_config(b)
        .set("transactional.id", testkit::unique("unread-e2e-txn"))
        .create()
        .expect("transactional producer");
    txn.init_transactions(Duration::from_secs(30)).unwrap();
    txn.begin_transaction().unwrap();
    for i in 0..N {
        let (key, value, window) = known_message(i, base, 2);
        let ts = window + i as i64 % WINDOW_MS;
        let partition = (i % 2) as i32;
        let rec = || {
            BaseRecord::to(&topic)
                .key(&key)
                .payload(&value)
                .partition(partition)
                .timestamp(ts)
        };
        send_queued(&pa, rec());
        send_queued(if partition == 0 { &txn } else { &pb }, rec());
    }
    for p in [&pa, &pb, &txn] {
        p.flush(Duration::from_secs(30)).unwrap();
    }

    let services = [
        rig.spawn_auditor(rig.regional(&[&topic])),
        rig.spawn_auditor(rig.aggregate(&[&topic])),
        rig.spawn_collector(rig.collect(500, ""), &rig.stop),
    ];
    let (state, jobs) = rig.serve("30m").await;

    // Partition 1 downstream is counted and caught up...
    let range = (base, base + 2 * WINDOW_MS);
    let p1_in = testkit::wait_until_async(Duration::from_secs(60), || {
        let state = state.clone();
        let topic = topic.clone();
        async move {
            let rows = state
                .store
                .topic_windows(&topic, store::TimeRange::new(range.0, range.1))
                .await
                .expect("rows");
            let sum = |tier: &str| -> u64 {
                rows.iter()
                    .filter(|r| r.tier == tier)
                    .map(|r| r.count)
                    .sum()
            };
            let progress = state.store.progress(Some(&topic)).await.expect("progress");
            let caught_up = progress
                .iter()
                .any(|p| p.tier == "aggregate" && p.partition == 1 && p.lag == Some(0));
            sum("regional") == N && sum("aggregate") == N / 2 && caught_up
        }
    })
    .await;
    assert!(p1_in, "partition 1 of the aggregate tier never counted");
    // ...and over several evaluation cycles (every 500 ms) no window is judged.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let before_commit = anomalies(&state, &topic, range.0, range.1);
    let paged_before = rig.pages.of(&topic);
    txn.commit_transaction(Duration::from_secs(30)).unwrap();
    let all_final = wait_final(
        &state,
        &topic,
        range,
        &[("regional", N), ("aggregate", N)],
        false,
        Duration::from_secs(180),
    )
    .await;
    let judged = anomalies(&state, &topic, range.0, range.1);
    rig.shutdown(services, jobs).await;
    assert!(
        before_commit.iter().all(|j| j.2 != Lifecycle::Final),
        "judged while a partition was unread: {before_commit:?}"
    );
    assert_eq!(paged_before, vec![], "{:#?}", rig.pages.all());
    assert!(all_final, "not final after the commit: {judged:?}");
    assert_eq!(judged, vec![]);
    assert_eq!(rig.pages.of(&topic), vec![], "{:#?}", rig.pages.all());
}
