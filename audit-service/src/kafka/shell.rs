//! The I/O around the auditor (docs/design.md §5): reading committed offsets, writing and
//! settling WAL entries, publishing them, seeking, and the metrics. Every decision is
//! the auditor's (`crate::auditor`); this file carries its answers to Kafka and the
//! disk.
//!
//! A report: drain the aggregator → audit messages (fresh UUIDs) + progress per topic →
//! WAL entry with the offset range of every partition consumed since the previous
//! report (fsync) → publish pending entries in order, each in one transaction with its
//! offsets → mark published.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use audit_lib::{Identity, TopicPartition};
use common::now_ms;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::auditor::{Auditor, Committed, Dating, Decision, Origin, Reason};
use crate::config::Config;
use crate::counting::Counting;
use crate::kafka::client::{fetch_age_ms, starts_at_log_start};
use crate::kafka::publisher::{Producing, PublishError, Publisher};
use crate::metrics::{KindLabel, Metrics, PartitionLabel, ServiceError};
use crate::offsets_seen::OffsetsSeen;
use crate::wal::{CommittedRange, Wal, WalMessage};

/// The auditor with everything it does I/O with.
pub(crate) struct Shell {
    pub(crate) cfg: Config,
    pub(crate) counting: Counting,
    pub(crate) auditor: Auditor,
    pub(crate) wal: Wal,
    publisher: Publisher,
    pub(crate) metrics: Metrics,
    /// Partitions this instance has seen committed offsets for (expiry detection).
    offsets_seen: OffsetsSeen,
    /// The replicators' progress, read beside the consumption (rule 0's evidence).
    replication: crate::replication::Readers,
    /// Set when a publication found the consumer unusable (its static member fenced,
    /// or a fatal consumer error): the consume loop, which watches it, recreates the
    /// consumer at once ([`Shell::consumer_unusable`]).
    unusable: Arc<AtomicBool>,
}

