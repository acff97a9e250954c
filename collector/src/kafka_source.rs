//! One Kafka cluster's audit topic(s) into the store.
//!
//! Records are read with `read_committed` and auto-commit off, gathered into a batch,
//! written in one store transaction, and only then are their offsets committed. A
//! crash between the two replays the batch, which the store's UUID deduplication makes
//! harmless. While the store is down the loop stays in [`Sink::write`] and reads
//! nothing more. A record that is not a valid audit message becomes a reject (stored
//! with its reason, counted) and its offset is committed like any other. So does a
//! record of replication evidence (a `replicator:` tier) read from a topic that is not
//! one of the source's `evidence_topics`, the topics only auditors may write (issue
//! 43): any application with the plugin can write the audit topic.

use std::collections::BTreeMap;
use std::sync::Arc;

use audit_lib::TopicPartition;
use common::{now_ms, KafkaRole};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message as _;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use store::{Batch, Reject};
use tokio_util::sync::CancellationToken;

use crate::bounds::Bound;
use crate::config::{BatchConfig, KafkaSourceConfig};
use crate::convert;
use crate::sink::{Sink, Written};

pub struct KafkaSource {
    label: String,
    config: KafkaSourceConfig,
    batch: BatchConfig,
    sink: Sink,
    /// One consumer error logged per second (`kafka_errors` counts each one): a
    /// broker's death fails every fetch of its partitions at once.
    log_every: common::LogEvery,
}

impl KafkaSource {
    pub fn new(config: KafkaSourceConfig, batch: BatchConfig, sink: Sink) -> Self {
        KafkaSource {
            label: format!("kafka:{}", config.name),
            config,
            batch,
            sink,
            log_every: common::LogEvery::new(std::time::Duration::from_secs(1)),
        }
    }

