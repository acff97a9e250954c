//! `kafka-audit wait`: the completeness gate for a downstream job. Polls
//! `GET /api/v1/topics/{topic}/completeness` of a running `serve`, with backoff, until
//! every window of the range is complete at the tier, and exits with a code a
//! scheduler can act on. One line per poll on stdout, so an Airflow or cron log shows
//! how far it got; errors go to stderr.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use web::completeness::{CompletenessResponse as Completeness, GateStatus};

/// Every window of the range is complete.
pub const EXIT_COMPLETE: i32 = 0;
/// `--timeout` passed with windows still pending.
pub const EXIT_TIMEOUT: i32 = 1;
/// A window of the range is final and below the threshold: data is missing.
pub const EXIT_INCOMPLETE: i32 = 2;
/// Usage error, a request the server refused, or the server unreachable.
pub const EXIT_ERROR: i32 = 3;

#[derive(Args, Debug)]
#[command(
    after_help = "Exit codes: 0 every window of the range is complete; 1 --timeout \
passed with windows not final yet; 2 a window is final and below the threshold (data \
missing); 3 usage error, a request the server refused, or the server unreachable \
--max-failures polls in a row."
)]
pub struct WaitArgs {
    /// Base URL of `kafka-audit serve`, e.g. http://kafka-audit.internal:8080
    #[arg(long, env = "KAFKA_AUDIT_SERVER")]
    pub server: String,
    /// File holding a bearer token with the `read` scope (when the API needs one).
    #[arg(long, env = "KAFKA_AUDIT_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    #[arg(long)]
    pub topic: String,
    /// The tier the job reads (e.g. `aggregate`); its reference is its upstream edge.
    #[arg(long)]
    pub tier: String,
    /// The tier's datacenter (for a many-to-one edge, the aggregate one).
    #[arg(long)]
    pub datacenter: String,
    /// Start of the range: RFC 3339 (2026-11-30T10:00:00Z) or epoch milliseconds.
    #[arg(long)]
    pub from: String,
    /// End of the range (exclusive), as `--from`.
    #[arg(long)]
    pub to: String,
    /// Fraction of the reference count that makes a final window complete (default:
    /// the server's `[topology] completeness`).
    #[arg(long)]
    pub threshold: Option<f64>,
    /// The reference tier, only needed when the tier is downstream of several edges.
    #[arg(long)]
    pub upstream: Option<String>,
    /// Give up (exit 1) when the range is not complete after this long.
    #[arg(long, default_value = "2h", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// First pause between polls; it grows by half at each poll that brings no newly
    /// complete window, up to `--max-poll-interval`.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub poll_interval: Duration,
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub max_poll_interval: Duration,
    /// Give up (exit 3) after this many polls in a row failed (server unreachable or
    /// answering 5xx).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_failures: u32,
}

enum PollError {
    /// Worth another poll: the server is unreachable, restarting or overloaded.
    Transient(String),
    /// Will not get better by asking again.
    Fatal(String),
}

fn time(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(t).to_string()
}

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

fn percent(r: Option<f64>) -> String {
    r.map_or_else(|| "n/a".to_string(), |r| format!("{:.4}%", r * 100.0))
}

pub fn run(args: WaitArgs) -> anyhow::Result<()> {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => exit(EXIT_ERROR, &format!("error: starting the runtime: {e}")),
    };
    let code = rt.block_on(wait(args));
    std::process::exit(code)
}

fn exit(code: i32, message: &str) -> ! {
    eprintln!("{message}");
    std::process::exit(code)
}

fn request_url(args: &WaitArgs) -> Result<reqwest::Url, String> {
    let mut url = reqwest::Url::parse(&args.server)
        .map_err(|e| format!("--server {:?}: {e}", args.server))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("--server {:?}: not an http(s) URL", args.server));
    }
    url.path_segments_mut()
        .map_err(|()| format!("--server {:?}: not a base URL", args.server))?
        .pop_if_empty()
        .extend(["api", "v1", "topics", &args.topic, "completeness"]);
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("tier", &args.tier)
            .append_pair("datacenter", &args.datacenter)
            .append_pair("from", &args.from)
            .append_pair("to", &args.to);
        if let Some(t) = args.threshold {
            q.append_pair("threshold", &t.to_string());
        }
        if let Some(u) = &args.upstream {
            q.append_pair("upstream", u);
        }
    }
    Ok(url)
}

fn read_token(path: &PathBuf) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("reading the token file {}: {e}", path.display()))?;
    let token = text.trim().to_string();
    if token.is_empty() {
        return Err(format!("the token file {} is empty", path.display()));
    }
    Ok(token)
}

