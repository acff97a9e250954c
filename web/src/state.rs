//! What handlers and jobs share ([`AppState`]): the configuration, the stores, the
//! verdict index and the evaluator that writes it, the alert publication; and the
//! jobs `serve` runs (the evaluation loop, one worker per alert channel).

use std::sync::{Arc, RwLock};
use std::time::Instant;

use store::{Store, StoreError};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::alert;
use crate::config::{self, Config};
use crate::engine::topology::TopologyCell;
use crate::engine::Topology;
use crate::error::AppError;
use crate::eval::{self, CycleStats, Evaluator, VerdictIndex};
use crate::metrics::Metrics;

/// Everything handlers and jobs share. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    /// The topology; its window size is learned by the first evaluation when
    /// `[topology] window` is not set (see [`AppState::topology`]).
    pub topology: Arc<TopologyCell>,
    pub store: Store,
    /// Where the open alerts are kept: `serve.alert_database_url` when `store` is a
    /// read replica, else `store` itself.
    pub alert_store: Store,
    pub index: Arc<RwLock<VerdictIndex>>,
    pub metrics: Arc<Metrics>,
    pub(crate) evaluator: Arc<tokio::sync::Mutex<Evaluator>>,
    pub(crate) alerts: Arc<watch::Sender<alert::Desired>>,
    /// `serve.max_concurrent_requests` slots shared by every API route.
    pub(crate) api_slots: Arc<tokio::sync::Semaphore>,
    /// `auth.tokens`, read (files included) at start.
    pub(crate) tokens: Arc<common::Tokens>,
}

impl AppState {
    pub fn new(config: Config, store: Store) -> anyhow::Result<Self> {
        let alert_store = store.clone();
        Self::with_alert_store(config, store, alert_store)
    }

    /// A state that reads from `store` (a read replica may do) and keeps the open
    /// alerts and the proven losses in `alert_store` (a writer).
    pub fn with_alert_store(
        config: Config,
        store: Store,
        alert_store: Store,
    ) -> anyhow::Result<Self> {
        config.validate()?;
        let tokens = Arc::new(common::Tokens::load(&config.auth.tokens, config::SCOPES)?);
        let topology = Arc::new(TopologyCell::new(config.topology.clone())?);
        let index = Arc::new(RwLock::new(VerdictIndex {
            max_entries: config.serve.max_verdicts,
            ..VerdictIndex::default()
        }));
        let metrics = Arc::new(Metrics::new());
        let evaluator = Evaluator::new(
            store.clone(),
            alert_store.clone(),
            topology.clone(),
            index.clone(),
            metrics.clone(),
            config.serve.horizon.as_millis() as i64,
        );
        let (alerts, _) = watch::channel(None);
        let api_slots = Arc::new(tokio::sync::Semaphore::new(
            config.serve.max_concurrent_requests,
        ));
        Ok(Self {
            api_slots,
            config: Arc::new(config),
            topology,
            store,
            alert_store,
            index,
            metrics,
            evaluator: Arc::new(tokio::sync::Mutex::new(evaluator)),
            alerts: Arc::new(alerts),
            tokens,
        })
    }

    /// The topology, or 503 while its window size is not known yet (`[topology]
    /// window` not set and no window stored).
    pub fn topology(&self) -> Result<Arc<Topology>, AppError> {
        self.topology.get().ok_or_else(|| {
            AppError::unavailable(format!("waiting for {}", eval::WAITING_FOR_WINDOW))
        })
    }

    /// Runs one evaluation cycle at `now` (epoch ms), and on a cold start every load
    /// step after it (the whole horizon is judged on return); publishes the anomalies
    /// to the alert channels.
    pub async fn evaluate(&self, now: i64) -> Result<CycleStats, StoreError> {
        let mut stats = self.evaluate_cycle(now).await?;
        while !self.load_step(now).await? {}
        stats.anomalies = self
            .index
            .read()
            .expect("verdict index lock")
            .anomaly_count();
        Ok(stats)
    }

    /// One evaluation cycle at `now` (what the evaluation job runs every
    /// `evaluate_every`): on a cold start, the first one judges only the recent windows
    /// and [`AppState::load_step`] the rest of the horizon. Publishes the anomalies of
    /// the windows judged so far to the alert channels after every cycle and step: a
    /// judged window pages at once, and the publication says from which window on it
    /// is judged, so that open alerts on older windows are not resolved by absence.
    pub async fn evaluate_cycle(&self, now: i64) -> Result<CycleStats, StoreError> {
        let mut evaluator = self.evaluator.lock().await;
        let stats = evaluator.cycle(now).await?;
        self.publish_alerts();
        Ok(stats)
    }

