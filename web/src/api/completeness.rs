//! The completeness gate: `GET /api/v1/topics/{topic}/completeness`. Downstream jobs
//! (hourly ETL, the ingestion of the aggregate cluster) ask whether every window of a
//! range is complete at one tier in one datacenter before they publish it; `kafka-audit
//! wait` polls this route.
//!
//! The reference of a tier is the expected count of its upstream edge (summed over the
//! mapped upstream datacenters of a many-to-one edge), exactly as the detection engine
//! computes it for `/compare`: this module asks the one judging path
//! ([`crate::judging`]) for that edge and datacenter and only adds the threshold. A window is complete when the engine calls it `final`
//! (past its grace period, every auditor involved has read past it) and the tier has at
//! least `threshold` of the reference. More than the reference (duplicates, or a
//! reference tier that reported nothing) is not missing data, so it is complete too.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use store::TimeRange;

use super::params::{resolve_range, TimeParam};
use crate::engine::{Edge, EdgeWindow, Lifecycle, SoFar, Topology, Verdict};
use crate::error::{ApiResult, AppError};
use crate::judging::{self, Scope, TopicRead};
use crate::reads;
use crate::state::AppState;
use common::now_ms;

/// The handler checks the required parameters itself (a 400 that says what is
/// missing), so they are `Option`s here and `required` in the document.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CompletenessQuery {
    /// The tier to gate on; it must be the downstream tier of an edge.
    #[param(required = true, min_length = 1, example = "aggregate")]
    pub tier: Option<String>,
    /// The tier's datacenter; for a many-to-one edge one of the mapping's downstream
    /// datacenters.
    #[param(required = true, min_length = 1, example = "agg")]
    pub datacenter: Option<String>,
    /// Start of the range, RFC 3339 or epoch milliseconds; the window containing it is
    /// included.
    #[param(required = true, value_type = Option<TimeParam>, inline, example = "2026-11-30T08:00:00Z")]
    pub from: Option<String>,
    /// End of the range (exclusive), RFC 3339 or epoch milliseconds. Up to
    /// serve.max_range after from (an hour or a day of windows is one call).
    #[param(required = true, value_type = Option<TimeParam>, inline, example = "2026-11-30T09:00:00Z")]
    pub to: Option<String>,
    /// Fraction of the reference count that makes a final window complete. Default:
    /// [topology] completeness (0.999).
    #[param(value_type = f64, required = false, minimum = 0, maximum = 1, example = 0.999)]
    pub threshold: Option<String>,
    /// The reference tier; only needed when the tier is downstream of several edges.
    pub upstream: Option<String>,
}

/// Where a window stands at the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum GateStatus {
    /// Final and at least the threshold: safe to publish.
    Complete,
    /// Not final yet (open, settling, an auditor behind or stalled): wait.
    Pending,
    /// Final and below the threshold: data is missing. Late data can still complete
    /// it, but a job should not wait for that on its own.
    Incomplete,
}

// Deserialize: `kafka-audit wait` reads the answer as these types.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(as = CompletenessWindow)]
pub struct WindowCompleteness {
    pub window_start: i64,
    pub window_end: i64,
    /// Count of the tier in the datacenter.
    pub observed: u64,
    /// Expected count of the upstream edge (summed over its upstream datacenters).
    pub reference: u64,
    /// observed / reference; 1 when both are 0; null when only the tier has data.
    #[schema(required = true)]
    pub ratio: Option<f64>,
    /// Neither side has data in this window.
    pub no_data: bool,
    pub lifecycle: Lifecycle,
    pub complete: bool,
    pub status: GateStatus,
    /// The detection engine's verdict and reason for the edge in this window.
    pub verdict: Verdict,
    pub reason: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(as = Completeness)]
pub struct CompletenessResponse {
    pub topic: String,
    pub tier: String,
    pub datacenter: String,
    pub reference_tier: String,
    pub reference_datacenters: Vec<String>,
    pub from: i64,
    pub to: i64,
    pub now: i64,
    pub window_ms: i64,
    pub threshold: f64,
    /// Every window of the range is complete.
    pub complete: bool,
    /// `incomplete` when any window is, else `pending` when any window is, else
    /// `complete`.
    pub status: GateStatus,
    pub windows_total: usize,
    pub windows_complete: usize,
    pub windows_pending: usize,
    pub windows_incomplete: usize,
    /// Sums over the range.
    pub observed: u64,
    pub reference: u64,
    #[schema(required = true)]
    pub ratio: Option<f64>,
    pub windows: Vec<WindowCompleteness>,
}

fn ratio(observed: u64, reference: u64) -> Option<f64> {
    match (reference, observed) {
        (0, 0) => Some(1.0),
        (0, _) => None,
        (r, o) => Some(o as f64 / r as f64),
    }
}

