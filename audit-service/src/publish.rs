//! Publishing WAL entries (DESIGN §5 step 3): in exactly-once mode each entry's audit
//! messages and its partitions' end offsets in one Kafka transaction, fenced by the
//! consumer's group metadata; in at-least-once mode produce, flush, then commit. A
//! failed transaction is aborted, or the producer recreated, which makes the pending
//! entries' outcome ambiguous until the restart rule settles them.

use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerGroupMetadata};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};
use rdkafka::ClientContext;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};

use crate::config::{Config, Mode};
use crate::metrics::ServiceError;
use crate::restart::Origin;
use crate::service::{AuditContext, Core};
use crate::wal::WalEntry;

/// Delivery failures of the audit-message producer (for at-least-once, where no
/// transaction reports them).
#[derive(Default)]
pub(crate) struct PublishContext {
    failures: Mutex<Vec<String>>,
}

impl ClientContext for PublishContext {}

impl ProducerContext for PublishContext {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, m)) = result {
            let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
            f.push(format!(
                "audit message to {} partition {}: {e}",
                m.topic(),
                m.partition()
            ));
        }
    }
}

// A BaseProducer: its flush (and so commit_transaction) serves the delivery reports
// itself. rdkafka's ThreadedProducer polling thread measurably competes with the
// consume thread for CPU on small machines.
pub(crate) type AuditProducer = BaseProducer<PublishContext>;

pub(crate) fn create_producer(cfg: &Config) -> anyhow::Result<AuditProducer> {
    let a = &cfg.audit;
    let txn_id = a.transactional_id();
    let timeout_ms = a.publish_timeout.as_millis().max(1000).to_string();
    let txn_timeout = (a.publish_timeout.as_millis() * 2).max(10_000).to_string();
    let mut overrides: Vec<(&str, &str)> = vec![("enable.idempotence", "true"), ("acks", "all")];
    if a.mode == Mode::ExactlyOnce {
        overrides.push(("transactional.id", &txn_id));
        overrides.push(("transaction.timeout.ms", &txn_timeout));
    }
    let producer: AuditProducer = cfg
        .kafka
        .client_config_with_defaults(
            common::KafkaRole::Producer,
            &[
                ("linger.ms", "5"),
                ("compression.type", "zstd"),
                ("message.timeout.ms", &timeout_ms),
            ],
            &overrides,
        )
        .create_with_context(PublishContext::default())
        .context("cannot create audit-message producer")?;
    if a.mode == Mode::ExactlyOnce {
        producer
            .init_transactions(a.publish_timeout)
            .with_context(|| format!("cannot init transactions (transactional.id {txn_id})"))?;
    }
    Ok(producer)
}

impl Core {
    /// Publishes pending entries in order until one fails. Returns true when none is
    /// left.
    pub(crate) fn publish_pending(&mut self, consumer: &BaseConsumer<AuditContext>) -> bool {
        if self.unsettled.is_some() {
            // Entries of an earlier session, or ambiguous ones, wait for the restart rule.
            return false;
        }
        for id in self.wal.pending_ids() {
            let entry = match self.wal.read(id) {
                Ok(e) => e,
                Err(e) => {
                    // Keep it: dropping it here would lose its counts while this
                    // instance owns the partitions; at revoke or restart it is
                    // discarded and recounted.
                    self.metrics.emit(
                        ServiceError::WalRead,
                        &e,
                        format_args!("cannot read pending WAL entry {id}"),
                    );
                    return false;
                }
            };
            let started = Instant::now();
            match self.publish(consumer, &entry) {
                Ok(()) => {
                    self.metrics
                        .publish_latency
                        .observe(started.elapsed().as_secs_f64());
                    self.metrics.published_entries.inc();
                    self.metrics
                        .published_messages
                        .inc_by(entry.messages.len() as u64);
                    self.offsets_seen
                        .insert_all(entry.ranges.iter().map(|r| (r.topic.as_str(), r.partition)));
                    if let Err(e) = self.wal.mark_published(entry.id) {
                        self.metrics.emit(
                            ServiceError::Wal,
                            &e,
                            format_args!("cannot mark WAL entry {} published", entry.id),
                        );
                    }
                }
                Err(e) => {
                    self.metrics.emit(
                        ServiceError::Publish,
                        &e,
                        format_args!("cannot publish WAL entry {}; will retry", entry.id),
                    );
                    self.update_wal_metrics();
                    return false;
                }
            }
        }
        self.update_wal_metrics();
        true
    }

