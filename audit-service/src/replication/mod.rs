//! Replication evidence (rule 0, docs/design.md §6): how far the replicators named in
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
//!
//! A position is the latest one read, not the largest, and one the auditor's own
//! measurement of the log contradicts is dropped (`evidence.rs`).

mod evidence;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use audit_lib::{AuditMessage, TopicPartition};
use common::now_ms;
use common::replication::Replicator;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::auditor::Auditor;
use crate::config::{AuditConfig, Config};
use crate::metrics::{Metrics, ServiceError};

pub(crate) use evidence::DropReason;
use evidence::{Evidence, Measured};

/// The reader threads; dropping this stops and joins them.
pub(crate) struct Readers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    evidence: Evidence,
}

impl Drop for Readers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Readers {
    /// The evidence messages of a report made at `now`: per replicator, what it had
    /// copied of the partitions `auditor` owns, `[audit] replication_evidence_age`
    /// before `now`, checked against the log ends the auditor measured. What the check
    /// drops is counted. The owned partitions are what the consumer-group readers read
    /// next.
    pub(crate) fn report(
        &self,
        cfg: &Config,
        auditor: &Auditor,
        now: i64,
        metrics: &Metrics,
    ) -> Vec<AuditMessage> {
        let assigned: Vec<(TopicPartition, Option<Measured>)> = auditor
            .assigned()
            .iter()
            .map(|tp| {
                let m = auditor.measured(tp).map(|(e, at)| Measured {
                    low: e.low,
                    end: e.end,
                    at,
                });
                (tp.clone(), m)
            })
            .collect();
        let until = now.saturating_sub(
            i64::try_from(cfg.audit.replication_evidence_age.as_millis()).unwrap_or(i64::MAX),
        );
        let mut messages = Vec::new();
        for (i, r) in cfg.audit.replicators.iter().enumerate() {
            let Some(tier) = r.evidence_tier() else {
                continue;
            };
            let (copied, dropped) = self.evidence.of(i, &assigned, until);
            for d in dropped {
                count_dropped(metrics, d.reason, &tier, &d.partition, d.position);
            }
            messages.extend(auditor.evidence(&tier, copied));
        }
        self.evidence
            .want(assigned.into_iter().map(|(tp, _)| tp).collect());
        messages
    }
}

/// Counts replication evidence of `tier` for `tp` at `position` dropped for `reason`
/// and logs it (`Metrics::evidence_dropped` says when).
fn count_dropped(
    metrics: &Metrics,
    reason: DropReason,
    tier: &str,
    tp: &TopicPartition,
    position: i64,
) {
    let held_back = metrics.evidence_dropped(reason.as_str());
    let (topic, partition) = (tp.topic.as_str(), tp.partition);
    let what = match reason {
        DropReason::NotAudited => {
            // MirrorMaker 2 may copy many more topics than this auditor audits.
            tracing::debug!(
                tier,
                topic,
                partition,
                "offset sync of a topic not audited here: left out"
            );
            return;
        }
        DropReason::PositionBackwards => {
            "the replicator's position went backwards: it started again (a recreated topic, \
             a reset group); the lower position replaces the evidence before it"
        }
        DropReason::PastLogEnd => {
            "the replicator's position is past the log end this auditor measured after \
             reading it: the log went back (unclean leader election, a recreated topic) or \
             the position is made up; the partition's evidence read by then is dropped"
        }
        DropReason::LogStartBackwards => {
            "the partition's log start moved backwards: the topic was recreated; the \
             evidence of all its partitions is dropped"
        }
        DropReason::TopicNameTooLong => "a topic name longer than Kafka's 249 bytes: not evidence",
        DropReason::OverLimit => {
            "the replicator's evidence holds as many partitions or bytes as it may: a new \
             partition is left out"
        }
    };
    if let Some(held_back) = held_back {
        let reason = reason.as_str();
        tracing::warn!(tier, topic, partition, position, reason, held_back, "{what}");
    }
}

/// The topics this auditor audits, as `kafka::topics::resolve_topics` selects them
/// (configured names and regex matches, minus exclusions, internal topics and its own
/// topics): offset syncs of other topics are not kept.
struct AuditedTopics {
    names: std::collections::HashSet<String>,
    include: Vec<regex::Regex>,
    exclude: Vec<regex::Regex>,
    own: [String; 2],
}

