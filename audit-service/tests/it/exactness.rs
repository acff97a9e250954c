//! Exactly-once counting against the real broker (cluster A): known messages with
//! known event times over 12 partitions and several windows; the sum of published
//! increments per (topic, window) equals the ground truth in count and in multiset
//! checksum, which differs if any message is missing or counted twice.

use crate::support;

use std::time::Duration;

use support::*;

const PARTITIONS: i32 = 12;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_is_counted_exactly_once_over_12_partitions_and_several_windows() {
    init_tracing();
    let Setup {
        bootstrap,
        topic,
        audit_topic,
        group,
        // Kept alive: dropping it deletes the WAL directory.
        wal: _wal,
        cfg,
    } = Setup::new("exact", PARTITIONS).await;

    let mut truth = Totals::new();
    let base = base_time();
    let p = producer(&bootstrap);
    // Some data before the service starts, some while it runs, across a restart.
    produce_known(&p, &topic, PARTITIONS, 6_000, 0, base, 7, &mut truth);

    let svc = spawn_service(cfg.clone());
    let mut reader = AuditReader::new(&bootstrap, &audit_topic, 3);
    produce_known(&p, &topic, PARTITIONS, 6_000, 6_000, base, 7, &mut truth);
    assert!(
        tokio::task::block_in_place(|| reader.wait_for_count(
            &topic,
            12_000,
            Duration::from_secs(90)
        )),
        "only {} of 12000 counted",
        reader.total_count(&topic)
    );
    // Graceful restart: the shutdown report publishes and commits; the next run
    // continues from the committed offsets.
    svc.stop().await;
    produce_known(&p, &topic, PARTITIONS, 8_000, 12_000, base, 7, &mut truth);
    let svc = spawn_service(cfg);
    assert!(
        tokio::task::block_in_place(|| reader.wait_for_count(
            &topic,
            20_000,
            Duration::from_secs(90)
        )),
        "only {} of 20000 counted",
        reader.total_count(&topic)
    );
    svc.stop().await;
    // Anything published late (a double count) would show here.
    tokio::task::block_in_place(|| reader.poll_for(Duration::from_secs(2)));

    let seen = reader.topic_totals(&topic);
    assert_eq!(truth.len(), 7, "ground truth spans 7 windows");
    let d = diff(&truth, &seen);
    assert!(d.is_empty(), "per-window differences:\n{}", d.join("\n"));
    assert!(
        reader.increments >= 14,
        "several increments per window over several reports: {}",
        reader.increments
    );
    // Progress watermarks were published for the audited topic, ending at the end.
    let committed = committed(&bootstrap, &group, &topic, PARTITIONS);
    let total_committed: i64 = committed.values().sum();
    assert_eq!(
        total_committed, 20_000,
        "committed offsets cover every message: {committed:?}"
    );
    let last = reader
        .progress
        .iter()
        .rev()
        .find(|m| m.topic == topic)
        .expect("progress messages for the audited topic");
    let parts = last.as_progress().unwrap();
    assert_eq!(
        parts.len(),
        PARTITIONS as usize,
        "progress for each partition: {parts:?}"
    );
    for pp in parts {
        assert_eq!(
            pp.next_offset, committed[&pp.partition],
            "progress next_offset = committed offset"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_mode_without_transactions_counts_exactly_when_nothing_crashes() {
    init_tracing();
    let Setup {
        bootstrap,
        topic,
        audit_topic,
        group,
        // Kept alive: dropping it deletes the WAL directory.
        wal: _wal,
        mut cfg,
    } = Setup::new("alo", PARTITIONS).await;
    cfg.audit.mode = audit_service::Mode::AtLeastOnce;
    let mut truth = Totals::new();
    let base = base_time();
    let p = producer(&bootstrap);
    produce_known(&p, &topic, PARTITIONS, 5_000, 0, base, 3, &mut truth);
    let svc = spawn_service(cfg);
    let mut reader = AuditReader::new(&bootstrap, &audit_topic, 3);
    produce_known(&p, &topic, PARTITIONS, 5_000, 5_000, base, 3, &mut truth);
    assert!(tokio::task::block_in_place(|| reader.wait_for_count(
        &topic,
        10_000,
        Duration::from_secs(90)
    )));
    svc.stop().await;
    assert_windows_exact(&mut reader, &truth, &topic, Duration::from_secs(1));
    assert_eq!(
        committed_total(&bootstrap, &group, &topic, PARTITIONS),
        10_000
    );
}

/// The group's committed offsets disappear (expired after `offsets.retention.minutes`,
/// or deleted) while the auditors are down: on restart the partitions start again at
/// `auto.offset.reset` and their retained messages are counted twice. The auditor
/// cannot prevent that, but it must say so: `kafka_audit_committed_offsets_missing_total`
/// counts every assigned partition that had a committed offset before and has none now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_group_offsets_are_alerted() {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    const PARTS: i32 = 3;
    init_tracing();
    let Setup {
        bootstrap,
        topic,
        audit_topic,
        group,
        wal: _wal,
        mut cfg,
    } = Setup::new("expired", PARTS).await;
    // Dynamic membership: the stopped instance leaves the group at once.
    cfg.audit.static_membership = false;
    enable_ops(&mut cfg);
    let p = producer(&bootstrap);
    let mut truth = Totals::new();
    produce_known(&p, &topic, PARTS, 600, 0, base_time(), 2, &mut truth);
    let mut reader = AuditReader::new(&bootstrap, &audit_topic, 3);

    let svc = start_service(cfg.clone()).await;
    let port = svc.ops_port();
    assert!(tokio::task::block_in_place(|| reader.wait_for_count(
        &topic,
        600,
        Duration::from_secs(90)
    )));
    assert_eq!(metric(port, "committed_offsets_missing_total"), 0.0);
    svc.stop().await;

    // The group is empty now; its offsets go (as expiry would take them).
    let admin: AdminClient<DefaultClientContext> =
        testkit::client_config(&bootstrap).create().unwrap();
    // (Bounded retry: the broker may still see the member leaving.)
    let deleted = testkit::wait_until_async(Duration::from_secs(60), || async {
        admin
            .delete_groups(&[&group], &AdminOptions::new())
            .await
            .is_ok_and(|r| r.iter().all(|r| r.is_ok()))
    })
    .await;
    assert!(deleted, "cannot delete group {group}");
    assert!(committed(&bootstrap, &group, &topic, PARTS).is_empty());

    let svc = start_service(cfg.clone()).await;
    let port = svc.ops_port();
    let alerted = tokio::task::block_in_place(|| {
        testkit::wait_until(Duration::from_secs(90), || {
            metric(port, "committed_offsets_missing_total") >= PARTS as f64
        })
    });
    let seen = metric(port, "committed_offsets_missing_total");
    svc.stop().await;
    assert!(
        alerted,
        "missing offsets alerted for {seen} of {PARTS} partitions"
    );
}
