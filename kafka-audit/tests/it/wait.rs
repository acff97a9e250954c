//! `kafka-audit wait` as a process against a running `serve` (the real web app
//! in-process on 127.0.0.1:0, over a SQLite store, with a read token): exit 0 once late
//! data completes the last window, 1 on timeout, 2 on a final loss, 3 on usage and
//! connection errors; one progress line per poll.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::now_ms;
use store::{
    AuditBody, Batch, Deployment, Ingest, LatencyHistogram, Message, OffsetSpan, PartitionProgress,
    Store,
};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const MIN: i64 = 60_000;
const WINDOW: i64 = 10 * MIN;
const GRACE: i64 = 20 * MIN;
const TOKEN: &str = "airflow-reader-token-0123456789abcdef";
/// Bound on any one `wait` run of these tests (the machine is shared and slow).
const RUN_BOUND: Duration = Duration::from_secs(90);

const CONFIG: &str = r#"
[topology]
window = "10m"
grace = "20m"
stall_after = "30m"
completeness = 0.999
tiers = [
  { name = "producer", progress = false },
  { name = "regional" },
]
[[topology.edges]]
upstream = "producer"
downstream = "regional"

[auth]
tokens = [{ name = "airflow", token = "airflow-reader-token-0123456789abcdef", scopes = ["read"] }]
"#;

fn increment(topic: &str, tier: &str, window_start: i64, count: u64) -> Message {
    testkit::increment(topic, window_start, window_start + WINDOW, count)
        .tier(tier)
        .emitted_at(now_ms())
        .latency(LatencyHistogram::from_buckets(0, 0, 50, [(190, count)]).unwrap())
        .offsets(vec![OffsetSpan {
            partition: 0,
            min: 0,
            max: count as i64 - 1,
            max_record_time: None,
        }])
        .build()
}

/// The regional auditor has read `topic` up to `record_time` (lag 0 only when it has
/// caught up to now).
fn progress(topic: &str, record_time: i64) -> Message {
    let caught_up = record_time >= now_ms();
    Message {
        version: audit_lib::AUDIT_MESSAGE_VERSION,
        uuid: Uuid::new_v4(),
        topic: topic.into(),
        tier: "regional".into(),
        datacenter: "dc1".into(),
        host: "regional-0".into(),
        emitted_at: now_ms(),
        body: AuditBody::Progress(vec![PartitionProgress {
            partition: 0,
            next_offset: 1000,
            record_time: Some(record_time),
            lag: Some(if caught_up { 0 } else { 3 }),
            ..Default::default()
        }]),
    }
}

async fn write(store: &Store, messages: Vec<Message>) {
    let batch = Batch {
        messages,
        rejects: vec![],
        received_at_ms: now_ms(),
    };
    store.write_batch(&batch).await.expect("seed batch");
}

/// Three settled windows of `topic`: 100 produced in each, regional 100, 100 and
/// `last`. With `behind`, the regional auditor has not read past the last window's
/// end + grace (so it is pending); otherwise it has caught up (so it is final).
/// Returns the first window's start.
async fn seed(store: &Store, topic: &str, last: u64, behind: bool) -> i64 {
    let w2 = (now_ms() - 120 * MIN).div_euclid(WINDOW) * WINDOW;
    let w0 = w2 - 2 * WINDOW;
    let mut messages = Vec::new();
    for (i, regional) in [100, 100, last].into_iter().enumerate() {
        let w = w0 + i as i64 * WINDOW;
        messages.push(increment(topic, "producer", w, 100));
        messages.push(increment(topic, "regional", w, regional));
    }
    messages.push(progress(
        topic,
        if behind {
            w2 + WINDOW + GRACE - 1
        } else {
            now_ms() + 1000
        },
    ));
    write(store, messages).await;
    w0
}

struct Server {
    url: String,
    store: Store,
    shutdown: CancellationToken,
    handle: tokio::task::JoinHandle<()>,
    dir: tempfile::TempDir,
}

async fn start() -> Server {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::connect(&format!("sqlite:{}", dir.path().join("a.db").display()))
        .await
        .expect("open sqlite");
    store.migrate().await.expect("migrate");
    let config: web::Config = toml::from_str(CONFIG).expect("config");
    let state = web::AppState::new(config, store.clone()).expect("state");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    let serving = web::serve(listener, state, shutdown.clone());
    let handle = tokio::spawn(async move { serving.await.expect("serves") });
    std::fs::write(dir.path().join("token"), format!("{TOKEN}\n")).unwrap();
    Server {
        url,
        store,
        shutdown,
        handle,
        dir,
    }
}

