//! `GET /api/v1/topology`: the topology as serve judges with it.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use crate::engine::{self};
use crate::error::ApiResult;
use crate::state::AppState;

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
        (status = 503, description = "Window size not known yet", body = common::ErrorBody),
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