impl AuditedTopics {
    fn new(a: &AuditConfig) -> anyhow::Result<AuditedTopics> {
        let compile = |rs: &[String]| -> anyhow::Result<Vec<regex::Regex>> {
            Ok(rs
                .iter()
                .map(|r| regex::Regex::new(r))
                .collect::<Result<_, _>>()?)
        };
        Ok(AuditedTopics {
            names: a.topics.iter().cloned().collect(),
            include: compile(&a.topic_regex)?,
            exclude: compile(&a.exclude_regex)?,
            own: [a.audit_topic.clone(), a.evidence_topic.clone()],
        })
    }

    fn contains(&self, topic: &str) -> bool {
        (self.names.contains(topic) || self.include.iter().any(|r| r.is_match(topic)))
            && !topic.starts_with("__")
            && !self.own.iter().any(|t| t == topic)
            && !self.exclude.iter().any(|r| r.is_match(topic))
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
                let audited = AuditedTopics::new(&cfg.audit)?;
                let tier = r.evidence_tier().unwrap_or_default();
                std::thread::Builder::new().name(name).spawn(move || {
                    let syncs = Syncs {
                        topic: &topic,
                        tier,
                        audited: &audited,
                        i,
                        evidence: &evidence,
                        metrics: &metrics,
                    };
                    read_syncs(&consumer, &syncs, &stop)
                })?
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
    let tier = cfg.audit.replicators[i].evidence_tier().unwrap_or_default();
    while pause(stop, every) {
        let wanted = evidence.wanted();
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
                        let tp = TopicPartition::new(el.topic(), el.partition());
                        if let Some(why) = evidence.record(i, tp.clone(), o, at) {
                            count_dropped(metrics, why, &tier, &tp, o);
                        }
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

/// What the offset-syncs reader of replicator `i` reads from and writes to.
struct Syncs<'a> {
    topic: &'a str,
    /// Its evidence tier (for the log).
    tier: String,
    audited: &'a AuditedTopics,
    i: usize,
    evidence: &'a Evidence,
    metrics: &'a Metrics,
}

impl Syncs<'_> {
    /// One record of the offset-syncs topic, read at `at`, in log order: the latest
    /// sync of a partition is its evidence. False: not an offset sync.
    fn take(&self, key: &[u8], value: &[u8], at: i64) -> bool {
        let Some((topic, partition, upstream)) = common::replication::parse_offset_sync(key, value)
        else {
            return false;
        };
        let tp = TopicPartition::new(topic, partition);
        let next = upstream.saturating_add(1);
        let why = if topic.len() > evidence::MAX_TOPIC_NAME || self.audited.contains(topic) {
            self.evidence.record(self.i, tp.clone(), next, at)
        } else {
            Some(DropReason::NotAudited)
        };
        if let Some(why) = why {
            // A shortened name in the log: a made-up one may be 64 KiB.
            let name: String = tp.topic.chars().take(MAX_LOGGED_NAME).collect();
            let tp = TopicPartition::new(name, partition);
            count_dropped(self.metrics, why, &self.tier, &tp, next);
        }
        true
    }
}

/// The longest topic name a log line shows.
const MAX_LOGGED_NAME: usize = 300;

fn read_syncs(consumer: &BaseConsumer, syncs: &Syncs<'_>, stop: &AtomicBool) {
    let (topic, metrics) = (syncs.topic, syncs.metrics);
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
                if !syncs.take(key, m.payload().unwrap_or_default(), at) {
                    metrics.replication_evidence_rejected.inc();
                    tracing::debug!(
                        topic,
                        partition = m.partition(),
                        offset = m.offset(),
                        "not an offset sync: left out"
                    );
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

/// The topic a published audit message goes to (docs/design.md §10): replication evidence (a
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

    /// Offset syncs are kept for the topics the auditor audits alone (review
    /// security-3 M3: others only take memory).
    #[test]
    fn offset_syncs_are_kept_for_audited_topics_only() {
        let mut a = AuditConfig {
            topics: vec!["orders".into(), "_kafka_audit".into()],
            topic_regex: vec!["^pay\\.".into()],
            exclude_regex: vec!["\\.tmp$".into()],
            ..AuditConfig::default()
        };
        let audited = AuditedTopics::new(&a).unwrap();
        for (topic, kept) in [
            ("orders", true),
            ("pay.eu", true),
            ("pay.eu.tmp", false),
            ("payments", false),
            ("_kafka_audit", false),
            ("other", false),
        ] {
            assert_eq!(audited.contains(topic), kept, "{topic}");
        }
        a.topic_regex = vec!["(".into()];
        assert!(AuditedTopics::new(&a).is_err());
    }

    /// The evidence of the replicators goes to the evidence topic, the
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
