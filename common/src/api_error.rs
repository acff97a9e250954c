//! The one error shape of the HTTP API (`/api/v1`, served by `serve` and by the
//! collector's ingest): a JSON body `{"error": {"status": 400, "message": "..."}}`
//! with the matching status, and `WWW-Authenticate` on a 401.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

/// A non-success answer: its status and a message for the client (never an
/// internal cause: callers log that themselves).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

/// The body of an [`ApiError`] answer, public so that API documents and clients can
/// name the shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(as = Error, description = "`{\"error\": {\"status\", \"message\"}}`: every error answer.")
)]
pub struct ErrorBody {
    #[cfg_attr(feature = "openapi", schema(inline))]
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorDetail {
    /// The HTTP status code, repeated.
    pub status: u16,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                status: self.status.as_u16(),
                message: self.message,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"kafka-audit\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer(e: ApiError) -> (StatusCode, Option<HeaderValue>, String) {
        let r = e.into_response();
        let status = r.status();
        let auth = r.headers().get(header::WWW_AUTHENTICATE).cloned();
        let body = axum::body::to_bytes(r.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, auth, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn status_and_message_in_one_json_shape() {
        let (status, auth, body) =
            answer(ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too \"big\"")).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(auth, None);
        assert_eq!(body, r#"{"error":{"status":413,"message":"too \"big\""}}"#);
    }

    #[tokio::test]
    async fn unauthorized_names_the_bearer_scheme() {
        let (status, auth, body) =
            answer(ApiError::new(StatusCode::UNAUTHORIZED, "missing token")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(auth.unwrap(), "Bearer realm=\"kafka-audit\"");
        assert_eq!(
            body,
            r#"{"error":{"status":401,"message":"missing token"}}"#
        );
    }
}
