//! The Java interceptors (docs/java-interceptors.md) end to end: Kafka's own Java
//! clients audited by configuration. A plain `KafkaProducer` with only the
//! interceptor's properties added (`interceptor.classes`, `kafka_audit.*`) writes JSON
//! to cluster A; its producer tier reaches the collector through the audit topic, as
//! every other tier does. Records are then deleted at the broker
//! (`AdminClient.deleteRecords`) before the regional auditor starts and reads the
//! topic, and a plain `KafkaConsumer` with the interceptor reads and commits what is
//! left.
//!
//! What must hold: the producer tier's stored windows are exactly what the producer's
//! own callbacks saw acknowledged (counts, bytes and checksums computed here from the
//! records); the regional tier is that minus the deleted records; the deleted records
//! are paged as loss in their windows and nothing else pages over the whole run (equal
//! counts with unequal checksums would page a mismatch, so the interceptor's checksums
//! agree with the auditor's live); the consumer tier's windows equal the regional
//! tier's.
//!
//! The Java side is the jar Maven builds (`interceptors/java`, `./test.sh` builds it
//! first) on the classpath an application gives it: kafka-clients and its dependencies,
//! nothing else (so the shaded jar must stand alone), run as a subprocess. The
//! services are the real auditor, collector and web evaluator in this process, which
//! the two-tier rig of `e2e` already wires to a webhook receiver.

use crate::e2e::*;
use crate::support::WINDOW_MS;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use store::{Deployment, VerdictReads};
use web::engine::{Lifecycle, Verdict};

const PARTITIONS: i32 = 2;
/// 2 000 records at 100 a second: about three 10-second windows.
const RECORDS: u64 = 2_000;
const RATE: u64 = 100;
/// Deleted at the broker from partition 0 before the regional auditor reads it.
const DELETED_FROM_P0: i64 = 60;

/// The classpath of the Java clients: the interceptor jar, the test's client class,
/// and kafka-clients with its own dependencies (what an application provides).
fn java_classpath() -> String {
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../interceptors/java/target");
    let jar = target.join("kafka-audit-interceptors-0.1.0.jar");
    let provided = target.join("provided-classpath.txt");
    assert!(
        jar.exists() && provided.exists(),
        "{} is not built: run `mvn -B -f interceptors/java/pom.xml verify` (./test.sh does)",
        jar.display()
    );
    format!(
        "{}:{}:{}",
        jar.display(),
        target.join("test-classes").display(),
        std::fs::read_to_string(provided).unwrap().trim()
    )
}

/// Runs the test's Java client (`E2eClient`) to its end: its stdout.
async fn java(args: Vec<String>) -> String {
    let cp = java_classpath();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("java")
            .arg("-cp")
            .arg(cp)
            .arg("io.kafkaaudit.interceptor.E2eClient")
            .args(&args)
            .output()
            .expect("run java")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "java client failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The interceptor's JMX counters as the client printed them.
fn metrics(stdout: &str) -> BTreeMap<String, u64> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("metrics "))
        .expect("metrics line")
        .split(' ')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

/// One acknowledged record as the producer's own callback saw it.
struct Acked {
    partition: i32,
    offset: i64,
    ts: i64,
    id: u64,
}

impl Acked {
    fn window(&self) -> i64 {
        self.ts.div_euclid(WINDOW_MS) * WINDOW_MS
    }
    /// Its key and value, as sent (`E2eClient.produce`).
    fn hash(&self) -> u64 {
        let key = format!("k{}", self.id);
        let value = format!("{{\"id\":{},\"ts\":{}}}", self.id, self.ts);
        audit_lib::message_hash(Some(key.as_bytes()), value.as_bytes())
    }
    fn bytes(&self) -> u64 {
        (format!("k{}", self.id).len() + format!("{{\"id\":{},\"ts\":{}}}", self.id, self.ts).len())
            as u64
    }
}

/// Per window: (count, bytes, checksum).
type Windows = BTreeMap<i64, (u64, u64, u64)>;

