//! Alerting: turns the verdict index into notifications on generic webhooks, Slack
//! compatible webhooks and PagerDuty Events v2.
//!
//! Each channel has its own worker holding the alerts it has delivered (`open`).
//! After every evaluation the set of current anomalies is published; a worker then
//! triggers what is anomalous and not yet open (or whose verdict changed), and resolves
//! what is open and no longer anomalous — which is how late data completing a window
//! resolves its alert. An auditor that stops reporting is one alert of its own (per
//! topic, tier and datacenter), not one per window it blocks. Every notification
//! carries a dedup key (per topic, edge, datacenter and window for windows), so a
//! repeated trigger updates rather than duplicates (and PagerDuty merges them). A
//! failing channel is retried with exponential backoff; one that still fails is
//! counted, and the notification is retried on a later pass. A rate limit per channel
//! defers notifications beyond it to the next period.
//!
//! An open alert whose subject is no longer judged at all — its window left the
//! horizon (`serve.horizon`), or its auditor's progress was forgotten (`forget_after`:
//! the topic was deleted or is no longer audited) — was never fixed: it is not
//! resolved. It expires: forgotten without a notification (counted in
//! `alerts_expired_total`, logged), so the receiver keeps it open until someone
//! closes it, as PagerDuty keeps an incident open until someone resolves it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Backoff;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use store::AuditStore;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::{AlertingConfig, ChannelConfig, ChannelKind, PAGERDUTY_URL};
use crate::engine::{AuditorStatus, EdgeWindow, Lifecycle, Urgency, Verdict};
use crate::eval::VerdictIndex;
use crate::metrics::{AlertLabels, ChannelLabels, Metrics};

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

/// A window of an edge, or an auditor that stopped reporting.
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
}

/// The dedup key of the alert on the auditor of `topic` at `tier` in `datacenter`.
pub fn auditor_key(topic: &str, tier: &str, datacenter: &str) -> String {
    format!("kafka-audit:{topic}:auditor:{tier}:{datacenter}")
}

pub fn dedup_key(e: &EdgeWindow) -> String {
    format!(
        "kafka-audit:{}:{}->{}:{}:{}",
        e.topic, e.upstream, e.downstream, e.datacenter, e.window_start
    )
}

fn rfc3339(ms: i64) -> String {
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

    /// What it is about, without the verdict: for titles and resolve messages.
    fn what(&self) -> String {
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
        }
    }

    /// The alert with every name (and the reason) escaped for Slack text.
    fn slack_escaped(&self) -> Alert {
        let mut a = self.clone();
        for s in [&mut a.topic, &mut a.reason] {
            *s = slack_escape(s);
        }
        match &mut a.subject {
            Subject::Window {
                upstream,
                downstream,
                datacenter,
                ..
            } => {
                for s in [upstream, downstream, datacenter] {
                    *s = slack_escape(s);
                }
            }
            Subject::Auditor {
                tier, datacenter, ..
            } => {
                for s in [tier, datacenter] {
                    *s = slack_escape(s);
                }
            }
        }
        a
    }

    /// Whether an evaluation of the windows from `from` on has judged what this alert
    /// is about: its window, or (auditor alerts) the progress rows, read every cycle.
    fn judged_from(&self, from: i64) -> bool {
        match &self.subject {
            Subject::Window { window_start, .. } => *window_start >= from,
            Subject::Auditor { .. } => true,
        }
    }

    /// Whether `published` came from a capped read of auditors that did not reach this
    /// alert's auditor ([`Published::auditors_capped`]).
    fn left_out(&self, published: &Published) -> bool {
        matches!(self.subject, Subject::Auditor { .. })
            && published.auditors_capped
            && published
                .auditors
                .as_ref()
                .is_none_or(|known| !known.contains(&self.dedup_key))
    }

    /// Whether `published` no longer judges what this alert is about at all: its window
    /// starts before the horizon (it left the index), or its auditor is not among the
    /// known ones (progress forgotten after `forget_after`). Such an alert was never
    /// fixed: it expires, it is not resolved.
    fn expired(&self, published: &Published) -> bool {
        match &self.subject {
            Subject::Window { window_start, .. } => *window_start < published.horizon_start,
            // (Not after a capped read: an auditor it left out is not judged at all.)
            Subject::Auditor { .. } => {
                !published.auditors_capped
                    && published
                        .auditors
                        .as_ref()
                        .is_some_and(|known| !known.contains(&self.dedup_key))
            }
        }
    }

    /// Windows alert only while recent; an auditor alert is always current.
    fn recent_enough(&self, cutoff_ms: i64) -> bool {
        match &self.subject {
            Subject::Window { window_end, .. } => *window_end >= cutoff_ms,
            Subject::Auditor { .. } => true,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    Trigger,
    Resolve,
}

impl Action {
    fn as_str(self) -> &'static str {
        match self {
            Action::Trigger => "trigger",
            Action::Resolve => "resolve",
        }
    }
}

