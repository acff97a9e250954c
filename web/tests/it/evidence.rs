//! Replication evidence (rule 0, docs/web.md) as the evaluator reads it from a real
//! store: it is not an auditor (docs/web.md, Alerts) — evidence that stops is one
//! signal of its age and one alert, never a stalled auditor per topic.

use crate::support;

use store::{Batch, Ingest, Message};
use support::*;
use web::{AppState, Config};

/// regional/dc1 → aggregate/agg through the consumer group `mirror`.
const REPLICATED: &str = r#"
[topology]
window = "10m"
grace = "20m"
stall_after = "30m"
tiers = [{ name = "regional" }, { name = "aggregate" }]
[[topology.edges]]
upstream = "regional"
downstream = "aggregate"
datacenters = { dc1 = "agg" }
replicator = { consumer_group = "mirror" }
[serve]
evaluate_every = "1h"
"#;

const EVIDENCE: &str = "replicator:group/mirror";

on_both_backends!(
    evidence_that_stops_is_one_signal_not_a_stalled_auditor_per_topic,
    implausible_evidence_proves_nothing_and_is_counted_once,
);

async fn write_at(store: &store::Store, messages: Vec<Message>, received_at_ms: i64) {
    store
        .write_batch(&Batch {
            messages,
            rejects: vec![],
            received_at_ms,
        })
        .await
        .expect("seed batch");
}

/// The replicator's evidence of two topics was last received an hour ago (stall_after
/// 30 m), both auditors report now: no auditor is stalled, no `auditor_stalled` series
/// names the evidence tier, and one series says how old the evidence is.
async fn evidence_that_stops_is_one_signal_not_a_stalled_auditor_per_topic(backend: Backend) {
    let (store, _db) = store(backend).await;
    let config: Config = toml::from_str(REPLICATED).expect("config parses");
    let state = AppState::new(config, store).expect("state");
    let now = now_ms();
    let hour_ago = now - 60 * MIN;
    let topics = ["orders", "payments"];
    let evidence: Vec<Message> = topics
        .iter()
        .map(|t| {
            progress_of(
                t,
                EVIDENCE,
                "dc1",
                "regional-dc1-0",
                hour_ago,
                0,
                10,
                None,
                Some(0),
            )
        })
        .collect();
    write_at(&state.store, evidence, hour_ago).await;
    let auditors: Vec<Message> = topics
        .iter()
        .flat_map(|t| {
            [
                caught_up(t, "regional", "dc1"),
                caught_up(t, "aggregate", "agg"),
            ]
        })
        .collect();
    write(&state.store, auditors).await;
    state.evaluate(now).await.unwrap();

    let index = state.index.read().unwrap();
    let listed: Vec<_> = index.auditors.keys().cloned().collect();
    assert_eq!(listed.len(), 4, "{backend:?}: {listed:?}");
    assert!(
        listed.iter().all(|(_, tier, _)| tier != EVIDENCE),
        "{backend:?}: evidence listed as an auditor: {listed:?}"
    );
    assert!(
        index.auditors.values().all(|a| !a.stalled),
        "{backend:?}: {:?}",
        index.auditors
    );
    drop(index);
    let m = state.metrics.encode();
    let stalled: Vec<&str> = m
        .lines()
        .filter(|l| l.starts_with("kafka_audit_auditor_stalled{") && l.contains(EVIDENCE))
        .collect();
    assert!(stalled.is_empty(), "{backend:?}: {stalled:?}");
    let age: Vec<&str> = m
        .lines()
        .filter(|l| l.starts_with("kafka_audit_replication_evidence_age_seconds{"))
        .collect();
    assert_eq!(
        age.len(),
        1,
        "{backend:?}: one series per replicator and datacenter: {age:?}\n{m}"
    );
    let (labels, value) = age[0].rsplit_once(' ').unwrap();
    assert_eq!(
        labels,
        format!("kafka_audit_replication_evidence_age_seconds{{tier=\"{EVIDENCE}\",datacenter=\"dc1\"}}")
    );
    let value: f64 = value.parse().unwrap();
    assert!((3600.0..3700.0).contains(&value), "{backend:?}: {value}");
    // One alert: the evidence is stale, with its age; no auditor alert.
    let published = state.published_alerts().expect("published");
    let keys: Vec<&String> = published.keys().collect();
    assert_eq!(
        keys,
        [&web::alert::evidence_key(EVIDENCE, "dc1")],
        "{backend:?}"
    );
    let alert = published.values().next().unwrap();
    match &alert.subject {
        web::alert::Subject::Evidence { age_seconds, .. } => {
            assert!((3600..3700).contains(age_seconds), "{backend:?}: {alert:?}")
        }
        other => panic!("{backend:?}: {other:?}"),
    }
}

