//! Security review H3: HTTP ingest must not amplify a request body in memory. An 8 MiB
//! body of `[{"":0},{"":0},…]` (about 1.2 M elements) used to become ~0.8 GB of
//! `serde_json::Value`s before the message cap was checked. The body is now parsed
//! with a limit that counts as it goes: peak heap growth while handling it stays under
//! twice the body size.
//!
//! A counting global allocator needs `unsafe impl GlobalAlloc`; it lives only in this
//! test binary (one test, so no other test's allocations are counted).
#![allow(unsafe_code)]

#[path = "it/support/mod.rs"]
mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use support::*;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= layout.size() {
            grew(new_size - layout.size());
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

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

    let baseline = LIVE.load(Ordering::Relaxed);
    PEAK.store(baseline, Ordering::Relaxed);
    let response = client
        .post(format!("http://{addr}/api/v1/audit"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let peak = PEAK.load(Ordering::Relaxed) - baseline;
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
