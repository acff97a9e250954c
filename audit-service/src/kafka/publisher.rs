//! Publishing WAL entries (docs/design.md §5 step 3): in exactly-once mode each entry's audit
//! messages and its partitions' end offsets in one Kafka transaction, fenced by the
//! consumer's group metadata; in at-least-once mode produce, flush, then commit. A
//! failed transaction is aborted, or the producer recreated, which makes the pending
//! entries' outcome ambiguous until the restart rule settles them.
//!
//! The [`Publisher`] owns the producer and answers with a typed [`PublishError`]. It
//! runs on the thread that calls it (the consume thread at a revoke or a resend, the
//! publishing thread for interval reports), never two at once.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, ConsumerGroupMetadata};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};
use rdkafka::ClientContext;

use crate::config::{Config, Mode};
use crate::metrics::{Metrics, ServiceError};
use crate::wal::WalEntry;

/// Why a WAL entry was not published.
#[derive(Debug)]
pub(crate) enum PublishError {
    /// The producer queue stayed full for the whole publish timeout.
    QueueFull(Duration),
    /// The producer can take no further transactional call: a fatal transaction
    /// error (e.g. fenced by a newer incarnation).
    Fatal {
        call: &'static str,
        error: KafkaError,
    },
    /// A transactional call of the producer did not return within its bound
    /// (librdkafka #5511, see [`send_offsets`]).
    Stuck(Duration),
    /// Worth another attempt with the same producer (after an abort).
    Retriable {
        call: &'static str,
        error: KafkaError,
    },
    /// The entry's offsets could not be added to its transaction.
    OffsetsFailed(Box<PublishError>),
    /// At-least-once: audit messages the broker did not take.
    Undelivered { count: usize, first: String },
    /// An entry whose offsets librdkafka refuses, or a missing consumer group
    /// metadata: nothing to retry.
    Invalid(String),
}

impl PublishError {
    fn of(call: &'static str, error: KafkaError) -> PublishError {
        match &error {
            KafkaError::Transaction(e) if e.is_fatal() => PublishError::Fatal { call, error },
            _ => PublishError::Retriable { call, error },
        }
    }

    /// Whether the group coordinator refused the consumer's membership: its static
    /// member id was fenced (`FENCED_INSTANCE_ID`, "Static consumer fenced by other
    /// consumer with same group.instance.id"). After an outage longer than the session
    /// timeout the coordinator gives the `group.instance.id` a new member id, and every
    /// publication with the old consumer's group metadata (its offsets in a
    /// transaction: an abortable error of `send_offsets_to_transaction`; or its
    /// commit, at-least-once) is refused until the consumer is recreated. No new
    /// producer or retry helps: the consume loop recreates the consumer
    /// (`kafka::consume`).
    pub(crate) fn member_fenced(&self) -> bool {
        match self {
            PublishError::Fatal { error, .. } | PublishError::Retriable { error, .. } => {
                error.rdkafka_error_code() == Some(RDKafkaErrorCode::FencedInstanceId)
            }
            PublishError::OffsetsFailed(e) => e.member_fenced(),
            _ => false,
        }
    }

    /// Whether the producer must be recreated rather than its transaction aborted.
    fn needs_new_producer(&self) -> bool {
        match self {
            PublishError::Fatal { .. } | PublishError::Stuck(_) => true,
            PublishError::OffsetsFailed(e) => e.needs_new_producer(),
            _ => false,
        }
    }
}

