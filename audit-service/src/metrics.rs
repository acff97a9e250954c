//! Prometheus metrics of the audit service (served by common's ops server).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabel {
    pub topic: String,
    pub partition: i32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RestartLabel {
    /// `earlier_session` or `ambiguous_this_session`.
    pub origin: String,
    /// `already_published`, `resend`, `discard` or `keep`.
    pub decision: String,
}

#[derive(Clone)]
pub struct Metrics {
    /// Pending WAL entries by the restart rule's origin and decision.
    pub restart_decisions: Family<RestartLabel, Counter>,
    pub consumed_messages: Counter,
    pub consumed_bytes: Counter,
    /// Messages by how their event time was found (`event_time`, `no_time`,
    /// `malformed`, `out_of_bounds`).
    pub classified: Family<KindLabel, Counter>,
    pub partition_lag: Family<PartitionLabel, Gauge>,
    pub wal_pending_entries: Gauge,
    pub wal_pending_bytes: Gauge,
    pub wal_disk_bytes: Gauge,
    pub publish_latency: Histogram,
    pub published_entries: Counter,
    pub published_messages: Counter,
    pub discarded_entries: Counter,
    pub reports: Family<KindLabel, Counter>,
    pub errors: Family<KindLabel, Counter>,
    /// One log line per error kind and second: the counter counts every one.
    log_every: std::sync::Arc<common::LogEvery>,
    pub paused: Gauge,
    pub assigned_partitions: Gauge,
    /// Revoke callbacks that waited for a publication in flight.
    pub revoke_waits: Counter,
    /// Assigned partitions without a committed offset although one existed before.
    pub committed_offsets_missing: Counter,
    /// Record headers left out because their name is not UTF-8 (the record is counted;
    /// event-time rules see the header as absent).
    pub unreadable_headers: Counter,
    pub watermark_ignored_times: Counter,
    /// Records of a MirrorMaker 2 offset-syncs topic that are not offset syncs (issue
    /// 28): left out, never evidence.
    pub replication_evidence_rejected: Counter,
    /// Replication evidence dropped or refused, by reason
    /// (`replication::DropReason`).
    pub replication_evidence_dropped: Family<ReasonLabel, Counter>,
}

