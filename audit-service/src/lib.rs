//! audit-service: audits one Kafka cluster as one tier (docs/design.md §2, §5).
//!
//! `run(config, shutdown)` consumes the configured topics in a consumer group with
//! `read_committed`, counts every message with audit-lib, and publishes audit
//! messages and consumer offsets in one Kafka transaction per report, after writing
//! them to a local write-ahead log.

mod auditor;
pub mod checks;
pub mod config;
#[doc(hidden)]
pub mod counting;
mod kafka;
pub mod metrics;
mod offsets_seen;
mod record;
mod replication;
pub mod wal;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

pub use config::{Config, Mode};
pub use kafka::client::consumer_client_config;
/// The consume loop's batch reading, for the benchmark's batch-reading bare consumer.
#[doc(hidden)]
pub use kafka::fetch::{Batch, FetchQueue, FetchRoute, FetchingConsumer};
#[doc(hidden)]
pub use record::Record;

/// A started audit service.
pub struct Running {
    /// Where `/metrics` and `/healthz` listen (`None` if the ops server is disabled).
    pub ops_addr: Option<SocketAddr>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Running {
    /// Waits until the service returns: after `shutdown`, having reported, published
    /// and committed what it counted, or on a failure.
    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await.context("audit service task panicked")?
    }

    /// Whether the service has returned.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

/// Runs the audit service until `shutdown` is cancelled, then reports, publishes and
/// commits what it has counted and returns.
pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    start(config, shutdown).await?.wait().await
}

/// Validates the configuration and binds the ops server, then starts the service
/// (start-up checks, producer, WAL, consume loop) as a task; see [`run`].
pub async fn start(config: Config, shutdown: CancellationToken) -> anyhow::Result<Running> {
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
            "audit service starting in AT-LEAST-ONCE mode: no transactions. An increment published \
             without its offsets committed (crash, failed commit, rebalance in between) is resent with \
             the same UUID if this instance gets its partitions back, but another instance that takes \
             them first counts those messages again under new UUIDs: they are counted twice (at most \
             one report per partition move). Use exactly-once where the cluster has transactions"
        ),
    }
    let mut registry = Registry::default();
    let metrics = metrics::Metrics::new(&mut registry);
    let health = common::Health::new();
    let ops_token = shutdown.child_token();
    let ops = if config.ops.enabled {
        Some(
            common::serve_ops(
                &config.ops,
                Arc::new(registry),
                health.clone(),
                ops_token.clone(),
            )
            .await?,
        )
    } else {
        None
    };
    let ops_addr = ops.as_ref().map(|o| o.addr);
    let task = tokio::spawn(async move {
        let result = serve(config, shutdown, metrics, health).await;
        stop_ops(ops, ops_token).await?;
        result
    });
    Ok(Running { ops_addr, task })
}

/// Everything after the ops server: start-up checks, the producer, the WAL, then the
/// consume loop until shutdown.
async fn serve(
    config: Config,
    shutdown: CancellationToken,
    metrics: metrics::Metrics,
    health: common::Health,
) -> anyhow::Result<()> {
    let a = &config.audit;
    // Start-up checks need the list of audited topics; resolve it once here for the
    // report (the consume loop resolves it again and keeps it fresh).
    let explicit = a.topics.clone();
    let checked = until_kafka_answers("start-up checks", &shutdown, &health, || {
        checks::run_checks(&config, &explicit)
    })
    .await?;
    if checked.is_none() {
        return Ok(());
    }
    // init_transactions (exactly-once) fences the previous incarnation of this
    // instance; it needs the transaction coordinator.
    let producer = until_kafka_answers("producer", &shutdown, &health, || {
        let cfg = config.clone();
        async move {
            tokio::task::spawn_blocking(move || kafka::publisher::create_producer(&cfg))
                .await
                .context("producer start-up panicked")?
        }
    })
    .await?;
    let Some(producer) = producer else {
        return Ok(());
    };
    health.set_healthy();

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
        metrics.emit(
            metrics::ServiceError::WalTruncated,
            &format_args!("{} damaged tail(s) cut off", recovery.truncated.len()),
            format_args!("WAL recovery truncated {}", wal_dir.display()),
        );
    }

    let cfg = config.clone();
    let token = shutdown.clone();
    let h = health.clone();
    let result = tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let mut shell = kafka::shell::Shell::new(cfg.clone(), wal, metrics, producer)?;
        loop {
            let consumer = kafka::context::create_consumer(&cfg, shell)?;
            match kafka::consume::consume_loop(consumer, cfg.clone(), token.clone(), h.clone())? {
                kafka::consume::LoopExit::Shutdown => return Ok(()),
                kafka::consume::LoopExit::ConsumerFailed(s) => shell = *s,
            }
        }
    })
    .await
    .context("consume loop panicked")?;
    result
}

async fn stop_ops(ops: Option<common::OpsServer>, token: CancellationToken) -> anyhow::Result<()> {
    if let Some(ops) = ops {
        token.cancel();
        let _ = ops.task.await;
    }
    Ok(())
}

/// Runs `attempt` until it succeeds, retrying with backoff (1 s doubling to 30 s) while
/// its error says Kafka could not be reached: an auditor started before its cluster,
/// or during an outage, waits for it (unhealthy on /healthz, with the reason) instead
/// of exiting. Any other error (configuration, permissions, a missing audit topic that
/// may not be created) is returned at once. `None`: shutdown came first.
async fn until_kafka_answers<T, F, Fut>(
    what: &str,
    shutdown: &CancellationToken,
    health: &common::Health,
    mut attempt: F,
) -> anyhow::Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let mut backoff = common::Backoff::new(
        std::time::Duration::from_secs(1),
        std::time::Duration::from_secs(30),
    );
    loop {
        let err = tokio::select! {
            _ = shutdown.cancelled() => return Ok(None),
            r = attempt() => match r {
                Ok(v) => return Ok(Some(v)),
                Err(e) if kafka_unreachable(&e) => e,
                Err(e) => return Err(e),
            },
        };
        health.set_unhealthy(format!("waiting for Kafka ({what}): {err:#}"));
        let delay = backoff.next_delay();
        tracing::warn!(error = %format!("{err:#}"), retry_in = ?delay, "{what}: Kafka cannot be reached; waiting for it");
        tokio::select! {
            _ = shutdown.cancelled() => return Ok(None),
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// Whether `e` comes from Kafka not answering (transport, timeouts), as opposed to a
/// problem that waiting does not fix.
fn kafka_unreachable(e: &anyhow::Error) -> bool {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode as C};
    e.chain()
        .filter_map(|c| c.downcast_ref::<KafkaError>())
        .any(|k| {
            matches!(
                k.rdkafka_error_code(),
                Some(
                    C::BrokerTransportFailure
                        | C::AllBrokersDown
                        | C::OperationTimedOut
                        | C::RequestTimedOut
                        | C::MessageTimedOut
                        | C::NetworkException
                        | C::Resolve
                        | C::CoordinatorNotAvailable
                        | C::NotCoordinator
                        | C::CoordinatorLoadInProgress
                        | C::LeaderNotAvailable
                )
            )
        })
}
