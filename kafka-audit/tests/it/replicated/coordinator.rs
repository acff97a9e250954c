//! The auditor's group coordinator SIGKILLed while the auditor is idle, its traffic only
//! once every client has dropped the node. The node also leads the audit topic's
//! partition, so the auditor's producer asks for the partition's new leader every
//! second and learns, once the controller has fenced the node (broker session 4 s),
//! that it is gone from the cluster's metadata: librdkafka then decommissions its
//! connection, but keeps it cached as the group's coordinator, and the TxnOffsetCommit
//! of the next `send_offsets_to_transaction` waits for that connection to come up,
//! which it never does (librdkafka #5511; the call waits for its result without a
//! bound). Before the fix this held the auditor, with no error logged, until the broker
//! closed an idle connection of the producer ten minutes later. The auditor must
//! resume within seconds, and every window stay exact.

use std::time::Duration;

use super::*;

const PARTITIONS: i32 = 3;
const RATE: u64 = 200;
const BATCH: u64 = 400;

pub async fn a_group_coordinator_gone_from_the_metadata_does_not_hold_the_auditor() {
    let cluster = Cluster::take().await;
    let mut rig = Rig::start(
        cluster,
        "gcoord",
        PARTITIONS,
        None,
        &[("min.insync.replicas", "2")],
        "60s",
        "5s",
    )
    .await;
    // A group whose coordinator leads the audit topic's partition (one in three is).
    let node = rig.cluster.leader(&rig.audit_topic, 0);
    let group = (0..100)
        .map(|_| testkit::unique("gcoord-regional"))
        .find(|g| rig.cluster.group_coordinator(g) == node)
        .unwrap_or_else(|| {
            panic!(
                "no group coordinated by the audit topic's leader {node}: {:?}",
                rig.cluster.partitions("__consumer_offsets")
            )
        });
    rig.group = group.clone();
    rig.start_auditor();
    let producer = rig.producer_tier(&[
        ("acks", "all"),
        ("enable.idempotence", "true"),
        ("message.timeout.ms", "300000"),
    ]);
    tokio::task::block_in_place(|| producer.send_batch(BATCH, RATE));
    assert!(
        rig.wait_counted(BATCH, Duration::from_secs(90))
            .await
            .is_some(),
        "counting did not start"
    );
    tokio::task::block_in_place(|| {
        let c = &rig.cluster;
        c.kill(node);
        let fenced = testkit::wait_until(Duration::from_secs(30), || {
            let brokers = c.brokers();
            !brokers.is_empty() && !brokers.contains(&node)
        });
        assert!(
            fenced,
            "node {node} still in the metadata: {:?}",
            c.brokers()
        );
        // The producer asks for the partition's leader once a second (librdkafka's
        // scan of partitions whose leader is down): two of its answers without the node.
        std::thread::sleep(Duration::from_secs(2));
        producer.send_batch(BATCH, RATE);
    });
    let resumed = rig.wait_counted(2 * BATCH, Duration::from_secs(60)).await;
    let stored_then = rig.stored_total("regional").await;
    eprintln!(
        "group coordinator and audit topic leader {node} killed and fenced: counting \
         resumed {resumed:?} after the traffic"
    );
    assert!(
        resumed.is_some(),
        "counting did not resume within 60 s of the traffic: stored {stored_then} of {}",
        2 * BATCH
    );
    tokio::task::block_in_place(|| {
        let c = &rig.cluster;
        c.start(node);
        assert!(
            c.wait_in_sync(
                &[&rig.topic, &rig.audit_topic, "__consumer_offsets"],
                Duration::from_secs(120)
            ),
            "replicas not back in sync"
        );
    });
    producer.finish();
    let log = tokio::task::block_in_place(|| {
        read_log(&rig.cluster.bootstrap, &rig.topic, rig.partitions)
    });
    let acked = producer.acked();
    let (want_producer, want_regional) = (per_window(&acked), per_window(&log));
    let final_ok = rig
        .wait_final(&want_producer, &want_regional, Duration::from_secs(120))
        .await;
    let (stored_producer, stored_regional) =
        (rig.stored("producer").await, rig.stored("regional").await);
    let beyond = written_beyond_acks(&acked, &log);
    assert_exact_and_final(
        final_ok,
        (&want_producer, &stored_producer),
        (&want_regional, &stored_regional),
    );
    assert_pages_are_the_logs_duplicates(&rig.pages, &rig.topic, &beyond, &[]).await;
    rig.shutdown().await;
}
