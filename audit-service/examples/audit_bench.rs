//! Benchmark driver for bench/audit-service.sh (real broker).
//!
//! `audit_bench throughput BOOTSTRAP MESSAGES ROUNDS [SIZE:MESSAGES,...]`: for each
//! payload size (default `100:MESSAGES,1024:MESSAGES/5`), fills a 12-partition topic
//! with JSON messages of exactly that many bytes, then alternately (a) consumes it with
//! a bare rdkafka consumer built from the audit service's own consumer settings (one
//! `poll` per message), then with a bare consumer that reads in batches as the service
//! does (`BENCH_BARE_BATCH=0`: not), and (b) runs the audit service (a child process of
//! this binary, the same code as `kafka-audit audit`) on it, each with a fresh group. Rate = messages from the 10 %
//! mark to the last one ÷ elapsed time; the service's count (messages audited) is read
//! from its /metrics every 10 ms. CPU per message = the process's user + system time
//! over the same span ÷ messages. Prints a table per size and a summary that states the
//! bare consumer's CPU per message on this machine, so figures from different machines
//! can be compared.
//!
//! `audit_bench rss BOOTSTRAP TOPICS PER_TOPIC WINDOWS`: creates TOPICS one-partition
//! topics, writes PER_TOPIC messages to each with event times spread over WINDOWS
//! one-minute windows in the past (late data keeps many windows open), audits them all
//! and reports the child's peak RSS (VmHWM).
//!
//! `audit_bench serve CONFIG`: runs the audit service (used as the child).
//!
//! `audit_bench cleanup BOOTSTRAP`: deletes the topics the benchmark created
//! (`bench-tp-*`, `bench-rss-*`, `bench-audit-*`), so the dev cluster does not keep
//! thousands of them.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use common::now_ms;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::Message;

fn unique(prefix: &str) -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix}-{}-{}-{n}", std::process::id(), now_ms())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("serve") => serve(&args[2]),
        Some("throughput") => {
            let n: u64 = args[3].parse()?;
            let sizes = match args.get(5) {
                Some(spec) => parse_sizes(spec)?,
                None => vec![(100, n), (1024, (n / 5).max(1))],
            };
            throughput(&args[2], args[4].parse()?, &sizes)
        }
        Some("rss") => rss(&args[2], args[3].parse()?, args[4].parse()?, args[5].parse()?),
        Some("cleanup") => cleanup(&args[2]),
        _ => bail!("usage: audit_bench serve CONFIG | throughput BOOTSTRAP MESSAGES ROUNDS [SIZE:MESSAGES,...] | rss BOOTSTRAP TOPICS PER_TOPIC WINDOWS | cleanup BOOTSTRAP"),
    }
}

fn serve(config: &str) -> anyhow::Result<()> {
    let cfg = audit_service::Config::load(Some(config.as_ref()))?;
    common::init_tracing(&cfg.log);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move { audit_service::run(cfg, common::shutdown_on_signals()).await })
}

fn create_topics(bootstrap: &str, topics: &[String], partitions: i32) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    for chunk in topics.chunks(200) {
        let nts: Vec<NewTopic> = chunk
            .iter()
            .map(|t| NewTopic::new(t, partitions, TopicReplication::Fixed(1)))
            .collect();
        let res = rt.block_on(admin.create_topics(
            &nts,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(60))),
        ))?;
        for r in res {
            if let Err((t, e)) = r {
                bail!("create topic {t}: {e}");
            }
        }
    }
    // wait for leaders
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let md = admin
            .inner()
            .fetch_metadata(None, Duration::from_secs(30))?;
        let ready = md
            .topics()
            .iter()
            .filter(|t| topics.iter().any(|x| x == t.name()))
            .filter(|t| {
                t.error().is_none()
                    && t.partitions().len() == partitions as usize
                    && t.partitions().iter().all(|p| p.leader() >= 0)
            })
            .count();
        if ready == topics.len() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {ready} of {} topics ready", topics.len());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn producer(bootstrap: &str) -> anyhow::Result<BaseProducer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "20")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.messages", "1000000")
        .create()?)
}

fn send(p: &BaseProducer, topic: &str, partition: Option<i32>, key: &str, value: &str) {
    let mut rec = BaseRecord::to(topic).key(key).payload(value);
    if let Some(pt) = partition {
        rec = rec.partition(pt);
    }
    loop {
        match p.send(rec) {
            Ok(()) => return,
            Err((_, r)) => {
                rec = r;
                p.poll(Duration::from_millis(5));
            }
        }
    }
}

