//! web: the REST API, the detection engine, alerting and Prometheus metrics
//! (DESIGN §6, §7). `kafka-audit serve` calls [`run`]; tests drive [`app`].

pub mod alert;
pub mod api;
pub mod completeness;
pub mod config;
pub mod dashboard;
pub mod engine;
pub mod error;
pub mod eval;
pub mod metrics;
pub mod openapi;
pub mod reads;

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::error_handling::HandleErrorLayer;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use store::{Deployment, Store, StoreError};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;

pub use config::Config;
use config::Scope;
use engine::topology::TopologyCell;
use engine::Topology;
use error::AppError;
use eval::{CycleStats, Evaluator, VerdictIndex};
use metrics::{HttpLabels, Metrics, RouteLabels};

/// Everything handlers and jobs share. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    /// The topology; its window size is learned by the first evaluation when
    /// `[topology] window` is not set (see [`AppState::topology`]).
    pub topology: Arc<TopologyCell>,
    pub store: Store,
    /// Where the open alerts are kept: `serve.alert_database_url` when `store` is a
    /// read replica, else `store` itself.
    pub alert_store: Store,
    pub index: Arc<RwLock<VerdictIndex>>,
    pub metrics: Arc<Metrics>,
    evaluator: Arc<tokio::sync::Mutex<Evaluator>>,
    alerts: Arc<watch::Sender<alert::Desired>>,
    /// `serve.max_concurrent_requests` slots shared by every API route.
    api_slots: Arc<tokio::sync::Semaphore>,
    /// `auth.tokens`, read (files included) at start.
    tokens: Arc<common::Tokens>,
}

impl AppState {
    pub fn new(config: Config, store: Store) -> anyhow::Result<Self> {
        let alert_store = store.clone();
        Self::with_alert_store(config, store, alert_store)
    }

    /// A state that reads from `store` (a read replica may do) and keeps the open
    /// alerts in `alert_store` (a writer).
    pub fn with_alert_store(
        config: Config,
        store: Store,
        alert_store: Store,
    ) -> anyhow::Result<Self> {
        config.validate()?;
        let tokens = Arc::new(common::Tokens::load(&config.auth.tokens, config::SCOPES)?);
        let topology = Arc::new(TopologyCell::new(config.topology.clone())?);
        let index = Arc::new(RwLock::new(VerdictIndex {
            max_entries: config.serve.max_verdicts,
            ..VerdictIndex::default()
        }));
        let metrics = Arc::new(Metrics::new());
        let evaluator = Evaluator::new(
            store.clone(),
            topology.clone(),
            index.clone(),
            metrics.clone(),
            config.serve.horizon.as_millis() as i64,
        );
        let (alerts, _) = watch::channel(None);
        let api_slots = Arc::new(tokio::sync::Semaphore::new(
            config.serve.max_concurrent_requests,
        ));
        Ok(Self {
            api_slots,
            config: Arc::new(config),
            topology,
            store,
            alert_store,
            index,
            metrics,
            evaluator: Arc::new(tokio::sync::Mutex::new(evaluator)),
            alerts: Arc::new(alerts),
            tokens,
        })
    }

    /// The topology, or 503 while its window size is not known yet (`[topology]
    /// window` not set and no window stored).
    pub fn topology(&self) -> Result<Arc<Topology>, AppError> {
        self.topology.get().ok_or_else(|| {
            AppError::unavailable(format!("waiting for {}", eval::WAITING_FOR_WINDOW))
        })
    }

    /// Runs one evaluation cycle at `now` (epoch ms), and on a cold start every load
    /// step after it (the whole horizon is judged on return); publishes the anomalies
    /// to the alert channels.
    pub async fn evaluate(&self, now: i64) -> Result<CycleStats, StoreError> {
        let mut stats = self.evaluate_cycle(now).await?;
        while !self.load_step(now).await? {}
        stats.anomalies = self
            .index
            .read()
            .expect("verdict index lock")
            .anomaly_count();
        Ok(stats)
    }

