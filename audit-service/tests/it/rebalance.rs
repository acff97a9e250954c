//! Consumer-group rebalances (dynamic membership): a second instance joins, then the
//! first leaves, while data flows. Each revoke reports and commits synchronously
//! before the partitions move, so the totals stay exact.

use crate::support;

use std::time::Duration;

use support::*;
use tokio_util::sync::CancellationToken;

const PARTITIONS: i32 = 12;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_reports_before_partitions_move_so_rebalances_count_exactly() {
    init_tracing();
    let s = Setup::new("reb", PARTITIONS).await;
    // One config per instance: the same group and WAL directory, its own instance id.
    let cfg = |id: &str| {
        let mut c = s.cfg.clone();
        c.audit.instance_id = id.to_string();
        c.audit.static_membership = false;
        // A long interval: the counts must come from the revoke reports.
        c.audit.report_interval = Duration::from_secs(3600);
        c
    };
    let base = base_time();
    let p = producer(&s.bootstrap);
    let mut truth = Totals::new();
    let mut reader = AuditReader::new(&s.bootstrap, &s.audit_topic, 3);

    produce_known(&p, &s.topic, PARTITIONS, 5_000, 0, base, 4, &mut truth);
    let mut cfg_a = cfg(&testkit::unique("ra"));
    enable_ops(&mut cfg_a);
    let a = start_service(cfg_a).await;
    let ops_port = a.ops_port();
    // A must own the partitions and have counted before B joins; otherwise both join
    // in the same generation and there is no revoke to test (seen on a loaded machine).
    assert!(
        tokio::task::block_in_place(|| testkit::wait_until(Duration::from_secs(90), || {
            metric(ops_port, "consumed_messages_total") >= 5_000.0
        })),
        "A did not consume the first 5 000 messages"
    );
    let group_committed = || committed_total(&s.bootstrap, &s.group, &s.topic, PARTITIONS);
    // B joins: A's partitions are revoked, A reports and commits what it counted.
    let b = spawn_service(cfg(&testkit::unique("rb")));
    produce_known(&p, &s.topic, PARTITIONS, 5_000, 5_000, base, 4, &mut truth);
    assert!(
        tokio::task::block_in_place(|| testkit::wait_until(Duration::from_secs(90), || {
            reader.poll_for(Duration::from_millis(50));
            reader.total_count(&s.topic) > 0
        })),
        "no revoke report was published when B joined"
    );
    // A leaves: B gets every partition after a revoke of its own.
    a.stop().await;
    produce_known(&p, &s.topic, PARTITIONS, 5_000, 10_000, base, 4, &mut truth);
    // B publishes at its shutdown; everything must be counted exactly once by then.
    assert!(tokio::task::block_in_place(|| testkit::wait_until(
        Duration::from_secs(90),
        || {
            reader.poll_for(Duration::from_millis(50));
            // B has read all 15 000 once its revoke/assign settled and it caught up;
            // the shutdown report publishes the rest.
            group_committed() >= 10_000
        }
    )));
    b.stop().await;
    tokio::task::block_in_place(|| reader.poll_for(Duration::from_secs(2)));
    let counted = reader.total_count(&s.topic) as i64;
    let committed_now = group_committed();
    assert_eq!(
        counted, committed_now,
        "counted exactly what the group committed"
    );
    // Whatever B had not read yet at shutdown is counted by the next run.
    if committed_now < 15_000 {
        let mut cfg_c = cfg(&testkit::unique("rc"));
        cfg_c.audit.report_interval = Duration::from_millis(500);
        let c = spawn_service(cfg_c);
        assert!(tokio::task::block_in_place(|| reader.wait_for_count(
            &s.topic,
            15_000,
            Duration::from_secs(90)
        )));
        c.stop().await;
        tokio::task::block_in_place(|| reader.poll_for(Duration::from_secs(1)));
    }
    let d = diff(&truth, &reader.topic_totals(&s.topic));
    assert!(d.is_empty(), "per-window differences:\n{}", d.join("\n"));
}

/// Revokes that arrive while the publishing thread has a report's transaction in
/// flight: the callback waits for it, then reports and commits the rest before the
/// partitions move. Short report intervals keep a transaction in flight most of the
/// time; instances join and leave until A's callback has waited at least twice
/// (`kafka_audit_revoke_waits_total`). Totals exact per window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoke_during_a_publication_in_flight_counts_exactly() {
    init_tracing();
    let s = Setup::new("rebtx", PARTITIONS).await;
    // One config per instance: the same group and WAL directory, its own instance id.
    let cfg = |id: &str| {
        let mut c = s.cfg.clone();
        c.audit.instance_id = id.to_string();
        c.audit.static_membership = false;
        c.audit.report_interval = Duration::from_millis(100);
        enable_ops(&mut c);
        c
    };
    const WINDOWS: i64 = 30;
    let base = base_time();
    let p = producer(&s.bootstrap);
    let mut truth = Totals::new();
    let mut reader = AuditReader::new(&s.bootstrap, &s.audit_topic, 3);
    let mut seq = 0;

    let a = start_service(cfg(&testkit::unique("ta"))).await;
    let port_a = a.ops_port();
    let mut rounds = 0;
    while metric(port_a, "revoke_waits_total") < 2.0 {
        rounds += 1;
        assert!(
            rounds <= 12,
            "A's revoke callback never waited for a publication in 12 rounds"
        );
        produce_known(
            &p, &s.topic, PARTITIONS, 3_000, seq, base, WINDOWS, &mut truth,
        );
        seq += 3_000;
        // B joins (A's partitions are revoked mid-traffic), then leaves again (A's
        // again, to get them all back).
        let stop_b = CancellationToken::new();
        let started_b = audit_service::start(cfg(&testkit::unique("tb")), stop_b.clone())
            .await
            .expect("B starts");
        let port_b = started_b.ops_addr.expect("ops server enabled").port();
        let b = tokio::spawn(started_b.wait());
        produce_known(
            &p, &s.topic, PARTITIONS, 3_000, seq, base, WINDOWS, &mut truth,
        );
        seq += 3_000;
        assert!(
            tokio::task::block_in_place(|| testkit::wait_until(Duration::from_secs(90), || {
                metric(port_b, "assigned_partitions") > 0.0
            })),
            "B never got partitions"
        );
        stop_service(&stop_b, b).await;
    }
    let all = seq;
    let ok = tokio::task::block_in_place(|| {
        reader.wait_for_count(&s.topic, all, Duration::from_secs(120))
    });
    a.stop().await;
    assert_all_counted_exactly(&mut reader, &truth, &s.topic, ok, all);
    assert_eq!(
        committed_total(&s.bootstrap, &s.group, &s.topic, PARTITIONS),
        all as i64
    );
    eprintln!("rounds until two waited revokes: {rounds}");
}