    pub(crate) fn publish(
        &mut self,
        consumer: &BaseConsumer<AuditContext>,
        entry: &WalEntry,
    ) -> anyhow::Result<()> {
        let a = &self.cfg.audit;
        let mut tpl = TopicPartitionList::new();
        for r in &entry.ranges {
            tpl.add_partition_offset(&r.topic, r.partition, Offset::Offset(r.end))
                .with_context(|| format!("bad offset {} for {}/{}", r.end, r.topic, r.partition))?;
        }
        match a.mode {
            Mode::ExactlyOnce => {
                // The offsets of a deleted topic are answered UNKNOWN_TOPIC_OR_PARTITION,
                // which librdkafka retries until the timeout while the open transaction
                // and the core hold every other topic back: a first try with a short
                // bound, then, after an abort, the offsets of partitions that still
                // exist with the full timeout. A deleted partition has nothing left to
                // re-read, so its offset is the only thing dropped; the messages and the
                // other offsets stay in one transaction.
                // With no topic deleted, the transaction coordinator (AddOffsetsToTxn) or
                // the group coordinator (TxnOffsetCommit) did not answer, usually because
                // it moved: the second try is made by a new producer, which looks both up
                // afresh (see `send_offsets`).
                let full = a.publish_timeout;
                let quick = full.min(OFFSETS_FIRST_TRY);
                let mut res = self.publish_transaction(consumer, entry, &tpl, quick);
                if let Err(e) = &res {
                    if e.downcast_ref::<OffsetsFailed>().is_some() {
                        let kept = existing_partitions(consumer, &tpl, quick);
                        let retry = if kept.count() < tpl.count() {
                            self.recover_producer(e);
                            tracing::warn!(
                                entry = entry.id,
                                dropped = tpl.count() - kept.count(),
                                "offsets of deleted partitions left out of the transaction"
                            );
                            self.unsettled.is_none()
                        } else {
                            // The transaction never reached its commit and the new
                            // incarnation aborts it: the entry is certainly unpublished,
                            // not ambiguous.
                            self.metrics.emit(
                                ServiceError::ProducerRecreated,
                                e,
                                format_args!(
                                    "offsets not added to the transaction; a new producer \
                                     looks the group coordinator up again and retries"
                                ),
                            );
                            self.replace_producer()
                        };
                        if !retry {
                            return res.with_context(|| {
                                format!("transaction of WAL entry {} failed", entry.id)
                            });
                        }
                        res = self.publish_transaction(consumer, entry, &kept, full);
                    }
                }
                if let Err(e) = &res {
                    self.recover_producer(e);
                }
                res.with_context(|| format!("transaction of WAL entry {} failed", entry.id))
            }
            Mode::AtLeastOnce => {
                self.producer
                    .context()
                    .failures
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clear();
                self.send_messages(entry)?;
                self.producer
                    .flush(a.publish_timeout)
                    .context("cannot flush audit messages")?;
                let failures = std::mem::take(
                    &mut *self
                        .producer
                        .context()
                        .failures
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()),
                );
                if let Some(f) = failures.first() {
                    anyhow::bail!(
                        "{} audit messages not delivered, first: {f}",
                        failures.len()
                    );
                }
                if tpl.count() > 0 {
                    commit_sync(consumer, &tpl).context("cannot commit offsets")?;
                }
                Ok(())
            }
        }
    }

    fn send_messages(&self, entry: &WalEntry) -> anyhow::Result<()> {
        let topic = &self.cfg.audit.audit_topic;
        let deadline = Instant::now() + self.cfg.audit.publish_timeout;
        for m in &entry.messages {
            let mut record = BaseRecord::to(topic)
                .key(m.key.as_str())
                .payload(m.payload.as_str());
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                        // Back-pressure from the producer queue, not an error.
                        anyhow::ensure!(
                            Instant::now() < deadline,
                            "producer queue full for {:?}",
                            self.cfg.audit.publish_timeout
                        );
                        record = r;
                        self.producer.poll(Duration::from_millis(5));
                    }
                    Err((e, _)) => {
                        return Err(e).with_context(|| {
                            format!("cannot produce audit message for topic {}", m.key)
                        })
                    }
                }
            }
        }
        Ok(())
    }

    fn publish_transaction(
        &self,
        consumer: &BaseConsumer<AuditContext>,
        entry: &WalEntry,
        tpl: &TopicPartitionList,
        offsets_timeout: Duration,
    ) -> anyhow::Result<()> {
        let t = self.cfg.audit.publish_timeout;
        self.producer
            .begin_transaction()
            .context("begin_transaction")?;
        self.send_messages(entry)?;
        if tpl.count() > 0 {
            let meta = consumer
                .group_metadata()
                .context("consumer has no group metadata")?;
            send_offsets(&self.producer, tpl, meta, offsets_timeout).context(OffsetsFailed)?;
        }
        self.producer
            .commit_transaction(t)
            .context("commit_transaction")?;
        Ok(())
    }

    /// After a failed transaction: abort it when it can be, recreate the producer when
    /// the error is fatal (e.g. fenced), a call is stuck or the abort failed, then the
    /// restart rule decides about the pending entries.
    fn recover_producer(&mut self, err: &anyhow::Error) {
        let kerr = err.chain().find_map(|c| c.downcast_ref::<KafkaError>());
        let fatal = matches!(kerr, Some(KafkaError::Transaction(e)) if e.is_fatal());
        // A producer with a call still under way takes no other call (librdkafka
        // answers each with a conflict): only a new incarnation fences its transaction.
        let wedged = err.chain().any(|c| c.is::<Wedged>());
        if wedged || fatal {
            self.metrics.emit(
                ServiceError::ProducerRecreated,
                err,
                format_args!(
                    "{}; recreating the producer (the new one fences the old one's transaction)",
                    if wedged {
                        "the audit producer is stuck in a transactional call"
                    } else {
                        "fatal transaction error"
                    }
                ),
            );
        } else {
            // A BaseProducer must serve the delivery reports of the failed messages
            // before it can abort; flush polls them.
            let _ = self.producer.flush(self.cfg.audit.publish_timeout);
            match self
                .producer
                .abort_transaction(self.cfg.audit.publish_timeout)
            {
                Ok(()) => return,
                Err(e) => self.metrics.emit(
                    ServiceError::ProducerRecreated,
                    &e,
                    format_args!("abort_transaction failed; recreating the producer"),
                ),
            }
        }
        if self.replace_producer() {
            // A fenced or broken producer may have committed or not: only the
            // committed offsets can tell.
            self.unsettled = (self.wal.pending_count() > 0).then_some(Origin::AmbiguousThisSession);
        }
    }

    /// Replaces the producer by a new incarnation (same `transactional.id`: its
    /// `init_transactions` aborts the old one's open transaction and fences it).
    /// Whether it was replaced.
    fn replace_producer(&mut self) -> bool {
        match create_producer(&self.cfg) {
            Ok(p) => {
                // A stuck call keeps its own reference: the old producer is destroyed
                // when that call returns, fenced.
                self.producer = Arc::new(p);
                true
            }
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "cannot recreate the audit producer");
                false
            }
        }
    }
}