    /// One evaluation cycle at `now` (what the evaluation job runs every
    /// `evaluate_every`): on a cold start, the first one judges only the recent windows
    /// and [`AppState::load_step`] the rest of the horizon. Publishes the anomalies of
    /// the windows judged so far to the alert channels after every cycle and step: a
    /// judged window pages at once, and the publication says from which window on it
    /// is judged, so that open alerts on older windows are not resolved by absence.
    pub async fn evaluate_cycle(&self, now: i64) -> Result<CycleStats, StoreError> {
        let mut evaluator = self.evaluator.lock().await;
        let stats = evaluator.cycle(now).await?;
        self.publish_alerts();
        Ok(stats)
    }

    /// One cold-start step: judges the next older part of the horizon not judged yet
    /// (see [`eval::Evaluator::load_step`]); returns whether the whole horizon is
    /// judged. Every step publishes the alerts of the windows judged so far.
    pub async fn load_step(&self, now: i64) -> Result<bool, StoreError> {
        let mut evaluator = self.evaluator.lock().await;
        if !evaluator.loading() {
            return Ok(true);
        }
        let done = evaluator.load_step(now).await?;
        self.publish_alerts();
        Ok(done)
    }

    fn publish_alerts(&self) {
        let published = {
            let index = self.index.read().expect("verdict index lock");
            // Nothing judged yet (the window size is not known: no window stored and
            // `[topology] window` not set): a publication of nothing would resolve, or
            // expire, every alert open before a restart.
            if index.evaluated_at.is_none() {
                return;
            }
            let stall_after_ms =
                i64::try_from(self.config.topology.stall_after.as_millis()).unwrap_or(i64::MAX);
            // Windows up to the last dropped verdict are not all in the index: their
            // alerts must not resolve by absence.
            let judged_from = match (index.loading.as_ref(), index.dropped) {
                (l, Some((_, hi))) => Some(l.map_or(hi + 1, |l| l.loaded_from.max(hi + 1))),
                (l, None) => l.map(|l| l.loaded_from),
            };
            alert::Published {
                alerts: alert::desired(&index, &self.config.alerting, stall_after_ms),
                judged_from,
                unsettled: alert::unsettled(&index),
                horizon_start: index.horizon_start,
                auditors: Some(alert::known_auditors(&index)),
                auditors_capped: index.auditors_capped,
            }
        };
        // Channels are woken when the publication changes: new alerts, or a load step's
        // new bound (which may let an open alert of a window just judged resolve). Each
        // worker runs a pass only for work it has not tried yet
        // (`ChannelWorker::on_publication`): failed and deferred deliveries wait for its
        // periodic pass, whatever the pace of the load.
        self.alerts.send_if_modified(|current| {
            let wake = current.as_deref() != Some(&published);
            *current = Some(Arc::new(published));
            wake
        });
    }

    /// The alerts last published to the channels (`None`: nothing published yet).
    pub fn published_alerts(&self) -> alert::Desired {
        self.alerts.borrow().clone()
    }

    /// Spawns the evaluation loop and one worker per alert channel; they stop with
    /// `shutdown`.
    pub fn spawn_jobs(&self, shutdown: &CancellationToken) -> Vec<tokio::task::JoinHandle<()>> {
        let mut handles = Vec::new();
        if self.config.alerting.enabled {
            for c in &self.config.alerting.channels {
                let worker = alert::ChannelWorker::new(
                    c.clone(),
                    self.config.alerting.clone(),
                    self.metrics.clone(),
                    Some(self.alert_store.clone()),
                );
                handles.push(tokio::spawn(
                    worker.run(self.alerts.subscribe(), shutdown.child_token()),
                ));
            }
        }
        let state = self.clone();
        let token = shutdown.child_token();
        handles.push(tokio::spawn(async move {
            let every = state.config.serve.evaluate_every;
            loop {
                let started = Instant::now();
                match state.evaluate_cycle(common::now_ms()).await {
                    Ok(s) => tracing::debug!(?s, elapsed = ?started.elapsed(), "evaluation cycle"),
                    Err(e) => tracing::warn!(error = %e, "evaluation cycle failed"),
                }
                // Cold start: judge the rest of the horizon, one step at a time, until
                // the next cycle is due (the API answers in between).
                while started.elapsed() < every && !token.is_cancelled() {
                    match state.load_step(common::now_ms()).await {
                        Ok(true) => break,
                        Ok(false) => {}
                        Err(e) => {
                            tracing::warn!(error = %e, "cold start: load step failed; retrying after the next cycle");
                            break;
                        }
                    }
                }
                tokio::select! {
                    _ = token.cancelled() => return,
                    _ = tokio::time::sleep(every.saturating_sub(started.elapsed())) => {}
                }
            }
        }));
        handles
    }
}

