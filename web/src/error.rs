//! One error type for every response that is not a success: a JSON body
//! `{"error": {"status": 400, "message": "..."}}` with the matching status (the shape
//! of `common::ApiError`, which the collector's ingest answers too). Client errors say
//! what was wrong; internal errors are logged with their cause and answered with a
//! generic message.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

#[derive(Debug)]
pub struct AppError {
    pub status: StatusCode,
    pub message: String,
}

impl AppError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }
    /// Logs `cause` and hides it from the client.
    pub fn internal(context: &str, cause: impl std::fmt::Display) -> Self {
        tracing::error!(%cause, "{context}");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal error while {context}"),
        )
    }
}

impl From<store::StoreError> for AppError {
    fn from(e: store::StoreError) -> Self {
        match e {
            store::StoreError::Invalid(m) => AppError::bad_request(m),
            // The database being down is not a bug of ours: say so, with 503.
            store::StoreError::Database { context, source } => {
                tracing::warn!(error = %source, "store unavailable while {context}");
                AppError::unavailable(format!("store unavailable while {context}"))
            }
            other => AppError::internal("reading the store", other),
        }
    }
}

impl From<QueryRejection> for AppError {
    fn from(r: QueryRejection) -> Self {
        AppError::bad_request(r.body_text())
    }
}

impl From<PathRejection> for AppError {
    fn from(r: PathRejection) -> Self {
        AppError::bad_request(r.body_text())
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        common::ApiError::new(self.status, self.message).into_response()
    }
}

pub type ApiResult<T> = Result<T, AppError>;
