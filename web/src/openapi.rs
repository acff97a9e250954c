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
use utoipa::{Modify, OpenApi};

use crate::api;

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
        api::topology::topology,
        api::topics::topics,
        api::windows::windows,
        api::windows::compare,
        api::completeness::completeness,
        api::topics::anomalies,
        api::offsets::offsets,
        api::evaluate::evaluate,
        api::proofs::withdraw,
        api::health::healthz,
        api::health::readyz,
        api::health::metrics_text,
    ),
    components(schemas(common::ErrorBody)),
    modifiers(&Conventions),
)]
struct ApiDoc;

/// The document `/api/openapi.json` serves.
pub fn document() -> Document {
    ApiDoc::openapi()
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
