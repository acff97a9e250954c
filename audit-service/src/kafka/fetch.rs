//! The consume loop's fetch queue: every assigned partition's fetched messages are
//! forwarded to one queue of the loop's own, which it reads in batches
//! (`rd_kafka_consume_batch_queue`); rebalances, statistics, commits and errors stay on
//! the consumer queue, which the loop still polls through rust-rdkafka.
//!
//! Why: rust-rdkafka's `poll` returns one message per call, and each call costs the
//! queue's lock, librdkafka's clock reads for `max.poll.interval.ms` and rust-rdkafka's
//! own (an `Instant::now()` and an `Arc` allocated and freed per message) — at 100-byte
//! messages more than the counting (docs/benchmarks.md). A batch pays the
//! clock reads once.
//!
//! Why not batch-read the consumer queue itself: with rust-rdkafka's event API, a
//! rebalance met by `rd_kafka_consume_batch_queue` has no rebalance callback to go to,
//! and librdkafka answers it with a plain unassign (`rd_kafka_poll_cb`), bypassing the
//! auditor's revoke report and assignment rule. Partition queues carry only fetched
//! messages, per-partition consumer errors and version barriers.
//!
//! When: a partition is routed in the assign callback, before rust-rdkafka assigns it,
//! so its fetcher starts with the forward in place (librdkafka leaves a forward the
//! application set, `RD_KAFKA_Q_F_FWD_APP`, and clears it when the fetcher stops, so it
//! is set again at each assignment). Messages outdated by a seek, a pause or a revoke
//! are discarded by librdkafka's version barriers on this queue as on the consumer
//! queue. A message that still arrives on the consumer queue (a partition that could
//! not be routed) is counted from there: nothing depends on which queue it came by.
//!
//! Lifetimes: librdkafka's queue and messages refer to the client without keeping it
//! alive, so they must go before it. [`FetchingConsumer`] owns the consumer and the
//! only strong reference to its queue and drops the queue first, on every path out
//! (a panic unwinding included); a [`Batch`] borrows the queue, so it goes earlier
//! still; and the consumer's context holds a [`FetchRoute`], which cannot keep the
//! queue alive (rust-rdkafka drops the client's handle before its context).
#![allow(unsafe_code)]

use std::ffi::CString;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::{Arc, Weak};

use audit_lib::TopicPartition;
use rdkafka::bindings::{
    rd_kafka_consume_batch_queue, rd_kafka_message_destroy, rd_kafka_message_t,
    rd_kafka_queue_destroy, rd_kafka_queue_forward, rd_kafka_queue_get_partition,
    rd_kafka_queue_new, rd_kafka_queue_t,
};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};

use crate::record::Record;

/// A consumer and its fetch queue, owned together so that the queue is destroyed
/// before the client on every path, a panic's unwinding included.
pub struct FetchingConsumer<C: ConsumerContext> {
    // Fields drop in declaration order: the queue (its only strong reference: the
    // context holds a `FetchRoute`, a batch a borrow) before the consumer.
    queue: Arc<FetchQueue>,
    consumer: BaseConsumer<C>,
}

impl<C: ConsumerContext> FetchingConsumer<C> {
    /// `consumer` with a new, empty fetch queue of its client.
    pub fn new(consumer: BaseConsumer<C>) -> anyhow::Result<FetchingConsumer<C>> {
        // SAFETY: the queue is kept in the returned value only, whose fields drop it
        // before the consumer, and no strong reference to it leaves this type.
        let queue = unsafe { FetchQueue::new(&consumer) }
            .ok_or_else(|| anyhow::anyhow!("cannot create the fetch queue"))?;
        Ok(FetchingConsumer {
            queue: Arc::new(queue),
            consumer,
        })
    }

    pub fn consumer(&self) -> &BaseConsumer<C> {
        &self.consumer
    }

    pub fn queue(&self) -> &FetchQueue {
        &self.queue
    }

    /// A route to the queue for the consumer's context (its assign callback).
    pub fn route(&self) -> FetchRoute {
        FetchRoute {
            queue: Arc::downgrade(&self.queue),
            client: self.consumer.client().native_ptr() as usize,
        }
    }
}

