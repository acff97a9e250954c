//! A broker restart mid-run (cluster B, a single-node KRaft cluster: the whole
//! cluster, group coordinator and transaction coordinator included, goes away and
//! comes back). Transactions fail while it is down, entries wait in the WAL, and after
//! it is back the per-window counts are exact.

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::*;
use tokio_util::sync::CancellationToken;

const PARTITIONS: i32 = 6;

fn dev_kafka() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/dev/kafka")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_stay_exact_across_a_broker_restart_mid_run() {
    init_tracing();
    let bootstrap = testkit::kafka_b();
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

    let shutdown = CancellationToken::new();
    let svc = tokio::spawn(audit_service::run(cfg, shutdown.clone()));
    // On a failed assertion the service and the writer must stop too, or the test
    // hangs instead of failing.
    let _stop_service = shutdown.clone().drop_guard();
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
        let out = Command::new(dev_kafka())
            .args(["restart", "b"])
            .output()
            .expect("run deploy/dev/kafka restart b");
        assert!(
            out.status.success(),
            "restart b failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let after = reader.total_count(&topic);
        assert!(
            reader.wait_for_count(&topic, after + 1_000, Duration::from_secs(120)),
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
    stop_service(&shutdown, svc).await;
    tokio::task::block_in_place(|| reader.poll_for(Duration::from_secs(2)));
    let truth = truth.lock().unwrap();
    let d = diff(&truth, &reader.topic_totals(&topic));
    assert!(d.is_empty(), "per-window differences:\n{}", d.join("\n"));
}