impl Shell {
    pub(crate) fn new(
        cfg: Config,
        wal: Wal,
        metrics: Metrics,
        producer: Producing,
    ) -> anyhow::Result<Shell> {
        let a = &cfg.audit;
        let identity = Identity::new(&a.tier, &a.datacenter, &a.instance_id);
        let counting = Counting::new(&cfg, identity.clone(), &metrics)?;
        let auditor = Auditor::new(
            identity,
            starts_at_log_start(&cfg),
            Dating::new(now_ms(), fetch_age_ms(&cfg)),
            wal.pending_count() > 0,
        );
        let mut offsets_seen = OffsetsSeen::load(wal.dir());
        // A pending entry that starts at a committed offset shows one existed.
        let pending_starts: Vec<TopicPartition> = wal
            .pending_ids()
            .into_iter()
            .flat_map(|id| wal.ranges(id).unwrap_or_default().to_vec())
            .filter(|r| r.start.is_some_and(|s| s >= 0))
            .map(|r| r.topic_partition())
            .collect();
        offsets_seen.insert_all(
            pending_starts
                .iter()
                .map(|tp| (tp.topic.as_str(), tp.partition)),
        );
        let publisher = Publisher::new(cfg.clone(), metrics.clone(), producer);
        let replication = crate::replication::start(&cfg, &metrics)
            .context("cannot start the replication evidence readers")?;
        Ok(Shell {
            cfg,
            counting,
            auditor,
            wal,
            publisher,
            metrics,
            offsets_seen,
            replication,
            unusable: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The committed offsets of `partitions`: an errored partition, or a failed
    /// read, is `Committed::Error`, never "no offset".
    fn read_committed<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        partitions: &[TopicPartition],
    ) -> HashMap<TopicPartition, Committed> {
        let mut tpl = TopicPartitionList::new();
        for tp in partitions {
            tpl.add_partition(&tp.topic, tp.partition);
        }
        let mut out: HashMap<TopicPartition, Committed> = partitions
            .iter()
            .map(|tp| (tp.clone(), Committed::Error))
            .collect();
        match consumer.committed_offsets(tpl, self.cfg.audit.publish_timeout) {
            Ok(c) => {
                for el in c.elements() {
                    let value = match (el.error(), el.offset()) {
                        (Err(e), _) => {
                            self.metrics.emit(
                                ServiceError::CommittedOffsets,
                                &e,
                                format_args!(
                                    "cannot read the committed offset of {} [{}]",
                                    el.topic(),
                                    el.partition()
                                ),
                            );
                            Committed::Error
                        }
                        (Ok(()), Offset::Offset(o)) => Committed::At(o),
                        (Ok(()), _) => Committed::None,
                    };
                    out.insert(TopicPartition::new(el.topic(), el.partition()), value);
                }
            }
            Err(e) => {
                self.metrics.emit(
                    ServiceError::CommittedOffsets,
                    &e,
                    format_args!(
                        "cannot read committed offsets of {} partitions",
                        partitions.len()
                    ),
                );
            }
        }
        out
    }

    /// Applies the restart rule (auditor/restart.rs) to every pending entry, in order.
    pub(crate) fn reconcile<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        origin: Origin,
    ) {
        let entries: Vec<(u64, Vec<CommittedRange>)> = self
            .wal
            .pending_ids()
            .into_iter()
            .map(|id| (id, self.wal.ranges(id).unwrap_or_default().to_vec()))
            .collect();
        self.auditor.unsettled = None;
        if entries.is_empty() {
            return;
        }
        let mut partitions: Vec<TopicPartition> = entries
            .iter()
            .flat_map(|(_, ranges)| ranges.iter().map(CommittedRange::topic_partition))
            .collect();
        partitions.sort();
        partitions.dedup();
        let committed = self.read_committed(consumer, &partitions);
        let mut rule = self.auditor.restart_rule(origin, committed);
        for (id, ranges) in entries {
            let mut decision = rule.decide(&ranges);
            if decision == Decision::Resend {
                let resent = self.wal.read(id).and_then(|e| {
                    tracing::info!(
                        id,
                        ?origin,
                        messages = e.messages.len(),
                        "resending pending WAL entry"
                    );
                    let sent = self.publisher.publish(consumer, &e);
                    self.note_replaced_producer();
                    if let Err(err) = &sent {
                        self.note_publish_failure(consumer, err);
                    }
                    sent.map(|()| e.messages.len()).map_err(Into::into)
                });
                match resent {
                    Ok(n) => {
                        self.metrics.published_entries.inc();
                        self.metrics.published_messages.inc_by(n as u64);
                        let _ = self.wal.mark_published(id);
                        rule.resent(&ranges);
                    }
                    Err(err) => {
                        tracing::warn!(id, error = %format!("{err:#}"), "resend failed");
                        decision = rule.resend_failed();
                    }
                }
            }
            self.metrics.restart_decision(origin, decision);
            match decision {
                Decision::Resend => {}
                Decision::AlreadyPublished => {
                    tracing::info!(id, "pending WAL entry was already published");
                    let _ = self.wal.mark_published(id);
                }
                Decision::Discard => {
                    tracing::info!(id, ?origin, "discarding pending WAL entry: its partitions are recounted from the committed offsets");
                    self.discard(id);
                }
                Decision::Keep => {
                    // The consumer is past the entry: dropping it would lose its
                    // counts. It and every later entry wait for the next attempt or
                    // the next revoke.
                    tracing::info!(id, "pending WAL entry kept: its outcome is not known yet");
                    self.auditor.unsettled = Some(Origin::AmbiguousThisSession);
                    break;
                }
            }
        }
        if origin == Origin::EarlierSession {
            // Every entry was settled; a producer recreated during a resend left
            // nothing ambiguous behind.
            self.auditor.unsettled = None;
        }
        self.update_wal_metrics();
    }

    /// After a failed publication: a consumer whose static member was fenced (or that
    /// has a fatal error) can never publish again; every further attempt would be
    /// refused until it is recreated, which the consume loop does once it sees the
    /// flag (without it: up to two minutes of refused resends after a cluster outage,
    /// until librdkafka's own fatal error came).
    fn note_publish_failure<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        err: &PublishError,
    ) {
        let fatal = consumer.client().fatal_error();
        if (err.member_fenced() || fatal.is_some()) && !self.unusable.swap(true, Ordering::SeqCst) {
            tracing::error!(
                error = %err,
                fatal = ?fatal,
                "publication refused: this consumer's group membership was fenced; \
                 recreating the consumer (pending WAL entries go through the restart rule)"
            );
        }
    }

