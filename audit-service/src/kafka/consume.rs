//! The consume loop (docs/design.md §5): one blocking thread owns a `BaseConsumer`, counts
//! every message it reads (in batches from its fetch queue, `kafka::fetch`, or one by
//! one from the consumer queue), and makes the interval reports; a second thread
//! publishes them. A report's WAL entry is written before anything is sent.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use common::now_ms;
use rdkafka::consumer::{BaseConsumer, Consumer, RebalanceProtocol};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::types::RDKafkaRespErr;
use tokio_util::sync::CancellationToken;

use crate::auditor::{Origin, Reason};
use crate::config::Config;
use crate::kafka::context::{AuditContext, NOT_EAGER};
use crate::kafka::fetch::{FetchQueue, FetchingConsumer};
use crate::kafka::shell::Shell;
use crate::kafka::topics::resolve_topics;
use crate::metrics::ServiceError;
use crate::record::Record;

/// When both queues run dry, how long to let librdkafka refill the fetch queue before
/// reading it again. Blocking at once instead would wake this thread once per
/// message the fetcher enqueues (a context switch each); a short wait turns that into
/// one wake-up per batch. The fetcher keeps filling the queue meanwhile, so nothing is
/// lost in throughput (bench/audit-service.sh: 1 ms and 200 µs both beat blocking;
/// 200 µs left less idle time).
const REFILL: Duration = Duration::from_micros(200);
/// Messages between two clock reads in the consume loop.
const CLOCK_EVERY: u32 = 64;
/// Messages read from the fetch queue at once (`kafka::fetch`).
const BATCH: usize = 256;
/// How long to wait on the fetch queue when both queues are idle: rebalances,
/// statistics and commit results wait at most this long on the consumer queue.
const IDLE_WAIT_MS: i32 = 50;

/// How the consume loop ended.
pub(crate) enum LoopExit {
    Shutdown,
    /// The consumer hit a fatal error; run again with a new consumer and this shell.
    ConsumerFailed(Box<Shell>),
}

/// The blocking consume loop; returns after the shutdown report, or when the
/// consumer failed fatally.
///
/// Interval reports are published by a second thread: a Kafka transaction takes
/// ~100 ms (commit_transaction) and consumption goes on meanwhile. Both threads work on
/// the shell under its mutex, so a rebalance callback (which runs inside `poll`) waits
/// for an in-flight transaction before it reports and lets partitions go, and the
/// shutdown report is published after it.
pub(crate) fn consume_loop(
    consumer: BaseConsumer<AuditContext>,
    cfg: Config,
    shutdown: CancellationToken,
    health: common::Health,
) -> anyhow::Result<LoopExit> {
    // The consumer with its fetch queue, which goes first on every way out of here (a
    // panic's unwinding included); the context only holds a route to it.
    let fetching = FetchingConsumer::new(consumer)?;
    let consumer = fetching.consumer();
    consumer.context().set_fetch_route(fetching.route());
    let ended = std::thread::scope(|s| -> anyhow::Result<Ended> {
        let (publish, requests) = sync_channel::<()>(1);
        let h = &health;
        std::thread::Builder::new()
            .name("audit-publish".into())
            .spawn_scoped(s, move || publish_loop(consumer, h, requests))
            .context("cannot start the publishing thread")?;
        // Returning drops `publish`, which ends the publishing thread.
        consume(
            consumer,
            &cfg,
            &shutdown,
            &health,
            &publish,
            fetching.queue(),
        )
    });
    // Dropping the consumer (after its queue) closes it; its revoke callback finds the
    // loop done (after an error it reports what it can, as any revoke).
    let ctx = Arc::clone(consumer.context());
    drop(fetching);
    let ended = ended?;
    let mut shell = Arc::try_unwrap(ctx)
        .map_err(|_| anyhow::anyhow!("the consumer's context outlived the consumer"))?
        .into_shell();
    Ok(match ended {
        Ended::Shutdown => {
            tracing::info!("audit service stopped");
            LoopExit::Shutdown
        }
        Ended::ConsumerFailed => {
            shell.reset_after_consumer_loss();
            LoopExit::ConsumerFailed(Box::new(shell))
        }
    })
}

/// How [`consume`] ended (the shell stays in the consumer's context until it is gone).
enum Ended {
    Shutdown,
    ConsumerFailed,
}

/// Publishes the pending WAL entries whenever the consume loop asks (after each
/// interval report); returns when the loop is gone or done with the consumer.
fn publish_loop(
    consumer: &BaseConsumer<AuditContext>,
    health: &common::Health,
    requests: Receiver<()>,
) {
    while requests.recv().is_ok() {
        let mut shell = consumer.context().lock();
        if consumer.context().is_done() {
            return;
        }
        if shell.publish_pending(consumer) {
            health.set_healthy();
        } else {
            health.set_unhealthy(format!(
                "{} WAL entries waiting to be published",
                shell.wal.pending_count()
            ));
        }
    }
}

