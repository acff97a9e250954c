//! Writing batches to the store: retried with backoff while the database is down, so
//! a Kafka source stops consuming (its offsets stay uncommitted) and resumes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use common::Health;
use store::{AuditStore, Batch, BatchOutcome, Store, StoreError};
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
}

impl Sink {
    /// One attempt (staged: the roll-up task adds increments to their windows).
    pub async fn write_once(
        &self,
        source: &str,
        batch: &Batch,
    ) -> Result<BatchOutcome, StoreError> {
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
                Ok(outcome)
            }
            Err(e) => {
                self.metrics.source(&self.metrics.store_errors, source);
                self.metrics.store_up.set(0);
                self.health.set_unhealthy(format!("store unavailable: {e}"));
                Err(e)
            }
        }
    }

    /// Retries until the batch is stored (`Some`) or `shutdown` (`None`: nothing was
    /// stored, nothing may be acknowledged). Invalid input cannot happen here: sources
    /// validate every message first and turn failures into rejects.
    pub async fn write(
        &self,
        source: &str,
        batch: &Batch,
        shutdown: &CancellationToken,
    ) -> Option<BatchOutcome> {
        let mut backoff = self.retry.initial_backoff;
        let mut attempt = 0u32;
        loop {
            match self.write_once(source, batch).await {
                Ok(outcome) => {
                    if attempt > 0 {
                        tracing::info!(
                            source,
                            attempts = attempt + 1,
                            "store available again, batch written"
                        );
                    }
                    return Some(outcome);
                }
                Err(e) => {
                    attempt += 1;
                    tracing::warn!(
                        source, attempt, error = %e, backoff = ?backoff,
                        "cannot write batch to the store; consumption paused, retrying"
                    );
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = shutdown.cancelled() => return None,
                    }
                    backoff =
                        (backoff * 2).min(self.retry.max_backoff.max(Duration::from_millis(1)));
                }
            }
        }
    }
}
