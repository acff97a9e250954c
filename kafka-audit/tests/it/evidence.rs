//! The evidence rule on real brokers: a window is final on an edge only when the
//! downstream auditor has read what the upstream counted in it (docs/web.md, Verdicts,
//! rule 4). Real auditors (exactly-once, running before the traffic), the collector,
//! serve with its evaluation job and alerting to a local webhook receiver; what the
//! receiver got over the whole run is asserted, not only the final verdicts.
//!
//! - A replay: 6 ten-minute windows of the last hour × 3 000 JSON messages, CreateTime
//!   now, copied by a replicator a few seconds later (37 dropped in w2, 11 sent twice
//!   in w3, 9 dropped and 9 others sent twice in w4), grace 30 s: on SQLite, on
//!   PostgreSQL, and with three clusters (dc1 and dc2 → agg). Every window exact, and
//!   exactly the three injected pages. Before the rule every window was final at once
//!   with the downstream at 0 and paged loss, resolved when the copies came.
//! - The same replay through a replicator paused for longer than grace: on-call is told
//!   `delayed` for each window (how far behind), never loss, and it resolves when the
//!   copies arrive.
//! - A spool drain: producer-tier counts (audit-lib embedded) of hour-old windows, the
//!   data in the regional cluster two minutes later, the replicator 30 s further
//!   behind: no page, then exact verdicts.
//! - Live traffic with 5 % late uploads (event times 20–60 minutes old) and a real loss
//!   of 37 in one live window: exactly that page.

use crate::e2e::{self, Faults, Pages, Replay, Replicated, TwoTiers};
use crate::support::{producer, WINDOW_MS};

use std::time::Duration;

use audit_lib::{Aggregator, AuditMessage, EventTimeConfig, Identity, Limits, Observation};
use store::VerdictReads;
use web::engine::{Lifecycle, Verdict};
use web::AppState;

const TEN_MINUTES: i64 = 600_000;
const PARTITIONS: i32 = 3;

/// The replay (the module's first case).
const REPLAY: Replay = Replay {
    windows: 6,
    per_window: 3_000,
    partitions: PARTITIONS,
    window_ms: TEN_MINUTES,
};

/// What the replicator does to the replay (windows from its first).
const REPLAY_FAULTS: Faults = Faults {
    loss: Some((2, 37)),
    dup: Some((3, 11)),
    masked: Some((4, 9)),
};

/// `cfg` counting in ten-minute windows.
fn ten_minutes(mut cfg: audit_service::Config) -> audit_service::Config {
    cfg.audit.event_time.window_size = audit_lib::WindowSize::from_millis(TEN_MINUTES).unwrap();
    cfg
}

/// One auditor of the scenario: tier, datacenter, cluster, audit topic.
type Auditor<'a> = (&'a str, &'a str, &'a str, &'a str);

/// A running scenario: its rig, topic, serve and the services to stop.
struct Run {
    rig: TwoTiers,
    topic: String,
    state: AppState,
    services: Vec<e2e::Service>,
    jobs: Vec<tokio::task::JoinHandle<()>>,
}

