//! The dashboard page (docs/design.md §7): one HTML page, one script, one stylesheet, compiled
//! into the binary so it works without an internet connection. The page holds no data:
//! its script reads the public `/api/v1` routes (with the reader's bearer token when
//! auth is on), so these routes are open.

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::error::AppError;

struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const INDEX: Asset = Asset {
    name: "index.html",
    content_type: "text/html; charset=utf-8",
    body: include_str!("../assets/index.html"),
};

const ASSETS: [Asset; 2] = [
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../assets/app.js"),
    },
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("../assets/app.css"),
    },
];

/// The page only talks to its own origin; nothing inline is executed.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                   connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
                   form-action 'none'; frame-ancestors 'none'";

/// `/` and `/assets/{file}`, for any router state.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/assets/{file}", get(asset))
}

async fn index(headers: HeaderMap) -> Response {
    serve(&INDEX, &headers)
}

async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS.iter().find(|a| a.name == file) {
        Some(a) => serve(a, &headers),
        None => AppError::not_found(format!("no dashboard asset {file:?}")).into_response(),
    }
}

/// Asset names carry no content hash, so browsers must revalidate (`no-cache`); the
/// ETag (a hash of the embedded bytes, so it changes with each build that changes
/// them) turns revalidation into a 304 without a body.
fn serve(asset: &Asset, headers: &HeaderMap) -> Response {
    let etag = etag(asset.body);
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        asset.body.into_response()
    };
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::ETAG,
        HeaderValue::from_str(&etag).expect("hex etag is a valid header value"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// FNV-1a, 64 bit: stable across builds and platforms (unlike `DefaultHasher`).
fn etag(body: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in body.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("\"{h:016x}\"")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    async fn get(uri: &str, if_none_match: Option<&str>) -> Response {
        let mut req = Request::builder().uri(uri);
        if let Some(t) = if_none_match {
            req = req.header(header::IF_NONE_MATCH, t);
        }
        routes::<()>()
            .oneshot(req.body(Body::empty()).expect("request"))
            .await
            .expect("infallible")
    }

    #[tokio::test]
    async fn serves_each_asset_with_its_content_type_and_revalidation_headers() {
        for (uri, ty) in [
            ("/", "text/html; charset=utf-8"),
            ("/assets/app.js", "text/javascript; charset=utf-8"),
            ("/assets/app.css", "text/css; charset=utf-8"),
        ] {
            let r = get(uri, None).await;
            assert_eq!(r.status(), StatusCode::OK, "{uri}");
            assert_eq!(r.headers()[header::CONTENT_TYPE], ty, "{uri}");
            assert_eq!(r.headers()[header::CACHE_CONTROL], "no-cache", "{uri}");
            let tag = r.headers()[header::ETAG].to_str().unwrap().to_string();
            let again = get(uri, Some(&tag)).await;
            assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "{uri}");
            let other = get(uri, Some("\"0000000000000000\"")).await;
            assert_eq!(other.status(), StatusCode::OK, "{uri}");
        }
    }

    #[tokio::test]
    async fn unknown_asset_is_a_json_404() {
        let r = get("/assets/../Cargo.toml", None).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        let r = get("/assets/nope.js", None).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert!(r.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("application/json"));
    }

    #[test]
    fn page_references_only_embedded_assets() {
        // A CDN link or an asset that is not embedded would break offline use. The
        // only absolute URL allowed is the SVG namespace, which is a name, not a fetch.
        for a in std::iter::once(&INDEX).chain(&ASSETS) {
            let rest = a.body.replace("'http://www.w3.org/2000/svg'", "");
            assert!(
                !rest.contains("http://") && !rest.contains("https://") && !rest.contains("//cdn"),
                "{} refers to another origin",
                a.name
            );
        }
        for a in ASSETS {
            assert!(
                INDEX.body.contains(&format!("\"assets/{}\"", a.name)),
                "{}",
                a.name
            );
        }
    }
}
