//! End to end on a store distributed by topic with Citus (docs/operations.md): the
//! scenario of late_auditor.rs (traffic replicated from cluster A to B with 37 messages
//! dropped in one window and 11 duplicated in another, the downstream auditor started
//! two windows late) with the collector and serve on a Citus coordinator, distributed
//! with deploy/citus/distribute.sql, and the collector's retention running beside the
//! ingestion. Over the whole run the webhook receiver gets exactly one page per
//! injected fault; the old days and the default partition's old rows seeded before the
//! start are deleted (counted before and after), and nothing of the run is.
//!
//! Runs where `KAFKA_AUDIT_TEST_CITUS_URL` names a cluster (`deploy/dev/citus`);
//! skipped, saying so, otherwise (README, "Tests on Citus").

use std::time::Duration;

use store::{
    AuditBody, Batch, Deployment, Increment, Ingest, Inventory, Message, PgStore, Reject, Upkeep,
    VerdictReads, WindowStats,
};

use crate::e2e::*;

const PARTITIONS: i32 = 3;
const DAY: i64 = 86_400_000;
const W: i64 = 600_000;

fn old_increment(topic: &str, window_start: i64) -> Message {
    Message {
        version: audit_lib::AUDIT_MESSAGE_VERSION,
        uuid: uuid::Uuid::new_v4(),
        topic: topic.into(),
        tier: "regional".into(),
        datacenter: "dc1".into(),
        host: "regional-dc1-0".into(),
        emitted_at: window_start + W,
        body: AuditBody::Increment(Increment {
            window_start,
            window_end: window_start + W,
            stats: WindowStats {
                count: 3,
                bytes: 300,
                latency: store::LatencyHistogram::from_buckets(0, 0, 10, [(100, 3)]).unwrap(),
                ..WindowStats::default()
            },
        }),
    }
}

/// Rows of what was seeded old: `(old-day windows, default-partition windows,
/// their UUIDs, rejects)`.
async fn old_rows(pool: &sqlx::PgPool, old_day: i64) -> (i64, i64, i64, i64) {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM audit_window
                 WHERE topic LIKE 'old-%' AND window_start_ms >= $1 AND window_start_ms < $1 + 86400000),
                (SELECT count(*) FROM audit_window_default WHERE topic LIKE 'old-%'),
                (SELECT count(*) FROM audit_message WHERE topic = ANY(ARRAY['old-a', 'old-b'])),
                (SELECT count(*) FROM audit_reject WHERE source = 'seeded-old')",
    )
    .bind(old_day)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_citus_two_tiers_page_only_the_real_faults_while_retention_deletes_old_rows() {
    let Some(db) = testkit::fresh_citus_database("e2e_citus").await else {
        return;
    };
    let _alone = crate::ALONE.lock().await;
    let store = PgStore::connect(db.url()).await.expect("connect to Citus");
    store.migrate().await.expect("migrate");
    sqlx::raw_sql(include_str!("../../../deploy/citus/distribute.sql"))
        .execute(store.pool())
        .await
        .expect("deploy/citus/distribute.sql");

    // Old rows: a day five days back (its own partitions) and windows of 1970 (the
    // default partition), with their UUIDs, and old rejects.
    let today = common::now_ms() / DAY * DAY;
    let old_day = today - 5 * DAY;
    store.prepare_partitions(old_day, old_day).await.unwrap();
    let mut seeded = vec![];
    for topic in ["old-a", "old-b"] {
        for w in [0, 70, 143] {
            seeded.push(old_increment(topic, old_day + w * W));
        }
        seeded.push(old_increment(topic, DAY + W));
    }
    let mut old = Batch {
        messages: seeded,
        rejects: vec![Reject {
            source: "seeded-old".into(),
            reason: "old".into(),
            payload: "x".into(),
        }],
        received_at_ms: old_day,
    };
    store.write_batch(&old).await.unwrap();
    old.rejects[0].reason = "older".into();
    old.messages.clear();
    store.write_batch(&old).await.unwrap();
    let before = old_rows(store.pool(), old_day).await;
    eprintln!("seeded old rows (old-day windows, default windows, UUIDs, rejects): {before:?}");
    assert_eq!(before, (6, 2, 8, 2));

    let rig = TwoTiers::with_database("citus-e2e", db).await;
    let t = OneTopic::start_in(rig, "citus-e2e", PARTITIONS, |c| {
        c.retention.enabled = true;
        c.retention.windows = Duration::from_secs(2 * 86_400);
        c.retention.messages = Duration::from_secs(2 * 86_400);
        c.retention.interval = Duration::from_secs(1);
        c.retention.batch_size = 1; // the default partition's rows in several batches
    })
    .await;
    let (rig, topic, state) = (&t.rig, t.topic.as_str(), &t.state);
    let traffic = rig.spawn_traffic(topic, Traffic::loss_then_duplication(PARTITIONS));
    let (sent, all_final, both_paged) = t.late_downstream(traffic).await;
    let judged = anomalies(state, topic, sent.first(), sent.end());
    let retired = testkit::wait_until_async(Duration::from_secs(60), || async {
        old_rows(store.pool(), old_day).await == (0, 0, 0, 0)
    })
    .await;
    let after = old_rows(store.pool(), old_day).await;
    eprintln!("old rows after the run's retention passes: {after:?}");
    let run_windows = store
        .topic_windows(topic, store::TimeRange::new(sent.first(), sent.end()))
        .await
        .unwrap();
    t.shutdown([]).await;
    assert!(retired, "old rows left: {after:?}");
    assert_eq!(
        store.list_topics().await.unwrap(),
        vec![topic.to_string()],
        "the old topics are forgotten, the run's kept"
    );
    assert!(!run_windows.is_empty());
    t.assert_loss_then_duplication(&sent, &judged, all_final, both_paged);
}
