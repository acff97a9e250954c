//! Converting an existing store (docs/operations.md): a PostgreSQL store written by the
//! schema before the time partitions converts with identical verdicts. The old store is
//! filled through the old schema's SQL (`store::old_schema`) with the same rows a
//! reference store received natively; after `migrate` converts it, the detection engine
//! judges both alike.

use crate::support;

use store::{Message, Store};
use support::*;
use web::AppState;

const DAY: i64 = 86_400_000;

/// Windows across three days: loss, duplication, a checksum mismatch at equal
/// counts, exact windows, a second datacenter; the downstream auditor caught up.
fn scenario() -> Vec<Message> {
    let mut messages = vec![];
    for d in 0..3 {
        let w = settled_window() - d * DAY - 3 * WINDOW;
        messages.extend([
            increment("orders", "producer", "dc1", w, 100, 1000),
            increment("orders", "regional", "dc1", w, 90 + d as u64, 900),
            increment("orders", "producer", "dc1", w + WINDOW, 40, 400),
            increment("orders", "regional", "dc1", w + WINDOW, 40, 400),
            increment("refunds", "producer", "dc1", w, 100, 1000),
            increment("refunds", "regional", "dc1", w, 110, 1100),
            increment("refunds", "producer", "dc2", w, 20, 200),
            increment("refunds", "regional", "dc2", w, 20, 201),
            increment("payments", "producer", "dc1", w + 2 * WINDOW, 7, 70),
            increment("payments", "regional", "dc1", w + 2 * WINDOW, 7, 70),
        ]);
    }
    for topic in ["orders", "refunds", "payments"] {
        messages.push(caught_up(topic, "regional", "dc1"));
    }
    messages.push(caught_up("refunds", "regional", "dc2"));
    messages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verdicts_are_identical_after_converting_an_old_store() {
    let extra = "[serve]\nevaluate_every = \"1h\"";
    let messages = scenario();
    let (reference, _ref_db) = state(Backend::Postgres, extra).await;
    write(&reference.store, messages.clone()).await;
    let Store::Postgres(reference_pg) = &reference.store else {
        unreachable!("a PostgreSQL state")
    };

    let db = testkit::fresh_database("web_conversion").await;
    let pool = sqlx::PgPool::connect(db.url()).await.unwrap();
    store::old_schema::migrate(&pool).await;
    store::old_schema::fill(&pool, reference_pg, &messages, &[]).await;
    let converted = Store::connect(db.url()).await.unwrap();
    use store::Deployment;
    converted.migrate().await.expect("the conversion migration");
    let converted = AppState::new(config(extra), converted).expect("state");

    let now = now_ms();
    reference.evaluate(now).await.unwrap();
    converted.evaluate(now).await.unwrap();
    let expected = reference.index.read().unwrap();
    let after = converted.index.read().unwrap();
    assert_eq!(after.entries.len(), expected.entries.len());
    // The index keeps the windows that are not exact: per day a loss, a duplication
    // and a checksum mismatch.
    assert_eq!(after.entries.len(), 3 * 3, "{:?}", after.entries.keys());
    for (key, verdict) in &expected.entries {
        assert_eq!(after.entries.get(key), Some(verdict), "{key:?}");
    }
    assert_eq!(after.auditors, expected.auditors);
    assert_eq!(after.topics, expected.topics);
    // The scenario does hold verdicts worth comparing.
    let verdicts: std::collections::BTreeSet<String> = after
        .entries
        .values()
        .map(|e| format!("{:?}", e.verdict))
        .collect();
    assert!(verdicts.len() >= 3, "{verdicts:?}");
}
