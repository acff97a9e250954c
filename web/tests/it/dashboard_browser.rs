//! The dashboard in a real browser: Debian's headless chromium loads the page from the
//! real web app (in-process, on 127.0.0.1:0, over a seeded SQLite store), runs its
//! script against the REST API, and we read the rendered DOM (`--dump-dom`) and take
//! screenshots. The page marks what it rendered with `data-*` attributes, which the
//! assertions read, so they do not depend on layout or wording.
//!
//! Screenshots are written to `target/test-artifacts/dashboard/` (the path is printed).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use store::Message;
use support::*;
use tokio_util::sync::CancellationToken;
use web::AppState;

const CHROMIUM: &str = "/usr/bin/chromium";
/// Whole chromium run, start to exit; a cold start on a busy 2-core machine takes a
/// few seconds.
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(90);

/// The topic with the loss, and the healthy ones.
const LOSSY: &str = "orders";
const HEALTHY: [&str; 3] = ["clicks", "inventory.updates", "payments"];

/// Window offsets (relative to the settled window `w`) of the marked windows of `orders`.
const DUPLICATION_AT: i64 = -5;
const NO_DATA_AT: i64 = -3;
const LOST: u64 = 37;
const DUPLICATED: u64 = 12;
/// Messages of the loss window that only had an observation time (shown beside the
/// verdict in the Untimed column, never compared), upstream and downstream.
const UNTIMED: (u64, u64) = (5, 3);

/// Messages `orders` produced in window `w + i * WINDOW`: varying, so the chart has a
/// shape.
fn produced(i: i64) -> u64 {
    1200 + ((i * 37).rem_euclid(11) as u64) * 40
}

/// An increment of `count` messages at `tier` in dc1 whose latencies look like a
/// pipeline's: tens of milliseconds at the producer, up to seconds after replication.
fn observed(topic: &str, tier: &str, start: i64, count: u64, checksum: u64) -> Message {
    let mut m = increment(topic, tier, "dc1", start, count, checksum);
    if let store::AuditBody::Increment(inc) = &mut m.body {
        // Bucket i holds latencies of about 1.02^i ms: 105 ≈ 8 ms, 151 ≈ 20 ms,
        // 207 ≈ 60 ms, 279 ≈ 250 ms, 331 ≈ 700 ms, 379 ≈ 1.8 s.
        let (buckets, max_ms) = if tier == "producer" {
            ([105, 151, 207], 62)
        } else {
            ([279, 331, 379], 1850)
        };
        let half = count / 2;
        let most = count * 45 / 100;
        inc.stats.latency = store::LatencyHistogram::from_buckets(
            0,
            0,
            max_ms,
            [
                (buckets[0], half),
                (buckets[1], most),
                (buckets[2], count - half - most),
            ],
        )
        .unwrap();
    }
    m
}

struct Seeded {
    /// The settled window of `orders` with the loss.
    loss_window: i64,
    duplication_window: i64,
    no_data_window: i64,
    /// Windows in which both tiers of `orders` reported.
    orders_windows: usize,
}

