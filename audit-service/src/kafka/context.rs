//! The consumer's context: the statistics callback keeps the latest log ends, and the
//! rebalance callbacks, which run inside `poll` on the consume thread (rust-rdkafka
//! #738), hand each rebalance to the shell, so a revoke reports and commits
//! synchronously before the partitions go, and an assignment first applies the
//! restart rule to the WAL's pending entries before consumption starts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use anyhow::Context;
use audit_lib::TopicPartition;
use common::now_ms;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance, RebalanceProtocol};
use rdkafka::statistics::Statistics;
use rdkafka::ClientContext;

use crate::auditor::progress::measured_at;
use crate::auditor::{EndsSnapshot, LogEnds};
use crate::config::Config;
use crate::kafka::client::{consumer_client_config, fetch_age_ms};
use crate::kafka::fetch::FetchRoute;
use crate::kafka::shell::Shell;
use crate::metrics::ServiceError;

pub(crate) struct AuditContext {
    shell: Mutex<Shell>,
    /// Set when the consume loop is done with this consumer (shut down, or failed and
    /// to be recreated): the revoke of its close has nothing to report, and the
    /// publishing thread stops.
    done: AtomicBool,
    /// Log ends per partition from the last statistics callback.
    pub(crate) ends: Mutex<EndsSnapshot>,
    /// How much older than the statistics callback the high watermark it carries can
    /// be while the partition is fetched: `fetch.wait.max.ms` (a fetch response is
    /// at most that long in coming) plus [`FETCH_SLACK_MS`]. Subtracted from the
    /// callback's time.
    fetch_age_ms: i64,
    /// Set when a rebalance used the incremental protocol: the loop then stops.
    pub(crate) incremental: AtomicBool,
    /// The route to the consume loop's fetch queue: each assignment's partitions are
    /// routed to it before they are assigned (`kafka::fetch`). It cannot keep the
    /// queue alive, so the context may outlive the queue (it does: rust-rdkafka drops
    /// the client's handle before its context).
    fetch: Mutex<FetchRoute>,
}

/// The rebalance protocols the auditor can work with: a revoke takes every partition
/// (eager), so a revoke report covers the whole assignment.
pub(crate) const NOT_EAGER: &str =
    "the consumer uses the incremental (cooperative) rebalance protocol; the \
     auditor needs the classic group protocol with an eager assignor (set group.protocol = \
     classic and partition.assignment.strategy = range or roundrobin)";

impl AuditContext {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Shell> {
        self.shell.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The consume loop is done with this consumer (see `done`).
    pub(crate) fn finish(&self) {
        self.done.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }

    /// Routes the partitions of later assignments by `route`.
    pub(crate) fn set_fetch_route(&self, route: FetchRoute) {
        *self.fetch.lock().unwrap_or_else(|e| e.into_inner()) = route;
    }

    /// The shell, once the consumer is gone.
    pub(crate) fn into_shell(self) -> Shell {
        self.shell.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

impl ClientContext for AuditContext {
    fn stats(&self, stats: Statistics) {
        // The high watermark is the one of the partition's last fetch response, not
        // of this moment: records appended since may be unread even by a consumer
        // whose position is past it. So the ends are dated, and replace the previous
        // snapshot wholesale (a partition missing here has no known end any more,
        // rather than an old one with a new date).
        // The callback runs when the consume loop polls, which may be well after
        // librdkafka emitted the statistics (a loop busy with a report): their own
        // wall-clock time (whole seconds, rounded down) bounds it.
        let at = measured_at(now_ms(), stats.time, self.fetch_age_ms);
        let mut ends = HashMap::new();
        for (topic, t) in stats.topics {
            for (p, part) in t.partitions {
                if p >= 0 && part.hi_offset >= 0 {
                    // The high watermark, not the last stable offset: records of an
                    // open transaction are not read yet and count for their windows
                    // once committed, so a partition is not caught up while one is
                    // open. (The position passes the markers, so lag reaches 0 once
                    // the transaction is committed or aborted and read.)
                    ends.insert(
                        TopicPartition::new(topic.as_str(), p),
                        LogEnds {
                            low: part.lo_offset,
                            end: part.hi_offset,
                        },
                    );
                }
            }
        }
        *self.ends.lock().unwrap_or_else(|e| e.into_inner()) = EndsSnapshot { at: Some(at), ends };
    }
}

impl ConsumerContext for AuditContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        ) {
            // Never act on an incremental rebalance (it would forget partitions still
            // owned); the consume loop stops before reporting anything.
            self.incremental.store(true, Ordering::Relaxed);
            tracing::error!("{NOT_EAGER}");
            return;
        }
        // Only the publishing thread can hold the shell while this thread is in `poll`:
        // busy means a publication is in flight, and the callback waits for it.
        let (mut shell, waited) = match self.shell.try_lock() {
            Ok(g) => (g, false),
            Err(std::sync::TryLockError::Poisoned(e)) => (e.into_inner(), false),
            Err(std::sync::TryLockError::WouldBlock) => (self.lock(), true),
        };
        if self.is_done() {
            return;
        }
        if waited && matches!(rebalance, Rebalance::Revoke(_)) {
            shell.metrics.revoke_waits.inc();
        }
        match rebalance {
            Rebalance::Revoke(tpl) => {
                let lost = consumer.assignment_lost();
                tracing::info!(
                    partitions = tpl.count(),
                    lost,
                    "partitions revoked: reporting before letting go"
                );
                shell.on_revoke(consumer, lost);
            }
            Rebalance::Assign(tpl) => {
                tracing::info!(partitions = tpl.count(), "partitions assigned");
                let partitions: Vec<TopicPartition> = tpl
                    .elements()
                    .iter()
                    .map(|el| TopicPartition::new(el.topic(), el.partition()))
                    .collect();
                let route = self.fetch.lock().unwrap_or_else(|e| e.into_inner()).clone();
                for tp in route.route(consumer, &partitions).unwrap_or_default() {
                    // Not expected (librdkafka creates a partition's queue if
                    // unknown). Never routed before, the partition is read from the
                    // consumer queue; routed before, it may stall (its lag shows it).
                    tracing::error!(topic = %tp.topic, partition = tp.partition,
                            "cannot route the partition to the fetch queue");
                }
                shell.on_assign(consumer, &partitions);
            }
            Rebalance::Error(e) => {
                // rust-rdkafka unassigns everything after this callback: what was
                // counted since the last report can never be committed by us, like a
                // lost assignment.
                shell.metrics.emit(
                    ServiceError::Rebalance,
                    &e,
                    format_args!("rebalance error; treating the assignment as lost"),
                );
                shell.on_revoke(consumer, true);
            }
        }
    }
}

impl AuditContext {
    pub(crate) fn new(cfg: &Config, shell: Shell) -> AuditContext {
        AuditContext {
            shell: Mutex::new(shell),
            done: AtomicBool::new(false),
            ends: Mutex::new(EndsSnapshot::default()),
            fetch_age_ms: fetch_age_ms(cfg),
            incremental: AtomicBool::new(false),
            fetch: Mutex::new(FetchRoute::default()),
        }
    }
}

pub(crate) fn create_consumer(
    cfg: &Config,
    shell: Shell,
) -> anyhow::Result<BaseConsumer<AuditContext>> {
    consumer_client_config(cfg)
        .create_with_context(AuditContext::new(cfg, shell))
        .context("cannot create consumer")
}