fn bench_config(
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

fn spawn_service(config_text: &str, dir: &str) -> anyhow::Result<Child> {
    spawn_service_of(&std::env::current_exe()?, config_text, dir)
}

fn spawn_service_of(exe: &std::path::Path, config_text: &str, dir: &str) -> anyhow::Result<Child> {
    let path = format!("{dir}/{}.toml", unique("cfg"));
    std::fs::write(&path, config_text)?;
    Ok(Command::new(exe)
        .args(["serve", &path])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?)
}

fn scrape(port: u16, metric: &str) -> Option<u64> {
    scrape_f64(port, metric).map(|v| v as u64)
}

fn scrape_f64(port: u16, metric: &str) -> Option<f64> {
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

/// utime + stime, in seconds, from the text of a /proc/…/stat file.
fn stat_cpu_secs(stat: &str) -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    let ticks = *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    });
    // Fields after the command name (which may contain spaces) start at `state`.
    let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    f.get(11)
        .zip(f.get(12))
        .map_or(0.0, |(u, s)| (u + s) / ticks)
}

/// CPU time (user + system, all threads) of process `pid` so far, in seconds.
fn process_cpu_secs(pid: u32) -> f64 {
    stat_cpu_secs(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default())
}

/// CPU seconds per thread of process `pid`, keyed by (thread name, thread id).
fn thread_cpu_secs(pid: u32) -> std::collections::BTreeMap<(String, String), f64> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        let name = stat
            .split_once(" (")
            .and_then(|(_, r)| r.rsplit_once(") "))
            .map_or("?", |(n, _)| n)
            .trim_end_matches(|c: char| c.is_ascii_digit())
            .to_string();
        let tid = t.file_name().to_string_lossy().into_owned();
        out.insert((name, tid), stat_cpu_secs(&stat));
    }
    out
}

/// (busy, total) jiffies of the whole machine, from /proc/stat.
fn machine_jiffies() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let v: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// Where the CPU went over a measured span: the measured process's CPU per message and
/// the machine's busy fraction (the broker runs on the same cores).
struct Span {
    label: &'static str,
    pid: u32,
    cpu0: f64,
    jiffies0: (u64, u64),
    threads0: std::collections::BTreeMap<(String, String), f64>,
}

impl Span {
    fn start(label: &'static str, pid: u32) -> Span {
        Span {
            label,
            pid,
            cpu0: process_cpu_secs(pid),
            jiffies0: machine_jiffies(),
            threads0: thread_cpu_secs(pid),
        }
    }

    /// (process CPU µs per message, machine busy %)
    fn end(&self, messages: u64) -> (f64, f64) {
        let cpu = process_cpu_secs(self.pid) - self.cpu0;
        // Per thread name: the sum, and the busiest thread when several share the name
        // (the service's consume loop runs on one of tokio's threads).
        let mut by_name: std::collections::BTreeMap<String, (f64, f64, usize)> =
            std::collections::BTreeMap::new();
        for (key, secs) in thread_cpu_secs(self.pid) {
            let d = secs - self.threads0.get(&key).copied().unwrap_or(0.0);
            if d > 0.0 {
                let e = by_name.entry(key.0).or_insert((0.0, 0.0, 0));
                e.0 += d;
                e.1 = e.1.max(d);
                e.2 += 1;
            }
        }
        let per = |secs: f64| secs * 1e6 / messages.max(1) as f64;
        let per_thread: Vec<String> = by_name
            .into_iter()
            .map(|(name, (sum, max, n))| {
                if n > 1 {
                    format!(
                        "{name} {:.3} ({n} threads, busiest {:.3})",
                        per(sum),
                        per(max)
                    )
                } else {
                    format!("{name} {:.3}", per(sum))
                }
            })
            .collect();
        eprintln!(
            "  {}: µs CPU/msg by thread: {}",
            self.label,
            per_thread.join(", ")
        );
        let (b1, t1) = machine_jiffies();
        let busy = (b1 - self.jiffies0.0) as f64 / (t1 - self.jiffies0.1).max(1) as f64;
        (cpu * 1e6 / messages.max(1) as f64, busy * 100.0)
    }
}

