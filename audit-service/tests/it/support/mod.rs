//! Shared by the audit-service integration tests and the kafka-audit chaos test:
//! producing known messages (the ground truth) and reading back what the auditors
//! published.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use audit_lib::{message_hash, AuditMessage};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::Message;

pub const WINDOW_MS: i64 = 10_000;

/// Per (topic, window_start): count and checksum, as the ground truth or as the sum
/// of published increments.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WindowTotals {
    pub count: u64,
    pub checksum: u64,
    pub no_time: u64,
    pub malformed: u64,
    pub out_of_bounds: u64,
    /// Not in `count`: windowed by observation time only.
    pub observed: u64,
    pub bytes: u64,
}

impl WindowTotals {
    /// Adds `w` (counts and bytes summed, checksums added as the checksum is).
    pub fn add(&mut self, w: &WindowTotals) {
        self.count += w.count;
        self.bytes += w.bytes;
        self.malformed += w.malformed;
        self.out_of_bounds += w.out_of_bounds;
        self.no_time += w.no_time;
        self.observed += w.observed;
        self.checksum = self.checksum.wrapping_add(w.checksum);
    }
}

pub type Totals = BTreeMap<(String, i64), WindowTotals>;

/// One audited topic of `partitions` on `bootstrap` and its audit topic (3 partitions),
/// a fresh group, instance and WAL directory, and the configuration of one auditor of
/// them; `name` prefixes every name.
pub struct AuditedTopic {
    pub topic: String,
    pub audit_topic: String,
    pub group: String,
    /// Kept for the WAL's lifetime.
    pub wal: tempfile::TempDir,
    pub cfg: audit_service::Config,
}

pub async fn audited_topic(bootstrap: &str, name: &str, partitions: i32) -> AuditedTopic {
    let topic = testkit::create_unique_topic(bootstrap, name, partitions).await;
    let audit_topic = testkit::create_unique_topic(bootstrap, &format!("{name}-audit"), 3).await;
    let group = testkit::unique(&format!("{name}-group"));
    let wal = tempfile::tempdir().unwrap();
    let cfg = audit_config(
        bootstrap,
        std::slice::from_ref(&topic),
        &audit_topic,
        &group,
        &testkit::unique(name),
        wal.path(),
    );
    AuditedTopic {
        topic,
        audit_topic,
        group,
        wal,
        cfg,
    }
}

/// An audit config for one instance against `bootstrap`.
pub fn audit_config(
    bootstrap: &str,
    topics: &[String],
    audit_topic: &str,
    group: &str,
    instance: &str,
    wal_dir: &Path,
) -> audit_service::Config {
    let mut cfg = audit_service::Config::default();
    cfg.kafka.bootstrap_servers = bootstrap.to_string();
    let a = &mut cfg.audit;
    a.instance_id = instance.to_string();
    // The transactional id is prefix + instance id, and instance ids repeat across tests
    // ("regional-dc1-0" in every two-tier rig): two tests at once on the shared cluster
    // (other test binaries, other worktrees) would fence each other's transactions and
    // stall both auditors' progress. One prefix per group: a restart of an instance of
    // the same group keeps its id and fences its predecessor, as in production.
    a.transactional_id_prefix = format!("kafka-audit-{group}-");
    a.tier = "regional".into();
    a.datacenter = "dc1".into();
    a.group_id = group.to_string();
    a.topics = topics.to_vec();
    a.audit_topic = audit_topic.to_string();
    a.audit_topic_partitions = 3;
    a.audit_topic_replication = 1;
    a.report_interval = Duration::from_millis(500);
    a.wal_dir = wal_dir.to_path_buf();
    a.event_time.window_size = audit_lib::WindowSize::from_millis(WINDOW_MS).unwrap();
    cfg.ops.enabled = false;
    cfg
}

/// What most tests start from: a topic on cluster A, its audit topic, a consumer
/// group, a WAL directory and an instance config for them, all named after `prefix`.
pub struct Setup {
    pub bootstrap: String,
    pub topic: String,
    pub audit_topic: String,
    pub group: String,
    pub wal: tempfile::TempDir,
    pub cfg: audit_service::Config,
}

