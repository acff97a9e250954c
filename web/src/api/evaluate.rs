//! `POST /api/v1/evaluate` (admin scope): an evaluation cycle now.

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::ApiResult;
use crate::eval::CycleStats;
use crate::state::AppState;
use common::now_ms;

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
