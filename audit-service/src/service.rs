//! The consume → count → report → publish loop (DESIGN §5).
//!
//! One blocking thread owns a `BaseConsumer` whose context holds the whole counting
//! state (`Core`) behind a mutex. The rebalance callbacks run inside `poll` on that
//! same thread (rust-rdkafka #738), so a revoke reports and commits synchronously
//! before the partitions go, and an assignment first applies the restart rule to the
//! WAL's pending entries before consumption starts.
//!
//! A report: drain the aggregator → audit messages (fresh UUIDs) + progress per topic →
//! WAL entry with the offset range of every partition consumed since the previous
//! report (fsync) → publish pending entries in order, each in one transaction with its
//! offsets → mark published.
//!
//! This file holds the consumer side: the shared state, the rebalance callbacks (with
//! the I/O of the restart rule) and the loops. Report building is in `report.rs`,
//! publishing in `publish.rs`, the restart rule's decision in `restart.rs` (pure),
//! topic selection in `topics.rs`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context;
use audit_lib::{Identity, TopicPartition};
use common::now_ms;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::ClientContext;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::counting::Counting;
use crate::metrics::{Metrics, PartitionLabel, ServiceError};
use crate::offsets_seen::OffsetsSeen;
use crate::publish::AuditProducer;
use crate::report::{EndsSnapshot, FastHash, LogEnds, PartState, Reason};
use crate::restart::{Committed, Decision, Origin, RestartRule};
use crate::topics::resolve_topics;
use crate::wal::{CommittedRange, Wal};

/// A range start whose committed offset could not be read (never equal to a real
/// committed offset, so such a range is never resent).
pub(crate) const UNKNOWN_START: i64 = -1;

const POLL: Duration = Duration::from_millis(100);
/// When the fetched-message queue runs dry, how long to let librdkafka refill it
/// before polling again. Blocking in `poll` instead would wake this thread once per
/// message the fetcher enqueues (a context switch each); a short wait turns that into
/// one wake-up per batch. The fetcher keeps filling the queue meanwhile, so nothing is
/// lost in throughput (bench/audit-service.sh: 1 ms and 200 µs both beat blocking;
/// 200 µs left less idle time).
const REFILL: Duration = Duration::from_micros(200);
/// Messages between two clock reads in the consume loop.
const CLOCK_EVERY: u32 = 64;

/// Everything the rebalance callbacks and the loop share.
pub(crate) struct Core {
    pub(crate) cfg: Config,
    pub(crate) identity: Identity,
    pub(crate) counting: Counting,
    pub(crate) parts: HashMap<String, BTreeMap<i32, PartState>, FastHash>,
    pub(crate) wal: Wal,
    /// Shared with a `send_offsets_to_transaction` that may outlive its bound (see
    /// `publish::send_offsets`).
    pub(crate) producer: Arc<AuditProducer>,
    pub(crate) metrics: Metrics,
    /// Partitions this instance owns now.
    pub(crate) assigned: HashSet<TopicPartition>,
    /// Pending entries wait for the restart rule (restart.rs): entries of an earlier
    /// consumer session until the next assignment, or entries whose transaction is
    /// ambiguous in this session until a mid-run reconcile settles them.
    pub(crate) unsettled: Option<Origin>,
    pub(crate) paused: bool,
    /// Partitions this instance has seen committed offsets for (expiry detection).
    pub(crate) offsets_seen: OffsetsSeen,
    /// When the log ends in `parts` were measured (`EndsSnapshot::at`): what their
    /// progress is dated by.
    pub(crate) ends_at: Option<i64>,
    /// Statistics measured before this (the last assignment or resume) are not used:
    /// their ends may be from a fetch before it.
    pub(crate) ends_from: i64,
    /// The ends of the partitions revoked last (not lost) and when they were measured:
    /// given back to those of them assigned again, so their lag stays known (and 0
    /// when read) across a rebalance instead of null until the next statistics.
    pub(crate) revoked_ends: Option<(i64, HashMap<TopicPartition, LogEnds>)>,
    /// Whether the current consumer has had an assignment before: only then can its
    /// statistics carry high watermarks of fetches before the current assignment.
    pub(crate) assigned_before: bool,
    /// What progress is dated by before any statistics (every lag null): no later
    /// than the first statistics can be dated (`EndsSnapshot::at`), so the store,
    /// which keeps a partition's progress of the latest `emitted_at`, does not drop
    /// the first reports with a known lag as older than these.
    pub(crate) undated: i64,
}

pub(crate) struct AuditContext {
    core: Mutex<Option<Core>>,
    /// Log ends per partition from the last statistics callback.
    ends: Mutex<EndsSnapshot>,
    /// How much older than the statistics callback the high watermark it carries can
    /// be while the partition is fetched: `fetch.wait.max.ms` (a fetch response is
    /// at most that long in coming) plus [`FETCH_SLACK_MS`]. Subtracted from the
    /// callback's time.
    fetch_age_ms: i64,
    /// Set when a rebalance used the incremental protocol: the loop then stops.
    incremental: AtomicBool,
}

/// The rebalance protocols the auditor can work with: a revoke takes every partition
/// (eager), so a revoke report covers the whole assignment.
const NOT_EAGER: &str = "the consumer uses the incremental (cooperative) rebalance protocol; the \
     auditor needs the classic group protocol with an eager assignor (set group.protocol = \
     classic and partition.assignment.strategy = range or roundrobin)";

