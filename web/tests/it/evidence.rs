//! Replication evidence (issue 28) as the evaluator reads it from a real store: it is
//! not an auditor (issue 43) — evidence that stops is one signal of its age, never a
//! stalled auditor per topic.

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

on_both_backends!(evidence_that_stops_is_one_signal_not_a_stalled_auditor_per_topic);

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
}
