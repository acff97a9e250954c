//! audit-service: audits one Kafka cluster as one tier (DESIGN §2, §5).
//!
//! `run(config, shutdown)` consumes the configured topics in a consumer group with
//! `read_committed`, counts every message with audit-lib, and publishes audit
//! messages and consumer offsets in one Kafka transaction per report, after writing
//! them to a local write-ahead log.

pub mod checks;
pub mod config;
mod counting;
pub mod metrics;
mod service;
pub mod wal;

use std::sync::Arc;

use anyhow::Context;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

pub use config::{Config, Mode};
pub use service::consumer_client_config;

/// Runs the audit service until `shutdown` is cancelled, then reports, publishes and
/// commits what it has counted and returns.
pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    config.validate()?;
    let a = &config.audit;
    match a.mode {
        Mode::ExactlyOnce => tracing::info!(
            instance = %a.instance_id,
            transactional_id = %a.transactional_id(),
            group = %a.group_id,
            "audit service starting: exactly-once (audit messages and offsets in one transaction)"
        ),
        Mode::AtLeastOnce => tracing::warn!(
            instance = %a.instance_id,
            group = %a.group_id,
            "audit service starting in AT-LEAST-ONCE mode: no transactions; after a crash an increment may be \
             published twice (same UUID; the collector deduplicates)"
        ),
    }
    let mut registry = Registry::default();
    let metrics = metrics::Metrics::new(&mut registry);
    let health = common::Health::new();
    let ops_token = shutdown.child_token();
    let ops = if config.ops.enabled {
        Some(
            common::serve_ops(
                config.ops.listen,
                Arc::new(registry),
                health.clone(),
                ops_token.clone(),
            )
            .await?,
        )
    } else {
        None
    };

    // Start-up checks need the list of audited topics; resolve it once here for the
    // report (the consume loop resolves it again and keeps it fresh).
    let explicit = a.topics.clone();
    checks::run_checks(&config, &explicit).await?;

    let wal_dir = a.instance_wal_dir();
    let (wal, recovery) = wal::Wal::open(
        &wal_dir,
        wal::WalOptions {
            fsync: a.wal_fsync,
            max_pending_bytes: a.wal_max_bytes,
            ..Default::default()
        },
    )?;
    tracing::info!(
        dir = %wal_dir.display(),
        segments = recovery.segments,
        pending = recovery.pending_entries,
        truncated = recovery.truncated.len(),
        "WAL opened"
    );
    if !recovery.truncated.is_empty() {
        metrics.error("wal_truncated");
    }

    let cfg = config.clone();
    let token = shutdown.clone();
    let h = health.clone();
    let result = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let mut core = service::Core::new(cfg.clone(), wal, metrics)?;
        loop {
            let consumer = service::create_consumer(&cfg, core)?;
            match service::consume_loop(consumer, cfg.clone(), token.clone(), h.clone())? {
                service::LoopExit::Shutdown => return Ok(()),
                service::LoopExit::ConsumerFailed(c) => core = *c,
            }
        }
    })
    .await
    .context("consume loop panicked")?;
    if let Some(ops) = ops {
        ops_token.cancel();
        let _ = ops.task.await;
    }
    result
}
