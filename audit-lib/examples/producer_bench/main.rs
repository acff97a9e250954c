//! The producer tier's cost: a Kafka producer with audit-lib embedded against the same
//! producer without it, in the same run (bench/producer-tier.sh).
//!
//! Embedded means what a producer-tier user does (README, "Topology"): every message
//! sent is first recorded in an [`Aggregator`] on the sending thread; every report
//! interval the sending thread drains it and hands the increments to a publishing
//! thread that sends them with a [`SpoolingSink`] over audit-lib's [`KafkaSink`]. The
//! sending thread never waits for the audit topic: while the publishing thread is busy
//! (an outage: each attempt waits out the sink's timeout, then spools) it skips the
//! drain and the counts stay merged in the aggregator's windows: memory grows with the
//! windows an outage spans (one statistics record per topic and window, whatever the
//! message rate; windows past `Limits::max_open_windows` wait in the pending list),
//! plus one batch in flight, and disk is bounded by the spool's `max_bytes`.
//!
//! Modes (`cargo run --release -p audit-lib --example producer_bench -- MODE ...`):
//! - `compare BOOTSTRAP MESSAGES ROUNDS RATE SECONDS SIZE`: per round, alternating
//!   which side goes first, (1) throughput: MESSAGES as fast as the producer takes
//!   them, timed from the first send to the end of `flush` (every delivery
//!   confirmed); (2) latency: RATE msg/s for SECONDS, p50/p99/p99.9 of send →
//!   delivery report. Same producer settings and message count on both sides.
//! - `outage BOOTSTRAP RATE SECONDS SIZE`: the audited producer with its audit topic
//!   on an unreachable cluster (a closed local port), RATE msg/s for SECONDS; prints
//!   the process RSS every second, the spool's size and how many reports waited.

mod kafka;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use audit_lib::sink::KafkaSink;
use audit_lib::{
    Aggregator, AuditMessage, EventTimeConfig, Identity, Limits, Observation, Sink, SinkError,
    SpoolStats, SpoolingSink,
};
use kafka::{app_producer, create_topic, delete_topics, send, Res};
use rdkafka::producer::Producer;

/// How often the producer tier reports (drains) in this bench.
const REPORT_INTERVAL: Duration = Duration::from_secs(1);
/// Messages between two clock reads on the sending thread (as the audit service does).
const CLOCK_EVERY: u32 = 64;
const PARTITIONS: i32 = 6;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}-{}", std::process::id(), now_ms())
}

/// audit-lib embedded in the producer (see the module docs).
struct Audit {
    agg: Aggregator,
    to_publisher: SyncSender<Vec<AuditMessage>>,
    publisher_idle: Arc<AtomicBool>,
    observed_at: i64,
    since_clock: u32,
    next_report: Instant,
    /// Reports postponed because the publisher was still busy.
    waited: u64,
    /// The spool's state after the publisher's last attempt.
    spool: Arc<std::sync::Mutex<SpoolStats>>,
    publisher: Option<std::thread::JoinHandle<SpoolingSink<KafkaSink>>>,
}

impl Audit {
    fn new(audit_bootstrap: &str, audit_topic: &str, spool_max: u64) -> Res<Audit> {
        let agg = Aggregator::new(
            Identity::new("producer", "dc1", "bench"),
            EventTimeConfig::default(),
            Limits {
                // A producer does not know offsets.
                track_offsets: false,
                ..Limits::default()
            },
        )?;
        let kafka = KafkaSink::with_brokers(audit_bootstrap, audit_topic, Duration::from_secs(2))?;
        let spool_dir = std::env::temp_dir().join(unique("producer-bench-spool"));
        let mut sink = SpoolingSink::new(kafka, &spool_dir, spool_max)?;
        let (tx, rx) = sync_channel::<Vec<AuditMessage>>(1);
        let idle = Arc::new(AtomicBool::new(true));
        let idle2 = idle.clone();
        let spool = Arc::new(std::sync::Mutex::new(sink.stats()));
        let spool2 = spool.clone();
        let publisher = std::thread::Builder::new()
            .name("audit-publish".into())
            .spawn(move || {
                while let Ok(batch) = rx.recv() {
                    loop {
                        let sent = sink.send(&batch);
                        *spool2.lock().unwrap_or_else(|e| e.into_inner()) = sink.stats();
                        match sent {
                            Ok(()) => break,
                            // The spool is full: keep this one batch and try again.
                            Err(SinkError::SpoolFull { .. }) => std::thread::sleep(REPORT_INTERVAL),
                            Err(e) => {
                                eprintln!("audit batch refused: {e}");
                                break;
                            }
                        }
                    }
                    idle2.store(true, Ordering::Release);
                }
                sink
            })?;
        Ok(Audit {
            agg,
            to_publisher: tx,
            publisher_idle: idle,
            observed_at: now_ms(),
            since_clock: 0,
            next_report: Instant::now() + REPORT_INTERVAL,
            waited: 0,
            spool,
            publisher: Some(publisher),
        })
    }

