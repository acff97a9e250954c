//! HTTP ingest for producers that are not written in Rust: `POST /api/v1/audit` with
//! a JSON array of audit messages v1. Each element is answered on its own: accepted
//! (first seen, counted), duplicate (UUID already stored), rejected (invalid, with the
//! reason; also kept in the store's rejects) or forbidden (outside what the token may
//! report). The whole array is one store transaction: on a store error nothing was
//! stored and the answer is 503, so the client retries the same array, which
//! deduplication makes safe. `/metrics` and `/healthz` are served on the same port,
//! without a token.
//!
//! Who may post ([`crate::config::AuthConfig`]): with tokens configured, a bearer token
//! with scope `ingest` (401 without, 403 without the scope), and each message must lie
//! within the token's `tiers` and `datacenters`; replication evidence (a `replicator:`
//! tier) only from a token that names its tier, never from "any tier" nor without a
//! token (docs/design.md §10; counted in `evidence_rejects`). Without tokens, only
//! clients on the loopback interface, unless `allow_unauthenticated`. The body must be
//! `application/json` (415 otherwise): a browser cannot send that cross-origin without
//! a CORS preflight, which this server never grants.
//!
//! The body is parsed into borrowed slices of itself ([`RawValue`]), counting elements
//! as it goes and stopping at `max_messages + 1`: memory stays proportional to what
//! is accepted, never to how many tiny elements fit in the body.

use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use common::auth::{AuthError, Holder};
use common::{ApiError, Health, Scope, Tokens};
use prometheus_client::registry::Registry;
use serde::de::{DeserializeSeed, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use store::{Batch, Message, Reject};
use uuid::Uuid;

use crate::convert;
use crate::sink::{Sink, Written};
use crate::throttle::{Refused, Throttle};
use common::now_ms;

const SOURCE: &str = "http";

#[derive(Clone)]
pub struct HttpState {
    pub sink: Sink,
    pub max_messages: usize,
    /// Larger bodies are refused with 413.
    pub max_body_bytes: usize,
    pub tokens: Arc<Tokens>,
    /// No tokens and `allow_unauthenticated`: anyone may post.
    pub allow_unauthenticated: bool,
    /// Per-token rates and the in-flight body budget.
    pub throttle: Arc<Throttle>,
    /// How long a request waits for room in the body budget before a 503.
    pub body_wait: std::time::Duration,
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
    Forbidden,
}

#[derive(Debug, Serialize)]
pub struct ItemResult {
    pub index: usize,
    /// Absent when the element has no readable UUID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<Uuid>,
    pub status: Status,
    /// The HTTP status this element would have on its own: 422 rejected, 403
    /// forbidden; absent when stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct IngestResponse {
    pub accepted: usize,
    pub duplicate: usize,
    /// Rejected and forbidden elements.
    pub rejected: usize,
    pub results: Vec<ItemResult>,
}

/// Who is posting: `Ok(Some(holder))` with tokens, `Ok(None)` when auth is off and
/// the peer may post unauthenticated.
fn authorize(
    tokens: &Tokens,
    allow_unauthenticated: bool,
    req: &Request,
) -> Result<Option<Holder>, ApiError> {
    if tokens.is_empty() {
        let peer = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0);
        return if allow_unauthenticated || peer.is_some_and(|p| p.ip().is_loopback()) {
            Ok(None)
        } else {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "no ingest tokens are configured: only clients on the loopback interface may post \
                 (configure [[auth.tokens]], or set auth.allow_unauthenticated = true)",
            ))
        };
    }
    match tokens.authenticate(req.headers()) {
        Ok(holder) if holder.has(Scope::Ingest) => Ok(Some(holder.clone())),
        Ok(holder) => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!("token {:?} lacks the ingest scope", holder.name),
        )),
        Err(e @ (AuthError::Missing | AuthError::Unknown)) => {
            Err(ApiError::new(StatusCode::UNAUTHORIZED, e.to_string()))
        }
    }
}

fn is_json(req: &Request) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// Why a body is not an array of at most `max` elements.
enum ArrayError {
    TooMany,
    Json(serde_json::Error),
}

/// The elements of a JSON array, borrowed from `body`, counting as it parses and
/// stopping at the first element over `max`.
fn elements(body: &[u8], max: usize) -> Result<Vec<&RawValue>, ArrayError> {
    struct Seed<'c> {
        max: usize,
        too_many: &'c Cell<bool>,
    }
    impl<'de> DeserializeSeed<'de> for Seed<'_> {
        type Value = Vec<&'de RawValue>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_seq(self)
        }
    }
    impl<'de> Visitor<'de> for Seed<'_> {
        type Value = Vec<&'de RawValue>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON array of audit messages")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(self.max));
            while let Some(item) = seq.next_element::<&'de RawValue>()? {
                if items.len() == self.max {
                    self.too_many.set(true);
                    return Err(serde::de::Error::custom("too many messages"));
                }
                items.push(item);
            }
            Ok(items)
        }
    }
    let too_many = Cell::new(false);
    let mut de = serde_json::Deserializer::from_slice(body);
    let result = Seed {
        max,
        too_many: &too_many,
    }
    .deserialize(&mut de)
    .and_then(|items| de.end().map(|()| items));
    match result {
        Ok(items) => Ok(items),
        Err(_) if too_many.get() => Err(ArrayError::TooMany),
        Err(e) => Err(ArrayError::Json(e)),
    }
}