impl Metrics {
    pub fn new(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            restart_decisions: Family::default(),
            consumed_messages: Counter::default(),
            consumed_bytes: Counter::default(),
            classified: Family::default(),
            partition_lag: Family::default(),
            wal_pending_entries: Gauge::default(),
            wal_pending_bytes: Gauge::default(),
            wal_disk_bytes: Gauge::default(),
            publish_latency: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            published_entries: Counter::default(),
            published_messages: Counter::default(),
            discarded_entries: Counter::default(),
            reports: Family::default(),
            errors: Family::default(),
            log_every: std::sync::Arc::new(common::LogEvery::new(std::time::Duration::from_secs(
                1,
            ))),
            paused: Gauge::default(),
            assigned_partitions: Gauge::default(),
            revoke_waits: Counter::default(),
            committed_offsets_missing: Counter::default(),
            unreadable_headers: Counter::default(),
            watermark_ignored_times: Counter::default(),
            replication_evidence_rejected: Counter::default(),
            replication_evidence_dropped: Family::default(),
        };
        let r = registry.sub_registry_with_prefix("kafka_audit");
        r.register(
            "consumed_messages",
            "Messages consumed from audited topics",
            m.consumed_messages.clone(),
        );
        r.register(
            "consumed_bytes",
            "Key + value bytes consumed from audited topics",
            m.consumed_bytes.clone(),
        );
        r.register(
            "classified_messages",
            "Messages by event-time classification",
            m.classified.clone(),
        );
        r.register(
            "partition_lag",
            "High watermark minus the consumer position (past transaction markers), per partition",
            m.partition_lag.clone(),
        );
        r.register(
            "wal_pending_entries",
            "WAL entries not yet published",
            m.wal_pending_entries.clone(),
        );
        r.register(
            "wal_pending_bytes",
            "Bytes of WAL entries not yet published",
            m.wal_pending_bytes.clone(),
        );
        r.register(
            "wal_disk_bytes",
            "Bytes of WAL segment files",
            m.wal_disk_bytes.clone(),
        );
        r.register(
            "publish_latency_seconds",
            "Time to publish one WAL entry",
            m.publish_latency.clone(),
        );
        r.register(
            "published_entries",
            "WAL entries published",
            m.published_entries.clone(),
        );
        r.register(
            "published_messages",
            "Audit messages published",
            m.published_messages.clone(),
        );
        r.register(
            "discarded_entries",
            "WAL entries discarded by the restart rule",
            m.discarded_entries.clone(),
        );
        r.register(
            "reports",
            "Reports by reason (interval, revoke, shutdown)",
            m.reports.clone(),
        );
        r.register("errors", "Errors by kind", m.errors.clone());
        r.register(
            "committed_offsets_missing",
            "Assigned partitions without a committed offset although this instance saw one before (expired or deleted group offsets: the partition is counted again)",
            m.committed_offsets_missing.clone(),
        );
        r.register(
            "revoke_waits",
            "Revoke callbacks that waited for a publication in flight on the publishing thread",
            m.revoke_waits.clone(),
        );
        r.register(
            "restart_decisions",
            "Pending WAL entries settled by the restart rule, by origin and decision",
            m.restart_decisions.clone(),
        );
        r.register(
            "paused",
            "1 while consumption is paused because the WAL is full",
            m.paused.clone(),
        );
        r.register(
            "assigned_partitions",
            "Partitions assigned to this instance",
            m.assigned_partitions.clone(),
        );
        r.register(
            "unreadable_headers",
            "Record headers ignored because their name is not UTF-8 (the record is still counted; an event-time rule reading headers sees the header as absent)",
            m.unreadable_headers.clone(),
        );
        r.register(
            "watermark_ignored_times",
            "Record timestamps left out of the partition watermark because they lie outside the topic's skew bounds (max_future / max_past); the record is still counted",
            m.watermark_ignored_times.clone(),
        );
        r.register(
            "replication_evidence_rejected",
            "Records of a MirrorMaker 2 offset-syncs topic that are not offset syncs, left out of the replication evidence",
            m.replication_evidence_rejected.clone(),
        );
        r.register(
            "replication_evidence_dropped",
            "Replication evidence dropped by the auditor, by reason: position_backwards (a lower position replaced the ones before it: the replicator started again), past_log_end (past the log end measured after it was read), log_start_backwards (the topic was recreated: its evidence dropped), topic_name_too_long, not_audited, over_limit (memory bound)",
            m.replication_evidence_dropped.clone(),
        );
        m
    }

    /// Counts replication evidence dropped for `reason` (a
    /// `replication::DropReason` label). Some(held_back): log it now — at most one
    /// line per reason and second (a flood of made-up syncs logs its first; the next
    /// line says how many were held back).
    pub(crate) fn evidence_dropped(&self, reason: &'static str) -> Option<u64> {
        self.replication_evidence_dropped
            .get_or_create(&ReasonLabel {
                reason: reason.into(),
            })
            .inc();
        self.log_every.check(reason)
    }

    pub(crate) fn restart_decision(
        &self,
        origin: crate::auditor::Origin,
        decision: crate::auditor::Decision,
    ) {
        use crate::auditor::{Decision, Origin};
        let origin = match origin {
            Origin::EarlierSession => "earlier_session",
            Origin::AmbiguousThisSession => "ambiguous_this_session",
        };
        let decision = match decision {
            Decision::AlreadyPublished => "already_published",
            Decision::Resend => "resend",
            Decision::Discard => "discard",
            Decision::Keep => "keep",
        };
        self.restart_decisions
            .get_or_create(&RestartLabel {
                origin: origin.into(),
                decision: decision.into(),
            })
            .inc();
    }

    /// Counts `kind` in `kafka_audit_errors_total` and logs `message` with its `error`
    /// at the kind's level, in one call (vector's `emit!`): an error that is counted is
    /// logged, and one that is logged this way is counted. At most one line per kind
    /// and second: a burst (a broker's death fails the fetches of all its partitions
    /// at once) logs its first, and the next line says how many were `held_back`.
    pub fn emit(
        &self,
        kind: ServiceError,
        error: &dyn std::fmt::Display,
        message: std::fmt::Arguments<'_>,
    ) {
        self.errors
            .get_or_create(&KindLabel {
                kind: kind.as_str().to_string(),
            })
            .inc();
        let Some(held_back) = self.log_every.check(kind.as_str()) else {
            return;
        };
        // `{:#}`: an anyhow error with its chain of causes.
        let error = format!("{error:#}");
        if kind.recovers_by_itself() {
            tracing::warn!(kind = kind.as_str(), error, held_back, "{message}");
        } else {
            tracing::error!(kind = kind.as_str(), error, held_back, "{message}");
        }
    }
}