/// The request body a channel of `kind` receives.
pub fn payload(channel: &ChannelConfig, action: Action, alert: &Alert) -> Value {
    match channel.kind {
        ChannelKind::Webhook => {
            let mut v = serde_json::to_value(alert).unwrap_or(Value::Null);
            if let Value::Object(m) = &mut v {
                m.insert("source".into(), json!("kafka-audit"));
                m.insert("action".into(), json!(action.as_str()));
                m.insert("summary".into(), json!(alert.summary()));
            }
            v
        }
        ChannelKind::Slack => {
            let alert = alert.slack_escaped();
            let text = match action {
                Action::Trigger => format!(":rotating_light: kafka-audit: {}", alert.summary()),
                Action::Resolve => format!(
                    ":white_check_mark: kafka-audit: resolved {} on {}",
                    alert.verdict.as_str(),
                    alert.what()
                ),
            };
            json!({ "text": text })
        }
        ChannelKind::Pagerduty => {
            let key = channel.routing_key.clone().unwrap_or_default();
            if action == Action::Resolve {
                return json!({
                    "routing_key": key,
                    "event_action": "resolve",
                    "dedup_key": alert.dedup_key,
                });
            }
            let mut details = serde_json::to_value(&alert.subject).unwrap_or(Value::Null);
            if let Value::Object(m) = &mut details {
                m.insert("reason".into(), json!(alert.reason));
            }
            let group = match &alert.subject {
                Subject::Window {
                    upstream,
                    downstream,
                    ..
                } => format!("{upstream}->{downstream}"),
                Subject::Auditor { tier, .. } => tier.clone(),
            };
            json!({
                "routing_key": key,
                "event_action": "trigger",
                "dedup_key": alert.dedup_key,
                "payload": {
                    "summary": truncate(alert.summary(), PAGERDUTY_SUMMARY_MAX),
                    "source": "kafka-audit",
                    "severity": if alert.verdict.urgency() == Urgency::Page { "error" } else { "warning" },
                    "component": alert.topic,
                    "group": group,
                    "class": alert.verdict.as_str(),
                    "custom_details": details,
                }
            })
        }
    }
}

/// Slack's escaping for message text: names in alerts are data (topics come from
/// audit messages), and unescaped `<!channel>`, `<@U…>` or `<https://…|label>` would
/// ping everyone or post a disguised link as the trusted bot.
pub fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// PagerDuty Events v2 refuses a longer `payload.summary` with 400, which is not
/// retried: the page would be lost.
const PAGERDUTY_SUMMARY_MAX: usize = 1024;

