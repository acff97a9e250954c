//! A channel's worker: carries out the plan of each publication ([`super::plan`]) —
//! delivery over HTTP with retries and backoff, the rate limit, the open alerts kept
//! in the store across restarts, and the channel's metrics.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Backoff;
use store::AlertLedger;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::model::{Action, Alert, Desired, Published};
use super::payload::payload;
use super::plan::{plan, RateLimit, Work};
use crate::config::{AlertingConfig, ChannelConfig, ChannelKind, PAGERDUTY_URL};
use crate::engine::Verdict;
use crate::metrics::{AlertLabels, ChannelLabels, Metrics};

pub struct ChannelWorker {
    channel: ChannelConfig,
    config: AlertingConfig,
    client: reqwest::Client,
    metrics: Arc<Metrics>,
    open: BTreeMap<String, Alert>,
    rate: RateLimit,
    store: Option<store::Store>,
    /// The work the last pass left undone (failed or deferred), for the periodic pass.
    waiting: BTreeSet<Attempt>,
}

/// One delivery of a pass: a trigger of a key with its verdict, or a resolve.
type Attempt = (Action, String, Option<Verdict>);

fn attempt(action: Action, alert: &Alert) -> Attempt {
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
            rate: RateLimit::new(config.rate_limit, config.rate_period),
            config,
            client,
            metrics,
            open: BTreeMap::new(),
            store,
            waiting: BTreeSet::new(),
        }
    }

    fn labels(&self) -> ChannelLabels {
        ChannelLabels {
            channel: (&self.channel.name).into(),
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
        let work = self.expire(self.plan(published, now_ms)).await;
        self.pass(work, now_ms).await
    }

    /// What this channel does for `published` ([`plan`]).
    fn plan(&self, published: &Published, now_ms: i64) -> Vec<Work> {
        let max_age = self.config.max_window_age.as_millis() as i64;
        plan(&self.open, published, now_ms, max_age)
    }

    /// Delivers `work` (from [`plan`]) within the rate limit, remembering what
    /// failed or was deferred.
    async fn pass(&mut self, work: Vec<(Action, Alert)>, now_ms: i64) {
        self.waiting.clear();
        let mut limited = 0;
        for (action, alert) in work {
            if !self.rate.take(Instant::now()) {
                limited += 1;
                self.waiting.insert(attempt(action, &alert));
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
                    self.waiting.insert(attempt(action, &alert));
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

    /// What the worker does when a new publication wakes it: a pass if the publication
    /// asks for something the last pass did not try (a new or changed alert, a resolve
    /// a load step made possible); returns whether it ran one. Work that failed or was
    /// deferred waits for the periodic pass: publications come at the pace of the
    /// evaluation and (cold start) of every load step, and a pass at their pace would
    /// send a failed delivery again and count it, and the deferred ones, each time.
    pub async fn on_publication(&mut self, published: &Published, now_ms: i64) -> bool {
        let work = self.expire(self.plan(published, now_ms)).await;
        if work
            .iter()
            .all(|(action, alert)| self.waiting.contains(&attempt(*action, alert)))
        {
            return false;
        }
        self.pass(work, now_ms).await;
        true
    }

    /// Carries out the expiries of `work` ([`Work::Expire`]) and returns the deliveries.
    /// An expired alert is forgotten without a notification: the anomaly was never
    /// fixed, so a resolve would tell the on-call it was; the receiver keeps the alert
    /// open until someone closes it. Their stored rows go too, so the alert state does
    /// not grow with them and a restart neither resolves nor pages them again.
    async fn expire(&mut self, work: Vec<Work>) -> Vec<(Action, Alert)> {
        let mut expired = Vec::new();
        let mut sends = Vec::new();
        for w in work {
            match w {
                Work::Expire(key) => expired.push(key),
                Work::Send(action, alert) => sends.push((action, alert)),
            }
        }
        if expired.is_empty() {
            return sends;
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
        sends
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
