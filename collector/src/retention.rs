//! Retention: old windows, message UUIDs and rejects are deleted in small batches, each
//! its own short transaction (PostgreSQL skips rows an ingesting transaction holds),
//! so ingestion is never blocked behind a large delete.

use std::time::Duration;

use store::{AuditStore, RetentionOutcome, Store};
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
        tokio::select! {
            _ = tokio::time::sleep(config.interval.max(Duration::from_secs(1))) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

/// Deletes batch after batch until nothing old is left (or shutdown).
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
        total.windows += out.windows;
        total.messages += out.messages;
        total.rejects += out.rejects;
        if out.total() == 0 {
            break;
        }
        // Let ingestion have the database between batches.
        tokio::task::yield_now().await;
    }
    Ok(total)
}
