//! The plugin in the whole pipeline: a Python (PyPI wheel), a C and a rust-rdkafka
//! producer with only the plugin's properties added write known messages; records are
//! deleted at the broker before the regional auditor reads them (loss) and some are
//! produced again by a client without the plugin (duplication); a consumer of each
//! kind with the plugin reads the topic. The regional auditor, the collector into
//! PostgreSQL and serve's evaluator with a webhook receiver judge it. Asserted: the
//! pages over the whole run (a loss in the window of the deleted records and a
//! duplication in the window of the copies, per client, nothing else), the producer
//! tier's counts and checksums per window against the ground truth, the consumer
//! tier's windows equal to the regional tier's, and (Python and C) the messages whose
//! delivery the producer was told failed, per window in the windows API: the loss
//! the producer knew about, apart from the silent loss paged.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use store::{Deployment, TimeRange, VerdictReads, WindowRow};

use crate::clients::{self, Kind, PluginConfig};
use crate::e2e::{self, TwoTiers};
use crate::support::{producer, send_queued, WINDOW_MS};

/// Messages per producer, over three windows.
const N: i64 = 300;
const PARTITIONS: i32 = 3;
/// The first records of partition 0 (messages 0, 3, …, 57: all in window 0), deleted
/// before the regional auditor reads them.
const DELETED: i64 = 20;
/// Messages 200..207 (window 2) produced again by a client without the plugin.
const DUPLICATED: std::ops::Range<i64> = 200..207;
/// Python and C: every 25th message goes to a partition the topic has not (its
/// delivery fails): 4 per window.
const FAIL_EVERY: i64 = 25;

/// Whether the run of `kind` sends message `i` to a partition that does not exist.
fn fails(kind: Kind, i: i64) -> bool {
    kind != Kind::Rust && i % FAIL_EVERY == FAIL_EVERY - 1
}

/// The messages of `kind`'s run that reached the topic, in order, and the records the
/// deletion removes (the first `DELETED` of partition 0).
fn delivered(kind: Kind) -> (Vec<i64>, Vec<i64>) {
    let sent: Vec<i64> = (0..N).filter(|i| !fails(kind, *i)).collect();
    let deleted = sent
        .iter()
        .copied()
        .filter(|i| i % PARTITIONS as i64 == 0)
        .take(DELETED as usize)
        .collect();
    (sent, deleted)
}

/// Tiers producer → regional → consumer in dc1; the plugin's tiers report no progress
/// (they read nothing an auditor would), so only the regional auditor's holds a window.
fn serve_config(hook: &str) -> web::Config {
    toml::from_str(&format!(
        r#"
[serve]
evaluate_every = "500ms"
[topology]
window = "10s"
grace = "5s"
stall_after = "30m"
tiers = [{{ name = "producer", progress = false }}, {{ name = "regional" }}, {{ name = "consumer", progress = false }}]
[[topology.edges]]
upstream = "producer"
downstream = "regional"
[[topology.edges]]
upstream = "regional"
downstream = "consumer"
[[alerting.channels]]
name = "hook"
kind = "webhook"
url = "{hook}"
"#
    ))
    .expect("serve config parses")
}

/// Per window start: (count, checksum) of `tier`.
fn tier_windows(rows: &[WindowRow], tier: &str) -> BTreeMap<i64, (u64, u64)> {
    rows.iter()
        .filter(|r| r.tier == tier)
        .map(|r| (r.window_start_ms, (r.count, r.checksum)))
        .collect()
}

/// Per window start: (count, checksum) of messages `ids` of a producer's run.
fn truth(ids: impl Iterator<Item = i64>, base: i64, span: i64) -> BTreeMap<i64, (u64, u64)> {
    let mut out: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
    for i in ids {
        let (key, value, ts) = clients::message(i, N, base, span);
        let w = out.entry(ts / WINDOW_MS * WINDOW_MS).or_default();
        w.0 += 1;
        w.1 = w.1.wrapping_add(audit_lib::message_hash(
            Some(key.as_bytes()),
            value.as_bytes(),
        ));
    }
    out
}