impl AuditContext {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Option<Core>> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
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
        // Only the publishing thread can hold the core while this thread is in `poll`:
        // busy means a publication is in flight, and the callback waits for it.
        let (mut guard, waited) = match self.core.try_lock() {
            Ok(g) => (g, false),
            Err(std::sync::TryLockError::Poisoned(e)) => (e.into_inner(), false),
            Err(std::sync::TryLockError::WouldBlock) => (self.lock(), true),
        };
        let Some(core) = guard.as_mut() else { return };
        if waited && matches!(rebalance, Rebalance::Revoke(_)) {
            core.metrics.revoke_waits.inc();
        }
        match rebalance {
            Rebalance::Revoke(tpl) => {
                let lost = consumer.assignment_lost();
                tracing::info!(
                    partitions = tpl.count(),
                    lost,
                    "partitions revoked: reporting before letting go"
                );
                core.on_revoke(consumer, lost);
            }
            Rebalance::Assign(tpl) => {
                tracing::info!(partitions = tpl.count(), "partitions assigned");
                core.on_assign(consumer, tpl);
            }
            Rebalance::Error(e) => {
                // rust-rdkafka unassigns everything after this callback: what was
                // counted since the last report can never be committed by us, like a
                // lost assignment.
                core.metrics.emit(
                    ServiceError::Rebalance,
                    &e,
                    format_args!("rebalance error; treating the assignment as lost"),
                );
                core.on_revoke(consumer, true);
            }
        }
    }
}

/// The consumer's client configuration: the user's properties with the settings
/// exactly-once needs forced. Public so a benchmark's bare consumer can use the very
/// same settings.
pub fn consumer_client_config(cfg: &Config) -> rdkafka::ClientConfig {
    let a = &cfg.audit;
    let stats_ms = a
        .report_interval
        .as_millis()
        .clamp(1000, 60_000)
        .to_string();
    let mut overrides: Vec<(&str, &str)> = vec![
        ("group.id", &a.group_id),
        ("enable.auto.commit", "false"),
        ("enable.auto.offset.store", "false"),
        ("isolation.level", "read_committed"),
        ("statistics.interval.ms", &stats_ms),
    ];
    if a.static_membership {
        overrides.push(("group.instance.id", &a.instance_id));
    }
    cfg.kafka.client_config_with_defaults(
        common::KafkaRole::Consumer,
        &[
            ("auto.offset.reset", "earliest"),
            // Kafka's default (KIP-735). The session must outlast a move of the group
            // coordinator (the broker's own session, 9 s by default, then the new
            // coordinator loading the group): past it librdkafka takes the assignment
            // for lost and rejoins without its member id, and the coordinator fences the
            // static member's old id, which librdkafka reports as a fatal error. Every
            // group coordinator failure then cost a recreated consumer and a recount
            // from the committed offsets (10 s here before: seen on the replicated
            // cluster, tests/it/replicated). A dead instance's partitions wait as long
            // for another one; a restarted one keeps them (static membership).
            ("session.timeout.ms", "45000"),
            // librdkafka's default (1000 ms) idles a consumer that reads faster than
            // one fetch fills the queue (queued.min.messages): measured here, it
            // capped a bare consumer at ~300k msg/s with the machine 85 % idle; at
            // 10 ms it reads ~2M msg/s. See bench/audit-service.sh.
            ("fetch.queue.backoff.ms", "10"),
            // Fetched-but-unread data is held in whole fetch responses; 16 MB (of
            // librdkafka's 64 MB) is still tens of milliseconds at full speed and keeps
            // the 2 000-topic memory benchmark at ~225 MB instead of ~245 MB.
            ("queued.max.messages.kbytes", "16384"),
        ],
        &overrides,
    )
}

/// As of when the high watermarks of statistics emitted at `time_s` (librdkafka's
/// whole seconds) and seen by the callback at `callback_ms` hold.
fn measured_at(callback_ms: i64, time_s: i64, fetch_age_ms: i64) -> i64 {
    callback_ms
        .min(time_s.saturating_mul(1000))
        .saturating_sub(fetch_age_ms)
}

/// Beyond `fetch.wait.max.ms`, how late a fetch response may be (round trip, a busy
/// broker or client thread). Progress is dated that much earlier: windows settle as
/// much later, which grace (minutes) absorbs.
const FETCH_SLACK_MS: i64 = 1000;

/// The consumer's `fetch.wait.max.ms` (librdkafka's default 500 ms when not set)
/// plus [`FETCH_SLACK_MS`]: the longest the high watermark of a fetched partition in
/// the statistics is taken to be older than the statistics.
fn fetch_age_ms(cfg: &Config) -> i64 {
    consumer_client_config(cfg)
        .get("fetch.wait.max.ms")
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|&ms| ms >= 0)
        .unwrap_or(500)
        .saturating_add(FETCH_SLACK_MS)
}

pub(crate) fn create_consumer(
    cfg: &Config,
    core: Core,
) -> anyhow::Result<BaseConsumer<AuditContext>> {
    let ctx = AuditContext {
        core: Mutex::new(Some(core)),
        ends: Mutex::new(EndsSnapshot::default()),
        fetch_age_ms: fetch_age_ms(cfg),
        incremental: AtomicBool::new(false),
    };
    consumer_client_config(cfg)
        .create_with_context(ctx)
        .context("cannot create consumer")
}

