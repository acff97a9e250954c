//! Kafka sink (feature `kafka`): publishes each audit message to the audit topic,
//! keyed by the audited topic (so the collector scales by audit-topic partitions and
//! one topic's increments stay in order), with `acks=all` and idempotence.
//!
//! `send` blocks until every message of the batch is acknowledged or the delivery
//! timeout passes. Delivery results are counted in the delivery callback, because
//! librdkafka's `flush` returns Ok even when messages failed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;

use super::{Sink, SinkError};
use crate::message::AuditMessage;

#[derive(Default)]
struct Deliveries {
    ok: AtomicU64,
    failed: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
            }
        }
    }
}

pub struct KafkaSink {
    producer: BaseProducer<Deliveries>,
    topic: String,
    timeout: Duration,
}

impl KafkaSink {
    /// A sink publishing to `topic` through a producer built from `config` (any
    /// librdkafka property: `bootstrap.servers`, SASL/SSL, ...). `acks=all` and
    /// `enable.idempotence=true` are forced; `timeout` bounds one `send` and is also
    /// the producer's `message.timeout.ms`.
    pub fn new(
        mut config: ClientConfig,
        topic: impl Into<String>,
        timeout: Duration,
    ) -> Result<Self, SinkError> {
        config
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("message.timeout.ms", timeout.as_millis().max(1).to_string());
        let producer: BaseProducer<Deliveries> = config
            .create_with_context(Deliveries::default())
            .map_err(|e| SinkError::Rejected(format!("cannot create Kafka producer: {e}")))?;
        Ok(KafkaSink {
            producer,
            topic: topic.into(),
            timeout,
        })
    }

    /// Convenience: a sink for `bootstrap_servers` with default properties.
    pub fn with_brokers(
        bootstrap_servers: &str,
        topic: impl Into<String>,
        timeout: Duration,
    ) -> Result<Self, SinkError> {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", bootstrap_servers);
        Self::new(c, topic, timeout)
    }
}

fn classify_kafka_error(e: &KafkaError) -> SinkError {
    match e.rdkafka_error_code() {
        Some(RDKafkaErrorCode::MessageSizeTooLarge)
        | Some(RDKafkaErrorCode::TopicAuthorizationFailed)
        | Some(RDKafkaErrorCode::ClusterAuthorizationFailed)
        | Some(RDKafkaErrorCode::InvalidRecord) => SinkError::Rejected(e.to_string()),
        _ => SinkError::Unavailable(e.to_string()),
    }
}

impl Sink for KafkaSink {
    fn send(&mut self, batch: &[AuditMessage]) -> Result<(), SinkError> {
        let ctx = self.producer.context();
        let ok0 = ctx.ok.load(Ordering::Relaxed);
        let failed0 = ctx.failed.load(Ordering::Relaxed);
        let deadline = Instant::now() + self.timeout;
        for m in batch {
            let payload = m.to_json();
            loop {
                let record = BaseRecord::to(&self.topic).key(&m.topic).payload(&payload);
                match self.producer.send(record) {
                    Ok(()) => break,
                    // A full local queue is backpressure: serve callbacks and retry.
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                        if Instant::now() >= deadline {
                            return Err(SinkError::Unavailable(
                                "producer queue stayed full".into(),
                            ));
                        }
                        self.producer.poll(Duration::from_millis(10));
                    }
                    Err((e, _)) => return Err(classify_kafka_error(&e)),
                }
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let flushed = self.producer.flush(left);
        let ok = ctx.ok.load(Ordering::Relaxed) - ok0;
        let failed = ctx.failed.load(Ordering::Relaxed) - failed0;
        if failed > 0 || ok < batch.len() as u64 {
            let why = ctx
                .last_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
                .or_else(|| flushed.err().map(|e| e.to_string()))
                .unwrap_or_else(|| "delivery not confirmed in time".into());
            return Err(SinkError::Unavailable(format!(
                "{failed} of {} audit messages to {} failed, {ok} confirmed: {why}",
                batch.len(),
                self.topic
            )));
        }
        Ok(())
    }
}
