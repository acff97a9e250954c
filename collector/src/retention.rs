//! Retention and time partitions.
//!
//! PostgreSQL: the tables that grow with traffic are partitioned by day; retention
//! drops the day partitions that lie wholly before the cutoff (a `DROP TABLE` each, no
//! row-by-row delete), so a row is kept between the retention and the retention plus
//! one day. Rows of the default partitions (times no day partition covered) and
//! rejects are deleted in small batches, each its own short transaction that skips
//! rows an ingesting transaction holds. [`maintain_partitions`] creates the day
//! partitions from the retention cutoff to [`DAYS_AHEAD`] days ahead, at start and
//! every [`MAINTENANCE_EVERY`].
//!
//! SQLite: windows, message UUIDs and rejects are deleted in small batches, as
//! exactly at the cutoff as on PostgreSQL's default partitions.

use std::time::Duration;

use store::{RetentionOutcome, Store, Upkeep};
use tokio_util::sync::CancellationToken;

use crate::config::RetentionConfig;
use crate::metrics::{Metrics, RetentionLabels};
use common::now_ms;

pub async fn run(
    store: Store,
    config: RetentionConfig,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    loop {
        match pass(&store, &config, &metrics, &shutdown).await {
            Ok(total) if total.total() > 0 => tracing::info!(?total, "retention pass done"),
            Ok(_) => {}
            Err(e) => {
                metrics.retention_errors.inc();
                tracing::warn!(error = %e, "retention pass failed; next one at the next interval");
            }
        }
        // Independent of the pass above: a failure of one leaves the other to run.
        for step in [Stale::Progress, Stale::Emitters, Stale::Rejects] {
            match forget_stale(&store, &config, &metrics, &shutdown, step).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(
                    table = step.table(),
                    deleted = n,
                    "retention: stale rows deleted"
                ),
                Err(e) => {
                    metrics.retention_errors.inc();
                    tracing::warn!(table = step.table(), error = %e, "retention of stale rows failed; next try at the next interval");
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(config.interval.max(Duration::from_secs(1))) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

/// How many days ahead of today day partitions exist (PostgreSQL).
pub const DAYS_AHEAD: i64 = 7;
/// How often the day partitions are checked and created.
pub const MAINTENANCE_EVERY: Duration = Duration::from_secs(3600);
/// Day partitions are created back to the retention cutoff, but never further back
/// than this (a retention of years would otherwise create a table per day of it).
const MAX_DAYS_BACK: i64 = 400;

/// Creates the missing day partitions at start and every [`MAINTENANCE_EVERY`]; runs
/// whether retention is enabled or not (without it, a day with no partition would go
/// to the default partition).
pub async fn maintain_partitions(
    store: Store,
    config: RetentionConfig,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    loop {
        let now = now_ms();
        let back = (config.windows.as_millis() as i64).min(MAX_DAYS_BACK * 86_400_000);
        match store
            .prepare_partitions(now.saturating_sub(back), now + DAYS_AHEAD * 86_400_000)
            .await
        {
            Ok(0) => {}
            Ok(n) => {
                metrics.partitions_created.inc_by(n);
                tracing::info!(created = n, "day partitions created");
            }
            Err(e) => {
                metrics.partition_errors.inc();
                tracing::warn!(error = %e, "creating day partitions failed; next try in a minute");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(60)) => continue,
                    _ = shutdown.cancelled() => return,
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(MAINTENANCE_EVERY) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

/// Drops the old day partitions, then deletes batch after batch of what is left
/// (default partitions, rejects; everything on SQLite) until nothing old is left (or
/// shutdown).
pub async fn pass(
    store: &Store,
    config: &RetentionConfig,
    metrics: &Metrics,
    shutdown: &CancellationToken,
) -> store::Result<RetentionOutcome> {
    let now = now_ms();
    let window_cutoff = now.saturating_sub(config.windows.as_millis() as i64);
    let message_cutoff = now.saturating_sub(config.messages.as_millis() as i64);
    let mut total = RetentionOutcome::default();
    while !shutdown.is_cancelled() {
        let out = store
            .retention(window_cutoff, message_cutoff, config.batch_size)
            .await?;
        for (table, n) in [
            ("audit_window", out.windows),
            ("audit_message", out.messages),
            ("audit_reject", out.rejects),
        ] {
            if n > 0 {
                metrics
                    .retention_deleted
                    .get_or_create(&RetentionLabels {
                        table: table.into(),
                    })
                    .inc_by(n);
            }
        }
        if out.partitions > 0 {
            metrics.retention_partitions_dropped.inc_by(out.partitions);
        }
        // A failed step was logged by the store; the others ran and go on.
        if out.failed_steps > 0 {
            metrics.retention_errors.inc_by(out.failed_steps);
        }
        total.windows += out.windows;
        total.messages += out.messages;
        total.rejects += out.rejects;
        total.partitions += out.partitions;
        total.failed_steps += out.failed_steps;
        if out.total() == 0 {
            break;
        }
        // Let ingestion have the database between batches.
        tokio::task::yield_now().await;
    }
    Ok(total)
}

/// Rows that grow with what emitters send rather than with time partitions.
#[derive(Debug, Clone, Copy)]
pub enum Stale {
    /// Progress of partitions not reported for `retention.progress`.
    Progress,
    /// Emitters not heard from for `retention.progress`.
    Emitters,
    /// Rejects beyond the newest `retention.max_rejects`.
    Rejects,
}

impl Stale {
    pub fn table(self) -> &'static str {
        match self {
            Stale::Progress => "audit_progress",
            Stale::Emitters => "audit_emitter",
            Stale::Rejects => "audit_reject",
        }
    }
}

/// Deletes the stale rows of one table, batch after batch until none is left (or
/// shutdown); returns how many.
pub async fn forget_stale(
    store: &Store,
    config: &RetentionConfig,
    metrics: &Metrics,
    shutdown: &CancellationToken,
    step: Stale,
) -> store::Result<u64> {
    let cutoff = now_ms().saturating_sub(config.progress.as_millis() as i64);
    let mut total = 0;
    while !shutdown.is_cancelled() {
        let n = match step {
            Stale::Progress => store.forget_progress(cutoff, config.batch_size).await?,
            Stale::Emitters => store.forget_emitters(cutoff, config.batch_size).await?,
            Stale::Rejects => {
                store
                    .trim_rejects(config.max_rejects, config.batch_size)
                    .await?
            }
        };
        if n == 0 {
            break;
        }
        metrics
            .retention_deleted
            .get_or_create(&RetentionLabels {
                table: step.table().into(),
            })
            .inc_by(n);
        total += n;
        tokio::task::yield_now().await;
    }
    Ok(total)
}