/// The body in one buffer, sized from `Content-Length` when given: each chunk is
/// copied in and freed as it arrives, so reading costs the body once, not twice.
async fn read_body(req: Request, max: usize) -> Result<Vec<u8>, ApiError> {
    use axum::body::HttpBody;
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body larger than {max} bytes"),
        )
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(too_large());
    }
    let mut body = Vec::with_capacity(declared.unwrap_or(0));
    let mut incoming = req.into_body();
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut incoming).poll_frame(cx)).await
    {
        let frame = frame.map_err(|e| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("cannot read request body: {e}"),
            )
        })?;
        let Ok(chunk) = frame.into_data() else {
            continue; // trailers
        };
        if body.len() + chunk.len() > max {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The UUID of an element that is not a valid message, if it has a readable one.
fn uuid_of(raw: &RawValue) -> Option<Uuid> {
    #[derive(Deserialize)]
    struct Id {
        uuid: Uuid,
    }
    serde_json::from_str::<Id>(raw.get()).ok().map(|i| i.uuid)
}

fn identity(m: &Message) -> (&str, &str) {
    (&m.tier, &m.datacenter)
}

/// Who a request counts against: its token, or without tokens its client address.
fn throttle_key(holder: Option<&Holder>, req: &Request) -> String {
    match holder {
        Some(h) => h.name.clone(),
        None => req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map_or_else(|| "anonymous".to_string(), |c| c.0.ip().to_string()),
    }
}

/// The answer to a request the throttle holds back, counted per token.
fn refused(state: &HttpState, holder: Option<&Holder>, why: Refused) -> Response {
    let token = holder.map_or("anonymous", |h| h.name.as_str());
    let (status, message, retry_after) = match why {
        Refused::Rate(after) => (
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "token {token:?} posts faster than http.token_requests_per_second / token_messages_per_second allow; retry later"
            ),
            after.as_secs().max(1),
        ),
        Refused::TooManyBodies => (
            StatusCode::TOO_MANY_REQUESTS,
            format!("token {token:?} already holds half of http.max_inflight_body_bytes in request bodies; retry later"),
            1,
        ),
        Refused::Busy => {
            state.sink.metrics.http_busy.inc();
            return ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many request bodies in flight (http.max_inflight_body_bytes); nothing was stored, retry",
            )
            .into_response();
        }
    };
    state
        .sink
        .metrics
        .http_throttled
        .get_or_create(&crate::metrics::TokenLabels {
            token: token.to_string(),
        })
        .inc();
    let mut response = ApiError::new(status, message).into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, retry_after.into());
    response
}

async fn ingest(State(state): State<HttpState>, req: Request) -> Response {
    match ingest_checked(&state, req).await {
        Ok(answer) => answer.into_response(),
        Err(response) => response,
    }
}

async fn ingest_checked(state: &HttpState, req: Request) -> Result<Json<IngestResponse>, Response> {
    let holder = authorize(&state.tokens, state.allow_unauthenticated, &req)
        .map_err(IntoResponse::into_response)?;
    if !is_json(&req) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "expected Content-Type: application/json",
        )
        .into_response());
    }
    let key = throttle_key(holder.as_ref(), &req);
    state
        .throttle
        .admit_request(&key)
        .map_err(|why| refused(state, holder.as_ref(), why))?;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(state.max_body_bytes);
    let _room = state
        .throttle
        .room(&key, declared.min(state.max_body_bytes), state.body_wait)
        .await
        .map_err(|why| refused(state, holder.as_ref(), why))?;
    ingest_body(state, holder, &key, req).await
}

