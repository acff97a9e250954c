//! An alert, a publication of the alerts wanted, and how they are read from the
//! verdict index.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::config::AlertingConfig;
use crate::engine::{AuditorStatus, EdgeWindow, EvidenceStatus, Lifecycle, SoFar, Verdict};
use crate::eval::VerdictIndex;

/// What a notification is about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alert {
    pub dedup_key: String,
    pub verdict: Verdict,
    pub topic: String,
    #[serde(flatten)]
    pub subject: Subject,
    pub reason: String,
}

/// A window of an edge, an auditor that stopped reporting, or a replicator whose
/// evidence stopped (one alert per replicator and datacenter, not per topic:
/// docs/web.md, Alerts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Subject {
    Window {
        upstream: String,
        downstream: String,
        datacenter: String,
        window_start: i64,
        window_end: i64,
        expected: u64,
        observed: u64,
        difference: i64,
        completeness: Option<f64>,
    },
    Auditor {
        tier: String,
        datacenter: String,
        /// When it last reported progress (epoch ms, the collector's clock).
        last_report: i64,
    },
    Evidence {
        /// The evidence's tier (`replicator:group/<g>`, `replicator:mm2/<target>`).
        evidence_tier: String,
        /// The upstream datacenter whose auditors publish it.
        datacenter: String,
        /// When the newest evidence of any topic was received (epoch ms, the
        /// collector's clock).
        last_report: i64,
        /// Its age when the alert was raised.
        age_seconds: i64,
    },
}

/// The dedup key of the alert on the auditor of `topic` at `tier` in `datacenter`.
pub fn auditor_key(topic: &str, tier: &str, datacenter: &str) -> String {
    format!("kafka-audit:{topic}:auditor:{tier}:{datacenter}")
}

/// The dedup key of the alert on the replication evidence of `tier` from `datacenter`.
pub fn evidence_key(tier: &str, datacenter: &str) -> String {
    format!("kafka-audit:evidence:{tier}:{datacenter}")
}

pub fn dedup_key(e: &EdgeWindow) -> String {
    window_key(&crate::eval::key_of(e))
}

/// The dedup key of the alert on the window of `k`.
pub fn window_key(k: &crate::eval::VerdictKey) -> String {
    format!(
        "kafka-audit:{}:{}->{}:{}:{}",
        k.topic, k.upstream, k.downstream, k.datacenter, k.window_start
    )
}

/// By dedup key, who withdrew the proof of a window and why ([`Published::withdrawn`]).
pub fn withdrawn(index: &VerdictIndex) -> BTreeMap<String, String> {
    index
        .withdrawn
        .iter()
        .map(|(k, note)| (window_key(k), note.clone()))
        .collect()
}

pub(super) fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| ms.to_string())
}

impl Alert {
    fn from_verdict(e: &EdgeWindow) -> Self {
        Self {
            dedup_key: dedup_key(e),
            verdict: e.verdict,
            topic: e.topic.clone(),
            subject: Subject::Window {
                upstream: e.upstream.clone(),
                downstream: e.downstream.clone(),
                datacenter: e.datacenter.clone(),
                window_start: e.window_start,
                window_end: e.window_end,
                expected: e.expected,
                observed: e.observed,
                difference: e.difference,
                completeness: e.completeness,
            },
            reason: e.reason.clone(),
        }
    }

    fn from_auditor(topic: &str, a: &AuditorStatus, stall_after_ms: i64) -> Self {
        Self {
            dedup_key: auditor_key(topic, &a.tier, &a.datacenter),
            verdict: Verdict::Stalled,
            topic: topic.to_string(),
            subject: Subject::Auditor {
                tier: a.tier.clone(),
                datacenter: a.datacenter.clone(),
                last_report: a.last_report,
            },
            reason: format!(
                "no progress report for longer than {} s",
                stall_after_ms / 1000
            ),
        }
    }

    fn from_evidence(
        (tier, datacenter): &(String, String),
        e: &EvidenceStatus,
        stall_after_ms: i64,
    ) -> Self {
        Self {
            dedup_key: evidence_key(tier, datacenter),
            verdict: Verdict::Stalled,
            topic: String::new(),
            subject: Subject::Evidence {
                evidence_tier: tier.clone(),
                datacenter: datacenter.clone(),
                last_report: e.last_report,
                age_seconds: e.age_ms / 1000,
            },
            reason: format!(
                "no replication evidence received for {} s (stall_after {} s): no loss is \
                 proven before its window is final until it resumes; windows are still \
                 judged when final",
                e.age_ms / 1000,
                stall_after_ms / 1000
            ),
        }
    }

