//! The application's side of the bench: its producer (the same on both sides) with a
//! delivery-latency histogram, and the topics it writes to, created and deleted with
//! the admin client.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;

/// The bench's error type.
pub type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Latency histogram: 10 µs buckets up to 2 s.
const BUCKET_US: u64 = 10;
const BUCKETS: usize = 200_000;

/// The admin client's futures, run on this thread (audit-lib has no async runtime).
fn block_on<F: Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(Duration::from_millis(50));
    }
}

pub fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> Res<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let res = block_on(admin.create_topics(
        &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(60))),
    ))?;
    for r in res {
        r.map_err(|(t, e)| format!("create topic {t}: {e}"))?;
    }
    Ok(())
}

pub fn delete_topics(bootstrap: &str, topics: &[&str]) {
    let Ok(admin) = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create::<AdminClient<DefaultClientContext>>()
    else {
        return;
    };
    let _ = block_on(admin.delete_topics(topics, &AdminOptions::new()));
}

/// Delivery reports: counts and a latency histogram (send → report).
pub struct Deliveries {
    t0: Instant,
    ok: AtomicU64,
    pub failed: AtomicU64,
    hist: Vec<AtomicU64>,
}

impl Deliveries {
    fn new() -> Self {
        Deliveries {
            t0: Instant::now(),
            ok: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            hist: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn sent_at(&self) -> usize {
        self.t0.elapsed().as_micros() as usize
    }

    pub fn reset(&self) {
        for b in &self.hist {
            b.store(0, Ordering::Relaxed);
        }
    }

    /// Latency quantile in ms.
    pub fn quantile(&self, q: f64) -> f64 {
        let counts: Vec<u64> = self
            .hist
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        let want = (q * total as f64).ceil() as u64;
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= want.max(1) {
                return ((i as u64 + 1) * BUCKET_US) as f64 / 1000.0;
            }
        }
        f64::NAN
    }
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = usize;
    fn delivery(&self, result: &DeliveryResult<'_>, sent_at: usize) {
        match result {
            Ok(_) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
                let us = (self.t0.elapsed().as_micros() as u64).saturating_sub(sent_at as u64);
                let i = ((us / BUCKET_US) as usize).min(BUCKETS - 1);
                self.hist[i].fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// The application's producer: librdkafka's defaults (acks=all, idempotence on,
/// linger.ms=5) plus a queue large enough for the throughput phase. The same on both
/// sides.
pub fn app_producer(bootstrap: &str) -> Res<BaseProducer<Deliveries>> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("queue.buffering.max.messages", "1000000")
        .create_with_context(Deliveries::new())?)
}

pub fn send(p: &BaseProducer<Deliveries>, topic: &str, key: &[u8], value: &[u8]) {
    let mut rec = BaseRecord::with_opaque_to(topic, p.context().sent_at())
        .key(key)
        .payload(value);
    loop {
        match p.send(rec) {
            Ok(()) => return,
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                rec = r;
                p.poll(Duration::from_millis(1));
            }
            Err((e, _)) => panic!("produce failed: {e}"),
        }
    }
}
