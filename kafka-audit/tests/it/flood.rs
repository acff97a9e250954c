//! Floods of the lowest-trust writers (docs/operations.md, Ingest bounds) against the
//! real binary (`kafka-audit collect` and `kafka-audit serve` as processes, PostgreSQL,
//! cluster A). After integrity.rs's honest six windows (w2 a loss of 37):
//! - the producer token floods HTTP ingest with unaligned (1–1.2 s) and misaligned
//!   (20 min) windows, progress of 100 000 partitions, full 8 MiB bodies of valid
//!   10 000-partition reports with the longest names (security review 2, finding 3:
//!   ~0.2–0.5 GB each before), and new topic names;
//! - anyone with produce rights floods the audit topic with the same, and honest
//!   records follow.
//!
//! Then: no verdict of another tier changed (w2 final loss, the rest final ok, the
//! gate incomplete), the honest records behind the audit-topic flood are stored, the
//! collector never restarted, and the peak resident set (`VmHWM`) stayed under 256 MB
//! for the collector and 512 MB for serve. The peaks are printed:
//! `cargo test -p kafka-audit --test it flood -- --nocapture`.

use std::time::{Duration, Instant};

use audit_lib::{AuditMessage, Identity, PartitionProgress, Window, WindowStats};
use serde_json::Value;

use crate::collector_support::{produce, producer};
use crate::deploy::process_stack::{free_port, Process};
use crate::integrity::*;

const COLLECTOR_PEAK_KIB: u64 = 256 * 1024;
const SERVE_PEAK_KIB: u64 = 512 * 1024;

fn zero(tier: &str, host: &str, topic: &str, start: i64, size: i64, count: u64) -> AuditMessage {
    AuditMessage::increment(
        &Identity::new(tier, "dc1", host),
        topic,
        Window {
            start_ms: start,
            end_ms: start + size,
        },
        WindowStats {
            count,
            bytes: count,
            ..WindowStats::default()
        },
        common::now_ms(),
    )
}

/// The review's flood of unaligned windows: sizes 1 000–1 199 ms, aligned on their own
/// size, inside and after w0.
fn unaligned(w0: i64, n: usize) -> Vec<AuditMessage> {
    (0..n)
        .map(|i| {
            let size = 1_000 + (i as i64 % 200);
            zero(
                "producer",
                "forger",
                "orders",
                (w0 / size + 1 + i as i64 / 200) * size,
                size,
                0,
            )
        })
        .collect()
}

/// 20-minute windows aligned on 20 minutes: a size the deployment does not use.
fn misaligned(w0: i64, n: usize) -> Vec<AuditMessage> {
    let size = 2 * WINDOW;
    (0..n)
        .map(|i| {
            zero(
                "producer",
                "forger",
                "orders",
                w0 - w0 % size - i as i64 * size,
                size,
                0,
            )
        })
        .collect()
}

/// Valid progress reports of 10 000 partitions, with a 249-byte topic and a 255-byte
/// host: what a body of the most costly valid messages is made of.
fn costly_progress(n: usize, seed: usize) -> Vec<AuditMessage> {
    (0..n)
        .map(|i| {
            let topic = format!("{:0>249}", seed * 1_000 + i);
            AuditMessage::progress(
                &Identity::new("producer", "dc1", "h".repeat(255)),
                topic,
                (0..10_000)
                    .map(|partition| PartitionProgress {
                        partition,
                        next_offset: 0,
                        record_time: None,
                        lag: None,
                        max_record_time: None,
                        log_append_time: false,
                    })
                    .collect(),
                common::now_ms(),
            )
        })
        .collect()
}

fn new_topics(tier: &str, prefix: &str, n: usize) -> Vec<AuditMessage> {
    let now = common::now_ms();
    let w = now - now % WINDOW;
    (0..n)
        .map(|i| zero(tier, "forger", &format!("{prefix}-{i}"), w, WINDOW, 1))
        .collect()
}