/// What a consumer context keeps of the fetch queue to route each assignment's
/// partitions to it: a route that cannot keep the queue alive past its
/// [`FetchingConsumer`]. The default routes nowhere.
#[derive(Clone, Default)]
pub struct FetchRoute {
    queue: Weak<FetchQueue>,
    /// The address of the queue's client, compared, never dereferenced.
    client: usize,
}

impl FetchRoute {
    /// Forwards each partition's fetched messages to the queue (call before the
    /// partitions are assigned). Returns the partitions that could not be routed:
    /// their messages keep coming by the consumer queue. None: nothing was routed, the
    /// queue being gone (the consumer is closing) or `consumer` not its own.
    pub fn route<'p, C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        partitions: &'p [TopicPartition],
    ) -> Option<Vec<&'p TopicPartition>> {
        // Only with the queue's own consumer, which the caller borrows from its
        // `FetchingConsumer`: that cannot drop while the strong reference taken here
        // lives, so this is never the reference that outlives the client.
        if consumer.client().native_ptr() as usize != self.client {
            return None;
        }
        let queue = self.queue.upgrade()?;
        Some(queue.route(consumer, partitions))
    }

    /// Whether the queue still exists.
    pub fn is_live(&self) -> bool {
        self.queue.strong_count() > 0
    }
}

/// A queue of the consume loop's own, which assigned partitions forward to.
pub struct FetchQueue {
    q: NonNull<rd_kafka_queue_t>,
}

// SAFETY: librdkafka's queues are thread-safe (every operation takes the queue's lock);
// the handle is only destroyed in `drop`.
unsafe impl Send for FetchQueue {}
// SAFETY: as above.
unsafe impl Sync for FetchQueue {}

impl FetchQueue {
    /// A new, empty queue of `consumer`'s client.
    ///
    /// # Safety
    /// The queue, and every [`Batch`] read from it, is dropped before `consumer`:
    /// librdkafka's queue and messages refer to the client without keeping it alive.
    /// ([`FetchingConsumer::new`] is the one caller.)
    unsafe fn new<C: ConsumerContext>(consumer: &BaseConsumer<C>) -> Option<FetchQueue> {
        // SAFETY: the client is alive; the queue is destroyed in `drop`, before the
        // client (the caller's promise).
        let q = unsafe { rd_kafka_queue_new(consumer.client().native_ptr()) };
        NonNull::new(q).map(|q| FetchQueue { q })
    }

    /// See [`FetchRoute::route`].
    fn route<'p, C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        partitions: &'p [TopicPartition],
    ) -> Vec<&'p TopicPartition> {
        let rk = consumer.client().native_ptr();
        let mut failed = Vec::new();
        for tp in partitions {
            let Ok(topic) = CString::new(tp.topic.as_str()) else {
                failed.push(tp);
                continue;
            };
            // SAFETY: the client is alive and `topic` NUL-terminated; the returned
            // handle (the partition's fetch queue, created if unknown) is released below.
            let pq = unsafe { rd_kafka_queue_get_partition(rk, topic.as_ptr(), tp.partition) };
            if pq.is_null() {
                failed.push(tp);
                continue;
            }
            // SAFETY: both queues are alive; the forward holds its own reference to
            // this queue, and destroying the partition queue's handle leaves the
            // forward in place (the partition owns its fetch queue).
            unsafe {
                rd_kafka_queue_forward(pq, self.q.as_ptr());
                rd_kafka_queue_destroy(pq);
            }
        }
        failed
    }

    /// An empty batch of up to `n` messages, to read this queue into.
    pub fn batch(&self, n: usize) -> Batch<'_> {
        Batch {
            msgs: Vec::with_capacity(n.max(1)),
            _queue: PhantomData,
        }
    }

    /// Reads up to `batch`'s capacity of messages into it (after destroying the ones
    /// it held), waiting up to `timeout_ms` for the first.
    pub fn read(&self, batch: &mut Batch<'_>, timeout_ms: i32) {
        batch.clear();
        let cap = batch.msgs.capacity();
        // SAFETY: writes at most `cap` message pointers into the vector's spare
        // capacity and returns how many (or -1 on error, leaving it empty).
        let n = unsafe {
            rd_kafka_consume_batch_queue(self.q.as_ptr(), timeout_ms, batch.msgs.as_mut_ptr(), cap)
        };
        let n = usize::try_from(n).unwrap_or(0).min(cap);
        // SAFETY: the first `n` slots were just written with live messages.
        unsafe { batch.msgs.set_len(n) };
    }
}