fn names<'a>(it: impl Iterator<Item = &'a str>) -> String {
    it.collect::<Vec<_>>().join(", ")
}

/// The edge whose downstream is `tier`, or a 400 that says what the reference is.
fn upstream_edge<'t>(
    topo: &'t Topology,
    tier: &str,
    upstream: Option<&str>,
) -> ApiResult<&'t Edge> {
    if topo.tier(tier).is_none() {
        return Err(AppError::bad_request(format!(
            "tier {tier:?} is not in the topology (tiers: {})",
            names(topo.config.tiers.iter().map(|t| t.name.as_str()))
        )));
    }
    let edges: Vec<&Edge> = topo.edges.iter().filter(|e| e.downstream == tier).collect();
    if let Some(up) = upstream {
        return edges
            .into_iter()
            .find(|e| e.upstream == up)
            .ok_or_else(|| AppError::bad_request(format!("there is no edge {up} → {tier}")));
    }
    match edges.as_slice() {
        [edge] => Ok(edge),
        [] => {
            let below: Vec<&str> = topo
                .edges
                .iter()
                .filter(|e| e.upstream == tier)
                .map(|e| e.downstream.as_str())
                .collect();
            let role = if below.is_empty() {
                "it is on no edge".to_string()
            } else {
                format!(
                    "it is the reference of {}; ask about that tier instead",
                    below.join(", ")
                )
            };
            Err(AppError::bad_request(format!(
                "tier {tier:?} has no upstream edge, so nothing counts what it should have: {role}"
            )))
        }
        several => Err(AppError::bad_request(format!(
            "tier {tier:?} is downstream of several edges; choose the reference with upstream= (one of: {})",
            names(several.iter().map(|e| e.upstream.as_str()))
        ))),
    }
}

fn threshold(state: &AppState, value: Option<&str>) -> ApiResult<f64> {
    match value.filter(|v| !v.is_empty()) {
        None => Ok(state.topology.config().completeness),
        Some(v) => v
            .parse::<f64>()
            .ok()
            .filter(|t| (0.0..=1.0).contains(t))
            .ok_or_else(|| {
                AppError::bad_request(format!(
                    "threshold: {v:?} is not a number within [0, 1] (e.g. 0.999)"
                ))
            }),
    }
}

fn required<'q>(value: &'q Option<String>, message: &str) -> ApiResult<&'q str> {
    value
        .as_deref()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| AppError::bad_request(message.to_string()))
}

/// The tier, its upstream edge and the datacenter the query gates on, or a 400 that
/// says what is missing or wrong.
fn gated_edge<'t, 'q>(
    topo: &'t Topology,
    q: &'q CompletenessQuery,
) -> ApiResult<(&'q str, &'t Edge, &'q str)> {
    let mut downstream: Vec<&str> = topo.edges.iter().map(|e| e.downstream.as_str()).collect();
    downstream.sort_unstable();
    downstream.dedup();
    let tier = required(
        &q.tier,
        &format!("tier is required (one of: {})", downstream.join(", ")),
    )?;
    let edge = upstream_edge(topo, tier, q.upstream.as_deref().filter(|u| !u.is_empty()))?;
    let datacenter = required(&q.datacenter, "datacenter is required")?;
    if !edge.is_one_to_one() && !edge.datacenters.values().any(|d| d == datacenter) {
        let mut targets: Vec<&str> = edge.datacenters.values().map(String::as_str).collect();
        targets.sort_unstable();
        targets.dedup();
        return Err(AppError::bad_request(format!(
            "datacenter {datacenter:?} is not a downstream datacenter of {} → {} ({})",
            edge.upstream,
            edge.downstream,
            targets.join(", ")
        )));
    }
    Ok((tier, edge, datacenter))
}

fn gate(e: EdgeWindow, threshold: f64) -> WindowCompleteness {
    let ratio = ratio(e.observed, e.expected);
    // A loss proven while the window was open is not undone by records that came
    // since (see `judging::hold_proven_loss`): such a window is never complete.
    let enough = ratio.is_none_or(|r| r >= threshold) && e.so_far != Some(SoFar::Loss);
    let status = match (e.lifecycle, enough) {
        (Lifecycle::Final, true) => GateStatus::Complete,
        (Lifecycle::Final, false) => GateStatus::Incomplete,
        _ => GateStatus::Pending,
    };
    WindowCompleteness {
        window_start: e.window_start,
        window_end: e.window_end,
        observed: e.observed,
        reference: e.expected,
        ratio,
        no_data: e.observed == 0 && e.expected == 0,
        lifecycle: e.lifecycle,
        complete: status == GateStatus::Complete,
        status,
        verdict: e.verdict,
        reason: e.reason,
    }
}

