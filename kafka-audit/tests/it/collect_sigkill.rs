//! SIGKILL of `kafka-audit collect` (the built binary, as a child process) while it
//! ingests a continuous stream from real Kafka into PostgreSQL, five times: after
//! draining, the stored counts equal the sum of the distinct increments produced,
//! exactly. A kill lands anywhere: while gathering a batch, inside the store
//! transaction, or between the store commit and the offset commit (then the batch is
//! read again and deduplicated by UUID).

use crate::collector_support as support;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use audit_lib::AuditMessage;
use store::Store;
use support::*;
use uuid::Uuid;

const PARTITIONS: i32 = 4;
const KILLS: usize = 5;

fn write_config(
    dir: &Path,
    db_url: &str,
    bootstrap: &str,
    audit_topic: &str,
    group: &str,
) -> std::path::PathBuf {
    let path = dir.join("collect.toml");
    let toml = format!(
        r#"
[store]
url = "{db_url}"
acquire_timeout = "200ms"

[[sources]]
name = "a"
topics = ["{audit_topic}"]
group_id = "{group}"
[sources.kafka]
bootstrap_servers = "{bootstrap}"
[sources.kafka.consumer]
"session.timeout.ms" = 6000
# Static membership: a restarted collector takes its partitions back at once.
"group.instance.id" = "collector-0"

[http]
listen = "127.0.0.1:0"

[batch]
max_messages = 200
max_wait = "20ms"
# Most of each cycle is then spent with a batch stored but its offsets not yet
# committed, so that kills land there too.
test_pause_before_offset_commit = "100ms"

[retry]
initial_backoff = "50ms"
max_backoff = "500ms"

[retention]
enabled = false
"#
    );
    std::fs::write(&path, toml).expect("write collect.toml");
    path
}

