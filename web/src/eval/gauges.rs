//! The evaluator's Prometheus gauges: anomalies per kind and topic, completeness per
//! edge, stalled auditors, window size mismatches; series that are gone are removed.
//! (Methods of [`Evaluator`], which keeps the series it set.)

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::engine::{self, EdgeWindow, Verdict};
use crate::metrics::{AuditorLabels, EdgeLabels, KindLabels, TierLabels, TopicKindLabels};

use super::index::{AuditorKey, WindowMismatch};
use super::Evaluator;

impl Evaluator {
    /// Sets the anomaly gauges (per kind, per topic and kind) from the index; returns
    /// the number of anomalies.
    pub(super) fn update_anomaly_metrics(&mut self) -> usize {
        let index = self.index.read().expect("verdict index lock");
        let mut by_kind: BTreeMap<Verdict, i64> = BTreeMap::new();
        let mut by_topic: HashMap<(&str, Verdict), i64> = HashMap::new();
        for e in index.entries.values() {
            *by_kind.entry(e.verdict).or_default() += 1;
            *by_topic.entry((e.topic.as_str(), e.verdict)).or_default() += 1;
        }
        // Series for the topics with an anomaly, and those that had one (set to 0 once
        // it resolved, rather than keeping their last value) while their topic is in
        // the horizon: not for every topic, whose names are data (a flood of new
        // topics would be five series each).
        self.anomalous_topics.retain(|t| index.topics.contains(t));
        for &(topic, v) in by_topic.keys() {
            if v.is_anomaly() && !self.anomalous_topics.contains(topic) {
                self.anomalous_topics.insert(topic.to_string());
            }
        }
        for topic in &self.anomalous_topics {
            for v in Verdict::ALL.into_iter().filter(|v| v.is_anomaly()) {
                let n = by_topic.get(&(topic.as_str(), v)).copied().unwrap_or(0);
                self.metrics
                    .topic_anomalies
                    .get_or_create(&TopicKindLabels {
                        topic: topic.into(),
                        kind: v.as_str().into(),
                    })
                    .set(n);
            }
        }
        drop(by_topic);
        drop(index);
        let mut anomalies = 0;
        for v in Verdict::ALL.into_iter().filter(|v| v.is_anomaly()) {
            let n = by_kind.get(&v).copied().unwrap_or(0);
            self.metrics
                .anomalies
                .get_or_create(&KindLabels {
                    kind: v.as_str().into(),
                })
                .set(n);
            anomalies += n as usize;
        }
        anomalies
    }

    /// One `window_size_mismatch` series per (tier, datacenter) with mismatched
    /// windows in the horizon; series of the previous cycle that are gone are removed.
    pub(super) fn update_mismatch_metrics(
        &mut self,
        mismatches: &BTreeMap<(String, String), WindowMismatch>,
    ) {
        let now: HashSet<TierLabels> = mismatches
            .iter()
            .map(|((tier, datacenter), m)| {
                let labels = TierLabels {
                    tier: tier.as_str().into(),
                    datacenter: datacenter.as_str().into(),
                };
                self.metrics
                    .window_size_mismatch
                    .get_or_create(&labels)
                    .set(m.window_ms);
                labels
            })
            .collect();
        for gone in self.mismatch_series.difference(&now) {
            self.metrics.window_size_mismatch.remove(gone);
        }
        self.mismatch_series = now;
    }

    /// Forgets topics with no window in the horizon: out of `/topics`, and their
    /// anomaly and completeness series removed.
    pub(super) fn drop_topics_before(&mut self, horizon_start: i64) -> Vec<String> {
        let gone: Vec<String> = self
            .newest_window
            .iter()
            .filter(|(_, w)| **w < horizon_start)
            .map(|(t, _)| t.clone())
            .collect();
        if gone.is_empty() {
            return gone;
        }
        for topic in &gone {
            self.newest_window.remove(topic);
            for v in Verdict::ALL.into_iter().filter(|v| v.is_anomaly()) {
                self.metrics.topic_anomalies.remove(&TopicKindLabels {
                    topic: topic.into(),
                    kind: v.as_str().into(),
                });
            }
        }
        let names: std::collections::HashSet<&str> = gone.iter().map(String::as_str).collect();
        self.gauge_windows.retain(|labels, _| {
            let keep = !names.contains(labels.topic.as_str());
            if !keep {
                self.metrics.completeness.remove(labels);
                self.metrics.completeness_window.remove(labels);
            }
            keep
        });
        gone
    }

    pub(super) fn update_completeness(&mut self, v: &EdgeWindow) {
        let labels = EdgeLabels {
            topic: (&v.topic).into(),
            upstream: (&v.upstream).into(),
            downstream: (&v.downstream).into(),
            datacenter: (&v.datacenter).into(),
        };
        let newest = self.gauge_windows.get(&labels).copied().unwrap_or(i64::MIN);
        if v.window_start >= newest {
            // Completeness is undefined when only downstream saw data: report the
            // surplus ratio as +Inf so a `< 1` rule does not fire and a `> 1` one does.
            let c = v.completeness.unwrap_or(f64::INFINITY);
            self.metrics.completeness.get_or_create(&labels).set(c);
            self.metrics
                .completeness_window
                .get_or_create(&labels)
                .set(v.window_start);
            self.gauge_windows.insert(labels, v.window_start);
        }
    }

    /// Sets `auditor_stalled` for every auditor and removes the series of auditors
    /// whose progress rows are gone.
    /// After a capped read (`capped`) the series of auditors it left out stay: their
    /// auditors were not judged, so their last value is still the best known.
    pub(super) fn update_auditor_metrics(
        &mut self,
        auditors: &BTreeMap<AuditorKey, engine::AuditorStatus>,
        capped: bool,
    ) {
        let mut seen = HashSet::with_capacity(auditors.len());
        for ((topic, tier, datacenter), st) in auditors {
            let labels = AuditorLabels {
                topic: topic.into(),
                tier: tier.into(),
                datacenter: datacenter.into(),
            };
            self.metrics
                .auditor_stalled
                .get_or_create(&labels)
                .set(i64::from(st.stalled));
            seen.insert(labels);
        }
        if capped {
            self.auditor_series.extend(seen);
            return;
        }
        for gone in self.auditor_series.difference(&seen) {
            self.metrics.auditor_stalled.remove(gone);
        }
        self.auditor_series = seen;
    }

    /// Sets `replication_evidence_age_seconds` per evidence tier an edge names and
    /// upstream datacenter: how long ago the newest evidence of any topic was received.
    /// One series each, whatever the number of topics; series gone (no evidence
    /// within `forget_after`) are removed, except after a capped read.
    pub(super) fn update_evidence_age_metrics(
        &mut self,
        evidence: &BTreeMap<(String, String), engine::EvidenceStatus>,
        capped: bool,
    ) {
        let mut seen = HashSet::with_capacity(evidence.len());
        for ((tier, datacenter), status) in evidence {
            let labels = TierLabels {
                tier: tier.into(),
                datacenter: datacenter.into(),
            };
            self.metrics
                .replication_evidence_age
                .get_or_create(&labels)
                .set(status.age_ms / 1000);
            seen.insert(labels);
        }
        if capped {
            self.evidence_series.extend(seen);
            return;
        }
        for gone in self.evidence_series.difference(&seen) {
            self.metrics.replication_evidence_age.remove(gone);
        }
        self.evidence_series = seen;
    }
}