/// Completeness gate: is every window of a range complete at one tier in one datacenter?
///
/// For each window of [from, to) (the window containing `from` included): the tier's
/// observed count, the reference count (the expected count of its upstream edge, summed
/// over the mapped upstream datacenters of a many-to-one edge, as in /compare), their
/// ratio, the lifecycle and `complete`: true only when the window is final (past its
/// grace period and every auditor involved has read past it) and ratio >= threshold. A
/// ratio above 1, or a tier with data where the reference has none (ratio null), is not
/// missing data and counts as complete once final. A window without data at either tier
/// has ratio 1 and `no_data: true`; it is complete once final. A window whose loss was
/// proven before it was final (`so_far = loss`, docs/design.md §6, the proven-loss
/// hold) is never complete, whatever arrived since. `status` per window and for the
/// range: `complete`, `pending` (not final yet: wait) or `incomplete` (final and below
/// the threshold: data is missing; late data can still complete it). `kafka-audit wait`
/// polls this route.
#[utoipa::path(get, path = "/api/v1/topics/{topic}/completeness", operation_id = "completeness",
    params(("topic" = String, Path, min_length = 1, example = "orders"), CompletenessQuery),
    responses(
        (status = 200, description = "OK", body = CompletenessResponse, examples(
            ("six_windows" = (
                summary = "aggregate in agg against regional dc1 + dc2: one window short, one pending",
                value = json!(completeness_example(false)))),
            ("complete" = (
                summary = "an hour that is complete",
                value = json!(completeness_example(true)))),
        )),
        (status = 400, body = common::ErrorBody,
            description = "Invalid parameter: unknown tier, a tier without an upstream edge (the message names the tier it is the reference of), a datacenter the edge does not map to, from or to missing, a threshold outside [0, 1], a range longer than serve.max_range"),
        (status = 404, body = common::ErrorBody,
            description = "Nothing is known of the topic at the tier's or the reference's datacenters: no counts in the range and no auditor progress (a misspelt topic or datacenter)"),
    ))]
pub async fn completeness(
    State(state): State<AppState>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<CompletenessQuery>, QueryRejection>,
) -> ApiResult<Json<CompletenessResponse>> {
    let Path(topic) = path?;
    let Query(q) = query?;
    let topo = state.topology()?;
    let (tier, edge, datacenter) = gated_edge(&topo, &q)?;
    if q.from.as_deref().is_none_or(str::is_empty) || q.to.as_deref().is_none_or(str::is_empty) {
        return Err(AppError::bad_request(
            "from and to are required: the range of windows to gate on",
        ));
    }
    let threshold = threshold(&state, q.threshold.as_deref())?;
    let (from, to) = resolve_range(&state, q.from.as_deref(), q.to.as_deref())?;
    let first = topo.window.window_of(from).start_ms;
    let now = now_ms();
    let read = TopicRead::read(&state.store, &topo, &topic, TimeRange::new(first, to), now).await?;
    let up_dcs = edge.upstream_datacenters(datacenter);
    let involved = |tier: &str, dc: &str| {
        (tier == edge.downstream && dc == datacenter)
            || (tier == edge.upstream && up_dcs.iter().any(|u| u == dc))
    };
    // A misspelt topic or datacenter would otherwise wait forever (an auditor that
    // never reported is `stalled`, never final) or, between tiers that report no
    // progress, pass as complete without data: say so instead.
    if !reads::of_window(&read.rows, &topo)
        .iter()
        .any(|r| involved(&r.tier, &r.datacenter))
        && !read
            .progress
            .rows
            .iter()
            .any(|p| involved(&p.tier, &p.datacenter))
        && !read
            .staged
            .iter()
            .any(|(tier, dc, w)| *w < to && involved(tier, dc))
    {
        return Err(AppError::not_found(format!(
            "nothing is known of topic {topic:?} at {tier}/{datacenter} or {}/{}: no counts in the range and no auditor progress (check the topic and the datacenter)",
            edge.upstream,
            up_dcs.join("+")
        )));
    }
    // Staged increments of an involved tier and datacenter keep a window pending (the
    // roll-up is behind), a capped read answers pending for what it could not see,
    // never complete, and a proven loss stays a loss.
    let judged = judging::judge(
        &topo,
        &read.inputs(now),
        read.window_starts(&topo),
        Scope::Edge { edge, datacenter },
        &state.index.read().expect("verdict index lock").proven,
    )
    .verdicts;
    let windows: Vec<WindowCompleteness> = judged.into_iter().map(|e| gate(e, threshold)).collect();
    let count = |s: GateStatus| windows.iter().filter(|w| w.status == s).count();
    let (complete, pending, incomplete) = (
        count(GateStatus::Complete),
        count(GateStatus::Pending),
        count(GateStatus::Incomplete),
    );
    let status = if incomplete > 0 {
        GateStatus::Incomplete
    } else if pending > 0 {
        GateStatus::Pending
    } else {
        GateStatus::Complete
    };
    let observed = windows
        .iter()
        .fold(0u64, |a, w| a.saturating_add(w.observed));
    let reference = windows
        .iter()
        .fold(0u64, |a, w| a.saturating_add(w.reference));
    Ok(Json(CompletenessResponse {
        topic,
        tier: tier.to_string(),
        datacenter: datacenter.to_string(),
        reference_tier: edge.upstream.clone(),
        reference_datacenters: up_dcs,
        from,
        to,
        now,
        window_ms: topo.window.as_millis(),
        threshold,
        complete: status == GateStatus::Complete,
        status,
        windows_total: windows.len(),
        windows_complete: complete,
        windows_pending: pending,
        windows_incomplete: incomplete,
        observed,
        reference,
        ratio: ratio(observed, reference),
        windows,
    }))
}