impl Server {
    fn token_file(&self) -> String {
        self.dir.path().join("token").display().to_string()
    }

    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.handle)
            .await
            .expect("server stops")
            .unwrap();
    }
}

/// A running `kafka-audit wait` whose stdout lines arrive on a channel.
struct Wait {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// Lines already taken with `next_line`.
    seen: Vec<String>,
    stderr: std::thread::JoinHandle<String>,
}

fn spawn_wait(args: &[String]) -> Wait {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kafka-audit"))
        .arg("wait")
        .args(args)
        .env_remove("KAFKA_AUDIT_TOKEN_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kafka-audit wait");
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    Wait {
        child,
        lines,
        seen: Vec::new(),
        stderr,
    }
}

impl Wait {
    /// The next stdout line, within `within`.
    async fn next_line(&mut self, within: Duration) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            match self.lines.try_recv() {
                Ok(l) => {
                    self.seen.push(l.clone());
                    return Some(l);
                }
                Err(mpsc::TryRecvError::Disconnected) => return None,
                Err(mpsc::TryRecvError::Empty) if Instant::now() >= deadline => return None,
                Err(mpsc::TryRecvError::Empty) => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
            }
        }
    }

    /// Exit code, every stdout line and stderr, bounded by [`RUN_BOUND`].
    async fn finish(mut self) -> (i32, Vec<String>, String) {
        let deadline = Instant::now() + RUN_BOUND;
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                break s;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                panic!("kafka-audit wait did not exit within {RUN_BOUND:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        while self.next_line(Duration::from_secs(5)).await.is_some() {}
        let lines = std::mem::take(&mut self.seen);
        let stderr = self.stderr.join().unwrap();
        let code = status.code().expect("exit code");
        // Shown with --nocapture: what an Airflow or cron log would hold.
        println!("--- exit {code}\n{}\n{stderr}", lines.join("\n"));
        (code, lines, stderr)
    }
}

