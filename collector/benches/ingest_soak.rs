//! Ingest soak: a real `kafka-audit collect` process on a fresh PostgreSQL
//! database, fed for N seconds by C concurrent connections with a mix of valid and
//! hostile requests. Checks: no panic in the collector's log, every valid increment
//! stored exactly once (window rows against the ground truth kept here), the
//! collector's peak RSS under a stated bound, and the roll-up gauge back to 1.
//!
//! Run through `bench/ingest-soak.sh`, which builds the collector binary and this.
//!   ingest_soak --collector PATH [--seconds 60] [--connections 8] [--rss-bound-mib 256]

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use audit_lib::{AuditMessage, Checksum, Identity, PartitionProgress, Window, WindowStats};

const W: i64 = 600_000;
const TOPICS: u64 = 16;
const WINDOWS: i64 = 6;

#[derive(Default)]
struct Stats {
    requests: AtomicU64,
    valid_sent: AtomicU64,
    hostile_sent: AtomicU64,
    refused_requests: AtomicU64,
    retried_5xx: AtomicU64,
    unexpected: AtomicU64,
}

/// (topic, window start) → (count, increments) of accepted valid increments.
type Truth = BTreeMap<(String, i64), (u64, u64)>;

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn window_start(now: i64, k: i64) -> i64 {
    (now / W - 3 - k) * W
}

fn valid(rng: &mut Rng, now: i64) -> AuditMessage {
    let topic = format!("soak-{}", rng.below(TOPICS));
    let start = window_start(now, rng.below(WINDOWS as u64) as i64);
    let count = 1 + rng.below(1000);
    let stats = WindowStats {
        count,
        bytes: count * 10,
        checksum: Checksum(rng.next()),
        ..WindowStats::default()
    };
    AuditMessage::increment(
        &Identity::new("regional", "dc1", format!("soak-{}", rng.below(4))),
        &topic,
        Window {
            start_ms: start,
            end_ms: start + W,
        },
        stats,
        now,
    )
}

/// One hostile element (JSON text) and a name for it.
fn hostile(rng: &mut Rng, now: i64) -> String {
    let mut v = serde_json::to_value(valid(rng, now)).unwrap();
    match rng.below(9) {
        0 => v["count"] = serde_json::json!(i64::MAX),
        1 => v["topic"] = "a\u{0}b".into(),
        2 => v["kind"] = "\u{0}".into(),
        3 => v["emitted_at"] = serde_json::json!(i64::MAX),
        4 => v["tier"] = "producer".into(), // outside the token's binding: 403
        5 => v["topic"] = "x\"} 1\n#".into(),
        6 => v["window_start"] = serde_json::json!(now / W * W + 7),
        7 => return "[1, {\"nested\": [true]}]".into(),
        _ => v["uuid"] = "\u{0}".into(),
    }
    v.to_string()
}

fn big_progress(now: i64) -> String {
    let parts: Vec<PartitionProgress> = (0..100_001)
        .map(|p| PartitionProgress {
            partition: p,
            next_offset: 0,
            record_time: Some(now),
            lag: Some(0),
            ..Default::default()
        })
        .collect();
    format!(
        "[{}]",
        AuditMessage::progress(
            &Identity::new("regional", "dc1", "soak"),
            "soak-0",
            parts,
            now
        )
        .to_json()
    )
}

