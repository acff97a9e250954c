//! Replication evidence (issue 28): how far the replicators named in
//! `[[audit.replicators]]` have copied this cluster's partitions, read beside the
//! consumption and published with each report as progress of the tier
//! `replicator:<name>` (docs/audit-message-v1.md, Replication evidence). serve proves a
//! loss with it before the window is final (docs/web.md, Replication evidence).
//!
//! - `{ consumer_group = "g" }`: the group's committed offsets of the partitions this
//!   instance audits, read every report interval (an OffsetFetch, without joining the
//!   group). A replicator commits an offset once every record before it is written
//!   downstream, so the committed offset is the next one to copy.
//! - `{ mirror_maker2 = { target = "agg" } }`: MirrorMaker 2's offset syncs, read as
//!   they come from `mm2-offset-syncs.agg.internal` on this cluster. A sync
//!   (upstream offset U → downstream offset D) is written once the copy of U is
//!   acknowledged by the target, and MirrorMaker 2 copies a partition in order, so
//!   everything up to U is copied: the next offset to copy is U + 1.
//!
//! Each reader runs on a thread of its own, so a slow coordinator or broker never
//! holds the consumption back; a report takes the latest of what they read. Evidence
//! is dated by when it was read (after the offsets were committed or the sync
//! written), never earlier.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use audit_lib::TopicPartition;
use common::now_ms;
use common::replication::Replicator;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::config::Config;
use crate::metrics::{Metrics, ServiceError};

/// Most partitions one reader keeps evidence for: an offset-syncs topic is writable
/// by others, and a flood of syncs for made-up partitions must not grow without
/// bound (past it, syncs for new partitions are counted as rejected).
const MAX_PARTITIONS: usize = 1_000_000;

/// Readings kept per partition while they wait to be published (a reader reads every
/// 250 ms or more: 64 cover the default evidence age many times over).
const MAX_READINGS: usize = 64;

/// What one replicator has copied: per partition, each next offset to copy read
/// lately with when it was first read (epoch ms), oldest first.
type Copied = HashMap<TopicPartition, VecDeque<(i64, i64)>>;

/// The replication evidence of every configured replicator, shared between the
/// readers (writers) and the reports (readers).
#[derive(Clone, Default)]
pub(crate) struct Evidence {
    /// One slot per `[[audit.replicators]]` entry, in order.
    copied: Arc<Vec<Mutex<Copied>>>,
    /// The partitions this instance audits now: the consumer-group readers ask for
    /// these.
    wanted: Arc<Mutex<Vec<TopicPartition>>>,
}

impl Evidence {
    fn new(replicators: usize) -> Evidence {
        Evidence {
            copied: Arc::new((0..replicators).map(|_| Mutex::default()).collect()),
            wanted: Arc::default(),
        }
    }

    /// The partitions audited now (set at every report).
    pub(crate) fn want(&self, partitions: Vec<TopicPartition>) {
        *self.wanted.lock().unwrap_or_else(|e| e.into_inner()) = partitions;
    }

    /// What replicator `i` had copied of `partitions` as of `until` (epoch ms): per
    /// partition the furthest position read at or before it, and when it was first
    /// read — (partition, next offset to copy, read at). Older readings are let go.
    ///
    /// Evidence is published `[audit] replication_evidence_age` late on purpose: the
    /// downstream auditor's "read everything" is dated by its statistics, seconds
    /// behind its reports, and can only prove a loss with evidence older than that.
    pub(crate) fn of<'a>(
        &self,
        i: usize,
        partitions: impl Iterator<Item = &'a TopicPartition>,
        until: i64,
    ) -> Vec<(TopicPartition, i64, i64)> {
        let Some(slot) = self.copied.get(i) else {
            return Vec::new();
        };
        let mut copied = slot.lock().unwrap_or_else(|e| e.into_inner());
        partitions
            .filter_map(|tp| {
                let readings = copied.get_mut(tp)?;
                let n = readings.iter().take_while(|&&(_, at)| at <= until).count();
                // Keep the one in use: the next ones become due after it.
                readings.drain(..n.saturating_sub(1));
                let &(o, at) = readings.front().filter(|&&(_, at)| at <= until)?;
                Some((tp.clone(), o, at))
            })
            .collect()
    }

    fn record(&self, i: usize, tp: TopicPartition, next: i64, at: i64) -> bool {
        let mut copied = self.copied[i].lock().unwrap_or_else(|e| e.into_inner());
        if copied.len() >= MAX_PARTITIONS && !copied.contains_key(&tp) {
            return false;
        }
        let readings = copied.entry(tp).or_default();
        // The same position read again keeps the time it was first read (copied by
        // then: the tighter evidence). Copies do not disappear by the replicator's
        // doing: a lower offset (a replicator that restarted from an older commit and
        // copies again) does not take back what was copied before.
        if readings.back().is_none_or(|&(o, _)| next > o) {
            if readings.len() >= MAX_READINGS {
                readings.pop_front();
            }
            readings.push_back((next, at));
        }
        true
    }
}