impl Run {
    /// The topic on every cluster of `auditors`, their auditors (ten-minute windows),
    /// the collector of their audit topics and serve with `config`; returns once every
    /// auditor has reported progress, so all run before the traffic.
    async fn start(rig: TwoTiers, auditors: &[Auditor<'_>], config: web::Config) -> Run {
        let topic = testkit::unique("evidence");
        let mut clusters: Vec<&str> = auditors.iter().map(|a| a.2).collect();
        clusters.dedup();
        for c in &clusters {
            testkit::create_topic(c, &topic, PARTITIONS).await;
        }
        let mut services = Vec::new();
        let mut wals = Vec::new();
        for (tier, dc, cluster, audit) in auditors {
            let wal = tempfile::tempdir().unwrap();
            let cfg = e2e::tier_config(cluster, &topic, audit, tier, dc, wal.path());
            services.push(rig.spawn_auditor(ten_minutes(cfg)));
            wals.push(wal);
        }
        let sources: Vec<(String, &str, &str)> = auditors
            .iter()
            .map(|(tier, dc, cluster, audit)| (format!("{tier}-{dc}"), *cluster, *audit))
            .collect();
        let sources: Vec<(&str, &str, &str)> = sources
            .iter()
            .map(|(n, c, a)| (n.as_str(), *c, *a))
            .collect();
        // serve migrates the store before the collector starts: two processes
        // migrating a new SQLite file at once race (sqlx takes no lock on SQLite).
        let (state, jobs) = rig.serve_with(config).await;
        services.push(rig.spawn_collector(
            e2e::collect_config(&rig.store_url, &sources, 500),
            &rig.stop,
        ));
        let reporting = testkit::wait_until_async(Duration::from_secs(120), || {
            let (store, topic) = (&state.store, &topic);
            async move {
                let p = store.progress(Some(topic)).await.expect("progress");
                let ok = auditors
                    .iter()
                    .all(|(t, d, ..)| p.iter().any(|r| r.tier == *t && r.datacenter == *d));
                if !ok {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                ok
            }
        })
        .await;
        assert!(
            reporting,
            "the auditors did not report progress within 120 s"
        );
        // The WAL directories live as long as their auditors: until the rig stops.
        std::mem::forget(wals);
        Run {
            rig,
            topic,
            state,
            services,
            jobs,
        }
    }

    /// [`Run::start`] on the rig's two clusters: regional/dc1 on A, aggregate/agg on B.
    async fn regional_to_aggregate(rig: TwoTiers, config: web::Config) -> Run {
        let (a, b) = (rig.a.clone(), rig.b.clone());
        let (audit_a, audit_b) = (rig.audit_a.clone(), rig.audit_b.clone());
        Run::start(
            rig,
            &[
                ("regional", "dc1", &a, &audit_a),
                ("aggregate", "agg", &b, &audit_b),
            ],
            config,
        )
        .await
    }

    /// The rig's clusters A and B.
    fn clusters(&self) -> (String, String) {
        (self.rig.a.clone(), self.rig.b.clone())
    }

    fn pages(&self) -> &Pages {
        &self.rig.pages
    }

    /// Waits (bounded) until every window of `[from, to)` is final with the counts of
    /// `sent` in at the regional and aggregate tiers; then whether each window's stored
    /// counts at both tiers are exactly `sent`'s.
    async fn final_and_exact(&self, sent: &Replicated, (from, to): (i64, i64)) -> (bool, bool) {
        let (up, down) = sent.total();
        let all_final = e2e::wait_final(
            &self.state,
            &self.topic,
            (from, to),
            &[("regional", up), ("aggregate", down)],
            false,
            Duration::from_secs(240),
        )
        .await;
        let rows = self
            .state
            .store
            .topic_windows(&self.topic, store::TimeRange::new(from, to))
            .await
            .expect("rows");
        let stored = |tier: &str, w: i64| -> u64 {
            rows.iter()
                .filter(|r| r.tier == tier && r.window_start_ms == w)
                .map(|r| r.count)
                .sum()
        };
        let exact = sent
            .windows
            .iter()
            .all(|(&w, &(u, d))| stored("regional", w) == u && stored("aggregate", w) == d);
        (all_final, exact)
    }

    /// Non-ok verdicts of the run's topic in `[from, to)`.
    fn judged(&self, (from, to): (i64, i64)) -> Vec<e2e::Judged> {
        e2e::anomalies(&self.state, &self.topic, from, to)
    }

    async fn shutdown(self) -> Pages {
        let Run {
            rig,
            services,
            jobs,
            ..
        } = self;
        rig.shutdown(services, jobs).await;
        rig.pages.clone()
    }
}

/// A page as [`Pages::of`] lists it: (action, verdict, window start).
type Page = (String, String, Option<i64>);

/// serve for regional → aggregate with `datacenters`, ten-minute windows and `grace`.
fn serve(rig: &TwoTiers, datacenters: &str, grace: &str) -> web::Config {
    e2e::serve_config_timed("10m", grace, datacenters, "30m", &rig.hook)
}

/// The verdicts and pages [`REPLAY_FAULTS`] must give: w2 loss, w3 duplication, w4
/// mismatch (final, with the counts sent), one trigger each, sorted as
/// [`Pages::of`] sorted.
fn injected(sent: &Replicated, base: i64) -> (Vec<e2e::Judged>, Vec<Page>) {
    let w = |i: i64| base + i * TEN_MINUTES;
    let judged = [
        (2, Verdict::Loss),
        (3, Verdict::Duplication),
        (4, Verdict::Mismatch),
    ]
    .map(|(i, v)| {
        let (u, d) = sent.windows[&w(i)];
        (w(i), v, Lifecycle::Final, u, d)
    })
    .to_vec();
    let page = |v: &str, i| ("trigger".to_string(), v.to_string(), Some(w(i)));
    let pages = vec![page("duplication", 3), page("loss", 2), page("mismatch", 4)];
    (judged, pages)
}

/// The replay from `upstreams` to `downstream`, copied 5 s after it was
/// written, through `run`; asserts every window exact and exactly the injected pages
/// over the whole run.
async fn replay_pages_only_its_faults(run: Run, upstreams: &[&str], downstream: &str) {
    let (ups, down, topic) = (
        upstreams.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        downstream.to_string(),
        run.topic.clone(),
    );
    let base = REPLAY.base();
    let sent = tokio::task::spawn_blocking(move || {
        let ups: Vec<&str> = ups.iter().map(String::as_str).collect();
        e2e::replay_then_copy(
            &ups,
            &down,
            &topic,
            (REPLAY, base),
            REPLAY_FAULTS,
            Duration::from_secs(5),
        )
    })
    .await
    .expect("replay");
    let range = (base, base + REPLAY.windows * TEN_MINUTES);
    let (all_final, exact) = run.final_and_exact(&sent, range).await;
    let (want_judged, want_pages) = injected(&sent, base);
    let paged = run
        .pages()
        .wait_for(&run.topic, want_pages.len(), Duration::from_secs(30))
        .await;
    // Two more evaluation cycles: a page that comes late would show.
    e2e::sleep_until_ms(common::now_ms() + 1_500).await;
    let judged = run.judged(range);
    let topic = run.topic.clone();
    let pages = run.shutdown().await;
    let mut got = pages.of(&topic);
    got.sort();
    assert!(paged, "pages: {:#?}", pages.all());
    // reverted (rule 4): every window paged loss within seconds (downstream 0), then
    // resolved as the copies were read.
    assert_eq!(
        got,
        want_pages,
        "every page of the run (verdicts {judged:?}): {:#?}",
        pages.all()
    );
    assert!(
        all_final && exact,
        "final {all_final}, counts exact {exact}: {judged:?}, sent {sent:?}"
    );
    assert_eq!(judged, want_judged, "sent {sent:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replay_pages_only_its_faults_sqlite() {
    let _alone = crate::ALONE.lock().await;
    let rig = TwoTiers::on_sqlite("replay-sqlite").await;
    let config = serve(&rig, r#"{ dc1 = "agg" }"#, "30s");
    let run = Run::regional_to_aggregate(rig, config).await;
    let (a, b) = run.clusters();
    replay_pages_only_its_faults(run, &[&a], &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replay_pages_only_its_faults_postgres() {
    let _alone = crate::ALONE.lock().await;
    let rig = TwoTiers::new("replay-pg").await;
    let config = serve(&rig, r#"{ dc1 = "agg" }"#, "30s");
    let run = Run::regional_to_aggregate(rig, config).await;
    let (a, b) = run.clusters();
    replay_pages_only_its_faults(run, &[&a], &b).await;
}

/// dc1 (cluster A) and dc2 (cluster B) replay different messages, interleaved in time;
/// one replicator copies both into the aggregate cluster (a private one this test
/// starts) in the order they were written, with the faults on dc1's copies.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replay_pages_only_its_faults_on_three_clusters() {
    let _alone = crate::ALONE.lock().await;
    let agg = tokio::task::block_in_place(crate::support::PrivateKafka::start);
    let p = agg.bootstrap();
    let rig = TwoTiers::new("replay-three").await;
    let audit_p = testkit::create_unique_topic(&p, "replay-three-audit", 3).await;
    let (a, b) = (rig.a.clone(), rig.b.clone());
    let config = serve(&rig, r#"{ dc1 = "agg", dc2 = "agg" }"#, "30s");
    let (audit_a, audit_b) = (rig.audit_a.clone(), rig.audit_b.clone());
    let run = Run::start(
        rig,
        &[
            ("regional", "dc1", &a, &audit_a),
            ("regional", "dc2", &b, &audit_b),
            ("aggregate", "agg", &p, &audit_p),
        ],
        config,
    )
    .await;
    replay_pages_only_its_faults(run, &[&a, &b], &p).await;
    drop(agg);
}

/// The replay through a replicator paused for longer than grace (its copies come 60 s
/// after the records, grace is 30 s): on-call is told `delayed` for every window,
/// with how far behind the downstream is, never `loss`; each resolves when the copies
/// are read and the window is final and ok (docs/web.md, "A paused replicator").
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replicator_paused_past_grace_is_delayed_not_loss() {
    let _alone = crate::ALONE.lock().await;
    let rig = TwoTiers::new("replay-paused").await;
    let config = serve(&rig, r#"{ dc1 = "agg" }"#, "30s");
    let run = Run::regional_to_aggregate(rig, config).await;
    let (a, b) = run.clusters();
    let replay = Replay {
        per_window: 500,
        ..REPLAY
    };
    let base = replay.base();
    let (a2, b2, topic) = (a.clone(), b.clone(), run.topic.clone());
    let copier = tokio::task::spawn_blocking(move || {
        e2e::replay_then_copy(
            &[&a2],
            &b2,
            &topic,
            (replay, base),
            Faults::NONE,
            Duration::from_secs(60),
        )
    });
    let windows: Vec<i64> = (0..replay.windows)
        .map(|i| base + i * TEN_MINUTES)
        .collect();
    // Every window delayed while the replicator holds the copies.
    let delayed = run
        .pages()
        .wait_for(&run.topic, windows.len(), Duration::from_secs(55))
        .await;
    let during = run.pages().all();
    let sent = copier.await.expect("replay");
    let range = (base, base + replay.windows * TEN_MINUTES);
    let (all_final, exact) = run.final_and_exact(&sent, range).await;
    let resolved = run
        .pages()
        .wait_for(&run.topic, 2 * windows.len(), Duration::from_secs(30))
        .await;
    e2e::sleep_until_ms(common::now_ms() + 1_500).await;
    let judged = run.judged(range);
    let topic = run.topic.clone();
    let pages = run.shutdown().await;
    assert!(delayed && resolved, "pages: {:#?}", pages.all());
    let mut got = pages.of(&topic);
    got.sort();
    let want: Vec<_> = ["resolve", "trigger"]
        .iter()
        .flat_map(|action| {
            windows
                .iter()
                .map(|&w| (action.to_string(), "delayed".to_string(), Some(w)))
        })
        .collect();
    // reverted (rule 4): loss pages at once (downstream 0), resolved when the copies
    // came; with the clock fallback instead of record times: loss after grace.
    assert_eq!(got, want, "every page of the run: {:#?}", pages.all());
    for p in during.iter().filter(|p| p["topic"] == topic.as_str()) {
        let reason = p["reason"].as_str().unwrap_or_default();
        assert!(
            reason.starts_with("aggregate/agg has nothing in partition")
                && reason.contains("and the grace period after them has passed")
                && reason.ends_with("(a replicator paused or behind?)"),
            "what on-call reads: {p:#}"
        );
    }
    assert!(
        all_final && exact,
        "final {all_final}, exact {exact}: {judged:?}"
    );
    assert_eq!(judged, vec![], "every window ok once the copies are in");
}

/// A producer that spooled while its cluster was down: it counted `replay`'s messages
/// (audit-lib embedded, no partitions known) when it took them, and sends its counts
/// at once (to the audit topic the collector reads).
fn producer_tier_counts(
    audit_topic: &str,
    bootstrap: &str,
    topic: &str,
    replay: Replay,
    base: i64,
) {
    let mut agg = Aggregator::new(
        Identity::new("producer", "dc1", "spooling-producer-0"),
        EventTimeConfig {
            window_size: audit_lib::WindowSize::from_millis(TEN_MINUTES).unwrap(),
            ..EventTimeConfig::default()
        },
        Limits {
            track_offsets: false,
            ..Limits::default()
        },
    )
    .expect("aggregator");
    for i in 0..replay.len() {
        let (record, _) = replay.message(0, i, base);
        agg.record(&Observation {
            key: Some(record.key.as_bytes()),
            // The CreateTime comes when the spool is sent: not known now.
            ..Observation::new(topic, &record.value, common::now_ms())
        });
    }
    let p = producer(bootstrap);
    for m in agg.drain(common::now_ms()) {
        let json = AuditMessage::to_json(&m);
        crate::support::send_queued(
            &p,
            rdkafka::producer::BaseRecord::to(audit_topic)
                .key(&m.topic)
                .payload(&json),
        );
    }
    rdkafka::producer::Producer::flush(&p, Duration::from_secs(30)).expect("flush");
}

/// The spool drain: the producer tier's counts of six hour-old windows, the data in
/// the regional cluster 2 minutes after them, the replicator 30 s behind that; grace 2
/// min 30 s (how long late data is waited for at the first tier: the spool's 2 minutes
/// must be within it). No page over the whole run, then every window final and exact
/// at all three tiers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_spool_drain_pages_nothing_then_is_exact() {
    // Not `ALONE`: it idles for minutes (the spool, the grace), and its only race (the
    // regional must read the drain within the 30 s between the spool's 2 minutes and
    // grace) is loose.
    let started = common::now_ms();
    let rig = TwoTiers::new("spool-drain").await;
    let config: web::Config = toml::from_str(&format!(
        r#"
[serve]
evaluate_every = "500ms"
[topology]
window = "10m"
grace = "150s"
stall_after = "30m"
tiers = [{{ name = "producer", progress = false }}, {{ name = "regional" }}, {{ name = "aggregate" }}]
[[topology.edges]]
upstream = "producer"
downstream = "regional"
[[topology.edges]]
upstream = "regional"
downstream = "aggregate"
datacenters = {{ dc1 = "agg" }}
[[alerting.channels]]
name = "hook"
kind = "webhook"
url = "{}"
"#,
        rig.hook
    ))
    .expect("serve config parses");
    let audit_a = rig.audit_a.clone();
    let run = Run::regional_to_aggregate(rig, config).await;
    let (a, b) = run.clusters();
    let replay = Replay {
        per_window: 1_000,
        ..REPLAY
    };
    let base = replay.base();
    let range = (base, base + replay.windows * TEN_MINUTES);
    let (a2, audit2, topic2) = (a.clone(), audit_a.clone(), run.topic.clone());
    tokio::task::spawn_blocking(move || producer_tier_counts(&audit2, &a2, &topic2, replay, base))
        .await
        .expect("producer counts");
    let counted = common::now_ms();
    eprintln!(
        "spool drain: producer counts sent {} s after the start",
        (counted - started) / 1000
    );
    // The cluster is back 2 minutes later: the spool drains (CreateTime now), and a
    // replicator copies it 30 s after.
    e2e::sleep_until_ms(counted + 120_000).await;
    let (b2, topic) = (b.clone(), run.topic.clone());
    let sent = tokio::task::spawn_blocking(move || {
        e2e::replay_then_copy(
            &[&a],
            &b2,
            &topic,
            (replay, base),
            Faults::NONE,
            Duration::from_secs(30),
        )
    })
    .await
    .expect("spool drain");
    let producer_in = testkit::wait_until_async(Duration::from_secs(30), || async {
        let rows = run
            .state
            .store
            .topic_windows(&run.topic, store::TimeRange::new(range.0, range.1))
            .await
            .expect("rows");
        sent.windows.iter().all(|(&w, &(u, _))| {
            rows.iter()
                .any(|r| r.tier == "producer" && r.window_start_ms == w && r.count == u)
        })
    })
    .await;
    let (all_final, exact) = run.final_and_exact(&sent, range).await;
    eprintln!(
        "spool drain: both tiers final and exact {} s after the counts",
        (common::now_ms() - counted) / 1000
    );
    // The producer → regional edge is judged too (final: every regional partition read
    // past the producer's counts + grace).
    let producer_edge_final = testkit::wait_until_async(Duration::from_secs(60), || async {
        run.state.evaluate(common::now_ms()).await.expect("cycle");
        run.state
            .index
            .read()
            .unwrap()
            .in_range(range.0, range.1)
            .all(|e| e.topic != run.topic || e.lifecycle == Lifecycle::Final)
    })
    .await;
    eprintln!(
        "spool drain: producer edge final {} s after the counts",
        (common::now_ms() - counted) / 1000
    );
    e2e::sleep_until_ms(common::now_ms() + 1_500).await;
    let judged = run.judged(range);
    let topic = run.topic.clone();
    let pages = run.shutdown().await;
    // reverted (rule 4): every producer → regional window paged loss at once (regional
    // at 0), resolved two minutes later.
    assert_eq!(
        pages.of(&topic),
        vec![],
        "no page over the whole run: {:#?}",
        pages.all()
    );
    assert!(producer_in, "the producer tier's counts were not stored");
    assert!(
        all_final && exact && producer_edge_final,
        "final {all_final}, exact {exact}, producer edge final {producer_edge_final}: {judged:?}"
    );
    assert_eq!(judged, vec![], "every window ok at both edges");
}

/// Message `i` of the late-uploads traffic at `now`: 1 in 20 carries an event time 20
/// to 60 minutes old (a client uploading late); CreateTime now for all.
fn late_upload(i: u64, now: i64) -> (Vec<u8>, i64, Option<i64>) {
    let ts = if i % 20 == 7 {
        now - 20 * 60_000 - (i * 7919 % 2_400_000) as i64
    } else {
        now
    };
    (
        format!("{{\"id\":{i},\"ts\":{ts}}}").into_bytes(),
        now,
        Some(ts),
    )
}

/// Live traffic (10 s windows, grace 5 s) of which 5 % are late uploads, through a
/// replicator 3 s behind, with 37 messages of the second live window lost: exactly
/// that page. The old windows the late uploads land in are judged as their copies are
/// read (re-armed by every new upload), never paged.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn late_uploads_page_only_the_real_loss() {
    let _alone = crate::ALONE.lock().await;
    let rig = TwoTiers::new("late-uploads").await;
    let topic = testkit::unique("late-uploads");
    rig.create_topic(&topic, PARTITIONS).await;
    let services = vec![
        rig.spawn_auditor(rig.regional(&[&topic])),
        rig.spawn_auditor(rig.aggregate(&[&topic])),
        rig.spawn_collector(rig.collect(500, ""), &rig.stop),
    ];
    let (state, jobs) = rig.serve("30m").await;
    let traffic = e2e::Traffic {
        partitions: PARTITIONS,
        rate: 100,
        duration: Duration::from_secs(35),
        faults: Faults {
            loss: Some((1, 37)),
            ..Faults::NONE
        },
    };
    let (a, b, t) = (rig.a.clone(), rig.b.clone(), topic.clone());
    let sent = tokio::task::spawn_blocking(move || {
        e2e::replicate_live_delayed(&a, &b, &t, traffic, Duration::from_secs(3), late_upload)
    })
    .await
    .expect("traffic");
    let (from, to) = (*sent.windows.keys().next().unwrap(), sent.end());
    let (up, down) = sent.total();
    let all_final = e2e::wait_final(
        &state,
        &topic,
        (from, to),
        &[("regional", up), ("aggregate", down)],
        false,
        Duration::from_secs(120),
    )
    .await;
    let lossy = sent
        .windows
        .iter()
        .find(|(_, (u, d))| u != d)
        .map(|(&w, &c)| (w, c));
    let paged = rig.pages.wait_for(&topic, 1, Duration::from_secs(20)).await;
    e2e::sleep_until_ms(common::now_ms() + 1_500).await;
    let judged = e2e::anomalies(&state, &topic, from, to);
    rig.shutdown(services, jobs).await;
    let Some((w, (u, d))) = lossy else {
        panic!("no lossy window sent: {sent:?}")
    };
    assert_eq!(u - d, 37, "the loss injected");
    let late_windows = sent.windows.keys().filter(|&&k| k < w - WINDOW_MS).count();
    assert!(
        late_windows > 20,
        "late uploads in {late_windows} old windows"
    );
    assert!(paged, "pages: {:#?}", rig.pages.all());
    // reverted (rule 4): old windows paged loss when an upload's upstream increment
    // came before its copy was read, and resolved a report later.
    assert_eq!(
        rig.pages.of(&topic),
        vec![("trigger".to_string(), "loss".to_string(), Some(w))],
        "every page of the run: {:#?}",
        rig.pages.all()
    );
    assert!(all_final, "not all final: {judged:?}");
    assert_eq!(judged, vec![(w, Verdict::Loss, Lifecycle::Final, u, d)]);
}
