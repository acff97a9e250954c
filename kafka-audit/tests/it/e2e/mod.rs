//! Shared by the end-to-end tests of the detection rules (region_only_topic.rs,
//! transactional.rs, late_auditor.rs, collector_outage.rs, stuck_instance.rs,
//! evidence.rs): real auditors on cluster A and B, the collector into PostgreSQL (or
//! SQLite), the web evaluator and its alerting to a local webhook receiver; live
//! traffic written to both clusters as a replicator would (with a lag, if asked), and
//! replays. It uses the audit-service test support, which `main.rs` declares as
//! `support`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::producer::{BaseRecord, DefaultProducerContext, ThreadedProducer};
use serde_json::Value;
use store::{Deployment, VerdictReads};
use web::engine::{Lifecycle, Verdict};
use web::AppState;

use crate::support::{audit_config, producer, send_queued, WINDOW_MS};

/// An auditor config of `tier`/`dc` for `topic` on `bootstrap` (its own group).
pub fn tier_config(
    bootstrap: &str,
    topic: &str,
    audit_topic: &str,
    tier: &str,
    dc: &str,
    wal: &Path,
) -> audit_service::Config {
    let mut cfg = audit_config(
        bootstrap,
        &[topic.to_string()],
        audit_topic,
        &testkit::unique(&format!("e2e-{tier}-{dc}")),
        &format!("{tier}-{dc}-0"),
        wal,
    );
    cfg.audit.tier = tier.into();
    cfg.audit.datacenter = dc.into();
    cfg.audit.evidence_topic = evidence_topic(audit_topic);
    cfg
}

/// The evidence topic beside `audit_topic` (docs/design.md §10): where an auditor with
/// replicators publishes their evidence, and the only topic the rig's collector takes
/// evidence from.
pub fn evidence_topic(audit_topic: &str) -> String {
    format!("{audit_topic}.evidence")
}

/// A collector config reading each `(name, bootstrap, audit topic)` into `db_url`,
/// `max_messages` per batch.
pub fn collect_config(
    db_url: &str,
    sources: &[(&str, &str, &str)],
    max_messages: usize,
) -> collector::CollectConfig {
    collect_config_with(db_url, sources, max_messages, "")
}

/// [`collect_config`] with librdkafka consumer properties for every source (TOML
/// lines of `[sources.kafka.consumer]`).
pub fn collect_config_with(
    db_url: &str,
    sources: &[(&str, &str, &str)],
    max_messages: usize,
    consumer: &str,
) -> collector::CollectConfig {
    let mut toml = format!(
        r#"
[store]
url = "{db_url}"
[http]
listen = "127.0.0.1:0"
[batch]
max_messages = {max_messages}
max_wait = "50ms"
[retention]
enabled = false
"#
    );
    for (name, bootstrap, topic) in sources {
        toml.push_str(&format!(
            r#"
[[sources]]
name = "{name}"
topics = ["{topic}"]
group_id = "{group}"
[sources.kafka]
bootstrap_servers = "{bootstrap}"
[sources.kafka.consumer]
{consumer}
"#,
            group = testkit::unique("e2e-collector")
        ));
    }
    toml::from_str(&toml).expect("collector config parses")
}

/// Tiers regional and aggregate, one edge with `datacenters` (a TOML inline table),
/// 10 s windows, 5 s grace, `stall_after`; evaluation every 500 ms; alerts to a
/// webhook at `hook`.
pub fn serve_config(datacenters: &str, stall_after: &str, hook: &str) -> web::Config {
    serve_config_timed("10s", "5s", datacenters, stall_after, hook)
}

/// The `tiers` and `[[topology.edges]]` of [`serve_config`]: regional → aggregate in
/// `datacenters`.
fn regional_to_aggregate(datacenters: &str) -> String {
    format!(
        r#"tiers = [{{ name = "regional" }}, {{ name = "aggregate" }}]
[[topology.edges]]
upstream = "regional"
downstream = "aggregate"
datacenters = {datacenters}"#
    )
}

/// [`serve_config`] with another `window` and `grace` (humantime strings).
pub fn serve_config_timed(
    window: &str,
    grace: &str,
    datacenters: &str,
    stall_after: &str,
    hook: &str,
) -> web::Config {
    serve_config_of(
        window,
        grace,
        &regional_to_aggregate(datacenters),
        stall_after,
        hook,
    )
}