impl Core {
    pub(crate) fn new(
        cfg: Config,
        wal: Wal,
        metrics: Metrics,
        producer: AuditProducer,
    ) -> anyhow::Result<Core> {
        let a = &cfg.audit;
        let identity = Identity::new(&a.tier, &a.datacenter, &a.instance_id);
        let counting = Counting::new(&cfg, identity.clone(), &metrics)?;
        let unsettled = (wal.pending_count() > 0).then_some(Origin::EarlierSession);
        let mut offsets_seen = OffsetsSeen::load(wal.dir());
        // Statistics are emitted after the Core and its consumer were created, and
        // dated by their whole second minus the fetch age.
        let undated = now_ms() - fetch_age_ms(&cfg) - 1000;
        // A pending entry that starts at a committed offset shows one existed.
        let pending_starts: Vec<TopicPartition> = wal
            .pending_ids()
            .into_iter()
            .flat_map(|id| wal.ranges(id).unwrap_or_default().to_vec())
            .filter(|r| r.start.is_some_and(|s| s >= 0))
            .map(|r| r.topic_partition())
            .collect();
        offsets_seen.insert_all(
            pending_starts
                .iter()
                .map(|tp| (tp.topic.as_str(), tp.partition)),
        );
        Ok(Core {
            cfg,
            identity,
            counting,
            parts: HashMap::default(),
            wal,
            producer: Arc::new(producer),
            metrics,
            assigned: HashSet::new(),
            unsettled,
            paused: false,
            offsets_seen,
            ends_at: None,
            ends_from: i64::MIN,
            revoked_ends: None,
            assigned_before: false,
            undated,
        })
    }

    /// The committed offsets of `partitions`: an errored partition, or a failed
    /// read, is `Committed::Error`, never "no offset".
    fn read_committed(
        &self,
        consumer: &BaseConsumer<AuditContext>,
        partitions: &[TopicPartition],
    ) -> HashMap<TopicPartition, Committed> {
        let mut tpl = TopicPartitionList::new();
        for tp in partitions {
            tpl.add_partition(&tp.topic, tp.partition);
        }
        let mut out: HashMap<TopicPartition, Committed> = partitions
            .iter()
            .map(|tp| (tp.clone(), Committed::Error))
            .collect();
        match consumer.committed_offsets(tpl, self.cfg.audit.publish_timeout) {
            Ok(c) => {
                for el in c.elements() {
                    let value = match (el.error(), el.offset()) {
                        (Err(e), _) => {
                            self.metrics.emit(
                                ServiceError::CommittedOffsets,
                                &e,
                                format_args!(
                                    "cannot read the committed offset of {} [{}]",
                                    el.topic(),
                                    el.partition()
                                ),
                            );
                            Committed::Error
                        }
                        (Ok(()), Offset::Offset(o)) => Committed::At(o),
                        (Ok(()), _) => Committed::None,
                    };
                    out.insert(TopicPartition::new(el.topic(), el.partition()), value);
                }
            }
            Err(e) => {
                self.metrics.emit(
                    ServiceError::CommittedOffsets,
                    &e,
                    format_args!(
                        "cannot read committed offsets of {} partitions",
                        partitions.len()
                    ),
                );
            }
        }
        out
    }

    /// Applies the restart rule (restart.rs) to every pending entry, in order.
    pub(crate) fn reconcile(&mut self, consumer: &BaseConsumer<AuditContext>, origin: Origin) {
        let entries: Vec<(u64, Vec<CommittedRange>)> = self
            .wal
            .pending_ids()
            .into_iter()
            .map(|id| (id, self.wal.ranges(id).unwrap_or_default().to_vec()))
            .collect();
        self.unsettled = None;
        if entries.is_empty() {
            return;
        }
        let mut partitions: Vec<TopicPartition> = entries
            .iter()
            .flat_map(|(_, ranges)| ranges.iter().map(CommittedRange::topic_partition))
            .collect();
        partitions.sort();
        partitions.dedup();
        let committed = self.read_committed(consumer, &partitions);
        let mut rule = RestartRule::new(origin, committed, self.assigned.clone());
        for (id, ranges) in entries {
            let mut decision = rule.decide(&ranges);
            if decision == Decision::Resend {
                let resent = self.wal.read(id).and_then(|e| {
                    tracing::info!(
                        id,
                        ?origin,
                        messages = e.messages.len(),
                        "resending pending WAL entry"
                    );
                    self.publish(consumer, &e).map(|()| e.messages.len())
                });
                match resent {
                    Ok(n) => {
                        self.metrics.published_entries.inc();
                        self.metrics.published_messages.inc_by(n as u64);
                        let _ = self.wal.mark_published(id);
                        rule.resent(&ranges);
                    }
                    Err(err) => {
                        tracing::warn!(id, error = %format!("{err:#}"), "resend failed");
                        decision = rule.resend_failed();
                    }
                }
            }
            self.metrics.restart_decision(origin, decision);
            match decision {
                Decision::Resend => {}
                Decision::AlreadyPublished => {
                    tracing::info!(id, "pending WAL entry was already published");
                    let _ = self.wal.mark_published(id);
                }
                Decision::Discard => {
                    tracing::info!(id, ?origin, "discarding pending WAL entry: its partitions are recounted from the committed offsets");
                    self.discard(id);
                }
                Decision::Keep => {
                    // The consumer is past the entry: dropping it would lose its
                    // counts. It and every later entry wait for the next attempt or
                    // the next revoke.
                    tracing::info!(id, "pending WAL entry kept: its outcome is not known yet");
                    self.unsettled = Some(Origin::AmbiguousThisSession);
                    break;
                }
            }
        }
        if origin == Origin::EarlierSession {
            // Every entry was settled; a producer recreated during a resend left
            // nothing ambiguous behind.
            self.unsettled = None;
        }
        self.update_wal_metrics();
    }