impl Drop for FetchQueue {
    fn drop(&mut self) {
        // SAFETY: the handle came from `rd_kafka_queue_new` and is destroyed once. A
        // partition still forwarding to the queue then finds it disabled and drops
        // what it fetches (only at shutdown or when the consumer is recreated, after
        // the loop's last report: nothing uncounted is committed).
        unsafe { rd_kafka_queue_destroy(self.q.as_ptr()) }
    }
}

/// Messages read by one [`FetchQueue::read`], destroyed at the next read or drop.
/// It borrows the queue (and so its [`FetchingConsumer`]), which outlives it.
pub struct Batch<'q> {
    msgs: Vec<*mut rd_kafka_message_t>,
    _queue: PhantomData<&'q FetchQueue>,
}

impl Batch<'_> {
    pub fn records(&self) -> impl Iterator<Item = Record<'_>> {
        // SAFETY: each pointer is a live message until `clear` destroys it, which
        // needs `&mut self`, so not while a record borrowed from `&self` lives.
        self.msgs.iter().map(|&p| unsafe { Record::from_ptr(p) })
    }

    fn clear(&mut self) {
        for p in self.msgs.drain(..) {
            // SAFETY: returned by `rd_kafka_consume_batch_queue`, destroyed once.
            unsafe { rd_kafka_message_destroy(p) }
        }
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::message::{Header, OwnedHeaders, Timestamp};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use rdkafka::{Offset, TopicPartitionList};
    use std::time::{Duration, Instant};

    const PER_PARTITION: i64 = 300;

    /// What was read of one record: partition, offset, key, value, timestamp, header `h`.
    type Read = (i32, i64, Vec<u8>, Vec<u8>, Timestamp, Vec<u8>);

    /// Produces `n` records to each of partitions 0 and 1, starting at value `from`:
    /// key `k<i>`, value `v<i>`, CreateTime `1_000_000 + i`, header `h: <i>`.
    fn produce(bootstrap: &str, topic: &str, from: i64, n: i64) {
        let p: BaseProducer = testkit::producer(bootstrap);
        for partition in 0..2 {
            for i in from..from + n {
                let (k, v) = (format!("k{i}"), format!("v{i}"));
                let h = OwnedHeaders::new().insert(Header {
                    key: "h",
                    value: Some(i.to_string().as_str()),
                });
                let r = BaseRecord::to(topic)
                    .partition(partition)
                    .key(&k)
                    .payload(&v)
                    .timestamp(1_000_000 + i)
                    .headers(h);
                p.send(r).map_err(|(e, _)| e).expect("enqueue");
                p.poll(Duration::ZERO);
            }
        }
        p.flush(Duration::from_secs(30)).expect("flush");
    }

    /// Reads the fetch queue (and polls the consumer queue, which must yield no
    /// message) until `n` records arrived; returns (partition, offset, key, value,
    /// timestamp, header) of each, in arrival order.
    fn read_n(c: &BaseConsumer, q: &FetchQueue, n: usize) -> Vec<Read> {
        let mut out = Vec::new();
        let mut batch = q.batch(64);
        let deadline = Instant::now() + Duration::from_secs(60);
        while out.len() < n && Instant::now() < deadline {
            if let Some(m) = c.poll(Duration::ZERO) {
                let m = m.expect("no consumer error");
                panic!(
                    "a routed partition's message came by the consumer queue: {} {}",
                    rdkafka::Message::partition(&m),
                    rdkafka::Message::offset(&m)
                );
            }
            q.read(&mut batch, 100);
            for r in batch.records() {
                assert_eq!(r.error(), None);
                assert_eq!(r.topic_ptr(), batch.records().next().unwrap().topic_ptr());
                let mut header = Vec::new();
                r.for_each_header(|name, value| {
                    assert_eq!(name, b"h");
                    header = value.unwrap().to_vec();
                });
                out.push((
                    r.partition(),
                    r.offset(),
                    r.key().unwrap().to_vec(),
                    r.payload().unwrap().to_vec(),
                    r.timestamp(),
                    header,
                ));
            }
        }
        out
    }

    fn check(got: &[Read], from: i64, n: i64) {
        assert_eq!(got.len() as i64, 2 * n, "records read");
        for partition in 0..2 {
            let mine: Vec<_> = got.iter().filter(|r| r.0 == partition).collect();
            for (j, r) in mine.iter().enumerate() {
                let i = from + j as i64;
                assert_eq!(
                    r.1, i,
                    "offsets in order, none missing (partition {partition})"
                );
                assert_eq!(r.2, format!("k{i}").into_bytes());
                assert_eq!(r.3, format!("v{i}").into_bytes());
                assert_eq!(r.4, Timestamp::CreateTime(1_000_000 + i));
                assert_eq!(r.5, i.to_string().into_bytes());
            }
        }
    }

    fn assign(c: &BaseConsumer, topic: &str, at: i64) {
        let mut tpl = TopicPartitionList::new();
        for p in 0..2 {
            tpl.add_partition_offset(topic, p, Offset::Offset(at))
                .unwrap();
        }
        c.assign(&tpl).expect("assign");
    }

    /// What the consume loop relies on: partitions routed before each assignment are
    /// read from the fetch queue only, in order and complete, with every field the
    /// counting reads — also when assigned again after an unassign (librdkafka clears
    /// the forward when a fetcher stops, and keeps it from being reset to the
    /// consumer queue at the next start: routing again is what makes it work).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn routed_partitions_are_read_in_batches_across_reassignments() {
        let bootstrap = testkit::kafka_a();
        let topic = testkit::create_unique_topic(&bootstrap, "fetchq", 2).await;
        tokio::task::block_in_place(|| {
            produce(&bootstrap, &topic, 0, PER_PARTITION);
            let f = FetchingConsumer::new(
                testkit::client_config(&bootstrap)
                    .set("group.id", testkit::unique("fetchq-group"))
                    .set("enable.auto.commit", "false")
                    .create()
                    .expect("consumer"),
            )
            .expect("queue");
            let (c, q) = (f.consumer(), f.queue());
            let parts: Vec<_> = (0..2).map(|p| TopicPartition::new(&topic, p)).collect();
            assert!(q.route(c, &parts).is_empty(), "every partition routed");
            assign(c, &topic, 0);
            check(&read_n(c, q, 2 * PER_PARTITION as usize), 0, PER_PARTITION);

            c.unassign().expect("unassign");
            produce(&bootstrap, &topic, PER_PARTITION, PER_PARTITION);
            assert!(q.route(c, &parts).is_empty());
            assign(c, &topic, PER_PARTITION);
            let again = read_n(c, q, 2 * PER_PARTITION as usize);
            check(&again, PER_PARTITION, PER_PARTITION);
        });
    }

    /// A partition's consumer error comes by the fetch queue as a message whose `err`
    /// is set (its payload is the error's text): [`Record::error`] says so, which is
    /// what keeps the consume loop from counting it as a record.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_partition_error_comes_by_the_fetch_queue_as_an_error() {
        let bootstrap = testkit::kafka_a();
        let topic = testkit::create_unique_topic(&bootstrap, "fetchq-err", 1).await;
        tokio::task::block_in_place(|| {
            produce_one(&bootstrap, &topic);
            let f = FetchingConsumer::new(
                testkit::client_config(&bootstrap)
                    .set("group.id", testkit::unique("fetchq-err-group"))
                    .set("enable.auto.commit", "false")
                    .set("auto.offset.reset", "error")
                    .create()
                    .expect("consumer"),
            )
            .expect("queue");
            let (c, q) = (f.consumer(), f.queue());
            let parts = [TopicPartition::new(&topic, 0)];
            assert!(q.route(c, &parts).is_empty());
            let mut tpl = TopicPartitionList::new();
            // Past the log end: with auto.offset.reset=error, a consumer error.
            tpl.add_partition_offset(&topic, 0, Offset::Offset(1_000))
                .unwrap();
            c.assign(&tpl).expect("assign");
            let mut batch = q.batch(8);
            let mut error = None;
            assert!(testkit::wait_until(Duration::from_secs(30), || {
                assert!(
                    c.poll(Duration::ZERO).is_none(),
                    "nothing on the consumer queue"
                );
                q.read(&mut batch, 100);
                for r in batch.records() {
                    assert!(r.error().is_some(), "a record where only an error can be");
                    error = r.error();
                }
                error.is_some()
            }));
            assert_eq!(
                error,
                Some(rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET)
            );
        });
    }

    fn produce_one(bootstrap: &str, topic: &str) {
        let p: BaseProducer = testkit::producer(bootstrap);
        p.send(BaseRecord::<str, str>::to(topic).partition(0).payload("{}"))
            .map_err(|(e, _)| e)
            .expect("enqueue");
        p.flush(Duration::from_secs(30)).expect("flush");
    }

    /// The context of the drop-order test: when the client drops it, after
    /// `rd_kafka_destroy`, it writes down whether the fetch queue was still alive.
    struct Probe {
        route: std::sync::Mutex<FetchRoute>,
        queue_alive_at_client_end: Arc<std::sync::Mutex<Option<bool>>>,
    }

    impl rdkafka::ClientContext for Probe {}
    impl ConsumerContext for Probe {}

    impl Drop for Probe {
        fn drop(&mut self) {
            let alive = self.route.lock().unwrap().is_live();
            *self.queue_alive_at_client_end.lock().unwrap() = Some(alive);
        }
    }

    /// The promise `FetchQueue::new` asks for holds when a panic unwinds past the
    /// consumer (as one inside `consume` would): the queue is gone before the client,
    /// while the context holds a route to it and a batch was read from it.
    #[test]
    fn the_fetch_queue_goes_before_the_client_when_a_panic_unwinds() {
        let seen = Arc::new(std::sync::Mutex::new(None));
        let c: BaseConsumer<Probe> = testkit::client_config(&testkit::kafka_a())
            .set("group.id", testkit::unique("fetchq-drop-group"))
            .create_with_context(Probe {
                route: Default::default(),
                queue_alive_at_client_end: Arc::clone(&seen),
            })
            .expect("consumer");
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let f = FetchingConsumer::new(c).expect("queue");
            *f.consumer().context().route.lock().unwrap() = f.route();
            let mut batch = f.queue().batch(8);
            f.queue().read(&mut batch, 0);
            assert!(f.route().is_live());
            panic!("a panic in the consume loop");
        }));
        assert!(unwound.is_err(), "the closure panicked");
        assert_eq!(
            *seen.lock().unwrap(),
            Some(false),
            "the client went first while the queue was alive (Some(true)), or never (None)"
        );
    }

    /// A route works with its queue's own consumer only: with another it routes
    /// nothing (and takes no reference to the queue).
    #[test]
    fn a_route_routes_only_with_its_own_consumer() {
        let consumer = || -> BaseConsumer {
            testkit::client_config(&testkit::kafka_a())
                .set("group.id", testkit::unique("fetchq-route-group"))
                .create()
                .expect("consumer")
        };
        let (f, other) = (
            FetchingConsumer::new(consumer()).expect("queue"),
            consumer(),
        );
        let parts = [TopicPartition::new("fetchq-route-topic", 0)];
        assert_eq!(f.route().route(&other, &parts), None);
        assert_eq!(f.route().route(f.consumer(), &parts), Some(vec![]));
        assert_eq!(FetchRoute::default().route(f.consumer(), &parts), None);
    }
}
