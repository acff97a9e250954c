//! Prometheus metrics: what the engine found (completeness of the latest final window
//! per topic and edge, current anomalies by kind, stalled auditors), so Alertmanager
//! users can write their own rules, and the service's own health (HTTP, evaluation,
//! alert delivery).

use std::sync::atomic::AtomicU64;

pub use common::labels::LabelValue;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EdgeLabels {
    pub topic: LabelValue,
    pub upstream: LabelValue,
    pub downstream: LabelValue,
    pub datacenter: LabelValue,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: LabelValue,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicKindLabels {
    pub topic: LabelValue,
    pub kind: LabelValue,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuditorLabels {
    pub topic: LabelValue,
    pub tier: LabelValue,
    pub datacenter: LabelValue,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TierLabels {
    pub tier: LabelValue,
    pub datacenter: LabelValue,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: LabelValue,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub method: LabelValue,
    pub route: LabelValue,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: LabelValue,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChannelLabels {
    pub channel: LabelValue,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AlertLabels {
    pub channel: LabelValue,
    pub action: LabelValue,
}

pub struct Metrics {
    pub registry: Registry,
    pub completeness: Family<EdgeLabels, Gauge<f64, AtomicU64>>,
    pub completeness_window: Family<EdgeLabels, Gauge>,
    pub anomalies: Family<KindLabels, Gauge>,
    pub anomalies_detected: Family<KindLabels, Counter>,
    pub topic_anomalies: Family<TopicKindLabels, Gauge>,
    pub auditor_stalled: Family<AuditorLabels, Gauge>,
    pub replication_evidence_age: Family<TierLabels, Gauge>,
    pub replication_evidence_refused: Family<ReasonLabels, Counter>,
    pub window_size_mismatch: Family<TierLabels, Gauge>,
    pub http_requests: Family<HttpLabels, Counter>,
    pub http_duration: Family<RouteLabels, Histogram>,
    pub evaluations: Counter,
    pub evaluation_errors: Counter,
    pub evaluation_duration: Histogram,
    pub evaluated_windows: Counter,
    pub proofs_refused: Counter,
    pub proofs_withdrawn: Counter,
    pub last_evaluation: Gauge,
    pub alerts_sent: Family<AlertLabels, Counter>,
    pub alert_failures: Family<ChannelLabels, Counter>,
    pub alert_retries: Family<ChannelLabels, Counter>,
    pub alerts_rate_limited: Family<ChannelLabels, Counter>,
    pub alerts_open: Family<ChannelLabels, Gauge>,
    pub alerts_expired: Family<ChannelLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("kafka_audit");
        let completeness = Family::<EdgeLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "window_completeness",
            "Downstream / expected count of the latest final window, per topic and edge",
            completeness.clone(),
        );
        let completeness_window = Family::<EdgeLabels, Gauge>::default();
        registry.register(
            "window_completeness_window_start_ms",
            "Start (epoch ms) of the window kafka_audit_window_completeness refers to",
            completeness_window.clone(),
        );
        let anomalies = Family::<KindLabels, Gauge>::default();
        registry.register(
            "anomalies",
            "Windows currently judged anomalous within the horizon, by kind",
            anomalies.clone(),
        );
        let anomalies_detected = Family::<KindLabels, Counter>::default();
        registry.register(
            "anomalies_detected",
            "Anomalous verdicts newly found, by kind",
            anomalies_detected.clone(),
        );
        let topic_anomalies = Family::<TopicKindLabels, Gauge>::default();
        registry.register(
            "topic_anomalies",
            "Windows x edges currently judged anomalous within the horizon, per topic and kind",
            topic_anomalies.clone(),
        );
        let auditor_stalled = Family::<AuditorLabels, Gauge>::default();
        registry.register(
            "auditor_stalled",
            "1 when an auditor has not reported progress for longer than stall_after",
            auditor_stalled.clone(),
        );
        let replication_evidence_age = Family::<TierLabels, Gauge>::default();
        registry.register(
            "replication_evidence_age_seconds",
            "Seconds since a replicator's evidence (progress of a replicator:* tier an edge names) was last received for any topic, per evidence tier and upstream datacenter",
            replication_evidence_age.clone(),
        );
        let replication_evidence_refused = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "replication_evidence_refused",
            "Pieces of replication evidence (a partition's progress of a replicator:* tier, each as received) not used to prove a loss, by reason: emitted_in_future, past_log_end (past the upstream auditor's measured log end), no_log_end (no upstream progress to check it against)",
            replication_evidence_refused.clone(),
        );
        let window_size_mismatch = Family::<TierLabels, Gauge>::default();
        registry.register(
            "window_size_mismatch",
            "Length (ms) of stored windows of this tier and datacenter within the horizon that are not [topology] window long (its auditors count in another window size; its verdicts are wrong); no series when they agree",
            window_size_mismatch.clone(),
        );
        let http_requests = Family::<HttpLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests served",
            http_requests.clone(),
        );
        let http_duration = Family::<RouteLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 14))
        });
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency by route",
            http_duration.clone(),
        );
        let evaluations = Counter::default();
        registry.register("evaluations", "Evaluation cycles run", evaluations.clone());
        let evaluation_errors = Counter::default();
        registry.register(
            "evaluation_errors",
            "Evaluation cycles that failed (store unavailable...)",
            evaluation_errors.clone(),
        );
        let evaluation_duration = Histogram::new(exponential_buckets(0.01, 2.0, 14));
        registry.register(
            "evaluation_duration_seconds",
            "Duration of evaluation cycles",
            evaluation_duration.clone(),
        );
        let evaluated_windows = Counter::default();
        registry.register(
            "evaluated_windows",
            "Topic windows evaluated",
            evaluated_windows.clone(),
        );
        let proofs_refused = Counter::default();
        registry.register(
            "proofs_refused",
            "Losses proven before their window was final that were neither kept nor recorded: serve.max_verdicts proofs are held already (counted at every cycle that finds one)",
            proofs_refused.clone(),
        );
        let proofs_withdrawn = Counter::default();
        registry.register(
            "proofs_withdrawn",
            "Proofs of a loss withdrawn through DELETE /api/v1/topics/{topic}/windows/{window_start}/proof (admin scope): each is logged at warn with who withdrew it and why",
            proofs_withdrawn.clone(),
        );
        let last_evaluation = Gauge::default();
        registry.register(
            "last_evaluation_timestamp_ms",
            "When the last successful evaluation ran (epoch ms)",
            last_evaluation.clone(),
        );
        let alerts_sent = Family::<AlertLabels, Counter>::default();
        registry.register(
            "alerts_sent",
            "Notifications delivered, by channel and action (trigger, resolve)",
            alerts_sent.clone(),
        );
        let alert_failures = Family::<ChannelLabels, Counter>::default();
        registry.register(
            "alert_failures",
            "Notifications that failed after every retry",
            alert_failures.clone(),
        );
        let alert_retries = Family::<ChannelLabels, Counter>::default();
        registry.register(
            "alert_retries",
            "Delivery attempts that failed and were retried",
            alert_retries.clone(),
        );
        let alerts_rate_limited = Family::<ChannelLabels, Counter>::default();
        registry.register(
            "alerts_rate_limited",
            "Notifications deferred by the channel's rate limit",
            alerts_rate_limited.clone(),
        );
        let alerts_open = Family::<ChannelLabels, Gauge>::default();
        registry.register(
            "alerts_open",
            "Alerts triggered and not yet resolved, per channel",
            alerts_open.clone(),
        );
        let alerts_expired = Family::<ChannelLabels, Counter>::default();
        registry.register(
            "alerts_expired",
            "Open alerts forgotten unresolved, without a notification: their window left the horizon or their auditor was forgotten",
            alerts_expired.clone(),
        );
        Self {
            registry,
            completeness,
            completeness_window,
            anomalies,
            anomalies_detected,
            topic_anomalies,
            auditor_stalled,
            replication_evidence_age,
            replication_evidence_refused,
            window_size_mismatch,
            http_requests,
            http_duration,
            evaluations,
            evaluation_errors,
            evaluation_duration,
            evaluated_windows,
            proofs_refused,
            proofs_withdrawn,
            last_evaluation,
            alerts_sent,
            alert_failures,
            alert_retries,
            alerts_rate_limited,
            alerts_open,
            alerts_expired,
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `promtool check metrics` on `text`: its verdict (stdout and stderr).
    fn promtool(text: &str) -> (bool, String) {
        use std::io::Write;
        let mut child = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect(
                "promtool not found: it checks the exposition format; install the Debian \
                 package `prometheus` (./test.sh installs it)",
            );
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // Exit 1 is a parse error; 3 is lint advice only (promtool 2.42 reads the
        // OpenMetrics `_total` counters as untyped families "without help text").
        (out.status.code() != Some(1), said)
    }

    /// A topic (tier, datacenter) name is data from audit messages: quotes, newlines
    /// and backslashes in it must neither break `/metrics` (one bad scrape silences
    /// every kafka_audit_* alert rule) nor forge a series.
    #[test]
    fn hostile_label_values_are_escaped() {
        let m = Metrics::new();
        let forged = "x\"} 0\nkafka_audit_window_completeness{topic=\"payments\",upstream=\"producer\",downstream=\"regional\",datacenter=\"dc1\"} 1\n#";
        for hostile in [
            forged,
            "a\"b\nc",
            "back\\slash\\",
            "\\\"",
            "cr\rnul\0tab\t}{,=",
        ] {
            m.completeness
                .get_or_create(&EdgeLabels {
                    topic: hostile.into(),
                    upstream: "producer".into(),
                    downstream: hostile.into(),
                    datacenter: hostile.into(),
                })
                .set(0.5);
            m.topic_anomalies
                .get_or_create(&TopicKindLabels {
                    topic: hostile.into(),
                    kind: "loss".into(),
                })
                .set(1);
            m.auditor_stalled
                .get_or_create(&AuditorLabels {
                    topic: hostile.into(),
                    tier: hostile.into(),
                    datacenter: hostile.into(),
                })
                .set(1);
        }
        let text = m.encode();
        let (ok, said) = promtool(&text);
        assert!(ok, "promtool rejects /metrics: {said}\n{text}");
        let series = |name: &str| {
            text.lines()
                .filter(|l| l.starts_with(&format!("{name}{{")))
                .count()
        };
        // Five hostile names, one series each: none forged, none split.
        assert_eq!(series("kafka_audit_window_completeness"), 5, "{text}");
        assert_eq!(series("kafka_audit_topic_anomalies"), 5, "{text}");
        assert_eq!(series("kafka_audit_auditor_stalled"), 5, "{text}");
        assert!(!text.contains("topic=\"payments\""), "{text}");
    }
}