/// Six hours of ten-minute windows up to the last closed one, producer → regional:
/// `orders` loses 37 messages in the settled window `w` (2 h ago), has 12 duplicates
/// five windows earlier and no data at all three windows earlier; the other topics
/// are equal at both tiers. Every regional auditor has caught up.
async fn seed(state: &AppState) -> Seeded {
    let w = settled_window();
    let last_closed = (now_ms() / WINDOW) * WINDOW - WINDOW;
    let mut messages = Vec::new();
    let mut orders_windows = 0;
    // From the second window of the dashboard's default range (the last 6 h), so that
    // every seeded window is on the chart even if a window boundary passes meanwhile.
    let mut i = ((now_ms() - 6 * 60 * MIN).div_euclid(WINDOW) * WINDOW + 2 * WINDOW - w) / WINDOW;
    while w + i * WINDOW <= last_closed {
        let start = w + i * WINDOW;
        let base = produced(i);
        if i != NO_DATA_AT {
            let (regional, regional_sum) = match i {
                0 => (base - LOST, base - LOST),
                DUPLICATION_AT => (base + DUPLICATED, base + DUPLICATED),
                _ => (base, base),
            };
            let mut up = observed(LOSSY, "producer", start, base, base);
            let mut down = observed(LOSSY, "regional", start, regional, regional_sum);
            if i == 0 {
                for (m, n) in [(&mut up, UNTIMED.0), (&mut down, UNTIMED.1)] {
                    if let store::AuditBody::Increment(inc) = &mut m.body {
                        inc.stats.observation_time_count = n;
                    }
                }
            }
            messages.push(up);
            messages.push(down);
            orders_windows += 1;
        }
        for (k, topic) in HEALTHY.iter().enumerate() {
            let n = 300 * (k as u64 + 1) + ((i * 13).rem_euclid(7) as u64) * 25;
            messages.push(observed(topic, "producer", start, n, n));
            messages.push(observed(topic, "regional", start, n, n));
        }
        i += 1;
    }
    for topic in std::iter::once(LOSSY).chain(HEALTHY) {
        messages.push(caught_up(topic, "regional", "dc1"));
    }
    write(&state.store, messages).await;
    state.evaluate(now_ms()).await.expect("evaluate");
    Seeded {
        loss_window: w,
        duplication_window: w + DUPLICATION_AT * WINDOW,
        no_data_window: w + NO_DATA_AT * WINDOW,
        orders_windows,
    }
}

struct Server {
    base: String,
    shutdown: CancellationToken,
    handle: tokio::task::JoinHandle<()>,
    _db: Db,
}

impl Server {
    async fn start(extra_config: &str) -> (Server, AppState) {
        Self::start_with(config(extra_config)).await
    }

    async fn start_with(config: web::Config) -> (Server, AppState) {
        let (store, db) = store(Backend::Sqlite).await;
        let state = AppState::new(config, store).expect("state");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let base = format!("http://{}", listener.local_addr().expect("local addr"));
        let shutdown = CancellationToken::new();
        let serving = web::serve(listener, state.clone(), shutdown.clone());
        let handle = tokio::spawn(async move {
            serving.await.expect("the web app serves until shutdown");
        });
        (
            Server {
                base,
                shutdown,
                handle,
                _db: db,
            },
            state,
        )
    }

    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.handle)
            .await
            .expect("the web app stops within 10 s")
            .expect("the web app task");
    }
}

fn require_chromium() {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: the dashboard browser test needs Debian's chromium \
         (`apt-get install chromium`; ./test.sh installs it)"
    );
}

fn artifacts_dir() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // A relative CARGO_TARGET_DIR is relative to the workspace, not to this test's
    // working directory (the crate's).
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(|d| workspace.join(d))
        .unwrap_or_else(|| workspace.join("target"));
    let dir = target.join("test-artifacts").join("dashboard");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    dir.canonicalize().unwrap_or(dir)
}

/// What one chromium run printed.
struct Run {
    stdout: String,
    stderr: String,
}

impl Run {
    /// Script errors and console output, for failure messages.
    fn console(&self) -> String {
        self.stderr
            .lines()
            .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught") || l.contains("ERROR:"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Runs headless chromium on `url` with `mode` (`--dump-dom` or `--screenshot=...`)
/// in a fresh profile, bounded by [`CHROMIUM_TIMEOUT`]. Virtual time lets the page's
/// timers and fetches run to completion before the DOM is dumped or the screenshot
/// taken; the page's auto-refresh (30 s) lies beyond the budget.
fn chromium(url: &str, mode: &str, budget_ms: u64) -> Run {
    chromium_sized(url, mode, budget_ms, (1400, 1000))
}

fn chromium_sized(url: &str, mode: &str, budget_ms: u64, (width, height): (u32, u32)) -> Run {
    let profile = tempfile::tempdir().expect("chromium profile dir");
    let mut cmd = Command::new(CHROMIUM);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--disable-extensions",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        "--run-all-compositor-stages-before-draw",
        "--enable-logging=stderr",
        "--v=0",
    ])
    .arg(format!("--window-size={width},{height}"))
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .arg(format!("--virtual-time-budget={budget_ms}"))
    .arg(mode)
    .arg(url)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    // Its own process group, so a hung browser is killed with all its helpers.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("starting {CHROMIUM}: {e}"));
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output = match rx.recv_timeout(CHROMIUM_TIMEOUT) {
        Ok(output) => output.expect("waiting for chromium"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &format!("-{pid}")])
                .status();
            panic!("chromium did not finish {url} ({mode}) within {CHROMIUM_TIMEOUT:?}");
        }
    };
    let run = Run {
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    assert!(
        output.status.success(),
        "chromium {mode} {url} failed ({}):\n{}",
        output.status,
        run.stderr
    );
    run
}