/// The open window of three topics: regional/dc1 counted 100 records (offsets 1000 to
/// 1099 of partition 0) and measured its log end at 1100, the aggregate 63 and read
/// its whole log since the evidence. The evidence says the replicator copied up to
/// 1100 (`honest`), up to 2^62 (`forged`, past the log end), or up to 1100 dated
/// an hour ahead (`future`). Only `honest` proves a loss; the two others are counted
/// once each, however many cycles judge them.
async fn implausible_evidence_proves_nothing_and_is_counted_once(backend: Backend) {
    let (store, _db) = store(backend).await;
    let config: Config = toml::from_str(REPLICATED).expect("config parses");
    let state = AppState::new(config, store).expect("state");
    let now = now_ms();
    let w = now.div_euclid(WINDOW) * WINDOW;
    let read_at = now - 20_000;
    let cases = [
        ("honest", 1100, read_at),
        ("forged", 1 << 62, read_at),
        ("future", 1100, now + 59 * MIN + 50_000),
    ];
    for (topic, copied, emitted_at) in cases {
        write(
            &state.store,
            vec![
                increment(topic, "regional", "dc1", w, 100, 100),
                increment(topic, "aggregate", "agg", w, 63, 63),
            ],
        )
        .await;
        write_at(
            &state.store,
            vec![
                progress_of(
                    topic,
                    "regional",
                    "dc1",
                    "regional-dc1-0",
                    read_at,
                    0,
                    1100,
                    Some(read_at),
                    Some(0),
                ),
                progress_of(
                    topic,
                    EVIDENCE,
                    "dc1",
                    "regional-dc1-0",
                    emitted_at,
                    0,
                    copied,
                    None,
                    Some(0),
                ),
            ],
            read_at,
        )
        .await;
        write_at(
            &state.store,
            vec![progress_of(
                topic,
                "aggregate",
                "agg",
                "aggregate-agg-0",
                now - 10_000,
                0,
                1063,
                Some(now - 10_000),
                Some(0),
            )],
            now - 10_000,
        )
        .await;
    }
    for at in [now, now + 1000] {
        state.evaluate(at).await.unwrap();
    }
    let index = state.index.read().unwrap();
    let proven: Vec<&str> = index.proven.keys().map(|k| k.topic.as_str()).collect();
    assert_eq!(proven, vec!["honest"], "{backend:?}");
    // The proof says what it rests on: the position, who sent it, when.
    let reason = &index.proven.values().next().unwrap().reason;
    assert!(
        reason.contains(&format!(
            "the evidence of {EVIDENCE}: dc1 partition 0 copied to offset 1100 (sent by regional-dc1-0, emitted "
        )),
        "{backend:?}: {reason}"
    );
    drop(index);
    let m = state.metrics.encode();
    for line in [
        "kafka_audit_replication_evidence_refused_total{reason=\"past_log_end\"} 1",
        "kafka_audit_replication_evidence_refused_total{reason=\"emitted_in_future\"} 1",
    ] {
        assert!(m.contains(line), "{backend:?}: no {line:?} in\n{m}");
    }
    assert!(!m.contains("reason=\"no_log_end\""), "{backend:?}:\n{m}");
}
