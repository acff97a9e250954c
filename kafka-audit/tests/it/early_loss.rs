//! A loss proven within a minute (docs/web.md, Replication evidence): a consumer-group
//! replicator (the suite's own: it consumes cluster A in a group, writes each record to
//! cluster B with its key, partition and CreateTime, and commits only what it has
//! flushed) drops 37 records. The regional auditor of A publishes the group's committed
//! offsets as replication evidence; serve's edge names the replicator. With 10-minute
//! windows and the default 20-minute grace, the loss must be paged within 60 s of the
//! drop, while its window is still open, and nothing else may page over the whole run.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::replication::Replicator;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::ClientConfig;
use store::VerdictReads;
use web::engine::{Lifecycle, SoFar, Verdict};

use crate::e2e::*;
use crate::support::{producer, send_queued};

const PARTITIONS: i32 = 3;
const WINDOW: i64 = 600_000;
const DROPPED: u64 = 37;
/// Traffic: messages per second, and the longest it runs.
const RATE: u64 = 5;
const TRAFFIC_FOR: Duration = Duration::from_secs(240);

/// The one page the run must raise, and when the drop happened.
struct Drop {
    /// The first event time whose records are dropped (the 37 first at or after it).
    from: i64,
    /// When the first of them was skipped (epoch ms; 0 until then).
    first_at: AtomicI64,
    /// When the last of them was skipped (epoch ms; 0 until then).
    done_at: AtomicI64,
}

/// The first drop time: 15 s into the traffic, or 5 s into the next window when the
/// current one ends within two minutes of that (the page must come while the window
/// is open).
fn drop_from(now: i64) -> i64 {
    let t = now + 15_000;
    let end = (t / WINDOW + 1) * WINDOW;
    if end - t < 120_000 {
        end + 5_000
    } else {
        t
    }
}

/// Traffic to `topic` on A: JSON with event time `ts` = the time of sending (also the
/// CreateTime), key `k<i>`, round-robin over the partitions, until `stop` (for at most
/// `longest`). Returns
/// how many were sent per window.
fn traffic(a: &str, topic: &str, stop: &AtomicBool, longest: Duration) -> BTreeMap<i64, u64> {
    let mut sent = BTreeMap::new();
    let p = producer(a);
    let started = Instant::now();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) && started.elapsed() < longest {
        let due = started + Duration::from_micros(i * 1_000_000 / RATE);
        if let Some(w) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(w);
        }
        let ts = common::now_ms();
        *sent.entry(ts / WINDOW * WINDOW).or_default() += 1;
        let value = format!("{{\"id\":{i},\"ts\":{ts}}}");
        let key = format!("k{i}");
        send_queued(
            &p,
            BaseRecord::to(topic)
                .key(&key)
                .payload(&value)
                .partition((i % PARTITIONS as u64) as i32)
                .timestamp(ts),
        );
        i += 1;
    }
    p.flush(Duration::from_secs(30)).expect("flush traffic");
    sent
}

