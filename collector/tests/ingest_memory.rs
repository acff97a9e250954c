//! Security review H3: HTTP ingest must not amplify a request body in memory. An 8 MiB
//! body of `[{"":0},{"":0},…]` (about 1.2 M elements) used to become ~0.8 GB of
//! `serde_json::Value`s before the message cap was checked. The body is now parsed
//! with a limit that counts as it goes: peak heap growth while handling it stays under
//! twice the body size.
//!
//! The counting allocator (`testkit::alloc`) counts every allocation of this binary:
//! one test only, so that no other test's allocations are counted.

#[path = "it/support/mod.rs"]
mod support;

use std::time::Duration;

use support::*;

#[global_allocator]
static GLOBAL: testkit::alloc::Counting = testkit::alloc::Counting;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_8_mib_body_of_tiny_elements_is_refused_without_amplification() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = http_only_config(&sqlite_in(&dir));
    let body_limit = 8 << 20;
    config.http.max_body_bytes = body_limit;
    let (collector, shutdown) = start_collector(config).await;
    let addr = collector.http_addr.unwrap();

    let elements = (body_limit - 2) / 7;
    let mut body = Vec::with_capacity(body_limit);
    body.push(b'[');
    for i in 0..elements {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(br#"{"":0}"#);
    }
    body.push(b']');
    assert!(body.len() <= body_limit);
    let size = body.len();
    let body = reqwest::Body::from(body);
    let client = reqwest::Client::new();
    // Warm the connection pool and the server's lazy state first.
    let _ = client
        .get(format!("http://{addr}/healthz"))
        .send()
        .await
        .unwrap();

    let baseline = testkit::alloc::reset_peak();
    let response = client
        .post(format!("http://{addr}/api/v1/audit"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let peak = testkit::alloc::peak_growth(baseline);
    eprintln!(
        "body {size} bytes ({elements} elements): status {status}, peak heap growth {peak} bytes ({:.2}× the body)",
        peak as f64 / size as f64
    );
    assert_eq!(status, 413, "{text}");
    assert!(
        peak < 2 * size,
        "handling an {size}-byte body grew the heap by {peak} bytes"
    );

    stop(&shutdown, collector, Duration::from_secs(10)).await;
}