    /// Drops the assignment and its per-partition lag series, so /metrics does not
    /// keep reporting partitions another instance now owns.
    fn forget_assignment(&mut self) {
        for TopicPartition { topic, partition } in self.assigned.drain() {
            self.metrics
                .partition_lag
                .remove(&PartitionLabel { topic, partition });
        }
    }

    fn discard(&mut self, id: u64) {
        self.metrics.discarded_entries.inc();
        if let Err(e) = self.wal.discard(id) {
            self.metrics.emit(
                ServiceError::Wal,
                &e,
                format_args!("cannot mark WAL entry {id} discarded"),
            );
        }
    }

    fn on_assign(&mut self, consumer: &BaseConsumer<AuditContext>, tpl: &TopicPartitionList) {
        for el in tpl.elements() {
            self.assigned
                .insert(TopicPartition::new(el.topic(), el.partition()));
        }
        self.metrics
            .assigned_partitions
            .set(self.assigned.len() as i64);
        // Entries of an earlier session (a previous incarnation, a lost or failed
        // consumer) are settled before consumption of these partitions starts: a
        // resend commits their end offsets, which the assignment then starts from;
        // anything else is discarded and recounted.
        if self.wal.pending_count() > 0 {
            self.reconcile(consumer, Origin::EarlierSession);
        }
        self.unsettled = None;
        self.paused = false;
        // Statistics taken before now may carry ends of an earlier fetch (a partition
        // owned before) — not those of a consumer's first assignment: it fetched
        // nothing before, so its statistics have ends only from its own fetches, and
        // lag is known from the first statistics on (not one statistics interval and
        // fetch.wait.max.ms + 1 s later).
        if self.assigned_before {
            self.ends_from = now_ms();
        }
        self.assigned_before = true;
        // Each range starts at the committed offset, which is where the assignment
        // starts reading. Unknown (the read failed): the range's start says so, and
        // the restart rule never resends it.
        let partitions: Vec<TopicPartition> = tpl
            .elements()
            .iter()
            .map(|el| TopicPartition::new(el.topic(), el.partition()))
            .collect();
        let committed = self.read_committed(consumer, &partitions);
        self.alert_missing_offsets(&committed);
        for tp in partitions {
            let start = match committed.get(&tp) {
                Some(Committed::At(o)) => Some(*o),
                Some(Committed::None) => None,
                Some(Committed::Error) | None => Some(UNKNOWN_START),
            };
            let st = self
                .parts
                .entry(tp.topic)
                .or_default()
                .entry(tp.partition)
                .or_default();
            st.start = start;
            st.next = None;
            st.position = None;
        }
        self.restore_revoked_ends();
    }

    /// Before the parts are forgotten at a revoke: keeps their ends (all from the
    /// snapshot measured at `ends_at`, taken while they were assigned).
    fn keep_revoked_ends(&mut self) {
        let Some(at) = self.ends_at else { return };
        let ends = self
            .parts
            .iter()
            .flat_map(|(topic, parts)| {
                parts.iter().filter_map(move |(&partition, st)| {
                    st.ends
                        .map(|e| (TopicPartition::new(topic.as_str(), partition), e))
                })
            })
            .filter(|(tp, _)| self.assigned.contains(tp))
            .collect();
        self.revoked_ends = Some((at, ends));
    }

    /// After an assignment: a partition assigned again gets the ends it had at the
    /// revoke, and progress is dated by their measurement again (never later: the
    /// statistics since may be from before the assignment's first fetch). The ends
    /// were measured while the partition was fetched and the high watermark only
    /// grows, so lag 0 against them (read up to the committed offset) holds as of then.
    pub(crate) fn restore_revoked_ends(&mut self) {
        let Some((at, ends)) = self.revoked_ends.take() else {
            return;
        };
        let mut restored = false;
        for (tp, e) in ends {
            if let Some(st) = self
                .parts
                .get_mut(tp.topic.as_str())
                .and_then(|t| t.get_mut(&tp.partition))
            {
                st.ends = Some(e);
                restored = true;
            }
        }
        if restored {
            self.ends_at = Some(self.ends_at.map_or(at, |now_at| now_at.min(at)));
        }
    }

    /// An assigned partition without a committed offset although this instance saw
    /// one before: the group's offsets expired or were deleted, and the partition is
    /// about to be counted again from `auto.offset.reset`. Alert (metric and log).
    fn alert_missing_offsets(&mut self, committed: &HashMap<TopicPartition, Committed>) {
        for (TopicPartition { topic, partition }, c) in committed {
            if *c == Committed::None && self.offsets_seen.contains(topic, *partition) {
                self.metrics.committed_offsets_missing.inc();
                tracing::error!(
                    %topic,
                    partition,
                    group = %self.cfg.audit.group_id,
                    "no committed offset although one existed before: the group's offsets expired \
                     (offsets.retention.minutes) or were deleted; the partition is read again from \
                     auto.offset.reset and its retained messages are counted twice (see README, Operations)"
                );
            }
        }
        self.offsets_seen
            .insert_all(committed.iter().filter_map(|(tp, c)| {
                matches!(c, Committed::At(_)).then_some((tp.topic.as_str(), tp.partition))
            }));
    }