    #[inline]
    fn record(&mut self, topic: &str, key: &[u8], value: &[u8]) {
        if self.since_clock >= CLOCK_EVERY {
            self.since_clock = 0;
            self.observed_at = now_ms();
            let now = Instant::now();
            if now >= self.next_report {
                self.next_report = now + REPORT_INTERVAL;
                self.report();
            }
        }
        self.since_clock += 1;
        let mut obs = Observation::new(topic, value, self.observed_at);
        obs.key = Some(key);
        self.agg.record(&obs);
    }

    fn report(&mut self) {
        if !self.publisher_idle.load(Ordering::Acquire) {
            self.waited += 1;
            return;
        }
        let batch = self.agg.drain(now_ms());
        if !batch.is_empty() {
            self.publisher_idle.store(false, Ordering::Release);
            // Never blocks: the publisher is idle, so the one slot is free.
            let _ = self.to_publisher.send(batch);
        }
    }

    /// Final report; waits for the publisher; returns its sink.
    fn finish(mut self) -> SpoolingSink<KafkaSink> {
        while !self.publisher_idle.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.report();
        let handle = self.publisher.take().expect("publisher");
        drop(self);
        handle.join().expect("publisher thread")
    }
}

fn payload(size: usize, ts: i64, i: u64) -> String {
    let mut v = format!(
        "{{\"ts\":{ts},\"user\":\"u{}\",\"event\":\"click\",\"page\":\"/products/{}\",\"pad\":\"",
        i % 10_000,
        i % 977
    );
    let pad = size.saturating_sub(v.len() + 2);
    v.extend(std::iter::repeat_n('x', pad));
    v.push_str("\"}");
    v
}

fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // utime + stime in clock ticks (100 Hz on Linux).
    (f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0)) / 100.0
}

fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Messages of one round, prepared before timing: (key, value).
fn messages(n: u64, size: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    let t = now_ms();
    (0..n)
        .map(|i| {
            (
                format!("k{i}").into_bytes(),
                payload(size, t - (i as i64 % 60_000), i).into_bytes(),
            )
        })
        .collect()
}

struct Side {
    rate: f64,
    cpu_us: f64,
    p50: f64,
    p99: f64,
    p999: f64,
}