/// How long the first `send_offsets_to_transaction` of an entry may take before the
/// entry's topics are checked for deletion (see [`Core::publish`]).
const OFFSETS_FIRST_TRY: Duration = Duration::from_secs(5);

/// How long past its own timeout a `send_offsets_to_transaction` may take before the
/// producer is taken for stuck: librdkafka enforces that timeout itself whenever one
/// of the call's requests is answered or retried, so a late answer is one a loaded
/// machine delays by a second or two, not more.
const STUCK_AFTER: Duration = Duration::from_secs(3);

/// `send_offsets_to_transaction`, bounded. librdkafka waits for the call's result
/// without a bound and enforces its timeout only when one of its requests is answered
/// or retried. One never is: the TxnOffsetCommit of a group whose cached coordinator
/// librdkafka has decommissioned, because the broker left the cluster's metadata (a
/// KRaft broker does once fenced, seconds after it died), waits for that connection to
/// come up again, and nothing retries it until some other connection of the producer
/// goes up or down (librdkafka #5511; the broker closing an idle connection does, after
/// ten minutes). The call runs on a thread of its own; when it has not returned
/// [`STUCK_AFTER`] past its timeout the result is [`Wedged`], and the caller recreates
/// the producer: the new incarnation's `init_transactions` aborts the stuck one's
/// transaction and fences it, and the restart rule settles the entry.
fn send_offsets(
    producer: &Arc<AuditProducer>,
    offsets: &TopicPartitionList,
    group: ConsumerGroupMetadata,
    timeout: Duration,
) -> anyhow::Result<()> {
    let (done, result) = std::sync::mpsc::sync_channel(1);
    let (producer, offsets) = (Arc::clone(producer), offsets.clone());
    std::thread::Builder::new()
        .name("audit-offsets".into())
        .spawn(move || {
            // The receiver is gone when the call was given up: nothing to report to.
            let _ = done.send(producer.send_offsets_to_transaction(&offsets, &group, timeout));
        })
        .context("cannot start a thread for send_offsets_to_transaction")?;
    match result.recv_timeout(timeout + STUCK_AFTER) {
        Ok(r) => r.map_err(Into::into),
        Err(RecvTimeoutError::Timeout) => Err(Wedged(timeout + STUCK_AFTER).into()),
        Err(RecvTimeoutError::Disconnected) => {
            anyhow::bail!("send_offsets_to_transaction panicked")
        }
    }
}

