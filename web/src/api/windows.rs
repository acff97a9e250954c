//! `GET /api/v1/topics/{topic}/windows` and `.../compare`: a topic's stored windows
//! and the engine's verdicts on them, read from the store.

use std::collections::BTreeMap;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use store::{TimeRange, VerdictReads};
use utoipa::{IntoParams, ToSchema};

use super::params::{resolve_range, RangeQuery, TimeParam};
use crate::engine::{self, EdgeWindow, Percentiles};
use crate::error::ApiResult;
use crate::judging::{self, Scope, TopicRead};
use crate::state::AppState;
use common::now_ms;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct WindowsQuery {
    /// Start of the range (inclusive, window starts), RFC 3339 (2026-11-29T10:00:00Z) or
    /// epoch milliseconds. Default: one hour before `to`. An empty value means the default.
    #[param(value_type = Option<TimeParam>, inline, example = "2026-11-29T00:00:00Z")]
    pub from: Option<String>,
    /// End of the range (exclusive), RFC 3339 (2026-11-29T10:00:00Z) or epoch
    /// milliseconds. Default: now. An empty value means the default.
    #[param(value_type = Option<TimeParam>, inline)]
    pub to: Option<String>,
    /// Only this tier.
    pub tier: Option<String>,
    /// Only this datacenter.
    pub datacenter: Option<String>,
}

/// What `/windows` shows of one tier's stored window in one datacenter: its counts,
/// checksum and latency percentiles (the stored histogram summarised).
#[derive(Serialize, ToSchema)]
pub struct TierWindowView {
    pub window_start: i64,
    pub window_end: i64,
    pub tier: String,
    pub datacenter: String,
    pub count: u64,
    pub bytes: u64,
    pub no_time_count: u64,
    pub malformed_count: u64,
    pub out_of_bounds_count: u64,
    /// 16 lowercase hex digits, as on the wire.
    #[schema(pattern = "^[0-9a-f]{16}$")]
    pub checksum: String,
    pub increments: u64,
    #[schema(required = true)]
    pub latency: Option<Percentiles>,
    /// Not in `count`, not compared across tiers: messages with no tier-invariant time
    /// (no usable field, header or Kafka record timestamp), windowed by this tier's
    /// observation time. `no_time_count`, `malformed_count` and `out_of_bounds_count`
    /// are the reasons of messages in `count` windowed by their record timestamp.
    pub observation_time_count: u64,
    /// Not in `count`: messages whose producer was told their delivery failed (a
    /// producer tier's known loss; 0 at other tiers).
    pub delivery_failed_count: u64,
}

#[derive(Serialize, ToSchema)]
#[schema(as = Windows)]
pub struct WindowsResponse {
    pub topic: String,
    pub from: i64,
    pub to: i64,
    pub window_ms: i64,
    pub windows: Vec<TierWindowView>,
    /// Latency per tier over the whole range (histograms merged, not percentiles).
    pub tiers: BTreeMap<String, Percentiles>,
}

/// Stored statistics per tier, datacenter and window, with latency percentiles
#[utoipa::path(get, path = "/api/v1/topics/{topic}/windows", operation_id = "windows",
    params(("topic" = String, Path, min_length = 1, example = "orders"), WindowsQuery),
    responses((status = 200, description = "OK", body = WindowsResponse)))]
