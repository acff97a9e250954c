//! A whole-cluster outage longer than the consumer's session timeout, on a
//! private single-node KRaft cluster this test starts (see `broker_restart`; the shared
//! dev clusters are never stopped). The auditor is a static member (the default
//! `group.instance.id`): while the cluster is down its session runs out, and once the
//! cluster is back the coordinator has fenced the member id the consumer still
//! publishes with. Every transaction then fails "Static consumer fenced by other
//! consumer with same group.instance.id" until the consumer is recreated.
//!
//! The product's promise (docs/design.md §5, "Kafka unavailable"): counting resumes
//! within one consumer session timeout of the cluster's return. Here the session
//! timeout is 6 s (the broker's minimum, `group.min.session.timeout.ms`) to keep the
//! test short; the bound asserted is that plus [`MARGIN`].

use crate::support;

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use support::*;

const PARTITIONS: i32 = 3;
/// The consumer session timeout of this test's auditor (`session.timeout.ms`).
const SESSION: Duration = Duration::from_secs(6);
/// What the bound allows beyond the session timeout: a publication started before
/// the return may first run out its own bound (the offsets' first try, 5 s, plus
/// 3 s before it is taken for stuck, `kafka::publisher`), then the recreated consumer
/// rejoins and the next interval report (0.5 s) is published, on a shared 2-core
/// machine.
const MARGIN: Duration = Duration::from_secs(14);

/// The sum of `topic`'s high watermarks: every record in its log right now.
fn log_end(bootstrap: &str, topic: &str) -> i64 {
    let c: BaseConsumer = testkit::client_config(bootstrap).create().unwrap();
    (0..PARTITIONS)
        .map(|p| {
            c.fetch_watermarks(topic, p, Duration::from_secs(10))
                .expect("watermarks")
                .1
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counting_resumes_within_the_session_timeout_after_a_cluster_outage() {
    init_tracing();
    let kafka = tokio::task::block_in_place(PrivateKafka::start);
    let bootstrap = kafka.bootstrap();
    let AuditedTopic {
        topic,
        audit_topic,
        group,
        wal: _wal,
        mut cfg,
    } = audited_topic(&bootstrap, "outage", PARTITIONS).await;
    assert!(cfg.audit.static_membership, "the default: a static member");
    cfg.audit.publish_timeout = Duration::from_secs(5);
    let k = &mut cfg.kafka;
    k.consumer
        .insert("session.timeout.ms".into(), SESSION.as_millis().to_string());
    k.consumer
        .insert("heartbeat.interval.ms".into(), "1000".into());
    // librdkafka backs off reconnecting up to 10 s by default: the clients would find
    // the returned cluster up to 10 s late, longer than this short session timeout
    // (45 s by default, where the backoff is well inside it).
    k.properties
        .insert("reconnect.backoff.max.ms".into(), "1000".into());

    let svc = spawn_service(cfg);

    // 200 records/s until stopped (as in the issue; see SteadyWriter for why not
    // idempotent): ground truth is the log read back at the end.
    let base = base_time();
    let writer = SteadyWriter::start(
        &bootstrap,
        &topic,
        PARTITIONS,
        base,
        10,
        &[("reconnect.backoff.max.ms", "1000")],
    );
    // One client for every read of the group's committed offsets (a new one per read,
    // every 20 ms, would load the machine the auditor runs on).
    let offsets: BaseConsumer = testkit::client_config(&bootstrap)
        .set("group.id", &group)
        .set("reconnect.backoff.max.ms", "1000")
        .create()
        .unwrap();
    let mut all = rdkafka::TopicPartitionList::new();
    for p in 0..PARTITIONS {
        all.add_partition(&topic, p);
    }
    // The group's committed offsets summed (what the auditor has published); 0 while
    // the cluster does not answer.
    let committed = || -> i64 {
        offsets
            .committed_offsets(all.clone(), Duration::from_secs(2))
            .map(|c| {
                c.elements()
                    .iter()
                    .filter_map(|e| e.offset().to_raw())
                    .filter(|o| *o >= 0)
                    .sum()
            })
            .unwrap_or(0)
    };
    tokio::task::block_in_place(|| {
        assert!(
            testkit::wait_until(Duration::from_secs(90), || committed() >= 1_000),
            "counting did not start"
        );
        kafka.run("stop");
        // The outage itself: twice the session timeout, so that the consumer's session
        // has certainly run out on both sides.
        std::thread::sleep(SESSION * 2);
        kafka.run("start");
        // `start` returns once the cluster answers requests.
        let back = Instant::now();
        let end = log_end(&bootstrap, &topic);
        let before = committed();
        assert!(
            before < end,
            "nothing left to count after the outage ({before} committed, log end {end})"
        );
        let resumed = testkit::wait_until(Duration::from_secs(100), || committed() >= end);
        let took = back.elapsed();
        eprintln!(
            "counting resumed past the outage's records ({end}) {:.1} s after the cluster \
             answered again (bound {:?})",
            took.as_secs_f64(),
            SESSION + MARGIN
        );
        assert!(resumed, "counting never resumed after the outage");
        assert!(
            took <= SESSION + MARGIN,
            "counting resumed {took:?} after the cluster's return, past the session timeout \
             {SESSION:?} plus {MARGIN:?}"
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
    // The audit topic is read after the outage, from its beginning, by a reader of its
    // own: what is checked is what the auditor published, not how a long-lived reader
    // comes back from a broker restart (once, on a loaded machine, a reader made before
    // the outage read nothing after it for 60 s while the auditor's transactions,
    // offsets included, had committed). The ceiling covers a transaction left open by the
    // outage: aborted by the coordinator after the auditor's transaction.timeout.ms
    // (10 s here) and its cleanup interval (10 s).
    let mut reader = AuditReader::new(&bootstrap, &audit_topic, 3);
    tokio::task::block_in_place(|| {
        assert!(
            reader.wait_for_count(&topic, log.len() as u64, Duration::from_secs(120)),
            "{} of the log's {} records counted",
            reader.total_count(&topic),
            log.len()
        );
    });
    assert!(!svc.is_finished(), "service exited during the outage");
    svc.stop().await;
    tokio::task::block_in_place(|| reader.poll_for(Duration::from_secs(2)));
    let d = diff(&truth, &reader.topic_totals(&topic));
    assert!(d.is_empty(), "per-window differences:\n{}", d.join("\n"));
}
