//! The producer tier of the demo: a traffic generator that embeds audit-lib, as a
//! real producer would. Every message whose delivery the cluster acknowledged is
//! counted (never one that failed), and the increments go to the cluster's audit topic.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use audit_lib::{Aggregator, Identity};
use rdkafka::config::ClientConfig;
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;
use tokio_util::sync::CancellationToken;

use super::Rng;
use common::now_ms;

pub struct TrafficConfig {
    pub bootstrap: String,
    pub topics: Vec<String>,
    pub audit_topic: String,
    /// Messages per second over all topics.
    pub rate: u32,
    /// Fraction of messages whose event time lies in the past by up to `max_lateness`.
    pub late_fraction: f64,
    pub max_lateness: Duration,
    pub report_interval: Duration,
    pub identity: Identity,
    pub event_time: audit_lib::EventTimeConfig,
}

/// Counts what the cluster acknowledged.
struct CountingContext {
    aggregator: Arc<Mutex<Aggregator>>,
    failed: Arc<std::sync::atomic::AtomicU64>,
}

impl ClientContext for CountingContext {}

impl ProducerContext for CountingContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(m) => {
                let obs = audit_service::counting::observation_without_headers(m, now_ms());
                self.aggregator
                    .lock()
                    .expect("aggregator lock poisoned")
                    .record(&obs);
            }
            Err((e, m)) => {
                // Not delivered, so not counted: the producer tier reports what it
                // actually handed to Kafka.
                self.failed
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(topic = m.topic(), error = %e, "demo traffic: delivery failed");
            }
        }
    }
}

/// One JSON event, about 100 bytes, with its event time in `ts` (milliseconds).
pub fn event(ts: i64, id: u64, rng: &mut Rng) -> (String, String) {
    let user = rng.below(5_000);
    let key = format!("user-{user}");
    let payload = format!(
        r#"{{"ts":{ts},"id":{id},"user":"{key}","amount":{}.{:02},"country":"{}"}}"#,
        rng.below(500),
        rng.below(100),
        ["DE", "US", "BR", "IN", "JP"][rng.below(5) as usize]
    );
    (key, payload)
}

pub async fn run(cfg: TrafficConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    let aggregator = Arc::new(Mutex::new(
        Aggregator::new(
            cfg.identity.clone(),
            cfg.event_time.clone(),
            audit_lib::Limits::default(),
        )
        .context("demo traffic: event-time config")?,
    ));
    let failed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let producer: ThreadedProducer<CountingContext> = ClientConfig::new()
        .set("bootstrap.servers", &cfg.bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("compression.type", "lz4")
        .create_with_context(CountingContext {
            aggregator: aggregator.clone(),
            failed: failed.clone(),
        })
        .context("demo traffic: producer")?;
    let reporter: ThreadedProducer<rdkafka::producer::DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &cfg.bootstrap)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .create()
        .context("demo traffic: audit producer")?;

    let mut rng = Rng::seeded();
    let tick = Duration::from_millis(20);
    let per_tick = (cfg.rate as f64 * tick.as_secs_f64()).max(1.0);
    let mut carry = 0.0;
    let mut id = 0u64;
    let mut ticker = tokio::time::interval(tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut report = tokio::time::interval(cfg.report_interval);
    report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let max_late_ms = cfg.max_lateness.as_millis() as i64;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = report.tick() => publish(&aggregator, &reporter, &cfg.audit_topic)?,
            _ = ticker.tick() => {
                carry += per_tick;
                let now = now_ms();
                while carry >= 1.0 {
                    carry -= 1.0;
                    id += 1;
                    let topic = &cfg.topics[rng.below(cfg.topics.len() as u64) as usize];
                    let ts = if rng.chance(cfg.late_fraction) {
                        now - rng.below(max_late_ms.max(1) as u64) as i64
                    } else {
                        now
                    };
                    let (key, payload) = event(ts, id, &mut rng);
                    let mut record = BaseRecord::to(topic).key(&key).payload(&payload);
                    loop {
                        match producer.send(record) {
                            Ok(()) => break,
                            // A full local queue is back-pressure: wait for deliveries.
                            Err((rdkafka::error::KafkaError::MessageProduction(
                                rdkafka::types::RDKafkaErrorCode::QueueFull,
                            ), r)) => {
                                record = r;
                                tokio::time::sleep(Duration::from_millis(5)).await;
                            }
                            Err((e, _)) => {
                                tracing::warn!(topic, error = %e, "demo traffic: not sent");
                                break;
                            }
                        }
                    }
                }
            }
        }
    }
    // Deliver what is in flight, count it, and report it before stopping.
    let _ = producer.flush(Duration::from_secs(10));
    publish(&aggregator, &reporter, &cfg.audit_topic)?;
    let _ = reporter.flush(Duration::from_secs(10));
    tracing::info!(
        messages = id,
        failed = failed.load(std::sync::atomic::Ordering::Relaxed),
        "demo traffic stopped"
    );
    Ok(())
}

fn publish(
    aggregator: &Mutex<Aggregator>,
    reporter: &ThreadedProducer<rdkafka::producer::DefaultProducerContext>,
    audit_topic: &str,
) -> anyhow::Result<()> {
    let messages = aggregator
        .lock()
        .expect("aggregator lock poisoned")
        .drain(now_ms());
    for m in messages {
        let json = m.to_json();
        let key = m.topic.clone();
        if let Err((e, _)) = reporter.send(BaseRecord::to(audit_topic).key(&key).payload(&json)) {
            anyhow::bail!("demo traffic: cannot publish an audit message to {audit_topic}: {e}");
        }
    }
    Ok(())
}