async fn delete_first_records(bootstrap: &str, topic: &str, partition: i32, before: i64) {
    let admin: AdminClient<DefaultClientContext> = testkit::client_config(bootstrap)
        .create()
        .expect("admin client");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(before))
        .unwrap();
    let done = admin
        .delete_records(&tpl, &AdminOptions::new())
        .await
        .expect("delete_records");
    for e in done.elements() {
        assert!(e.error().is_ok(), "delete_records {topic}: {:?}", e.error());
    }
}

/// Per window start, the producer tier's `delivery_failed_count` in serve's
/// `GET /api/v1/topics/{topic}/windows` (windows with none left out).
async fn delivery_failures(
    state: &web::AppState,
    topic: &str,
    range: (i64, i64),
) -> BTreeMap<i64, u64> {
    use tower::ServiceExt;
    let uri = format!(
        "/api/v1/topics/{topic}/windows?from={}&to={}&tier=producer",
        range.0, range.1
    );
    let req = axum::http::Request::get(uri)
        .body(axum::body::Body::empty())
        .unwrap();
    let res = web::app(state.clone()).oneshot(req).await.expect("windows");
    assert_eq!(res.status(), 200);
    let body = axum::body::to_bytes(res.into_body(), 1 << 24)
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    v["windows"]
        .as_array()
        .expect("windows")
        .iter()
        .filter(|w| w["delivery_failed_count"].as_u64().unwrap_or(0) > 0)
        .map(|w| {
            (
                w["window_start"].as_i64().unwrap(),
                w["delivery_failed_count"].as_u64().unwrap(),
            )
        })
        .collect()
}