const EXAMPLE_FROM: i64 = 1_796_025_600_000;
const EXAMPLE_WINDOW: i64 = 600_000;

/// The completeness route's examples, as the handler's own type: `complete` an hour
/// that is complete, otherwise one window short and one pending.
pub fn completeness_example(complete: bool) -> CompletenessResponse {
    let ok = |observed, no_data| {
        (
            observed,
            observed,
            Lifecycle::Final,
            Verdict::Ok,
            "complete",
            no_data,
        )
    };
    let rows = if complete {
        vec![
            ok(0, true),
            ok(2000, false),
            ok(1000, false),
            ok(0, true),
            ok(1000, false),
            ok(200, false),
        ]
    } else {
        vec![
            ok(0, true),
            (1999, 2000, Lifecycle::Final, Verdict::Ok, "complete", false),
            (
                990,
                1000,
                Lifecycle::Final,
                Verdict::Loss,
                "10 of 1000 messages missing",
                false,
            ),
            ok(0, true),
            ok(1000, false),
            (
                150,
                200,
                Lifecycle::Settling,
                Verdict::Pending,
                "auditor aggregate/agg has not read past window end + grace yet",
                false,
            ),
        ]
    };
    let threshold = 0.999;
    let ratio = |o: u64, r: u64| {
        if r == 0 {
            Some(1.0)
        } else {
            Some(o as f64 / r as f64)
        }
    };
    let windows: Vec<WindowCompleteness> = rows
        .into_iter()
        .enumerate()
        .map(
            |(i, (observed, reference, lifecycle, verdict, reason, no_data))| {
                let start = EXAMPLE_FROM + i as i64 * EXAMPLE_WINDOW;
                let status = match lifecycle {
                    Lifecycle::Final if observed as f64 >= threshold * reference as f64 => {
                        GateStatus::Complete
                    }
                    Lifecycle::Final => GateStatus::Incomplete,
                    _ => GateStatus::Pending,
                };
                WindowCompleteness {
                    window_start: start,
                    window_end: start + EXAMPLE_WINDOW,
                    observed,
                    reference,
                    ratio: ratio(observed, reference),
                    no_data,
                    lifecycle,
                    complete: status == GateStatus::Complete,
                    status,
                    verdict,
                    reason: reason.to_string(),
                }
            },
        )
        .collect();
    let count = |s: GateStatus| windows.iter().filter(|w| w.status == s).count();
    let observed = windows.iter().map(|w| w.observed).sum();
    let reference = windows.iter().map(|w| w.reference).sum();
    let status = if count(GateStatus::Incomplete) > 0 {
        GateStatus::Incomplete
    } else if count(GateStatus::Pending) > 0 {
        GateStatus::Pending
    } else {
        GateStatus::Complete
    };
    CompletenessResponse {
        topic: "orders".into(),
        tier: "aggregate".into(),
        datacenter: "agg".into(),
        reference_tier: "regional".into(),
        reference_datacenters: vec!["dc1".into(), "dc2".into()],
        from: EXAMPLE_FROM,
        to: EXAMPLE_FROM + 6 * EXAMPLE_WINDOW,
        now: EXAMPLE_FROM + 15 * EXAMPLE_WINDOW + 300_000,
        window_ms: EXAMPLE_WINDOW,
        threshold,
        complete: status == GateStatus::Complete,
        status,
        windows_total: windows.len(),
        windows_complete: count(GateStatus::Complete),
        windows_pending: count(GateStatus::Pending),
        windows_incomplete: count(GateStatus::Incomplete),
        observed,
        reference,
        ratio: ratio(observed, reference),
        windows,
    }
}