fn run_side(
    bootstrap: &str,
    topic: &str,
    audit_topic: Option<&str>,
    msgs: &[(Vec<u8>, Vec<u8>)],
    rate: u64,
    seconds: u64,
) -> Res<Side> {
    let p = app_producer(bootstrap)?;
    let mut audit = match audit_topic {
        Some(t) => Some(Audit::new(bootstrap, t, 64 << 20)?),
        None => None,
    };
    // Connect and learn the partitions before timing.
    send(&p, topic, b"warm-up", b"{}");
    p.flush(Duration::from_secs(30))?;
    // (1) throughput
    let cpu0 = cpu_secs();
    let t0 = Instant::now();
    for (i, (k, v)) in msgs.iter().enumerate() {
        if let Some(a) = audit.as_mut() {
            a.record(topic, k, v);
        }
        send(&p, topic, k, v);
        if i % 1024 == 0 {
            p.poll(Duration::ZERO);
        }
    }
    p.flush(Duration::from_secs(120))?;
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu_us = (cpu_secs() - cpu0) * 1e6 / msgs.len() as f64;
    let failed = p.context().failed.load(Ordering::Relaxed);
    if failed > 0 {
        return Err(format!("{failed} deliveries failed").into());
    }
    // (2) latency at a fixed rate
    p.context().reset();
    let per_ms = (rate / 1000).max(1);
    let start = Instant::now();
    let mut sent = 0u64;
    let total = rate * seconds;
    while sent < total {
        let due = (start.elapsed().as_millis() as u64 + 1) * per_ms;
        while sent < due.min(total) {
            let (k, v) = &msgs[sent as usize % msgs.len()];
            if let Some(a) = audit.as_mut() {
                a.record(topic, k, v);
            }
            send(&p, topic, k, v);
            sent += 1;
        }
        p.poll(Duration::from_micros(200));
    }
    p.flush(Duration::from_secs(60))?;
    let d = p.context();
    let side = Side {
        rate: msgs.len() as f64 / elapsed,
        cpu_us,
        p50: d.quantile(0.5),
        p99: d.quantile(0.99),
        p999: d.quantile(0.999),
    };
    if let Some(a) = audit {
        let waited = a.waited;
        let sink = a.finish();
        let st = sink.stats();
        if st.pending_batches > 0 || waited > 0 {
            eprintln!("  audit: {waited} reports waited, spool {st:?}");
        }
    }
    Ok(side)
}

fn compare(
    bootstrap: &str,
    n: u64,
    rounds: usize,
    rate: u64,
    seconds: u64,
    size: usize,
) -> Res<()> {
    let topic = unique("bench-producer");
    let audit_topic = unique("bench-producer-audit");
    create_topic(bootstrap, &topic, PARTITIONS)?;
    create_topic(bootstrap, &audit_topic, 1)?;
    let msgs = messages(n, size);
    let mut rows = Vec::new();
    for round in 0..rounds {
        let bare = || run_side(bootstrap, &topic, None, &msgs, rate, seconds);
        let audited = || run_side(bootstrap, &topic, Some(&audit_topic), &msgs, rate, seconds);
        let (b, a) = if round % 2 == 0 {
            let b = bare()?;
            (b, audited()?)
        } else {
            let a = audited()?;
            (bare()?, a)
        };
        eprintln!(
            "round {round}: bare {:.0} msg/s ({:.2} µs CPU/msg), audited {:.0} msg/s ({:.2} µs CPU/msg), \
             ratio {:.3}; at {rate} msg/s p99 {:.2} → {:.2} ms",
            b.rate,
            b.cpu_us,
            a.rate,
            a.cpu_us,
            a.rate / b.rate,
            b.p99,
            a.p99
        );
        rows.push((b, a));
    }
    println!("\nproducer tier, {size}-byte messages, {n} per side per round, latency at {rate} msg/s for {seconds} s:");
    println!("| round | bare msg/s | audited msg/s | ratio | CPU/msg bare → audited (µs) | p50 bare → audited (ms) | p99 | p99.9 |");
    println!("|---|---|---|---|---|---|---|---|");
    for (i, (b, a)) in rows.iter().enumerate() {
        println!(
            "| {i} | {:.0} | {:.0} | {:.3} | {:.3} → {:.3} | {:.2} → {:.2} | {:.2} → {:.2} | {:.2} → {:.2} |",
            b.rate, a.rate, a.rate / b.rate, b.cpu_us, a.cpu_us, b.p50, a.p50, b.p99, a.p99, b.p999, a.p999
        );
    }
    let med = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    let ratios: Vec<f64> = rows.iter().map(|(b, a)| a.rate / b.rate).collect();
    let added: Vec<f64> = rows.iter().map(|(b, a)| a.p99 - b.p99).collect();
    println!(
        "summary: median throughput ratio {:.3} (min {:.3}; goal >= 0.95); median CPU/msg {:.3} → {:.3} µs; \
         p99 produce latency added (median of rounds) {:+.2} ms (bare p99 median {:.2} ms)",
        med(ratios.clone()),
        ratios.iter().copied().fold(f64::INFINITY, f64::min),
        med(rows.iter().map(|(b, _)| b.cpu_us).collect()),
        med(rows.iter().map(|(_, a)| a.cpu_us).collect()),
        med(added),
        med(rows.iter().map(|(b, _)| b.p99).collect()),
    );
    delete_topics(bootstrap, &[&topic, &audit_topic]);
    Ok(())
}