/// [`serve_config`] with other tiers and edges (`tiers = ...` and `[[topology.edges]]`
/// tables, TOML of the `[topology]` section).
pub fn serve_config_with(tiers_and_edges: &str, stall_after: &str, hook: &str) -> web::Config {
    serve_config_of("10s", "5s", tiers_and_edges, stall_after, hook)
}

/// serve's config with `window`, `grace`, `stall_after` (humantime strings) and
/// `tiers_and_edges` (TOML of the `[topology]` section); evaluation every 500 ms;
/// alerts to the webhook at `hook`.
pub fn serve_config_of(
    window: &str,
    grace: &str,
    tiers_and_edges: &str,
    stall_after: &str,
    hook: &str,
) -> web::Config {
    toml::from_str(&format!(
        r#"
[serve]
evaluate_every = "500ms"
[topology]
window = "{window}"
grace = "{grace}"
stall_after = "{stall_after}"
{tiers_and_edges}
[[alerting.channels]]
name = "hook"
kind = "webhook"
url = "{hook}"
"#
    ))
    .expect("serve config parses")
}

/// What a local webhook receiver got: every page (trigger or resolve), in order.
#[derive(Clone, Default)]
pub struct Pages(Arc<Mutex<Vec<Value>>>);

impl Pages {
    pub fn all(&self) -> Vec<Value> {
        self.0.lock().unwrap().clone()
    }

    /// `(action, verdict, window_start)` of every page about `topic` (window_start
    /// null for an auditor page).
    pub fn of(&self, topic: &str) -> Vec<(String, String, Option<i64>)> {
        self.all()
            .iter()
            .filter(|b| b["topic"] == topic)
            .map(|b| {
                (
                    b["action"].as_str().unwrap_or_default().to_string(),
                    b["verdict"].as_str().unwrap_or_default().to_string(),
                    b["window_start"].as_i64(),
                )
            })
            .collect()
    }