/// A transactional call of the audit producer that did not return within its bound
/// (see [`send_offsets`]).
#[derive(Debug)]
struct Wedged(Duration);

impl std::fmt::Display for Wedged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "librdkafka did not return within {:?} (librdkafka #5511: a group coordinator that \
             left the cluster's metadata stays cached)",
            self.0
        )
    }
}

impl std::error::Error for Wedged {}

/// The context of a failed `send_offsets_to_transaction`.
#[derive(Debug)]
struct OffsetsFailed;

impl std::fmt::Display for OffsetsFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("send_offsets_to_transaction")
    }
}

/// `tpl` without the partitions whose topic the cluster says no longer exists (one
/// metadata request per topic of the list; on the failure path only). A topic whose
/// metadata cannot be read is kept: only a proven deletion drops an offset.
fn existing_partitions(
    consumer: &BaseConsumer<AuditContext>,
    tpl: &TopicPartitionList,
    timeout: Duration,
) -> TopicPartitionList {
    let topics: std::collections::BTreeSet<String> = tpl
        .elements()
        .iter()
        .map(|e| e.topic().to_string())
        .collect();
    let mut gone = std::collections::HashSet::new();
    for topic in topics {
        let Ok(md) = consumer.fetch_metadata(Some(&topic), timeout) else {
            continue;
        };
        if md.topics().iter().any(|t| {
            t.name() == topic
                && matches!(
                    t.error(),
                    Some(
                        RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART
                            | RDKafkaRespErr::RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC
                    )
                )
        }) {
            gone.insert(topic);
        }
    }
    let mut kept = TopicPartitionList::new();
    for e in tpl.elements() {
        if !gone.contains(e.topic()) {
            // Copied from a valid list: cannot fail.
            let _ = kept.add_partition_offset(e.topic(), e.partition(), e.offset());
        }
    }
    kept
}

pub(crate) fn commit_sync(
    consumer: &BaseConsumer<AuditContext>,
    tpl: &TopicPartitionList,
) -> anyhow::Result<()> {
    match consumer.commit(tpl, rdkafka::consumer::CommitMode::Sync) {
        Ok(()) => Ok(()),
        // Nothing to commit is success (vector's kafka source).
        Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