/// The rendered DOM of `url` once the page says it is done (`<body data-state=...>`
/// other than `loading`). Virtual time normally covers the whole load; a slow machine
/// gets a few retries with a larger budget.
async fn rendered(url: &str) -> (String, Run) {
    let mut budget = 10_000;
    for _ in 0..4 {
        let u = url.to_string();
        let run = tokio::task::spawn_blocking(move || chromium(&u, "--dump-dom", budget))
            .await
            .expect("chromium thread");
        let dom = run.stdout.clone();
        if !body_tag(&dom).contains(r#"data-state="loading""#) {
            return (dom, run);
        }
        budget *= 2;
    }
    panic!("{url} was still loading after four attempts");
}

async fn screenshot(url: &str, file: &Path) {
    screenshot_sized(url, file, (1400, 1000)).await
}

/// A screenshot of the top `size` (width, height) of the page.
async fn screenshot_sized(url: &str, file: &Path, size: (u32, u32)) {
    let _ = std::fs::remove_file(file);
    let u = url.to_string();
    let mode = format!("--screenshot={}", file.display());
    let run = tokio::task::spawn_blocking(move || chromium_sized(&u, &mode, 10_000, size))
        .await
        .expect("chromium thread");
    let png = std::fs::read(file).unwrap_or_else(|e| {
        panic!(
            "no screenshot at {} ({e}); chromium said:\n{}",
            file.display(),
            run.stderr
        )
    });
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} is not a plausible screenshot ({} bytes)",
        file.display(),
        png.len()
    );
    println!("screenshot: {}", file.display());
}

/// Opening tags of element `name` (`tr` for `<tr ...>`) that contain every one of
/// `needles`, without the angle brackets.
fn tags<'a>(dom: &'a str, name: &str, needles: &[&str]) -> Vec<&'a str> {
    dom.split('<')
        .filter_map(|t| t.split('>').next())
        .filter(|t| {
            t.strip_prefix(name)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(' '))
        })
        .filter(|t| needles.iter().all(|n| t.contains(n)))
        .collect()
}

fn body_tag(dom: &str) -> &str {
    tags(dom, "body", &[]).into_iter().next().unwrap_or("")
}

