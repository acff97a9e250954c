//! A broker restart mid-run (a private single-node KRaft cluster started by this test
//! with deploy/dev/kafka in a state directory of its own, on free ports, so the shared
//! dev clusters are never restarted: the whole cluster, group coordinator and
//! transaction coordinator included, goes away and comes back). Transactions fail
//! while it is down, entries wait in the WAL, and after it is back the per-window
//! counts are exact against the topic's log read back.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
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

    // A producer writes until told to stop. Ground truth is the topic's log read back
    // at the end, not what was sent: the writer is not idempotent (acks=all, retries),
    // so whatever a restart makes it write twice is in the log and must be counted
    // twice. An idempotent writer stalled past 240 s after a restart in a fresh-clone
    // run (each flush "Local: Timed out") while the auditor had nothing new to count;
    // the product's own clients are what this test exercises, not the writer's PID
    // recovery.
    let stop = Arc::new(AtomicBool::new(false));
    let delivered = Arc::new(AtomicU64::new(0));
    struct StopOnDrop(Arc<AtomicBool>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    struct Deliveries(Arc<AtomicU64>);
    impl rdkafka::ClientContext for Deliveries {}
    impl rdkafka::producer::ProducerContext for Deliveries {
        type DeliveryOpaque = ();
        fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
            if result.is_ok() {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    let _stop_writer = StopOnDrop(stop.clone());
    let base = base_time();
    let writer = {
        let (stop, delivered, bootstrap, topic) = (
            stop.clone(),
            delivered.clone(),
            bootstrap.clone(),
            topic.clone(),
        );
        std::thread::spawn(move || {
            let p: rdkafka::producer::ThreadedProducer<Deliveries> =
                testkit::client_config(&bootstrap)
                    .set("enable.idempotence", "false")
                    .set("acks", "all")
                    .set("linger.ms", "5")
                    .set("message.timeout.ms", "300000")
                    .create_with_context(Deliveries(delivered))
                    .unwrap();
            let mut seq = 0;
            while !stop.load(Ordering::Relaxed) {
                for i in seq..seq + 100 {
                    let (key, value, _) = known_message(i, base, 4);
                    send_queued(
                        &p,
                        rdkafka::producer::BaseRecord::to(&topic)
                            .key(&key)
                            .payload(&value)
                            .partition((i % PARTITIONS as u64) as i32),
                    );
                }
                seq += 100;
                std::thread::sleep(Duration::from_millis(50));
            }
            use rdkafka::producer::Producer;
            if let Err(e) = p.flush(Duration::from_secs(120)) {
                eprintln!("writer: flush at the end: {e} (what is undelivered is not in the log)");
            }
        })
    };
    tokio::task::block_in_place(|| {
        assert!(
            reader.wait_for_count(&topic, 1_000, Duration::from_secs(60)),
            "counting did not start"
        );
        kafka.run("restart");
        let (after, delivered_at_restart) = (
            reader.total_count(&topic),
            delivered.load(Ordering::Relaxed),
        );
        // Bounded by the writer's own delivery timeout (message.timeout.ms, 300 s): on a
        // loaded 2-core machine a restarted broker answered metadata but took over 120 s
        // to take produce requests again.
        assert!(
            reader.wait_for_count(&topic, after + 1_000, Duration::from_secs(300)),
            "counting did not resume after the broker restart: {} counted, {after} at the \
             restart; the writer had {} deliveries since the restart",
            reader.total_count(&topic),
            delivered.load(Ordering::Relaxed) - delivered_at_restart
        );
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
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
