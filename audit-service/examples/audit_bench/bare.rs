//! The bare consumers the service is measured against: one `poll` per message, as most
//! applications read, and one that reads in batches as the service does and counts
//! nothing.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::bail;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::Message;

use crate::cpu::Span;
use crate::service::Measured;

pub(crate) fn measure_bare(
    cfg: &audit_service::Config,
    topic: &str,
    n: u64,
) -> anyhow::Result<Measured> {
    let consumer: BaseConsumer = audit_service::consumer_client_config(cfg).create()?;
    consumer.subscribe(&[topic])?;
    let mut tally = Tally::new("bare", n);
    let deadline = Instant::now() + Duration::from_secs(600);
    while !tally.done() {
        if let Some(r) = consumer.poll(Duration::from_millis(100)) {
            let m = r?;
            tally.add(1, key_value_len(m.key(), m.payload()));
            // The clock only now and then (and after every empty poll): a consumer
            // reads none per message, and a read costs ~50 ns on this machine class's
            // VMs, as much as counting a message.
            if tally.count % 4096 != 0 {
                continue;
            }
        }
        if Instant::now() > deadline {
            bail!("bare consumer read only {} of {n}", tally.count);
        }
    }
    Ok(tally.end())
}

/// A bare consumer's messages and bytes read, and its measured span: the same as the
/// service side's, from the 10 % mark to the last message, so group join and fetch
/// ramp-up weigh on neither side.
pub(crate) struct Tally {
    label: &'static str,
    n: u64,
    count: u64,
    bytes: u64,
    start: Option<(Instant, u64, Span)>,
}

impl Tally {
    pub(crate) fn new(label: &'static str, n: u64) -> Tally {
        Tally {
            label,
            n,
            count: 0,
            bytes: 0,
            start: None,
        }
    }

    pub(crate) fn add(&mut self, messages: u64, bytes: u64) {
        self.count += messages;
        self.bytes += bytes;
        if self.start.is_none() && self.count >= self.n / 10 {
            self.start = Some((
                Instant::now(),
                self.count,
                Span::start(self.label, std::process::id()),
            ));
        }
    }

    pub(crate) fn done(&self) -> bool {
        self.count >= self.n
    }

    pub(crate) fn end(self) -> Measured {
        let (t0, c0, span) = self.start.expect("past the 10 % mark");
        std::hint::black_box(self.bytes);
        let rate = (self.count - c0) as f64 / t0.elapsed().as_secs_f64();
        let (cpu_us, busy) = span.end(self.count - c0);
        Measured { rate, cpu_us, busy }
    }
}

/// What a bare consumer reads of a message: the length of its key and value.
pub(crate) fn key_value_len(key: Option<&[u8]>, value: Option<&[u8]>) -> u64 {
    (key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len)) as u64
}

/// The batch-reading bare consumer's context: routes each assignment's partitions to its
/// fetch queue before they are assigned, as the service's context does.
pub(crate) struct RouteContext(Mutex<audit_service::FetchRoute>);

impl rdkafka::ClientContext for RouteContext {}

impl ConsumerContext for RouteContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let parts: Vec<_> = tpl
                .elements()
                .iter()
                .map(|e| audit_lib::TopicPartition::new(e.topic(), e.partition()))
                .collect();
            let route = self.0.lock().unwrap().clone();
            let failed = route.route(consumer, &parts).unwrap_or_default();
            assert!(failed.is_empty(), "cannot route");
        }
    }
}

/// A bare consumer that reads as the service does (`audit_service::FetchQueue`: the
/// partitions forwarded to one queue, read 256 at a time, the consumer queue polled
/// between batches) and counts nothing: what the service's reading costs without
/// the counting, next to [`measure_bare`], which reads as most applications do (one
/// `poll` per message).
pub(crate) fn measure_bare_batch(
    cfg: &audit_service::Config,
    topic: &str,
    n: u64,
) -> anyhow::Result<Measured> {
    let consumer: BaseConsumer<RouteContext> = audit_service::consumer_client_config(cfg)
        .create_with_context(RouteContext(Mutex::default()))?;
    let fetching = audit_service::FetchingConsumer::new(consumer)?;
    let (consumer, q) = (fetching.consumer(), fetching.queue());
    *consumer.context().0.lock().unwrap() = fetching.route();
    consumer.subscribe(&[topic])?;
    let mut batch = q.batch(256);
    let mut tally = Tally::new("bare (batches)", n);
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut dry = false;
    while !tally.done() {
        let (mut got, mut bytes) = (0, 0);
        if let Some(r) = consumer.poll(Duration::ZERO) {
            let m = r?;
            bytes += key_value_len(m.key(), m.payload());
            got += 1;
        }
        q.read(&mut batch, if dry && got == 0 { 100 } else { 0 });
        for r in batch.records() {
            anyhow::ensure!(r.error().is_none(), "consumer error {:?}", r.error());
            bytes += key_value_len(r.key(), r.payload());
            got += 1;
        }
        tally.add(got, bytes);
        if got == 0 && !dry {
            // As the service: let the queue refill once before blocking on it.
            dry = true;
            std::thread::sleep(Duration::from_micros(200));
        } else if got > 0 {
            dry = false;
        }
        if Instant::now() > deadline {
            bail!(
                "batch-reading bare consumer read only {} of {n}",
                tally.count
            );
        }
    }
    Ok(tally.end())
}
