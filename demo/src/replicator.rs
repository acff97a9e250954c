//! The demo's faulty hop: copies the topics of the regional cluster to the aggregate
//! cluster, like MirrorMaker would, and injects faults on purpose so that the
//! detection has something to find. Faults target chosen windows (by event time) so
//! that the result can be checked window by window: every injection is recorded.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::Rng;
use common::now_ms;

/// Which faults to inject, where. A fault applies to the windows whose index modulo
/// `period` equals its `phase`, so faulty and clean windows alternate predictably.
#[derive(Clone, Debug)]
pub struct Faults {
    pub loss_topic: String,
    pub loss_ratio: f64,
    pub loss_phase: i64,
    pub duplication_topic: String,
    pub duplication_ratio: f64,
    pub duplication_phase: i64,
    pub period: i64,
    /// Every message of this topic is held back this long before it is forwarded.
    pub delay_topic: String,
    pub delay: Duration,
}

pub struct ReplicatorConfig {
    pub source: String,
    pub target: String,
    pub topics: Vec<String>,
    pub window_ms: i64,
    pub faults: Faults,
    /// Where the record of injected faults is written (JSON), if anywhere.
    pub injections_file: Option<PathBuf>,
}

/// What was done to one (topic, window), as written to the injections file.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Injected {
    pub topic: String,
    pub window_start: i64,
    pub forwarded: u64,
    pub dropped: u64,
    pub duplicated: u64,
    pub delayed: u64,
}

pub type Injections = Arc<Mutex<BTreeMap<(String, i64), Injected>>>;

#[derive(serde::Deserialize)]
struct EventTime {
    ts: i64,
}

enum Action {
    Forward,
    Drop,
    Duplicate,
    Delay,
}

impl Faults {
    fn decide(&self, topic: &str, window_index: i64, rng: &mut Rng) -> Action {
        let phase = window_index.rem_euclid(self.period.max(1));
        if topic == self.loss_topic && phase == self.loss_phase && rng.chance(self.loss_ratio) {
            Action::Drop
        } else if topic == self.duplication_topic
            && phase == self.duplication_phase
            && rng.chance(self.duplication_ratio)
        {
            Action::Duplicate
        } else if topic == self.delay_topic && !self.delay.is_zero() {
            Action::Delay
        } else {
            Action::Forward
        }
    }
}

struct Held {
    due: Instant,
    topic: String,
    key: Option<Vec<u8>>,
    payload: Option<Vec<u8>>,
}

/// Runs on a blocking thread until `shutdown`: librdkafka's consumer poll blocks.
pub fn run(
    cfg: ReplicatorConfig,
    injections: Injections,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &cfg.source)
        .set("group.id", "kafka-audit-demo-replicator")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "true")
        .create()
        .context("demo replicator: consumer")?;
    let topics: Vec<&str> = cfg.topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&topics)
        .context("demo replicator: subscribe")?;
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &cfg.target)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("compression.type", "lz4")
        .create()
        .context("demo replicator: producer")?;

    let mut rng = Rng::seeded();
    let mut held: VecDeque<Held> = VecDeque::new();
    let mut last_write = Instant::now();
    let forward = |topic: &str, key: Option<&[u8]>, payload: Option<&[u8]>| -> anyhow::Result<()> {
        let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic);
        if let Some(k) = key {
            record = record.key(k);
        }
        if let Some(p) = payload {
            record = record.payload(p);
        }
        loop {
            match producer.send(record) {
                Ok(()) => return Ok(()),
                Err((
                    rdkafka::error::KafkaError::MessageProduction(
                        rdkafka::types::RDKafkaErrorCode::QueueFull,
                    ),
                    r,
                )) => {
                    record = r;
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => anyhow::bail!("demo replicator: produce to {topic}: {e}"),
            }
        }
    };
    while !shutdown.is_cancelled() {
        while held.front().is_some_and(|h| h.due <= Instant::now()) {
            let h = held.pop_front().expect("front checked");
            forward(&h.topic, h.key.as_deref(), h.payload.as_deref())?;
        }
        if last_write.elapsed() >= Duration::from_secs(1) {
            write_injections(&cfg, &injections);
            last_write = Instant::now();
        }
        let Some(result) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let m = match result {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "demo replicator: consume error");
                continue;
            }
        };
        let topic = m.topic().to_string();
        let ts = m
            .payload()
            .and_then(|p| serde_json::from_slice::<EventTime>(p).ok())
            .map_or_else(now_ms, |e| e.ts);
        let index = ts.div_euclid(cfg.window_ms);
        let action = cfg.faults.decide(&topic, index, &mut rng);
        {
            let mut inj = injections.lock().expect("injections lock poisoned");
            let entry = inj
                .entry((topic.clone(), index * cfg.window_ms))
                .or_insert_with(|| Injected {
                    topic: topic.clone(),
                    window_start: index * cfg.window_ms,
                    ..Injected::default()
                });
            match action {
                Action::Forward => entry.forwarded += 1,
                Action::Drop => entry.dropped += 1,
                Action::Duplicate => entry.duplicated += 1,
                Action::Delay => entry.delayed += 1,
            }
        }
        match action {
            Action::Drop => {}
            Action::Forward => forward(&topic, m.key(), m.payload())?,
            Action::Duplicate => {
                forward(&topic, m.key(), m.payload())?;
                forward(&topic, m.key(), m.payload())?;
            }
            Action::Delay => held.push_back(Held {
                due: Instant::now() + cfg.faults.delay,
                topic,
                key: m.key().map(<[u8]>::to_vec),
                payload: m.payload().map(<[u8]>::to_vec),
            }),
        }
    }
    // What is held back is still forwarded: the delay fault must not turn into loss.
    for h in held.drain(..) {
        forward(&h.topic, h.key.as_deref(), h.payload.as_deref())?;
    }
    let _ = producer.flush(Duration::from_secs(10));
    write_injections(&cfg, &injections);
    Ok(())
}

fn write_injections(cfg: &ReplicatorConfig, injections: &Injections) {
    let Some(path) = &cfg.injections_file else {
        return;
    };
    let list: Vec<Injected> = injections
        .lock()
        .expect("injections lock poisoned")
        .values()
        .cloned()
        .collect();
    let tmp = path.with_extension("tmp");
    let result = serde_json::to_vec_pretty(&list)
        .map_err(std::io::Error::other)
        .and_then(|json| std::fs::write(&tmp, json))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = result {
        tracing::warn!(file = %path.display(), error = %e, "demo replicator: cannot write the injections file");
    }
}