impl std::fmt::Display for PublishError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PublishError::QueueFull(d) => write!(f, "producer queue full for {d:?}"),
            PublishError::Fatal { call, error } => write!(f, "{call}: fatal: {error}"),
            PublishError::Stuck(d) => write!(
                f,
                "librdkafka did not return within {d:?} (librdkafka #5511: a group coordinator \
                 that left the cluster's metadata stays cached)"
            ),
            PublishError::Retriable { call, error } => write!(f, "{call}: {error}"),
            PublishError::OffsetsFailed(e) => write!(f, "send_offsets_to_transaction: {e}"),
            PublishError::Undelivered { count, first } => {
                write!(f, "{count} audit messages not delivered, first: {first}")
            }
            PublishError::Invalid(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for PublishError {}

/// Delivery failures of the audit-message producer (for at-least-once, where no
/// transaction reports them), handed to the [`Publisher`] that flushes.
pub(crate) struct PublishContext {
    failures: Sender<String>,
}

impl ClientContext for PublishContext {}

impl ProducerContext for PublishContext {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, m)) = result {
            // The receiver lives as long as the producer's publisher.
            let _ = self.failures.send(format!(
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

/// A producer and where its delivery failures arrive.
pub(crate) struct Producing {
    producer: AuditProducer,
    failures: Receiver<String>,
}

/// Creates the audit producer (exactly-once: `init_transactions`, which fences the
/// previous incarnation of this instance).
pub(crate) fn create_producer(cfg: &Config) -> anyhow::Result<Producing> {
    let a = &cfg.audit;
    let txn_id = a.transactional_id();
    let timeout_ms = a.publish_timeout.as_millis().max(1000).to_string();
    let txn_timeout = (a.publish_timeout.as_millis() * 2).max(10_000).to_string();
    let mut overrides: Vec<(&str, &str)> = vec![("enable.idempotence", "true"), ("acks", "all")];
    if a.mode == Mode::ExactlyOnce {
        overrides.push(("transactional.id", &txn_id));
        overrides.push(("transaction.timeout.ms", &txn_timeout));
    }
    let (tx, failures) = std::sync::mpsc::channel();
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
        .create_with_context(PublishContext { failures: tx })
        .context("cannot create audit-message producer")?;
    if a.mode == Mode::ExactlyOnce {
        producer
            .init_transactions(a.publish_timeout)
            .with_context(|| format!("cannot init transactions (transactional.id {txn_id})"))?;
    }
    Ok(Producing { producer, failures })
}

/// Owns the audit producer; publishes one WAL entry at a time.
pub(crate) struct Publisher {
    cfg: Config,
    metrics: Metrics,
    /// Shared with a `send_offsets_to_transaction` that may outlive its bound (see
    /// [`send_offsets`]).
    producer: Arc<AuditProducer>,
    failures: Receiver<String>,
    /// The producer was replaced since [`Publisher::take_replaced`] last asked: the
    /// outcome of the pending entries is ambiguous.
    replaced: bool,
}

impl Publisher {
    pub(crate) fn new(cfg: Config, metrics: Metrics, producing: Producing) -> Publisher {
        Publisher {
            cfg,
            metrics,
            producer: Arc::new(producing.producer),
            failures: producing.failures,
            replaced: false,
        }
    }

    /// Whether the producer was replaced (fenced or broken: the pending entries may
    /// have been committed or not, only the committed offsets can tell) since the
    /// last call.
    pub(crate) fn take_replaced(&mut self) -> bool {
        std::mem::take(&mut self.replaced)
    }

    /// Publishes `entry` with its offsets, fenced by `consumer`'s group metadata
    /// (exactly-once) or committed by `consumer` after the messages (at-least-once).
    pub(crate) fn publish<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        entry: &WalEntry,
    ) -> Result<(), PublishError> {
        let a = &self.cfg.audit;
        let mut tpl = TopicPartitionList::new();
        for r in &entry.ranges {
            tpl.add_partition_offset(&r.topic, r.partition, Offset::Offset(r.end))
                .map_err(|e| {
                    PublishError::Invalid(format!(
                        "bad offset {} for {}/{}: {e}",
                        r.end, r.topic, r.partition
                    ))
                })?;
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
                // A fenced member is the consumer's to fix: abort the transaction and
                // let the caller recreate the consumer; a new producer retrying with
                // the same group metadata would be refused again.
                if let Err(e @ PublishError::OffsetsFailed(_)) = &res {
                    if e.member_fenced() {
                        let replaced = self.recover_producer(e);
                        self.replaced |= replaced;
                        return res;
                    }
                    let kept = existing_partitions(consumer, &tpl, quick);
                    let retry = if kept.count() < tpl.count() {
                        let replaced = self.recover_producer(e);
                        self.replaced |= replaced;
                        tracing::warn!(
                            entry = entry.id,
                            dropped = tpl.count() - kept.count(),
                            "offsets of deleted partitions left out of the transaction"
                        );
                        !replaced
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
                        return res;
                    }
                    res = self.publish_transaction(consumer, entry, &kept, full);
                }
                if let Err(e) = &res {
                    let replaced = self.recover_producer(e);
                    self.replaced |= replaced;
                }
                res
            }
            Mode::AtLeastOnce => {
                // Failures of earlier entries were reported with them.
                while self.failures.try_recv().is_ok() {}
                self.send_messages(entry)?;
                self.producer
                    .flush(a.publish_timeout)
                    .map_err(|e| PublishError::of("flush", e))?;
                let failures: Vec<String> = self.failures.try_iter().collect();
                if let Some(first) = failures.first() {
                    return Err(PublishError::Undelivered {
                        count: failures.len(),
                        first: first.clone(),
                    });
                }
                if tpl.count() > 0 {
                    commit_sync(consumer, &tpl).map_err(|e| PublishError::of("commit", e))?;
                }
                Ok(())
            }
        }
    }

    fn send_messages(&self, entry: &WalEntry) -> Result<(), PublishError> {
        let deadline = Instant::now() + self.cfg.audit.publish_timeout;
        for m in &entry.messages {
            let topic = crate::replication::destination(&self.cfg.audit, &m.payload);
            let mut record = BaseRecord::to(topic)
                .key(m.key.as_str())
                .payload(m.payload.as_str());
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                        // Back-pressure from the producer queue, not an error.
                        if Instant::now() >= deadline {
                            return Err(PublishError::QueueFull(self.cfg.audit.publish_timeout));
                        }
                        record = r;
                        self.producer.poll(Duration::from_millis(5));
                    }
                    Err((e, _)) => return Err(PublishError::of("produce", e)),
                }
            }
        }
        Ok(())
    }

    fn publish_transaction<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        entry: &WalEntry,
        tpl: &TopicPartitionList,
        offsets_timeout: Duration,
    ) -> Result<(), PublishError> {
        let t = self.cfg.audit.publish_timeout;
        self.producer
            .begin_transaction()
            .map_err(|e| PublishError::of("begin_transaction", e))?;
        self.send_messages(entry)?;
        if tpl.count() > 0 {
            let meta = consumer.group_metadata().ok_or_else(|| {
                PublishError::Invalid("consumer has no group metadata".to_string())
            })?;
            send_offsets(&self.producer, tpl, meta, offsets_timeout)
                .map_err(|e| PublishError::OffsetsFailed(Box::new(e)))?;
        }
        self.producer
            .commit_transaction(t)
            .map_err(|e| PublishError::of("commit_transaction", e))
    }

    /// After a failed transaction: abort it when it can be, recreate the producer when
    /// the error is fatal (e.g. fenced), a call is stuck or the abort failed. Whether
    /// the producer was replaced.
    fn recover_producer(&mut self, err: &PublishError) -> bool {
        if err.needs_new_producer() {
            self.metrics.emit(
                ServiceError::ProducerRecreated,
                err,
                format_args!(
                    "{}; recreating the producer (the new one fences the old one's transaction)",
                    if matches!(err, PublishError::Fatal { .. }) {
                        "fatal transaction error"
                    } else {
                        "the audit producer is stuck in a transactional call"
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
                Ok(()) => return false,
                Err(e) => self.metrics.emit(
                    ServiceError::ProducerRecreated,
                    &e,
                    format_args!("abort_transaction failed; recreating the producer"),
                ),
            }
        }
        self.replace_producer()
    }

    /// Replaces the producer by a new incarnation (same `transactional.id`: its
    /// `init_transactions` aborts the old one's open transaction and fences it).
    /// Whether it was replaced.
    fn replace_producer(&mut self) -> bool {
        match create_producer(&self.cfg) {
            Ok(p) => {
                // A stuck call keeps its own reference: the old producer is destroyed
                // when that call returns, fenced.
                self.producer = Arc::new(p.producer);
                self.failures = p.failures;
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
/// entry's topics are checked for deletion (see [`Publisher::publish`]).
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
/// [`STUCK_AFTER`] past its timeout the result is [`PublishError::Stuck`], and the
/// caller recreates the producer: the new incarnation's `init_transactions` aborts the
/// stuck one's transaction and fences it, and the restart rule settles the entry.
fn send_offsets(
    producer: &Arc<AuditProducer>,
    offsets: &TopicPartitionList,
    group: ConsumerGroupMetadata,
    timeout: Duration,
) -> Result<(), PublishError> {
    let (done, result) = std::sync::mpsc::sync_channel(1);
    let (producer, offsets) = (Arc::clone(producer), offsets.clone());
    std::thread::Builder::new()
        .name("audit-offsets".into())
        .spawn(move || {
            // The receiver is gone when the call was given up: nothing to report to.
            let _ = done.send(producer.send_offsets_to_transaction(&offsets, &group, timeout));
        })
        .map_err(|e| {
            PublishError::Invalid(format!(
                "cannot start a thread for send_offsets_to_transaction: {e}"
            ))
        })?;
    match result.recv_timeout(timeout + STUCK_AFTER) {
        Ok(r) => r.map_err(|e| PublishError::of("send_offsets_to_transaction", e)),
        Err(RecvTimeoutError::Timeout) => Err(PublishError::Stuck(timeout + STUCK_AFTER)),
        Err(RecvTimeoutError::Disconnected) => Err(PublishError::Invalid(
            "send_offsets_to_transaction panicked".to_string(),
        )),
    }
}

/// `tpl` without the partitions whose topic the cluster says no longer exists (one
/// metadata request per topic of the list; on the failure path only). A topic whose
/// metadata cannot be read is kept: only a proven deletion drops an offset.
fn existing_partitions<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
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

/// A synchronous offset commit; nothing to commit is success (vector's kafka source).
pub(crate) fn commit_sync<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    tpl: &TopicPartitionList,
) -> Result<(), KafkaError> {
    match consumer.commit(tpl, rdkafka::consumer::CommitMode::Sync) {
        Ok(()) => Ok(()),
        Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a failed publication does to the producer (1592d81): a call stuck past its
    /// bound, or a fatal error, needs a new incarnation even when it happened while
    /// adding the offsets; anything else is aborted and retried with the same one.
    #[test]
    fn stuck_or_fatal_calls_recreate_the_producer_others_abort() {
        let retriable = || PublishError::Retriable {
            call: "commit_transaction",
            error: KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut),
        };
        let stuck = || PublishError::Stuck(Duration::from_secs(8));
        let table: Vec<(&str, PublishError, bool)> = vec![
            ("stuck", stuck(), true),
            // reverted (only the outer error looked at): false
            (
                "stuck while adding the offsets",
                PublishError::OffsetsFailed(Box::new(stuck())),
                true,
            ),
            ("retriable", retriable(), false),
            (
                "retriable while adding the offsets",
                PublishError::OffsetsFailed(Box::new(retriable())),
                false,
            ),
            (
                "queue full",
                PublishError::QueueFull(Duration::from_secs(30)),
                false,
            ),
        ];
        let failures: Vec<String> = table
            .iter()
            .filter_map(|(what, e, want)| {
                let got = e.needs_new_producer();
                (got != *want).then(|| format!("{what} ({e}): expected {want}, got {got}"))
            })
            .collect();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    /// How a fenced static member surfaces from a publication, and that it is
    /// told apart from every other failure. The transactional error is librdkafka's
    /// own: a mock cluster answers the offsets' TxnOffsetCommit with
    /// FENCED_INSTANCE_ID, which `send_offsets_to_transaction` reports as an abortable
    /// (not fatal) transaction error: the producer is fine, the consumer is not.
    #[test]
    fn a_fenced_static_member_is_told_apart_from_other_publication_failures() {
        use rdkafka::config::ClientConfig;
        use rdkafka::mocking::MockCluster;
        use rdkafka::types::RDKafkaApiKey;

        let mock = MockCluster::new(1).unwrap();
        mock.create_topic("t", 1, 1).unwrap();
        let bootstrap = mock.bootstrap_servers();
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", "g")
            .set("group.instance.id", "auditor-0")
            .create()
            .unwrap();
        let (failures, _) = std::sync::mpsc::channel();
        let producer: AuditProducer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("transactional.id", "tx")
            .create_with_context(PublishContext { failures })
            .unwrap();
        let timeout = Duration::from_secs(10);
        producer.init_transactions(timeout).unwrap();
        producer.begin_transaction().unwrap();
        mock.request_errors(
            RDKafkaApiKey::TxnOffsetCommit,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_FENCED_INSTANCE_ID],
        );
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("t", 0, Offset::Offset(1)).unwrap();
        let meta = consumer.group_metadata().expect("group metadata");
        // As `publish_transaction` wraps it.
        let fenced = PublishError::OffsetsFailed(Box::new(
            send_offsets(&Arc::new(producer), &tpl, meta, timeout).unwrap_err(),
        ));
        // An abortable transaction error, not a fatal one.
        let abortable = |e: &PublishError| {
            matches!(
                e,
                PublishError::Retriable {
                    error: KafkaError::Transaction(_),
                    ..
                }
            )
        };
        assert!(
            matches!(&fenced, PublishError::OffsetsFailed(e) if abortable(e)),
            "{fenced:?}"
        );
        assert!(fenced.member_fenced(), "{fenced}");
        assert!(!fenced.needs_new_producer(), "{fenced}");

        let table: Vec<(&str, PublishError, bool)> = vec![
            // reverted (no classification): false
            ("TxnOffsetCommit refused for the member", fenced, true),
            (
                "at-least-once commit refused for the member",
                PublishError::of(
                    "commit",
                    KafkaError::ConsumerCommit(RDKafkaErrorCode::FencedInstanceId),
                ),
                true,
            ),
            (
                "commit, another error",
                PublishError::of(
                    "commit",
                    KafkaError::ConsumerCommit(RDKafkaErrorCode::RebalanceInProgress),
                ),
                false,
            ),
            (
                "timed out",
                PublishError::of(
                    "commit_transaction",
                    KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut),
                ),
                false,
            ),
            (
                "stuck while adding the offsets",
                PublishError::OffsetsFailed(Box::new(PublishError::Stuck(timeout))),
                false,
            ),
            ("queue full", PublishError::QueueFull(timeout), false),
        ];
        let wrong: Vec<String> = table
            .iter()
            .filter_map(|(what, e, want)| {
                let got = e.member_fenced();
                (got != *want).then(|| format!("{what} ({e}): expected {want}, got {got}"))
            })
            .collect();
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