    fn consumer(&self) -> anyhow::Result<StreamConsumer> {
        let consumer: StreamConsumer = client_config(&self.config).create().map_err(|e| {
            anyhow::anyhow!(
                "source {}: cannot create Kafka consumer: {e}",
                self.config.name
            )
        })?;
        let topics = self.config.subscription();
        consumer.subscribe(&topics).map_err(|e| {
            anyhow::anyhow!(
                "source {}: cannot subscribe to {topics:?}: {e}",
                self.config.name
            )
        })?;
        Ok(consumer)
    }

    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let consumer = Arc::new(self.consumer()?);
        tracing::info!(source = %self.label, topics = ?self.config.topics, evidence_topics = ?self.config.evidence_topics, group = %self.config.group_id, "consuming");
        loop {
            let Some(records) = self.gather(&consumer, &shutdown).await else {
                break;
            };
            if records.next_offsets.is_empty() {
                continue;
            }
            let Some(written) = self
                .sink
                .write(&self.label, &records.batch, &shutdown)
                .await
            else {
                // Shut down before the store took the batch: nothing is committed, the
                // records are read again at the next start.
                break;
            };
            tracing::debug!(
                source = %self.label,
                messages = written.len(),
                accepted = written.iter().filter(|w| **w == Written::Accepted).count(),
                rejected = records.batch.rejects.len(),
                "batch stored"
            );
            if !self.batch.test_pause_before_offset_commit.is_zero() {
                tokio::time::sleep(self.batch.test_pause_before_offset_commit).await;
            }
            self.commit(&consumer, records.next_offsets).await;
        }
        tracing::info!(source = %self.label, "stopped");
        Ok(())
    }

    /// Waits for a first record, then gathers more until the batch holds
    /// `max_messages` records or `max_bytes` of payload, or `max_wait` passed. `None`
    /// on shutdown.
    async fn gather(
        &self,
        consumer: &StreamConsumer,
        shutdown: &CancellationToken,
    ) -> Option<Gathered> {
        let mut gathered = Gathered::default();
        let first = tokio::select! {
            r = consumer.recv() => r,
            _ = shutdown.cancelled() => return None,
        };
        self.take(first, &mut gathered);
        let deadline = tokio::time::Instant::now() + self.batch.max_wait;
        while gathered.records < self.batch.max_messages
            && gathered.bytes < self.batch.max_bytes
            && gathered.entries < self.batch.max_entries
        {
            tokio::select! {
                r = tokio::time::timeout_at(deadline, consumer.recv()) => match r {
                    Ok(r) => self.take(r, &mut gathered),
                    Err(_) => break,
                },
                // Finish the batch in hand: what was read is stored before stopping.
                _ = shutdown.cancelled() => break,
            }
        }
        if gathered.entries >= self.batch.max_entries {
            self.sink
                .metrics
                .source(&self.sink.metrics.batches_cut, &self.label);
        }
        if let Some(unlogged) = gathered
            .batch
            .rejects
            .len()
            .checked_sub(LOGGED_REJECTS_PER_BATCH)
            .filter(|&n| n > 0)
        {
            tracing::warn!(
                source = %self.label,
                unlogged,
                "more audit records of this batch rejected than logged: each is in audit_reject and counted in kafka_audit_collector_messages_total"
            );
        }
        if gathered.excerpts.dropped > 0 {
            self.sink
                .metrics
                .excerpts_dropped
                .inc_by(gathered.excerpts.dropped);
        }
        gathered.batch.received_at_ms = now_ms();
        Some(gathered)
    }

    fn take(
        &self,
        record: Result<rdkafka::message::BorrowedMessage<'_>, KafkaError>,
        into: &mut Gathered,
    ) {
        let record = match record {
            Ok(r) => r,
            Err(e) => {
                self.sink
                    .metrics
                    .source(&self.sink.metrics.kafka_errors, &self.label);
                if let Some(held_back) = self.log_every.check("consume") {
                    tracing::warn!(source = %self.label, error = %e, held_back, "Kafka consumer error");
                }
                return;
            }
        };
        into.records += 1;
        let (topic, partition, offset) = (record.topic(), record.partition(), record.offset());
        let payload = record.payload().unwrap_or_default();
        into.bytes += payload.len();
        let received = now_ms();
        let parsed = if payload.len() > self.batch.max_record_bytes {
            self.sink.bounds.count(Bound::record_bytes);
            Err(format!(
                "record of {} bytes is larger than batch.max_record_bytes ({}); not parsed",
                payload.len(),
                self.batch.max_record_bytes
            ))
        } else {
            convert::parse(payload, received)
                .and_then(|m| self.sink.bounds.check(&m, received).map(|()| m))
                .and_then(|m| match self.config.evidence_refused(topic, &m.tier) {
                    None => Ok(m),
                    Some(why) => {
                        self.sink
                            .metrics
                            .source(&self.sink.metrics.evidence_rejects, &self.label);
                        Err(why)
                    }
                })
        };
        match parsed {
            Ok(message) => {
                into.entries += convert::entries(&message);
                into.batch.messages.push(message);
            }
            Err(reason) => {
                let source = format!("{}/{topic}/{partition}@{offset}", self.label);
                if into.batch.rejects.len() < LOGGED_REJECTS_PER_BATCH {
                    tracing::warn!(%source, %reason, "rejecting audit record");
                }
                into.batch.rejects.push(Reject {
                    source,
                    reason,
                    payload: into.excerpts.take(payload),
                });
            }
        }
        let next = into
            .next_offsets
            .entry(TopicPartition::new(topic, partition))
            .or_insert(offset + 1);
        *next = (*next).max(offset + 1);
    }

    async fn commit(
        &self,
        consumer: &Arc<StreamConsumer>,
        next_offsets: BTreeMap<TopicPartition, i64>,
    ) {
        let mut tpl = TopicPartitionList::new();
        for (TopicPartition { topic, partition }, next) in &next_offsets {
            if let Err(e) = tpl.add_partition_offset(topic, *partition, Offset::Offset(*next)) {
                tracing::error!(source = %self.label, topic, partition, error = %e, "cannot build offset commit");
                return;
            }
        }
        let consumer = Arc::clone(consumer);
        // A synchronous commit waits for the broker; keep it off the async workers.
        let result =
            tokio::task::spawn_blocking(move || consumer.commit(&tpl, CommitMode::Sync)).await;
        match result {
            Ok(Ok(())) | Ok(Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset))) => {}
            Ok(Err(e)) => {
                // The batch is stored; the records will be read again and counted as
                // duplicates. Typical after a rebalance took the partitions away.
                self.sink
                    .metrics
                    .source(&self.sink.metrics.kafka_commit_errors, &self.label);
                tracing::warn!(source = %self.label, error = %e, "offset commit failed after a stored batch");
            }
            Err(e) => {
                tracing::error!(source = %self.label, error = %e, "offset commit task failed")
            }
        }
    }
}