fn truncate(mut s: String, max_bytes: usize) -> String {
    if s.len() > max_bytes {
        let mut end = max_bytes - '…'.len_utf8();
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

/// Delivery order under the rate limit: the most severe first; within a severity,
/// each topic's newest alert before any topic's second, and so on (round robin over
/// topics, newest window first within one). So however many anomalies one topic
/// has, real or forged, another topic's page waits for at most one per topic.
fn prioritise(alerts: Vec<Alert>) -> Vec<Alert> {
    use std::cmp::Reverse;
    // An auditor alert is about now: newest.
    let time = |a: &Alert| match &a.subject {
        Subject::Window { window_start, .. } => *window_start,
        Subject::Auditor { .. } => i64::MAX,
    };
    let mut by_topic: BTreeMap<(Reverse<Urgency>, &str), Vec<&Alert>> = BTreeMap::new();
    for a in &alerts {
        by_topic
            .entry((Reverse(a.verdict.urgency()), a.topic.as_str()))
            .or_default()
            .push(a);
    }
    // (most urgent, rank within its topic, newest first, topic, key) orders them all.
    type Key<'a> = (Reverse<Urgency>, usize, Reverse<i64>, &'a str, &'a str);
    let mut ranked: Vec<(Key, &Alert)> = Vec::new();
    for ((sev, topic), mut list) in by_topic {
        list.sort_by_key(|a| (Reverse(time(a)), a.dedup_key.as_str()));
        for (rank, a) in list.into_iter().enumerate() {
            ranked.push((
                (sev, rank, Reverse(time(a)), topic, a.dedup_key.as_str()),
                a,
            ));
        }
    }
    ranked.sort_by(|x, y| x.0.cmp(&y.0));
    ranked.into_iter().map(|(_, a)| a.clone()).collect()
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

/// Dedup keys of the auditor alerts of every auditor in `index` ([`Published::auditors`]).
pub fn known_auditors(index: &VerdictIndex) -> BTreeSet<String> {
    index
        .auditors
        .keys()
        .map(|(topic, tier, datacenter)| auditor_key(topic, tier, datacenter))
        .collect()
}

/// What should be open now: anomalous verdicts of the configured kinds on final
/// windows, windows `delayed` while settling (the downstream has read all it has, past
/// the upstream's time + grace, without the upstream's records of the window: issue
/// 24), and one alert per stalled auditor ("tier X audit stalled"). Windows judged
/// `stalled` are listed by the API but not alerted one by one: the auditor's alert
/// covers them all.
pub fn desired(
    index: &VerdictIndex,
    config: &AlertingConfig,
    stall_after_ms: i64,
) -> BTreeMap<String, Alert> {
    let mut out: BTreeMap<String, Alert> = index
        .entries
        .values()
        .filter(|e| config.kinds.contains(&e.verdict))
        .filter(|e| e.lifecycle == Lifecycle::Final || e.verdict == Verdict::Delayed)
        .map(|e| (dedup_key(e), Alert::from_verdict(e)))
        .collect();
    if config.kinds.contains(&Verdict::Stalled) {
        for ((topic, _, _), a) in index.auditors.iter().filter(|(_, a)| a.stalled) {
            let alert = Alert::from_auditor(topic, a, stall_after_ms);
            out.insert(alert.dedup_key.clone(), alert);
        }
    }
    out
}

pub struct ChannelWorker {
    channel: ChannelConfig,
    config: AlertingConfig,
    client: reqwest::Client,
    metrics: Arc<Metrics>,
    open: BTreeMap<String, Alert>,
    sent: VecDeque<Instant>,
    store: Option<store::Store>,
    /// The work the last pass left undone (failed or deferred), for the periodic pass.
    waiting: BTreeSet<Work>,
}

/// One piece of a pass's work: a trigger of a key with its verdict, or a resolve.
type Work = (Action, String, Option<Verdict>);

fn work_item(action: Action, alert: &Alert) -> Work {
    let verdict = (action == Action::Trigger).then_some(alert.verdict);
    (action, alert.dedup_key.clone(), verdict)
}

#[derive(Debug)]
enum SendError {
    /// Worth retrying: network error, timeout, 429, 5xx.
    Transient(String),
    /// Retrying will not help: 4xx other than 429.
    Permanent(String),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Transient(m) => write!(f, "{m} (after retries)"),
            SendError::Permanent(m) => write!(f, "{m} (not retried: client error)"),
        }
    }
}

impl ChannelWorker {
    /// `store` keeps the open alerts across restarts (`None`: in memory only).
    pub fn new(
        channel: ChannelConfig,
        config: AlertingConfig,
        metrics: Arc<Metrics>,
        store: Option<store::Store>,
    ) -> Self {
        let client = reqwest::Client::builder()
            .timeout(config.send_timeout)
            // A receiver must not bounce the alert (and a routing key) elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Self {
            channel,
            config,
            client,
            metrics,
            open: BTreeMap::new(),
            sent: VecDeque::new(),
            store,
            waiting: BTreeSet::new(),
        }
    }

    fn labels(&self) -> ChannelLabels {
        ChannelLabels {
            channel: (&self.channel.name).into(),
        }
    }

    /// Takes a rate-limit token if one is left in the current period.
    fn take_token(&mut self) -> bool {
        let now = Instant::now();
        while self
            .sent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= self.config.rate_period)
        {
            self.sent.pop_front();
        }
        if self.sent.len() < self.config.rate_limit as usize {
            self.sent.push_back(now);
            true
        } else {
            false
        }
    }

    /// One pass: resolves what is open and no longer wanted, triggers what is wanted
    /// and not open (or changed verdict), within the rate limit.
    pub async fn sync(&mut self, desired: &BTreeMap<String, Alert>, now_ms: i64) {
        let published = Published {
            alerts: desired.clone(),
            ..Published::default()
        };
        self.sync_judged(&published, now_ms).await
    }

    /// [`Self::sync`] from a publication: alerts on windows starting before
    /// `judged_from` (not judged yet) or not final (`unsettled`) are not resolved for
    /// being absent from its alerts; those whose subject is no longer judged at all
    /// (window out of the horizon, auditor forgotten) expire ([`Self::expire`]).
    pub async fn sync_judged(&mut self, published: &Published, now_ms: i64) {
        self.expire(published).await;
        let work = self.work(published, now_ms);
        self.pass(work, now_ms).await
    }

    /// Delivers `work` (from [`Self::work`]) within the rate limit, remembering what
    /// failed or was deferred.
    async fn pass(&mut self, work: Vec<(Action, Alert)>, now_ms: i64) {
        self.waiting.clear();
        let mut limited = 0;
        for (action, alert) in work {
            if !self.take_token() {
                limited += 1;
                self.waiting.insert(work_item(action, &alert));
                continue;
            }
            match self.deliver(action, &alert).await {
                Ok(()) => {
                    self.metrics
                        .alerts_sent
                        .get_or_create(&AlertLabels {
                            channel: (&self.channel.name).into(),
                            action: action.as_str().into(),
                        })
                        .inc();
                    self.remember(action, &alert, now_ms).await;
                    match action {
                        Action::Trigger => {
                            self.open.insert(alert.dedup_key.clone(), alert);
                        }
                        Action::Resolve => {
                            self.open.remove(&alert.dedup_key);
                        }
                    }
                }
                Err(e) => {
                    self.metrics
                        .alert_failures
                        .get_or_create(&self.labels())
                        .inc();
                    self.waiting.insert(work_item(action, &alert));
                    tracing::warn!(channel = %self.channel.name, key = %alert.dedup_key, error = %e,
                        "alert delivery failed; retried at the next pass");
                }
            }
        }
        if limited > 0 {
            self.metrics
                .alerts_rate_limited
                .get_or_create(&self.labels())
                .inc_by(limited);
            tracing::info!(channel = %self.channel.name, deferred = limited,
                "alert rate limit reached; the rest waits for the next period");
        }
        self.metrics
            .alerts_open
            .get_or_create(&self.labels())
            .set(self.open.len() as i64);
    }

    /// What a pass would do, in order: triggers of what is wanted and not open (or
    /// changed verdict), then resolves of what is open, judged, and no longer wanted.
    fn work(&self, published: &Published, now_ms: i64) -> Vec<(Action, Alert)> {
        let desired = &published.alerts;
        let judged_from = published.judged_from;
        let max_age = self.config.max_window_age.as_millis() as i64;
        let triggers: Vec<Alert> = desired
            .iter()
            .filter(|(k, a)| {
                self.open.get(*k).is_none_or(|o| o.verdict != a.verdict)
                    && a.recent_enough(now_ms - max_age)
            })
            .map(|(_, a)| a.clone())
            .collect();
        let resolves: Vec<Alert> = self
            .open
            .iter()
            .filter(|(k, _)| !desired.contains_key(*k) && !published.unsettled.contains(*k))
            .filter(|(_, a)| judged_from.is_none_or(|from| a.judged_from(from)))
            .filter(|(_, a)| !a.expired(published) && !a.left_out(published))
            .map(|(_, a)| a.clone())
            .collect();
        // New pages before resolves: a resolve that waits costs a stale open alert,
        // a page that waits costs the on-call's time.
        prioritise(triggers)
            .into_iter()
            .map(|a| (Action::Trigger, a))
            .chain(
                prioritise(resolves)
                    .into_iter()
                    .map(|a| (Action::Resolve, a)),
            )
            .collect()
    }

    /// What the worker does when a new publication wakes it: a pass if the publication
    /// asks for something the last pass did not try (a new or changed alert, a resolve
    /// a load step made possible); returns whether it ran one. Work that failed or was
    /// deferred waits for the periodic pass: publications come at the pace of the
    /// evaluation and (cold start) of every load step, and a pass at their pace would
    /// send a failed delivery again and count it, and the deferred ones, each time.
    pub async fn on_publication(&mut self, published: &Published, now_ms: i64) -> bool {
        self.expire(published).await;
        let work = self.work(published, now_ms);
        if work
            .iter()
            .all(|(action, alert)| self.waiting.contains(&work_item(*action, alert)))
        {
            return false;
        }
        self.pass(work, now_ms).await;
        true
    }

    /// Forgets the open alerts that `published` no longer judges at all (window out of
    /// the horizon, auditor forgotten), without a notification: the anomaly was never
    /// fixed, so a resolve would tell the on-call it was; the receiver keeps the alert
    /// open until someone closes it. Their stored rows go too, so the alert state does
    /// not grow with them and a restart neither resolves nor pages them again.
    async fn expire(&mut self, published: &Published) {
        let expired: Vec<String> = self
            .open
            .iter()
            .filter(|(k, a)| !published.alerts.contains_key(*k) && a.expired(published))
            .map(|(k, _)| k.clone())
            .collect();
        if expired.is_empty() {
            return;
        }
        for key in expired {
            let Some(alert) = self.open.remove(&key) else {
                continue;
            };
            self.metrics
                .alerts_expired
                .get_or_create(&self.labels())
                .inc();
            tracing::info!(channel = %self.channel.name, key = %key, verdict = alert.verdict.as_str(),
                "alert expired unresolved: what it is about is no longer judged (window out of the horizon, or auditor forgotten); no resolve is sent");
            if let Some(store) = &self.store {
                if let Err(e) = store.delete_open_alert(&self.channel.name, &key).await {
                    tracing::warn!(channel = %self.channel.name, key = %key, error = %e,
                        "cannot forget an expired alert; it expires again after a restart");
                }
            }
        }
        self.metrics
            .alerts_open
            .get_or_create(&self.labels())
            .set(self.open.len() as i64);
    }

    /// Loads the alerts this channel had open before a restart (and sets their gauge).
    pub async fn load_open(&mut self) {
        let Some(store) = &self.store else { return };
        match store.open_alerts(&self.channel.name).await {
            Ok(rows) => {
                for (key, json) in rows {
                    match serde_json::from_str::<Alert>(&json) {
                        Ok(a) => {
                            self.open.insert(key, a);
                        }
                        Err(e) => tracing::warn!(channel = %self.channel.name, %key, error = %e,
                            "unreadable stored alert; it will not be resolved"),
                    }
                }
            }
            Err(e) => tracing::warn!(channel = %self.channel.name, error = %e,
                "cannot read open alerts; open anomalies may be triggered again"),
        }
        // Counted from the start: a pass may not run before they change.
        self.metrics
            .alerts_open
            .get_or_create(&self.labels())
            .set(self.open.len() as i64);
    }

    /// Persists what was delivered; a failure only costs a repeated notification
    /// after a restart, so it is logged, not fatal.
    async fn remember(&self, action: Action, alert: &Alert, now_ms: i64) {
        let Some(store) = &self.store else { return };
        let name = &self.channel.name;
        let result = match action {
            Action::Trigger => match serde_json::to_string(alert) {
                Ok(json) => {
                    store
                        .save_open_alert(name, &alert.dedup_key, &json, now_ms)
                        .await
                }
                Err(e) => {
                    tracing::warn!(error = %e, "alert not serializable");
                    Ok(())
                }
            },
            Action::Resolve => store.delete_open_alert(name, &alert.dedup_key).await,
        };
        if let Err(e) = result {
            tracing::warn!(channel = %name, key = %alert.dedup_key, error = %e,
                "cannot persist alert state");
        }
    }

    /// The channel and the receiving host, for errors and logs. A Slack or webhook
    /// URL is itself the credential (`/services/T…/B…/secret`): never its path.
    fn where_to(&self, url: &str) -> String {
        let host = reqwest::Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_string))
            .unwrap_or_else(|| "?".into());
        format!("channel {:?} (host {host})", self.channel.name)
    }

    async fn deliver(&self, action: Action, alert: &Alert) -> Result<(), SendError> {
        let url = match (&self.channel.url, &self.channel.kind) {
            (Some(u), _) => u.as_str(),
            (None, ChannelKind::Pagerduty) => PAGERDUTY_URL,
            (None, _) => return Err(SendError::Permanent("no url".into())),
        };
        let body = payload(&self.channel, action, alert);
        let mut backoff = Backoff::new(self.config.initial_backoff, self.config.max_backoff);
        let mut attempt = 1;
        loop {
            let result = match self.client.post(url).json(&body).send().await {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) => {
                    let status = r.status();
                    let text = r.text().await.unwrap_or_default();
                    let mut excerpt: String = text.chars().take(200).collect();
                    if let Some(key) = self
                        .channel
                        .routing_key
                        .as_deref()
                        .filter(|k| !k.is_empty())
                    {
                        excerpt = excerpt.replace(key, "***");
                    }
                    let msg = format!("{} answered {status}: {excerpt}", self.where_to(url));
                    if status.as_u16() == 429 || status.is_server_error() {
                        SendError::Transient(msg)
                    } else {
                        SendError::Permanent(msg)
                    }
                }
                // reqwest's error text carries the URL: drop it.
                Err(e) => {
                    SendError::Transient(format!("{}: {}", self.where_to(url), e.without_url()))
                }
            };
            if matches!(result, SendError::Permanent(_)) || attempt >= self.config.attempts {
                return Err(result);
            }
            self.metrics
                .alert_retries
                .get_or_create(&self.labels())
                .inc();
            tokio::time::sleep(backoff.next_delay()).await;
            attempt += 1;
        }
    }

    /// Runs until `shutdown`: a pass when a publication brings new work
    /// ([`Self::on_publication`]), and a periodic one (every `rate_period`, at most
    /// 30 s) that sends what failed or was deferred. A wake that runs no pass does not
    /// postpone the periodic one.
    pub async fn run(mut self, mut rx: watch::Receiver<Desired>, shutdown: CancellationToken) {
        let retry_every = self.config.rate_period.min(Duration::from_secs(30));
        self.load_open().await;
        let first = rx.borrow_and_update().clone();
        if let Some(desired) = first {
            self.sync_judged(&desired, common::now_ms()).await;
        }
        let mut next_pass = tokio::time::Instant::now() + retry_every;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                changed = rx.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let desired = rx.borrow_and_update().clone();
                    if let Some(desired) = desired {
                        if self.on_publication(&desired, common::now_ms()).await {
                            next_pass = tokio::time::Instant::now() + retry_every;
                        }
                    }
                }
                _ = tokio::time::sleep_until(next_pass) => {
                    let desired = rx.borrow_and_update().clone();
                    if let Some(desired) = desired {
                        self.sync_judged(&desired, common::now_ms())
                            .await;
                    }
                    next_pass = tokio::time::Instant::now() + retry_every;
                }
            }
        }
    }
}
