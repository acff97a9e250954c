//! Replication evidence is not an auditor (docs/web.md, Alerts: one stalled-evidence
//! alert per replicator). The scenario at 1 000 topics, as a new user deploys it: the
//! collector with HTTP ingest (the regional auditors' token also names the replicator's
//! evidence tier), serve on PostgreSQL judging regional/dc1 → aggregate/agg through the
//! consumer group `mirror`, alerts to a local webhook receiver. Both auditors report
//! every topic every second for the whole run; the replicator's evidence of every topic
//! comes, stops for longer than `stall_after`, then comes again.
//!
//! Over the whole run the receiver gets exactly one page and its resolve: the
//! evidence of `replicator:group/mirror` from dc1 is stale, with its age. At df0f7fc
//! the receiver got one "audit stalled" page per topic and one `auditor_stalled` series
//! per topic for the evidence tier; at 03cd9e1 no page at all (only the age gauge):
//! this test then fails with "no page".

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use audit_lib::{AuditMessage, PartitionProgress};

use crate::integrity::{array, post};
use crate::mirror_http::{
    collect_toml, progress, serve_config, Services, AGGREGATE_TOKEN, EVIDENCE, REGIONAL_TOKEN,
};

const TOPICS: usize = 1_000;
/// How often the auditors (the test) report: `stall_after` is ten of these.
const REPORT_EVERY: Duration = Duration::from_secs(1);
const STALL_AFTER_S: i64 = 10;

fn topic(i: usize) -> String {
    format!("fleet-{i:04}")
}

/// One progress report per topic of `tier`/`datacenter` (one partition, caught up).
fn reports(tier: &str, datacenter: &str) -> Vec<AuditMessage> {
    let now = common::now_ms();
    (0..TOPICS)
        .map(|i| {
            let caught_up = vec![PartitionProgress {
                partition: 0,
                next_offset: 1_000,
                record_time: Some(now),
                lag: Some(0),
                max_record_time: Some(now),
                log_append_time: false,
            }];
            progress(&topic(i), tier, datacenter, caught_up, now)
        })
        .collect()
}

async fn report(addr: SocketAddr, token: &str, tier: &str, datacenter: &str) {
    let messages = reports(tier, datacenter);
    let (status, json) = post(addr, token, array(&messages)).await;
    assert_eq!(status, 200, "{tier}: {json}");
    assert_eq!(json["accepted"], TOPICS, "{tier}: {json}");
}

/// Both auditors report every topic every [`REPORT_EVERY`], with the evidence too
/// while `evidence` says so, until `done` holds or `ceiling` passes; whether `done`
/// held.
async fn run_until(
    addr: SocketAddr,
    evidence: bool,
    ceiling: Duration,
    mut done: impl FnMut() -> bool,
) -> bool {
    let start = Instant::now();
    loop {
        let round = Instant::now();
        report(addr, REGIONAL_TOKEN, "regional", "dc1").await;
        report(addr, AGGREGATE_TOKEN, "aggregate", "agg").await;
        if evidence {
            report(addr, REGIONAL_TOKEN, EVIDENCE, "dc1").await;
        }
        if done() {
            return true;
        }
        if start.elapsed() > ceiling {
            return false;
        }
        tokio::time::sleep(REPORT_EVERY.saturating_sub(round.elapsed())).await;
    }
}

fn series<'a>(metrics: &'a str, name: &str) -> Vec<&'a str> {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evidence_that_stops_on_an_edge_of_1000_topics_pages_once_postgres() {
    let db = testkit::fresh_database("evidence_stale").await;
    let services = Services::start(db.url(), &collect_toml(db.url(), ""), |hook| {
        serve_config(db.url(), "30s", &format!("{STALL_AFTER_S}s"), hook)
    })
    .await;
    let (addr, pages, state) = (
        services.addr,
        services.pages.clone(),
        services.state.clone(),
    );

    // Evidence of every topic, until serve has read it (one age series).
    let age = |state: &web::AppState| -> Vec<String> {
        series(
            &state.metrics.encode(),
            "kafka_audit_replication_evidence_age_seconds",
        )
        .into_iter()
        .map(str::to_string)
        .collect()
    };
    let seen = run_until(addr, true, Duration::from_secs(60), || {
        !age(&state).is_empty() && state.index.read().unwrap().auditors.len() == 2 * TOPICS
    })
    .await;
    assert!(seen, "{:?}", age(&state));

    // The evidence stops; the auditors go on: one page, bounded by stall_after, the
    // cycle (500 ms) and the delivery.
    let stopped = common::now_ms();
    let paged = run_until(addr, false, Duration::from_secs(90), || {
        !pages.all().is_empty()
    })
    .await;
    assert!(
        paged,
        "no page {} s after the evidence stopped",
        (common::now_ms() - stopped) / 1000
    );
    // A few more report rounds (and cycles) with the evidence stale: nothing else.
    let mut rounds = 0;
    run_until(addr, false, Duration::from_secs(30), || {
        rounds += 1;
        rounds > 5
    })
    .await;
    let during = pages.all();
    let m = state.metrics.encode();

    // The evidence again: the page resolves.
    let resolved = run_until(addr, true, Duration::from_secs(60), || {
        pages.all().len() >= 2
    })
    .await;
    let all = pages.all();
    services.stop().await;

    assert_eq!(
        during.len(),
        1,
        "one page while the evidence is stale: {during:#?}"
    );
    let page = &during[0];
    assert_eq!(page["action"], "trigger", "{page}");
    assert_eq!(page["verdict"], "stalled", "{page}");
    assert_eq!(page["evidence_tier"], EVIDENCE, "{page}");
    assert_eq!(page["datacenter"], "dc1", "{page}");
    let age_s = page["age_seconds"].as_i64().unwrap_or_default();
    assert!(age_s >= STALL_AFTER_S, "its age: {page}");
    let summary = page["summary"].as_str().unwrap_or_default();
    assert!(summary.contains("replication evidence"), "{summary}");
    // No per-topic auditor series for the evidence; one age series.
    let stalled = series(&m, "kafka_audit_auditor_stalled");
    assert!(stalled.iter().all(|l| !l.contains(EVIDENCE)), "{stalled:?}");
    assert!(
        stalled.iter().all(|l| l.ends_with(" 0")),
        "no auditor stalled: {stalled:?}"
    );
    let ages = series(&m, "kafka_audit_replication_evidence_age_seconds");
    assert_eq!(ages.len(), 1, "{ages:?}");

    assert!(resolved, "the page did not resolve: {all:#?}");
    assert_eq!(all.len(), 2, "exactly one page and its resolve: {all:#?}");
    assert_eq!(all[1]["action"], "resolve", "{all:#?}");
    assert_eq!(all[1]["dedup_key"], page["dedup_key"], "{all:#?}");
}