/// The replicator: group `group` on A → B, dropping the first [`DROPPED`] records
/// whose event time is at or after `drop.from`; every 300 ms it flushes its producer and
/// then commits what it has read, so a committed offset is past only what is written
/// to B (or dropped). Runs until `stop`.
fn replicator(a: &str, b: &str, topic: &str, group: &str, drop: &Drop, stop: &AtomicBool) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", a)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("replicator consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let out = producer(b);
    let mut dropped = 0u64;
    let mut last_commit = Instant::now();
    let mut read_since_commit = false;
    while !stop.load(Ordering::Relaxed) {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.expect("replicator read");
            read_since_commit = true;
            let value = m.payload().unwrap_or_default();
            let ts: i64 = serde_json::from_slice::<serde_json::Value>(value).expect("json")["ts"]
                .as_i64()
                .expect("ts");
            if ts >= drop.from && dropped < DROPPED {
                dropped += 1;
                if dropped == 1 {
                    drop.first_at.store(common::now_ms(), Ordering::SeqCst);
                }
                if dropped == DROPPED {
                    drop.done_at.store(common::now_ms(), Ordering::SeqCst);
                }
            } else {
                let mut rec = BaseRecord::to(topic)
                    .payload(value)
                    .partition(m.partition());
                if let Some(k) = m.key() {
                    rec = rec.key(k);
                }
                if let Some(t) = m.timestamp().to_millis() {
                    rec = rec.timestamp(t);
                }
                send_queued(&out, rec);
            }
        }
        if read_since_commit && last_commit.elapsed() >= Duration::from_millis(300) {
            out.flush(Duration::from_secs(30))
                .expect("replicator flush");
            consumer
                .commit_consumer_state(CommitMode::Sync)
                .expect("replicator commit");
            last_commit = Instant::now();
            read_since_commit = false;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_a_replicator_drops_are_paged_as_loss_within_a_minute_while_the_window_is_open() {
    let _alone = crate::ALONE.lock().await;
    let rig = TwoTiers::new("early-loss").await;
    let topic = testkit::unique("early-loss");
    rig.create_topic(&topic, PARTITIONS).await;
    let group = testkit::unique("e2e-mirror");
    let ten_minutes = |mut cfg: audit_service::Config| {
        cfg.audit.event_time.window_size = audit_lib::WindowSize::from_millis(WINDOW).unwrap();
        cfg
    };
    let mut regional = ten_minutes(rig.regional(&[&topic]));
    regional.audit.replicators = vec![Replicator::ConsumerGroup(group.clone())];
    let aggregate = ten_minutes(rig.aggregate(&[&topic]));
    let services = vec![
        rig.spawn_auditor(regional),
        rig.spawn_auditor(aggregate),
        rig.spawn_collector(rig.collect(500, ""), &rig.stop),
    ];
    // Default grace (20 min): only the evidence can page before the window's end.
    let (state, jobs) = rig
        .serve_with(serve_config_of(
            "10m",
            "20m",
            &regional_to_aggregate_through(&format!(r#"{{ consumer_group = "{group}" }}"#), ""),
            "30m",
            &rig.hook,
        ))
        .await;

    let stop = Arc::new(AtomicBool::new(false));
    let drop = Arc::new(Drop {
        from: drop_from(common::now_ms()),
        first_at: AtomicI64::new(0),
        done_at: AtomicI64::new(0),
    });
    let stop_traffic = Arc::new(AtomicBool::new(false));
    let sent = {
        let (a, topic, stop) = (rig.a.clone(), topic.clone(), stop_traffic.clone());
        tokio::task::spawn_blocking(move || traffic(&a, &topic, &stop, TRAFFIC_FOR))
    };
    let copier = {
        let (a, b, topic, group, drop, stop) = (
            rig.a.clone(),
            rig.b.clone(),
            topic.clone(),
            group.clone(),
            drop.clone(),
            stop.clone(),
        );
        tokio::task::spawn_blocking(move || replicator(&a, &b, &topic, &group, &drop, &stop))
    };
    let window = drop.from / WINDOW * WINDOW;
    // The drop happens within 2.5 minutes of the start; its page within a minute.
    let dropped = testkit::wait_until_async(Duration::from_secs(180), || {
        let done = drop.done_at.load(Ordering::SeqCst) > 0;
        async move {
            if !done {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            done
        }
    })
    .await;
    let paged = match dropped {
        true => rig.pages.first(&topic, Duration::from_secs(90)).await,
        false => None,
    };
    let first_at = drop.first_at.load(Ordering::SeqCst);
    // The window as the evaluator holds it when paged.
    let judged: Vec<_> = state
        .index
        .read()
        .unwrap()
        .in_range(window, window + WINDOW)
        .filter(|e| e.topic == topic)
        .map(|e| (e.verdict, e.lifecycle, e.so_far))
        .collect();
    let reasons = verdicts(&state, &topic, window);
    let (exact, counts, expected) = finish(&state, &topic, window, &stop_traffic, sent).await;
    stop.store(true, Ordering::Relaxed);
    copier.await.expect("replicator");
    let pages = rig.pages.of(&topic);
    rig.shutdown(services, jobs).await;

    assert!(dropped, "the replicator did not drop its records");
    let Some(page_at) = paged else {
        panic!("no page within 90 s of the drop ({expected:?} sent); verdicts: {reasons:#?}");
    };
    let latency = page_at - first_at;
    eprintln!(
        "early loss: paged {latency} ms after the first record was dropped; the window ends {} s later",
        (window + WINDOW - page_at) / 1000
    );
    assert!(latency <= 60_000, "paged {latency} ms after the drop");
    assert!(
        exact,
        "stored counts {counts:?}, sent (regional, aggregate) {expected:?}"
    );
    assert!(
        page_at < window + WINDOW,
        "the window had ended before the page"
    );
    assert_eq!(
        pages,
        vec![("trigger".to_string(), "loss".to_string(), Some(window))],
        "pages over the whole run"
    );
    assert_eq!(
        judged,
        vec![(Verdict::Loss, Lifecycle::Open, Some(SoFar::Loss))],
        "the window's verdict when paged: {reasons:?}"
    );
}

/// The same through a real MirrorMaker 2 (deploy/dev/mm2: cluster A as `dc1`, B as
/// `agg`, topics `mm2e2e.*`, names kept), its offset syncs as the evidence: 37 records
/// of partition 0 are deleted from the aggregate's copy (DeleteRecords on B) before
/// the aggregate auditor has read them. Paged within 60 s of the deletion, while the
/// window is open, and nothing else; stored counts exact per window.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_deleted_from_a_mirror_maker_copy_are_paged_as_loss_within_a_minute() {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::TopicPartitionList;

    let _mm2 = MM2.lock().await;
    let _alone = crate::ALONE.lock().await;
    let rig = TwoTiers::new("mm2-loss").await;
    // MirrorMaker 2 copies topics named mm2e2e.* and creates them on B itself.
    let topic = testkit::unique("mm2e2e-loss");
    testkit::create_topic(&rig.a, &topic, PARTITIONS).await;
    let syncs = "mm2-offset-syncs.agg.internal";
    assert!(
        topic_exists(&rig.a, syncs, Duration::from_secs(30)).await,
        "no {syncs} on cluster A: is MirrorMaker 2 running? (deploy/dev/mm2 start; test.sh starts it)"
    );
    let ten_minutes = |mut cfg: audit_service::Config| {
        cfg.audit.event_time.window_size = audit_lib::WindowSize::from_millis(WINDOW).unwrap();
        cfg
    };
    let mirror = Replicator::MirrorMaker2(common::replication::MirrorMaker2 {
        source: Some("dc1".into()),
        target: "agg".into(),
    });
    let mut regional = ten_minutes(rig.regional(&[&topic]));
    regional.audit.replicators = vec![mirror];
    let mut services = vec![
        rig.spawn_auditor(regional),
        rig.spawn_collector(rig.collect(500, ""), &rig.stop),
    ];
    let (state, jobs) = rig
        .serve_with(serve_config_of(
            "10m",
            "20m",
            &regional_to_aggregate_through(
                r#"{ mirror_maker2 = { source = "dc1", target = "agg" } }"#,
                "",
            ),
            "30m",
            &rig.hook,
        ))
        .await;
    // The deleted records must lie in one window, which must stay open for the page.
    let now = common::now_ms();
    if WINDOW - now % WINDOW < 150_000 {
        sleep_until_ms(now - now % WINDOW + WINDOW + 1_000).await;
    }
    let stop_traffic = Arc::new(AtomicBool::new(false));
    let sent = {
        let (a, topic, stop) = (rig.a.clone(), topic.clone(), stop_traffic.clone());
        tokio::task::spawn_blocking(move || traffic(&a, &topic, &stop, TRAFFIC_FOR))
    };
    // Wait until MirrorMaker has copied 40 records of partition 0 to B, then delete
    // the first 37 there, before any auditor of B has read them.
    let b: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &rig.b)
        .create()
        .expect("admin of B");
    let copied = testkit::wait_until_async(Duration::from_secs(90), || {
        let (b, topic) = (rig.b.clone(), topic.clone());
        async move {
            let end = tokio::task::spawn_blocking(move || high_watermark(&b, &topic, 0))
                .await
                .expect("watermark");
            if end < 40 {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            end >= 40
        }
    })
    .await;
    assert!(
        copied,
        "MirrorMaker 2 did not copy 40 records of partition 0 within 90 s"
    );
    let mut upto = TopicPartitionList::new();
    upto.add_partition_offset(&topic, 0, rdkafka::Offset::Offset(DROPPED as i64))
        .unwrap();
    let deleted = b
        .delete_records(&upto, &AdminOptions::new())
        .await
        .expect("delete records");
    assert_eq!(
        deleted.elements()[0].offset(),
        rdkafka::Offset::Offset(DROPPED as i64),
        "log start of partition 0 on B after the deletion"
    );
    let deleted_at = common::now_ms();
    let window = sent_window(deleted_at);
    services.push(rig.spawn_auditor(ten_minutes(rig.aggregate(&[&topic]))));
    let paged = rig.pages.first(&topic, Duration::from_secs(90)).await;
    let reasons = verdicts(&state, &topic, window);
    let (exact, counts, expected) = finish(&state, &topic, window, &stop_traffic, sent).await;
    let pages = rig.pages.of(&topic);
    rig.shutdown(services, jobs).await;

    let Some(page_at) = paged else {
        panic!("no page within 90 s of the deletion; verdicts: {reasons:#?}");
    };
    let latency = page_at - deleted_at;
    eprintln!(
        "mm2 loss: paged {latency} ms after the deletion; the window ends {} s later",
        (window + WINDOW - page_at) / 1000
    );
    assert!(latency <= 60_000, "paged {latency} ms after the deletion");
    assert!(
        page_at < window + WINDOW,
        "the window had ended before the page"
    );
    assert!(
        exact,
        "stored counts {counts:?}, sent (regional, aggregate) {expected:?}"
    );
    assert_eq!(
        pages,
        vec![("trigger".to_string(), "loss".to_string(), Some(window))],
        "pages over the whole run; verdicts when paged: {reasons:#?}"
    );
}

/// After the page: 10 s more traffic (no second page may come), then the traffic
/// stops and the stored counts per window are awaited against the ground truth
/// (`DROPPED` fewer downstream in `window`): (exact, stored, expected).
async fn finish(
    state: &web::AppState,
    topic: &str,
    window: i64,
    stop_traffic: &AtomicBool,
    sent: tokio::task::JoinHandle<BTreeMap<i64, u64>>,
) -> (bool, BTreeMap<i64, (u64, u64)>, BTreeMap<i64, (u64, u64)>) {
    tokio::time::sleep(Duration::from_secs(10)).await;
    stop_traffic.store(true, Ordering::Relaxed);
    let sent = sent.await.expect("traffic");
    let expected: BTreeMap<i64, (u64, u64)> = sent
        .iter()
        .map(|(&w, &n)| (w, (n, if w == window { n - DROPPED } else { n })))
        .collect();
    let (exact, counts) = wait_for_counts(state, topic, window, &expected).await;
    (exact, counts, expected)
}

/// serve's tiers regional and aggregate, and the edge dc1 → agg through `replicator`
/// (its TOML value), with `more` edge settings.
fn regional_to_aggregate_through(replicator: &str, more: &str) -> String {
    format!(
        r#"tiers = [{{ name = "regional" }}, {{ name = "aggregate" }}]
[[topology.edges]]
upstream = "regional"
downstream = "aggregate"
datacenters = {{ dc1 = "agg" }}
replicator = {replicator}
{more}"#
    )
}

/// The window of a record sent at `t`.
fn sent_window(t: i64) -> i64 {
    t / WINDOW * WINDOW
}

/// `topic`'s windows around `window` as serve holds them, for people.
fn verdicts(state: &web::AppState, topic: &str, window: i64) -> Vec<String> {
    state
        .index
        .read()
        .unwrap()
        .in_range(window - WINDOW, window + WINDOW)
        .filter(|e| e.topic == topic)
        .map(|e| {
            format!(
                "{} {:?} {:?} {:?} {}/{}: {}",
                e.window_start, e.lifecycle, e.verdict, e.so_far, e.observed, e.expected, e.reason
            )
        })
        .collect()
}

/// Waits (bounded) until the stored counts per window (regional, aggregate) of `topic`
/// around `window` are `expected`; whether they were, and the last read.
async fn wait_for_counts(
    state: &web::AppState,
    topic: &str,
    window: i64,
    expected: &BTreeMap<i64, (u64, u64)>,
) -> (bool, BTreeMap<i64, (u64, u64)>) {
    let read = || async {
        let rows = state
            .store
            .topic_windows(
                topic,
                store::TimeRange::new(window - 2 * WINDOW, window + 2 * WINDOW),
            )
            .await
            .expect("rows");
        let mut counts: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
        for r in rows {
            let c = counts.entry(r.window_start_ms).or_default();
            match r.tier.as_str() {
                "regional" => c.0 += r.count,
                _ => c.1 += r.count,
            }
        }
        counts
    };
    let exact = testkit::wait_until_async(Duration::from_secs(60), || async {
        let same = read().await == *expected;
        if !same {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        same
    })
    .await;
    (exact, read().await)
}

/// Whether `topic` exists on `bootstrap` within `timeout`.
async fn topic_exists(bootstrap: &str, topic: &str, timeout: Duration) -> bool {
    testkit::wait_until_async(timeout, || {
        let (bootstrap, topic) = (bootstrap.to_string(), topic.to_string());
        async move {
            let there = tokio::task::spawn_blocking(move || {
                let c: BaseConsumer = ClientConfig::new()
                    .set("bootstrap.servers", &bootstrap)
                    .create()
                    .expect("metadata client");
                c.fetch_metadata(Some(&topic), Duration::from_secs(5))
                    .is_ok_and(|md| {
                        md.topics()
                            .iter()
                            .any(|t| t.error().is_none() && !t.partitions().is_empty())
                    })
            })
            .await
            .expect("metadata");
            if !there {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            there
        }
    })
    .await
}

/// The high watermark of `topic` partition `p` on `bootstrap` (0 when unknown).
fn high_watermark(bootstrap: &str, topic: &str, p: i32) -> i64 {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("watermark client");
    c.fetch_watermarks(topic, p, Duration::from_secs(5))
        .map_or(0, |(_, high)| high)
}

/// The MirrorMaker 2 tests stop, start and delete through the one MirrorMaker of the
/// dev setup: one at a time.
static MM2: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `deploy/dev/mm2 VERB`, which must succeed.
fn mm2(verb: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/dev/mm2");
    let status = std::process::Command::new(script)
        .arg(verb)
        .status()
        .expect("run deploy/dev/mm2");
    assert!(status.success(), "deploy/dev/mm2 {verb}: {status}");
}

/// MirrorMaker 2 stopped for 5 minutes under live traffic, then started again: the
/// windows it holds back are `delayed` with its lag (objective 30 s), never `loss`, and
/// every window is final and exact once it has caught up; every page of the run is a
/// `delayed` that is resolved. 1-minute windows and grace, so the windows the pause
/// touched become final within the test. Not under `ALONE` (it mostly waits): under
/// the `MM2` lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mirror_maker_stopped_for_five_minutes_is_delayed_never_lost() {
    const MINUTE: i64 = 60_000;
    let _mm2 = MM2.lock().await;
    let rig = TwoTiers::new("mm2-pause").await;
    let topic = testkit::unique("mm2e2e-pause");
    testkit::create_topic(&rig.a, &topic, PARTITIONS).await;
    assert!(
        topic_exists(&rig.b, &topic, Duration::from_secs(60)).await,
        "MirrorMaker 2 did not create {topic} on B: is it running? (deploy/dev/mm2 start; test.sh starts it)"
    );
    let one_minute = |mut cfg: audit_service::Config| {
        cfg.audit.event_time.window_size = audit_lib::WindowSize::from_millis(MINUTE).unwrap();
        cfg
    };
    let mut regional = one_minute(rig.regional(&[&topic]));
    regional.audit.replicators = vec![Replicator::MirrorMaker2(
        common::replication::MirrorMaker2 {
            source: None,
            target: "agg".into(),
        },
    )];
    let services = vec![
        rig.spawn_auditor(regional),
        rig.spawn_auditor(one_minute(rig.aggregate(&[&topic]))),
        rig.spawn_collector(rig.collect(500, ""), &rig.stop),
    ];
    let (state, jobs) = rig
        .serve_with(serve_config_of(
            "1m",
            "1m",
            &regional_to_aggregate_through(
                r#"{ mirror_maker2 = { target = "agg" } }"#,
                r#"replication_lag_objective = "30s""#,
            ),
            "30m",
            &rig.hook,
        ))
        .await;
    let stop_traffic = Arc::new(AtomicBool::new(false));
    let sent = {
        let (a, topic, stop) = (rig.a.clone(), topic.clone(), stop_traffic.clone());
        tokio::task::spawn_blocking(move || traffic(&a, &topic, &stop, Duration::from_secs(480)))
    };
    tokio::time::sleep(Duration::from_secs(30)).await;
    tokio::task::spawn_blocking(|| mm2("stop")).await.unwrap();
    let stopped_at = common::now_ms();
    // A `delayed` page while it is stopped, with the replicator's lag in its reason.
    let delayed = testkit::wait_until_async(Duration::from_secs(150), || {
        let got = rig
            .pages
            .all()
            .iter()
            .any(|b| b["topic"] == topic.as_str() && b["verdict"] == "delayed");
        async move {
            if !got {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            got
        }
    })
    .await;
    let delayed_at = common::now_ms();
    sleep_until_ms(stopped_at + 5 * MINUTE).await;
    tokio::task::spawn_blocking(|| mm2("start")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(30)).await;
    stop_traffic.store(true, Ordering::Relaxed);
    let sent = sent.await.expect("traffic");
    let total: u64 = sent.values().sum();
    // `sent` is by 10-minute window: the 1-minute windows of the run lie within.
    let (first, end) = (
        *sent.keys().next().expect("traffic"),
        sent.keys().last().expect("traffic") + WINDOW,
    );
    let final_exact = wait_final(
        &state,
        &topic,
        (first, end),
        &[("regional", total), ("aggregate", total)],
        false,
        Duration::from_secs(240),
    )
    .await;
    let anomalous = anomalies(&state, &topic, first, end);
    // Resolves follow the final verdicts within an evaluation cycle or two.
    let resolved = |pages: &[(String, String, Option<i64>)]| {
        let triggers = pages.iter().filter(|p| p.0 == "trigger").count();
        let resolves = pages.iter().filter(|p| p.0 == "resolve").count();
        triggers == resolves
    };
    let all_resolved = testkit::wait_until_async(Duration::from_secs(30), || {
        let done = resolved(&rig.pages.of(&topic));
        async move {
            if !done {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            done
        }
    })
    .await;
    let reasons: Vec<String> = rig
        .pages
        .all()
        .iter()
        .filter(|b| b["topic"] == topic.as_str())
        .map(|b| {
            format!(
                "{} {} {}: {}",
                b["action"], b["verdict"], b["window_start"], b["reason"]
            )
        })
        .collect();
    let pages = rig.pages.of(&topic);
    rig.shutdown(services, jobs).await;

    assert!(
        delayed,
        "no delayed page within 150 s of stopping MirrorMaker 2: {reasons:#?}"
    );
    eprintln!(
        "mm2 stopped: delayed paged {} s after the stop; {} pages in all",
        (delayed_at - stopped_at) / 1000,
        pages.len()
    );
    assert!(
        reasons.iter().any(|r| r.contains("in flight")),
        "no delayed page names the replicator's lag: {reasons:#?}"
    );
    assert!(
        pages.iter().all(|p| p.1 == "delayed"),
        "a page other than delayed: {reasons:#?}"
    );
    assert!(
        final_exact,
        "windows not final and exact ({total} sent): {anomalous:?}"
    );
    assert!(anomalous.is_empty(), "final verdicts not ok: {anomalous:?}");
    assert!(all_resolved, "delayed pages left open: {reasons:#?}");
}