    /// What it is about, without the verdict: for titles and resolve messages.
    pub(super) fn what(&self) -> String {
        match &self.subject {
            Subject::Window {
                upstream,
                downstream,
                datacenter,
                window_start,
                ..
            } => format!(
                "{} {upstream} -> {downstream} ({datacenter}), window {}",
                self.topic,
                rfc3339(*window_start)
            ),
            Subject::Auditor {
                tier, datacenter, ..
            } => format!("{} auditor {tier}/{datacenter}", self.topic),
            Subject::Evidence {
                evidence_tier,
                datacenter,
                ..
            } => format!("replication evidence {evidence_tier}/{datacenter}"),
        }
    }

    pub fn summary(&self) -> String {
        match &self.subject {
            Subject::Window {
                expected,
                observed,
                completeness,
                ..
            } => {
                let completeness = completeness
                    .map(|c| format!(" ({:.2} %)", c * 100.0))
                    .unwrap_or_default();
                format!(
                    "{} on {}: {observed} of {expected} messages{completeness}: {}",
                    self.verdict.as_str(),
                    self.what(),
                    self.reason
                )
            }
            Subject::Auditor { last_report, .. } => format!(
                "audit stalled: {}, last report {}: {}",
                self.what(),
                rfc3339(*last_report),
                self.reason
            ),
            Subject::Evidence { last_report, .. } => format!(
                "evidence stale: {}, last received {}: {}",
                self.what(),
                rfc3339(*last_report),
                self.reason
            ),
        }
    }

    /// Whether an evaluation of the windows from `from` on has judged what this alert
    /// is about: its window, or (auditor alerts) the progress rows, read every cycle.
    pub(super) fn judged_from(&self, from: i64) -> bool {
        match &self.subject {
            Subject::Window { window_start, .. } => *window_start >= from,
            Subject::Auditor { .. } | Subject::Evidence { .. } => true,
        }
    }

    /// Whether `published` came from a capped read of auditors that did not reach this
    /// alert's auditor ([`Published::auditors_capped`]).
    pub(super) fn left_out(&self, published: &Published) -> bool {
        matches!(
            self.subject,
            Subject::Auditor { .. } | Subject::Evidence { .. }
        ) && published.auditors_capped
            && published
                .auditors
                .as_ref()
                .is_none_or(|known| !known.contains(&self.dedup_key))
    }

    /// Whether `published` no longer judges what this alert is about at all: its window
    /// starts before the horizon (it left the index), or its auditor is not among the
    /// known ones (progress forgotten after `forget_after`). Such an alert was never
    /// fixed: it expires, it is not resolved.
    pub(super) fn expired(&self, published: &Published) -> bool {
        match &self.subject {
            Subject::Window { window_start, .. } => *window_start < published.horizon_start,
            // (Not after a capped read: an auditor it left out is not judged at all.)
            Subject::Auditor { .. } | Subject::Evidence { .. } => {
                !published.auditors_capped
                    && published
                        .auditors
                        .as_ref()
                        .is_some_and(|known| !known.contains(&self.dedup_key))
            }
        }
    }

    /// Windows alert only while recent; an auditor alert is always current.
    pub(super) fn recent_enough(&self, cutoff_ms: i64) -> bool {
        match &self.subject {
            Subject::Window { window_end, .. } => *window_end >= cutoff_ms,
            Subject::Auditor { .. } | Subject::Evidence { .. } => true,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    Trigger,
    Resolve,
}

impl Action {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Action::Trigger => "trigger",
            Action::Resolve => "resolve",
        }
    }
}

/// Current anomalies to alert on, by dedup key; published after every evaluation.
/// `None` until the first evaluation: an empty set then would resolve every alert
/// that was open before a restart.
pub type Desired = Option<Arc<Published>>;

