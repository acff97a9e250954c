//! A broker restart mid-run (a private single-node KRaft cluster started by this test
//! with deploy/dev/kafka in a state directory of its own, on free ports, so the shared
//! dev clusters are never restarted: the whole cluster, group coordinator and
//! transaction coordinator included, goes away and comes back). Transactions fail
//! while it is down, entries wait in the WAL, and after it is back the per-window
//! counts are exact.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::*;

const PARTITIONS: i32 = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_stay_exact_across_a_broker_restart_mid_run() {
    init_tracing();
    let kafka = tokio::task::block_in_place(PrivateKafka::start);
    let bootstrap = kafka.bootstrap();
    let topic = testkit::create_unique_topic(&bootstrap, "brk", PARTITIONS).await;
    let audit_topic = testkit::create_unique_topic(&bootstrap, "brk-audit", 3).await;
    let group = testkit::unique("brk-group");
    let wal = tempfile::tempdir().unwrap();
    let mut cfg = audit_config(
        &bootstrap,
        std::slice::from_ref(&topic),
        &audit_topic,
        &group,
        &testkit::unique("b"),
        wal.path(),
    );
    cfg.audit.publish_timeout = Duration::from_secs(10);

    // On a failed assertion the service and the writer must stop too, or the test
    // hangs instead of failing.
    let svc = spawn_service(cfg);
    let mut reader = AuditReader::new(&bootstrap, &audit_topic, 3);

    // A producer writes until told to stop; while the broker is down its sends wait
    // in its queue (idempotent: no duplicates, no loss) and are delivered after.
    let stop = Arc::new(AtomicBool::new(false));
    let truth = Arc::new(Mutex::new(Totals::new()));
    let produced = Arc::new(AtomicU64::new(0));
    struct StopOnDrop(Arc<AtomicBool>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let _stop_writer = StopOnDrop(stop.clone());
    let writer = {
        let (stop, truth, produced, bootstrap, topic) = (
            stop.clone(),
            truth.clone(),
            produced.clone(),
            bootstrap.clone(),
            topic.clone(),
        );
        std::thread::spawn(move || {
            let mut cfgp = rdkafka::config::ClientConfig::new();
            cfgp.set("bootstrap.servers", &bootstrap)
                .set("enable.idempotence", "true")
                .set("message.timeout.ms", "300000");
            let p: rdkafka::producer::ThreadedProducer<rdkafka::producer::DefaultProducerContext> =
                cfgp.create().unwrap();
            let base = base_time();
            let mut seq = 0;
            while !stop.load(Ordering::Relaxed) {
                let mut t = truth.lock().unwrap();
                produce_known(&p, &topic, PARTITIONS, 100, seq, base, 4, &mut t);
                drop(t);
                seq += 100;
                produced.store(seq, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    tokio::task::block_in_place(|| {
        assert!(
            reader.wait_for_count(&topic, 1_000, Duration::from_secs(60)),
            "counting did not start"
        );
        kafka.run("restart");
        let after = reader.total_count(&topic);
        // Bounded by the test producer's own delivery timeout (message.timeout.ms,
        // 300 s): on a loaded 2-core machine a restarted broker answered metadata but
        // took over 120 s to take produce requests again (its coordinators reload
        // their logs), and a 120 s bound failed a fresh-clone run that was otherwise
        // exact.
        assert!(
            reader.wait_for_count(&topic, after + 1_000, Duration::from_secs(300)),
            "counting did not resume after the broker restart"
        );
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        let n = produced.load(Ordering::Relaxed);
        assert!(
            reader.wait_for_count(&topic, n, Duration::from_secs(120)),
            "{} of {n} counted",
            reader.total_count(&topic)
        );
    });
    assert!(
        !svc.is_finished(),
        "service exited during the broker restart"
    );
    svc.stop().await;
    tokio::task::block_in_place(|| reader.poll_for(Duration::from_secs(2)));
    let truth = truth.lock().unwrap();
    let d = diff(&truth, &reader.topic_totals(&topic));
    assert!(d.is_empty(), "per-window differences:\n{}", d.join("\n"));
}