fn consume(
    consumer: &BaseConsumer<AuditContext>,
    cfg: &Config,
    shutdown: &CancellationToken,
    health: &common::Health,
    publish: &SyncSender<()>,
    fetch: &FetchQueue,
) -> anyhow::Result<Ended> {
    let a = &cfg.audit;
    let mut topics = resolve_topics(consumer, cfg)?;
    anyhow::ensure!(
        !topics.is_empty() || !a.topic_regex.is_empty(),
        "no topic to audit"
    );
    tracing::info!(topics = topics.len(), "subscribing");
    if !topics.is_empty() {
        let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
        consumer.subscribe(&refs).context("cannot subscribe")?;
    }
    // Whatever the properties said: the protocol the client really uses.
    let eager = |c: &BaseConsumer<AuditContext>| {
        !matches!(c.rebalance_protocol(), RebalanceProtocol::Cooperative)
            && !c.context().incremental.load(Ordering::Relaxed)
    };
    anyhow::ensure!(eager(consumer), "{NOT_EAGER}");
    let mut next_report = Instant::now() + a.report_interval;
    let mut next_refresh = Instant::now() + a.topic_refresh;
    let ctx = consumer.context();
    let mut now = Instant::now();
    let mut observed_at = now_ms();
    let mut since_clock = 0u32;
    let mut dry = false;
    // `CancellationToken::is_cancelled` takes a mutex: ask with the clock, not per message.
    let mut cancelled = shutdown.is_cancelled();
    let (feeder, unusable) = {
        let shell = ctx.lock();
        (shell.counting.feeder(), shell.consumer_unusable())
    };
    let mut batch = fetch.batch(BATCH);
    while !cancelled {
        // Reading the clock costs as much as counting a message on some VMs: read it
        // once per batch of messages (observation time is then at most a few
        // hundred microseconds stale at full speed) and whenever the queue is idle.
        if since_clock >= CLOCK_EVERY {
            now = Instant::now();
            observed_at = now_ms();
            since_clock = 0;
            cancelled = shutdown.is_cancelled();
            if unusable.load(Ordering::SeqCst) {
                // A publication (on the publishing thread) was refused for this
                // consumer's membership: recreate it now, not at a fatal error that
                // librdkafka may raise minutes later.
                let shell = ctx.lock();
                return Ok(recreate_fenced(ctx, &shell));
            }
            if feeder.windows() >= a.max_windows_per_report {
                // Memory bound: report now rather than at the interval.
                next_report = now;
            }
        }
        if now >= next_report {
            next_report = now + a.report_interval;
            // Before any report: nothing counted under an incremental protocol is
            // published or committed.
            anyhow::ensure!(eager(consumer), "{NOT_EAGER}");
            let ends = ctx.ends.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let mut shell = ctx.lock();
            shell.auditor.take_ends(&ends);
            shell.update_positions(consumer);
            if shell.auditor.unsettled == Some(Origin::AmbiguousThisSession)
                && !shell.auditor.assigned().is_empty()
            {
                shell.reconcile(consumer, Origin::AmbiguousThisSession);
            }
            // A fatal consumer error (a fenced static member) reaches the queues only
            // with the next error event there, which can take minutes: ask at each
            // report too.
            if unusable.load(Ordering::SeqCst) || consumer.client().fatal_error().is_some() {
                return Ok(recreate_fenced(ctx, &shell));
            }
            if let Err(e) = shell.write_report(Reason::Interval) {
                health.set_unhealthy(format!("cannot write WAL: {e:#}"));
                // The drained counts are gone with the failed entry: read their
                // messages again, or the next entry's range would cover them uncounted.
                shell.metrics.emit(
                    ServiceError::Wal,
                    &e,
                    format_args!("cannot write report; counting its messages again"),
                );
                if !shell.rewind_unreported(consumer) {
                    tracing::error!("cannot rewind the consumer; recreating it");
                    ctx.finish();
                    return Ok(Ended::ConsumerFailed);
                }
            } else {
                // Full means a request is already waiting: it publishes this entry too.
                let _ = publish.try_send(());
            }
            // Back-pressure: past the WAL's disk limit, stop reading until the audit
            // topic accepts entries again. Nothing is dropped.
            let over = shell.wal.over_limit();
            if over != shell.auditor.paused() {
                if let Ok(assignment) = consumer.assignment() {
                    let res = if over {
                        consumer.pause(&assignment)
                    } else {
                        consumer.resume(&assignment)
                    };
                    if let Err(e) = res {
                        tracing::warn!(error = %e, "cannot pause/resume");
                    } else {
                        shell.auditor.set_paused(over, now_ms());
                        shell.metrics.paused.set(over as i64);
                        tracing::warn!(
                            paused = over,
                            pending_bytes = shell.wal.pending_bytes(),
                            "WAL back-pressure"
                        );
                    }
                }
            }
        }
        if now >= next_refresh {
            next_refresh = now + a.topic_refresh;
            match resolve_topics(consumer, cfg) {
                Ok(t) if t != topics && !t.is_empty() => {
                    tracing::info!(
                        before = topics.len(),
                        after = t.len(),
                        "topic list changed; resubscribing"
                    );
                    let refs: Vec<&str> = t.iter().map(String::as_str).collect();
                    if let Err(e) = consumer.subscribe(&refs) {
                        tracing::warn!(error = %e, "cannot resubscribe");
                    } else {
                        topics = t;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "cannot refresh the topic list")
                }
            }
        }
        // The consumer queue first: rebalances (whose callbacks run inside `poll` and
        // drain what was counted before them), statistics, commit results, errors,
        // and the messages of a partition not routed to the fetch queue.
        let mut got = 0u32;
        if let Some(polled) = consumer.poll(Duration::ZERO) {
            match polled {
                Ok(m) => {
                    feeder.record(&Record::of(&m), observed_at);
                    got += 1;
                }
                Err(e) => {
                    if consumer_error(consumer, &e) {
                        return Ok(Ended::ConsumerFailed);
                    }
                }
            }
        }
        // Non-blocking while messages flow; when both queues are empty let the fetch
        // queue refill once; then wait on it (bounded, for the consumer queue's sake).
        let wait = if got == 0 && dry { IDLE_WAIT_MS } else { 0 };
        fetch.read(&mut batch, wait);
        for r in batch.records() {
            match r.error() {
                None => {
                    feeder.record(&r, observed_at);
                    got += 1;
                }
                // The end of a partition: no error, nothing to count.
                Some(RDKafkaRespErr::RD_KAFKA_RESP_ERR__PARTITION_EOF) => {}
                Some(err) => {
                    let e = KafkaError::MessageConsumption(RDKafkaErrorCode::from(err));
                    if consumer_error(consumer, &e) {
                        return Ok(Ended::ConsumerFailed);
                    }
                }
            }
        }
        since_clock = since_clock.saturating_add(got);
        if got > 0 {
            dry = false;
        } else {
            // Idle: publish the consumption metrics, read the clock.
            feeder.flush();
            since_clock = CLOCK_EVERY;
            if !dry {
                dry = true;
                std::thread::sleep(REFILL);
            }
        }
    }
    // Shutdown: report, publish (bounded), then leave.
    {
        let mut shell = ctx.lock();
        shell.update_positions(consumer);
        if let Err(e) = shell.write_report(Reason::Shutdown) {
            tracing::error!(error = %format!("{e:#}"), "cannot write the shutdown report");
        }
        let deadline = Instant::now() + a.publish_timeout;
        // Entries of an earlier session are only settled at an assignment: leave
        // them to the next start instead of waiting out the deadline.
        while shell.auditor.unsettled != Some(Origin::EarlierSession)
            && !shell.publish_pending(consumer)
            && Instant::now() < deadline
            && !unusable.load(Ordering::SeqCst)
        {
            if shell.auditor.unsettled == Some(Origin::AmbiguousThisSession) {
                shell.reconcile(consumer, Origin::AmbiguousThisSession);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        if shell.wal.pending_count() > 0 {
            tracing::warn!(
                pending = shell.wal.pending_count(),
                "WAL entries left unpublished at shutdown; the restart rule settles them"
            );
        }
        // The revoke callback during close has nothing left to report.
        ctx.finish();
    }
    Ok(Ended::Shutdown)
}

/// Ends the loop with this consumer after a publication was refused for its group
/// membership (`Shell::note_publish_failure`): as after a fatal consumer error, its
/// uncommitted counts are void (recounted from the committed offsets by the next
/// consumer, which joins as a new member) and pending WAL entries go through the
/// restart rule at its assignment. Called with the shell locked, so no publication is
/// in flight.
fn recreate_fenced(ctx: &AuditContext, shell: &Shell) -> Ended {
    shell.metrics.emit(
        ServiceError::Consume,
        &"group membership fenced",
        format_args!(
            "a publication was refused for this consumer's membership; recreating the consumer"
        ),
    );
    ctx.finish();
    Ended::ConsumerFailed
}

/// Handles an error from either queue; true when the consumer failed fatally and must
/// be recreated (its loop ends after `ctx.finish()`).
fn consumer_error(consumer: &BaseConsumer<AuditContext>, e: &KafkaError) -> bool {
    if matches!(e, KafkaError::PartitionEOF(_)) {
        return false;
    }
    let ctx = consumer.context();
    let shell = ctx.lock();
    shell
        .metrics
        .emit(ServiceError::Consume, e, format_args!("consumer error"));
    if let Some((code, reason)) = consumer.client().fatal_error() {
        // E.g. a static member fenced after a coordinator restart: this consumer can
        // never work again. Its uncommitted counts are void (recounted from the
        // committed offsets by the next consumer); pending WAL entries go through the
        // restart rule.
        tracing::error!(%code, %reason, "fatal consumer error; recreating the consumer");
        ctx.finish();
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::client::consumer_client_config;
    use crate::kafka::context::create_consumer;
    use crate::kafka::publisher::create_producer;
    use crate::metrics::Metrics;
    use crate::wal::{CommittedRange, Wal};
    use audit_lib::TopicPartition;
    use rdkafka::consumer::{ConsumerContext, Rebalance};

    /// An at-least-once configuration for cluster A with a WAL in `wal`, and its shell.
    fn shell_for(name: &str, topic: String, wal: &std::path::Path, cfg: &mut Config) -> Shell {
        cfg.kafka.bootstrap_servers = testkit::kafka_a();
        let a = &mut cfg.audit;
        a.instance_id = testkit::unique(name);
        a.group_id = testkit::unique(&format!("{name}-group"));
        a.topics = vec![topic];
        a.mode = crate::Mode::AtLeastOnce;
        a.wal_dir = wal.to_path_buf();
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = Metrics::new(&mut registry);
        let (w, _) = Wal::open(&cfg.audit.instance_wal_dir(), Default::default()).unwrap();
        let producer = create_producer(cfg).unwrap();
        Shell::new(cfg.clone(), w, metrics, producer).unwrap()
    }

    /// Validation refuses `group.protocol = consumer`; should such a consumer get
    /// through anyway (a property the validation does not know about), the loop
    /// refuses the protocol the client really uses before it counts anything.
    #[test]
    fn an_incremental_consumer_is_refused_after_subscribe() {
        let wal = tempfile::tempdir().unwrap();
        let mut cfg = Config::default();
        cfg.kafka
            .consumer
            .insert("group.protocol".into(), "consumer".into());
        let topic = testkit::unique("proto-topic");
        let shell = shell_for("proto", topic, wal.path(), &mut cfg);
        // librdkafka refuses `session.timeout.ms` (one of our defaults) with this
        // protocol; without it the consumer is created.
        let mut client = consumer_client_config(&cfg);
        client.remove("session.timeout.ms");
        let consumer: BaseConsumer<AuditContext> = client
            .create_with_context(AuditContext::new(&cfg, shell))
            .unwrap();
        // Bounded: a loop that accepted the protocol would run until shut down.
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(20));
            stop.cancel();
        });
        let exit = consume_loop(consumer, cfg, shutdown, common::Health::new());
        let err = format!("{:#}", exit.err().expect("refused"));
        assert!(err.contains("incremental"), "{err}");
    }

    /// A5: after `Rebalance::Error` rust-rdkafka unassigns everything, so the
    /// assignment is as good as lost: its partitions, positions and counts are
    /// forgotten and this session's pending entries discarded (the next assignment
    /// starts at the committed offsets), instead of surviving into the next
    /// assignment and being published twice.
    #[test]
    fn a_rebalance_error_forgets_the_assignment_like_a_lost_one() {
        let wal = tempfile::tempdir().unwrap();
        let mut cfg = Config::default();
        let shell = shell_for("rebalance-error", "t".into(), wal.path(), &mut cfg);
        let consumer = create_consumer(&cfg, shell).unwrap();
        {
            let mut shell = consumer.context().lock();
            let t0 = TopicPartition::new("t", 0);
            shell.auditor.assign(std::slice::from_ref(&t0));
            let committed = [(t0.clone(), crate::auditor::Committed::At(10))].into();
            shell
                .auditor
                .start_reading(std::slice::from_ref(&t0), &committed, now_ms());
            shell
                .wal
                .append(
                    vec![CommittedRange {
                        topic: "t".into(),
                        partition: 0,
                        start: Some(10),
                        end: 20,
                    }],
                    vec![],
                )
                .unwrap();
        }
        consumer.context().pre_rebalance(
            &consumer,
            &Rebalance::Error(KafkaError::Rebalance(
                rdkafka::types::RDKafkaErrorCode::Fail,
            )),
        );
        let shell = consumer.context().lock();
        assert!(shell.auditor.assigned().is_empty(), "assignment kept");
        assert!(shell.auditor.parts().is_empty(), "positions kept");
        assert_eq!(shell.wal.pending_count(), 0, "this session's entry kept");
    }
}