/// The auditor's errors by kind: the `kind` label of `kafka_audit_errors_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServiceError {
    /// Writing the WAL failed: a report, or marking an entry published or discarded.
    Wal,
    /// A pending WAL entry could not be read back for publishing.
    WalRead,
    /// A transaction publishing a WAL entry failed; it is retried.
    Publish,
    /// The group's committed offsets could not be read (the restart rule waits).
    CommittedOffsets,
    /// librdkafka reported a rebalance error; the assignment is treated as lost.
    Rebalance,
    /// The consumer returned an error.
    Consume,
    /// The transactional producer was replaced after a fatal or unabortable error.
    ProducerRecreated,
    /// Opening the WAL cut off a damaged tail.
    WalTruncated,
    /// A replicator's progress could not be read: its evidence goes stale,
    /// windows wait for the grace period as without it.
    ReplicationEvidence,
}

impl ServiceError {
    pub const ALL: [ServiceError; 9] = [
        ServiceError::Wal,
        ServiceError::WalRead,
        ServiceError::Publish,
        ServiceError::CommittedOffsets,
        ServiceError::Rebalance,
        ServiceError::Consume,
        ServiceError::ProducerRecreated,
        ServiceError::WalTruncated,
        ServiceError::ReplicationEvidence,
    ];

    /// The label value. The Prometheus rules (deploy/prometheus) match these: never
    /// rename one.
    pub const fn as_str(self) -> &'static str {
        match self {
            ServiceError::Wal => "wal",
            ServiceError::WalRead => "wal_read",
            ServiceError::Publish => "publish",
            ServiceError::CommittedOffsets => "committed_offsets",
            ServiceError::Rebalance => "rebalance",
            ServiceError::Consume => "consume",
            ServiceError::ProducerRecreated => "producer_recreated",
            ServiceError::WalTruncated => "wal_truncated",
            ServiceError::ReplicationEvidence => "replication_evidence",
        }
    }

    /// Logged as a warning: retried or recounted without anyone's help. The others
    /// (the WAL, a rebalance error) are errors.
    fn recovers_by_itself(self) -> bool {
        matches!(
            self,
            ServiceError::Publish
                | ServiceError::CommittedOffsets
                | ServiceError::Consume
                | ServiceError::ProducerRecreated
                | ServiceError::WalTruncated
                | ServiceError::ReplicationEvidence
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `kind` label values are an interface: deploy/prometheus/alerts.yml and
    /// dashboards match them. A renamed variant must not rename its label.
    #[test]
    fn error_kind_labels_are_stable() {
        let labels: Vec<&str> = ServiceError::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            labels,
            [
                "wal",
                "wal_read",
                "publish",
                "committed_offsets",
                "rebalance",
                "consume",
                "producer_recreated",
                "wal_truncated",
                "replication_evidence"
            ]
        );
    }

    /// One `emit` counts the kind under its label (and logs it).
    #[test]
    fn emit_counts_under_the_kind_label() {
        let mut registry = Registry::default();
        let m = Metrics::new(&mut registry);
        m.emit(
            ServiceError::Wal,
            &"disk full",
            format_args!("cannot write report"),
        );
        m.emit(
            ServiceError::Wal,
            &"disk full",
            format_args!("cannot write report"),
        );
        m.emit(
            ServiceError::CommittedOffsets,
            &"timed out",
            format_args!("cannot read committed offsets"),
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("kafka_audit_errors_total{kind=\"wal\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("kafka_audit_errors_total{kind=\"committed_offsets\"} 1"),
            "{text}"
        );
    }
}
