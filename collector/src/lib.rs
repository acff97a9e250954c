//! The collector: audit messages from the audit topics of one or more Kafka clusters
//! and from HTTP into the store, each counted exactly once.
//!
//! Deduplication by UUID happens in the store, inside the transaction that writes a
//! batch (`store::aggregate::first_in_batch` within the batch, the `audit_message`
//! table across batches; the outcome is `WriteOutcome::Duplicate`), not here: the
//! collector only commits Kafka offsets after the store has answered.
//!
//! `run(config, shutdown)` is what `kafka-audit collect` calls; [`start`] returns the
//! running collector (its bound HTTP address) for tests.

pub mod bounds;
pub mod config;
pub mod convert;
pub mod http;
pub mod kafka_source;
pub mod metrics;
pub mod retention;
pub mod rollup;
pub mod sink;
pub mod throttle;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use common::{Backoff, Health};
use prometheus_client::registry::Registry;
use store::{Deployment, Store};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use config::CollectConfig;

use crate::metrics::Metrics;
use crate::sink::Sink;

/// A started collector.
pub struct Collector {
    /// Where HTTP ingest, `/metrics` and `/healthz` listen (`None` if disabled).
    pub http_addr: Option<SocketAddr>,
    pub store: Store,
    tasks: JoinSet<anyhow::Result<()>>,
    shutdown: CancellationToken,
}

impl Collector {
    /// Waits until every task ends (after `shutdown`, or the first failure, which
    /// cancels the others).
    pub async fn wait(mut self) -> anyhow::Result<()> {
        let mut first_error = None;
        while let Some(joined) = self.tasks.join_next().await {
            let result = joined.map_err(anyhow::Error::from).and_then(|r| r);
            if let Err(e) = result {
                tracing::error!(error = %format!("{e:#}"), "collector task failed; shutting down");
                self.shutdown.cancel();
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Runs until `shutdown` is cancelled.
pub async fn run(config: CollectConfig, shutdown: CancellationToken) -> anyhow::Result<()> {
    start(config, shutdown).await?.wait().await
}

/// Connects the store (retrying while it is down), migrates, binds HTTP and starts the
/// Kafka sources and retention.
pub async fn start(
    config: CollectConfig,
    shutdown: CancellationToken,
) -> anyhow::Result<Collector> {
    config.check()?;
    let tokens = Arc::new(common::Tokens::load(
        &config.auth.tokens,
        &[common::Scope::Ingest],
    )?);
    let store = connect_store(&config, &shutdown).await?;
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let health = Health::new();
    let staged = Arc::new(tokio::sync::Notify::new());
    let bounds = bounds::Bounds::new(
        &config.ingest,
        &config.retention,
        store.clone(),
        metrics.clone(),
    );
    bounds
        .prepare()
        .await
        .context("recording the window size ([ingest] window)")?;
    let sink = Sink {
        store: store.clone(),
        metrics: metrics.clone(),
        health: health.clone(),
        retry: config.retry.clone(),
        staged: Arc::clone(&staged),
        bounds: Arc::new(bounds),
    };
    let mut tasks = JoinSet::new();

    let mut http_addr = None;
    if config.http.enabled {
        let h = &config.http;
        let limits = common::server::limits(
            "http",
            h.header_read_timeout,
            h.max_connections,
            h.tls_cert.as_deref(),
            h.tls_key.as_deref(),
        )?
        .with_request_timeout(h.request_timeout);
        let listener = tokio::net::TcpListener::bind(config.http.listen)
            .await
            .with_context(|| {
                format!(
                    "cannot bind the collector's HTTP port {}",
                    config.http.listen
                )
            })?;
        let addr = listener.local_addr()?;
        http_addr = Some(addr);
        let app = http::router(
            http::HttpState {
                sink: sink.clone(),
                max_messages: config.http.max_messages,
                max_body_bytes: config.http.max_body_bytes,
                tokens: Arc::clone(&tokens),
                allow_unauthenticated: config.auth.allow_unauthenticated,
                throttle: Arc::new(throttle::Throttle::new(
                    h.token_requests_per_second,
                    h.token_messages_per_second,
                    h.max_inflight_body_bytes,
                )),
                body_wait: h.request_timeout / 2,
            },
            config.http.max_body_bytes,
            Arc::new(registry),
            health.clone(),
        );
        let token = shutdown.child_token();
        tasks.spawn(async move {
            common::server::serve(listener, app, limits, token)
                .await
                .context("collector HTTP server")
        });
        tracing::info!(%addr, tokens = config.auth.tokens.len(), "HTTP ingest listening (POST /api/v1/audit, /metrics, /healthz)");
        if config.auth.tokens.is_empty() {
            if config.auth.allow_unauthenticated {
                tracing::warn!(%addr, "HTTP ingest has no tokens and allow_unauthenticated = true: anyone who reaches this port can forge audit verdicts");
            } else {
                tracing::warn!(%addr, "HTTP ingest has no tokens: accepting messages from loopback clients only (configure [[auth.tokens]])");
            }
        }
    }
    for source in &config.sources {
        let source =
            kafka_source::KafkaSource::new(source.clone(), config.batch.clone(), sink.clone());
        let token = shutdown.child_token();
        tasks.spawn(async move { source.run(token).await });
    }
    {
        let token = shutdown.child_token();
        let (store, metrics, retry) = (store.clone(), metrics.clone(), config.retry.clone());
        let limit = config.batch.rollup_max;
        tasks.spawn(async move {
            rollup::run(store, limit, staged, metrics, retry, token).await;
            Ok(())
        });
    }
    {
        let token = shutdown.child_token();
        let (store, retention, metrics) =
            (store.clone(), config.retention.clone(), metrics.clone());
        tasks.spawn(async move {
            retention::maintain_partitions(store, retention, metrics, token).await;
            Ok(())
        });
    }
    if config.retention.enabled {
        let token = shutdown.child_token();
        let (store, retention, metrics) =
            (store.clone(), config.retention.clone(), metrics.clone());
        tasks.spawn(async move {
            retention::run(store, retention, metrics, token).await;
            Ok(())
        });
    }
    Ok(Collector {
        http_addr,
        store,
        tasks,
        shutdown,
    })
}

async fn connect_store(
    config: &CollectConfig,
    shutdown: &CancellationToken,
) -> anyhow::Result<Store> {
    let mut backoff = Backoff::new(config.retry.initial_backoff, config.retry.max_backoff);
    loop {
        let attempt = async {
            let store = Store::connect_with(&config.store.url, &config.store.options()).await?;
            if config.store.migrate {
                store.migrate().await?;
            }
            Ok::<_, store::StoreError>(store)
        };
        match attempt.await {
            Ok(store) => {
                tracing::info!(backend = store.backend(), "store ready");
                return Ok(store);
            }
            // A wrong URL will not fix itself.
            Err(e @ store::StoreError::Url { .. }) => return Err(e.into()),
            Err(e) => {
                let delay = backoff.next_delay();
                tracing::warn!(error = %e, backoff = ?delay, "store not available yet; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = shutdown.cancelled() => anyhow::bail!("shut down before the store became available: {e}"),
                }
            }
        }
    }
}
