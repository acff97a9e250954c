//! The roll-up task: adds staged increments to their window rows behind the ingest
//! path (PostgreSQL; a no-op on SQLite, which rolls up while writing). Each roll-up
//! is one transaction that also removes what it added from the queue, so a crash or
//! a database outage loses nothing and adds nothing twice. When it falls behind,
//! each transaction takes more increments that share windows, and gets cheaper per
//! increment.

use std::sync::Arc;
use std::time::Duration;

use common::Backoff;
use store::{Ingest, RollupOutcome, Store};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config::RetryConfig;
use crate::metrics::Metrics;

/// Also roll up this often without a wake-up: staged increments of a previous run.
const IDLE_CHECK: Duration = Duration::from_secs(1);

pub async fn run(
    store: Store,
    limit: u32,
    staged: Arc<Notify>,
    metrics: Metrics,
    retry: RetryConfig,
    shutdown: CancellationToken,
) {
    let mut backoff = Backoff::new(retry.initial_backoff, retry.max_backoff);
    while !shutdown.is_cancelled() {
        match store.rollup_counted(limit).await {
            Ok(RollupOutcome { taken: 0, .. }) => {
                backoff.reset();
                metrics.rollup_caught_up.set(1);
                tokio::select! {
                    _ = staged.notified() => {}
                    _ = tokio::time::sleep(IDLE_CHECK) => {}
                    _ = shutdown.cancelled() => return,
                }
            }
            Ok(outcome) => {
                backoff.reset();
                metrics.rolled_up.inc_by(outcome.rolled_up());
                // Each one logged and kept as a reject by the store.
                metrics.rollup_missing_messages.inc_by(outcome.missing);
                // A full roll-up means more may be waiting.
                metrics
                    .rollup_caught_up
                    .set(i64::from(outcome.taken < u64::from(limit)));
            }
            Err(e) => {
                metrics.rollup_errors.inc();
                metrics.rollup_caught_up.set(0);
                let delay = backoff.next_delay();
                tracing::warn!(error = %e, backoff = ?delay, "roll-up failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = shutdown.cancelled() => return,
                }
            }
        }
    }
}