    /// One cold-start step: judges the next older part of the horizon not judged yet
    /// (see [`eval::Evaluator::load_step`]); returns whether the whole horizon is
    /// judged. Every step publishes the alerts of the windows judged so far.
    pub async fn load_step(&self, now: i64) -> Result<bool, StoreError> {
        let mut evaluator = self.evaluator.lock().await;
        if !evaluator.loading() {
            return Ok(true);
        }
        let done = evaluator.load_step(now).await?;
        self.publish_alerts();
        Ok(done)
    }

    fn publish_alerts(&self) {
        let published = {
            let index = self.index.read().expect("verdict index lock");
            // Nothing judged yet (the window size is not known: no window stored and
            // `[topology] window` not set): a publication of nothing would resolve, or
            // expire, every alert open before a restart.
            if index.evaluated_at.is_none() {
                return;
            }
            let stall_after_ms =
                i64::try_from(self.config.topology.stall_after.as_millis()).unwrap_or(i64::MAX);
            // Windows up to the last dropped verdict are not all in the index: their
            // alerts must not resolve by absence.
            let judged_from = match (index.loading.as_ref(), index.dropped) {
                (l, Some((_, hi))) => Some(l.map_or(hi + 1, |l| l.loaded_from.max(hi + 1))),
                (l, None) => l.map(|l| l.loaded_from),
            };
            alert::Published {
                alerts: alert::desired(&index, &self.config.alerting, stall_after_ms),
                judged_from,
                unsettled: alert::unsettled(&index),
                horizon_start: index.horizon_start,
                auditors: Some(alert::known_auditors(&index)),
                auditors_capped: index.auditors_capped,
                withdrawn: alert::withdrawn(&index),
            }
        };
        // Channels are woken when the publication changes: new alerts, or a load step's
        // new bound (which may let an open alert of a window just judged resolve). Each
        // worker runs a pass only for work it has not tried yet
        // (`ChannelWorker::on_publication`): failed and deferred deliveries wait for its
        // periodic pass, whatever the pace of the load.
        self.alerts.send_if_modified(|current| {
            let wake = current.as_deref() != Some(&published);
            *current = Some(Arc::new(published));
            wake
        });
    }

    /// The alerts last published to the channels (`None`: nothing published yet).
    pub fn published_alerts(&self) -> alert::Desired {
        self.alerts.borrow().clone()
    }

    /// Spawns the evaluation loop and one worker per alert channel; they stop with
    /// `shutdown`.
    pub fn spawn_jobs(&self, shutdown: &CancellationToken) -> Vec<tokio::task::JoinHandle<()>> {
        let mut handles = Vec::new();
        if self.config.alerting.enabled {
            for c in &self.config.alerting.channels {
                let worker = alert::ChannelWorker::new(
                    c.clone(),
                    self.config.alerting.clone(),
                    self.metrics.clone(),
                    Some(self.alert_store.clone()),
                );
                handles.push(tokio::spawn(
                    worker.run(self.alerts.subscribe(), shutdown.child_token()),
                ));
            }
        }
        let state = self.clone();
        let token = shutdown.child_token();
        handles.push(tokio::spawn(async move {
            let every = state.config.serve.evaluate_every;
            loop {
                let started = Instant::now();
                match state.evaluate_cycle(common::now_ms()).await {
                    Ok(s) => tracing::debug!(?s, elapsed = ?started.elapsed(), "evaluation cycle"),
                    Err(e) => tracing::warn!(error = %e, "evaluation cycle failed"),
                }
                // Cold start: judge the rest of the horizon, one step at a time, until
                // the next cycle is due (the API answers in between).
                while started.elapsed() < every && !token.is_cancelled() {
                    match state.load_step(common::now_ms()).await {
                        Ok(true) => break,
                        Ok(false) => {}
                        Err(e) => {
                            tracing::warn!(error = %e, "cold start: load step failed; retrying after the next cycle");
                            break;
                        }
                    }
                }
                tokio::select! {
                    _ = token.cancelled() => return,
                    _ = tokio::time::sleep(every.saturating_sub(started.elapsed())) => {}
                }
            }
        }));
        handles
    }
}