fn truth<'a>(records: impl Iterator<Item = &'a Acked>) -> Windows {
    let mut w = Windows::new();
    for r in records {
        let e = w.entry(r.window()).or_default();
        e.0 += 1;
        e.1 += r.bytes();
        e.2 = e.2.wrapping_add(r.hash());
    }
    w
}

/// Tiers producer (no progress: a client reports none) and regional, one edge.
fn serve_config(hook: &str) -> web::Config {
    serve_config_with(
        r#"tiers = [{ name = "producer", progress = false }, { name = "regional" }]
[[topology.edges]]
upstream = "producer"
downstream = "regional""#,
        "30m",
        hook,
    )
}

async fn stored(state: &web::AppState, topic: &str, tier: &str, (from, to): (i64, i64)) -> Windows {
    state
        .store
        .topic_windows(topic, store::TimeRange::new(from, to))
        .await
        .expect("rows")
        .into_iter()
        .filter(|r| r.tier == tier && r.datacenter == "dc1")
        .map(|r| (r.window_start_ms, (r.count, r.bytes, r.checksum)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plain_java_producer_and_consumer_with_the_interceptor_are_audited_exactly() {
    let _alone = crate::ALONE.lock().await;
    let rig = TwoTiers::new("java-icpt").await;
    let topic = testkit::create_unique_topic(&rig.a, "java-icpt", PARTITIONS).await;
    let store = store::Store::connect(rig.db.url()).await.expect("connect");
    store.migrate().await.expect("migrate");
    let state = web::AppState::new(serve_config(&rig.hook), store).expect("state");
    let jobs = state.spawn_jobs(&rig.stop);
    let collector = rig.spawn_collector(rig.collect(500, ""), &rig.stop);
    let dir = tempfile::tempdir().unwrap();
    let event_time = dir.path().join("event-time.toml");
    std::fs::write(&event_time, "window_size = \"10s\"\n").unwrap();
    let audited = |mode: &str, a: &[&str]| {
        let mut args: Vec<String> = vec![mode.into(), rig.a.clone(), topic.clone()];
        args.extend(a.iter().map(|s| s.to_string()));
        args.extend([
            "dc1".into(),
            rig.audit_a.clone(),
            event_time.display().to_string(),
            "1000".into(),
        ]);
        args
    };

    // The producer, to its end (close() flushes its last counts).
    let out = java(audited(
        "produce",
        &[&RECORDS.to_string(), &RATE.to_string()],
    ))
    .await;
    let acked: Vec<Acked> = out
        .lines()
        .filter_map(|l| l.strip_prefix("acked "))
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Acked {
                partition: f[0].parse().unwrap(),
                offset: f[1].parse().unwrap(),
                ts: f[2].parse().unwrap(),
                id: f[3].parse().unwrap(),
            }
        })
        .collect();
    assert_eq!(
        acked.len() as u64,
        RECORDS,
        "every record acknowledged:\n{out}"
    );
    let m = metrics(&out);
    assert_eq!(m["Counted"], RECORDS, "{m:?}");
    for k in [
        "DeliveryFailed",
        "UnseenBytes",
        "Uncorrelated",
        "InternalErrors",
        "AuditMessagesLost",
    ] {
        assert_eq!(m[k], 0, "{k}: {m:?}");
    }

    // Records deleted at the broker before the regional auditor reads them.
    java(vec![
        "delete-records".into(),
        rig.a.clone(),
        topic.clone(),
        "0".into(),
        DELETED_FROM_P0.to_string(),
    ])
    .await;
    let deleted = |r: &&Acked| r.partition == 0 && r.offset < DELETED_FROM_P0;
    let produced = truth(acked.iter());
    let remaining = truth(acked.iter().filter(|r| !deleted(r)));
    let lossy: Vec<i64> = truth(acked.iter().filter(deleted)).into_keys().collect();
    let range = (
        *produced.keys().next().unwrap(),
        produced.keys().last().unwrap() + WINDOW_MS,
    );
    let regional = rig.spawn_auditor(rig.regional(&[&topic]));
    let survivors = RECORDS - acked.iter().filter(deleted).count() as u64;
    let all_final = wait_final(
        &state,
        &topic,
        range,
        &[("producer", RECORDS), ("regional", survivors)],
        false,
        Duration::from_secs(240),
    )
    .await;

    // The consumer tier, same topic: what is left, committed.
    let group = testkit::unique("java-icpt-group");
    let out = java(audited("consume", &[&group, &survivors.to_string()])).await;
    assert!(out.contains(&format!("consumed {survivors}\n")), "{out}");
    let m = metrics(&out);
    assert_eq!(m["Counted"], survivors, "{m:?}");
    assert_eq!(m["Uncommitted"], 0, "{m:?}");
    let consumer_in = testkit::wait_until_async(Duration::from_secs(60), || {
        let state = &state;
        let topic = &topic;
        async move {
            stored(state, topic, "consumer", range).await
                == stored(state, topic, "regional", range).await
        }
    })
    .await;
    let paged = rig
        .pages
        .wait_for(&topic, lossy.len(), Duration::from_secs(30))
        .await;
    let judged = anomalies(&state, &topic, range.0, range.1);
    rig.shutdown([regional, collector], jobs).await;

    // Pages over the whole run: one loss per window that lost records, nothing else.
    let mut pages = rig.pages.of(&topic);
    pages.sort();
    let want: Vec<(String, String, Option<i64>)> = lossy
        .iter()
        .map(|w| ("trigger".to_string(), "loss".to_string(), Some(*w)))
        .collect();
    assert!(paged, "pages: {:#?}", rig.pages.all());
    assert_eq!(pages, want, "every page of the run: {:#?}", rig.pages.all());
    assert_eq!(rig.pages.all().len(), want.len(), "{:#?}", rig.pages.all());
    assert!(
        all_final,
        "windows not final with all counts in: {judged:?}"
    );
    let losses: Vec<(i64, Verdict, Lifecycle)> = judged.iter().map(|j| (j.0, j.1, j.2)).collect();
    assert_eq!(
        losses,
        lossy
            .iter()
            .map(|w| (*w, Verdict::Loss, Lifecycle::Final))
            .collect::<Vec<_>>()
    );

    // Exact per window against what the producer saw acknowledged and what is left.
    assert_eq!(stored(&state, &topic, "producer", range).await, produced);
    assert_eq!(stored(&state, &topic, "regional", range).await, remaining);
    assert!(
        consumer_in,
        "consumer windows never equalled the regional tier's"
    );
    assert_eq!(stored(&state, &topic, "consumer", range).await, remaining);

    // A producer that closes long before its first report (its audit producer never
    // waits in send(), so the audit topic's metadata may not even be in yet): its
    // counts go out at close, all of them.
    const BRIEF: u64 = 20;
    let brief = testkit::create_unique_topic(&rig.a, "java-icpt-brief", 1).await;
    let brief_audit = testkit::create_unique_topic(&rig.a, "java-icpt-brief-audit", 1).await;
    let out = java(vec![
        "produce".into(),
        rig.a.clone(),
        brief.clone(),
        BRIEF.to_string(),
        "100000".into(),
        "dc1".into(),
        brief_audit.clone(),
        event_time.display().to_string(),
        "3600000".into(),
        "brief".into(),
    ])
    .await;
    assert!(out.contains("done failed=0"), "{out}");
    let (bootstrap, audit) = (rig.a.clone(), brief_audit.clone());
    let reported = tokio::task::spawn_blocking(move || testkit::read_log(&bootstrap, &audit, 1))
        .await
        .unwrap();
    let counted: u64 = reported
        .iter()
        .map(|r| {
            let m: serde_json::Value =
                serde_json::from_slice(r.payload.as_deref().unwrap()).unwrap();
            assert_eq!(
                (m["topic"].as_str(), m["tier"].as_str()),
                (Some(brief.as_str()), Some("producer")),
                "{m}"
            );
            m["count"].as_u64().unwrap()
        })
        .sum();
    assert_eq!(counted, BRIEF, "audit messages at close: {reported:?}");
}
