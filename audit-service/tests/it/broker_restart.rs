//! A broker restart mid-run (a private single-node KRaft cluster started by this test
//! with deploy/dev/kafka in a state directory of its own, on free ports, so the shared
//! dev clusters are never restarted: the whole cluster, group coordinator and
//! transaction coordinator included, goes away and comes back). Transactions fail
//! while it is down, entries wait in the WAL, and after it is back the per-window
//! counts are exact against the topic's log read back.

use crate::support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use support::*;

const PARTITIONS: i32 = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_stay_exact_across_a_broker_restart_mid_run() {
    init_tracing();
    let kafka = tokio::task::block_in_place(PrivateKafka::start);
    let bootstrap = kafka.bootstrap();
    let AuditedTopic {
        topic,
        audit_topic,
        group: _,
        wal: _wal,
        mut cfg,
    } = audited_topic(&bootstrap, "brk", PARTITIONS).await;
    cfg.audit.publish_timeout = Duration::from_secs(10);

    // On a failed assertion the service and the writer must stop too, or the test
    // hangs instead of failing.
    let svc = spawn_service(cfg);
    let mut reader = AuditReader::new(&bootstrap, &audit_topic, 3);

    // 2 000 records/s until stopped (see SteadyWriter for why not idempotent).
    let base = base_time();
    let writer = SteadyWriter::start(&bootstrap, &topic, PARTITIONS, base, 100, &[]);
    tokio::task::block_in_place(|| {
        assert!(
            reader.wait_for_count(&topic, 1_000, Duration::from_secs(60)),
            "counting did not start"
        );
        kafka.run("restart");
        let (after, delivered_at_restart) = (
            reader.total_count(&topic),
            writer.delivered.load(Ordering::Relaxed),
        );
        // Bounded by the writer's own delivery timeout (message.timeout.ms, 300 s): on a
        // loaded 2-core machine a restarted broker answered metadata but took over 120 s
        // to take produce requests again.
        assert!(
            reader.wait_for_count(&topic, after + 1_000, Duration::from_secs(300)),
            "counting did not resume after the broker restart: {} counted, {after} at the \
             restart; the writer had {} deliveries since the restart",
            reader.total_count(&topic),
            writer.delivered.load(Ordering::Relaxed) - delivered_at_restart
        );
        writer.finish();
    });
    let log = tokio::task::block_in_place(|| testkit::read_log(&bootstrap, &topic, PARTITIONS));
    let mut truth = Totals::new();
    for r in &log {
        let (key, value) = (r.key.as_deref().unwrap(), r.payload.as_deref().unwrap());
        let i: u64 = std::str::from_utf8(&key[1..]).unwrap().parse().unwrap();
        count_message(&mut truth, &topic, known_message(i, base, 4).2, key, value);
    }
    tokio::task::block_in_place(|| {
        assert!(
            reader.wait_for_count(&topic, log.len() as u64, Duration::from_secs(120)),
            "{} of the log's {} records counted",
            reader.total_count(&topic),
            log.len()
        );
    });
    assert!(
        !svc.is_finished(),
        "service exited during the broker restart"
    );
    svc.stop().await;
    tokio::task::block_in_place(|| reader.poll_for(Duration::from_secs(2)));
    let d = diff(&truth, &reader.topic_totals(&topic));
    assert!(d.is_empty(), "per-window differences:\n{}", d.join("\n"));
}