/// Kills the child when dropped (a failing test leaves no collector behind).
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_collector(config: &Path, log: &Path) -> Running {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("open log");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_kafka-audit"))
        .arg("collect")
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn kafka-audit collect");
    Running(child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_ingestion_then_restart_counts_every_increment_exactly_once() {
    let _alone = crate::ALONE.lock().await;
    let bootstrap = testkit::kafka_a();
    let db = testkit::fresh_database("collect_sigkill").await;
    let audit_topic = testkit::create_unique_topic(&bootstrap, "audit-sigkill", PARTITIONS).await;
    let group = testkit::unique("collect-sigkill");
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), db.url(), &bootstrap, &audit_topic, &group);
    let log = dir.path().join("collector.log");

    let topics: Vec<String> = (0..10).map(|t| format!("topic-{t}")).collect();
    let messages: Vec<AuditMessage> = (0..10_000u64)
        .map(|seed| {
            increment(
                &topics[(seed % 10) as usize],
                (seed % 3) as i64,
                1 + seed % 991,
                seed,
            )
        })
        .collect();
    let mut records: Vec<(String, Vec<u8>)> = Vec::new();
    let mut record_uuids: Vec<Uuid> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        records.push(keyed(m));
        record_uuids.push(m.uuid);
        if i % 5 == 0 {
            records.push(keyed(m)); // resent, as by an at-least-once emitter
            record_uuids.push(m.uuid);
        }
    }
    let total_records = records.len() as i64;
    // Where each record landed, (partition, offset) → UUID, filled as deliveries arrive.
    let landed: Arc<Mutex<HashMap<(i32, i64), Uuid>>> = Arc::default();

    // A continuous stream: paced so that ingestion goes on across all the kills.
    let producer = producer(&bootstrap);
    let background = {
        let topic = audit_topic.clone();
        let chunks: Vec<Vec<(String, Vec<u8>)>> = records.chunks(100).map(|c| c.to_vec()).collect();
        let uuids: Vec<Vec<Uuid>> = record_uuids.chunks(100).map(|c| c.to_vec()).collect();
        let landed = Arc::clone(&landed);
        tokio::spawn(async move {
            let mut pace = tokio::time::interval(Duration::from_millis(30));
            for (chunk, uuids) in chunks.into_iter().zip(uuids) {
                pace.tick().await;
                let positions = produce(&producer, &topic, &chunk).await;
                landed
                    .lock()
                    .unwrap()
                    .extend(positions.into_iter().zip(uuids));
            }
        })
    };

    let store = Store::connect(db.url()).await.unwrap();
    let Store::Postgres(pg) = &store else {
        unreachable!("a PostgreSQL URL")
    };
    // Per kill: committed offsets per partition and the UUIDs stored, right after it.
    let mut snapshots: Vec<(Vec<i64>, HashSet<Uuid>)> = Vec::new();
    let mut kills = 0;
    let mut last = 0;
    for _ in 0..KILLS {
        let mut child = spawn_collector(&config, &log);
        // Kill only once this incarnation has made progress, i.e. while it ingests.
        let progressed = testkit::wait_until(Duration::from_secs(60), || {
            committed(&bootstrap, &group, &audit_topic, PARTITIONS) >= last + 300
        });
        assert!(
            progressed,
            "collector made no progress; log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        if kills % 2 == 0 {
            // Spread the kill instants over a batch cycle (progress is seen right after
            // an offset commit).
            std::thread::sleep(Duration::from_millis(37 * kills as u64 % 130));
        } else {
            // Aim at the window between a store commit and its offset commit: kill as
            // soon as a batch stored after the progress seen is visible (the collector
            // then pauses 100 ms before committing its offsets). A fixed instant after
            // the last commit lands before the next store commit whenever a batch takes
            // longer than the spread (a loaded machine: no kill hit it in 5).
            let stored_then = stored_count(pg.pool()).await;
            let stored = testkit::wait_until_async(Duration::from_secs(30), || async {
                stored_count(pg.pool()).await > stored_then
            })
            .await;
            assert!(stored, "no batch stored within 30 s");
        }
        child.0.kill().expect("SIGKILL");
        let status = child.0.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9),
            "killed by SIGKILL"
        );
        kills += 1;
        let offsets = committed_per_partition(&bootstrap, &group, &audit_topic, PARTITIONS);
        let stored_uuids: Vec<Uuid> = sqlx::query_scalar("SELECT uuid FROM audit_message")
            .fetch_all(pg.pool())
            .await
            .unwrap();
        last = offsets.iter().sum();
        eprintln!("kill {kills}: committed records {last} of {total_records}");
        snapshots.push((offsets, stored_uuids.into_iter().collect()));
    }
    assert!(
        last < total_records,
        "the stream must still be running at the last kill"
    );
    background.await.unwrap();

    // At every kill, whatever had its offset committed was stored (offsets move only
    // after the store commit). Stored beyond the committed offsets means the kill
    // landed between the store commit and the offset commit: those records are read
    // again by the next incarnation and must count as duplicates.
    let landed = landed.lock().unwrap().clone();
    assert_eq!(landed.len() as i64, total_records);
    let mut replayed_after_kills = vec![];
    for (k, (offsets, stored)) in snapshots.iter().enumerate() {
        let committed_uuids: HashSet<Uuid> = landed
            .iter()
            .filter(|((partition, offset), _)| *offset < offsets[*partition as usize])
            .map(|(_, uuid)| *uuid)
            .collect();
        let lost: Vec<&Uuid> = committed_uuids.difference(stored).collect();
        assert!(
            lost.is_empty(),
            "kill {}: {} committed but not stored",
            k + 1,
            lost.len()
        );
        replayed_after_kills.push(stored.difference(&committed_uuids).count());
    }
    eprintln!("messages stored but not yet committed at each kill (replayed, then deduplicated): {replayed_after_kills:?}");
    assert!(
        replayed_after_kills.iter().any(|n| *n > 0),
        "no kill landed between a store commit and its offset commit"
    );

    // Drain with a last incarnation, then stop it gracefully.
    let mut child = spawn_collector(&config, &log);
    let drained = testkit::wait_until(Duration::from_secs(120), || {
        committed(&bootstrap, &group, &audit_topic, PARTITIONS) == total_records
    });
    assert!(
        drained,
        "collector did not drain; log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let expected = truth(&messages);
    assert_eq!(
        expected.values().map(|v| v.2).sum::<u64>(),
        messages.len() as u64
    );
    assert_eq!(
        wait_stored(&store, &topics, &expected).await,
        expected,
        "stored counts differ from the distinct increments"
    );

    let pid = child.0.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let mut status = None;
    let exited = testkit::wait_until(Duration::from_secs(30), || {
        status = child.0.try_wait().unwrap();
        status.is_some()
    });
    assert!(exited, "no exit within 30 s of SIGTERM");
    assert!(
        status.unwrap().success(),
        "clean exit after SIGTERM: {status:?}"
    );
}

async fn stored_count(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM audit_message")
        .fetch_one(pool)
        .await
        .expect("count stored messages")
}