/// The reader threads; dropping this stops and joins them.
pub(crate) struct Readers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    pub(crate) evidence: Evidence,
}

impl Drop for Readers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Starts a reader per configured replicator (none: no thread, empty evidence).
pub(crate) fn start(cfg: &Config, metrics: &Metrics) -> anyhow::Result<Readers> {
    let replicators = &cfg.audit.replicators;
    let evidence = Evidence::new(replicators.len());
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for (i, r) in replicators.iter().enumerate() {
        let (cfg, metrics, evidence, stop) =
            (cfg.clone(), metrics.clone(), evidence.clone(), stop.clone());
        let name = format!("evidence-{i}");
        let thread = match r.clone() {
            Replicator::ConsumerGroup(group) => {
                let consumer = group_reader(&cfg, &group)?;
                std::thread::Builder::new()
                    .name(name)
                    .spawn(move || read_committed(&cfg, &consumer, i, &evidence, &stop, &metrics))?
            }
            Replicator::SameCluster => continue,
            Replicator::MirrorMaker2(_) => {
                let topic = r.offset_syncs_topic().expect("MirrorMaker 2");
                let consumer = syncs_reader(&cfg)?;
                std::thread::Builder::new()
                    .name(name)
                    .spawn(move || read_syncs(&consumer, &topic, i, &evidence, &stop, &metrics))?
            }
        };
        threads.push(thread);
    }
    Ok(Readers {
        stop,
        threads,
        evidence,
    })
}

/// A consumer of group `group` that never joins it: only its committed offsets are
/// read.
fn group_reader(cfg: &Config, group: &str) -> anyhow::Result<BaseConsumer> {
    Ok(cfg
        .kafka
        .client_config_with_defaults(
            common::KafkaRole::Consumer,
            &[],
            &[
                ("group.id", group),
                ("enable.auto.commit", "false"),
                ("enable.auto.offset.store", "false"),
            ],
        )
        .create()?)
}

/// A consumer that assigns itself the offset-syncs topic and commits nothing.
fn syncs_reader(cfg: &Config) -> anyhow::Result<BaseConsumer> {
    let group = format!("{}-offset-syncs", cfg.audit.group_id);
    Ok(cfg
        .kafka
        .client_config_with_defaults(
            common::KafkaRole::Consumer,
            &[],
            &[
                ("group.id", &group),
                ("enable.auto.commit", "false"),
                ("enable.auto.offset.store", "false"),
                // Syncs are written with transactions off; read what is there.
                ("isolation.level", "read_uncommitted"),
            ],
        )
        .create()?)
}

/// Sleeps up to `d`, waking early when stopped. False when stopped.
fn pause(stop: &AtomicBool, d: Duration) -> bool {
    let until = Instant::now() + d;
    while Instant::now() < until {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100).min(until - Instant::now()));
    }
    !stop.load(Ordering::Relaxed)
}

fn read_committed(
    cfg: &Config,
    consumer: &BaseConsumer,
    i: usize,
    evidence: &Evidence,
    stop: &AtomicBool,
    metrics: &Metrics,
) {
    // Fresh evidence proves more: what the replicator may still hold back is counted
    // from its position when read.
    let every =
        (cfg.audit.report_interval / 2).clamp(Duration::from_millis(250), Duration::from_secs(5));
    let timeout = cfg
        .audit
        .publish_timeout
        .min(every.max(Duration::from_secs(5)));
    while pause(stop, every) {
        let wanted = evidence
            .wanted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if wanted.is_empty() {
            continue;
        }
        let mut tpl = TopicPartitionList::new();
        for tp in &wanted {
            tpl.add_partition(&tp.topic, tp.partition);
        }
        match consumer.committed_offsets(tpl, timeout) {
            Ok(c) => {
                // Read after the response: the offsets were committed before.
                let at = now_ms();
                for el in c.elements() {
                    if let (Ok(()), Offset::Offset(o)) = (el.error(), el.offset()) {
                        evidence.record(i, TopicPartition::new(el.topic(), el.partition()), o, at);
                    }
                }
            }
            Err(e) => metrics.emit(
                ServiceError::ReplicationEvidence,
                &e,
                format_args!("cannot read the replicator's committed offsets"),
            ),
        }
    }
}