impl Setup {
    pub async fn new(prefix: &str, partitions: i32) -> Setup {
        let bootstrap = testkit::kafka_a();
        let topic = testkit::create_unique_topic(&bootstrap, prefix, partitions).await;
        let audit_topic =
            testkit::create_unique_topic(&bootstrap, &format!("{prefix}-audit"), 3).await;
        let group = testkit::unique(&format!("{prefix}-group"));
        let wal = tempfile::tempdir().unwrap();
        let cfg = audit_config(
            &bootstrap,
            std::slice::from_ref(&topic),
            &audit_topic,
            &group,
            &testkit::unique(prefix),
            wal.path(),
        );
        Setup {
            bootstrap,
            topic,
            audit_topic,
            group,
            wal,
            cfg,
        }
    }
}

pub fn producer(bootstrap: &str) -> ThreadedProducer<DefaultProducerContext> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .expect("test producer")
}

/// A window-aligned base event time one hour ago, so several windows lie in the past.
pub fn base_time() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    (now - 3_600_000) / WINDOW_MS * WINDOW_MS
}

/// Message number `i` of a known data set: key, JSON value with its event time, and
/// the start of the window that event time falls in.
pub fn known_message(i: u64, base: i64, windows: i64) -> (String, String, i64) {
    let window = (i as i64 * 7919) % windows;
    let ts = base + window * WINDOW_MS + (i as i64 % WINDOW_MS);
    let key = format!("k{i}");
    let value = format!("{{\"id\":{i},\"ts\":{ts},\"pad\":\"abcdefghijklmnopqrstuvwxyz\"}}");
    (key, value, base + window * WINDOW_MS)
}

