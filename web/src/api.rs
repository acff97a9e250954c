//! `/api/v1` handlers. Times are RFC 3339 or epoch milliseconds; ranges and page sizes
//! are bounded by `[serve]`; `/anomalies` and `/topics` read the evaluator's verdict
//! index, the per-topic routes read the store.

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use store::{OffsetSpan, TimeRange, VerdictReads};
use utoipa::{IntoParams, ToSchema};

use crate::engine::{self, EdgeWindow, Percentiles, Verdict};
use crate::error::{ApiResult, AppError};
use crate::eval::CycleStats;
use crate::openapi::{PartitionOffsets, TimeParam, TimeValue};
use crate::reads::{self, Unread};
use crate::AppState;
use common::now_ms;

/// Latest time accepted: 9999-12-31T23:59:59.999Z.
const MAX_TIME_MS: i64 = 253_402_300_799_999;
const DEFAULT_SPAN_MS: i64 = 3_600_000;
const DEFAULT_PAGE_SIZE: u32 = 100;

/// RFC 3339 (`2026-11-29T10:00:00Z`) or epoch milliseconds.
pub fn parse_time(name: &str, value: &str) -> ApiResult<i64> {
    let ms = match value.parse::<i64>() {
        Ok(ms) => ms,
        Err(_) => chrono::DateTime::parse_from_rfc3339(value)
            .map_err(|e| {
                AppError::bad_request(format!(
                    "{name}: {value:?} is neither RFC 3339 nor epoch milliseconds ({e})"
                ))
            })?
            .timestamp_millis(),
    };
    if !(0..=MAX_TIME_MS).contains(&ms) {
        return Err(AppError::bad_request(format!(
            "{name}: {value:?} is outside 1970-01-01 .. 9999-12-31"
        )));
    }
    Ok(ms)
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RangeQuery {
    /// Start of the range (inclusive, window starts), RFC 3339 (2026-11-29T10:00:00Z) or
    /// epoch milliseconds. Default: one hour before `to`. An empty value means the default.
    #[param(value_type = Option<TimeParam>, inline, example = "2026-11-29T00:00:00Z")]
    pub from: Option<String>,
    /// End of the range (exclusive), RFC 3339 (2026-11-29T10:00:00Z) or epoch
    /// milliseconds. Default: now. An empty value means the default.
    #[param(value_type = Option<TimeParam>, inline)]
    pub to: Option<String>,
}

impl RangeQuery {
    /// `[from, to)`; `to` defaults to now and `from` to one hour before `to`.
    fn resolve(&self, state: &AppState) -> ApiResult<(i64, i64)> {
        resolve_range(state, self.from.as_deref(), self.to.as_deref())
    }
}

pub(crate) fn resolve_range(
    state: &AppState,
    from: Option<&str>,
    to: Option<&str>,
) -> ApiResult<(i64, i64)> {
    // `?to=` (an empty value, as forms send) means the default, like an absent one.
    let (from, to) = (from.filter(|s| !s.is_empty()), to.filter(|s| !s.is_empty()));
    let to = match to {
        Some(t) => parse_time("to", t)?,
        None => now_ms(),
    };
    let from = match from {
        Some(f) => parse_time("from", f)?,
        None => (to - DEFAULT_SPAN_MS).max(0),
    };
    if from >= to {
        return Err(AppError::bad_request(format!(
            "from ({from}) must be before to ({to})"
        )));
    }
    let max = state.config.serve.max_range.as_millis() as i64;
    if to - from > max {
        return Err(AppError::bad_request(format!(
            "range of {} ms exceeds the maximum of {max} ms (serve.max_range)",
            to - from
        )));
    }
    Ok((from, to))
}

fn page(state: &AppState, page: Option<u32>, page_size: Option<u32>) -> ApiResult<(usize, usize)> {
    let page = page.unwrap_or(1);
    if page == 0 {
        return Err(AppError::bad_request("page starts at 1"));
    }
    let max = state.config.serve.max_page_size;
    let size = page_size.unwrap_or(DEFAULT_PAGE_SIZE.min(max));
    if size == 0 || size > max {
        return Err(AppError::bad_request(format!(
            "page_size must be within 1..={max}"
        )));
    }
    Ok((page as usize, size as usize))
}

// ---------- /topology

#[derive(Serialize, ToSchema)]
#[schema(as = Topology)]
pub struct TopologyView {
    pub window_ms: i64,
    pub grace_ms: i64,
    pub stall_after_ms: i64,
    pub thresholds: engine::Thresholds,
    /// Default threshold of the completeness gate.
    pub completeness: f64,
    pub tiers: Vec<TierView>,
    pub edges: Vec<EdgeView>,
    pub overrides: Vec<OverrideView>,
}

#[derive(Serialize, ToSchema)]
pub struct TierView {
    pub name: String,
    pub progress: bool,
    #[schema(required = true)]
    pub latency_p99_objective_ms: Option<i64>,
}

#[derive(Serialize, ToSchema)]
pub struct EdgeView {
    pub upstream: String,
    pub downstream: String,
    pub mapping: Mapping,
    /// Upstream datacenter → downstream datacenter.
    pub datacenters: BTreeMap<String, String>,
    /// Records keep their partition number across the hop: evidence is compared per
    /// partition (docs/web.md, Verdicts).
    pub preserves_partitions: bool,
}

/// How an edge maps upstream datacenters to downstream ones.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Mapping {
    /// Each datacenter to itself.
    OneToOne,
    /// By the edge's `datacenters` (several upstream datacenters may map to one).
    Mapped,
}