fn vm_hwm_kb(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

fn stop(mut child: Child) -> anyhow::Result<()> {
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
struct Measured {
    rate: f64,
    /// Measured process's CPU µs per message over the span.
    cpu_us: f64,
    /// Machine busy % over the span.
    busy: f64,
}

fn measure_service(
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

fn measure_bare(cfg: &audit_service::Config, topic: &str, n: u64) -> anyhow::Result<Measured> {
    let consumer: BaseConsumer = audit_service::consumer_client_config(cfg).create()?;
    consumer.subscribe(&[topic])?;
    let mut tally = Tally::new("bare", n);
    let deadline = Instant::now() + Duration::from_secs(600);
    while !tally.done() {
        if let Some(r) = consumer.poll(Duration::from_millis(100)) {
            let m = r?;
            tally.add(1, key_value_len(m.key(), m.payload()));
            // The clock only now and then (and after every empty poll): a consumer
            // reads none per message, and a read costs ~50 ns on this machine class's
            // VMs, as much as counting a message.
            if tally.count % 4096 != 0 {
                continue;
            }
        }
        if Instant::now() > deadline {
            bail!("bare consumer read only {} of {n}", tally.count);
        }
    }
    Ok(tally.end())
}

/// A bare consumer's messages and bytes read, and its measured span: the same as the
/// service side's, from the 10 % mark to the last message, so group join and fetch
/// ramp-up weigh on neither side.
struct Tally {
    label: &'static str,
    n: u64,
    count: u64,
    bytes: u64,
    start: Option<(Instant, u64, Span)>,
}

impl Tally {
    fn new(label: &'static str, n: u64) -> Tally {
        Tally {
            label,
            n,
            count: 0,
            bytes: 0,
            start: None,
        }
    }

    fn add(&mut self, messages: u64, bytes: u64) {
        self.count += messages;
        self.bytes += bytes;
        if self.start.is_none() && self.count >= self.n / 10 {
            self.start = Some((
                Instant::now(),
                self.count,
                Span::start(self.label, std::process::id()),
            ));
        }
    }

    fn done(&self) -> bool {
        self.count >= self.n
    }

    fn end(self) -> Measured {
        let (t0, c0, span) = self.start.expect("past the 10 % mark");
        std::hint::black_box(self.bytes);
        let rate = (self.count - c0) as f64 / t0.elapsed().as_secs_f64();
        let (cpu_us, busy) = span.end(self.count - c0);
        Measured { rate, cpu_us, busy }
    }
}

/// What a bare consumer reads of a message: the length of its key and value.
fn key_value_len(key: Option<&[u8]>, value: Option<&[u8]>) -> u64 {
    (key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len)) as u64
}

/// The batch-reading bare consumer's context: routes each assignment's partitions to its
/// fetch queue before they are assigned, as the service's context does.
struct RouteContext(Mutex<audit_service::FetchRoute>);

impl rdkafka::ClientContext for RouteContext {}

impl ConsumerContext for RouteContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let parts: Vec<_> = tpl
                .elements()
                .iter()
                .map(|e| audit_lib::TopicPartition::new(e.topic(), e.partition()))
                .collect();
            let route = self.0.lock().unwrap().clone();
            let failed = route.route(consumer, &parts).unwrap_or_default();
            assert!(failed.is_empty(), "cannot route");
        }
    }
}

/// A bare consumer that reads as the service does (`audit_service::FetchQueue`: the
/// partitions forwarded to one queue, read 256 at a time, the consumer queue polled
/// between batches) and counts nothing: what the service's reading costs without
/// the counting, next to [`measure_bare`], which reads as most applications do (one
/// `poll` per message).
fn measure_bare_batch(
    cfg: &audit_service::Config,
    topic: &str,
    n: u64,
) -> anyhow::Result<Measured> {
    let consumer: BaseConsumer<RouteContext> = audit_service::consumer_client_config(cfg)
        .create_with_context(RouteContext(Mutex::default()))?;
    let fetching = audit_service::FetchingConsumer::new(consumer)?;
    let (consumer, q) = (fetching.consumer(), fetching.queue());
    *consumer.context().0.lock().unwrap() = fetching.route();
    consumer.subscribe(&[topic])?;
    let mut batch = q.batch(256);
    let mut tally = Tally::new("bare (batches)", n);
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut dry = false;
    while !tally.done() {
        let (mut got, mut bytes) = (0, 0);
        if let Some(r) = consumer.poll(Duration::ZERO) {
            let m = r?;
            bytes += key_value_len(m.key(), m.payload());
            got += 1;
        }
        q.read(&mut batch, if dry && got == 0 { 100 } else { 0 });
        for r in batch.records() {
            anyhow::ensure!(r.error().is_none(), "consumer error {:?}", r.error());
            bytes += key_value_len(r.key(), r.payload());
            got += 1;
        }
        tally.add(got, bytes);
        if got == 0 && !dry {
            // As the service: let the queue refill once before blocking on it.
            dry = true;
            std::thread::sleep(Duration::from_micros(200));
        } else if got > 0 {
            dry = false;
        }
        if Instant::now() > deadline {
            bail!(
                "batch-reading bare consumer read only {} of {n}",
                tally.count
            );
        }
    }
    Ok(tally.end())
}