    /// After the consumer was lost: nothing counted since the last report can be
    /// committed any more.
    fn reset_after_consumer_loss(&mut self) {
        let _ = self.counting.drain(now_ms());
        self.parts.clear();
        self.revoked_ends = None;
        // The next consumer is a new client: it has fetched nothing yet.
        self.assigned_before = false;
        self.forget_assignment();
        self.paused = false;
        self.unsettled = (self.wal.pending_count() > 0).then_some(Origin::EarlierSession);
        self.metrics.assigned_partitions.set(0);
        self.metrics.paused.set(0);
    }

    fn on_revoke(&mut self, consumer: &BaseConsumer<AuditContext>, lost: bool) {
        if !lost {
            let deadline = Instant::now() + self.cfg.audit.revoke_timeout;
            self.update_positions(consumer);
            match self.write_report(Reason::Revoke) {
                Ok(_) => {}
                Err(e) => {
                    self.metrics.emit(
                        ServiceError::Wal,
                        &e,
                        format_args!("cannot write the revoke report"),
                    );
                }
            }
            while !self.publish_pending(consumer)
                && Instant::now() < deadline
                && self.unsettled.is_none()
            {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        // What could not be published now never will be by us: the next owner counts
        // these partitions again from their committed offsets.
        let left = self.wal.pending_ids();
        if !left.is_empty() || lost {
            // The in-memory counts of a lost assignment are void too.
            let _ = self.counting.drain(now_ms());
            for id in left {
                tracing::warn!(id, "discarding unpublished WAL entry at revoke");
                self.discard(id);
            }
        }
        self.unsettled = None;
        if lost {
            self.revoked_ends = None;
        } else {
            self.keep_revoked_ends();
        }
        self.forget_assignment();
        self.parts.clear();
        self.metrics.assigned_partitions.set(0);
        self.update_wal_metrics();
    }
}

/// How the consume loop ended.
pub(crate) enum LoopExit {
    Shutdown,
    /// The consumer hit a fatal error; run again with a new consumer and this core.
    ConsumerFailed(Box<Core>),
}

/// The blocking consume loop; returns after the shutdown report, or when the
/// consumer failed fatally.
///
/// Interval reports are published by a second thread: a Kafka transaction takes
/// ~100 ms (commit_transaction) and consumption goes on meanwhile. Both threads work on
/// the core under its mutex, so a rebalance callback (which runs inside `poll`) waits
/// for an in-flight transaction before it reports and lets partitions go, and the
/// shutdown report is published after it.
pub(crate) fn consume_loop(
    consumer: BaseConsumer<AuditContext>,
    cfg: Config,
    shutdown: CancellationToken,
    health: common::Health,
) -> anyhow::Result<LoopExit> {
    let exit = std::thread::scope(|s| -> anyhow::Result<LoopExit> {
        let (publish, requests) = sync_channel::<()>(1);
        let (c, h) = (&consumer, &health);
        std::thread::Builder::new()
            .name("audit-publish".into())
            .spawn_scoped(s, move || publish_loop(c, h, requests))
            .context("cannot start the publishing thread")?;
        // Returning drops `publish`, which ends the publishing thread.
        consume(&consumer, &cfg, &shutdown, &health, &publish)
    });
    // Dropping the consumer closes it; its revoke callback finds the core taken.
    drop(consumer);
    if matches!(exit, Ok(LoopExit::Shutdown)) {
        tracing::info!("audit service stopped");
    }
    exit
}

/// Publishes the pending WAL entries whenever the consume loop asks (after each
/// interval report); returns when the loop is gone or the core has been taken.
fn publish_loop(
    consumer: &BaseConsumer<AuditContext>,
    health: &common::Health,
    requests: Receiver<()>,
) {
    while requests.recv().is_ok() {
        let mut g = consumer.context().lock();
        let Some(core) = g.as_mut() else {
            return;
        };
        if core.publish_pending(consumer) {
            health.set_healthy();
        } else {
            health.set_unhealthy(format!(
                "{} WAL entries waiting to be published",
                core.wal.pending_count()
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
) -> anyhow::Result<LoopExit> {
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
    let feeder = ctx
        .lock()
        .as_ref()
        .expect("core present while running")
        .counting
        .feeder();
    while !cancelled {
        // Reading the clock costs as much as counting a message on some VMs: read it
        // once per batch of messages (observation time is then at most a few
        // hundred microseconds stale at full speed) and whenever the queue is idle.
        if since_clock >= CLOCK_EVERY {
            now = Instant::now();
            observed_at = now_ms();
            since_clock = 0;
            cancelled = shutdown.is_cancelled();
            if feeder.windows() >= a.max_windows_per_report {
                // Memory bound: report now rather than at the interval.
                next_report = now;
            }
        }
        since_clock += 1;
        if now >= next_report {
            next_report = now + a.report_interval;
            // Before any report: nothing counted under an incremental protocol is
            // published or committed.
            anyhow::ensure!(eager(consumer), "{NOT_EAGER}");
            let ends = ctx.ends.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let mut g = ctx.lock();
            let core = g.as_mut().expect("core present while running");
            core.update_ends(&ends);
            core.update_positions(consumer);
            if core.unsettled == Some(Origin::AmbiguousThisSession) && !core.assigned.is_empty() {
                core.reconcile(consumer, Origin::AmbiguousThisSession);
            }
            if let Err(e) = core.write_report(Reason::Interval) {
                health.set_unhealthy(format!("cannot write WAL: {e:#}"));
                // The drained counts are gone with the failed entry: read their
                // messages again, or the next entry's range would cover them uncounted.
                core.metrics.emit(
                    ServiceError::Wal,
                    &e,
                    format_args!("cannot write report; counting its messages again"),
                );
                if !core.rewind_unreported(consumer) {
                    tracing::error!("cannot rewind the consumer; recreating it");
                    let mut core = g.take().expect("core present while running");
                    drop(g);
                    core.reset_after_consumer_loss();
                    return Ok(LoopExit::ConsumerFailed(Box::new(core)));
                }
            } else {
                // Full means a request is already waiting: it publishes this entry too.
                let _ = publish.try_send(());
            }
            // Back-pressure: past the WAL's disk limit, stop reading until the audit
            // topic accepts entries again. Nothing is dropped.
            let over = core.wal.over_limit();
            if over != core.paused {
                if let Ok(assignment) = consumer.assignment() {
                    let res = if over {
                        consumer.pause(&assignment)
                    } else {
                        consumer.resume(&assignment)
                    };
                    if let Err(e) = res {
                        tracing::warn!(error = %e, "cannot pause/resume");
                    } else {
                        if !over {
                            // The ends of statistics from before the first fetch after
                            // the resume are those of before the pause.
                            core.ends_from = now_ms();
                        }
                        core.paused = over;
                        core.metrics.paused.set(over as i64);
                        tracing::warn!(
                            paused = over,
                            pending_bytes = core.wal.pending_bytes(),
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
        // Non-blocking while messages flow; on the first empty poll let the queue
        // refill; block only when it is still empty after that.
        let polled = match consumer.poll(Duration::ZERO) {
            None if !dry => {
                dry = true;
                feeder.flush();
                since_clock = CLOCK_EVERY;
                std::thread::sleep(REFILL);
                continue;
            }
            None => consumer.poll(POLL),
            some => some,
        };
        match polled {
            Some(Ok(m)) => {
                dry = false;
                feeder.record(&m, observed_at);
            }
            Some(Err(KafkaError::PartitionEOF(_))) | None => {
                // Idle: publish the consumption metrics.
                feeder.flush();
                since_clock = CLOCK_EVERY;
            }
            Some(Err(e)) => {
                let mut g = ctx.lock();
                match g.as_ref() {
                    Some(core) => {
                        core.metrics
                            .emit(ServiceError::Consume, &e, format_args!("consumer error"))
                    }
                    None => tracing::warn!(error = %e, "consumer error"),
                }
                if let Some((code, reason)) = consumer.client().fatal_error() {
                    // E.g. a static member fenced after a coordinator restart: this
                    // consumer can never work again. Its uncommitted counts are void
                    // (recounted from the committed offsets by the next consumer);
                    // pending WAL entries go through the restart rule.
                    tracing::error!(%code, %reason, "fatal consumer error; recreating the consumer");
                    let mut core = g.take().expect("core present while running");
                    drop(g);
                    core.reset_after_consumer_loss();
                    return Ok(LoopExit::ConsumerFailed(Box::new(core)));
                }
            }
        }
    }
    // Shutdown: report, publish (bounded), then leave.
    {
        let mut g = ctx.lock();
        let core = g.as_mut().expect("core present while running");
        core.update_positions(consumer);
        if let Err(e) = core.write_report(Reason::Shutdown) {
            tracing::error!(error = %format!("{e:#}"), "cannot write the shutdown report");
        }
        let deadline = Instant::now() + a.publish_timeout;
        // Entries of an earlier session are only settled at an assignment: leave
        // them to the next start instead of waiting out the deadline.
        while core.unsettled != Some(Origin::EarlierSession)
            && !core.publish_pending(consumer)
            && Instant::now() < deadline
        {
            if core.unsettled == Some(Origin::AmbiguousThisSession) {
                core.reconcile(consumer, Origin::AmbiguousThisSession);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        if core.wal.pending_count() > 0 {
            tracing::warn!(
                pending = core.wal.pending_count(),
                "WAL entries left unpublished at shutdown; the restart rule settles them"
            );
        }
        // The revoke callback during close has nothing left to report.
        *g = None;
    }
    Ok(LoopExit::Shutdown)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Validation refuses `group.protocol = consumer`; should such a consumer get
    /// through anyway (a property the validation does not know about), the loop
    /// refuses the protocol the client really uses before it counts anything.
    #[test]
    fn an_incremental_consumer_is_refused_after_subscribe() {
        let wal = tempfile::tempdir().unwrap();
        let mut cfg = Config::default();
        cfg.kafka.bootstrap_servers = testkit::kafka_a();
        cfg.kafka
            .consumer
            .insert("group.protocol".into(), "consumer".into());
        let a = &mut cfg.audit;
        a.instance_id = testkit::unique("proto");
        a.group_id = testkit::unique("proto-group");
        a.topics = vec![testkit::unique("proto-topic")];
        a.mode = crate::Mode::AtLeastOnce;
        a.wal_dir = wal.path().to_path_buf();
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = Metrics::new(&mut registry);
        let (w, _) = Wal::open(&cfg.audit.instance_wal_dir(), Default::default()).unwrap();
        let producer = crate::publish::create_producer(&cfg).unwrap();
        let core = Core::new(cfg.clone(), w, metrics, producer).unwrap();
        // librdkafka refuses `session.timeout.ms` (one of our defaults) with this
        // protocol; without it the consumer is created.
        let mut client = consumer_client_config(&cfg);
        client.remove("session.timeout.ms");
        let consumer: BaseConsumer<AuditContext> = client
            .create_with_context(AuditContext {
                core: Mutex::new(Some(core)),
                ends: Mutex::new(EndsSnapshot::default()),
                fetch_age_ms: fetch_age_ms(&cfg),
                incremental: AtomicBool::new(false),
            })
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
        cfg.kafka.bootstrap_servers = testkit::kafka_a();
        let a = &mut cfg.audit;
        a.instance_id = testkit::unique("rebalance-error");
        a.group_id = testkit::unique("rebalance-error-group");
        a.topics = vec!["t".into()];
        a.mode = crate::Mode::AtLeastOnce;
        a.wal_dir = wal.path().to_path_buf();
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = Metrics::new(&mut registry);
        let (w, _) = Wal::open(&cfg.audit.instance_wal_dir(), Default::default()).unwrap();
        let producer = crate::publish::create_producer(&cfg).unwrap();
        let core = Core::new(cfg.clone(), w, metrics, producer).unwrap();
        let consumer = create_consumer(&cfg, core).unwrap();
        {
            let mut g = consumer.context().lock();
            let core = g.as_mut().unwrap();
            core.assigned.insert(TopicPartition::new("t", 0));
            core.parts.entry("t".into()).or_default().insert(
                0,
                PartState {
                    start: Some(10),
                    next: Some(20),
                    ..Default::default()
                },
            );
            core.wal
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
        let g = consumer.context().lock();
        let core = g.as_ref().unwrap();
        assert!(core.assigned.is_empty(), "assignment kept");
        assert!(core.parts.is_empty(), "positions kept");
        assert_eq!(core.wal.pending_count(), 0, "this session's entry kept");
    }

    /// A core for tests that call its methods directly (no consumer polled).
    fn core_for(name: &str, wal: &std::path::Path) -> Core {
        let mut cfg = Config::default();
        cfg.kafka.bootstrap_servers = testkit::kafka_a();
        let a = &mut cfg.audit;
        a.instance_id = testkit::unique(name);
        a.group_id = testkit::unique(name);
        a.topics = vec!["t".into()];
        a.mode = crate::Mode::AtLeastOnce;
        a.wal_dir = wal.to_path_buf();
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = Metrics::new(&mut registry);
        let (w, _) = Wal::open(&cfg.audit.instance_wal_dir(), Default::default()).unwrap();
        let producer = crate::publish::create_producer(&cfg).unwrap();
        Core::new(cfg, w, metrics, producer).unwrap()
    }

    /// Assigns `partitions` of topic "t" to `core`, each read from offset 0 on.
    fn assign_from_start(core: &mut Core, partitions: &[i32]) {
        for &p in partitions {
            core.assigned.insert(TopicPartition::new("t", p));
            core.parts.entry("t".into()).or_default().insert(
                p,
                PartState {
                    start: Some(0),
                    ..Default::default()
                },
            );
        }
    }

    /// The progress messages of `core`'s pending WAL entries, oldest first.
    fn progress_reports(core: &Core) -> Vec<audit_lib::AuditMessage> {
        core.wal
            .pending_entries()
            .unwrap()
            .iter()
            .flat_map(|e| &e.messages)
            .map(|m| audit_lib::AuditMessage::from_json(m.payload.as_bytes()).unwrap())
            .filter(|m| m.as_progress().is_some())
            .collect()
    }

    fn snapshot(at: i64, ends: &[(i32, i64)]) -> EndsSnapshot {
        EndsSnapshot {
            at: Some(at),
            ends: ends
                .iter()
                .map(|&(p, end)| (TopicPartition::new("t", p), LogEnds { low: 0, end }))
                .collect(),
        }
    }

    /// Lag 0 holds as of when librdkafka's statistics measured the high watermark,
    /// not as of the report: a burst written after the statistics, of which the
    /// consumer has read part (position past the stale end, lag clamped to 0) or
    /// nothing (position at the stale end), is unread at the report. Progress is
    /// dated by the measurement, so the engine's "read past emitted_at" never covers
    /// the burst. Before, the report was dated when it was made (a false "final").
    #[test]
    fn lag_zero_is_dated_by_when_the_log_ends_were_measured() {
        let wal = tempfile::tempdir().unwrap();
        let mut core = core_for("lag-dated", wal.path());
        assign_from_start(&mut core, &[0, 1]);
        let measured = now_ms() - 60_000;
        core.update_ends(&snapshot(measured, &[(0, 20), (1, 5)]));
        // Since then: partition 0 got a burst, the consumer read 5 of its records
        // (position 25 past the stale end 20); partition 1 got records not read yet
        // (position 5 = the stale end).
        core.parts.get_mut("t").unwrap().get_mut(&0).unwrap().next = Some(25);
        core.parts.get_mut("t").unwrap().get_mut(&1).unwrap().next = Some(5);
        assert!(core.write_report(Reason::Interval).unwrap());
        let reports = progress_reports(&core);
        assert_eq!(reports.len(), 1);
        let lags: Vec<_> = reports[0]
            .as_progress()
            .unwrap()
            .iter()
            .map(|p| (p.partition, p.next_offset, p.lag))
            .collect();
        assert_eq!(lags, vec![(0, 25, Some(0)), (1, 5, Some(0))]);
        // reverted (dated when the report was made): emitted_at = now > measured
        assert!(
            reports[0].emitted_at <= measured,
            "lag 0 dated {} ms after the ends were measured",
            reports[0].emitted_at - measured
        );

        // While paused, fetching stops: a newer snapshot still carries the ends of
        // before the pause, with a new time. It is not taken.
        core.paused = true;
        core.update_ends(&snapshot(now_ms(), &[(0, 25), (1, 5)]));
        assert_eq!(core.ends_at, Some(measured));
        // After the resume (or an assignment), only statistics measured after it.
        core.paused = false;
        core.ends_from = now_ms();
        core.update_ends(&snapshot(core.ends_from - 1, &[(0, 25), (1, 5)]));
        assert_eq!(core.ends_at, Some(measured));
        // A partition the new snapshot lacks has no known end: lag null, never the
        // old end with the new date.
        let fresh = core.ends_from;
        core.update_ends(&snapshot(fresh, &[(0, 30)]));
        assert_eq!(core.ends_at, Some(fresh));
        core.parts.get_mut("t").unwrap().get_mut(&0).unwrap().next = Some(30);
        assert!(core.write_report(Reason::Interval).unwrap());
        let reports = progress_reports(&core);
        let last = reports.last().unwrap();
        let lags: Vec<_> = last
            .as_progress()
            .unwrap()
            .iter()
            .map(|p| (p.partition, p.lag))
            .collect();
        assert_eq!(lags, vec![(0, Some(0)), (1, None)]);
        assert_eq!(last.emitted_at, fresh);
    }

    /// An eager rebalance revokes every partition and assigns them again: the ends
    /// measured while they were fetched before the revoke are given back (dated as
    /// then), so lag stays known and 0 for a partition read to its end instead of
    /// null (its windows back to pending) until statistics measured after the
    /// assignment. Ends of partitions not assigned again are not handed out.
    #[test]
    fn a_partition_assigned_again_keeps_the_ends_measured_before_the_revoke() {
        let wal = tempfile::tempdir().unwrap();
        let mut core = core_for("lag-reassigned", wal.path());
        assign_from_start(&mut core, &[0, 1]);
        let measured = now_ms() - 60_000;
        core.update_ends(&snapshot(measured, &[(0, 20), (1, 5)]));
        // What on_revoke and on_assign do with the parts, without a consumer.
        core.keep_revoked_ends();
        core.forget_assignment();
        core.parts.clear();
        core.ends_from = now_ms();
        // Statistics between the revoke and the assignment (no parts to apply to).
        core.update_ends(&snapshot(core.ends_from, &[(0, 20), (1, 5)]));
        core.assigned.insert(TopicPartition::new("t", 0));
        core.parts.entry("t".into()).or_default().insert(
            0,
            PartState {
                start: Some(20),
                ..Default::default()
            },
        );
        core.restore_revoked_ends();
        assert!(core.write_report(Reason::Interval).unwrap());
        let reports = progress_reports(&core);
        let last = reports.last().unwrap();
        let lags: Vec<_> = last
            .as_progress()
            .unwrap()
            .iter()
            .map(|p| (p.partition, p.next_offset, p.lag))
            .collect();
        // without the restored ends: [(0, 20, None)]
        assert_eq!(lags, vec![(0, 20, Some(0))]);
        assert_eq!(last.emitted_at, measured);
    }

    /// Before its first statistics an auditor reports lag null; those reports must
    /// not be dated later than the first one with statistics, or the store (which
    /// keeps the progress of the latest `emitted_at`) drops the known lags as older
    /// and keeps the nulls: windows pending until the dating catches up (seen in the
    /// e2e region_only test).
    #[test]
    fn reports_before_the_statistics_are_not_dated_after_the_first_statistics() {
        let wal = tempfile::tempdir().unwrap();
        let mut core = core_for("lag-undated", wal.path());
        core.assigned.insert(TopicPartition::new("t", 0));
        core.parts.entry("t".into()).or_default().insert(
            0,
            PartState {
                start: Some(0),
                next: Some(5),
                ..Default::default()
            },
        );
        assert!(core.write_report(Reason::Interval).unwrap());
        // The first statistics, emitted and seen right after that report.
        let now = now_ms();
        let at = measured_at(now, now / 1000, fetch_age_ms(&core.cfg));
        core.update_ends(&snapshot(at, &[(0, 6)]));
        core.parts.get_mut("t").unwrap().get_mut(&0).unwrap().next = Some(6);
        assert!(core.write_report(Reason::Interval).unwrap());
        let reports = progress_reports(&core);
        let dates: Vec<_> = reports
            .iter()
            .map(|m| (m.emitted_at, m.as_progress().unwrap()[0].lag))
            .collect();
        assert_eq!(dates[1].1, Some(0));
        // reverted (dated when made before the statistics): the first is the later
        assert!(dates[0].0 <= dates[1].0, "{dates:?}");
    }
}