pub async fn windows(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<WindowsQuery>, QueryRejection>,
) -> ApiResult<Json<WindowsResponse>> {
    let Path(topic) = path?;
    let Query(q) = query?;
    let (from, to) = resolve_range(&state, q.from.as_deref(), q.to.as_deref())?;
    let rows = state
        .store
        .topic_windows(&topic, TimeRange::new(from, to))
        .await?;
    let rows: Vec<_> = rows
        .into_iter()
        .filter(|r| q.tier.as_ref().is_none_or(|t| t.is_empty() || &r.tier == t))
        .filter(|r| {
            q.datacenter
                .as_ref()
                .is_none_or(|d| d.is_empty() || &r.datacenter == d)
        })
        .collect();
    let tiers = engine::tier_latency(&rows);
    let windows = rows
        .iter()
        .map(|r| TierWindowView {
            window_start: r.window_start_ms,
            window_end: r.window_end_ms,
            tier: r.tier.clone(),
            datacenter: r.datacenter.clone(),
            count: r.count,
            bytes: r.bytes,
            no_time_count: r.no_time_count,
            malformed_count: r.malformed_count,
            out_of_bounds_count: r.out_of_bounds_count,
            checksum: format!("{:016x}", r.checksum),
            increments: r.increments,
            latency: engine::percentiles(&r.latency),
            observation_time_count: r.observation_time_count,
            delivery_failed_count: r.delivery_failed_count,
        })
        .collect();
    Ok(Json(WindowsResponse {
        topic,
        from,
        to,
        window_ms: state.topology()?.window.as_millis(),
        windows,
        tiers,
    }))
}

// ---------- /topics/{topic}/compare

#[derive(Serialize, ToSchema)]
#[schema(as = Compare)]
pub struct CompareResponse {
    pub topic: String,
    pub from: i64,
    pub to: i64,
    pub now: i64,
    pub edges: Vec<EdgeWindow>,
    /// The proofs of a loss that hold windows of the range as `loss` (docs/web.md,
    /// rule 0), as the evaluator holds them (read from the ledger, `web_proven_loss`,
    /// at a start), by window and edge: what each rests on. An admin withdraws a wrong
    /// one with `DELETE .../windows/{window_start}/proof`.
    pub proofs: Vec<ProofView>,
}

/// A proof of a loss: what it rests on, as far as the ledger records it.
#[derive(Serialize, ToSchema)]
pub struct ProofView {
    pub window_start: i64,
    pub upstream: String,
    pub downstream: String,
    pub datacenter: String,
    /// When it was proven (epoch ms).
    pub proven_at: i64,
    /// The verdict's reason when it was proven: the shortfall ("at least N of the M
    /// messages … are missing"), the replicator's position and when it was read.
    pub proof: String,
}

/// Per edge, downstream datacenter and window: counts, difference, completeness, verdict, latency
#[utoipa::path(get, path = "/api/v1/topics/{topic}/compare", operation_id = "compare",
    params(("topic" = String, Path, min_length = 1, example = "orders"), RangeQuery),
    responses((status = 200, description = "OK", body = CompareResponse)))]
pub async fn compare(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<RangeQuery>, QueryRejection>,
) -> ApiResult<Json<CompareResponse>> {
    let Path(topic) = path?;
    let Query(q) = query?;
    let (from, to) = q.resolve(&state)?;
    let topo = state.topology()?;
    let first = topo.window.window_of(from).start_ms;
    let now = now_ms();
    let read = TopicRead::read(&state.store, &topo, &topic, TimeRange::new(first, to), now).await?;
    let index = state.index.read().expect("verdict index lock");
    let mut edges = judging::judge(
        &topo,
        &read.inputs(now),
        read.window_starts(&topo),
        Scope::Edges,
        &index.proven,
    )
    .verdicts;
    let mut proofs: Vec<ProofView> = index
        .proven
        .iter()
        .filter(|(k, _)| k.topic == topic && k.window_start >= first && k.window_start < to)
        .map(|(k, p)| ProofView {
            window_start: k.window_start,
            upstream: k.upstream.clone(),
            downstream: k.downstream.clone(),
            datacenter: k.datacenter.clone(),
            proven_at: p.proven_at,
            proof: p.reason.clone(),
        })
        .collect();
    drop(index);
    // By window (windows the read did not reach come last from the engine).
    edges.sort_by_key(|e| e.window_start);
    proofs.sort_by(|a, b| {
        (a.window_start, &a.upstream, &a.downstream, &a.datacenter).cmp(&(
            b.window_start,
            &b.upstream,
            &b.downstream,
            &b.datacenter,
        ))
    });
    Ok(Json(CompareResponse {
        topic,
        from,
        to,
        now,
        edges,
        proofs,
    }))
}
