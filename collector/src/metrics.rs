//! Prometheus metrics of the collector, served on `/metrics`.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum Outcome {
    Accepted,
    Duplicate,
    Rejected,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MessageLabels {
    /// `kafka:<source name>` or `http`
    pub source: String,
    pub outcome: Outcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: String,
}

/// Which bound refused a message (the label of `bound_rejects`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Bound {
    window_size,
    window_age,
    partition,
    record_bytes,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BoundLabels {
    pub bound: Bound,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RetentionLabels {
    pub table: String,
}

/// A configured token's name (or `anonymous` without tokens): configuration, so the
/// label set is bounded.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    pub token: String,
}

#[derive(Clone)]
pub struct Metrics {
    pub messages: Family<MessageLabels, Counter>,
    pub batches: Family<SourceLabels, Counter>,
    pub store_errors: Family<SourceLabels, Counter>,
    pub kafka_commit_errors: Family<SourceLabels, Counter>,
    pub kafka_errors: Family<SourceLabels, Counter>,
    pub write_seconds: Histogram,
    pub store_up: Gauge,
    pub retention_deleted: Family<RetentionLabels, Counter>,
    pub retention_errors: Counter,
    pub retention_partitions_dropped: Counter,
    pub partitions_created: Counter,
    pub partition_errors: Counter,
    pub rolled_up: Counter,
    pub rollup_missing_messages: Counter,
    pub rollup_errors: Counter,
    pub rollup_caught_up: Gauge,
    pub quarantined: Counter,
    pub bound_rejects: Family<BoundLabels, Counter>,
    pub evidence_rejects: Family<SourceLabels, Counter>,
    pub http_throttled: Family<TokenLabels, Counter>,
    pub http_busy: Counter,
    pub excerpts_dropped: Counter,
    pub batches_cut: Family<SourceLabels, Counter>,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            messages: Family::default(),
            batches: Family::default(),
            store_errors: Family::default(),
            kafka_commit_errors: Family::default(),
            kafka_errors: Family::default(),
            write_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            store_up: Gauge::default(),
            retention_deleted: Family::default(),
            retention_errors: Counter::default(),
            retention_partitions_dropped: Counter::default(),
            partitions_created: Counter::default(),
            partition_errors: Counter::default(),
            rolled_up: Counter::default(),
            rollup_missing_messages: Counter::default(),
            rollup_errors: Counter::default(),
            rollup_caught_up: Gauge::default(),
            quarantined: Counter::default(),
            bound_rejects: Family::default(),
            evidence_rejects: Family::default(),
            http_throttled: Family::default(),
            http_busy: Counter::default(),
            excerpts_dropped: Counter::default(),
            batches_cut: Family::default(),
        };
        let r = registry.sub_registry_with_prefix("kafka_audit_collector");
        r.register(
            "messages",
            "Audit messages by source and outcome (accepted: first seen and counted; duplicate: UUID already stored; rejected: failed validation, kept in audit_reject)",
            m.messages.clone(),
        );
        r.register(
            "batches",
            "Batches committed to the store",
            m.batches.clone(),
        );
        r.register(
            "store_errors",
            "Failed store transactions (retried)",
            m.store_errors.clone(),
        );
        r.register(
            "kafka_commit_errors",
            "Failed Kafka offset commits after a stored batch (the records are read again and deduplicated)",
            m.kafka_commit_errors.clone(),
        );
        r.register(
            "kafka_errors",
            "Errors reported by the Kafka consumer",
            m.kafka_errors.clone(),
        );
        r.register(
            "write_seconds",
            "Duration of one store transaction",
            m.write_seconds.clone(),
        );
        r.register(
            "store_up",
            "1 when the last store transaction succeeded",
            m.store_up.clone(),
        );
        r.register(
            "retention_deleted",
            "Rows deleted by retention",
            m.retention_deleted.clone(),
        );
        r.register(
            "retention_errors",
            "Failed retention passes and steps (each step fails alone; the others run)",
            m.retention_errors.clone(),
        );
        r.register(
            "retention_partitions_dropped",
            "Day partitions dropped by retention (PostgreSQL)",
            m.retention_partitions_dropped.clone(),
        );
        r.register(
            "partitions_created",
            "Day partitions created ahead (PostgreSQL)",
            m.partitions_created.clone(),
        );
        r.register(
            "partition_errors",
            "Failed attempts to create day partitions (PostgreSQL)",
            m.partition_errors.clone(),
        );
        r.register(
            "rolled_up",
            "Staged increments added to their window rows (PostgreSQL roll-up)",
            m.rolled_up.clone(),
        );
        r.register(
            "rollup_missing_messages",
            "Staged increments whose stored message the roll-up did not find: nothing added, each kept as a reject (source rollup) naming its key; should stay 0",
            m.rollup_missing_messages.clone(),
        );
        r.register(
            "rollup_errors",
            "Failed roll-up transactions (retried)",
            m.rollup_errors.clone(),
        );
        r.register(
            "rollup_caught_up",
            "1 when the last roll-up found the queue drained; 0 while window rows lag ingestion",
            m.rollup_caught_up.clone(),
        );
        r.register(
            "quarantined",
            "Messages the store refused for their data although they passed validation; kept as rejects (source ...:quarantine)",
            m.quarantined.clone(),
        );
        r.register(
            "bound_rejects",
            "Messages rejected by a bound per emitter (window_size, window_age, partition, record_bytes; see [ingest])",
            m.bound_rejects.clone(),
        );
        r.register(
            "evidence_rejects",
            "Replication evidence (replicator: tiers) refused by source because its sender is not bound to it: an HTTP token that does not name the tier (or no token), a Kafka record on a topic not in the source's evidence_topics; each kept in audit_reject with its reason",
            m.evidence_rejects.clone(),
        );
        r.register(
            "http_throttled",
            "Ingest requests answered 429 because the token posted more than http.token_requests_per_second or http.token_messages_per_second",
            m.http_throttled.clone(),
        );
        r.register(
            "http_busy",
            "Ingest requests answered 503 because http.max_inflight_body_bytes stayed full for request_timeout",
            m.http_busy.clone(),
        );
        r.register(
            "excerpts_dropped",
            "Rejects stored without their payload excerpt: the batch's excerpt budget was used up",
            m.excerpts_dropped.clone(),
        );
        r.register(
            "batches_cut",
            "Kafka batches ended early at batch.max_entries partition entries",
            m.batches_cut.clone(),
        );
        m
    }

    pub fn count(&self, source: &str, outcome: Outcome, n: usize) {
        if n > 0 {
            self.messages
                .get_or_create(&MessageLabels {
                    source: source.to_string(),
                    outcome,
                })
                .inc_by(n as u64);
        }
    }

    pub fn source(&self, family: &Family<SourceLabels, Counter>, source: &str) {
        family
            .get_or_create(&SourceLabels {
                source: source.to_string(),
            })
            .inc();
    }
}
