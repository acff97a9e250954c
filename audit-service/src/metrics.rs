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
    pub paused: Gauge,
    pub assigned_partitions: Gauge,
    /// Revoke callbacks that waited for a publication in flight.
    pub revoke_waits: Counter,
    /// Assigned partitions without a committed offset although one existed before.
    pub committed_offsets_missing: Counter,
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
            paused: Gauge::default(),
            assigned_partitions: Gauge::default(),
            revoke_waits: Counter::default(),
            committed_offsets_missing: Counter::default(),
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
        m
    }

    pub(crate) fn restart_decision(
        &self,
        origin: crate::restart::Origin,
        decision: crate::restart::Decision,
    ) {
        use crate::restart::{Decision, Origin};
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

    pub fn error(&self, kind: &str) {
        self.errors
            .get_or_create(&KindLabel {
                kind: kind.to_string(),
            })
            .inc();
    }
}
