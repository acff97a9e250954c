//! `GET /api/v1/topics/{topic}/windows/{window_start}/offsets`: the offset ranges
//! behind one window.

use std::collections::BTreeMap;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use store::{OffsetSpan, TimeRange, VerdictReads};
use utoipa::{IntoParams, ToSchema};

use super::params::{parse_time, TimeValue};
use crate::error::{ApiResult, AppError};
use crate::state::AppState;

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
    pub partitions: Vec<PartitionOffsets>,
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
        (status = 404, description = "No such window", body = common::ErrorBody),
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
    let mut by_row: BTreeMap<(String, String), Vec<PartitionOffsets>> = rows
        .into_iter()
        .map(|r| ((r.tier, r.datacenter), Vec::new()))
        .collect();
    for (tier, datacenter, span) in spans {
        if let Some(partitions) = by_row.get_mut(&(tier, datacenter)) {
            partitions.push(span.into());
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

/// The offsets one tier saw of one partition in a window: the shape of
/// `store::OffsetSpan` (audit-lib's), which has no schema of its own
/// (`/offsets` answers are compared with it in web/tests/api.rs).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct PartitionOffsets {
    pub partition: i32,
    /// Lowest offset seen.
    pub min: i64,
    /// Highest offset seen.
    pub max: i64,
    /// The latest record time counted in the partition (epoch ms, capped at the
    /// emitter's clock); absent when unknown (emitters older than the field).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_record_time: Option<i64>,
}

impl From<OffsetSpan> for PartitionOffsets {
    fn from(s: OffsetSpan) -> Self {
        Self {
            partition: s.partition,
            min: s.min,
            max: s.max,
            max_record_time: s.max_record_time,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer's partitions serialize as the store's spans do, field for field
    /// (the schema is derived from `PartitionOffsets`; the data comes as `OffsetSpan`).
    #[test]
    fn partition_offsets_serialize_as_the_store_span() {
        for max_record_time in [Some(1_796_025_600_123), None] {
            let span = OffsetSpan {
                partition: 3,
                min: 10,
                max: 42,
                max_record_time,
            };
            assert_eq!(
                serde_json::to_value(PartitionOffsets::from(span)).unwrap(),
                serde_json::to_value(span).unwrap()
            );
        }
    }
}