    /// Waits (bounded by `timeout`, polling every 100 ms) for `topic`'s first page;
    /// when it was seen (epoch ms), or `None`.
    pub async fn first(&self, topic: &str, timeout: Duration) -> Option<i64> {
        let paged = testkit::wait_until_async(timeout, || {
            let got = !self.of(topic).is_empty();
            async move {
                if !got {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                got
            }
        })
        .await;
        paged.then(common::now_ms)
    }

    /// Waits (bounded by `timeout`) until `topic` has at least `n` pages; whether it has.
    pub async fn wait_for(&self, topic: &str, n: usize, timeout: Duration) -> bool {
        testkit::wait_until_async(timeout, || {
            let got = self.of(topic).len();
            async move { got >= n }
        })
        .await
    }
}

/// A webhook receiver on 127.0.0.1: its pages and its URL.
pub async fn start_receiver() -> (Pages, String) {
    use axum::extract::State;
    use axum::routing::post;
    use axum::Json;
    async fn handle(State(p): State<Pages>, Json(body): Json<Value>) -> axum::http::StatusCode {
        p.0.lock().unwrap().push(body);
        axum::http::StatusCode::ACCEPTED
    }
    let pages = Pages::default();
    let app = axum::Router::new()
        .route("/hook", post(handle))
        .with_state(pages.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (pages, url)
}

/// One window's verdict as the evaluator holds it.
pub type Judged = (i64, Verdict, Lifecycle, u64, u64);

/// The non-ok verdicts of `topic` in `[from, to)`.
pub fn anomalies(state: &AppState, topic: &str, from: i64, to: i64) -> Vec<Judged> {
    state
        .index
        .read()
        .unwrap()
        .in_range(from, to)
        .filter(|e| e.topic == topic)
        .map(|e| {
            (
                e.window_start,
                e.verdict,
                e.lifecycle,
                e.expected,
                e.observed,
            )
        })
        .collect()
}

/// Waits (bounded by `timeout`) until the stored counts of each tier of `topic` in
/// `[from, to)` add up to `counts` and an evaluation cycle run after that judges every
/// window final, so the verdicts read next are of the complete counts (a cycle of the
/// job loop may have started before the last increments were in). With `evaluate`,
/// runs an evaluation cycle per poll too (for a state whose jobs are not running).
pub async fn wait_final(
    state: &AppState,
    topic: &str,
    (from, to): (i64, i64),
    counts: &[(&str, u64)],
    evaluate: bool,
    timeout: Duration,
) -> bool {
    testkit::wait_until_async(timeout, || async move {
        if evaluate {
            state.evaluate(common::now_ms()).await.expect("cycle");
        }
        let rows = state
            .store
            .topic_windows(topic, store::TimeRange::new(from, to))
            .await
            .expect("rows");
        let all_in = counts.iter().all(|(tier, n)| {
            rows.iter()
                .filter(|r| r.tier == *tier)
                .map(|r| r.count)
                .sum::<u64>()
                == *n
        });
        if !all_in {
            tokio::time::sleep(Duration::from_millis(200)).await;
            return false;
        }
        // Judged from the complete counts: a cycle that began before the last
        // increments (or before the windows were stored at all: an index without the
        // topic's entries says nothing) cannot answer "final".
        state.evaluate(common::now_ms()).await.expect("cycle");
        let waiting = state
            .index
            .read()
            .unwrap()
            .in_range(from, to)
            .any(|e| e.topic == topic && e.lifecycle != Lifecycle::Final);
        if waiting {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        !waiting
    })
    .await
}

/// Messages per window at each end of a live replication.
#[derive(Debug, Default, Clone)]
pub struct Replicated {
    /// window start → (upstream count, downstream count)
    pub windows: BTreeMap<i64, (u64, u64)>,
    /// Messages with no tier-invariant time (upstream, downstream): in no window here,
    /// each auditor windows them by its own observation time.
    pub observation_time: (u64, u64),
}

impl Replicated {
    /// What [`Traffic::loss_then_duplication`] must be judged: window 1 a final loss,
    /// window 2 a final duplication, each with the counts sent in it.
    pub fn loss_then_duplication_verdicts(&self) -> Vec<Judged> {
        let (lossy, duplicated) = self.loss_then_duplication_windows();
        let (l, d) = (self.windows[&lossy], self.windows[&duplicated]);
        vec![
            (lossy, Verdict::Loss, Lifecycle::Final, l.0, l.1),
            (duplicated, Verdict::Duplication, Lifecycle::Final, d.0, d.1),
        ]
    }

    /// The pages [`Traffic::loss_then_duplication`] must raise, sorted as
    /// [`Pages::of`] sorted: one trigger per faulty window.
    pub fn loss_then_duplication_pages(&self) -> Vec<(String, String, Option<i64>)> {
        let (lossy, duplicated) = self.loss_then_duplication_windows();
        vec![
            ("trigger".into(), "duplication".into(), Some(duplicated)),
            ("trigger".into(), "loss".into(), Some(lossy)),
        ]
    }

    fn loss_then_duplication_windows(&self) -> (i64, i64) {
        (self.first() + WINDOW_MS, self.first() + 2 * WINDOW_MS)
    }

    pub fn first(&self) -> i64 {
        *self.windows.keys().next().expect("traffic")
    }
    /// The end of the last window.
    pub fn end(&self) -> i64 {
        self.windows.keys().last().expect("traffic") + WINDOW_MS
    }
    pub fn total(&self) -> (u64, u64) {
        self.windows
            .values()
            .fold((0, 0), |(u, d), (a, b)| (u + a, d + b))
    }
}

/// What a live replicator does to the windows of its traffic, counted from the window
/// the traffic starts in (0): drop the first `n` messages of window `loss.0`, send the
/// first `n` of window `dup.0` twice, drop the first `n` of window `masked.0` and send
/// the next `n` twice (equal counts, different checksums).
#[derive(Debug, Clone, Copy)]
pub struct Faults {
    pub loss: Option<(i64, u64)>,
    pub dup: Option<(i64, u64)>,
    pub masked: Option<(i64, u64)>,
}

impl Faults {
    /// A faithful replicator: every message copied once.
    pub const NONE: Faults = Faults {
        loss: None,
        dup: None,
        masked: None,
    };

    /// How many copies the replicator sends of the `nth` message (from 1) of window
    /// `index`.
    pub fn copies(&self, index: i64, nth: u64) -> u64 {
        let hit = |f: Option<(i64, u64)>, from: u64| {
            f.is_some_and(|(w, n)| w == index && nth > from && nth <= from + n)
        };
        let masked_n = self.masked.map_or(0, |m| m.1);
        if hit(self.loss, 0) || hit(self.masked, 0) {
            0
        } else if hit(self.dup, 0) || hit(self.masked, masked_n) {
            2
        } else {
            1
        }
    }
}

fn now_ms() -> i64 {
    common::now_ms()
}

/// The shape of a live replicator's traffic: `rate` messages per second for
/// `duration`, round-robin over `partitions`, copied to the second cluster with `faults`.
#[derive(Debug, Clone, Copy)]
pub struct Traffic {
    pub partitions: i32,
    pub rate: u64,
    pub duration: Duration,
    pub faults: Faults,
}

impl Traffic {
    /// 45 s at 100 messages/s over `partitions`: window 1 loses 37, window 2 gets 11
    /// twice.
    pub fn loss_then_duplication(partitions: i32) -> Traffic {
        Traffic {
            partitions,
            rate: 100,
            duration: Duration::from_secs(45),
            faults: Faults {
                loss: Some((1, 37)),
                dup: Some((2, 11)),
                masked: None,
            },
        }
    }
}

/// [`wait_final`] over the windows of `sent`, with both tiers' counts of it in.
pub async fn wait_sent_final(
    state: &AppState,
    topic: &str,
    sent: &Replicated,
    timeout: Duration,
) -> bool {
    let (up, down) = sent.total();
    wait_final(
        state,
        topic,
        (sent.first(), sent.end()),
        &[("regional", up), ("aggregate", down)],
        false,
        timeout,
    )
    .await
}

/// Traffic now: `traffic.rate` JSON messages per second with event time = the time of
/// sending (also the record timestamp), each to `topic` on `a` and, as a replicator
/// would with `traffic.faults`, on `b`. Runs on the calling thread (call it from
/// `spawn_blocking`, or use [`TwoTiers::spawn_traffic`]).
pub fn replicate_live(a: &str, b: &str, topic: &str, traffic: Traffic) -> Replicated {
    replicate_live_with(a, b, topic, traffic, json_message)
}

/// Message `i` of [`replicate_live`]: JSON with its event time `ts`, windowed by it.
fn json_message(i: u64, ts: i64) -> (Vec<u8>, i64, Option<i64>) {
    (
        format!("{{\"id\":{i},\"ts\":{ts}}}").into_bytes(),
        ts,
        Some(ts),
    )
}

/// [`replicate_live`] with other messages: `message(i, now)` gives message `i`'s
/// payload, its record timestamp (kept by the replicator), and the tier-invariant time
/// the auditors window it by (`None`: none, it is counted in
/// [`Replicated::observation_time`], not in a window). Faults go by the window of that
/// time, counted from the window the traffic starts in.
pub fn replicate_live_with(
    a: &str,
    b: &str,
    topic: &str,
    traffic: Traffic,
    message: impl Fn(u64, i64) -> (Vec<u8>, i64, Option<i64>),
) -> Replicated {
    replicate_live_delayed(a, b, topic, traffic, Duration::ZERO, message)
}

/// [`replicate_live_with`] through a replicator `copy_delay` behind: each copy reaches
/// `b` that long after its original reached `a` (in the original order), as a
/// replicator with that much lag writes it.
pub fn replicate_live_delayed(
    a: &str,
    b: &str,
    topic: &str,
    traffic: Traffic,
    copy_delay: Duration,
    message: impl Fn(u64, i64) -> (Vec<u8>, i64, Option<i64>),
) -> Replicated {
    let Traffic {
        partitions,
        rate,
        duration,
        faults,
    } = traffic;
    let (pa, pb) = (producer(a), producer(b));
    let started = Instant::now();
    let first = now_ms() / WINDOW_MS * WINDOW_MS;
    let mut out = Replicated::default();
    let mut seen: BTreeMap<i64, u64> = BTreeMap::new();
    let mut held: std::collections::VecDeque<(Instant, Copy)> = Default::default();
    let mut i: u64 = 0;
    while started.elapsed() < duration {
        // Pace: message i goes out at i / rate seconds.
        let due = started + Duration::from_micros(i * 1_000_000 / rate);
        while held.front().is_some_and(|(at, _)| *at <= due) {
            let (at, copy) = held.pop_front().expect("held");
            sleep_until(at);
            copy.send(&pb, topic);
        }
        sleep_until(due);
        let ts = now_ms();
        let (value, record_ts, windowed_by) = message(i, ts);
        let copy = Copy {
            key: format!("k{i}"),
            value,
            partition: (i % partitions as u64) as i32,
            create_time: record_ts,
        };
        let copies = match windowed_by {
            Some(t) => {
                let window = t.div_euclid(WINDOW_MS) * WINDOW_MS;
                let nth = seen.entry(window).or_default();
                *nth += 1;
                let copies = faults.copies((window - first) / WINDOW_MS, *nth);
                let w = out.windows.entry(window).or_default();
                w.0 += 1;
                w.1 += copies;
                copies
            }
            None => {
                out.observation_time.0 += 1;
                out.observation_time.1 += 1;
                1
            }
        };
        copy.send(&pa, topic);
        for _ in 0..copies {
            if copy_delay.is_zero() {
                copy.send(&pb, topic);
            } else {
                held.push_back((Instant::now() + copy_delay, copy.clone()));
            }
        }
        i += 1;
    }
    flush(&pa);
    for (at, copy) in held {
        sleep_until(at);
        copy.send(&pb, topic);
    }
    flush(&pb);
    out
}

fn sleep_until(t: Instant) {
    if let Some(wait) = t.checked_duration_since(Instant::now()) {
        std::thread::sleep(wait);
    }
}

/// One record as a producer wrote it and a replicator copies it: key, value,
/// partition and CreateTime kept.
#[derive(Debug, Clone)]
pub struct Copy {
    pub key: String,
    pub value: Vec<u8>,
    pub partition: i32,
    pub create_time: i64,
}

impl Copy {
    pub fn send(&self, p: &ThreadedProducer<DefaultProducerContext>, topic: &str) {
        send_queued(
            p,
            BaseRecord::to(topic)
                .key(&self.key)
                .payload(&self.value)
                .partition(self.partition)
                .timestamp(self.create_time),
        );
    }
}

fn flush(p: &ThreadedProducer<DefaultProducerContext>) {
    use rdkafka::producer::Producer;
    p.flush(Duration::from_secs(60))
        .expect("flush test producer");
}

/// Waits until the wall clock reaches `t` (epoch ms): a point of a scenario's timeline
/// (e.g. "two windows after the traffic started"), not a condition to poll for.
pub async fn sleep_until_ms(t: i64) {
    let d = t - now_ms();
    if d > 0 {
        tokio::time::sleep(Duration::from_millis(d as u64)).await;
    }
}

/// The two-cluster rig of most end-to-end tests: tier regional/dc1 audits cluster A,
/// tier aggregate/agg audits cluster B, each with its own audit topic and WAL
/// directory; a fresh PostgreSQL database for the collector and serve (or a SQLite
/// file: [`TwoTiers::on_sqlite`]); a local webhook receiver; one stop token, cancelled
/// when the rig is dropped (a failing test stops its services).
pub struct TwoTiers {
    pub a: String,
    pub b: String,
    pub audit_a: String,
    pub audit_b: String,
    pub pages: Pages,
    pub hook: String,
    pub db: testkit::TestDatabase,
    /// Where the collector and serve store: `db`, or a SQLite file.
    pub store_url: String,
    _sqlite: Option<tempfile::TempDir>,
    pub stop: tokio_util::sync::CancellationToken,
    _stop_on_drop: tokio_util::sync::DropGuard,
    wal_a: tempfile::TempDir,
    wal_b: tempfile::TempDir,
}

impl TwoTiers {
    /// Audit topics `{name}-audit` on both clusters and a database `{name}`.
    pub async fn new(name: &str) -> TwoTiers {
        let db = testkit::fresh_database(&name.replace('-', "_")).await;
        Self::with_database(name, db).await
    }

    /// [`TwoTiers::new`] with a database of the caller's (e.g. on a Citus cluster).
    pub async fn with_database(name: &str, db: testkit::TestDatabase) -> TwoTiers {
        let (a, b) = (testkit::kafka_a(), testkit::kafka_b());
        let audit_a = testkit::create_unique_topic(&a, &format!("{name}-audit"), 3).await;
        let audit_b = testkit::create_unique_topic(&b, &format!("{name}-audit"), 3).await;
        // The collector subscribes to them whether or not an auditor has replicators.
        testkit::create_topic(&a, &evidence_topic(&audit_a), 1).await;
        testkit::create_topic(&b, &evidence_topic(&audit_b), 1).await;
        let (pages, hook) = start_receiver().await;
        let stop = tokio_util::sync::CancellationToken::new();
        TwoTiers {
            _stop_on_drop: stop.clone().drop_guard(),
            stop,
            a,
            b,
            audit_a,
            audit_b,
            pages,
            hook,
            store_url: db.url().to_string(),
            _sqlite: None,
            db,
            wal_a: tempfile::tempdir().unwrap(),
            wal_b: tempfile::tempdir().unwrap(),
        }
    }

    /// [`TwoTiers::new`] with the collector and serve on a SQLite file (the embedded
    /// default) instead of PostgreSQL.
    pub async fn on_sqlite(name: &str) -> TwoTiers {
        let dir = tempfile::tempdir().unwrap();
        TwoTiers {
            store_url: format!("sqlite:{}", dir.path().join("audit.db").display()),
            _sqlite: Some(dir),
            ..TwoTiers::new(name).await
        }
    }

    /// The regional/dc1 auditor's config for `topics` on cluster A.
    pub fn regional(&self, topics: &[&str]) -> audit_service::Config {
        let mut cfg = tier_config(
            &self.a,
            topics[0],
            &self.audit_a,
            "regional",
            "dc1",
            self.wal_a.path(),
        );
        cfg.audit.topics = topics.iter().map(|t| t.to_string()).collect();
        cfg
    }

    /// The aggregate/agg auditor's config for `topics` on cluster B.
    pub fn aggregate(&self, topics: &[&str]) -> audit_service::Config {
        let mut cfg = tier_config(
            &self.b,
            topics[0],
            &self.audit_b,
            "aggregate",
            "agg",
            self.wal_b.path(),
        );
        cfg.audit.topics = topics.iter().map(|t| t.to_string()).collect();
        cfg
    }

    /// The aggregate auditor's config for `topics`, fetching a few KB at a time and each
    /// partition again only 100 ms after its fetched messages were taken: started late,
    /// it catches up over several reports.
    pub fn slow_aggregate(&self, topics: &[&str]) -> audit_service::Config {
        let mut cfg = self.aggregate(topics);
        for (k, v) in [
            ("queued.min.messages", "1"),
            ("fetch.queue.backoff.ms", "100"),
            ("max.partition.fetch.bytes", "2000"),
        ] {
            cfg.kafka.consumer.insert(k.into(), v.into());
        }
        cfg
    }

    /// Creates `topic` with `partitions` on both clusters.
    pub async fn create_topic(&self, topic: &str, partitions: i32) {
        testkit::create_topic(&self.a, topic, partitions).await;
        testkit::create_topic(&self.b, topic, partitions).await;
    }

    /// [`replicate_live`] of `topic` from A to B on a blocking thread.
    pub fn spawn_traffic(
        &self,
        topic: &str,
        traffic: Traffic,
    ) -> tokio::task::JoinHandle<Replicated> {
        self.spawn_traffic_with(topic, traffic, json_message)
    }

    /// [`replicate_live_with`] of `topic` from A to B on a blocking thread.
    pub fn spawn_traffic_with(
        &self,
        topic: &str,
        traffic: Traffic,
        message: impl Fn(u64, i64) -> (Vec<u8>, i64, Option<i64>) + Send + 'static,
    ) -> tokio::task::JoinHandle<Replicated> {
        let (a, b, topic) = (self.a.clone(), self.b.clone(), topic.to_string());
        tokio::task::spawn_blocking(move || replicate_live_with(&a, &b, &topic, traffic, message))
    }

    /// Runs an auditor until the rig stops.
    pub fn spawn_auditor(&self, cfg: audit_service::Config) -> Service {
        tokio::spawn(audit_service::run(cfg, self.stop.clone()))
    }

    /// Both audit topics as collector sources.
    pub fn sources(&self) -> [(&str, &str, &str); 2] {
        [("a", &self.a, &self.audit_a), ("b", &self.b, &self.audit_b)]
    }

    /// A collector config for both sources into the rig's database: `max_messages` per
    /// batch, librdkafka `consumer` properties (TOML lines, may be empty). Each source
    /// takes replication evidence from its audit topic's [`evidence_topic`] only.
    pub fn collect(&self, max_messages: usize, consumer: &str) -> collector::CollectConfig {
        let mut config =
            collect_config_with(&self.store_url, &self.sources(), max_messages, consumer);
        for (source, audit) in config
            .sources
            .iter_mut()
            .zip([&self.audit_a, &self.audit_b])
        {
            source.evidence_topics = vec![evidence_topic(audit)];
        }
        config
    }

    /// Runs a collector until `until` is cancelled.
    pub fn spawn_collector(
        &self,
        cfg: collector::CollectConfig,
        until: &tokio_util::sync::CancellationToken,
    ) -> Service {
        tokio::spawn(collector::run(cfg, until.clone()))
    }

    /// serve's state on the rig's database (regional dc1 → aggregate agg, alerts to the
    /// rig's receiver) and its running jobs.
    pub async fn serve(&self, stall_after: &str) -> (AppState, Vec<tokio::task::JoinHandle<()>>) {
        self.serve_with(serve_config(r#"{ dc1 = "agg" }"#, stall_after, &self.hook))
            .await
    }

    /// serve's state with `config` on the rig's store, and its running jobs.
    pub async fn serve_with(
        &self,
        config: web::Config,
    ) -> (AppState, Vec<tokio::task::JoinHandle<()>>) {
        let store = store::Store::connect(&self.store_url)
            .await
            .expect("connect");
        store.migrate().await.expect("migrate");
        let state = AppState::new(config, store).expect("state");
        let jobs = state.spawn_jobs(&self.stop);
        (state, jobs)
    }

    /// Stops every service and job and waits for them; a service that failed fails the
    /// test. Call it before asserting, so a failed assertion does not leave the test
    /// waiting on service threads.
    pub async fn shutdown(
        &self,
        services: impl IntoIterator<Item = Service>,
        jobs: Vec<tokio::task::JoinHandle<()>>,
    ) {
        self.stop.cancel();
        for s in services {
            s.await.expect("service task").expect("service result");
        }
        for j in jobs {
            j.await.expect("job");
        }
    }
}

/// A running auditor or collector.
pub type Service = tokio::task::JoinHandle<anyhow::Result<()>>;

/// The start of the one-topic tests: [`TwoTiers::new`]`(name)`, a unique topic `name…`
/// of `partitions` on both clusters, its regional auditor, the collector (500 messages
/// a batch) and serve (stall after 30 min) with its jobs running. The aggregate auditor
/// and the traffic are the test's.
pub struct OneTopic {
    pub rig: TwoTiers,
    pub topic: String,
    pub state: AppState,
    services: std::sync::Mutex<Vec<Service>>,
    jobs: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl OneTopic {
    pub async fn start(name: &str, partitions: i32) -> OneTopic {
        Self::start_in(TwoTiers::new(name).await, name, partitions, |_| {}).await
    }

    /// [`OneTopic::start`] on `rig`, with the collector's config changed by `collect`.
    pub async fn start_in(
        rig: TwoTiers,
        name: &str,
        partitions: i32,
        collect: impl FnOnce(&mut collector::CollectConfig),
    ) -> OneTopic {
        let topic = testkit::unique(name);
        rig.create_topic(&topic, partitions).await;
        let upstream = rig.spawn_auditor(rig.regional(&[&topic]));
        let mut config = rig.collect(500, "");
        collect(&mut config);
        let collector = rig.spawn_collector(config, &rig.stop);
        let (state, jobs) = rig.serve("30m").await;
        OneTopic {
            rig,
            topic,
            state,
            services: std::sync::Mutex::new(vec![upstream, collector]),
            jobs: std::sync::Mutex::new(jobs),
        }
    }

    /// The late downstream tier of [`Traffic::loss_then_duplication`], `traffic` just
    /// spawned: the aggregate auditor ([`TwoTiers::slow_aggregate`]) starts two windows
    /// (and a grace) after the traffic and catches up over several reports. Waits for
    /// the traffic to end, then (bounded) for its windows final with both tiers' counts
    /// in, then for the two pages it must raise: the traffic, whether its windows were
    /// all final, whether both pages came.
    pub async fn late_downstream(
        &self,
        traffic: tokio::task::JoinHandle<Replicated>,
    ) -> (Replicated, bool, bool) {
        let (rig, topic) = (&self.rig, self.topic.as_str());
        let started = now_ms() / WINDOW_MS * WINDOW_MS;
        sleep_until_ms(started + 2 * WINDOW_MS + 5_000).await;
        let downstream = rig.spawn_auditor(rig.slow_aggregate(&[topic]));
        self.services.lock().unwrap().push(downstream);
        let sent = traffic.await.expect("traffic");
        let all_final = wait_sent_final(&self.state, topic, &sent, Duration::from_secs(240)).await;
        let both_paged = rig.pages.wait_for(topic, 2, Duration::from_secs(20)).await;
        (sent, all_final, both_paged)
    }

    /// What a run of [`OneTopic::late_downstream`] must show, asserted after
    /// [`OneTopic::shutdown`]: first the pages (what woke someone over the whole run:
    /// one trigger per faulty window, nothing else), then its windows all final with
    /// both tiers' counts in and judged (`judged`) a final loss in window 1 and a final
    /// duplication in window 2.
    pub fn assert_loss_then_duplication(
        &self,
        sent: &Replicated,
        judged: &[Judged],
        all_final: bool,
        both_paged: bool,
    ) {
        let pages = &self.rig.pages;
        assert!(both_paged, "pages: {:?}", pages.all());
        let mut got = pages.of(&self.topic);
        got.sort();
        assert_eq!(
            got,
            sent.loss_then_duplication_pages(),
            "every page of the run (verdicts {judged:?}, sent {sent:?}): {:#?}",
            pages.all()
        );
        assert!(
            all_final,
            "windows not all final with all counts in: {judged:?} (sent {sent:?})"
        );
        assert_eq!(
            judged,
            sent.loss_then_duplication_verdicts(),
            "sent {sent:?}"
        );
    }

    /// [`TwoTiers::shutdown`] of the regional auditor, the collector, serve's jobs, the
    /// late downstream auditor if started, and `more`.
    pub async fn shutdown(&self, more: impl IntoIterator<Item = Service>) {
        let mut services = std::mem::take(&mut *self.services.lock().unwrap());
        services.extend(more);
        let jobs = std::mem::take(&mut *self.jobs.lock().unwrap());
        self.rig.shutdown(services, jobs).await;
    }
}

/// A replay (or backfill, or spool drain) of old events: `per_window` JSON messages in
/// each of the `windows` windows (`window_ms` long) before the current one, their event
/// times (`ts`) in those windows and their CreateTime the time they are written, the
/// windows interleaved (message `i` in window `i · 7919 mod windows`), round-robin over
/// `partitions`.
#[derive(Debug, Clone, Copy)]
pub struct Replay {
    pub windows: i64,
    pub per_window: u64,
    pub partitions: i32,
    pub window_ms: i64,
}

impl Replay {
    /// The start of its first window, for a replay written now.
    pub fn base(&self) -> i64 {
        now_ms() / self.window_ms * self.window_ms - self.windows * self.window_ms
    }

    /// Message `i` of source `source` (sources write different messages): its
    /// record, CreateTime now, and the window its event time is in.
    pub fn message(&self, source: usize, i: u64, base: i64) -> (Copy, i64) {
        let window = base + (i as i64 * 7919).rem_euclid(self.windows) * self.window_ms;
        let ts = window + (i as i64 * 37) % self.window_ms;
        (
            Copy {
                key: format!("s{source}-k{i}"),
                value: format!("{{\"id\":{i},\"src\":{source},\"ts\":{ts}}}").into_bytes(),
                partition: (i % self.partitions as u64) as i32,
                create_time: now_ms(),
            },
            window,
        )
    }

    /// Messages per source.
    pub fn len(&self) -> u64 {
        self.per_window * self.windows as u64
    }
}

/// Writes `replay` (its windows from `base`, see [`Replay::base`]) to `topic` on every
/// cluster of `upstreams` (each source its own messages, the sources alternating so
/// that their CreateTimes interleave), then, as a
/// replicator `copy_after` behind the last record would, copies everything to the same
/// topic on `downstream` in the order it was written, partition and CreateTime kept,
/// with `faults` on the first source's copies (windows counted from the replay's
/// first). Per window: (upstream count over all sources, downstream count). Runs on the
/// calling thread.
pub fn replay_then_copy(
    upstreams: &[&str],
    downstream: &str,
    topic: &str,
    (replay, base): (Replay, i64),
    faults: Faults,
    copy_after: Duration,
) -> Replicated {
    let sources: Vec<_> = upstreams.iter().map(|b| producer(b)).collect();
    let mut out = Replicated::default();
    let mut nth: BTreeMap<i64, u64> = BTreeMap::new();
    let mut copies = Vec::new();
    for i in 0..replay.len() {
        for (s, p) in sources.iter().enumerate() {
            let (record, window) = replay.message(s, i, base);
            record.send(p, topic);
            let n = if s == 0 {
                let k = nth.entry(window).or_default();
                *k += 1;
                faults.copies((window - base) / replay.window_ms, *k)
            } else {
                1
            };
            let w = out.windows.entry(window).or_default();
            w.0 += 1;
            w.1 += n;
            copies.extend(std::iter::repeat_n(record, n as usize));
        }
    }
    sources.iter().for_each(flush);
    std::thread::sleep(copy_after);
    let p = producer(downstream);
    for c in &copies {
        c.send(&p, topic);
    }
    flush(&p);
    out
}
