//! `DELETE /api/v1/topics/{topic}/windows/{window_start}/proof` (admin scope): an
//! operator withdraws a proof of a loss whose evidence was wrong (docs/design.md §6,
//! the proven-loss hold). The proof leaves the ledger (`web_proven_loss`) and the
//! evaluator's index, the withdrawal is logged at warn with who made it and why and
//! counted (`kafka_audit_proofs_withdrawn_total`), and the next cycle judges the window
//! again by its counts: an alert open on it resolves, with that reason, when they say
//! so.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use store::AlertLedger;
use utoipa::{IntoParams, ToSchema};

use super::params::{parse_time, TimeValue};
use crate::error::{ApiResult, AppError};
use crate::eval::VerdictKey;
use crate::state::AppState;
use crate::Caller;

/// Longest reason accepted (bytes): it goes into the log and into the alerts.
pub const MAX_REASON: usize = 1000;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct WithdrawQuery {
    /// The edge's upstream tier.
    #[param(example = "regional")]
    pub upstream: String,
    /// The edge's downstream tier.
    #[param(example = "aggregate")]
    pub downstream: String,
    /// The downstream datacenter of the proof.
    #[param(example = "agg")]
    pub datacenter: String,
    /// Why the proof is withdrawn (1 to 1000 bytes, no control characters): logged,
    /// and the reason of the resolve of the window's alert.
    #[param(example = "forged replicator evidence (incident 123)")]
    pub reason: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = WithdrawnProof)]
pub struct WithdrawnProof {
    pub topic: String,
    pub window_start: i64,
    pub upstream: String,
    pub downstream: String,
    pub datacenter: String,
    /// The proof as the evaluator held it (absent: only the ledger had it).
    #[schema(required = true)]
    pub proof: Option<String>,
    /// When it was proven (epoch ms; absent: only the ledger had it).
    #[schema(required = true)]
    pub proven_at: Option<i64>,
    /// Who withdrew it: the token's configured name (or that the API is open).
    pub withdrawn_by: String,
    pub reason: String,
}

/// Withdraw a proof of a loss (admin scope); the window is judged again by the next cycle
#[utoipa::path(delete, path = "/api/v1/topics/{topic}/windows/{window_start}/proof",
    operation_id = "withdraw_proof",
    params(
        ("topic" = String, Path, min_length = 1, example = "orders"),
        ("window_start" = inline(TimeValue), Path,
            description = "Window start, RFC 3339 (2026-11-29T10:00:00Z) or epoch milliseconds."),
        WithdrawQuery,
    ),
    responses(
        (status = 200, description = "Withdrawn", body = WithdrawnProof),
        (status = 404, description = "No proof of that window and edge", body = common::ErrorBody),
    ))]
pub async fn withdraw(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    path: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<WithdrawQuery>, QueryRejection>,
) -> ApiResult<Json<WithdrawnProof>> {
    let Path((topic, start)) = path?;
    let Query(q) = query?;
    let window_start = parse_time("window_start", &start)?;
    let reason = q.reason.trim();
    if reason.is_empty() || reason.len() > MAX_REASON || reason.chars().any(char::is_control) {
        return Err(AppError::bad_request(format!(
            "reason must be 1 to {MAX_REASON} bytes without control characters"
        )));
    }
    let who = caller.map_or_else(|| Caller::OPEN.to_string(), |Extension(c)| c.0);
    let key = VerdictKey {
        window_start,
        topic,
        upstream: q.upstream,
        downstream: q.downstream,
        datacenter: q.datacenter,
    };
    let ledger_key = store::ProvenLoss {
        window_start_ms: key.window_start,
        topic: key.topic.clone(),
        upstream: key.upstream.clone(),
        downstream: key.downstream.clone(),
        datacenter: key.datacenter.clone(),
        reason: String::new(),
        proven_at_ms: 0,
    };
    // The ledger first: a store that fails leaves the proof whole (503, try again).
    let in_ledger = state.alert_store.withdraw_proven_loss(&ledger_key).await?;
    let note = format!("the proof of a loss was withdrawn by {who}: {reason}");
    let held = {
        let mut index = state.index.write().expect("verdict index lock");
        if !in_ledger && !index.proven.contains_key(&key) {
            None
        } else {
            Some(index.withdraw(&key, note))
        }
    };
    let Some(held) = held else {
        return Err(AppError::not_found(format!(
            "no proof of a loss of {} {} -> {} ({}) window {}",
            key.topic, key.upstream, key.downstream, key.datacenter, key.window_start
        )));
    };
    state.metrics.proofs_withdrawn.inc();
    tracing::warn!(
        withdrawn_by = %who,
        reason,
        topic = %key.topic,
        upstream = %key.upstream,
        downstream = %key.downstream,
        datacenter = %key.datacenter,
        window_start = key.window_start,
        proof = held.as_ref().map(|p| p.reason.as_str()),
        "a proof of a loss was withdrawn: the window is judged again by its counts at the next cycle"
    );
    Ok(Json(WithdrawnProof {
        topic: key.topic,
        window_start: key.window_start,
        upstream: key.upstream,
        downstream: key.downstream,
        datacenter: key.datacenter,
        proof: held.as_ref().map(|p| p.reason.clone()),
        proven_at: held.map(|p| p.proven_at),
        withdrawn_by: who,
        reason: reason.to_string(),
    }))
}