/// Posts `messages` in requests of at most `per_request`, waiting out 429s (the
/// token's rates); returns how many requests were answered 429.
async fn flood_http(
    addr: std::net::SocketAddr,
    messages: &[AuditMessage],
    per_request: usize,
) -> usize {
    let mut throttled = 0;
    for chunk in messages.chunks(per_request) {
        let body = array(chunk);
        loop {
            let (status, json) = post(addr, PRODUCER_TOKEN, body.clone()).await;
            match status {
                200 => break,
                429 | 503 => {
                    throttled += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                other => panic!("{other}: {json}"),
            }
        }
    }
    throttled
}

async fn get_json(url: &str) -> Value {
    reqwest::get(url).await.unwrap().json().await.unwrap()
}

/// (verdict, lifecycle) per window of producer → regional in dc1, from serve's
/// `/compare`, and the gate's status.
async fn judged(api: &str, windows: &[i64]) -> (Vec<(String, String)>, String) {
    let range = format!("from={}&to={}", windows[0], windows[5] + WINDOW);
    let compare = get_json(&format!("{api}/api/v1/topics/orders/compare?{range}")).await;
    let verdicts = windows
        .iter()
        .map(|&w| {
            let e = compare["edges"]
                .as_array()
                .and_then(|edges| {
                    edges
                        .iter()
                        .find(|e| e["window_start"] == w && e["datacenter"] == "dc1")
                })
                .cloned()
                .unwrap_or_default();
            (
                e["verdict"].as_str().unwrap_or("?").to_string(),
                e["lifecycle"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect();
    let gate = get_json(&format!(
        "{api}/api/v1/topics/orders/completeness?tier=regional&datacenter=dc1&{range}"
    ))
    .await;
    (verdicts, gate["status"].as_str().unwrap_or("?").to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_of_one_token_and_of_the_audit_topic_change_no_other_verdict_within_memory() {
    let _alone = crate::ALONE.lock().await;
    let bootstrap = testkit::kafka_a();
    let db = testkit::fresh_database("flood").await;
    let audit_topic = testkit::unique("flood-audit");
    testkit::create_topic(&bootstrap, &audit_topic, 2).await;
    let dir = tempfile::tempdir().unwrap();
    let (ingest, api_port) = (free_port(), free_port());
    let collect = collect_toml(db.url()).replace(
        "listen = \"127.0.0.1:0\"",
        &format!("listen = \"127.0.0.1:{ingest}\""),
    ) + &format!(
        r#"
[[sources]]
name = "a"
topics = ["{audit_topic}"]
group_id = "{}"
[sources.kafka]
bootstrap_servers = "{bootstrap}"
"#,
        testkit::unique("flood")
    );
    let serve = serve_toml(db.url()).replace(
        "evaluate_every = \"1h\"",
        &format!("evaluate_every = \"2s\"\nlisten = \"127.0.0.1:{api_port}\""),
    );
    std::fs::write(dir.path().join("collect.toml"), collect).unwrap();
    std::fs::write(dir.path().join("serve.toml"), serve).unwrap();
    let path = |f: &str| dir.path().join(f).to_str().unwrap().to_string();
    let env = [("KAFKA_AUDIT__LOG__LEVEL", "warn")];
    let mut collector = Process::start(
        "collect",
        &["collect", "--config", &path("collect.toml")],
        &env,
        dir.path(),
    );
    let addr: std::net::SocketAddr = format!("127.0.0.1:{ingest}").parse().unwrap();
    let api = format!("http://127.0.0.1:{api_port}");
    let up = testkit::wait_until_async(Duration::from_secs(60), || async {
        reqwest::get(format!("http://{addr}/healthz")).await.is_ok()
    })
    .await;
    assert!(up, "collector did not start:\n{}", collector.log());

    let windows = six_windows();
    let (honest_producer, honest_regional) = honest(&windows);
    for (token, messages) in [
        (PRODUCER_TOKEN, &honest_producer),
        (REGIONAL_TOKEN, &honest_regional),
    ] {
        let (status, json) = post(addr, token, array(messages)).await;
        assert_eq!(
            (status, json["accepted"].as_u64()),
            (200, Some(messages.len() as u64)),
            "{json}"
        );
    }
    let mut serve = Process::start(
        "serve",
        &["serve", "--config", &path("serve.toml")],
        &env,
        dir.path(),
    );
    let expected: Vec<(String, String)> = (0..6)
        .map(|i| {
            (
                (if i == 2 { "loss" } else { "ok" }).to_string(),
                "final".to_string(),
            )
        })
        .collect();
    let honest_judged = (expected.clone(), "incomplete".to_string());
    let ready = testkit::wait_until_async(Duration::from_secs(90), || async {
        reqwest::get(format!("{api}/readyz"))
            .await
            .is_ok_and(|r| r.status() == 200)
            && judged(&api, &windows).await == honest_judged
    })
    .await;
    assert!(ready, "{:?}\n{}", judged(&api, &windows).await, serve.log());
    let baseline = (collector.peak_rss_kib(), serve.peak_rss_kib());

    // 1. The producer token over HTTP.
    let started = Instant::now();
    let w0 = windows[0];
    let mut throttled = flood_http(addr, &unaligned(w0, 100_000), 10_000).await;
    peaks(&collector, &serve, "unaligned");
    throttled += flood_http(addr, &misaligned(w0, 10_000), 10_000).await;
    peaks(&collector, &serve, "misaligned");
    for i in 0..10 {
        throttled += flood_http(addr, &[forged_progress(i * 10_000)], 1).await;
    }
    peaks(&collector, &serve, "progress");
    // Full bodies of the costliest valid messages, four at once.
    let per_body = ((8 << 20) - (64 << 10)) / (costly_progress(1, 0)[0].to_json().len() + 1);
    let bodies: Vec<String> = (0..8)
        .map(|b| array(&costly_progress(per_body, b)))
        .collect();
    assert!(bodies
        .iter()
        .all(|b| b.len() < 8 << 20 && b.len() > 7 << 20));
    for four in bodies.chunks(4) {
        let sent = four
            .iter()
            .map(|b| try_post(addr, PRODUCER_TOKEN, b.clone()));
        for (status, json) in futures_join(sent).await {
            // 0: the connection was closed while the body was sent, after the 429
            // that refused it unread.
            assert!([0, 200, 429, 503].contains(&status), "{status}: {json}");
            throttled += usize::from(status != 200);
        }
    }
    peaks(&collector, &serve, "bodies");
    throttled += flood_http(addr, &new_topics("producer", "forged-http", 20_000), 10_000).await;
    peaks(&collector, &serve, "topics");
    eprintln!(
        "HTTP flood sent in {:?} ({throttled} answers 429/503)",
        started.elapsed()
    );

    // 2. Anyone with produce rights, through the audit topic.
    let kafka = producer(&bootstrap);
    let mut forged: Vec<AuditMessage> = unaligned(w0, 20_000);
    forged.extend(misaligned(w0, 2_000));
    forged.extend((1..11).map(|i| forged_progress(i * 10_000)));
    forged.extend(costly_progress(60, 100));
    forged.extend(new_topics("regional", "forged-kafka", 10_000));
    let records: Vec<(String, Vec<u8>)> = forged
        .iter()
        .map(|m| (m.topic.clone(), m.to_json().into_bytes()))
        .collect();
    produce(&kafka, &audit_topic, &records).await;
    let behind = new_topics("regional", "honest-after-flood", 20);
    let behind_records: Vec<(String, Vec<u8>)> = behind
        .iter()
        .map(|m| (m.topic.clone(), m.to_json().into_bytes()))
        .collect();
    produce(&kafka, &audit_topic, &behind_records).await;
    let produced = Instant::now();
    // The flood is through once each of its records is counted (accepted, duplicate
    // or rejected: counted when its batch is stored).
    let through = testkit::wait_until_async(Duration::from_secs(300), || async {
        kafka_source_counts(addr).await.0 >= records.len() as u64
    })
    .await;
    assert!(
        through,
        "the source did not get through the flood\n{}",
        collector.log()
    );
    let (_, batches_through) = kafka_source_counts(addr).await;
    let flood_stored = produced.elapsed();
    let reader = store::Store::connect(db.url()).await.unwrap();
    let stored = testkit::wait_until_async(Duration::from_secs(60), || async {
        use store::VerdictReads;
        let mut all = true;
        for m in &behind {
            let rows = reader
                .topic_windows(&m.topic, store::TimeRange::new(0, i64::MAX))
                .await
                .unwrap_or_default();
            all &= rows.len() == 1;
        }
        all
    })
    .await;
    assert!(
        stored,
        "the records behind the flood were not stored\n{}",
        collector.log()
    );
    let (_, batches_stored) = kafka_source_counts(addr).await;
    eprintln!(
        "audit-topic flood of {} records stored {flood_stored:?} after it was produced; the honest records behind it {:?}, {} batch(es) later",
        records.len(),
        produced.elapsed(),
        batches_stored - batches_through
    );
    // Within one batch interval: the batch after the flood's last one at the latest
    // (no retry, no restart, no batch read again).
    assert!(
        batches_stored - batches_through <= 1,
        "{batches_through} -> {batches_stored}"
    );
    collector.assert_running();
    peaks(&collector, &serve, "kafka");

    // 3. serve has judged again since: nothing of regional changed.
    let flood_end = common::now_ms();
    let judged_again = testkit::wait_until_async(Duration::from_secs(60), || async {
        get_json(&format!("{api}/readyz")).await["evaluated_at"]
            .as_i64()
            .is_some_and(|t| t > flood_end)
    })
    .await;
    assert!(judged_again, "{}", serve.log());
    assert_eq!(judged(&api, &windows).await, honest_judged);
    let anomalies = get_json(&format!(
        "{api}/api/v1/anomalies?from={}&to={}",
        windows[0],
        windows[5] + WINDOW
    ))
    .await;
    let orders: Vec<&Value> = anomalies["anomalies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["topic"] == "orders")
        .collect();
    assert_eq!(orders.len(), 1, "{anomalies}");
    assert_eq!(orders[0]["window_start"], windows[2]);

    let peaks = (collector.peak_rss_kib(), serve.peak_rss_kib());
    eprintln!(
        "peak RSS (VmHWM): collector {} MiB (before the floods {} MiB), serve {} MiB (before {} MiB)",
        peaks.0 / 1024,
        baseline.0 / 1024,
        peaks.1 / 1024,
        baseline.1 / 1024
    );
    assert!(
        peaks.0 < COLLECTOR_PEAK_KIB,
        "collector peaked at {} KiB",
        peaks.0
    );
    assert!(peaks.1 < SERVE_PEAK_KIB, "serve peaked at {} KiB", peaks.1);
    collector.assert_running();
    serve.assert_running();
    serve.stop();
    collector.stop();
}

/// Prints the peak resident sets after a phase of the floods.
fn peaks(collector: &Process, serve: &Process, phase: &str) {
    eprintln!(
        "peak RSS after the {phase} flood: collector {} MiB, serve {} MiB",
        collector.peak_rss_kib() / 1024,
        serve.peak_rss_kib() / 1024
    );
}

/// (records counted, batches stored) of the collector's Kafka source `a`.
async fn kafka_source_counts(addr: std::net::SocketAddr) -> (u64, u64) {
    let metrics = metrics(addr).await;
    let sum = |name: &str| -> u64 {
        metrics
            .lines()
            .filter(|l| l.starts_with(name) && l.contains("source=\"kafka:a\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    (
        sum("kafka_audit_collector_messages_total{"),
        sum("kafka_audit_collector_batches_total{"),
    )
}

/// Runs the futures at once; their outputs in order.
async fn futures_join<F>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}