/// Bearer token check: `Ok` when auth is off or a configured token with `scope`
/// (admin implies read) is presented. Matching is `common::auth`'s (SHA-256 digests
/// compared in constant time, `Bearer` case-insensitive).
fn authorize(state: &AppState, req: &Request, scope: Scope) -> Result<(), AppError> {
    if state.tokens.is_empty() {
        return Ok(());
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
        Ok(holder) if holder.has(scope) => Ok(()),
        Ok(holder) => Err(AppError::new(
            StatusCode::FORBIDDEN,
            format!("token {:?} lacks the {scope:?} scope", holder.name).to_lowercase(),
        )),
    }
}

async fn require_read(State(state): State<AppState>, req: Request, next: Next) -> Response {
    match authorize(&state, &req, Scope::Read) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

async fn require_admin(State(state): State<AppState>, req: Request, next: Next) -> Response {
    match authorize(&state, &req, Scope::Admin) {
        Ok(()) => next.run(req).await,
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

/// `/healthz`'s answer.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(as = Health)]
pub struct HealthView {
    /// Always `ok`.
    pub status: &'static str,
}

/// `/readyz`'s answer (fields in the order the first version's map had them).
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(as = Ready)]
pub struct ReadyView {
    /// The last evaluation's time; null before the first one.
    #[schema(required = true)]
    pub evaluated_at: Option<i64>,
    /// Cold start: set while the older windows of the horizon are still being judged
    /// (the recent ones are, so serve is ready). `/anomalies` and `/topics` answer for
    /// ranges from `loaded_from` on and 503 for ranges reaching before; alerts are not
    /// sent until the whole horizon is judged. Absent once it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loading: Option<LoadingView>,
    /// `ready` or `not ready`.
    pub status: &'static str,
    /// `ok` or `unavailable`.
    pub store: &'static str,
    /// Tiers and datacenters whose stored windows in the horizon are not the
    /// topology's window long (`[topology] window`, or the learned size) (their auditors count in another window size; see
    /// docs/web.md). Absent when there are none.
    /// What serve waits for before it judges anything: set while `[topology] window`
    /// is not set and no audit window is stored to learn the window size from.
    /// Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub window_size_mismatch: Vec<WindowSizeMismatchView>,
    /// Set while verdicts of some windows were not kept because the verdict index
    /// was full (`serve.max_verdicts`): what it says and which windows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict_index_full: Option<String>,
}

/// [`ReadyView::loading`].
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(as = Loading)]
pub struct LoadingView {
    /// Windows starting at or after this (epoch ms) are judged.
    pub loaded_from: i64,
    /// Start of the horizon (serve.horizon): judged when `loaded_from` reaches it.
    pub horizon_start: i64,
    /// `loaded_from - horizon_start`: the part of the horizon still to judge, in ms.
    pub horizon_remaining_ms: i64,
    /// Windows (per topic) judged since the start.
    pub windows_evaluated: u64,
    /// When loading started (the first evaluation), epoch ms.
    pub started_at: i64,
}

/// One tier and datacenter of [`ReadyView::window_size_mismatch`].
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(as = WindowSizeMismatch)]
pub struct WindowSizeMismatchView {
    pub datacenter: String,
    pub tier: String,
    /// A topic where it was seen (the most recent such window).
    pub topic: String,
    /// The window size judged in, in ms: `[topology] window`, or when unset, the one
    /// learned from the newest stored window.
    pub topology_window_ms: i64,
    /// The length of the stored windows in ms.
    pub window_ms: i64,
}

/// Liveness
#[utoipa::path(get, path = "/healthz", operation_id = "healthz", security(()),
    responses((status = 200, description = "OK", body = HealthView)))]
