//! The one way every listener of kafka-audit serves HTTP (`serve`'s API, the
//! collector's ingest, the ops server of every process): HTTP/1.1 with a header read
//! timeout, a connection limit and, when configured, TLS.
//!
//! `axum::serve` sets no timer on hyper, so hyper's header read timeout never fires
//! and a client that sends half a request line holds its socket forever (slowloris);
//! nor does it limit connections. Here:
//! - **header read timeout**: a connection that has not sent a complete request head
//!   within `header_read_timeout` of starting to read one is closed. This covers the
//!   first request, every keep-alive request after it (an idle keep-alive connection is
//!   closed after the same time) and the TLS handshake.
//! - **connection limit**: at most `max_connections` connections are served at once.
//!   Further connections are not accepted: they wait in the kernel's listen backlog
//!   (1024) until a connection closes, and clients beyond the backlog get their
//!   connect refused or timed out by the kernel. Nothing is read from a waiting
//!   connection, so it costs the process nothing.
//! - **TLS** (rustls, ring): `tls_cert` and `tls_key` are PEM files (the certificate
//!   chain, leaf first, and its PKCS#8, PKCS#1 or SEC1 key). Read at start; a restart
//!   picks up a renewed certificate.
//!
//! Request bodies are bounded in time by each router's own request timeout.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Default `header_read_timeout`: generous for a client on a slow link, short enough
/// that a thousand stalled sockets free themselves quickly.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default `max_connections`: far above what Prometheus, a dashboard and a fleet of
/// HTTP emitters need (each keeps a few), far below the default `LimitNOFILE`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// How long shutdown waits for in-flight requests.
const DRAIN: Duration = Duration::from_secs(30);

/// Terminates TLS on accepted connections (feature `tls`).
#[cfg(feature = "tls")]
pub type TlsAcceptor = tokio_rustls::TlsAcceptor;
/// Built without the `tls` feature: there is no acceptor.
#[cfg(not(feature = "tls"))]
#[derive(Clone)]
pub enum TlsAcceptor {}

/// What a listener enforces. Built from each service's config section.
#[derive(Clone)]
pub struct ServerLimits {
    pub header_read_timeout: Duration,
    pub max_connections: usize,
    pub tls: Option<TlsAcceptor>,
    /// A request (body included) taking longer is answered 408. `None` for routers
    /// that bound their requests themselves (`serve`'s `request_timeout`).
    pub request_timeout: Option<Duration>,
}

impl ServerLimits {
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            tls: None,
            request_timeout: None,
        }
    }
}

impl std::fmt::Debug for ServerLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerLimits")
            .field("header_read_timeout", &self.header_read_timeout)
            .field("max_connections", &self.max_connections)
            .field("tls", &self.tls.is_some())
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

/// The TLS part of a listener's config: both or neither.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Checks the limits a config gives and builds what [`serve`] needs; `tls_cert` and
/// `tls_key` must be given together. `what` names the config section in errors.
pub fn limits(
    what: &str,
    header_read_timeout: Duration,
    max_connections: usize,
    tls_cert: Option<&Path>,
    tls_key: Option<&Path>,
) -> anyhow::Result<ServerLimits> {
    anyhow::ensure!(
        !header_read_timeout.is_zero(),
        "{what}.header_read_timeout must be longer than 0"
    );
    anyhow::ensure!(
        max_connections >= 1,
        "{what}.max_connections must be at least 1"
    );
    let tls = match (tls_cert, tls_key) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some(tls_acceptor(cert, key).with_context(|| {
            format!(
                "{what}.tls_cert {} / tls_key {}",
                cert.display(),
                key.display()
            )
        })?),
        _ => anyhow::bail!("{what}.tls_cert and {what}.tls_key go together"),
    };
    Ok(ServerLimits {
        header_read_timeout,
        max_connections,
        tls,
        request_timeout: None,
    })
}