#[derive(Serialize, ToSchema)]
pub struct OverrideView {
    pub topics: String,
    #[schema(required = true)]
    pub grace_ms: Option<i64>,
    #[schema(required = true)]
    pub absolute: Option<u64>,
    #[schema(required = true)]
    pub ratio: Option<f64>,
}

/// Tiers, edges (with datacenter mapping), thresholds, grace period, overrides
#[utoipa::path(get, path = "/api/v1/topology", operation_id = "topology",
    responses(
        (status = 200, description = "OK", body = TopologyView),
        (status = 503, description = "Window size not known yet", body = crate::openapi::ErrorBody),
    ))]
pub async fn topology(State(state): State<AppState>) -> ApiResult<Json<TopologyView>> {
    let t = state.topology()?;
    let c = &t.config;
    Ok(Json(TopologyView {
        window_ms: t.window.as_millis(),
        grace_ms: c.grace.as_millis() as i64,
        stall_after_ms: t.stall_after_ms,
        thresholds: c.thresholds.clone(),
        completeness: c.completeness,
        tiers: c
            .tiers
            .iter()
            .map(|x| TierView {
                name: x.name.clone(),
                progress: x.progress,
                latency_p99_objective_ms: x.latency_p99_objective.map(|d| d.as_millis() as i64),
            })
            .collect(),
        edges: t
            .edges
            .iter()
            .map(|e| EdgeView {
                upstream: e.upstream.clone(),
                downstream: e.downstream.clone(),
                mapping: if e.is_one_to_one() {
                    Mapping::OneToOne
                } else {
                    Mapping::Mapped
                },
                datacenters: e.datacenters.clone(),
                preserves_partitions: e.preserves_partitions,
            })
            .collect(),
        overrides: c
            .overrides
            .iter()
            .map(|o| OverrideView {
                topics: o.topics.clone(),
                grace_ms: o.grace.map(|d| d.as_millis() as i64),
                absolute: o.absolute,
                ratio: o.ratio,
            })
            .collect(),
    }))
}

// ---------- /topics

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

// ---------- /topics/{topic}/windows

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
    // Progress, then staged increments, then window rows (see `AuditStore::staged_windows`).
    let progress = reads::progress(&state.store, Some(&topic), &topo, now).await?;
    let staged: crate::engine::Staged = state
        .store
        .staged_windows(Some(&topic), first)
        .await?
        .into_iter()
        .map(|(_, tier, dc, w)| (tier, dc, w))
        .collect();
    let rows: Vec<_> = state
        .store
        .topic_windows(&topic, TimeRange::new(first, to))
        .await?;
    let unread = Unread::of(&rows, reads::rows_cut(&rows), progress.capped);
    let rows = reads::of_window(&rows, &topo);
    let windows = topo
        .window
        .windows_between(first, to)
        .map(|w| w.start_ms)
        .collect::<Vec<_>>();
    let mut edges =
        topo.evaluate_topic_staged(&topic, &windows, &rows, &progress.rows, &staged, now);
    if !unread.is_empty() {
        let not_read = unread.windows_not_read(&topo, to);
        unread.add_unjudged(
            &topo,
            &topic,
            &not_read,
            &rows,
            &progress.rows,
            &staged,
            now,
            &mut edges,
        );
        unread.hold(&topo, &mut edges);
        edges.sort_by_key(|e| e.window_start);
    }
    Ok(Json(CompareResponse {
        topic,
        from,
        to,
        now,
        edges,
    }))
}

