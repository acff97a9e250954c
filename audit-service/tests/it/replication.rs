//! The replication evidence the auditor publishes
//! follows the replicator down as well as up. A consumer-group replicator whose topic
//! was deleted and recreated, copying it again from 0, takes the evidence down to its
//! new position; MirrorMaker 2's offset syncs, read from the beginning of their
//! compacted topic, count by the latest sync of each partition, not the largest; and a
//! position past the log end the auditor measured is never published, only counted.

use crate::support;

use std::time::Duration;

use common::replication::{offset_sync, MirrorMaker2, Replicator};
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use support::*;

/// The positions the evidence of `tier` published for `topic`'s `partition`, in the
/// order read, each once in a row (a report repeats the one before).
fn published(reader: &AuditReader, tier: &str, topic: &str, partition: i32) -> Vec<i64> {
    let mut out: Vec<i64> = reader
        .progress
        .iter()
        .filter(|m| m.tier == tier && m.topic == topic)
        .flat_map(|m| m.as_progress().unwrap_or_default())
        .filter(|p| p.partition == partition)
        .map(|p| p.next_offset)
        .collect();
    out.dedup();
    out
}

/// Polls the evidence topic until the latest evidence of `tier` for `topic`'s
/// `partition` is `next` (90 s bound).
fn wait_for_evidence(
    reader: &mut AuditReader,
    tier: &str,
    topic: &str,
    partition: i32,
    next: i64,
) -> bool {
    testkit::wait_until(Duration::from_secs(90), || {
        reader.poll_for(Duration::from_millis(200));
        published(reader, tier, topic, partition).last() == Some(&next)
    })
}

/// Commits `offset` for group `group` on `topic`'s partition 0, as a replicator that
/// has copied every record before it does (a member of no generation: a group
/// without members takes it).
fn commit(bootstrap: &str, group: &str, topic: &str, offset: i64) {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("replicator's committer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(offset))
        .unwrap();
    c.commit(&tpl, CommitMode::Sync).expect("commit");
}

/// Deletes `topic` and creates it again (its offsets start at 0 again) once the
/// cluster no longer knows it.
async fn recreate(bootstrap: &str, topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> =
        testkit::client_config(bootstrap).create().unwrap();
    for r in admin
        .delete_topics(&[topic], &AdminOptions::new())
        .await
        .expect("delete topic")
    {
        r.unwrap_or_else(|e| panic!("delete {topic}: {e:?}"));
    }
    let gone = testkit::wait_until(Duration::from_secs(60), || {
        admin
            .inner()
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .is_ok_and(|md| md.topics().iter().all(|t| t.error().is_some()))
    });
    assert!(gone, "{topic} still there 60 s after its deletion");
    testkit::create_topic(bootstrap, topic, partitions).await;
}

/// (a) A consumer-group replicator copied the topic up to offset 50; the topic is
/// deleted and recreated. Once the auditor measures the new log (its end below 50),
/// the old position is dropped and counted (`past_log_end`); the replicator copies 3
/// records of the new topic, and the evidence published goes down to 3. The old 50
/// would prove every record of the new topic in flight a loss. Before the fix nothing
/// was counted and the evidence stayed at 50 (a lower commit "did not take back what
/// was copied before").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_topic_takes_the_evidence_down_to_the_replicators_new_position() {
    init_tracing();
    let s = Setup::new("recreated", 1).await;
    let evidence_topic = testkit::create_unique_topic(&s.bootstrap, "recreated-evidence", 1).await;
    let group = testkit::unique("recreated-replicator");
    let replicator = Replicator::ConsumerGroup(group.clone());
    let tier = replicator.evidence_tier().unwrap();
    let mut cfg = s.cfg.clone();
    cfg.audit.evidence_topic = evidence_topic.clone();
    cfg.audit.replicators = vec![replicator];
    cfg.audit.replication_evidence_age = Duration::from_secs(1);
    // The recreated topic's partition is assigned again within it.
    cfg.audit.topic_refresh = Duration::from_secs(1);
    enable_ops(&mut cfg);
    let p = producer(&s.bootstrap);
    produce_known(&p, &s.topic, 1, 50, 0, base_time(), 2, &mut Totals::new());
    commit(&s.bootstrap, &group, &s.topic, 50);
    let svc = start_service(cfg).await;
    let port = svc.ops_port();
    let past_log_end = || {
        metric(
            port,
            "kafka_audit_replication_evidence_dropped_total{reason=\"past_log_end\"}",
        )
    };
    let mut reader = AuditReader::new(&s.bootstrap, &evidence_topic, 1);
    let copied =
        tokio::task::block_in_place(|| wait_for_evidence(&mut reader, &tier, &s.topic, 0, 50));
    assert!(
        copied,
        "no evidence of 50 copied: {:?}",
        published(&reader, &tier, &s.topic, 0)
    );

    recreate(&s.bootstrap, &s.topic, 1).await;
    produce_known(
        &p,
        &s.topic,
        1,
        3,
        1_000,
        base_time(),
        2,
        &mut Totals::new(),
    );
    let dropped = tokio::task::block_in_place(|| {
        testkit::wait_until(Duration::from_secs(60), || past_log_end() >= 1.0)
    });
    assert!(
        dropped,
        "the position 50, past the recreated topic's log end, was not dropped: published {:?}",
        published(&reader, &tier, &s.topic, 0)
    );
    commit(&s.bootstrap, &group, &s.topic, 3);
    let down =
        tokio::task::block_in_place(|| wait_for_evidence(&mut reader, &tier, &s.topic, 0, 3));
    let seen = published(&reader, &tier, &s.topic, 0);
    svc.stop().await;
    assert!(
        down,
        "the evidence did not go down to the replicator's position 3 on the recreated topic: \
         published {seen:?}"
    );
}