/// Sends `rec`, waiting while the producer's queue is full.
pub fn send_queued<C, K, P>(p: &ThreadedProducer<C>, mut rec: BaseRecord<'_, K, P>)
where
    C: rdkafka::producer::ProducerContext<DeliveryOpaque = ()> + 'static,
    K: rdkafka::message::ToBytes + ?Sized,
    P: rdkafka::message::ToBytes + ?Sized,
{
    loop {
        match p.send(rec) {
            Ok(()) => break,
            Err((_, r)) => {
                rec = r;
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

/// Adds one message (its key and value) to `truth`'s totals of `topic`'s window
/// `window_start`, as an auditor counts it.
pub fn count_message(truth: &mut Totals, topic: &str, window_start: i64, key: &[u8], value: &[u8]) {
    let t = truth.entry((topic.to_string(), window_start)).or_default();
    t.count += 1;
    t.bytes += (key.len() + value.len()) as u64;
    t.checksum = t.checksum.wrapping_add(message_hash(Some(key), value));
}

/// Produces `n` JSON messages to `topic` spread round-robin over `partitions` and
/// over `windows` windows from `base`; adds them to `truth`. `seq0` makes keys unique
/// across calls.
#[allow(clippy::too_many_arguments)] // a test helper; each argument is one knob of the data set
pub fn produce_known(
    p: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    partitions: i32,
    n: u64,
    seq0: u64,
    base: i64,
    windows: i64,
    truth: &mut Totals,
) {
    for i in seq0..seq0 + n {
        let (key, value, window_start) = known_message(i, base, windows);
        count_message(truth, topic, window_start, key.as_bytes(), value.as_bytes());
        send_queued(
            p,
            BaseRecord::to(topic)
                .key(&key)
                .payload(&value)
                .partition((i % partitions as u64) as i32),
        );
    }
    // A loaded machine can hold deliveries up for longer than one flush: keep flushing
    // while librdkafka still retries, within a bound.
    let deadline = std::time::Instant::now() + Duration::from_secs(240);
    loop {
        match p.flush(Duration::from_secs(10)) {
            Ok(()) => break,
            Err(e) if std::time::Instant::now() < deadline => {
                eprintln!("flush test producer: {e}; still retrying");
            }
            Err(e) => panic!("flush test producer: {e} (gave up after 240 s)"),
        }
    }
}

/// Reads the audit topic (read_committed) and keeps a running sum of increments.
pub struct AuditReader {
    consumer: BaseConsumer,
    pub totals: Totals,
    pub uuids: HashSet<uuid::Uuid>,
    pub duplicates: u64,
    pub progress: Vec<AuditMessage>,
    pub increments: u64,
    /// (topic, window start, partition) → the latest record time the increments
    /// counted there (rule 4's evidence).
    pub record_times: BTreeMap<(String, i64, i32), i64>,
}

impl AuditReader {
    pub fn new(bootstrap: &str, audit_topic: &str, partitions: i32) -> AuditReader {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", "unused-assign-only")
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .create()
            .expect("audit reader");
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(audit_topic, p, Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&tpl).expect("assign audit topic");
        AuditReader {
            consumer,
            totals: Totals::new(),
            uuids: HashSet::new(),
            duplicates: 0,
            progress: Vec::new(),
            increments: 0,
            record_times: BTreeMap::new(),
        }
    }

    /// Reads whatever is available for up to `d`.
    pub fn poll_for(&mut self, d: Duration) {
        let deadline = Instant::now() + d;
        while Instant::now() < deadline {
            match self.consumer.poll(Duration::from_millis(50)) {
                Some(Ok(m)) => {
                    let payload = m.payload().expect("audit message payload");
                    let msg = AuditMessage::from_json(payload).unwrap_or_else(|e| {
                        panic!("audit message at offset {} does not parse: {e}", m.offset())
                    });
                    if !self.uuids.insert(msg.uuid) {
                        // the collector would drop it; count to show resends happen
                        self.duplicates += 1;
                        continue;
                    }
                    if let Some(inc) = msg.as_increment() {
                        self.increments += 1;
                        let t = self
                            .totals
                            .entry((msg.topic.clone(), inc.window_start))
                            .or_default();
                        t.count += inc.stats.count;
                        t.bytes += inc.stats.bytes;
                        t.no_time += inc.stats.no_time_count;
                        t.malformed += inc.stats.malformed_count;
                        t.out_of_bounds += inc.stats.out_of_bounds_count;
                        t.observed += inc.stats.observation_time_count;
                        t.checksum = t.checksum.wrapping_add(inc.stats.checksum.0);
                        for o in &inc.stats.offsets {
                            if let Some(rt) = o.max_record_time {
                                let k = (msg.topic.clone(), inc.window_start, o.partition);
                                let e = self.record_times.entry(k).or_insert(rt);
                                *e = (*e).max(rt);
                            }
                        }
                    } else {
                        self.progress.push(msg);
                    }
                }
                // Transport errors while a broker restarts are transient; the
                // consumer reconnects by itself.
                Some(Err(e)) => eprintln!("audit reader: {e}"),
                None => {}
            }
        }
    }

    pub fn total_count(&self, topic: &str) -> u64 {
        self.totals
            .iter()
            .filter(|((t, _), _)| t == topic)
            .map(|(_, v)| v.count)
            .sum()
    }

    /// Polls until the counted total for `topic` reaches `n` or `timeout` passes.
    pub fn wait_for_count(&mut self, topic: &str, n: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            self.poll_for(Duration::from_millis(200));
            if self.total_count(topic) >= n {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
        }
    }

    /// Every window of `topic` summed into one.
    pub fn topic_sum(&self, topic: &str) -> WindowTotals {
        let mut sum = WindowTotals::default();
        for w in self.topic_totals(topic).values() {
            sum.add(w);
        }
        sum
    }

    /// The totals restricted to `topic`.
    pub fn topic_totals(&self, topic: &str) -> Totals {
        self.totals
            .iter()
            .filter(|((t, _), _)| t == topic)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// Differences between truth and observed per window, for assertion messages.
pub fn diff(truth: &Totals, seen: &Totals) -> Vec<String> {
    let mut out = Vec::new();
    let keys: HashSet<_> = truth.keys().chain(seen.keys()).collect();
    let mut keys: Vec<_> = keys.into_iter().collect();
    keys.sort();
    let empty = WindowTotals::default();
    for k in keys {
        let t = truth.get(k).unwrap_or(&empty);
        let s = seen.get(k).unwrap_or(&empty);
        if t != s {
            out.push(format!(
                "{k:?}: truth count {} seen {} (checksum {:x} vs {:x})",
                t.count, s.count, t.checksum, s.checksum
            ));
        }
    }
    out
}

pub fn init_tracing() {
    common::init_tracing(&common::LogConfig {
        level: "warn,audit_service=info".into(),
        ..Default::default()
    });
}

/// Consumer-group committed offsets of `topic`'s partitions, summed by partition.
pub fn committed(bootstrap: &str, group: &str, topic: &str, partitions: i32) -> HashMap<i32, i64> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .create()
        .expect("committed-offset reader");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let c = c
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("committed offsets");
    c.elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect()
}

/// Cancels `stop` and waits for the service to return; panics unless it returns Ok
/// within 60 s.
pub async fn stop_service(
    stop: &tokio_util::sync::CancellationToken,
    svc: tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(60), svc)
        .await
        .expect("the service stops within 60 s of shutdown")
        .expect("service task")
        .expect("service result");
}

/// A free TCP port on 127.0.0.1 (for an ops server).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `GET path` on the ops server at `port`: (status, whole response), or None while
/// nothing answers.
pub fn ops_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, text))
}

/// Sum of the samples of every `/metrics` line that contains `needle` (0 when the
/// ops server does not answer yet).
pub fn metric(port: u16, needle: &str) -> f64 {
    let Some((_, body)) = ops_get(port, "/metrics") else {
        return 0.0;
    };
    body.lines()
        .filter(|l| !l.starts_with('#') && l.contains(needle))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The group's committed offsets of `topic`, summed over its partitions.
pub fn committed_total(bootstrap: &str, group: &str, topic: &str, partitions: i32) -> i64 {
    committed(bootstrap, group, topic, partitions)
        .values()
        .sum::<i64>()
}

/// Serves the ops endpoints (/metrics, /healthz) on a free port of 127.0.0.1, which
/// [`start_service`] tells ([`Running::ops_port`]).
pub fn enable_ops(cfg: &mut audit_service::Config) {
    cfg.ops.enabled = true;
    cfg.ops.listen = ([127, 0, 0, 1], 0).into();
}

/// One audit-service instance running in this test's runtime. A failed assertion
/// drops it, which cancels the service instead of hanging the test.
pub struct Running {
    shutdown: tokio_util::sync::CancellationToken,
    _guard: tokio_util::sync::DropGuard,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    ops_addr: Option<std::net::SocketAddr>,
}

/// Starts `audit_service::run(cfg)`.
pub fn spawn_service(cfg: audit_service::Config) -> Running {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let _guard = shutdown.clone().drop_guard();
    let task = tokio::spawn(audit_service::run(cfg, shutdown.clone()));
    Running {
        shutdown,
        _guard,
        task,
        ops_addr: None,
    }
}

/// Starts `audit_service::start(cfg)`: once it returns, the ops server (if enabled)
/// listens at [`Running::ops_port`].
pub async fn start_service(cfg: audit_service::Config) -> Running {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let _guard = shutdown.clone().drop_guard();
    let started = audit_service::start(cfg, shutdown.clone())
        .await
        .expect("audit service starts");
    let ops_addr = started.ops_addr;
    Running {
        shutdown,
        _guard,
        task: tokio::spawn(started.wait()),
        ops_addr,
    }
}

impl Running {
    /// The port of the ops server (started by [`start_service`] with [`enable_ops`]).
    pub fn ops_port(&self) -> u16 {
        self.ops_addr.expect("ops server enabled").port()
    }

    /// [`stop_service`]: shuts it down and panics unless it returns Ok within 60 s.
    pub async fn stop(self) {
        stop_service(&self.shutdown, self.task).await;
    }

    /// Whether the service task has returned (it should not before [`Running::stop`]).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

/// Reads what still arrives for `settle` (a late publication, i.e. a double count,
/// would show), then asserts that every window of `topic` equals `truth`.
pub fn assert_windows_exact(
    reader: &mut AuditReader,
    truth: &Totals,
    topic: &str,
    settle: Duration,
) {
    tokio::task::block_in_place(|| reader.poll_for(settle));
    let d = diff(truth, &reader.topic_totals(topic));
    assert!(d.is_empty(), "per-window differences:\n{}", d.join("\n"));
}

/// After the last instance stopped: reads what still arrives for 2 s, then asserts
/// that all `all` messages were counted in time (`ok`) and every window of `topic`
/// equals `truth`.
pub fn assert_all_counted_exactly(
    reader: &mut AuditReader,
    truth: &Totals,
    topic: &str,
    ok: bool,
    all: u64,
) {
    tokio::task::block_in_place(|| reader.poll_for(Duration::from_secs(2)));
    let d = diff(truth, &reader.topic_totals(topic));
    assert!(
        ok && d.is_empty(),
        "counted {} of {all}; per-window differences:\n{}",
        reader.total_count(topic),
        d.join("\n")
    );
}

/// deploy/dev/kafka of this repository.
fn dev_kafka() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/dev/kafka")
}

/// A single-node cluster of this test's own: deploy/dev/kafka's cluster "b" in a
/// temporary state directory on free ports. The broker jars are borrowed (symlinked)
/// from an existing state directory when one has them (`KAFKA_AUDIT_DEV_HOME`, else
/// the repository's `.dev`), else fetched. Stopped when dropped.
pub struct PrivateKafka {
    home: tempfile::TempDir,
    port: u16,
    controller_port: u16,
}

impl PrivateKafka {
    pub fn start() -> PrivateKafka {
        let home = tempfile::tempdir().unwrap();
        let repo_dev = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.dev");
        let sources = std::env::var_os("KAFKA_AUDIT_DEV_HOME")
            .map(PathBuf::from)
            .into_iter()
            .chain([repo_dev]);
        'found: for dir in sources {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if name.starts_with("kafka-lib-") && e.path().join(".complete").exists() {
                    std::os::unix::fs::symlink(e.path(), home.path().join(&name)).unwrap();
                    break 'found;
                }
            }
        }
        let k = PrivateKafka {
            home,
            port: free_port(),
            controller_port: free_port(),
        };
        k.run("start");
        k
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn run(&self, verb: &str) {
        let out = std::process::Command::new(dev_kafka())
            .args([verb, "b"])
            .env("KAFKA_AUDIT_DEV_HOME", self.home.path())
            .env("KAFKA_B_PORT", self.port.to_string())
            .env("KAFKA_B_CONTROLLER_PORT", self.controller_port.to_string())
            .env("KAFKA_HEAP", "384m")
            .output()
            .expect("run deploy/dev/kafka");
        assert!(
            out.status.success(),
            "deploy/dev/kafka {verb} b (private, port {}) failed: {}{}",
            self.port,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for PrivateKafka {
    fn drop(&mut self) {
        // A failed test shows what its broker was doing: the log goes with the tempdir.
        if std::thread::panicking() {
            let log = self.home.path().join("kafka-b/logs/server.log");
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            eprintln!(
                "--- last lines of the private broker's {} ---\n{}",
                log.display(),
                lines[lines.len().saturating_sub(80)..].join("\n")
            );
        }
        let _ = std::process::Command::new(dev_kafka())
            .args(["stop", "b"])
            .env("KAFKA_AUDIT_DEV_HOME", self.home.path())
            .env("KAFKA_B_PORT", self.port.to_string())
            .env("KAFKA_B_CONTROLLER_PORT", self.controller_port.to_string())
            .output();
    }
}

/// A producer writing `known_message`s (event times from `base`) to `topic`'s
/// `partitions` round-robin, `per_tick` every 50 ms, until stopped or dropped (a failed
/// assertion must not leave it running). Not idempotent (acks=all, retries): whatever a
/// broker restart makes it write twice is in the log, so ground truth is the log read
/// back at the end, not what was sent. An idempotent writer stalled past 240 s after a
/// restart in a fresh-clone run while the auditor had nothing new to count; the
/// product's own clients are what the outage tests exercise, not the writer's PID
/// recovery.
pub struct SteadyWriter {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Records the cluster acknowledged so far.
    pub delivered: std::sync::Arc<std::sync::atomic::AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Deliveries(std::sync::Arc<std::sync::atomic::AtomicU64>);
impl rdkafka::ClientContext for Deliveries {}
impl rdkafka::producer::ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        if result.is_ok() {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl SteadyWriter {
    /// `properties`: the writer's own client settings beyond the defaults above.
    pub fn start(
        bootstrap: &str,
        topic: &str,
        partitions: i32,
        base: i64,
        per_tick: u64,
        properties: &[(&str, &str)],
    ) -> SteadyWriter {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let delivered = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut config = testkit::client_config(bootstrap);
        config
            .set("enable.idempotence", "false")
            .set("acks", "all")
            .set("linger.ms", "5")
            .set("message.timeout.ms", "300000");
        for (k, v) in properties {
            config.set(*k, *v);
        }
        let p: rdkafka::producer::ThreadedProducer<Deliveries> = config
            .create_with_context(Deliveries(delivered.clone()))
            .unwrap();
        let (topic, stopped) = (topic.to_string(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut seq = 0;
            while !stopped.load(Ordering::Relaxed) {
                for i in seq..seq + per_tick {
                    let (key, value, _) = known_message(i, base, 4);
                    send_queued(
                        &p,
                        rdkafka::producer::BaseRecord::to(&topic)
                            .key(&key)
                            .payload(&value)
                            .partition((i % partitions as u64) as i32),
                    );
                }
                seq += per_tick;
                // The rate, not a wait for a condition.
                std::thread::sleep(Duration::from_millis(50));
            }
            use rdkafka::producer::Producer;
            if let Err(e) = p.flush(Duration::from_secs(120)) {
                eprintln!("writer: flush at the end: {e} (what is undelivered is not in the log)");
            }
        });
        SteadyWriter {
            stop,
            delivered,
            thread: Some(thread),
        }
    }

    /// Stops writing and waits for the last deliveries.
    pub fn finish(mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for SteadyWriter {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