/// Without the `tls` feature, configured certificate files are an error.
#[cfg(not(feature = "tls"))]
pub fn tls_acceptor(cert: &Path, _key: &Path) -> anyhow::Result<TlsAcceptor> {
    anyhow::bail!(
        "{}: this build has no TLS (feature `tls` of crate common)",
        cert.display()
    )
}

/// A rustls acceptor for the PEM certificate chain and key in these files.
#[cfg(feature = "tls")]
pub fn tls_acceptor(cert: &Path, key: &Path) -> anyhow::Result<TlsAcceptor> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls;
    let certs = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("cannot read certificates from {}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("bad PEM in {}", cert.display()))?;
    anyhow::ensure!(!certs.is_empty(), "no certificate in {}", cert.display());
    // The key's text must not reach a log: report only what went wrong.
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| anyhow::anyhow!("no usable private key in {}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("certificate and key do not match")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Serves `app` on `listener` with `limits` until `shutdown`; then stops accepting,
/// lets in-flight requests finish (up to 30 s) and closes idle connections.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ServerLimits,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let app = match limits.request_timeout {
        Some(t) => app.layer(
            tower::ServiceBuilder::new()
                .layer(axum::error_handling::HandleErrorLayer::new(
                    |_: tower::BoxError| async {
                        crate::ApiError::new(
                            axum::http::StatusCode::REQUEST_TIMEOUT,
                            "request timed out",
                        )
                    },
                ))
                .timeout(t),
        ),
        None => app,
    };
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    loop {
        // A slot first, then accept: beyond the limit connections wait in the backlog.
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => p.expect("semaphore never closed"),
            _ = shutdown.cancelled() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    accept_error(e).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        // Handlers that decide by the peer's address (the collector's loopback-only
        // ingest without tokens) read it as axum's `ConnectInfo`.
        let service = TowerToHyperService::new(
            app.clone()
                .layer(axum::Extension(axum::extract::ConnectInfo(peer))),
        );
        let (http, tls) = (http.clone(), limits.tls.clone());
        let (token, handshake) = (shutdown.clone(), limits.header_read_timeout);
        tokio::spawn(async move {
            let _permit = permit;
            match tls {
                None => serve_connection(&http, stream, service, token, peer).await,
                #[cfg(feature = "tls")]
                Some(tls) => match tokio::time::timeout(handshake, tls.accept(stream)).await {
                    Ok(Ok(stream)) => serve_connection(&http, stream, service, token, peer).await,
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                },
                #[cfg(not(feature = "tls"))]
                Some(never) => {
                    let _ = handshake;
                    match never {}
                }
            }
        });
    }
    drop(listener);
    // Every connection holds a slot: all slots back means all connections closed.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(DRAIN, slots.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!("connections still open {DRAIN:?} after shutdown; closing them");
    }
    Ok(())
}

