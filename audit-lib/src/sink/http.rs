//! HTTP sink (feature `http`): POSTs each batch as one JSON array to the collector's
//! `POST /api/v1/audit`. Blocking (ureq, no async runtime), so it suits producers of
//! any kind; wrap it in [`super::SpoolingSink`] to survive collector outages.

use std::time::Duration;

use super::{Sink, SinkError};
use crate::message::AuditMessage;

pub struct HttpSink {
    agent: ureq::Agent,
    url: String,
    /// `Bearer <token>` when the collector requires a token.
    authorization: Option<String>,
}

impl HttpSink {
    /// `base_url` is the collector's address, e.g. `http://127.0.0.1:8080`; the sink
    /// posts to `{base_url}/api/v1/audit`. `timeout` bounds each request.
    ///
    /// An `https://` URL needs the `http-tls` feature; without it this is an error
    /// here rather than a retriable failure on every send (which would only spool).
    pub fn new(base_url: &str, timeout: Duration) -> Result<Self, SinkError> {
        if !cfg!(feature = "http-tls") && base_url.starts_with("https://") {
            return Err(SinkError::Rejected(format!(
                "{base_url}: https needs audit-lib's `http-tls` feature"
            )));
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build()
            .into();
        Ok(HttpSink {
            agent,
            url: format!("{}/api/v1/audit", base_url.trim_end_matches('/')),
            authorization: None,
        })
    }

    /// Sends `Authorization: Bearer <token>` with every batch (a token of the
    /// collector's `[[auth.tokens]]` with scope `ingest`).
    pub fn with_bearer_token(mut self, token: &str) -> Self {
        self.authorization = Some(format!("Bearer {}", token.trim()));
        self
    }

    /// [`HttpSink::with_bearer_token`] with the token read from a file (a mounted
    /// Kubernetes Secret, a systemd credential); trailing whitespace is ignored.
    pub fn with_bearer_token_file(
        self,
        path: impl AsRef<std::path::Path>,
    ) -> Result<Self, SinkError> {
        let path = path.as_ref();
        let token = std::fs::read_to_string(path).map_err(|e| {
            SinkError::Rejected(format!(
                "cannot read bearer token file {}: {e}",
                path.display()
            ))
        })?;
        Ok(self.with_bearer_token(&token))
    }

    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Sink for HttpSink {
    fn send(&mut self, batch: &[AuditMessage]) -> Result<(), SinkError> {
        if batch.is_empty() {
            return Ok(());
        }
        let body = serde_json::to_vec(batch).expect("audit messages always serialise");
        let mut request = self
            .agent
            .post(&self.url)
            .header("content-type", "application/json");
        if let Some(authorization) = &self.authorization {
            request = request.header("authorization", authorization);
        }
        let resp = request
            .send(&body[..])
            .map_err(|e| SinkError::Unavailable(format!("POST {}: {e}", self.url)))?;
        let status = resp.status().as_u16();
        match status {
            200..=299 => Ok(()),
            // Timeouts, rate limits and server trouble pass; other client errors mean
            // this batch will never be accepted.
            408 | 429 | 500..=599 => Err(SinkError::Unavailable(format!(
                "POST {}: HTTP {status}",
                self.url
            ))),
            // A missing, wrong or unauthorised token is a configuration error of this
            // producer, not of the batch: keep the batch (spool, retry) until fixed.
            401 | 403 => Err(SinkError::Unavailable(format!(
                "POST {}: HTTP {status}: the collector refused the bearer token; check it",
                self.url
            ))),
            _ => {
                let text = resp.into_body().read_to_string().unwrap_or_default();
                Err(SinkError::Rejected(format!(
                    "POST {}: HTTP {status}: {}",
                    self.url,
                    text.chars().take(500).collect::<String>()
                )))
            }
        }
    }
}
