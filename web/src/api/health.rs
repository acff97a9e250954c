//! Health, readiness and metrics: what an orchestrator and Prometheus ask.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use store::Deployment;

use crate::state::AppState;

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
pub async fn healthz() -> Json<HealthView> {
    Json(HealthView { status: "ok" })
}

/// Readiness: store reachable and first evaluation done (with no `[topology] window`, after the window size is learned from a stored window)
#[utoipa::path(get, path = "/readyz", operation_id = "readyz", security(()),
    responses(
        (status = 200, description = "OK", body = ReadyView),
        (status = 503, description = "Not ready", body = ReadyView),
    ))]
pub async fn readyz(State(state): State<AppState>) -> Response {
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
pub async fn metrics_text(State(state): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response()
}