/// Rejected records logged one by one per batch: whoever can produce to the audit
/// topic must not be able to turn each record into a log line (a flood of 100 000
/// forged records was 100 000 warnings, and the time to write them).
const LOGGED_REJECTS_PER_BATCH: usize = 10;

#[derive(Default)]
struct Gathered {
    batch: Batch,
    records: usize,
    /// Payload bytes of those records.
    bytes: usize,
    /// Partition entries of the messages taken (what storing them costs).
    entries: usize,
    excerpts: convert::Excerpts,
    /// Offset to commit (last record + 1)
    next_offsets: BTreeMap<TopicPartition, i64>,
}

/// A source's consumer configuration: its properties over these defaults, with what
/// correctness needs forced.
fn client_config(config: &KafkaSourceConfig) -> rdkafka::ClientConfig {
    config.kafka.client_config_with_defaults(
        KafkaRole::Consumer,
        // Prefetch bounded (librdkafka's default queue is 64 MiB, on top of the batch
        // in hand): a flood of large records must not take the collector's memory.
        // Tunables: a source's properties override them.
        &[
            ("auto.offset.reset", "earliest"),
            ("queued.max.messages.kbytes", "16384"),
            ("fetch.max.bytes", "16777216"),
            // librdkafka reads a subscription's metadata again only every 5 minutes by
            // default: audit-topic partitions that the broker answering the first join
            // did not know yet (a topic just created on a multi-node cluster: the
            // auditor's empty first assignment) or that were added later would wait
            // that long. As often as the auditors re-read their topics (their
            // `topic_refresh` default).
            ("topic.metadata.refresh.interval.ms", "30000"),
        ],
        // Correctness, not tunables: offsets move only after the store commit, and
        // aborted audit messages are never read.
        &[
            ("group.id", config.group_id.as_str()),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("isolation.level", "read_committed"),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(properties: &str) -> KafkaSourceConfig {
        let config: crate::config::CollectConfig = toml::from_str(&format!(
            r#"
[store]
url = "sqlite::memory:"
[[sources]]
name = "a"
topics = ["_kafka_audit"]
group_id = "collector"
[sources.kafka]
bootstrap_servers = "127.0.0.1:1"
[sources.kafka.consumer]
{properties}
"#
        ))
        .expect("config");
        config.sources[0].clone()
    }

    /// The audit topic's metadata is read again every 30 s unless the source says
    /// otherwise: partitions a first join missed are consumed within it, not 5 min.
    #[test]
    fn the_audit_topics_metadata_is_refreshed_every_30_s_unless_set() {
        let get = |s: &KafkaSourceConfig| {
            client_config(s)
                .get("topic.metadata.refresh.interval.ms")
                .map(str::to_string)
        };
        assert_eq!(get(&source("")).as_deref(), Some("30000"));
        assert_eq!(
            get(&source("\"topic.metadata.refresh.interval.ms\" = \"5000\"")).as_deref(),
            Some("5000")
        );
        let c = client_config(&source("\"isolation.level\" = \"read_uncommitted\""));
        assert_eq!(c.get("isolation.level"), Some("read_committed"), "forced");
    }
}