async fn poll(
    client: &reqwest::Client,
    url: &reqwest::Url,
    token: Option<&str>,
) -> Result<Completeness, PollError> {
    let mut req = client.get(url.clone());
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let response = req.send().await.map_err(|e| {
        PollError::Transient(format!(
            "GET {}: {}",
            without_query(url),
            chain(&e.without_url())
        ))
    })?;
    let status = response.status();
    let body = response
        .text()
        .await
        .map_err(|e| PollError::Transient(format!("reading the answer: {e}")))?;
    if !status.is_success() {
        let message = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
            .unwrap_or_else(|| body.chars().take(200).collect());
        let text = format!("the server answered {status}: {message}");
        return Err(if status.is_server_error() {
            PollError::Transient(text)
        } else {
            PollError::Fatal(text)
        });
    }
    serde_json::from_str(&body).map_err(|e| {
        PollError::Fatal(format!(
            "the answer is not a completeness document ({e}); is --server a kafka-audit serve?"
        ))
    })
}

/// An error with its causes ("connection refused" is a cause of reqwest's error).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The URL without the query, for messages.
fn without_query(url: &reqwest::Url) -> String {
    let mut u = url.clone();
    u.set_query(None);
    u.to_string()
}

async fn wait(args: WaitArgs) -> i32 {
    let url = match request_url(&args) {
        Ok(u) => u,
        Err(e) => exit(EXIT_ERROR, &format!("error: {e}")),
    };
    let token = match args.token_file.as_ref().map(read_token).transpose() {
        Ok(t) => t,
        Err(e) => exit(EXIT_ERROR, &format!("error: {e}")),
    };
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
    {
        Ok(c) => c,
        Err(e) => exit(EXIT_ERROR, &format!("error: building the HTTP client: {e}")),
    };
    let what = format!("{} {}/{}", args.topic, args.tier, args.datacenter);
    let deadline = Instant::now() + args.timeout;
    let mut interval = args.poll_interval;
    let mut failures = 0;
    let mut complete_before = None;
    loop {
        match poll(&client, &url, token.as_deref()).await {
            Ok(c) => {
                failures = 0;
                let head = format!(
                    "{what} [{}, {}) vs {}/{}",
                    time(c.from),
                    time(c.to),
                    c.reference_tier,
                    c.reference_datacenters.join("+")
                );
                let counts = format!(
                    "{}/{} windows complete, {} pending, ratio {} (threshold {})",
                    c.windows_complete,
                    c.windows_total,
                    c.windows_pending,
                    percent(c.ratio),
                    percent(Some(c.threshold))
                );
                match c.status {
                    GateStatus::Complete => {
                        println!("{} complete: {head}: {counts}", now());
                        return EXIT_COMPLETE;
                    }
                    GateStatus::Incomplete => {
                        let w = c
                            .windows
                            .iter()
                            .find(|w| w.status == GateStatus::Incomplete);
                        let which = w.map_or_else(String::new, |w| {
                            format!(
                                "window {} is final at {} ({} of {}), below the threshold: data is missing; ",
                                time(w.window_start),
                                percent(w.ratio),
                                w.observed,
                                w.reference
                            )
                        });
                        println!("{} incomplete: {head}: {which}{counts}", now());
                        return EXIT_INCOMPLETE;
                    }
                    GateStatus::Pending => {}
                }
                if Instant::now() >= deadline {
                    println!(
                        "{} timeout: {head}: not complete after {}: {counts}",
                        now(),
                        humantime::format_duration(args.timeout)
                    );
                    return EXIT_TIMEOUT;
                }
                // Backoff, restarted whenever a window completes.
                if complete_before == Some(c.windows_complete) {
                    interval = interval.mul_f64(1.5).min(args.max_poll_interval);
                } else {
                    interval = args.poll_interval;
                }
                complete_before = Some(c.windows_complete);
                let next = c
                    .windows
                    .iter()
                    .find(|w| w.status == GateStatus::Pending)
                    .map(|w| {
                        format!(
                            "; first pending {} ({}: {})",
                            time(w.window_start),
                            w.lifecycle.as_str(),
                            w.reason
                        )
                    })
                    .unwrap_or_default();
                println!(
                    "{} waiting: {head}: {counts}{next}; next poll in {}",
                    now(),
                    humantime::format_duration(round(
                        interval.min(deadline.saturating_duration_since(Instant::now()))
                    ))
                );
            }
            Err(PollError::Fatal(e)) => exit(EXIT_ERROR, &format!("error: {e}")),
            Err(PollError::Transient(e)) => {
                failures += 1;
                eprintln!(
                    "{} poll failed ({failures}/{}): {e}",
                    now(),
                    args.max_failures
                );
                if failures >= args.max_failures {
                    exit(
                        EXIT_ERROR,
                        &format!("error: giving up after {failures} failed polls in a row"),
                    );
                }
                if Instant::now() >= deadline {
                    println!(
                        "{} timeout: {what}: not complete after {} (the last poll failed)",
                        now(),
                        humantime::format_duration(args.timeout)
                    );
                    return EXIT_TIMEOUT;
                }
            }
        }
        tokio::time::sleep(interval.min(deadline.saturating_duration_since(Instant::now()))).await;
    }
}

/// Whole milliseconds, so the log says `450ms` rather than `450ms 123us 456ns`.
fn round(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}
