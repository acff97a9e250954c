//! The audit service under measurement: a child process of this binary (`serve`), its
//! configuration, and its rate and CPU read from its /metrics and /proc.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::cpu::{vm_hwm_kb, Span};
use crate::unique;

pub(crate) fn bench_config(
    bootstrap: &str,
    topics: Vec<String>,
    regex: Option<String>,
    port: u16,
    dir: &str,
) -> String {
    let topics_toml: Vec<String> = topics.iter().map(|t| format!("{t:?}")).collect();
    let regex_toml = regex
        .map(|r| format!("topic_regex = [{r:?}]"))
        .unwrap_or_default();
    format!(
        r#"
[kafka]
bootstrap_servers = "{bootstrap}"
{extra}
[audit]
instance_id = "{id}"
group_id = "{group}"
topics = [{topics}]
{regex_toml}
audit_topic = "{audit}"
audit_topic_replication = 1
audit_topic_partitions = 3
report_interval = "5s"
wal_dir = "{dir}/wal"
[audit.event_time]
window_size = "1m"
[ops]
listen = "127.0.0.1:{port}"
[log]
level = "warn"
"#,
        id = unique("bench"),
        group = unique("bench-group"),
        topics = topics_toml.join(","),
        audit = unique("bench-audit"),
        extra = std::env::var("BENCH_KAFKA_EXTRA")
            .unwrap_or_default()
            .replace(';', "\n"),
    )
}

pub(crate) fn spawn_service(config_text: &str, dir: &str) -> anyhow::Result<Child> {
    spawn_service_of(&std::env::current_exe()?, config_text, dir)
}

pub(crate) fn spawn_service_of(
    exe: &std::path::Path,
    config_text: &str,
    dir: &str,
) -> anyhow::Result<Child> {
    let path = format!("{dir}/{}.toml", unique("cfg"));
    std::fs::write(&path, config_text)?;
    Ok(Command::new(exe)
        .args(["serve", &path])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?)
}

pub(crate) fn scrape(port: u16, metric: &str) -> Option<u64> {
    scrape_f64(port, metric).map(|v| v as u64)
}

pub(crate) fn scrape_f64(port: u16, metric: &str) -> Option<f64> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    body.lines()
        .find(|l| l.starts_with(metric))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse::<f64>().ok())
}

pub(crate) fn stop(mut child: Child) -> anyhow::Result<()> {
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()?;
    let st = child.wait()?;
    if !st.success() {
        bail!("audit service exited with {st}");
    }
    Ok(())
}

/// Rate of the audit service child: messages between the first and last observed
/// count ÷ time between them.
pub(crate) struct Measured {
    pub(crate) rate: f64,
    /// Measured process's CPU µs per message over the span.
    pub(crate) cpu_us: f64,
    /// Machine busy % over the span.
    pub(crate) busy: f64,
}

pub(crate) fn measure_service(
    label: &'static str,
    port: u16,
    child: &mut Child,
    n: u64,
) -> anyhow::Result<(Measured, u64)> {
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut first: Option<(Instant, u64, Span)> = None;
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("audit service exited early: {status}");
        }
        let c = scrape(port, "kafka_audit_consumed_messages_total").unwrap_or(0);
        let now = Instant::now();
        if c >= n / 10 && first.is_none() {
            first = Some((now, c, Span::start(label, child.id())));
        }
        if c >= n {
            let (t0, c0, span) = first.unwrap();
            let (cpu_us, busy) = span.end(c - c0);
            let hwm = vm_hwm_kb(child.id()).unwrap_or(0);
            let rate = (c - c0) as f64 / (now - t0).as_secs_f64();
            eprintln!(
                "  service: {} publishes, {:.3} s publishing in all",
                scrape(port, "kafka_audit_publish_latency_seconds_count").unwrap_or(0),
                scrape_f64(port, "kafka_audit_publish_latency_seconds_sum").unwrap_or(0.0)
            );
            return Ok((Measured { rate, cpu_us, busy }, hwm));
        }
        if now > deadline {
            bail!("service consumed only {c} of {n}");
        }
        // Each scrape costs the service CPU (an HTTP request and the whole registry
        // encoded), which a deployment scraping every 15 s never pays: scrape rarely
        // while far from the mark, every 2 ms near it (the end of the span is then
        // within ~2 ms of the last message).
        let wait = match &first {
            Some((t0, c0, _)) if c > *c0 => {
                let rate = (c - c0) as f64 / (now - *t0).as_secs_f64().max(1e-3);
                Duration::from_secs_f64(((n - c) as f64 / rate / 4.0).clamp(0.002, 0.1))
            }
            _ => Duration::from_millis(10),
        };
        std::thread::sleep(wait);
    }
}