fn outage(bootstrap: &str, rate: u64, seconds: u64, size: usize) -> Res<()> {
    // A closed port: connection refused at once, librdkafka keeps retrying.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.to_string()
    };
    let topic = unique("bench-producer-outage");
    create_topic(bootstrap, &topic, PARTITIONS)?;
    let p = app_producer(bootstrap)?;
    // Small, so that it fills within the run and the held-batch path shows.
    let spool_max = 16 << 10;
    let mut audit = Audit::new(&dead, "audit", spool_max)?;
    let msgs = messages(100_000, size);
    let per_ms = (rate / 1000).max(1);
    let start = Instant::now();
    let mut sent = 0u64;
    let mut next_sample = Duration::ZERO;
    let mut samples = Vec::new();
    while start.elapsed() < Duration::from_secs(seconds) {
        let due = (start.elapsed().as_millis() as u64 + 1) * per_ms;
        while sent < due {
            let (k, v) = &msgs[sent as usize % msgs.len()];
            audit.record(&topic, k, v);
            send(&p, &topic, k, v);
            sent += 1;
        }
        p.poll(Duration::from_micros(200));
        if start.elapsed() >= next_sample {
            let spooled = audit
                .spool
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pending_bytes;
            samples.push((
                start.elapsed().as_secs(),
                rss_kb(),
                sent,
                audit.waited,
                spooled,
            ));
            next_sample += Duration::from_secs(1);
        }
    }
    p.flush(Duration::from_secs(60))?;
    let waited = audit.waited;
    let windows = audit.agg.open_windows() + audit.agg.pending_windows();
    let spool = *audit.spool.lock().unwrap_or_else(|e| e.into_inner());
    println!(
        "\nproducer tier with its audit cluster unreachable ({dead}), {size}-byte messages at {rate} msg/s for {seconds} s:"
    );
    println!("| t (s) | RSS (MB) | messages sent | reports waited | spooled (KiB) |");
    println!("|---|---|---|---|---|");
    for (t, rss, n, w, sp) in samples
        .iter()
        .filter(|s| s.0 % 5 == 0 || s.0 + 1 >= seconds)
    {
        println!(
            "| {t} | {:.1} | {n} | {w} | {} |",
            *rss as f64 / 1024.0,
            sp >> 10
        );
    }
    let after_warmup: Vec<u64> = samples.iter().filter(|s| s.0 >= 5).map(|s| s.1).collect();
    println!(
        "summary: RSS from 5 s to the end {:.1}–{:.1} MB while {sent} messages were sent; \
         {waited} reports waited for the publisher; windows held {windows}; spool {spool:?}, bound {} KiB; \
         delivery failures of the application's own messages: {}",
        *after_warmup.iter().min().unwrap_or(&0) as f64 / 1024.0,
        *after_warmup.iter().max().unwrap_or(&0) as f64 / 1024.0,
        spool_max >> 10,
        p.context().failed.load(Ordering::Relaxed)
    );
    delete_topics(bootstrap, &[&topic]);
    // The publisher may be waiting out the dead cluster (2 s per attempt): do not join.
    std::process::exit(0)
}

fn main() -> Res<()> {
    let a: Vec<String> = std::env::args().collect();
    let arg = |i: usize| a.get(i).cloned().unwrap_or_default();
    match a.get(1).map(String::as_str) {
        Some("compare") => compare(
            &arg(2),
            arg(3).parse()?,
            arg(4).parse()?,
            arg(5).parse()?,
            arg(6).parse()?,
            arg(7).parse()?,
        ),
        Some("outage") => outage(&arg(2), arg(3).parse()?, arg(4).parse()?, arg(5).parse()?),
        _ => Err("usage: producer_bench compare BOOTSTRAP MESSAGES ROUNDS RATE SECONDS SIZE | outage BOOTSTRAP RATE SECONDS SIZE".into()),
    }
}
