//! web: the REST API, the detection engine, alerting and Prometheus metrics
//! (docs/design.md §6, §7). `kafka-audit serve` calls [`run`]; tests drive [`app`].

pub mod alert;
pub mod api;
pub mod config;
pub mod dashboard;
pub mod engine;
pub mod error;
pub mod eval;
pub mod judging;
pub mod metrics;
pub mod openapi;
pub mod reads;
pub mod state;

/// The completeness gate's types, where `kafka-audit wait` and the tests name them.
pub use api::completeness;
pub use state::AppState;

use std::time::{Duration, Instant};

use axum::error_handling::HandleErrorLayer;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::Router;
use store::{Deployment, Store};
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;

pub use config::Config;
use config::Scope;
use error::AppError;
use metrics::{HttpLabels, RouteLabels};

/// Who made a request, as the auth layer knows it: the configured name of the token
/// presented (never the token), or that auth is off. Admin routes find it in the
/// request's extensions, to say in the log who did what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller(pub String);

impl Caller {
    /// The caller of every request while `[auth]` has no tokens.
    pub const OPEN: &str = "anyone (no [auth] tokens: the API is open)";
}

/// Bearer token check: the caller when auth is off or a configured token with `scope`
/// (admin implies read) is presented. Matching is `common::auth`'s (SHA-256 digests
/// compared in constant time, `Bearer` case-insensitive).
fn authorize(state: &AppState, req: &Request, scope: Scope) -> Result<Caller, AppError> {
    if state.tokens.is_empty() {
        return Ok(Caller(Caller::OPEN.to_string()));
    }
    match state.tokens.authenticate(req.headers()) {
        Err(common::auth::AuthError::Missing) => Err(AppError::new(
            StatusCode::UNAUTHORIZED,
            "missing bearer token (Authorization: Bearer <token>)",
        )),
        Err(common::auth::AuthError::Unknown) => Err(AppError::new(
            StatusCode::UNAUTHORIZED,
            "unknown bearer token",
        )),
        Ok(holder) if holder.has(scope) => Ok(Caller(format!("token {:?}", holder.name))),
        Ok(holder) => Err(AppError::new(
            StatusCode::FORBIDDEN,
            format!("token {:?} lacks the {scope:?} scope", holder.name).to_lowercase(),
        )),
    }
}

async fn require_read(State(state): State<AppState>, req: Request, next: Next) -> Response {
    match authorize(&state, &req, Scope::Read) {
        Ok(_) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

async fn require_admin(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    match authorize(&state, &req, Scope::Admin) {
        Ok(caller) => {
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        Err(e) => e.into_response(),
    }
}

/// Refuses a request whose `Origin` (sent by browsers on cross-origin and on every
/// POST) names another host than `Host`: with auth off, a page elsewhere could
/// otherwise make a visitor's browser post to `/api/v1/evaluate`. Clients other than
/// browsers send no `Origin` and are unaffected.
async fn same_origin(req: Request, next: Next) -> Response {
    let headers = req.headers();
    let origin_host = headers
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .map(|o| o.split_once("://").map_or(o, |(_, rest)| rest));
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    match (origin_host, host) {
        (Some(o), Some(h)) if o.eq_ignore_ascii_case(h) => next.run(req).await,
        (None, _) => next.run(req).await,
        _ => AppError::new(
            StatusCode::FORBIDDEN,
            "cross-origin request refused (Origin does not match Host)",
        )
        .into_response(),
    }
}

/// Whether a request addressed to `host` (the `Host` header) may be served with auth
/// off: an IP address (a page that reaches this server by IP is of this server),
/// `localhost`, or a name of `serve.allowed_hosts`. Any other name is what a DNS
/// rebinding page sends: its own name, rebound to this server's address, so that
/// `Origin` and `Host` agree and the browser hands it the answers.
pub fn host_allowed(host: &str, allowed: &[String]) -> bool {
    if host.starts_with('[') {
        return true; // an IPv6 literal
    }
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    let name = name.trim_end_matches('.');
    name.parse::<std::net::Ipv4Addr>().is_ok()
        || name.eq_ignore_ascii_case("localhost")
        || name.to_ascii_lowercase().ends_with(".localhost")
        || allowed.iter().any(|a| a.eq_ignore_ascii_case(name))
}

/// With no tokens, refuses requests addressed to a host name that is not allowed
/// ([`host_allowed`]): the open API must not be readable by DNS rebinding.
async fn allowed_host(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if state.tokens.is_empty() {
        if let Some(host) = req.headers().get(header::HOST) {
            let allowed = host
                .to_str()
                .is_ok_and(|h| host_allowed(h, &state.config.serve.allowed_hosts));
            if !allowed {
                return AppError::new(
                    StatusCode::FORBIDDEN,
                    "this host name is not allowed while [auth] has no tokens (a DNS rebinding page could \
                     otherwise read the API): address serve by IP or localhost, or list the name in serve.allowed_hosts",
                )
                .into_response();
            }
        }
    }
    next.run(req).await
}

async fn record_http(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |p| p.as_str())
        .to_string();
    // The method is the client's choice: only the ones the API serves get a value of
    // their own, so made-up methods cannot add series.
    let method = match req.method().as_str() {
        "GET" => "GET",
        "HEAD" => "HEAD",
        "POST" => "POST",
        "DELETE" => "DELETE",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    };
    let mut response = next.run(req).await;
    // Answers carry counts and checksums: never sniffed, never kept by a proxy for
    // the next client. The dashboard's assets set their own caching.
    let h = response.headers_mut();
    h.entry(header::X_CONTENT_TYPE_OPTIONS)
        .or_insert(header::HeaderValue::from_static("nosniff"));
    h.entry(header::CACHE_CONTROL)
        .or_insert(header::HeaderValue::from_static("no-store"));
    state
        .metrics
        .http_requests
        .get_or_create(&HttpLabels {
            method: method.into(),
            route: route.clone().into(),
            status: response.status().as_u16(),
        })
        .inc();
    state
        .metrics
        .http_duration
        .get_or_create(&RouteLabels {
            route: route.into(),
        })
        .observe(started.elapsed().as_secs_f64());
    response
}

async fn openapi() -> Response {
    static DOCUMENT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        serde_json::to_string(&openapi::document()).expect("the OpenAPI document serializes")
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENT.as_str(),
    )
        .into_response()
}

async fn not_found() -> AppError {
    AppError::not_found("no such route")
}

async fn method_not_allowed() -> AppError {
    AppError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed on this route",
    )
}

