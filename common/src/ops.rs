//! The ops HTTP server of every process: `/metrics` (Prometheus text format from a
//! prometheus-client `Registry`) and `/healthz` (200 when healthy, 503 with a short
//! reason otherwise; the details are in the log).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct OpsConfig {
    /// Where `/metrics` and `/healthz` listen; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Set false to run without the ops server.
    pub enabled: bool,
    /// A connection that has not sent a whole request head within this is closed.
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// Connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
}

impl Default for OpsConfig {
    fn default() -> Self {
        OpsConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], 9464)),
            enabled: true,
            header_read_timeout: crate::server::DEFAULT_HEADER_READ_TIMEOUT,
            // Prometheus and a probe or two.
            max_connections: 64,
        }
    }
}

/// Shared health state: healthy until a component reports a problem.
#[derive(Clone, Default, Debug)]
pub struct Health(Arc<Mutex<Option<String>>>);

impl Health {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn set_healthy(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
    pub fn set_unhealthy(&self, reason: impl Into<String>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.into());
    }
    /// `Err(reason)` when unhealthy.
    pub fn status(&self) -> Result<(), String> {
        match &*self.0.lock().unwrap_or_else(|e| e.into_inner()) {
            None => Ok(()),
            Some(r) => Err(r.clone()),
        }
    }
}

#[derive(Clone)]
struct OpsState {
    registry: Arc<Registry>,
    health: Health,
}

/// A running ops server: its bound address and task.
pub struct OpsServer {
    pub addr: SocketAddr,
    pub task: JoinHandle<()>,
}

/// The router, for tests that drive it without a socket.
pub fn ops_router(registry: Arc<Registry>, health: Health) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .with_state(OpsState { registry, health })
}

/// Binds `config.listen` and serves until `shutdown` is cancelled.
pub async fn serve_ops(
    config: &OpsConfig,
    registry: Arc<Registry>,
    health: Health,
    shutdown: CancellationToken,
) -> anyhow::Result<OpsServer> {
    let listen = config.listen;
    let limits = crate::server::limits(
        "ops",
        config.header_read_timeout,
        config.max_connections,
        None,
        None,
    )?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot bind ops server to {listen}"))?;
    let addr = listener.local_addr()?;
    let app = ops_router(registry, health);
    let task = tokio::spawn(async move {
        let res = crate::server::serve(listener, app, limits, shutdown).await;
        if let Err(e) = res {
            tracing::error!(error = %e, "ops server failed");
        }
    });
    tracing::info!(%addr, "ops server listening (/metrics, /healthz)");
    Ok(OpsServer { addr, task })
}

async fn metrics(State(state): State<OpsState>) -> Response {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &state.registry) {
        Ok(()) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot encode metrics");
            (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics").into_response()
        }
    }
}

/// 200 `ok`, or 503 with the reason's summary: the text before its first `": "`
/// ("store unavailable", "waiting for Kafka (start-up checks)"). What follows it is
/// error text (user, host and broker names) that the component logs; `/healthz` is
/// open to anyone who reaches the port.
async fn healthz(State(state): State<OpsState>) -> Response {
    match state.health.status() {
        Ok(()) => (StatusCode::OK, "ok").into_response(),
        Err(reason) => {
            let summary = reason.split(": ").next().unwrap_or_default().to_string();
            (StatusCode::SERVICE_UNAVAILABLE, summary).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn serves_metrics_and_health_on_a_bound_port() {
        let mut registry = Registry::default();
        let c: Counter = Counter::default();
        registry.register("things", "things seen", c.clone());
        c.inc_by(3);
        let health = Health::new();
        let token = CancellationToken::new();
        let config = OpsConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            ..OpsConfig::default()
        };
        let srv = serve_ops(&config, Arc::new(registry), health.clone(), token.clone())
            .await
            .unwrap();
        let m = get(srv.addr, "/metrics").await;
        assert!(m.contains("things_total 3"), "{m}");
        assert!(get(srv.addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        health.set_unhealthy("wal full");
        let h = get(srv.addr, "/healthz").await;
        assert!(
            h.starts_with("HTTP/1.1 503") && h.contains("wal full"),
            "{h}"
        );
        // Open to anyone: the summary, not the error text after it (user and host
        // names of the store, broker addresses), which goes to the log.
        health.set_unhealthy(
            "store unavailable: password authentication failed for user \"kafka_audit\"",
        );
        let h = get(srv.addr, "/healthz").await;
        assert!(h.starts_with("HTTP/1.1 503"), "{h}");
        assert!(h.ends_with("\r\n\r\nstore unavailable"), "{h}");
        token.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(5), srv.task)
            .await
            .unwrap()
            .unwrap();
    }

    /// Slowloris: a client that sends half a request line and stops is cut off after
    /// `header_read_timeout`, not held open forever.
    #[tokio::test]
    async fn closes_a_connection_that_stops_mid_header() {
        let config = OpsConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            header_read_timeout: std::time::Duration::from_millis(500),
            ..OpsConfig::default()
        };
        let token = CancellationToken::new();
        let srv = serve_ops(
            &config,
            Arc::new(Registry::default()),
            Health::new(),
            token.clone(),
        )
        .await
        .unwrap();
        let closed_after = crate::server::testing::stalled_header_closed_after(srv.addr).await;
        assert!(
            closed_after.is_some(),
            "a stalled header kept the connection open for 20 s"
        );
        token.cancel();
    }
}