async fn ingest_body(
    state: &HttpState,
    holder: Option<Holder>,
    key: &str,
    req: Request,
) -> Result<Json<IngestResponse>, Response> {
    let body = read_body(req, state.max_body_bytes)
        .await
        .map_err(IntoResponse::into_response)?;
    let items = elements(&body, state.max_messages)
        .map_err(|e| match e {
            ArrayError::TooMany => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "more than {} messages in one request; at most {} allowed",
                    state.max_messages, state.max_messages
                ),
            ),
            ArrayError::Json(e) => ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("expected a JSON array of audit messages: {e}"),
            ),
        })
        .map_err(IntoResponse::into_response)?;
    state
        .throttle
        .admit_messages(key, items.len())
        .map_err(|why| refused(state, holder.as_ref(), why))?;
    // Rejects name the token that sent them (`http:<token name>[index]`); metrics keep
    // the one `http` source.
    let reject_source = |index: usize| match &holder {
        Some(h) => format!("{SOURCE}:{}[{index}]", h.name),
        None => format!("{SOURCE}[{index}]"),
    };
    let mut batch = Batch {
        received_at_ms: now_ms(),
        ..Batch::default()
    };
    // Per element: Ok(index into batch.messages) or Err((status, reason)).
    type Slot = (Option<Uuid>, Result<usize, (Status, String)>);
    let mut slots: Vec<Slot> = Vec::with_capacity(items.len());
    let mut excerpts = convert::Excerpts::default();
    for (index, raw) in items.iter().enumerate() {
        let received = batch.received_at_ms;
        let parsed = convert::parse(raw.get().as_bytes(), received)
            .and_then(|m| state.sink.bounds.check(&m, received).map(|()| m));
        let refused = match parsed {
            Ok(message) => {
                let (tier, dc) = identity(&message);
                let why = match &holder {
                    Some(h) => h.binding_refuses(tier, dc),
                    // No credential is bound to replication evidence (docs/design.md §10).
                    None if common::replication::is_evidence_tier(tier) => Some(format!(
                        "tier {tier:?} is replication evidence: it is accepted only from an \
                         ingest token that names its tier in `tiers`"
                    )),
                    None => None,
                };
                if why.is_some() && common::replication::is_evidence_tier(tier) {
                    state
                        .sink
                        .metrics
                        .source(&state.sink.metrics.evidence_rejects, SOURCE);
                }
                match why {
                    None => {
                        slots.push((Some(message.uuid), Ok(batch.messages.len())));
                        batch.messages.push(message);
                        continue;
                    }
                    Some(why) => (Some(message.uuid), Status::Forbidden, why),
                }
            }
            Err(reason) => (uuid_of(raw), Status::Rejected, reason),
        };
        let (uuid, status, reason) = refused;
        batch.rejects.push(Reject {
            source: reject_source(index),
            reason: reason.clone(),
            payload: excerpts.take(raw.get().as_bytes()),
        });
        slots.push((uuid, Err((status, reason))));
    }
    state.sink.metrics.excerpts_dropped.inc_by(excerpts.dropped);
    drop(items);
    drop(body);
    let written = state.sink.write_once(SOURCE, &batch).await.map_err(|e| {
        tracing::warn!(error = %e, "HTTP ingest: store unavailable");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store unavailable, nothing was stored; retry",
        )
        .into_response()
    })?;
    let mut response = IngestResponse {
        accepted: 0,
        duplicate: 0,
        rejected: 0,
        results: Vec::with_capacity(slots.len()),
    };
    for (index, (uuid, slot)) in slots.into_iter().enumerate() {
        let (status, reason) = match slot {
            Ok(i) => match &written[i] {
                Written::Accepted => (Status::Accepted, None),
                Written::Duplicate => (Status::Duplicate, None),
                Written::Quarantined(reason) => (Status::Rejected, Some(reason.clone())),
            },
            Err((status, reason)) => (status, Some(reason)),
        };
        let code = match status {
            Status::Accepted | Status::Duplicate => None,
            Status::Rejected => Some(422),
            Status::Forbidden => Some(403),
        };
        match status {
            Status::Accepted => response.accepted += 1,
            Status::Duplicate => response.duplicate += 1,
            Status::Rejected | Status::Forbidden => response.rejected += 1,
        }
        response.results.push(ItemResult {
            index,
            uuid,
            status,
            code,
            reason,
        });
    }
    Ok(Json(response))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(peer: Option<[u8; 4]>) -> Request {
        let mut req = Request::new(axum::body::Body::empty());
        if let Some(ip) = peer {
            req.extensions_mut()
                .insert(ConnectInfo(SocketAddr::from((ip, 40000))));
        }
        req
    }

    #[test]
    fn without_tokens_only_loopback_peers_may_post_unless_allowed() {
        let none = Tokens::default();
        assert!(authorize(&none, false, &from(Some([127, 0, 0, 1]))).is_ok());
        for peer in [Some([10, 0, 0, 7]), None] {
            let e = authorize(&none, false, &from(peer)).err().unwrap();
            assert_eq!(e.status, StatusCode::FORBIDDEN);
            assert!(e.message.contains("loopback"), "{}", e.message);
            assert!(authorize(&none, true, &from(peer)).is_ok());
        }
    }

    #[test]
    fn counts_elements_as_it_parses() {
        assert_eq!(
            elements(b"[1, {\"a\": [2]}, \"x\"]", 3).ok().unwrap().len(),
            3
        );
        assert!(matches!(
            elements(b"[1, 2, 3, 4", 3),
            Err(ArrayError::TooMany)
        ));
        assert!(matches!(elements(b"{}", 3), Err(ArrayError::Json(_))));
        assert!(matches!(elements(b"[1] x", 3), Err(ArrayError::Json(_))));
    }
}