    /// Whether a publication found the consumer unusable (see
    /// [`Shell::note_publish_failure`]); shared with the consume loop.
    pub(crate) fn consumer_unusable(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.unusable)
    }

    /// A producer replaced during a publication (fenced or broken) may have committed
    /// or not: only the committed offsets can tell, so the pending entries wait for
    /// the restart rule.
    fn note_replaced_producer(&mut self) {
        if self.publisher.take_replaced() && self.wal.pending_count() > 0 {
            self.auditor.unsettled = Some(Origin::AmbiguousThisSession);
        }
    }

    /// Drops the per-partition lag series of `partitions` given up, so /metrics does
    /// not keep reporting partitions another instance now owns.
    fn forget(&mut self, partitions: Vec<TopicPartition>) {
        for TopicPartition { topic, partition } in partitions {
            self.metrics
                .partition_lag
                .remove(&PartitionLabel { topic, partition });
        }
        self.metrics.assigned_partitions.set(0);
    }

    fn discard(&mut self, id: u64) {
        self.metrics.discarded_entries.inc();
        if let Err(e) = self.wal.discard(id) {
            self.metrics.emit(
                ServiceError::Wal,
                &e,
                format_args!("cannot mark WAL entry {id} discarded"),
            );
        }
    }

    pub(crate) fn on_assign<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
        partitions: &[TopicPartition],
    ) {
        self.auditor.assign(partitions);
        self.metrics
            .assigned_partitions
            .set(self.auditor.assigned().len() as i64);
        // Entries of an earlier session (a previous incarnation, a lost or failed
        // consumer) are settled before consumption of these partitions starts: a
        // resend commits their end offsets, which the assignment then starts from;
        // anything else is discarded and recounted.
        if self.wal.pending_count() > 0 {
            self.reconcile(consumer, Origin::EarlierSession);
        }
        let now = now_ms();
        let committed = self.read_committed(consumer, partitions);
        self.alert_missing_offsets(&committed);
        self.auditor.start_reading(partitions, &committed, now);
    }

    /// An assigned partition without a committed offset although this instance saw
    /// one before: the group's offsets expired or were deleted, and the partition is
    /// about to be counted again from `auto.offset.reset`. Alert (metric and log).
    fn alert_missing_offsets(&mut self, committed: &HashMap<TopicPartition, Committed>) {
        for (TopicPartition { topic, partition }, c) in committed {
            if *c == Committed::None && self.offsets_seen.contains(topic, *partition) {
                self.metrics.committed_offsets_missing.inc();
                tracing::error!(
                    %topic,
                    partition,
                    group = %self.cfg.audit.group_id,
                    "no committed offset although one existed before: the group's offsets expired \
                     (offsets.retention.minutes) or were deleted; the partition is read again from \
                     auto.offset.reset and its retained messages are counted twice (see README, Operations)"
                );
            }
        }
        self.offsets_seen
            .insert_all(committed.iter().filter_map(|(tp, c)| {
                matches!(c, Committed::At(_)).then_some((tp.topic.as_str(), tp.partition))
            }));
    }

    /// After the consumer was lost: nothing counted since the last report can be
    /// committed any more.
    pub(crate) fn reset_after_consumer_loss(&mut self) {
        let _ = self.counting.drain(now_ms());
        let gone = self.auditor.consumer_lost(self.wal.pending_count() > 0);
        self.forget(gone);
        self.metrics.paused.set(0);
        // The next consumer is a new member.
        self.unusable.store(false, Ordering::SeqCst);
    }

    pub(crate) fn on_revoke<C: ConsumerContext>(&mut self, consumer: &BaseConsumer<C>, lost: bool) {
        if !lost {
            let deadline = Instant::now() + self.cfg.audit.revoke_timeout;
            self.update_positions(consumer);
            if let Err(e) = self.write_report(Reason::Revoke) {
                self.metrics.emit(
                    ServiceError::Wal,
                    &e,
                    format_args!("cannot write the revoke report"),
                );
            }
            while !self.publish_pending(consumer)
                && Instant::now() < deadline
                && self.auditor.unsettled.is_none()
                && !self.unusable.load(Ordering::SeqCst)
            {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        // What could not be published now never will be by us: the next owner counts
        // these partitions again from their committed offsets.
        let left = self.wal.pending_ids();
        if !left.is_empty() || lost {
            // The in-memory counts of a lost assignment are void too.
            let _ = self.counting.drain(now_ms());
            for id in left {
                tracing::warn!(id, "discarding unpublished WAL entry at revoke");
                self.discard(id);
            }
        }
        let gone = self.auditor.revoke(lost);
        self.forget(gone);
        self.update_wal_metrics();
    }

    /// Publishes pending entries in order until one fails. Returns true when none is
    /// left.
    pub(crate) fn publish_pending<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
    ) -> bool {
        if self.auditor.unsettled.is_some() {
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
            let sent = self.publisher.publish(consumer, &entry);
            self.note_replaced_producer();
            match sent {
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
                    self.note_publish_failure(consumer, &e);
                    self.update_wal_metrics();
                    return false;
                }
            }
        }
        self.update_wal_metrics();
        true
    }

    /// Records the consumer's position of every assigned partition (see
    /// `Auditor::set_positions`).
    pub(crate) fn update_positions<C: ConsumerContext>(&mut self, consumer: &BaseConsumer<C>) {
        let Ok(tpl) = consumer.position() else {
            return;
        };
        self.auditor.set_positions(tpl.elements().iter().map(|el| {
            let position = match el.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            };
            (el.topic(), el.partition(), position)
        }));
    }

    /// Drains the counts into a WAL entry (fsynced) and advances every partition's
    /// range start to the entry's end. Returns false when there was nothing to write.
    pub(crate) fn write_report(&mut self, reason: Reason) -> anyhow::Result<bool> {
        let now = now_ms();
        let (mut messages, positions) = self.counting.drain(now);
        if !self.cfg.audit.replicators.is_empty() {
            messages.extend(
                self.replication
                    .report(&self.cfg, &self.auditor, now, &self.metrics),
            );
        }
        let stuck = self.wal.pending_count() > 0;
        let draft = self.auditor.draft(messages, positions, now, reason, stuck);
        for (TopicPartition { topic, partition }, lag) in &draft.lags {
            self.metrics
                .partition_lag
                .get_or_create(&PartitionLabel {
                    topic: topic.clone(),
                    partition: *partition,
                })
                .set(*lag);
        }
        self.metrics
            .reports
            .get_or_create(&KindLabel {
                kind: reason.as_str().into(),
            })
            .inc();
        if !draft.write {
            return Ok(false);
        }
        let wal_messages = draft
            .messages
            .iter()
            .map(|m| WalMessage {
                key: m.topic.clone(),
                payload: m.to_json(),
            })
            .collect();
        let id = self
            .wal
            .append(draft.ranges.clone(), wal_messages)
            .context("cannot write report to the WAL")?;
        tracing::debug!(
            id,
            reason = reason.as_str(),
            messages = draft.messages.len(),
            ranges = draft.ranges.len(),
            "report written to WAL"
        );
        self.auditor.written(&draft);
        self.update_wal_metrics();
        Ok(true)
    }

    /// After a report whose WAL entry could not be written: reads every partition it
    /// covered again (`Auditor::rewind`). False when a position cannot be reset: the
    /// caller then recreates the consumer, which restarts from the committed offsets.
    pub(crate) fn rewind_unreported<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
    ) -> bool {
        let Some(seeks) = self.auditor.rewind() else {
            return false;
        };
        let timeout = self.cfg.audit.publish_timeout;
        for r in seeks {
            let to = r.to.map_or(Offset::Beginning, Offset::Offset);
            if let Err(e) = consumer.seek(&r.topic, r.partition, to, timeout) {
                tracing::warn!(topic = %r.topic, partition = r.partition, offset = ?to, error = %e, "cannot seek back");
                return false;
            }
        }
        true
    }

    pub(crate) fn update_wal_metrics(&self) {
        self.metrics
            .wal_pending_entries
            .set(self.wal.pending_count() as i64);
        self.metrics
            .wal_pending_bytes
            .set(self.wal.pending_bytes() as i64);
        self.metrics
            .wal_disk_bytes
            .set(self.wal.disk_bytes() as i64);
    }
}