// ---------- /topics/{topic}/windows/{window_start}/offsets

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct OffsetsQuery {
    /// Only this tier.
    pub tier: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct TierOffsets {
    pub tier: String,
    pub datacenter: String,
    #[schema(value_type = Vec<PartitionOffsets>)]
    pub partitions: Vec<OffsetSpan>,
}

#[derive(Serialize, ToSchema)]
#[schema(as = Offsets)]
pub struct OffsetsResponse {
    pub topic: String,
    pub window_start: i64,
    pub window_end: i64,
    pub offsets: Vec<TierOffsets>,
    /// More offset ranges than one read returns (store::MAX_READ_ROWS): the list
    /// stops there, in (tier, datacenter, partition) order. Absent when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    #[schema(required = false)]
    pub truncated: bool,
}

/// Offset ranges per partition behind one window, per tier and datacenter
#[utoipa::path(get, path = "/api/v1/topics/{topic}/windows/{window_start}/offsets",
    operation_id = "offsets",
    params(
        ("topic" = String, Path, min_length = 1, example = "orders"),
        ("window_start" = inline(TimeValue), Path,
            description = "Window start, RFC 3339 (2026-11-29T10:00:00Z) or epoch milliseconds; a multiple of the window size."),
        OffsetsQuery,
    ),
    responses(
        (status = 200, description = "OK", body = OffsetsResponse),
        (status = 404, description = "No such window", body = crate::openapi::ErrorBody),
    ))]
pub async fn offsets(
    State(state): State<AppState>,
    path: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<OffsetsQuery>, QueryRejection>,
) -> ApiResult<Json<OffsetsResponse>> {
    let Path((topic, start)) = path?;
    let Query(q) = query?;
    let window_start = parse_time("window_start", &start)?;
    let topo = state.topology()?;
    if topo.window.window_of(window_start).start_ms != window_start {
        return Err(AppError::bad_request(format!(
            "window_start {window_start} is not a multiple of the window size ({} ms)",
            topo.window.as_millis()
        )));
    }
    let rows = state
        .store
        .topic_windows(&topic, TimeRange::new(window_start, window_start + 1))
        .await?;
    let rows: Vec<_> = rows
        .into_iter()
        .filter(|r| q.tier.as_ref().is_none_or(|t| t.is_empty() || &r.tier == t))
        .collect();
    if rows.is_empty() {
        return Err(AppError::not_found(format!(
            "no window of topic {topic:?} starts at {window_start}{}",
            q.tier
                .as_ref()
                .map(|t| format!(" at tier {t:?}"))
                .unwrap_or_default()
        )));
    }
    // One query for every tier and datacenter of the window (one per row was up to
    // MAX_READ_ROWS queries for a window with forged datacenters).
    let mut spans = state
        .store
        .window_offsets_of_all_tiers(&topic, window_start, store::MAX_READ_ROWS as u32 + 1)
        .await?;
    let truncated = spans.len() > store::MAX_READ_ROWS;
    spans.truncate(store::MAX_READ_ROWS);
    let mut by_row: BTreeMap<(String, String), Vec<OffsetSpan>> = rows
        .into_iter()
        .map(|r| ((r.tier, r.datacenter), Vec::new()))
        .collect();
    for (tier, datacenter, span) in spans {
        if let Some(partitions) = by_row.get_mut(&(tier, datacenter)) {
            partitions.push(span);
        }
    }
    let offsets = by_row
        .into_iter()
        .map(|((tier, datacenter), partitions)| TierOffsets {
            tier,
            datacenter,
            partitions,
        })
        .collect();
    Ok(Json(OffsetsResponse {
        topic,
        window_start,
        window_end: window_start + topo.window.as_millis(),
        offsets,
        truncated,
    }))
}

// ---------- POST /evaluate (admin)

#[derive(Serialize, ToSchema)]
#[schema(as = Evaluate)]
pub struct EvaluateResponse {
    pub evaluated_at: i64,
    pub topics: usize,
    pub windows: usize,
    pub anomalies: usize,
}

/// Run an evaluation cycle now (admin scope)
#[utoipa::path(post, path = "/api/v1/evaluate", operation_id = "evaluate",
    responses((status = 200, description = "OK", body = EvaluateResponse)))]
pub async fn evaluate(State(state): State<AppState>) -> ApiResult<Json<EvaluateResponse>> {
    let now = now_ms();
    let CycleStats {
        windows,
        topics,
        anomalies,
    } = state.evaluate(now).await?;
    Ok(Json(EvaluateResponse {
        evaluated_at: now,
        topics,
        windows,
        anomalies,
    }))
}