/// (b) MirrorMaker 2's offset syncs, read from the beginning: partition 0's first
/// sync (upstream 1 000 000, from before a recreation, or forged) comes before newer,
/// lower ones (4, then 8): the latest wins, next offset 9. Partition 1's only sync
/// (5 000) is past the log end the auditor measures (10): never published, counted.
/// A sync for a topic name longer than Kafka's 249 bytes, and one for a topic the
/// auditor does not audit, are counted and kept nowhere. Before the fix partition 0
/// was published at 1 000 001 and partition 1 at 5 001.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_latest_offset_sync_wins_and_one_past_the_log_end_is_refused() {
    init_tracing();
    let s = Setup::new("syncs", 2).await;
    let evidence_topic = testkit::create_unique_topic(&s.bootstrap, "syncs-evidence", 1).await;
    let replicator = Replicator::MirrorMaker2(MirrorMaker2 {
        source: None,
        target: testkit::unique("agg"),
    });
    let tier = replicator.evidence_tier().unwrap();
    let syncs_topic = replicator.offset_syncs_topic().unwrap();
    testkit::create_topic(&s.bootstrap, &syncs_topic, 1).await;
    // 10 records on each partition.
    let p = producer(&s.bootstrap);
    produce_known(&p, &s.topic, 2, 20, 0, base_time(), 2, &mut Totals::new());
    let syncs: ThreadedProducer<DefaultProducerContext> = producer(&s.bootstrap);
    let too_long = "t".repeat(250);
    for (topic, partition, upstream) in [
        (s.topic.as_str(), 0, 1_000_000),
        (s.topic.as_str(), 1, 5_000),
        (s.topic.as_str(), 0, 4),
        (too_long.as_str(), 0, 1),
        ("not-audited-here", 0, 1),
        (s.topic.as_str(), 0, 8),
    ] {
        let (key, value) = offset_sync(topic, partition, upstream, upstream);
        send_queued(
            &syncs,
            BaseRecord::to(&syncs_topic).key(&key).payload(&value),
        );
    }
    syncs.flush(Duration::from_secs(30)).expect("flush syncs");

    let mut cfg = s.cfg.clone();
    cfg.audit.evidence_topic = evidence_topic.clone();
    cfg.audit.replicators = vec![replicator];
    cfg.audit.replication_evidence_age = Duration::from_secs(1);
    enable_ops(&mut cfg);
    let svc = start_service(cfg).await;
    let port = svc.ops_port();
    let mut reader = AuditReader::new(&s.bootstrap, &evidence_topic, 1);
    let latest =
        tokio::task::block_in_place(|| wait_for_evidence(&mut reader, &tier, &s.topic, 0, 9));
    let dropped = |reason: &str| {
        metric(
            port,
            &format!("kafka_audit_replication_evidence_dropped_total{{reason=\"{reason}\"}}"),
        )
    };
    let counted = tokio::task::block_in_place(|| {
        testkit::wait_until(Duration::from_secs(30), || {
            dropped("past_log_end") >= 1.0
                && dropped("topic_name_too_long") >= 1.0
                && dropped("not_audited") >= 1.0
                && dropped("position_backwards") >= 1.0
        })
    });
    // Reports go on: what partition 1 publishes is read well after its sync was judged.
    tokio::task::block_in_place(|| reader.poll_for(Duration::from_secs(3)));
    let (p0, p1) = (
        published(&reader, &tier, &s.topic, 0),
        published(&reader, &tier, &s.topic, 1),
    );
    let counts = [
        "past_log_end",
        "topic_name_too_long",
        "not_audited",
        "position_backwards",
    ]
    .map(|r| (r, dropped(r)));
    svc.stop().await;
    assert!(
        latest,
        "partition 0's evidence is not its latest sync (8, next offset 9): published {p0:?}"
    );
    assert!(
        p0.iter().all(|&x| x <= 10),
        "partition 0 published past its log end: {p0:?}"
    );
    assert!(
        p1.is_empty(),
        "partition 1's sync past the log end was published: {p1:?}"
    );
    assert!(counted, "refusals not counted: {counts:?}");
}