fn assert_ready(dom: &str, run: &Run, what: &str) {
    assert!(
        body_tag(dom).contains(r#"data-state="ready""#),
        "{what}: the page did not render (body: <{}>); console:\n{}",
        body_tag(dom),
        run.console()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_renders_topics_chart_and_highlighted_loss() {
    require_chromium();
    let (server, state) = Server::start("").await;
    let seeded = seed(&state).await;
    let dir = artifacts_dir();
    let base = &server.base;

    // Topic list: every topic with its worst verdict; the lossy one first.
    let (dom, run) = rendered(&format!("{base}/")).await;
    assert_ready(&dom, &run, "topic list");
    let rows = tags(&dom, "tr", &["data-topic="]);
    let order: Vec<&str> = rows
        .iter()
        .filter_map(|t| t.split(r#"data-topic=""#).nth(1)?.split('"').next())
        .collect();
    assert_eq!(
        order,
        vec![LOSSY, "clicks", "inventory.updates", "payments"],
        "topic rows, worst first; console:\n{}",
        run.console()
    );
    assert_eq!(
        tags(
            &dom,
            "tr",
            &[r#"data-topic="orders""#, r#"data-health="loss""#]
        )
        .len(),
        1,
        "orders is listed with health loss"
    );
    for topic in HEALTHY {
        assert_eq!(
            tags(
                &dom,
                "tr",
                &[&format!(r#"data-topic="{topic}""#), r#"data-health="ok""#]
            )
            .len(),
            1,
            "{topic} is listed as ok"
        );
    }
    screenshot(&format!("{base}/"), &dir.join("topics.png")).await;

    // Topic page: a chart with a data point per tier and window, the loss band on the
    // settled window, the duplication band, the window without data, and the loss in
    // the verdict table.
    let topic_url = format!("{base}/#/topic/{LOSSY}");
    let (dom, run) = rendered(&topic_url).await;
    assert_ready(&dom, &run, "topic page");
    assert_eq!(
        tags(&dom, "svg", &[r#"data-chart="counts""#]).len(),
        1,
        "one counts chart; console:\n{}",
        run.console()
    );
    for tier in ["producer", "regional"] {
        let points = tags(
            &dom,
            "circle",
            &["data-point", &format!(r#"data-tier="{tier}""#)],
        );
        assert_eq!(
            points.len(),
            seeded.orders_windows,
            "{tier}: one data point per window with data"
        );
    }
    let lost_points = tags(
        &dom,
        "circle",
        &[
            r#"data-tier="regional""#,
            &format!(r#"data-window="{}""#, seeded.loss_window),
        ],
    );
    assert_eq!(lost_points.len(), 1);
    assert!(
        lost_points[0].contains(&format!(r#"data-count="{}""#, produced(0) - LOST)),
        "the regional point of the loss window shows the stored count: {}",
        lost_points[0]
    );
    let loss_bands = tags(&dom, "rect", &[r#"data-band="loss""#]);
    assert_eq!(
        loss_bands.len(),
        1,
        "exactly one window is highlighted as loss: {loss_bands:?}"
    );
    assert!(
        loss_bands[0].contains(&format!(r#"data-window="{}""#, seeded.loss_window)),
        "the loss band is on the settled window {}: {}",
        seeded.loss_window,
        loss_bands[0]
    );
    assert_eq!(
        tags(
            &dom,
            "rect",
            &[
                r#"data-band="duplication""#,
                &format!(r#"data-window="{}""#, seeded.duplication_window)
            ]
        )
        .len(),
        1,
        "the duplication window is highlighted"
    );
    assert_eq!(
        tags(
            &dom,
            "rect",
            &[
                r#"data-gap="all""#,
                &format!(r#"data-window="{}""#, seeded.no_data_window)
            ]
        )
        .len(),
        1,
        "the window without any row is marked as a gap"
    );
    let loss_rows = tags(&dom, "tr", &[r#"data-verdict="loss""#]);
    assert!(
        loss_rows.iter().any(
            |t| t.contains(&format!(r#"data-window="{}""#, seeded.loss_window))
                && t.contains("anomalous")
        ),
        "the verdict table highlights the loss window: {loss_rows:?}"
    );
    assert_eq!(
        tags(&dom, "tr", &["data-latency-tier="]).len(),
        2,
        "latency percentiles for both tiers"
    );
    // The Untimed column: the loss window shows its observation-time counts of both
    // sides, every other window 0 / 0.
    let untimed: Vec<&str> = tags(&dom, "td", &["data-untimed="])
        .iter()
        .filter_map(|t| t.rsplit("data-untimed=").next())
        .collect();
    let expected_untimed = format!(r#""{}|{}""#, UNTIMED.0, UNTIMED.1);
    assert_eq!(
        untimed
            .iter()
            .filter(|t| t.contains(&expected_untimed))
            .count(),
        1,
        "one verdict row (the loss window's) shows its untimed counts: {untimed:?}"
    );
    assert_eq!(
        untimed.iter().filter(|t| !t.contains(r#""0|0""#)).count(),
        1,
        "no other window shows untimed counts: {untimed:?}"
    );
    screenshot(&topic_url, &dir.join("topic-orders.png")).await;

    // Anomalies page: the loss and the duplication of orders, and nothing else.
    let anomalies_url = format!("{base}/#/anomalies");
    let (dom, run) = rendered(&anomalies_url).await;
    assert_ready(&dom, &run, "anomalies page");
    let mut verdicts: Vec<&str> = tags(&dom, "tr", &["data-verdict="])
        .iter()
        .filter_map(|t| t.split(r#"data-verdict=""#).nth(1)?.split('"').next())
        .collect();
    verdicts.sort();
    assert_eq!(verdicts, vec!["duplication", "loss"], "anomaly rows");
    screenshot(&anomalies_url, &dir.join("anomalies.png")).await;

    println!("dashboard screenshots in {}", dir.display());
    server.stop().await;
}

/// The topic page marks, per downstream tier and datacenter, which windows are
/// complete (what `kafka-audit wait` gates on): the loss window is final and short,
/// the duplicated and the empty windows are complete, the newest are not final yet,
/// and the reference tier (producer) has no row of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_page_marks_complete_windows_per_tier() {
    require_chromium();
    let (server, state) = Server::start("").await;
    let seeded = seed(&state).await;
    let url = format!("{}/#/topic/{LOSSY}", server.base);
    let (dom, run) = rendered(&url).await;
    assert_ready(&dom, &run, "topic page");
    let rows = tags(&dom, "tr", &["data-completeness-tier="]);
    assert_eq!(
        attr(&rows, "data-completeness-tier"),
        vec!["regional"],
        "one row per downstream tier; console:\n{}",
        run.console()
    );
    assert!(rows[0].contains(r#"data-datacenter="dc1""#), "{}", rows[0]);
    assert!(
        rows[0].contains(r#"data-gate="incomplete""#),
        "a final window is short: {}",
        rows[0]
    );
    let cells = tags(&dom, "span", &["data-gate-window="]);
    let chart = tags(&dom, "svg", &[r#"data-chart="counts""#]);
    assert_eq!(
        attr(&chart, "data-windows"),
        vec![cells.len().to_string()],
        "one cell per window of the chart"
    );
    let cell = |w: i64| {
        let key = format!(r#"data-gate-window="{w}""#);
        *cells
            .iter()
            .find(|c| c.contains(&key))
            .unwrap_or_else(|| panic!("no cell for window {w}: {cells:?}"))
    };
    let loss = cell(seeded.loss_window);
    assert!(
        loss.contains(r#"data-status="incomplete""#) && loss.contains(r#"data-complete="false""#),
        "{loss}"
    );
    for w in [
        seeded.duplication_window,
        seeded.loss_window - WINDOW,
        seeded.loss_window + WINDOW,
    ] {
        let c = cell(w);
        assert!(
            c.contains(r#"data-status="complete""#) && c.contains(r#"data-complete="true""#),
            "window {w}: {c}"
        );
    }
    let empty = cell(seeded.no_data_window);
    assert!(
        empty.contains(r#"data-complete="true""#) && empty.contains(r#"data-no-data="true""#),
        "{empty}"
    );
    let newest = cells.last().unwrap();
    assert!(
        newest.contains(r#"data-status="pending""#) && newest.contains(r#"data-complete="false""#),
        "the open window is not complete: {newest}"
    );
    let complete = cells
        .iter()
        .filter(|c| c.contains(r#"data-complete="true""#))
        .count();
    assert!(
        complete >= seeded.orders_windows - 3,
        "every settled window but the loss is complete: {complete} of {}",
        cells.len()
    );
    screenshot(&url, &artifacts_dir().join("topic-completeness.png")).await;
    server.stop().await;
}

/// The value of `attr` in each opening tag.
fn attr<'a>(tags: &[&'a str], attr: &str) -> Vec<&'a str> {
    let key = format!("{attr}=\"");
    tags.iter()
        .filter_map(|t| t.split(key.as_str()).nth(1)?.split('"').next())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_links_restore_the_view_and_its_filters() {
    require_chromium();
    let (server, state) = Server::start("").await;
    let seeded = seed(&state).await;
    let base = &server.base;

    // Text and verdict filters of the topic list.
    let (dom, run) = rendered(&format!("{base}/#/?q=pay")).await;
    assert_ready(&dom, &run, "filtered topic list");
    assert_eq!(
        attr(&tags(&dom, "tr", &["data-topic="]), "data-topic"),
        vec!["payments"]
    );
    let (dom, run) = rendered(&format!("{base}/#/?verdict=loss")).await;
    assert_ready(&dom, &run, "topic list by verdict");
    assert_eq!(
        attr(&tags(&dom, "tr", &["data-topic="]), "data-topic"),
        vec![LOSSY]
    );

    // The anomaly kind of the anomalies page.
    let (dom, run) = rendered(&format!("{base}/#/anomalies?kind=duplication")).await;
    assert_ready(&dom, &run, "anomalies by kind");
    let rows = tags(&dom, "tr", &["data-verdict="]);
    assert_eq!(attr(&rows, "data-verdict"), vec!["duplication"]);
    assert_eq!(
        attr(&rows, "data-window"),
        vec![seeded.duplication_window.to_string()]
    );

    // An absolute range on the topic page: only the windows of that range are drawn,
    // and "anomalies only" keeps just the loss in the verdict table.
    let (from, to) = (seeded.loss_window - WINDOW, seeded.loss_window + 2 * WINDOW);
    let (dom, run) = rendered(&format!(
        "{base}/#/topic/{LOSSY}?from={from}&to={to}&only=1"
    ))
    .await;
    assert_ready(&dom, &run, "topic page with a pinned range");
    let windows: Vec<String> = (0..3).map(|i| (from + i * WINDOW).to_string()).collect();
    assert_eq!(
        attr(
            &tags(&dom, "circle", &[r#"data-tier="producer""#]),
            "data-window"
        ),
        windows,
        "one producer point per window of the pinned range"
    );
    let rows = tags(&dom, "tr", &["data-verdict="]);
    // Rows of the "anomalous windows" panel are clickable; the verdict table's are not.
    let in_table: Vec<&str> = rows
        .iter()
        .copied()
        .filter(|t| !t.contains("clickable"))
        .collect();
    assert_eq!(attr(&in_table, "data-verdict"), vec!["loss"], "{rows:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_is_open_and_asks_for_a_token_when_the_api_needs_one() {
    require_chromium();
    let (server, state) = Server::start(
        r#"
[auth]
tokens = [{ name = "sre", token = "s3cret-read-token-0123456789", scopes = ["read"] }]
"#,
    )
    .await;
    seed(&state).await;
    let (dom, run) = rendered(&format!("{}/", server.base)).await;
    // The page itself loads without a token; its data does not.
    assert!(
        body_tag(&dom).contains(r#"data-state="error""#),
        "the page reports the refused API call (body: <{}>); console:\n{}",
        body_tag(&dom),
        run.console()
    );
    let form = tags(&dom, "form", &[r#"id="auth""#]);
    assert_eq!(form.len(), 1, "the token form exists");
    assert!(
        !form[0].contains("hidden"),
        "the token form is shown: <{}>",
        form[0]
    );
    assert!(
        tags(&dom, "tr", &["data-topic="]).is_empty(),
        "no topic data without a token"
    );
    server.stop().await;
}

/// The demo's topology: 30-second windows judged 20 s after they end.
const SHORT: i64 = 30_000;

fn short_window_config() -> web::Config {
    let config: web::Config = toml::from_str(
        r#"
[topology]
window = "30s"
grace = "20s"
stall_after = "5m"
tiers = [
  { name = "producer", progress = false },
  { name = "regional" },
]
[[topology.edges]]
upstream = "producer"
downstream = "regional"
"#,
    )
    .expect("config parses");
    config.validate().expect("config is valid");
    config
}

/// `HH:MM:SS`, UTC, as the dashboard prints it.
fn clock_sec(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("a time")
        .format("%H:%M:%S")
        .to_string()
}

/// What a newcomer sees minutes after `kafka-audit demo` starts: 30-second windows,
/// data only in the last five minutes of the default six-hour range, one window in the
/// middle without data. The chart starts where the data starts (not a sliver at the
/// end of six hours), the hundreds of earlier windows nobody reported are not listed
/// as "0 / 0 ok complete", the window in the middle without data says so, and a
/// window's label shows seconds (09:53:00–09:53:30, not 09:53–09:53). A link with a
/// range of its own keeps that range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_topic_on_short_windows_starts_where_its_data_starts() {
    require_chromium();
    let (server, state) = Server::start_with(short_window_config()).await;
    let topic = "payments";
    let now = now_ms();
    // From the first window five minutes ago to the last closed one.
    let first = (now - 5 * MIN).div_euclid(SHORT) * SHORT;
    let last_closed = now.div_euclid(SHORT) * SHORT - SHORT;
    let gap = first + 4 * SHORT;
    let mut messages = Vec::new();
    let mut data_windows = 0;
    let mut w = first;
    while w <= last_closed {
        if w != gap {
            for tier in ["producer", "regional"] {
                let mut m = increment(topic, tier, "dc1", w, 500, 500);
                if let store::AuditBody::Increment(inc) = &mut m.body {
                    inc.window_end = w + SHORT;
                }
                messages.push(m);
            }
            data_windows += 1;
        }
        w += SHORT;
    }
    messages.push(caught_up(topic, "regional", "dc1"));
    write(&state.store, messages).await;
    state.evaluate(now_ms()).await.expect("evaluate");
    let base = &server.base;
    let url = format!("{base}/#/topic/{topic}");
    let (dom, run) = rendered(&url).await;
    assert_ready(&dom, &run, "topic page of a fresh topic");

    // The chart: from one window before the data (or ten windows before the end), not
    // the 720 windows of six hours.
    let chart = tags(&dom, "svg", &[r#"data-chart="counts""#]);
    let drawn: i64 = attr(&chart, "data-windows")[0].parse().expect("a count");
    let windows_to_now = (now_ms() - first).div_euclid(SHORT) + 1;
    assert!(
        drawn <= windows_to_now + 2 && drawn >= windows_to_now.min(10),
        "the chart draws {drawn} windows; data covers the last {windows_to_now}"
    );
    assert_eq!(
        attr(&tags(&dom, "span", &[r#"id="chart-fitted""#]), "data-from"),
        vec![(first - SHORT).to_string()],
        "the chart says it starts one window before the first data"
    );

    assert_eq!(
        tags(&dom, "circle", &[r#"data-tier="producer""#]).len(),
        data_windows,
        "a producer point per window with data"
    );

    // The verdict table starts where the data starts, and says how many windows it left out.
    let table_rows: Vec<&str> = tags(&dom, "tr", &["data-verdict=", "data-edge="])
        .into_iter()
        .filter(|t| !t.contains("clickable"))
        .collect();
    let starts: Vec<i64> = attr(&table_rows, "data-window")
        .iter()
        .map(|w| w.parse().expect("a window start"))
        .collect();
    assert_eq!(
        starts.iter().min().copied(),
        Some(first),
        "the oldest row of the verdict table is the first window with data; rows: {}",
        starts.len()
    );
    let left_out: i64 = attr(
        &tags(&dom, "span", &[r#"id="verdicts-nodata""#]),
        "data-windows",
    )
    .first()
    .unwrap_or_else(|| {
        panic!(
            "the table says it left windows out; console:\n{}",
            run.console()
        )
    })
    .parse()
    .expect("a count");
    assert!(
        left_out >= 6 * 60 * 2 - 12,
        "about six hours of 30 s windows before the data are left out: {left_out}"
    );

    // The window in the middle without data: "no data", not a healthy "ok".
    let gap_rows = tags(
        &dom,
        "tr",
        &[&format!(r#"data-window="{gap}""#), "data-edge="],
    );
    assert_eq!(gap_rows.len(), 1, "{gap_rows:?}");
    assert!(
        gap_rows[0].contains("data-nodata"),
        "the window without data is marked as such: <{}>",
        gap_rows[0]
    );
    assert!(dom.contains(r#"data-verdict-badge="nodata""#));
    assert_eq!(
        tags(&dom, "tr", &["data-nodata"]).len(),
        1,
        "only the gap is a no-data row"
    );

    // Window labels with seconds.
    let label = format!(
        "{} {}–{}",
        chrono::DateTime::from_timestamp_millis(first)
            .expect("a time")
            .format("%m-%d"),
        clock_sec(first),
        clock_sec(first + SHORT)
    );
    assert!(
        dom.contains(&label),
        "the first window is labelled {label:?} in the verdict table"
    );
    let dir = artifacts_dir();
    screenshot_sized(&url, &dir.join("topic-fresh-30s.png"), (1400, 1800)).await;

    // A range chosen in the link is kept whole: 1 h of 30 s windows.
    let (dom, run) = rendered(&format!("{url}?range=1h")).await;
    assert_ready(&dom, &run, "topic page with a chosen range");
    let drawn: i64 = attr(
        &tags(&dom, "svg", &[r#"data-chart="counts""#]),
        "data-windows",
    )[0]
    .parse()
    .expect("a count");
    assert!((120..=121).contains(&drawn), "1 h of 30 s windows: {drawn}");
    assert!(tags(&dom, "span", &[r#"id="chart-fitted""#]).is_empty());
    server.stop().await;
}