/// `100:10000000,1024:2000000` → [(100, 10000000), (1024, 2000000)].
fn parse_sizes(spec: &str) -> anyhow::Result<Vec<(usize, u64)>> {
    spec.split(',')
        .map(|p| {
            let (size, n) = p
                .split_once(':')
                .with_context(|| format!("{p:?}: expected SIZE:MESSAGES"))?;
            let size: usize = size.parse()?;
            anyhow::ensure!(size >= 80, "payloads under 80 bytes cannot hold the JSON");
            Ok((size, n.parse()?))
        })
        .collect()
}

/// A JSON click event of exactly `size` bytes, `ts` first (padded with a string field).
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

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn throughput(bootstrap: &str, rounds: usize, sizes: &[(usize, u64)]) -> anyhow::Result<()> {
    let dir = tempdir()?;
    // A/B of two builds in one run: BENCH_COMPARE_BIN names another audit_bench binary
    // (e.g. built from the previous commit) whose service runs as a third side in every
    // round, right after this build's, with the same settings.
    let compare = std::env::var_os("BENCH_COMPARE_BIN").map(std::path::PathBuf::from);
    // The batch-reading bare consumer as a side of every round (BENCH_BARE_BATCH=0: not).
    let bare_batch = std::env::var("BENCH_BARE_BATCH").map_or(true, |v| v != "0");
    let mut summaries = Vec::new();
    for &(size, n) in sizes {
        let topic = unique("bench-tp");
        create_topics(bootstrap, std::slice::from_ref(&topic), 12)?;
        let p = producer(bootstrap)?;
        let base = now_ms() - 3_600_000;
        let started = Instant::now();
        for i in 0..n {
            let v = payload(size, base + (i as i64 % 3_600_000), i);
            debug_assert_eq!(v.len(), size);
            send(&p, &topic, Some((i % 12) as i32), &format!("k{i}"), &v);
        }
        p.flush(Duration::from_secs(300))?;
        drop(p);
        eprintln!(
            "== {size} B: filled {topic} with {n} messages in {:.1}s",
            started.elapsed().as_secs_f64()
        );
        let mut rows: Vec<(Measured, Measured)> = Vec::new();
        let mut compared: Vec<Measured> = Vec::new();
        let mut batched: Vec<Measured> = Vec::new();
        for round in 0..rounds {
            let port = 19_500 + (summaries.len() * rounds + round) as u16;
            // Same settings, own group and instance id for each side.
            let bare_cfg: audit_service::Config = common::config::from_toml_str(&bench_config(
                bootstrap,
                vec![topic.clone()],
                None,
                port,
                &dir,
            ))?;
            let text = bench_config(bootstrap, vec![topic.clone()], None, port, &dir);
            // Alternate which side goes first: the broker's page cache and JIT state
            // drift between back-to-back runs.
            let run_service = || -> anyhow::Result<(Measured, u64)> {
                let mut child = spawn_service(&text, &dir)?;
                let r = measure_service("audit-service", port, &mut child, n)?;
                stop(child)?;
                Ok(r)
            };
            let run_compare = |exe: &std::path::Path| -> anyhow::Result<Measured> {
                // Its own group, instance id and port.
                let port = port + 1000;
                let text = bench_config(bootstrap, vec![topic.clone()], None, port, &dir);
                let mut child = spawn_service_of(exe, &text, &dir)?;
                let r = measure_service("comparison build", port, &mut child, n)?.0;
                stop(child)?;
                Ok(r)
            };
            // With a comparison build, the two services also alternate.
            let c_first = compare.as_ref().filter(|_| round % 2 == 1);
            let c_last = compare.as_ref().filter(|_| round % 2 == 0);
            if let Some(exe) = c_first {
                compared.push(run_compare(exe)?);
            }
            // The batch-reading bare consumer right after the bare one, in its own group.
            let run_bare = || -> anyhow::Result<(Measured, Option<Measured>)> {
                let b = measure_bare(&bare_cfg, &topic, n)?;
                if !bare_batch {
                    return Ok((b, None));
                }
                let mut cfg = bare_cfg.clone();
                cfg.audit.group_id.push_str("-batches");
                Ok((b, Some(measure_bare_batch(&cfg, &topic, n)?)))
            };
            let ((b, bb), (a, hwm)) = if round % 2 == 0 {
                let b = run_bare()?;
                (b, run_service()?)
            } else {
                let a = run_service()?;
                (run_bare()?, a)
            };
            if let Some(bb) = bb {
                eprintln!(
                    "{size} B round {round}: batch-reading bare consumer {:.0} msg/s ({:.2} µs \
                     CPU/msg, machine {:.0}% busy); audit-service / it {:.3}",
                    bb.rate,
                    bb.cpu_us,
                    bb.busy,
                    a.rate / bb.rate
                );
                batched.push(bb);
            }
            if let Some(exe) = c_last {
                compared.push(run_compare(exe)?);
            }
            if let Some(c) = compared.last() {
                eprintln!(
                    "{size} B round {round}: comparison build {:.0} msg/s ({:.2} µs CPU/msg), \
                     ratio {:.3} to bare; this build {:.2} µs CPU/msg",
                    c.rate,
                    c.cpu_us,
                    c.rate / b.rate,
                    a.cpu_us
                );
            }
            eprintln!(
                "{size} B round {round}: bare {:.0} msg/s ({:.2} µs CPU/msg, machine {:.0}% busy), \
                 audit-service {:.0} msg/s ({:.2} µs CPU/msg, machine {:.0}% busy), ratio {:.3}, \
                 service peak RSS {} MB",
                b.rate,
                b.cpu_us,
                b.busy,
                a.rate,
                a.cpu_us,
                a.busy,
                a.rate / b.rate,
                hwm / 1024
            );
            rows.push((b, a));
        }
        println!("\n{size}-byte payloads, {n} messages per side per round:");
        println!("| round | bare msg/s | service msg/s | ratio | CPU/msg bare → service (µs) |");
        println!("|---|---|---|---|---|");
        for (round, (b, a)) in rows.iter().enumerate() {
            println!(
                "| {round} | {:.2} M | {:.2} M | {:.3} | {:.3} → {:.3} ({:.2}×) |",
                b.rate / 1e6,
                a.rate / 1e6,
                a.rate / b.rate,
                b.cpu_us,
                a.cpu_us,
                a.cpu_us / b.cpu_us
            );
        }
        let ratios: Vec<f64> = rows.iter().map(|(b, a)| a.rate / b.rate).collect();
        let bare_cpu = median(&rows.iter().map(|(b, _)| b.cpu_us).collect::<Vec<_>>());
        let audit_cpu = median(&rows.iter().map(|(_, a)| a.cpu_us).collect::<Vec<_>>());
        let line = format!(
            "{size} B: median ratio {:.3} (min {:.3}, max {:.3}); median CPU/msg bare {bare_cpu:.3} µs, \
             audit-service {audit_cpu:.3} µs ({:.2}× the bare consumer); median rates bare {:.2} M, \
             audit-service {:.2} M msg/s",
            median(&ratios),
            ratios.iter().copied().fold(f64::INFINITY, f64::min),
            ratios.iter().copied().fold(0.0, f64::max),
            audit_cpu / bare_cpu,
            median(&rows.iter().map(|(b, _)| b.rate).collect::<Vec<_>>()) / 1e6,
            median(&rows.iter().map(|(_, a)| a.rate).collect::<Vec<_>>()) / 1e6,
        );
        println!("{line}");
        if !compared.is_empty() {
            let c_ratios: Vec<f64> = rows
                .iter()
                .zip(&compared)
                .map(|((b, _), c)| c.rate / b.rate)
                .collect();
            let c_cpu = median(&compared.iter().map(|c| c.cpu_us).collect::<Vec<_>>());
            println!(
                "{size} B comparison build: median ratio {:.3} (min {:.3}); median CPU/msg {c_cpu:.3} µs \
                 ({:.2}× the bare consumer); this build {audit_cpu:.3} µs",
                median(&c_ratios),
                c_ratios.iter().copied().fold(f64::INFINITY, f64::min),
                c_cpu / bare_cpu
            );
        }
        if !batched.is_empty() {
            let bb_ratios: Vec<f64> = rows
                .iter()
                .zip(&batched)
                .map(|((_, a), bb)| a.rate / bb.rate)
                .collect();
            let bb_cpu = median(&batched.iter().map(|c| c.cpu_us).collect::<Vec<_>>());
            println!(
                "{size} B batch-reading bare consumer (reads as the service, counts nothing): median \
                 rate {:.2} M msg/s, CPU/msg {bb_cpu:.3} µs; audit-service / it: median ratio {:.3} \
                 (min {:.3}), CPU {:.2}×",
                median(&batched.iter().map(|c| c.rate).collect::<Vec<_>>()) / 1e6,
                median(&bb_ratios),
                bb_ratios.iter().copied().fold(f64::INFINITY, f64::min),
                audit_cpu / bb_cpu
            );
        }
        summaries.push((size, bare_cpu, line));
    }
    println!("\nsummary ({rounds} rounds per size, alternating which side goes first):");
    for (size, bare_cpu, line) in &summaries {
        println!("  this machine's bare consumer: {bare_cpu:.3} µs CPU per {size}-byte message");
        println!("  {line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn rss(bootstrap: &str, topics: usize, per_topic: u64, windows: i64) -> anyhow::Result<()> {
    let dir = tempdir()?;
    let prefix = unique("bench-rss");
    let names: Vec<String> = (0..topics).map(|i| format!("{prefix}.{i:05}")).collect();
    let started = Instant::now();
    create_topics(bootstrap, &names, 1)?;
    eprintln!(
        "created {topics} topics in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let p = producer(bootstrap)?;
    let now = now_ms();
    for (ti, t) in names.iter().enumerate() {
        for i in 0..per_topic {
            // late data: event times up to `windows` minutes back
            let w = (i as i64 * 31 + ti as i64) % windows;
            let ts = now - (w + 1) * 60_000;
            send(
                &p,
                t,
                None,
                &format!("k{i}"),
                &format!("{{\"ts\":{ts},\"n\":{i}}}"),
            );
        }
    }
    p.flush(Duration::from_secs(300))?;
    let n = topics as u64 * per_topic;
    eprintln!("wrote {n} messages");
    let port = 19_600;
    let text = bench_config(
        bootstrap,
        vec![],
        Some(format!("^{}\\.", prefix.replace('-', "\\-"))),
        port,
        &dir,
    );
    let mut child = spawn_service(&text, &dir)?;
    let rate = measure_service("audit-service", port, &mut child, n)?
        .0
        .rate;
    // two more reports with everything drained
    std::thread::sleep(Duration::from_secs(11));
    let hwm = vm_hwm_kb(child.id()).context("no VmHWM")?;
    let published = scrape(port, "kafka_audit_published_messages_total").unwrap_or(0);
    stop(child)?;
    println!(
        "rss: topics={topics} messages={n} windows_per_topic={windows} open_topic_windows={} rate={rate:.0} msg/s published_audit_messages={published} peak_rss={} MB",
        topics as i64 * windows,
        hwm / 1024
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn tempdir() -> anyhow::Result<String> {
    let d = std::env::temp_dir().join(unique("audit-bench"));
    std::fs::create_dir_all(&d)?;
    Ok(d.display().to_string())
}

fn cleanup(bootstrap: &str) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let md = admin
        .inner()
        .fetch_metadata(None, Duration::from_secs(30))?;
    let names: Vec<String> = md
        .topics()
        .iter()
        .map(|t| t.name().to_string())
        .filter(|n| {
            ["bench-tp-", "bench-rss-", "bench-audit-"]
                .iter()
                .any(|p| n.starts_with(p))
        })
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    for chunk in names.chunks(500) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        for r in rt.block_on(admin.delete_topics(
            &refs,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(60))),
        ))? {
            if let Err((t, e)) = r {
                eprintln!("cannot delete {t}: {e}");
            }
        }
    }
    println!("cleanup: deleted {} benchmark topics", names.len());
    Ok(())
}