async fn timeout_error(err: tower::BoxError) -> AppError {
    if err.is::<tower::timeout::error::Elapsed>() {
        AppError::unavailable("request timed out (serve.request_timeout)")
    } else {
        AppError::internal("serving a request", err)
    }
}

/// The HTTP application.
pub fn app(state: AppState) -> Router {
    let read_api = Router::new()
        .route("/api/openapi.json", get(openapi))
        .route("/api/v1/topology", get(api::topology::topology))
        .route("/api/v1/topics", get(api::topics::topics))
        .route("/api/v1/topics/{topic}/windows", get(api::windows::windows))
        .route("/api/v1/topics/{topic}/compare", get(api::windows::compare))
        .route(
            "/api/v1/topics/{topic}/completeness",
            get(api::completeness::completeness),
        )
        .route(
            "/api/v1/topics/{topic}/windows/{window_start}/offsets",
            get(api::offsets::offsets),
        )
        .route("/api/v1/anomalies", get(api::topics::anomalies))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_read));
    let admin_api = Router::new()
        .route("/api/v1/evaluate", post(api::evaluate::evaluate))
        .route(
            "/api/v1/topics/{topic}/windows/{window_start}/proof",
            delete(api::proofs::withdraw),
        )
        .route_layer(middleware::from_fn_with_state(state.clone(), require_admin))
        .route_layer(middleware::from_fn(same_origin));
    // One semaphore for every API route: slow reads wait for a slot (within
    // request_timeout) instead of taking every pooled connection from the evaluator.
    let api_slots =
        tower::limit::GlobalConcurrencyLimitLayer::with_semaphore(state.api_slots.clone());
    let read_api = read_api.route_layer(api_slots.clone());
    let admin_api = admin_api.route_layer(api_slots);
    let mut health = Router::new()
        .route("/healthz", get(api::health::healthz))
        .route("/readyz", get(api::health::readyz));
    if !state.config.auth.open_health {
        health = health.route_layer(middleware::from_fn_with_state(state.clone(), require_read));
    }
    let mut metrics = Router::new().route("/metrics", get(api::health::metrics_text));
    if !state.config.auth.open_metrics {
        metrics = metrics.route_layer(middleware::from_fn_with_state(state.clone(), require_read));
    }
    let timeout = state.config.serve.request_timeout;
    Router::new()
        .merge(read_api)
        .merge(admin_api)
        .merge(health)
        .merge(metrics)
        .merge(dashboard::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), allowed_host))
        .layer(middleware::from_fn_with_state(state.clone(), record_http))
        .layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(timeout_error))
                .timeout(timeout),
        )
        .with_state(state)
}

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// API, evaluation and alerting.
    #[default]
    All,
    /// Evaluation and alerting only, no HTTP.
    AlertsOnly,
}

/// Connects the store, starts the jobs and serves until `shutdown` is cancelled.
pub async fn run(config: Config, mode: Mode, shutdown: CancellationToken) -> anyhow::Result<()> {
    use anyhow::Context;
    let connect = |url: &str| {
        let url = url.to_string();
        async move {
            Store::connect(&url)
                .await
                .with_context(|| format!("connecting to the store at {}", store::redact_url(&url)))
        }
    };
    let store = connect(&config.serve.database_url).await?;
    // A read replica cannot be migrated nor keep alerts: the writer does both.
    let alert_store = match &config.serve.alert_database_url {
        Some(url) => connect(url).await?,
        None => store.clone(),
    };
    if config.serve.migrate {
        alert_store.migrate().await.context("migrating the store")?;
    }
    let state = AppState::with_alert_store(config, store, alert_store)?;
    let jobs = state.spawn_jobs(&shutdown);
    if mode == Mode::All {
        let listen = state.config.serve.listen;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?;
        if state.config.auth.tokens.is_empty() && !listen.ip().is_loopback() {
            tracing::warn!(%listen, "no [auth] tokens: the API is open to every client that reaches \
                this address (every count and checksum, POST /api/v1/evaluate); set tokens or listen on loopback");
        }
        tracing::info!(address = %listener.local_addr()?, backend = state.store.backend(), "serving");
        serve(listener, state, shutdown.clone()).await?;
    } else {
        tracing::info!("alerting only (no HTTP)");
        shutdown.cancelled().await;
    }
    shutdown.cancel();
    for j in jobs {
        let _ = tokio::time::timeout(Duration::from_secs(10), j).await;
    }
    Ok(())
}

/// Serves `app(state)` on `listener` until `shutdown` (graceful: in-flight requests
/// finish), with `serve`'s header read timeout, connection limit and TLS.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let s = &state.config.serve;
    let limits = common::server::limits(
        "serve",
        s.header_read_timeout,
        s.max_connections,
        s.tls_cert.as_deref(),
        s.tls_key.as_deref(),
    )?;
    common::server::serve(listener, app(state), limits, shutdown).await
}
