//! A PostgreSQL restart in the middle of ingestion (`deploy/dev/postgres restart`):
//! the collector stops consuming while the store is down, retries with backoff,
//! resumes, and after draining the stored counts equal the sum of the distinct
//! increments produced, exactly. Its own test binary: the restart would disturb
//! other tests of the same process.

#[path = "it/support/mod.rs"]
mod support;

use std::path::Path;
use std::time::Duration;

use audit_lib::AuditMessage;
use store::Store;
use support::*;
use tokio_util::sync::CancellationToken;

const PARTITIONS: i32 = 4;

fn restart_postgres() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/dev/postgres");
    let status = std::process::Command::new(&script)
        .arg("restart")
        .status()
        .expect("run deploy/dev/postgres restart");
    assert!(
        status.success(),
        "{} restart failed: {status}",
        script.display()
    );
}

/// When the server last started, so the test can tell that it restarted.
async fn postmaster_start(url: &str) -> String {
    let pool = sqlx::PgPool::connect(url)
        .await
        .expect("connect to PostgreSQL");
    let started: String = sqlx::query_scalar("SELECT pg_postmaster_start_time()::text")
        .fetch_one(&pool)
        .await
        .expect("pg_postmaster_start_time()");
    pool.close().await;
    started
}

fn metric(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_restart_during_ingestion_loses_nothing_and_counts_nothing_twice() {
    let bootstrap = testkit::kafka_a();
    let db = testkit::fresh_database("collector_pg_restart").await;
    let audit_topic =
        testkit::create_unique_topic(&bootstrap, "audit-pg-restart", PARTITIONS).await;
    let group = testkit::unique("collector-pg-restart");
    let topics: Vec<String> = (0..10).map(|t| format!("topic-{t}")).collect();
    let messages: Vec<AuditMessage> = (0..6000u64)
        .map(|seed| {
            increment(
                &topics[(seed % 10) as usize],
                (seed % 3) as i64,
                1 + seed % 997,
                seed,
            )
        })
        .collect();
    // Every 7th message is delivered twice (as an at-least-once auditor would).
    let mut records: Vec<(String, Vec<u8>)> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        records.push(keyed(m));
        if i % 7 == 0 {
            records.push(keyed(m));
        }
    }
    let total_records = records.len() as i64;

    let shutdown = CancellationToken::new();
    let collector = collector::start(
        config(db.url(), &bootstrap, &audit_topic, &group),
        shutdown.clone(),
    )
    .await
    .expect("start collector");
    let addr = collector.http_addr.unwrap();
    let producer = producer(&bootstrap);
    // Paced production (a rate, not a wait for a condition), so that the collector
    // keeps writing small batches before, during and after the restart.
    let chunks: Vec<Vec<(String, Vec<u8>)>> = records.chunks(100).map(|c| c.to_vec()).collect();
    let n_chunks = chunks.len();
    let background = {
        let topic = audit_topic.clone();
        tokio::spawn(async move {
            let mut pace = tokio::time::interval(Duration::from_millis(40));
            for chunk in chunks {
                pace.tick().await;
                produce(&producer, &topic, &chunk).await;
            }
        })
    };
    assert!(
        testkit::wait_until(Duration::from_secs(60), || {
            committed(&bootstrap, &group, &audit_topic, PARTITIONS) > total_records / 4
        }),
        "no progress before the restart"
    );
    let started_before = postmaster_start(db.url()).await;
    tokio::task::spawn_blocking(restart_postgres).await.unwrap();
    assert_ne!(
        postmaster_start(db.url()).await,
        started_before,
        "PostgreSQL did not restart"
    );
    background.await.unwrap();
    assert!(n_chunks > 50);

    assert!(
        testkit::wait_until(Duration::from_secs(120), || committed(
            &bootstrap,
            &group,
            &audit_topic,
            PARTITIONS
        ) == total_records),
        "collector did not drain after the restart"
    );
    let store = Store::connect(db.url()).await.unwrap();
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

    let (_, metrics) = http_get(addr, "/metrics").await;
    eprintln!(
        "store errors retried during the restart: {}; records {total_records}, distinct increments {}",
        metric(&metrics, "kafka_audit_collector_store_errors_total"),
        messages.len()
    );
    // Whether a transaction of the collector failed depends on timing (a restart can
    // fall between two batches, and the pool reconnects); the restart itself is
    // asserted above, and the counts must be exact either way.
    assert_eq!(
        http_get(addr, "/healthz").await.0,
        200,
        "healthy again after the restart"
    );
    // The gauge is set by the roll-up pass after the one that emptied the queue.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, metrics) = http_get(addr, "/metrics").await;
        if metric(&metrics, "kafka_audit_collector_rollup_caught_up") == 1.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "roll-up not caught up 30 s after the counts were stored:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(30), collector.wait())
        .await
        .expect("clean shutdown")
        .unwrap();
}
