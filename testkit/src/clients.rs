//! Kafka clients of the tests: the producer of test records, the reader of a group's
//! committed offsets and the reader of a topic's whole log (ground truth: what the
//! cluster holds), built on [`client_config`](crate::client_config).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::config::FromClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Message, Timestamp};
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

/// One record of a topic's log as [`read_log`] read it back.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct LogRecord {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
    /// The record's timestamp (CreateTime or LogAppendTime), -1 when it has none.
    pub timestamp: i64,
}

/// What `topic` holds now: every record of partitions `0..partitions` up to the high
/// watermark each had when the call began, read back (read_committed) by a consumer
/// of its own, sorted by (partition, offset). Panics if the log is not read to those
/// ends within 120 s.
pub fn read_log(bootstrap: &str, topic: &str, partitions: i32) -> Vec<LogRecord> {
    let consumer: BaseConsumer = crate::client_config(bootstrap)
        .set("group.id", "unused-assign-only")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .expect("log reader");
    let mut ends = BTreeMap::new();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        let (_, high) = consumer
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .expect("watermarks");
        ends.insert(p, high);
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).expect("assign");
    let mut out = Vec::new();
    let mut done: BTreeSet<i32> = ends
        .iter()
        .filter(|(_, &h)| h == 0)
        .map(|(&p, _)| p)
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while done.len() < partitions as usize {
        assert!(
            Instant::now() < deadline,
            "log of {topic} not read to its end"
        );
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let end = ends[&m.partition()];
                if m.offset() < end {
                    out.push(LogRecord {
                        partition: m.partition(),
                        offset: m.offset(),
                        key: m.key().map(<[u8]>::to_vec),
                        payload: m.payload().map(<[u8]>::to_vec),
                        timestamp: match m.timestamp() {
                            Timestamp::CreateTime(ms) | Timestamp::LogAppendTime(ms) => ms,
                            Timestamp::NotAvailable => -1,
                        },
                    });
                }
                if m.offset() + 1 >= end {
                    done.insert(m.partition());
                }
            }
            Some(Err(e)) => eprintln!("log reader: {e}"),
            None => {
                // Past transaction markers at the end, the position is the end.
                if let Ok(pos) = consumer.position() {
                    for el in pos.elements() {
                        if let Offset::Offset(o) = el.offset() {
                            if o >= ends[&el.partition()] {
                                done.insert(el.partition());
                            }
                        }
                    }
                }
            }
        }
    }
    out.sort();
    out
}