async fn stored(state: &web::AppState, topic: &str, range: (i64, i64)) -> Vec<WindowRow> {
    state
        .store
        .topic_windows(topic, TimeRange::new(range.0, range.1))
        .await
        .expect("rows")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn python_c_and_rust_rdkafka_clients_are_audited_at_their_tiers_exactly() {
    let rig = TwoTiers::new("kai-e2e").await;
    let a = rig.a.clone();
    let mut topics = Vec::new();
    for kind in Kind::ALL {
        let t = testkit::unique(&format!("kai-{}", kind.name()));
        testkit::create_topic(&a, &t, PARTITIONS).await;
        topics.push((kind, t));
    }
    // Migrated before the collector starts: both creating the day partitions at once
    // waited out PostgreSQL's lock timeout on a loaded machine.
    let store = store::Store::connect(rig.db.url()).await.expect("connect");
    store.migrate().await.expect("migrate");
    let collector = rig.spawn_collector(rig.collect(500, ""), &rig.stop);
    let state = web::AppState::new(serve_config(&rig.hook), store).expect("state");
    let jobs = state.spawn_jobs(&rig.stop);

    // Three windows that have ended: judged as soon as the regional auditor has read them.
    let base = common::now_ms() / WINDOW_MS * WINDOW_MS - 5 * WINDOW_MS;
    let span = 3 * WINDOW_MS;
    let range = (base, base + span);
    // The auditors' event-time config: 10 s windows, the default rules.
    let event_time = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(event_time.path(), "window_size = \"10s\"\n").unwrap();
    let event_time_path = event_time.path().display().to_string();
    let settings = |audit: &str| {
        vec![
            ("datacenter".to_string(), "dc1".to_string()),
            ("event_time.config".to_string(), event_time_path.clone()),
            ("audit_topic".to_string(), audit.to_string()),
            ("report.interval.ms".to_string(), "1000".to_string()),
        ]
    };

    // 1. The producers, all at once, with the plugin's properties only.
    let mut runs = Vec::new();
    for (kind, topic) in &topics {
        let (kind, mut args) = (
            *kind,
            clients::produce_args(&a, topic, N, base, span, PARTITIONS),
        );
        if kind != Kind::Rust {
            args.push(format!("kai.fail_every={FAIL_EVERY}"));
        }
        let s = settings(&rig.audit_a);
        runs.push(tokio::task::spawn_blocking(move || {
            let s: Vec<(&str, &str)> = s.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let out = clients::run(
                kind,
                &args,
                &PluginConfig::new(kind, &s),
                Duration::from_secs(120),
            );
            (kind, out)
        }));
    }
    for r in runs {
        let (kind, out) = r.await.unwrap();
        assert!(out.ok, "{kind:?} producer: {} {}", out.json, out.stderr);
        let failed = (0..N).filter(|i| fails(kind, *i)).count();
        assert_eq!(
            out.json["delivered"],
            N as usize - failed,
            "{kind:?} producer: {}",
            out.json
        );
        assert_eq!(
            out.json["failed"], failed,
            "{kind:?} producer: {}",
            out.json
        );
    }

    // 2. Loss: records deleted at the broker before the regional auditor reads them.
    // 3. Duplication: records produced again by a client without the plugin.
    let plain = producer(&a);
    for (_, topic) in &topics {
        delete_first_records(&a, topic, 0, DELETED).await;
        for i in DUPLICATED {
            let (key, value, _) = clients::message(i, N, base, span);
            let partition = (i % PARTITIONS as i64) as i32;
            send_queued(
                &plain,
                BaseRecord::to(topic)
                    .key(&key)
                    .payload(&value)
                    .partition(partition),
            );
        }
    }
    plain
        .flush(Duration::from_secs(30))
        .expect("flush the plain producer");
    let in_topic =
        |kind| (delivered(kind).0.len() as i64 - DELETED) as u64 + DUPLICATED.count() as u64;

    // 4. The consumers with the plugin, each in its own group, before the regional
    // auditor: the consumer tier reports no progress, so its counts must be in when the
    // regional auditor's progress lets the windows be judged.
    let mut runs = Vec::new();
    for (kind, topic) in &topics {
        let kind = *kind;
        let args = clients::consume_args(
            &a,
            topic,
            &testkit::unique("kai-consumer"),
            in_topic(kind),
            90,
        );
        let s = settings(&rig.audit_a);
        runs.push(tokio::task::spawn_blocking(move || {
            let s: Vec<(&str, &str)> = s.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            (
                kind,
                clients::run(
                    kind,
                    &args,
                    &PluginConfig::new(kind, &s),
                    Duration::from_secs(120),
                ),
            )
        }));
    }
    for r in runs {
        let (kind, out) = r.await.unwrap();
        assert!(out.ok, "{kind:?} consumer: {} {}", out.json, out.stderr);
        assert_eq!(
            out.json["consumed"],
            in_topic(kind),
            "{kind:?} consumer: {}",
            out.json
        );
    }
    for (kind, topic) in &topics {
        let both_in = testkit::wait_until_async(Duration::from_secs(60), || async {
            let rows = stored(&state, topic, range).await;
            let sum = |tier| tier_windows(&rows, tier).values().map(|w| w.0).sum::<u64>();
            sum("producer") == delivered(*kind).0.len() as u64 && sum("consumer") == in_topic(*kind)
        })
        .await;
        assert!(
            both_in,
            "{kind:?}: producer and consumer tiers not stored: {:?}",
            stored(&state, topic, range).await
        );
    }

    // 5. The regional auditor reads what is left, and the windows are judged.
    let names: Vec<&str> = topics.iter().map(|(_, t)| t.as_str()).collect();
    let regional = rig.spawn_auditor(rig.regional(&names));
    for (kind, topic) in &topics {
        let produced = delivered(*kind).0.len() as u64;
        let counts = [
            ("producer", produced),
            ("regional", in_topic(*kind)),
            ("consumer", in_topic(*kind)),
        ];
        let all_final = e2e::wait_final(
            &state,
            topic,
            range,
            &counts,
            false,
            Duration::from_secs(180),
        )
        .await;
        assert!(
            all_final,
            "{kind:?}: windows not final: {:?}",
            stored(&state, topic, range).await
        );
    }
    for (_, topic) in &topics {
        rig.pages.wait_for(topic, 2, Duration::from_secs(20)).await;
    }
    // A few more evaluation cycles: a page that should not come has its chance to.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut failed_in_api = BTreeMap::new();
    for (kind, topic) in &topics {
        failed_in_api.insert(*kind, delivery_failures(&state, topic, range).await);
    }
    rig.shutdown([regional, collector], jobs).await;

    let lossy = base;
    let duplicated = base + 2 * WINDOW_MS;
    for (kind, topic) in &topics {
        let mut pages = rig.pages.of(topic);
        pages.sort();
        assert_eq!(
            pages,
            vec![
                (
                    "trigger".to_string(),
                    "duplication".to_string(),
                    Some(duplicated)
                ),
                ("trigger".to_string(), "loss".to_string(), Some(lossy)),
            ],
            "{kind:?}: every page of the run: {:#?}",
            rig.pages.all()
        );
        let rows = stored(&state, topic, range).await;
        let (sent, deleted) = delivered(*kind);
        assert_eq!(
            tier_windows(&rows, "producer"),
            truth(sent.iter().copied(), base, span),
            "{kind:?}: producer tier per window (count, checksum) against what was delivered"
        );
        let mut told: BTreeMap<i64, u64> = BTreeMap::new();
        for i in (0..N).filter(|i| fails(*kind, *i)) {
            let ts = clients::message(i, N, base, span).2;
            *told.entry(ts / WINDOW_MS * WINDOW_MS).or_default() += 1;
        }
        assert_eq!(
            failed_in_api[kind], told,
            "{kind:?}: the windows API's delivery_failed_count of the producer tier"
        );
        let kept = sent.iter().copied().filter(|i| !deleted.contains(i));
        let mut regional_truth = truth(kept.chain(DUPLICATED), base, span);
        regional_truth.retain(|_, w| w.0 > 0);
        assert_eq!(
            tier_windows(&rows, "regional"),
            regional_truth,
            "{kind:?}: regional tier"
        );
        assert_eq!(
            tier_windows(&rows, "consumer"),
            tier_windows(&rows, "regional"),
            "{kind:?}: the consumer tier's windows equal the regional tier's"
        );
    }
}

/// A loss proven before the window is final (docs/design.md §6, rule 0), the producer
/// tier: a C producer with the plugin writes 300 messages of the current 10-minute
/// window; the first 20 records of partition 0 are deleted at the broker before the
/// regional auditor reads them. The edge producer → regional is
/// `replicator = "same_cluster"`: the producer's acknowledged offsets are in the log the
/// regional auditor reads, so with 10-minute windows and the default 20-minute grace
/// the loss is paged within 60 s of the deletion, the window still open, and nothing
/// else; the stored counts are the ground truth.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_deleted_after_the_producer_tier_counted_them_are_paged_within_a_minute() {
    const WINDOW: i64 = 600_000;
    let rig = TwoTiers::new("kai-early").await;
    let a = rig.a.clone();
    let topic = testkit::unique("kai-early");
    testkit::create_topic(&a, &topic, PARTITIONS).await;
    let store = store::Store::connect(rig.db.url()).await.expect("connect");
    store.migrate().await.expect("migrate");
    let collector = rig.spawn_collector(rig.collect(500, ""), &rig.stop);
    let config = e2e::serve_config_of(
        "10m",
        "20m",
        r#"tiers = [{ name = "producer", progress = false }, { name = "regional" }]
[[topology.edges]]
upstream = "producer"
downstream = "regional"
replicator = "same_cluster""#,
        "30m",
        &rig.hook,
    );
    let state = web::AppState::new(config, store).expect("state");
    let jobs = state.spawn_jobs(&rig.stop);
    // Every message in one window that stays open for the page.
    let now = common::now_ms();
    if WINDOW - now % WINDOW < 150_000 {
        e2e::sleep_until_ms(now - now % WINDOW + WINDOW + 1_000).await;
    }
    let base = common::now_ms();
    let window = base / WINDOW * WINDOW;
    let event_time = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(event_time.path(), "window_size = \"10m\"\n").unwrap();
    let settings = [
        ("datacenter".to_string(), "dc1".to_string()),
        (
            "event_time.config".to_string(),
            event_time.path().display().to_string(),
        ),
        ("audit_topic".to_string(), rig.audit_a.clone()),
        ("report.interval.ms".to_string(), "1000".to_string()),
    ];
    let args = clients::produce_args(&a, &topic, N, base, 10_000, PARTITIONS);
    let out = tokio::task::spawn_blocking(move || {
        let s: Vec<(&str, &str)> = settings
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        clients::run(
            Kind::C,
            &args,
            &PluginConfig::new(Kind::C, &s),
            Duration::from_secs(120),
        )
    })
    .await
    .unwrap();
    assert!(out.ok, "C producer: {} {}", out.json, out.stderr);
    assert_eq!(out.json["delivered"], N, "C producer: {}", out.json);
    // The producer tier's counts are in (its last report is flushed at destroy).
    let range = (window, window + WINDOW);
    let counted = testkit::wait_until_async(Duration::from_secs(60), || async {
        let rows = stored(&state, &topic, range).await;
        tier_windows(&rows, "producer")
            .values()
            .map(|w| w.0)
            .sum::<u64>()
            == N as u64
    })
    .await;
    assert!(
        counted,
        "producer tier not stored: {:?}",
        stored(&state, &topic, range).await
    );

    delete_first_records(&a, &topic, 0, DELETED).await;
    let deleted_at = common::now_ms();
    let mut cfg = rig.regional(&[&topic]);
    cfg.audit.event_time.window_size = audit_lib::WindowSize::from_millis(WINDOW).unwrap();
    let regional = rig.spawn_auditor(cfg);
    let paged = rig.pages.first(&topic, Duration::from_secs(90)).await;
    let judged: Vec<_> = state
        .index
        .read()
        .unwrap()
        .in_range(window, window + 1)
        .filter(|e| e.topic == topic)
        .map(|e| (e.lifecycle, e.verdict, e.so_far, e.reason.clone()))
        .collect();
    let exact = testkit::wait_until_async(Duration::from_secs(60), || async {
        let rows = stored(&state, &topic, range).await;
        let sum = |tier| tier_windows(&rows, tier).values().map(|w| w.0).sum::<u64>();
        sum("producer") == N as u64 && sum("regional") == (N - DELETED) as u64
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pages = rig.pages.of(&topic);
    let rows = stored(&state, &topic, range).await;
    rig.shutdown([collector, regional], jobs).await;

    let Some(page_at) = paged else {
        panic!("no page within 90 s of the deletion: {judged:?}");
    };
    let latency = page_at - deleted_at;
    eprintln!(
        "producer tier: paged {latency} ms after the deletion; the window ends {} s later",
        (window + WINDOW - page_at) / 1000
    );
    assert!(latency <= 60_000, "paged {latency} ms after the deletion");
    assert!(
        page_at < window + WINDOW,
        "the window had ended before the page"
    );
    assert!(exact, "stored counts: {rows:?}");
    assert_eq!(
        pages,
        vec![("trigger".to_string(), "loss".to_string(), Some(window))],
        "pages over the whole run: {judged:?}"
    );
    assert_eq!(
        judged.iter().map(|j| (j.0, j.1, j.2)).collect::<Vec<_>>(),
        vec![(
            web::engine::Lifecycle::Open,
            web::engine::Verdict::Loss,
            Some(web::engine::SoFar::Loss)
        )],
        "{judged:?}"
    );
}
