//! Kafka clients of the tests: the producer of test records and the reader of a
//! group's committed offsets, built on [`client_config`](crate::client_config).

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::config::FromClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

/// An idempotent producer of the cluster at `bootstrap` (`acks=all`, 5 ms linger):
/// a `FutureProducer` or a `ThreadedProducer`, as the caller's type says.
pub fn producer<P: FromClientConfig>(bootstrap: &str) -> P {
    crate::client_config(bootstrap)
        .set("linger.ms", "5")
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .create()
        .expect("create producer")
}

/// The offsets `group` committed on partitions `0..partitions` of `topic`: partition
/// → offset, for the partitions with a committed offset only. Read by a consumer of
/// its own that never commits.
pub fn committed_offsets(
    bootstrap: &str,
    group: &str,
    topic: &str,
    partitions: i32,
) -> BTreeMap<i32, i64> {
    let consumer: BaseConsumer = crate::client_config(bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("committed-offset reader");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("committed offsets")
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect()
}

/// [`committed_offsets`] by partition index, 0 for a partition without one.
pub fn committed_per_partition(
    bootstrap: &str,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Vec<i64> {
    let committed = committed_offsets(bootstrap, group, topic, partitions);
    (0..partitions)
        .map(|p| committed.get(&p).copied().unwrap_or(0))
        .collect()
}

/// [`committed_offsets`] summed over the partitions (0 when none is committed).
pub fn committed_total(bootstrap: &str, group: &str, topic: &str, partitions: i32) -> i64 {
    committed_offsets(bootstrap, group, topic, partitions)
        .values()
        .sum()
}
