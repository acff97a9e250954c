//! HTTP ingest for producers that are not written in Rust: `POST /api/v1/audit` with
//! a JSON array of audit messages v1. Each element is answered on its own: accepted
//! (first seen, counted), duplicate (UUID already stored) or rejected (with the
//! reason; also kept in the store's rejects). The whole array is one store
//! transaction: on a store error nothing was stored and the answer is 503, so the
//! client retries the same array, which deduplication makes safe.
//! `/metrics` and `/healthz` are served on the same port.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use common::Health;
use prometheus_client::registry::Registry;
use serde::Serialize;
use store::{Batch, Reject, WriteOutcome};
use uuid::Uuid;

use crate::convert;
use crate::kafka_source::now_ms;
use crate::sink::Sink;

const SOURCE: &str = "http";

#[derive(Clone)]
pub struct HttpState {
    pub sink: Sink,
    pub max_messages: usize,
}

/// The collector's HTTP router: ingest plus the common ops routes.
pub fn router(
    state: HttpState,
    max_body_bytes: usize,
    registry: Arc<Registry>,
    health: Health,
) -> Router {
    Router::new()
        .route("/api/v1/audit", post(ingest))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
        .merge(common::ops::ops_router(registry, health))
}

#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Accepted,
    Duplicate,
    Rejected,
}

#[derive(Debug, Serialize)]
pub struct ItemResult {
    pub index: usize,
    /// Absent when the element has no readable UUID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<Uuid>,
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct IngestResponse {
    pub accepted: usize,
    pub duplicate: usize,
    pub rejected: usize,
    pub results: Vec<ItemResult>,
}

/// Client and server errors, always as `{"error": "..."}`.
pub struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

async fn ingest(
    State(state): State<HttpState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<IngestResponse>, ApiError> {
    let body = body.map_err(|e| {
        ApiError(
            e.status(),
            format!("cannot read request body: {}", e.body_text()),
        )
    })?;
    let items: Vec<serde_json::Value> = serde_json::from_slice(&body).map_err(|e| {
        ApiError(
            StatusCode::BAD_REQUEST,
            format!("expected a JSON array of audit messages: {e}"),
        )
    })?;
    if items.len() > state.max_messages {
        return Err(ApiError(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "{} messages in one request; at most {} allowed",
                items.len(),
                state.max_messages
            ),
        ));
    }
    let mut batch = Batch {
        received_at_ms: now_ms(),
        ..Batch::default()
    };
    // Per element: Ok(index into batch.messages) or Err(reason).
    let mut slots: Vec<(Option<Uuid>, Result<usize, String>)> = Vec::with_capacity(items.len());
    for (index, item) in items.into_iter().enumerate() {
        let uuid = item
            .get("uuid")
            .and_then(|u| u.as_str())
            .and_then(|u| Uuid::parse_str(u).ok());
        match convert::parse_value(&item) {
            Ok(message) => {
                slots.push((Some(message.uuid()), Ok(batch.messages.len())));
                batch.messages.push(message);
            }
            Err(reason) => {
                batch.rejects.push(Reject {
                    source: format!("{SOURCE}[{index}]"),
                    reason: reason.clone(),
                    payload: convert::excerpt(item.to_string().as_bytes()),
                });
                slots.push((uuid, Err(reason)));
            }
        }
    }
    let outcome = state.sink.write_once(SOURCE, &batch).await.map_err(|e| {
        tracing::warn!(error = %e, "HTTP ingest: store unavailable");
        ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            "store unavailable, nothing was stored; retry".into(),
        )
    })?;
    let mut response = IngestResponse {
        accepted: 0,
        duplicate: 0,
        rejected: 0,
        results: Vec::with_capacity(slots.len()),
    };
    for (index, (uuid, slot)) in slots.into_iter().enumerate() {
        let (status, reason) = match slot {
            Ok(i) => match outcome.outcomes[i] {
                WriteOutcome::Accepted => (Status::Accepted, None),
                WriteOutcome::Duplicate => (Status::Duplicate, None),
            },
            Err(reason) => (Status::Rejected, Some(reason)),
        };
        match status {
            Status::Accepted => response.accepted += 1,
            Status::Duplicate => response.duplicate += 1,
            Status::Rejected => response.rejected += 1,
        }
        response.results.push(ItemResult {
            index,
            uuid,
            status,
            reason,
        });
    }
    Ok(Json(response))
}
