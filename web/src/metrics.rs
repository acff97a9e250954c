//! Prometheus metrics: what the engine found (completeness of the latest final window
//! per topic and edge, current anomalies by kind, stalled auditors), so Alertmanager
//! users can write their own rules, and the service's own health (HTTP, evaluation,
//! alert delivery).

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EdgeLabels {
    pub topic: String,
    pub upstream: String,
    pub downstream: String,
    pub datacenter: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicKindLabels {
    pub topic: String,
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuditorLabels {
    pub topic: String,
    pub tier: String,
    pub datacenter: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub method: String,
    pub route: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChannelLabels {
    pub channel: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AlertLabels {
    pub channel: String,
    pub action: String,
}

pub struct Metrics {
    pub registry: Registry,
    pub completeness: Family<EdgeLabels, Gauge<f64, AtomicU64>>,
    pub completeness_window: Family<EdgeLabels, Gauge>,
    pub anomalies: Family<KindLabels, Gauge>,
    pub anomalies_detected: Family<KindLabels, Counter>,
    pub topic_anomalies: Family<TopicKindLabels, Gauge>,
    pub auditor_stalled: Family<AuditorLabels, Gauge>,
    pub http_requests: Family<HttpLabels, Counter>,
    pub http_duration: Family<RouteLabels, Histogram>,
    pub evaluations: Counter,
    pub evaluation_errors: Counter,
    pub evaluation_duration: Histogram,
    pub evaluated_windows: Counter,
    pub last_evaluation: Gauge,
    pub alerts_sent: Family<AlertLabels, Counter>,
    pub alert_failures: Family<ChannelLabels, Counter>,
    pub alert_retries: Family<ChannelLabels, Counter>,
    pub alerts_rate_limited: Family<ChannelLabels, Counter>,
    pub alerts_open: Family<ChannelLabels, Gauge>,
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
        Self {
            registry,
            completeness,
            completeness_window,
            anomalies,
            anomalies_detected,
            topic_anomalies,
            auditor_stalled,
            http_requests,
            http_duration,
            evaluations,
            evaluation_errors,
            evaluation_duration,
            evaluated_windows,
            last_evaluation,
            alerts_sent,
            alert_failures,
            alert_retries,
            alerts_rate_limited,
            alerts_open,
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