/// One publication: the alerts wanted now, from the windows judged so far. During a
/// cold start only windows from `judged_from` on are judged: an open alert on an older
/// window is neither wanted nor unwanted yet, and is left open until its window is
/// judged (`None`: the whole horizon is judged).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Published {
    pub alerts: BTreeMap<String, Alert>,
    pub judged_from: Option<i64>,
    /// Dedup keys of windows judged but not final (a newer progress report put them
    /// back to settling, e.g. a lag that was 0 on a stale high watermark). An alert
    /// open on one stays open: it resolves when its window is final again and no
    /// longer anomalous, never for a moment of doubt (that would page the on-call a
    /// second time when the window is final again).
    pub unsettled: BTreeSet<String>,
    /// Start of the horizon: windows starting before it are no longer judged (they
    /// left the index). An open alert on one expires instead of resolving (0: none).
    pub horizon_start: i64,
    /// Dedup keys of the auditor alerts whose auditor is known (its progress is not
    /// forgotten, stalled or not: [`known_auditors`]). An open auditor alert not among
    /// them expires instead of resolving (`None`: not known; an absent one resolves).
    pub auditors: Option<BTreeSet<String>>,
    /// The read of auditors was capped (more than `store::MAX_READ_ROWS`): an open
    /// auditor alert whose auditor is not in `auditors` was not judged at all, and is
    /// neither resolved nor expired.
    pub auditors_capped: bool,
    /// Windows whose proof of a loss an operator withdrew (docs/design.md §6, the
    /// proven-loss hold), by dedup key: who and why. An alert open on one resolves with
    /// that as its reason.
    pub withdrawn: BTreeMap<String, String>,
}

impl std::ops::Deref for Published {
    type Target = BTreeMap<String, Alert>;
    fn deref(&self) -> &Self::Target {
        &self.alerts
    }
}

/// Dedup keys of the windows in `index` that are not final ([`Published::unsettled`]).
/// The index keeps no `ok` verdict, so this is the recent non-ok windows only.
pub fn unsettled(index: &VerdictIndex) -> BTreeSet<String> {
    index
        .entries
        .values()
        .filter(|e| e.lifecycle != Lifecycle::Final)
        .map(dedup_key)
        .collect()
}

/// Dedup keys of the auditor alerts of every auditor in `index`, and of the evidence
/// alerts of every replicator's evidence in it ([`Published::auditors`]).
pub fn known_auditors(index: &VerdictIndex) -> BTreeSet<String> {
    index
        .auditors
        .keys()
        .map(|(topic, tier, datacenter)| auditor_key(topic, tier, datacenter))
        .chain(
            index
                .evidence
                .keys()
                .map(|(tier, datacenter)| evidence_key(tier, datacenter)),
        )
        .collect()
}

/// What should be open now: anomalous verdicts of the configured kinds on final
/// windows, windows `delayed` while settling (the downstream has read all it has, past
/// the upstream's time + grace, without the upstream's records of the window:
/// docs/web.md, Verdicts, rule 4; or a replicator holding counted records back past its
/// objective: Replication evidence), losses proven by replication evidence while the
/// window is open (rule 0), and one alert per stalled auditor ("tier X audit stalled")
/// and one per replicator whose evidence stopped, whatever the number of its topics.
/// Windows judged `stalled` are listed by the API but not alerted one by one: the
/// auditor's alert covers them all.
pub fn desired(
    index: &VerdictIndex,
    config: &AlertingConfig,
    stall_after_ms: i64,
) -> BTreeMap<String, Alert> {
    let mut out: BTreeMap<String, Alert> = index
        .entries
        .values()
        .filter(|e| config.kinds.contains(&e.verdict))
        .filter(|e| {
            e.lifecycle == Lifecycle::Final
                || e.verdict == Verdict::Delayed
                || e.so_far == Some(SoFar::Loss)
        })
        .map(|e| (dedup_key(e), Alert::from_verdict(e)))
        .collect();
    if config.kinds.contains(&Verdict::Stalled) {
        for ((topic, _, _), a) in index.auditors.iter().filter(|(_, a)| a.stalled) {
            let alert = Alert::from_auditor(topic, a, stall_after_ms);
            out.insert(alert.dedup_key.clone(), alert);
        }
        for (key, e) in index.evidence.iter().filter(|(_, e)| e.stale) {
            let alert = Alert::from_evidence(key, e, stall_after_ms);
            out.insert(alert.dedup_key.clone(), alert);
        }
    }
    out
}