fn bomb() -> Vec<u8> {
    let mut b = Vec::with_capacity(8 << 20);
    b.push(b'[');
    for i in 0..1_190_000 {
        if i > 0 {
            b.push(b',');
        }
        b.extend_from_slice(br#"{"":0}"#);
    }
    b.push(b']');
    b
}

#[allow(clippy::too_many_arguments)]
async fn connection(
    id: u64,
    base: String,
    token: String,
    deadline: Instant,
    stats: Arc<Stats>,
    truth: Arc<Mutex<Truth>>,
    progress: Arc<String>,
    bomb: Arc<Vec<u8>>,
) {
    let client = reqwest::Client::new();
    let url = format!("{base}/api/v1/audit");
    let auth = format!("Bearer {token}");
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (id + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let mut sent_before: Vec<String> = Vec::new();
    let mut round = 0u64;
    while Instant::now() < deadline {
        round += 1;
        let now = chrono_now();
        stats.requests.fetch_add(1, Ordering::Relaxed);
        // Every 25th request is refused whole: no token, wrong type, a bomb, bad JSON,
        // or 100 001 partitions of progress (accepted request, rejected message).
        if round % 25 == 0 {
            let (request, expect) = match (round / 25) % 5 {
                0 => (
                    client
                        .post(&url)
                        .header("content-type", "application/json")
                        .body("[]"),
                    401,
                ),
                1 => (
                    client
                        .post(&url)
                        .header("authorization", &auth)
                        .header("content-type", "text/plain")
                        .body("[]"),
                    415,
                ),
                2 => (
                    client
                        .post(&url)
                        .header("authorization", &auth)
                        .header("content-type", "application/json")
                        .body(bomb.as_ref().clone()),
                    413,
                ),
                3 => (
                    client
                        .post(&url)
                        .header("authorization", &auth)
                        .header("content-type", "application/json")
                        .body("[{\"version\":1,"),
                    400,
                ),
                _ => (
                    client
                        .post(&url)
                        .header("authorization", &auth)
                        .header("content-type", "application/json")
                        .body(progress.as_ref().clone()),
                    200,
                ),
            };
            stats.hostile_sent.fetch_add(1, Ordering::Relaxed);
            match request.send().await {
                Ok(r) if r.status().as_u16() == expect => {
                    let status = r.status().as_u16();
                    let body: serde_json::Value = r.json().await.unwrap_or_default();
                    if status == 200 && body["rejected"] != 1 {
                        stats.unexpected.fetch_add(1, Ordering::Relaxed);
                        eprintln!("progress of 100 001 partitions not rejected: {body}");
                    }
                    stats.refused_requests.fetch_add(1, Ordering::Relaxed);
                }
                Ok(r) => {
                    stats.unexpected.fetch_add(1, Ordering::Relaxed);
                    eprintln!("expected {expect}, got {}", r.status());
                }
                Err(e) => {
                    stats.unexpected.fetch_add(1, Ordering::Relaxed);
                    eprintln!("request failed: {e}");
                }
            }
            continue;
        }
        // A batch of 50: valid increments, some resent (duplicates), some hostile.
        let mut elements = Vec::new();
        let mut kinds = Vec::new(); // 'v' valid new, 'd' duplicate, 'h' hostile
        let mut fresh = Vec::new();
        for _ in 0..50 {
            match rng.below(10) {
                0 | 1 => {
                    elements.push(hostile(&mut rng, now));
                    kinds.push('h');
                }
                2 if !sent_before.is_empty() => {
                    let i = rng.below(sent_before.len() as u64) as usize;
                    elements.push(sent_before[i].clone());
                    kinds.push('d');
                }
                _ => {
                    let m = valid(&mut rng, now);
                    elements.push(m.to_json());
                    kinds.push('v');
                    fresh.push(m);
                }
            }
        }
        let body = format!("[{}]", elements.join(","));
        let response = loop {
            let r = client
                .post(&url)
                .header("authorization", &auth)
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await;
            match r {
                Ok(r) if r.status().is_server_error() => {
                    // Nothing was stored: resending the same array is safe.
                    stats.retried_5xx.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(r) => break r,
                Err(e) => {
                    eprintln!("request failed, resending: {e}");
                    stats.retried_5xx.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        let status = response.status().as_u16();
        let json: serde_json::Value = response.json().await.unwrap_or_default();
        if status != 200 {
            stats.unexpected.fetch_add(1, Ordering::Relaxed);
            eprintln!("batch answered {status}: {json}");
            continue;
        }
        let results = json["results"].as_array().cloned().unwrap_or_default();
        let mut fresh = fresh.into_iter();
        for (kind, r) in kinds.iter().zip(&results) {
            let status = r["status"].as_str().unwrap_or("");
            let ok = match kind {
                'h' => status == "rejected" || status == "forbidden",
                'd' => status == "duplicate",
                _ => {
                    let m = fresh.next().expect("one per valid element");
                    if status == "accepted" {
                        let i = m.as_increment().unwrap();
                        let mut t = truth.lock().unwrap();
                        let e = t.entry((m.topic.clone(), i.window_start)).or_default();
                        e.0 += i.stats.count;
                        e.1 += 1;
                        sent_before.push(m.to_json());
                    }
                    status == "accepted"
                }
            };
            if !ok {
                stats.unexpected.fetch_add(1, Ordering::Relaxed);
                eprintln!("element of kind {kind} answered {r}");
            }
        }
        let valid = kinds.iter().filter(|k| **k != 'h').count() as u64;
        stats.valid_sent.fetch_add(valid, Ordering::Relaxed);
        stats.hostile_sent.fetch_add(50 - valid, Ordering::Relaxed);
        if sent_before.len() > 1000 {
            sent_before.drain(..500);
        }
    }
}

fn chrono_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(collector) = arg(&args, "--collector") else {
        eprintln!("usage: ingest_soak --collector PATH [--seconds 60] [--connections 8] [--rss-bound-mib 256]");
        std::process::exit(2);
    };
    let seconds: u64 = arg(&args, "--seconds").map_or(60, |s| s.parse().unwrap());
    let connections: u64 = arg(&args, "--connections").map_or(8, |s| s.parse().unwrap());
    let bound_mib: u64 = arg(&args, "--rss-bound-mib").map_or(256, |s| s.parse().unwrap());

    let db = testkit::fresh_database("ingest_soak").await;
    let dir = tempfile::tempdir().unwrap();
    let token = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, &token).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = dir.path().join("collect.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[store]
url = {url:?}
[http]
listen = "127.0.0.1:{port}"
[retention]
enabled = false
[log]
format = "text"
level = "warn"
[[auth.tokens]]
name = "soak"
token_file = {token_file:?}
scopes = ["ingest"]
tiers = ["regional"]
datacenters = ["dc1"]
"#,
            url = db.url()
        ),
    )
    .unwrap();
    let log_path = dir.path().join("collector.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new(&collector)
        .args(["collect", "--config"])
        .arg(&config)
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .expect("start the collector");
    let pid = child.id();
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let up = testkit::wait_until_async(Duration::from_secs(60), || async {
        client
            .get(format!("{base}/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    })
    .await;
    assert!(
        up,
        "collector did not come up: {}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
    let rss_start = rss_kib(pid, "VmRSS:");

    let stats = Arc::new(Stats::default());
    let truth = Arc::new(Mutex::new(Truth::new()));
    let progress = Arc::new(big_progress(chrono_now()));
    let bomb = Arc::new(bomb());
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for id in 0..connections {
        tasks.push(tokio::spawn(connection(
            id,
            base.clone(),
            token.clone(),
            deadline,
            Arc::clone(&stats),
            Arc::clone(&truth),
            Arc::clone(&progress),
            Arc::clone(&bomb),
        )));
    }
    let mut rss_max = 0;
    while Instant::now() < deadline {
        rss_max = rss_max.max(rss_kib(pid, "VmRSS:"));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for t in tasks {
        t.await.expect("connection task");
    }
    let load_secs = started.elapsed().as_secs_f64();

    // Caught up: the roll-up gauge is 1 and the window rows equal the ground truth.
    let truth = truth.lock().unwrap().clone();
    let pool = sqlx::PgPool::connect(db.url()).await.unwrap();
    let caught_up_from = Instant::now();
    let mut stored: Truth;
    let mut gauge: String;
    let give_up = Instant::now() + Duration::from_secs(120);
    let matched = loop {
        let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
            "SELECT topic, window_start_ms, count, increments FROM audit_window WHERE tier = 'regional'",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        stored = rows
            .into_iter()
            .map(|(t, w, c, i)| ((t, w), (c as u64, i as u64)))
            .collect();
        gauge = client
            .get(format!("{base}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
            .lines()
            .find(|l| l.starts_with("kafka_audit_collector_rollup_caught_up"))
            .unwrap_or("")
            .to_string();
        if stored == truth && gauge.ends_with(" 1") {
            break true;
        }
        if Instant::now() >= give_up {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let caught_up_after = caught_up_from.elapsed();
    let rss_hwm = rss_kib(pid, "VmHWM:");
    rss_max = rss_max.max(rss_kib(pid, "VmRSS:"));
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let _ = child.wait();
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let panics = log.matches("panicked").count();
    let other_rows: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_window WHERE tier <> 'regional'")
            .fetch_one(&pool)
            .await
            .unwrap();
    let rejects: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_reject")
        .fetch_one(&pool)
        .await
        .unwrap();

    let accepted: u64 = truth.values().map(|v| v.1).sum();
    let s = &stats;
    let mut out = std::io::stdout();
    writeln!(
        out,
        "ingest soak: {connections} connections, {load_secs:.1} s, collector {collector}"
    )
    .unwrap();
    writeln!(
        out,
        "  requests {} ({:.0}/s); elements valid {} (accepted first-seen {accepted}, {:.0}/s), hostile {}; whole requests refused as expected {}; 5xx/transport resends {}",
        s.requests.load(Ordering::Relaxed),
        s.requests.load(Ordering::Relaxed) as f64 / load_secs,
        s.valid_sent.load(Ordering::Relaxed),
        accepted as f64 / load_secs,
        s.hostile_sent.load(Ordering::Relaxed),
        s.refused_requests.load(Ordering::Relaxed),
        s.retried_5xx.load(Ordering::Relaxed),
    )
    .unwrap();
    writeln!(
        out,
        "  rejects stored {rejects}; window rows outside the token's binding {other_rows}"
    )
    .unwrap();
    writeln!(
        out,
        "  collector RSS: start {} MiB, max sampled {} MiB, VmHWM {} MiB (bound {bound_mib} MiB)",
        rss_start / 1024,
        rss_max / 1024,
        rss_hwm / 1024
    )
    .unwrap();
    writeln!(
        out,
        "  window rows == ground truth ({} windows): {matched}; roll-up gauge `{gauge}` {:.1} s after the load",
        truth.len(),
        caught_up_after.as_secs_f64()
    )
    .unwrap();
    writeln!(
        out,
        "  panics in the collector's log: {panics}; unexpected answers: {}",
        s.unexpected.load(Ordering::Relaxed)
    )
    .unwrap();
    let pass = matched
        && panics == 0
        && s.unexpected.load(Ordering::Relaxed) == 0
        && other_rows == 0
        && rss_hwm / 1024 <= bound_mib;
    if !matched {
        for (k, v) in &truth {
            if stored.get(k) != Some(v) {
                writeln!(
                    out,
                    "  mismatch {k:?}: sent {v:?}, stored {:?}",
                    stored.get(k)
                )
                .unwrap();
            }
        }
    }
    writeln!(out, "{}", if pass { "PASS" } else { "FAIL" }).unwrap();
    if !pass {
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        eprintln!(
            "collector log (last lines):\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
        std::process::exit(1);
    }
}