async fn healthz() -> Json<HealthView> {
    Json(HealthView { status: "ok" })
}

/// Readiness: store reachable and first evaluation done (with no `[topology] window`, after the window size is learned from a stored window)
#[utoipa::path(get, path = "/readyz", operation_id = "readyz", security(()),
    responses(
        (status = 200, description = "OK", body = ReadyView),
        (status = 503, description = "Not ready", body = ReadyView),
    ))]
async fn readyz(State(state): State<AppState>) -> Response {
    let (evaluated_at, mismatches, waiting_for, loading, full) = {
        let index = state.index.read().expect("verdict index lock");
        let loading = index.loading.as_ref().map(|l| LoadingView {
            loaded_from: l.loaded_from,
            horizon_start: index.horizon_start,
            horizon_remaining_ms: l.loaded_from.saturating_sub(index.horizon_start),
            windows_evaluated: l.windows_evaluated,
            started_at: l.started_at,
        });
        let full = index.dropped.map(|(lo, hi)| {
            format!(
                "verdicts of windows {lo}..={hi} were not kept (serve.max_verdicts = {}): /anomalies and /topics answer 503 for them",
                index.max_entries
            )
        });
        (
            index.evaluated_at,
            index.window_mismatches.clone(),
            index.waiting_for.clone(),
            loading,
            full,
        )
    };
    // Mismatches are only found once the window size is known.
    let topology_window_ms = state.topology.get().map_or(0, |t| t.window.as_millis());
    let db = state.store.ping().await;
    let ready = db.is_ok() && evaluated_at.is_some();
    // Open by default: the store's error text (host names, user names) goes to the
    // log, not to whoever asks.
    if let Err(e) = &db {
        tracing::warn!(error = %e, "readiness: store unavailable");
    }
    let body = ReadyView {
        evaluated_at,
        loading,
        status: if ready { "ready" } else { "not ready" },
        store: if db.is_ok() { "ok" } else { "unavailable" },
        waiting_for,
        // Ready all the same (the API serves), but an on-call reading /readyz sees why
        // the verdicts of a tier cannot be trusted: its auditors count in windows of
        // another size than [topology] window.
        window_size_mismatch: mismatches
            .iter()
            .map(|((tier, datacenter), m)| WindowSizeMismatchView {
                datacenter: datacenter.clone(),
                tier: tier.clone(),
                topic: m.topic.clone(),
                topology_window_ms,
                window_ms: m.window_ms,
            })
            .collect(),
        verdict_index_full: full,
    };
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// Prometheus metrics (OpenMetrics text)
#[utoipa::path(get, path = "/metrics", operation_id = "metrics", security(()),
    responses((status = 200, description = "Metrics", body = String,
        content_type = "application/openmetrics-text")))]
async fn metrics_text(State(state): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response()
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
        .route("/api/v1/topology", get(api::topology))
        .route("/api/v1/topics", get(api::topics))
        .route("/api/v1/topics/{topic}/windows", get(api::windows))
        .route("/api/v1/topics/{topic}/compare", get(api::compare))
        .route(
            "/api/v1/topics/{topic}/completeness",
            get(completeness::completeness),
        )
        .route(
            "/api/v1/topics/{topic}/windows/{window_start}/offsets",
            get(api::offsets),
        )
        .route("/api/v1/anomalies", get(api::anomalies))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_read));
    let admin_api = Router::new()
        .route("/api/v1/evaluate", post(api::evaluate))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_admin))
        .route_layer(middleware::from_fn(same_origin));
    // One semaphore for every API route: slow reads wait for a slot (within
    // request_timeout) instead of taking every pooled connection from the evaluator.
    let api_slots =
        tower::limit::GlobalConcurrencyLimitLayer::with_semaphore(state.api_slots.clone());
    let read_api = read_api.route_layer(api_slots.clone());
    let admin_api = admin_api.route_layer(api_slots);
    let mut health = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz));
    if !state.config.auth.open_health {
        health = health.route_layer(middleware::from_fn_with_state(state.clone(), require_read));
    }
    let mut metrics = Router::new().route("/metrics", get(metrics_text));
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
