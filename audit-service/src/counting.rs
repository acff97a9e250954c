//! The bridge from rdkafka messages to audit-lib's aggregator.

use audit_lib::{
    Aggregator, AuditMessage, Classification, Identity, Limits, Observation, RecordTimestamp,
    TimestampType,
};
use prometheus_client::metrics::counter::Counter;
use rdkafka::message::{BorrowedMessage, Message, Timestamp};

use crate::config::Config;
use crate::metrics::{KindLabel, Metrics};
use crate::service::KafkaHeaders;

pub(crate) struct Counting {
    aggregator: Aggregator,
    /// event_time, no_time, malformed, out_of_bounds: resolved once, so the hot path
    /// is one atomic add.
    classes: [Counter; 4],
    unflushed: [u64; 4],
}

impl Counting {
    pub(crate) fn new(
        cfg: &Config,
        identity: Identity,
        metrics: &Metrics,
    ) -> anyhow::Result<Counting> {
        let limits = Limits {
            track_offsets: cfg.audit.track_offsets,
            max_open_windows: cfg.audit.max_windows_per_report.max(1),
        };
        let aggregator = Aggregator::new(identity, cfg.audit.event_time.clone(), limits)
            .map_err(|e| anyhow::anyhow!("audit.event_time: {e}"))?;
        let c = |k: &str| {
            metrics
                .classified
                .get_or_create(&KindLabel {
                    kind: k.to_string(),
                })
                .clone()
        };
        Ok(Counting {
            aggregator,
            classes: [
                c("event_time"),
                c("no_time"),
                c("malformed"),
                c("out_of_bounds"),
            ],
            unflushed: [0; 4],
        })
    }

    /// Counts one message; returns its key + value bytes.
    #[inline]
    pub(crate) fn record(
        &mut self,
        m: &BorrowedMessage<'_>,
        topic: &str,
        timestamp: Timestamp,
        observed_at_ms: i64,
    ) -> u64 {
        let record_timestamp = match timestamp {
            Timestamp::CreateTime(ms) if ms >= 0 => Some(RecordTimestamp {
                ms,
                kind: TimestampType::CreateTime,
            }),
            Timestamp::LogAppendTime(ms) if ms >= 0 => Some(RecordTimestamp {
                ms,
                kind: TimestampType::LogAppendTime,
            }),
            _ => None,
        };
        let headers = KafkaHeaders(m);
        let obs = Observation {
            topic,
            partition: m.partition(),
            offset: m.offset(),
            key: m.key(),
            value: m.payload(),
            headers: &headers,
            record_timestamp,
            observed_at_ms,
        };
        let class = self.aggregator.record(&obs);
        let i = match class {
            Classification::EventTime { .. } => 0,
            Classification::NoTime => 1,
            Classification::Malformed(_) => 2,
            Classification::OutOfBounds { .. } => 3,
        };
        self.unflushed[i] += 1;
        obs.byte_len()
    }

    pub(crate) fn flush_metrics(&mut self) {
        for (c, n) in self.classes.iter().zip(self.unflushed.iter_mut()) {
            if *n > 0 {
                c.inc_by(*n);
                *n = 0;
            }
        }
    }

    /// Window statistics held in memory (open, or evicted and waiting for the drain).
    pub(crate) fn windows(&self) -> usize {
        self.aggregator.open_windows() + self.aggregator.pending_windows()
    }

    pub(crate) fn drain(&mut self, now_ms: i64) -> Vec<AuditMessage> {
        self.aggregator.drain(now_ms)
    }
}