fn args(server: &Server, topic: &str, from: i64, extra: &[&str]) -> Vec<String> {
    let from_rfc3339 = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + Duration::from_millis(from as u64),
    )
    .to_string();
    let mut a: Vec<String> = [
        "--server",
        &server.url,
        "--token-file",
        &server.token_file(),
        "--topic",
        topic,
        "--tier",
        "regional",
        "--datacenter",
        "dc1",
        "--from",
        &from_rfc3339,
        "--to",
        &(from + 3 * WINDOW).to_string(),
        "--poll-interval",
        "200ms",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_exits_0_once_late_data_completes_the_last_window() {
    let server = start().await;
    let w0 = seed(&server.store, "orders", 90, true).await;
    let mut wait = spawn_wait(&args(&server, "orders", w0, &["--timeout", "80s"]));
    // It polls and reports the pending window before anything changes.
    let first = wait
        .next_line(Duration::from_secs(30))
        .await
        .expect("a progress line");
    assert!(
        first.contains("orders regional/dc1")
            && first.contains("2/3 windows complete")
            && first.contains("1 pending")
            && first.contains("ratio 96.6667%")
            && first.contains("threshold 99.9000%"),
        "{first}"
    );
    // The late 10 messages of the last window arrive, and the auditor catches up.
    write(
        &server.store,
        vec![
            increment("orders", "regional", w0 + 2 * WINDOW, 10),
            progress("orders", now_ms() + 1000),
        ],
    )
    .await;
    let (code, lines, stderr) = wait.finish().await;
    assert_eq!(code, 0, "stdout: {lines:#?}\nstderr: {stderr}");
    assert!(
        lines.len() >= 2,
        "a progress line, then the result: {lines:#?}"
    );
    let last = lines.last().expect("a final line");
    assert!(
        last.contains("complete:")
            && last.contains("3/3 windows complete")
            && last.contains("ratio 100.0000%"),
        "{last}"
    );
    // One line per poll: every line before the last is a progress line.
    assert!(
        lines[..lines.len() - 1]
            .iter()
            .all(|l| l.contains("waiting:") && l.contains("2/3 windows complete")),
        "{lines:#?}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_exits_1_on_timeout_and_2_on_a_final_loss() {
    let server = start().await;
    let w0 = seed(&server.store, "orders", 90, true).await;
    let started = Instant::now();
    // Long enough for a first poll of a debug build on a loaded machine.
    let (code, lines, stderr) = spawn_wait(&args(&server, "orders", w0, &["--timeout", "3s"]))
        .finish()
        .await;
    assert_eq!(code, 1, "stdout: {lines:#?}\nstderr: {stderr}");
    assert!(started.elapsed() >= Duration::from_secs(3));
    assert!(lines.len() >= 2, "polls until the timeout: {lines:#?}");
    assert!(lines[0].contains("waiting:") && lines[0].contains("2/3 windows complete"));
    let last = lines.last().unwrap();
    assert!(
        last.contains("timeout:")
            && last.contains("not complete after 3s")
            && last.contains("2/3 windows complete"),
        "{last}"
    );

    // The last window is final at 90 %: a loss, reported at once.
    let w0 = seed(&server.store, "payments", 90, false).await;
    let (code, lines, stderr) = spawn_wait(&args(&server, "payments", w0, &["--timeout", "60s"]))
        .finish()
        .await;
    assert_eq!(code, 2, "stdout: {lines:#?}\nstderr: {stderr}");
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let window = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + Duration::from_millis((w0 + 2 * WINDOW) as u64),
    )
    .to_string();
    assert!(
        lines[0].contains("incomplete:")
            && lines[0].contains(&format!("window {window} is final at 90.0000% (90 of 100)"))
            && lines[0].contains("2/3 windows complete"),
        "{}",
        lines[0]
    );
    // A looser threshold accepts it.
    let (code, lines, _) = spawn_wait(&args(
        &server,
        "payments",
        w0,
        &["--timeout", "60s", "--threshold", "0.9"],
    ))
    .finish()
    .await;
    assert_eq!(code, 0, "{lines:#?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_exits_3_on_usage_and_connection_errors() {
    let server = start().await;
    let w0 = seed(&server.store, "orders", 100, false).await;

    // The server refuses the parameters: its message, at once.
    let mut a = args(&server, "orders", w0, &[]);
    let tier = a.iter().position(|x| x == "regional").unwrap();
    a[tier] = "producer".into();
    let (code, lines, stderr) = spawn_wait(&a).finish().await;
    assert_eq!(code, 3, "stdout: {lines:#?}\nstderr: {stderr}");
    assert!(
        stderr.contains("400") && stderr.contains("has no upstream edge"),
        "{stderr}"
    );

    // No token.
    let mut a = args(&server, "orders", w0, &[]);
    let i = a.iter().position(|x| x == "--token-file").unwrap();
    a.drain(i..i + 2);
    let (code, _, stderr) = spawn_wait(&a).finish().await;
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("401"), "{stderr}");

    // A token file that does not exist.
    let mut a = args(&server, "orders", w0, &[]);
    a[i + 1] = "/nonexistent/token".into();
    let (code, _, stderr) = spawn_wait(&a).finish().await;
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("/nonexistent/token"), "{stderr}");

    // Bad usage (clap would exit 2, which means loss here).
    let (code, _, stderr) = spawn_wait(&args(&server, "orders", w0, &["--timeout", "soon"]))
        .finish()
        .await;
    assert_eq!(code, 3, "{stderr}");
    let (code, _, stderr) = spawn_wait(&["--topic".to_string(), "x".to_string()])
        .finish()
        .await;
    assert_eq!(code, 3, "{stderr}");

    // Nobody listens: a few retries, then 3.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", free.local_addr().unwrap());
    drop(free);
    let mut a = args(&server, "orders", w0, &["--max-failures", "2"]);
    a[1] = dead.clone();
    let (code, lines, stderr) = spawn_wait(&a).finish().await;
    assert_eq!(code, 3, "stdout: {lines:#?}\nstderr: {stderr}");
    assert!(stderr.contains(&dead), "{stderr}");
    assert_eq!(
        stderr.matches("poll failed").count(),
        2,
        "one line per failed attempt: {stderr}"
    );

    // And the happy case of this seed: complete at the first poll.
    let (code, lines, _) = spawn_wait(&args(&server, "orders", w0, &[])).finish().await;
    assert_eq!(code, 0, "{lines:#?}");
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(
        lines[0].contains("complete: orders regional/dc1"),
        "{}",
        lines[0]
    );
    server.stop().await;
}