async fn serve_connection<IO>(
    http: &hyper::server::conn::http1::Builder,
    io: IO,
    service: TowerToHyperService<Router>,
    shutdown: CancellationToken,
    peer: SocketAddr,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let conn = http
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            match tokio::time::timeout(DRAIN, conn.as_mut()).await {
                Ok(r) => r,
                Err(_) => return,
            }
        }
    };
    if let Err(e) = result {
        // Header timeouts, resets, malformed requests: the client's problem.
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

/// Connection-level errors (reset before accept) are the client's; others (too many
/// open files) get a pause so the loop does not spin.
async fn accept_error(e: std::io::Error) {
    use std::io::ErrorKind::*;
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | ConnectionRefused
    ) {
        return;
    }
    tracing::warn!(error = %e, "accept failed; pausing 100 ms");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Test helpers: the slowloris probe every listener's test uses.
pub mod testing {
    use std::net::SocketAddr;
    use std::time::{Duration, Instant};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Connects, sends `GET / HTTP/1.1\r\n` and nothing more, then waits up to 20 s
    /// for the server to close the connection. `Some(elapsed)` when it did.
    pub async fn stalled_header_closed_after(addr: SocketAddr) -> Option<Duration> {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        let started = Instant::now();
        s.write_all(b"GET / HTTP/1.1\r\n").await.ok()?;
        let mut buf = Vec::new();
        match tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut buf)).await {
            // EOF or a reset: closed either way.
            Ok(_) => Some(started.elapsed()),
            Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn start(limits: ServerLimits) -> (SocketAddr, CancellationToken) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let token = CancellationToken::new();
        let app = Router::new().route("/", get(|| async { "hello" }));
        tokio::spawn(serve(listener, app, limits, token.clone()));
        (addr, token)
    }

    async fn request(s: &mut tokio::net::TcpStream) -> String {
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn a_stalled_header_is_closed_within_the_timeout() {
        let timeout = Duration::from_millis(500);
        let (addr, token) = start(ServerLimits {
            header_read_timeout: timeout,
            ..ServerLimits::default()
        })
        .await;
        let closed = testing::stalled_header_closed_after(addr)
            .await
            .expect("closed");
        assert!(
            closed >= timeout,
            "closed after {closed:?}, before the timeout"
        );
        // An honest request is still served.
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(request(&mut s).await.ends_with("hello"));
        token.cancel();
    }

    /// Beyond `max_connections`, a connection waits (unread, in the backlog) until
    /// one of the served connections closes.
    #[tokio::test]
    async fn connections_beyond_the_limit_wait_for_a_free_slot() {
        let (addr, token) = start(ServerLimits {
            header_read_timeout: Duration::from_secs(60),
            max_connections: 2,
            ..ServerLimits::default()
        })
        .await;
        let idle1 = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _idle2 = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
        let answered = tokio::spawn(async move { request(&mut third).await });
        // Not served while both slots are taken (the idle ones would hold them for 60 s).
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!answered.is_finished(), "served beyond max_connections");
        drop(idle1);
        let reply = tokio::time::timeout(Duration::from_secs(20), answered)
            .await
            .expect("served once a slot freed")
            .unwrap();
        assert!(reply.ends_with("hello"), "{reply}");
        token.cancel();
    }

    #[cfg(feature = "tls")]
    fn test_file(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(name)
    }

    #[cfg(feature = "tls")]
    #[tokio::test]
    async fn serves_https_with_the_configured_certificate() {
        let (cert, key) = (test_file("localhost.crt"), test_file("localhost.key"));
        let limits = limits("serve", Duration::from_secs(5), 8, Some(&cert), Some(&key)).unwrap();
        let (addr, token) = start(limits).await;
        let root = reqwest::Certificate::from_pem(&std::fs::read(&cert).unwrap()).unwrap();
        let client = reqwest::Client::builder()
            .add_root_certificate(root)
            .build()
            .unwrap();
        let url = format!("https://localhost:{}/", addr.port());
        let body = client.get(&url).send().await.unwrap().text().await.unwrap();
        assert_eq!(body, "hello");
        // Plain HTTP on the TLS port gets no HTTP answer.
        let plain = reqwest::get(format!("http://127.0.0.1:{}/", addr.port())).await;
        assert!(plain.is_err(), "{plain:?}");
        // A stalled TLS handshake is cut off like a stalled header.
        assert!(testing::stalled_header_closed_after(addr).await.is_some());
        token.cancel();
    }

    #[cfg(feature = "tls")]
    #[test]
    fn a_key_file_without_a_key_is_an_error_that_names_the_file() {
        let cert = test_file("localhost.crt");
        let e = limits(
            "http",
            DEFAULT_HEADER_READ_TIMEOUT,
            1,
            Some(&cert),
            Some(&cert),
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("no usable private key"), "{e:#}");
    }

    #[test]
    fn tls_files_go_together_and_limits_are_positive() {
        let d = DEFAULT_HEADER_READ_TIMEOUT;
        let e = limits("serve", d, 1, Some(Path::new("c.pem")), None).unwrap_err();
        assert!(e.to_string().contains("go together"), "{e}");
        assert!(limits("serve", Duration::ZERO, 1, None, None).is_err());
        assert!(limits("serve", d, 0, None, None).is_err());
    }
}