fn read_syncs(
    consumer: &BaseConsumer,
    topic: &str,
    i: usize,
    evidence: &Evidence,
    stop: &AtomicBool,
    metrics: &Metrics,
) {
    // Assign every partition of the syncs topic from its start, once it exists.
    loop {
        match consumer.fetch_metadata(Some(topic), Duration::from_secs(10)) {
            Ok(md) => {
                let parts: Vec<i32> = md
                    .topics()
                    .iter()
                    .filter(|t| t.error().is_none())
                    .flat_map(|t| t.partitions().iter().map(|p| p.id()))
                    .collect();
                if !parts.is_empty() {
                    let mut tpl = TopicPartitionList::new();
                    for p in parts {
                        let _ = tpl.add_partition_offset(topic, p, Offset::Beginning);
                    }
                    match consumer.assign(&tpl) {
                        Ok(()) => break,
                        Err(e) => metrics.emit(
                            ServiceError::ReplicationEvidence,
                            &e,
                            format_args!("cannot assign the offset-syncs topic {topic}"),
                        ),
                    }
                } else {
                    tracing::info!(
                        topic,
                        "offset-syncs topic not there yet (is MirrorMaker 2 running?)"
                    );
                }
            }
            Err(e) => metrics.emit(
                ServiceError::ReplicationEvidence,
                &e,
                format_args!("cannot read the metadata of the offset-syncs topic {topic}"),
            ),
        }
        if !pause(stop, Duration::from_secs(5)) {
            return;
        }
    }
    while !stop.load(Ordering::Relaxed) {
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Ok(m)) => {
                let at = now_ms();
                let key = m.key().unwrap_or_default();
                match common::replication::parse_offset_sync(key, m.payload().unwrap_or_default()) {
                    Some((topic, partition, upstream)) => {
                        let tp = TopicPartition::new(topic, partition);
                        if !evidence.record(i, tp, upstream.saturating_add(1), at) {
                            metrics.replication_evidence_rejected.inc();
                        }
                    }
                    None => {
                        metrics.replication_evidence_rejected.inc();
                        tracing::debug!(
                            topic,
                            partition = m.partition(),
                            offset = m.offset(),
                            "not an offset sync: left out"
                        );
                    }
                }
            }
            Some(Err(e)) => {
                metrics.emit(
                    ServiceError::ReplicationEvidence,
                    &e,
                    format_args!("cannot read the offset-syncs topic {topic}"),
                );
                if !pause(stop, Duration::from_secs(1)) {
                    return;
                }
            }
        }
    }
}

/// The topic a published audit message goes to (issue 43): replication evidence (a
/// progress report of a `replicator:` tier) to `[audit] evidence_topic`, which only
/// auditors may write and the collector takes evidence from alone; everything else to
/// the audit topic. Both in the report's one transaction. Only an auditor with
/// replicators publishes evidence, so without any nothing is parsed here.
pub(crate) fn destination<'a>(audit: &'a crate::config::AuditConfig, payload: &str) -> &'a str {
    #[derive(serde::Deserialize)]
    struct Tier<'p> {
        #[serde(borrow)]
        tier: std::borrow::Cow<'p, str>,
    }
    let evidence = !audit.replicators.is_empty()
        && serde_json::from_str::<Tier>(payload)
            .is_ok_and(|t| common::replication::is_evidence_tier(&t.tier));
    if evidence {
        &audit.evidence_topic
    } else {
        &audit.audit_topic
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_is_the_furthest_copy_read_by_then_dated_by_its_first_reading() {
        let e = Evidence::new(1);
        let tp = TopicPartition::new("t", 0);
        let of = |until| e.of(0, [tp.clone()].iter(), until);
        assert!(e.record(0, tp.clone(), 10, 100));
        assert!(e.record(0, tp.clone(), 10, 150), "same position read again");
        assert!(e.record(0, tp.clone(), 5, 200), "a lower position");
        assert!(e.record(0, tp.clone(), 12, 300));
        assert_eq!(of(99), vec![], "nothing read by then");
        assert_eq!(of(250), vec![(tp.clone(), 10, 100)]);
        assert_eq!(of(300), vec![(tp.clone(), 12, 300)]);
        // Older readings are gone once a later one is due.
        assert_eq!(of(250), vec![]);
        assert!(e.of(1, std::iter::empty(), 0).is_empty());
        for x in 13..13 + MAX_READINGS as i64 + 10 {
            e.record(0, tp.clone(), x, 400 + x);
        }
        assert_eq!(e.copied[0].lock().unwrap()[&tp].len(), MAX_READINGS);
    }

    /// Issue 43: the evidence of the replicators goes to the evidence topic, the
    /// auditor's own counts and progress to the audit topic.
    #[test]
    fn evidence_is_published_to_the_evidence_topic_only() {
        use audit_lib::{AuditMessage, Identity, PartitionProgress};
        let progress = |tier: &str| {
            AuditMessage::progress(
                &Identity::new(tier, "dc1", "h"),
                "orders",
                vec![PartitionProgress {
                    partition: 0,
                    next_offset: 5,
                    record_time: None,
                    lag: Some(0),
                    max_record_time: None,
                    log_append_time: false,
                }],
                1,
            )
            .to_json()
        };
        let mut audit = crate::config::AuditConfig::default();
        let evidence = progress("replicator:group/mirror");
        assert_eq!(
            destination(&audit, &evidence),
            "_kafka_audit",
            "no replicators"
        );
        audit.replicators = vec![Replicator::ConsumerGroup("mirror".into())];
        assert_eq!(destination(&audit, &evidence), "_kafka_audit_evidence");
        assert_eq!(destination(&audit, &progress("regional")), "_kafka_audit");
        assert_eq!(destination(&audit, "not json"), "_kafka_audit");
    }
}
