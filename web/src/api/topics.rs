//! `GET /api/v1/topics` and `GET /api/v1/anomalies`: answered from the evaluator's
//! verdict index.

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::params::{page, resolve_range, TimeParam};
use crate::engine::{EdgeWindow, Verdict};
use crate::error::{ApiResult, AppError};
use crate::state::AppState;

/// The query of `/topics` and `/anomalies`; `kind` is only a parameter of
/// `/anomalies` (the document leaves it out of `/topics`, see `openapi`).
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PagedRangeQuery {
    /// Start of the range (inclusive, window starts), RFC 3339 (2026-11-29T10:00:00Z) or
    /// epoch milliseconds. Default: one hour before `to`. An empty value means the default.
    #[param(value_type = Option<TimeParam>, inline, example = "2026-11-29T00:00:00Z")]
    pub from: Option<String>,
    /// End of the range (exclusive), RFC 3339 (2026-11-29T10:00:00Z) or epoch
    /// milliseconds. Default: now. An empty value means the default.
    #[param(value_type = Option<TimeParam>, inline)]
    pub to: Option<String>,
    /// Comma separated verdicts: loss, duplication, mismatch, delayed, stalled.
    pub kind: Option<String>,
    /// Page number, from 1.
    #[param(minimum = 1, default = 1)]
    pub page: Option<u32>,
    /// Items per page (at most serve.max_page_size, 1000 by default).
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub page_size: Option<u32>,
}

#[derive(Serialize, ToSchema)]
pub struct TopicHealth {
    pub topic: String,
    /// Worst verdict of the topic's windows in the range (`ok` when none is worse).
    pub worst: Verdict,
    /// Windows × edges in the range with an anomalous verdict.
    pub anomalies: usize,
    /// Windows × edges still waiting (open, settling or auditor behind).
    pub pending: usize,
}

#[derive(Serialize, ToSchema)]
#[schema(as = Topics)]
pub struct TopicsResponse {
    pub from: i64,
    pub to: i64,
    pub evaluated_at: i64,
    pub page: usize,
    pub page_size: usize,
    pub total: usize,
    pub topics: Vec<TopicHealth>,
}

/// Checks that the verdict index covers `[from, to)`; returns its evaluation time.
fn index_covers(state: &AppState, from: i64, to: i64) -> ApiResult<i64> {
    let index = state.index.read().expect("verdict index lock");
    let Some(at) = index.evaluated_at else {
        return Err(AppError::unavailable(
            "the first evaluation has not completed yet; retry shortly",
        ));
    };
    if from < index.horizon_start {
        return Err(AppError::bad_request(format!(
            "from ({from}) is before the evaluated horizon, which starts at {} (serve.horizon)",
            index.horizon_start
        )));
    }
    // Cold start: windows before `loaded_from` are not judged yet; answering would
    // claim them ok.
    if let Some(l) = &index.loading {
        if from < l.loaded_from {
            return Err(AppError::unavailable(format!(
                "still loading: windows before {} are not evaluated yet (cold start, see /readyz); \
                 retry shortly or ask from {} on",
                l.loaded_from, l.loaded_from
            )));
        }
    }
    if let Some((lo, hi)) = index.dropped_within(from, to) {
        return Err(AppError::unavailable(format!(
            "the verdict index is full (serve.max_verdicts = {}): verdicts of windows {lo}..={hi} were not kept, \
             so this range cannot be answered (see /readyz)",
            index.max_entries
        )));
    }
    Ok(at)
}

/// Topics with their worst verdict in the range (from the evaluated horizon)
#[utoipa::path(get, path = "/api/v1/topics", operation_id = "topics", params(PagedRangeQuery),
    responses((status = 200, description = "OK", body = TopicsResponse)))]
pub async fn topics(
    State(state): State<AppState>,
    query: Result<Query<PagedRangeQuery>, QueryRejection>,
) -> ApiResult<Json<TopicsResponse>> {
    let Query(q) = query?;
    if q.kind.is_some() {
        return Err(AppError::bad_request("kind is not a parameter of /topics"));
    }
    let (from, to) = resolve_range(&state, q.from.as_deref(), q.to.as_deref())?;
    let (page_no, size) = page(&state, q.page, q.page_size)?;
    let evaluated_at = index_covers(&state, from, to)?;
    let index = state.index.read().expect("verdict index lock");
    let mut health: BTreeMap<&str, TopicHealth> = index
        .topics
        .iter()
        .map(|t| {
            (
                t.as_str(),
                TopicHealth {
                    topic: t.clone(),
                    worst: Verdict::Ok,
                    anomalies: 0,
                    pending: 0,
                },
            )
        })
        .collect();
    for e in index.in_range(from, to) {
        if let Some(h) = health.get_mut(e.topic.as_str()) {
            if e.verdict.severity() > h.worst.severity() {
                h.worst = e.verdict;
            }
            if e.verdict.is_anomaly() {
                h.anomalies += 1;
            } else {
                h.pending += 1;
            }
        }
    }
    let total = health.len();
    let topics = health
        .into_values()
        .skip((page_no - 1) * size)
        .take(size)
        .collect();
    Ok(Json(TopicsResponse {
        from,
        to,
        evaluated_at,
        page: page_no,
        page_size: size,
        total,
        topics,
    }))
}

// ---------- /anomalies

#[derive(Serialize, ToSchema)]
#[schema(as = Anomalies)]
pub struct AnomaliesResponse {
    pub from: i64,
    pub to: i64,
    pub evaluated_at: i64,
    pub page: usize,
    pub page_size: usize,
    pub total: usize,
    pub anomalies: Vec<EdgeWindow>,
}

/// Anomalous verdicts across all topics, by window start (paginated)
#[utoipa::path(get, path = "/api/v1/anomalies", operation_id = "anomalies",
    params(PagedRangeQuery),
    responses((status = 200, description = "OK", body = AnomaliesResponse)))]
pub async fn anomalies(
    State(state): State<AppState>,
    query: Result<Query<PagedRangeQuery>, QueryRejection>,
) -> ApiResult<Json<AnomaliesResponse>> {
    let Query(q) = query?;
    let (from, to) = resolve_range(&state, q.from.as_deref(), q.to.as_deref())?;
    let (page_no, size) = page(&state, q.page, q.page_size)?;
    let kinds: Option<BTreeSet<Verdict>> = match q.kind.as_deref() {
        None | Some("") => None,
        Some(list) => Some(
            list.split(',')
                .map(|k| match Verdict::parse(k.trim()) {
                    Some(v) if v.is_anomaly() => Ok(v),
                    _ => Err(AppError::bad_request(format!(
                        "kind: {k:?} is not one of loss, duplication, mismatch, delayed, stalled"
                    ))),
                })
                .collect::<ApiResult<_>>()?,
        ),
    };
    let evaluated_at = index_covers(&state, from, to)?;
    let index = state.index.read().expect("verdict index lock");
    let mut total = 0;
    let mut out = Vec::with_capacity(size);
    let skip = (page_no - 1) * size;
    for e in index
        .in_range(from, to)
        .filter(|e| e.verdict.is_anomaly() && kinds.as_ref().is_none_or(|k| k.contains(&e.verdict)))
    {
        if total >= skip && out.len() < size {
            out.push(e.clone());
        }
        total += 1;
    }
    Ok(Json(AnomaliesResponse {
        from,
        to,
        evaluated_at,
        page: page_no,
        page_size: size,
        total,
        anomalies: out,
    }))
}
