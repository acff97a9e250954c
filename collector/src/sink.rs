//! Writing batches to the store: retried with backoff while the database is down, so
//! a Kafka source stops consuming (its offsets stay uncommitted) and resumes.
//!
//! A batch the store refuses because of its data (validation, a PostgreSQL data
//! exception) would fail the same way on every retry and stop the source for good.
//! Such a batch is written again one message at a time: each message the store
//! refuses is quarantined (kept as a reject with the store's reason) and the rest is
//! stored. Messages stored before a transient error interrupts this are duplicates
//! when the batch is retried, so nothing is counted twice.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Notify;

use common::{Backoff, Health};
use store::{Batch, BatchOutcome, Ingest, Reject, Store, StoreError, WriteOutcome};
use tokio_util::sync::CancellationToken;

use crate::config::RetryConfig;
use crate::metrics::{Metrics, Outcome};

#[derive(Clone)]
pub struct Sink {
    pub store: Store,
    pub metrics: Metrics,
    pub health: Health,
    pub retry: RetryConfig,
    /// Wakes the roll-up task when new increments were staged.
    pub staged: Arc<Notify>,
    /// The bounds per emitter every message is checked against before it is written.
    pub bounds: Arc<crate::bounds::Bounds>,
}

/// What became of one message of a written batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    Accepted,
    Duplicate,
    /// The store refused it for its data; kept as a reject with this reason.
    Quarantined(String),
}

impl From<WriteOutcome> for Written {
    fn from(o: WriteOutcome) -> Self {
        match o {
            WriteOutcome::Accepted => Written::Accepted,
            WriteOutcome::Duplicate => Written::Duplicate,
        }
    }
}

impl Sink {
    /// One store transaction (staged: the roll-up task adds increments to their windows).
    async fn attempt(&self, source: &str, batch: &Batch) -> Result<BatchOutcome, StoreError> {
        let started = Instant::now();
        match self.store.stage_batch(batch).await {
            Ok(outcome) => {
                self.metrics
                    .write_seconds
                    .observe(started.elapsed().as_secs_f64());
                self.metrics.store_up.set(1);
                self.health.set_healthy();
                self.metrics.source(&self.metrics.batches, source);
                self.metrics
                    .count(source, Outcome::Accepted, outcome.accepted());
                self.metrics
                    .count(source, Outcome::Duplicate, outcome.duplicates());
                self.metrics
                    .count(source, Outcome::Rejected, batch.rejects.len());
                if outcome.accepted() > 0 {
                    self.staged.notify_one();
                }
                Ok(outcome)
            }
            Err(e) if e.is_data_error() => Err(e),
            Err(e) => {
                self.metrics.source(&self.metrics.store_errors, source);
                self.metrics.store_up.set(0);
                self.health.set_unhealthy(format!("store unavailable: {e}"));
                Err(e)
            }
        }
    }

    /// One attempt; a data error is isolated (see the module doc), so an `Err` is
    /// always worth retrying. One [`Written`] per message of `batch`, in order.
    pub async fn write_once(
        &self,
        source: &str,
        batch: &Batch,
    ) -> Result<Vec<Written>, StoreError> {
        match self.attempt(source, batch).await {
            Ok(outcome) => Ok(outcome.outcomes.into_iter().map(Written::from).collect()),
            Err(e) if e.is_data_error() => self.isolate(source, batch, &e).await,
            Err(e) => Err(e),
        }
    }

    async fn isolate(
        &self,
        source: &str,
        batch: &Batch,
        error: &StoreError,
    ) -> Result<Vec<Written>, StoreError> {
        tracing::warn!(source, %error, messages = batch.messages.len(),
            "the store refused a batch for its data; writing it in parts to set the culprit aside");
        // Bisection: a part the store refuses is split in two until the message that
        // causes it is alone; parts that are stored stay stored.
        let mut written: Vec<Option<Written>> = vec![None; batch.messages.len()];
        let mut quarantined = Vec::new();
        let mut parts = Vec::new();
        parts.push(0..batch.messages.len());
        while let Some(range) = parts.pop() {
            if range.is_empty() {
                continue;
            }
            let part = Batch {
                messages: batch.messages[range.clone()].to_vec(),
                rejects: Vec::new(),
                received_at_ms: batch.received_at_ms,
            };
            match self.attempt(source, &part).await {
                Ok(outcome) => {
                    for (slot, o) in written[range].iter_mut().zip(outcome.outcomes) {
                        *slot = Some(o.into());
                    }
                }
                Err(e) if e.is_data_error() && range.len() > 1 => {
                    let middle = range.start + range.len() / 2;
                    parts.push(middle..range.end);
                    parts.push(range.start..middle);
                }
                Err(e) if e.is_data_error() => {
                    let message = &batch.messages[range.start];
                    let reason = store::sanitize_text(
                        &format!("quarantined: the store refused this message: {e}"),
                        store::MAX_REJECT_REASON_LEN,
                    );
                    tracing::error!(source, uuid = %message.uuid, %reason, "message quarantined");
                    self.metrics.quarantined.inc();
                    quarantined.push(Reject {
                        source: format!("{source}:quarantine"),
                        reason: reason.clone(),
                        payload: store::sanitize_text(&format!("{message:?}"), 4096),
                    });
                    written[range.start] = Some(Written::Quarantined(reason));
                }
                Err(e) => return Err(e),
            }
        }
        let rest = Batch {
            messages: Vec::new(),
            rejects: batch.rejects.iter().chain(&quarantined).cloned().collect(),
            received_at_ms: batch.received_at_ms,
        };
        match self.attempt(source, &rest).await {
            Ok(_) => {}
            // Rejects are sanitised before storing; should one still be refused, keep
            // going rather than stop the source for a record of a record.
            Err(e) if e.is_data_error() => {
                tracing::error!(source, error = %e, rejects = rest.rejects.len(), "cannot store rejects; dropped");
            }
            Err(e) => return Err(e),
        }
        Ok(written
            .into_iter()
            .map(|w| w.expect("every message is written or quarantined"))
            .collect())
    }

    /// Retries until the batch is stored (`Some`) or `shutdown` (`None`: nothing was
    /// stored, nothing may be acknowledged). Data errors never come back here: they
    /// are isolated by [`Sink::write_once`].
    pub async fn write(
        &self,
        source: &str,
        batch: &Batch,
        shutdown: &CancellationToken,
    ) -> Option<Vec<Written>> {
        let mut backoff = Backoff::new(self.retry.initial_backoff, self.retry.max_backoff);
        let mut attempt = 0u32;
        loop {
            match self.write_once(source, batch).await {
                Ok(written) => {
                    if attempt > 0 {
                        tracing::info!(
                            source,
                            attempts = attempt + 1,
                            "store available again, batch written"
                        );
                    }
                    return Some(written);
                }
                Err(e) => {
                    attempt += 1;
                    let delay = backoff.next_delay();
                    tracing::warn!(
                        source, attempt, error = %e, backoff = ?delay,
                        "cannot write batch to the store; consumption paused, retrying"
                    );
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = shutdown.cancelled() => return None,
                    }
                }
            }
        }
    }
}
