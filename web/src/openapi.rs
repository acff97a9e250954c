//! The OpenAPI 3.1 document of the HTTP API (`GET /api/openapi.json`), derived by
//! utoipa from the handlers' own query and response types and their `#[utoipa::path]`
//! attributes, so it cannot drift from the code. What is common to every route (the
//! bearer scheme, the error answers of the auth and concurrency layers) is added here
//! once. A test compares the document with the routes the router serves
//! (web/tests/api.rs `openapi_document_lists_every_route`).

use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi as Document, Ref, RefOr, Response};
use utoipa::{Modify, OpenApi, ToSchema};

use crate::completeness::{CompletenessResponse, GateStatus, WindowCompleteness};
use crate::engine::{Lifecycle, Verdict};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "kafka-audit",
        version = "1",
        description = "Audit of Kafka pipelines: loss, delay and duplication per topic, edge \
            and window. Times in responses are epoch milliseconds. Every error is \
            {\"error\": {\"status\", \"message\"}}.",
    ),
    servers((url = "/")),
    security(("bearer" = [])),
    paths(
        crate::api::topology,
        crate::api::topics,
        crate::api::windows,
        crate::api::compare,
        crate::completeness::completeness,
        crate::api::anomalies,
        crate::api::offsets,
        crate::api::evaluate,
        crate::healthz,
        crate::readyz,
        crate::metrics_text,
    ),
    components(schemas(ErrorBody)),
    modifiers(&Conventions),
)]
struct ApiDoc;

/// The document `/api/openapi.json` serves.
pub fn document() -> Document {
    ApiDoc::openapi()
}

// Time parameters: only schemas (the doc comments are their descriptions); handlers
// take the text and parse it with `api::parse_time`. The pattern admits years
// 1971-2999 and days 1-28 of a month so that every value it admits is a date.

/// RFC 3339 or epoch milliseconds; empty means the default.
#[derive(ToSchema)]
#[schema(
    pattern = "^([0-9]{1,14}|(197[1-9]|19[89][0-9]|2[0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-](0[0-9]|1[0-3]):[0-5][0-9]))?$"
)]
pub struct TimeParam(pub String);

/// RFC 3339 or epoch milliseconds.
#[derive(ToSchema)]
#[schema(
    pattern = "^([0-9]{1,14}|(197[1-9]|19[89][0-9]|2[0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-](0[0-9]|1[0-3]):[0-5][0-9]))$"
)]
pub struct TimeValue(pub String);

/// The offsets one tier saw of one partition in a window: the shape of
/// `store::OffsetSpan` (audit-lib's), which has no schema of its own
/// (`/offsets` answers are compared with it in web/tests/api.rs).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct PartitionOffsets {
    pub partition: i32,
    /// Lowest offset seen.
    pub min: i64,
    /// Highest offset seen.
    pub max: i64,
    /// The latest record time counted in the partition (epoch ms, capped at the
    /// emitter's clock); absent when unknown (emitters older than the field).
    pub max_record_time: Option<i64>,
}

/// `{"error": {"status", "message"}}`: every error answer (`common::ErrorBody`, which
/// is common's and has no schema of its own; checked against real error answers in
/// web/tests/api.rs).
#[derive(ToSchema)]
#[schema(as = Error)]
#[allow(dead_code)]
pub struct ErrorBody {
    #[schema(inline)]
    pub error: ErrorDetail,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ErrorDetail {
    /// The HTTP status code, repeated.
    pub status: u16,
    pub message: String,
}

/// What every route shares: the bearer scheme; the answers of the auth layer (401,
/// 403), of parameter checks (400) and of the store and the request timeout (503) on
/// `/api/v1`; 401 on health and metrics when they are closed. A route's own
/// description of a status wins.
struct Conventions;

fn error(description: &str) -> RefOr<Response> {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("Error")))
                .build(),
        )
        .build()
        .into()
}

impl Modify for Conventions {
    fn modify(&self, doc: &mut Document) {
        doc.components
            .get_or_insert_with(Default::default)
            .add_security_scheme(
                "bearer",
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .description(Some(
                            "Tokens from [auth.tokens] with scopes read/admin; when none are \
                         configured the API is open.",
                        ))
                        .build(),
                ),
            );
        for (path, item) in doc.paths.paths.iter_mut() {
            let operations = [
                item.get.as_mut(),
                item.post.as_mut(),
                item.put.as_mut(),
                item.delete.as_mut(),
                item.patch.as_mut(),
            ];
            for op in operations.into_iter().flatten() {
                let responses = &mut op.responses.responses;
                let common: &[(&str, &str)] = if path.starts_with("/api/v1/") {
                    &[
                        ("400", "Invalid parameter"),
                        ("401", "Missing or unknown bearer token"),
                        ("403", "Token lacks the scope"),
                        ("503", "Store unavailable, or first evaluation not done"),
                    ]
                } else if path == "/metrics" {
                    &[("401", "Token required (auth.open_metrics = false)")]
                } else {
                    &[("401", "Token required (auth.open_health = false)")]
                };
                for (status, description) in common {
                    responses
                        .entry((*status).to_string())
                        .or_insert_with(|| error(description));
                }
            }
        }
        // `/topics` shares its query type with `/anomalies` but refuses `kind`.
        if let Some(params) = doc
            .paths
            .paths
            .get_mut("/api/v1/topics")
            .and_then(|i| i.get.as_mut())
            .and_then(|op| op.parameters.as_mut())
        {
            params.retain(|p| p.name != "kind");
        }
    }
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
