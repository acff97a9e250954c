//! Security review 2, finding 3: the roll-up copied four names per progress partition
//! (topic, tier and datacenter into the key, host into the value), and PostgreSQL
//! built it twice and bound every name once per partition: with names of 249 and 255
//! bytes, a batch of reports of 10 000 partitions cost ~1–2 KB per partition (an 8 MiB
//! body ~0.2–0.5 GB; a 64 MiB Kafka batch OOM-killed the collector, which read it
//! again after the restart). The roll-up now borrows the names from the batch and
//! PostgreSQL binds them once per (topic, tier, datacenter) and per host: storing a
//! batch grows the heap by less than one copy of its names per partition.
//!
//! The counting allocator (`testkit::alloc`) counts every allocation of this binary:
//! one test only, so that no other test's allocations are counted.

use audit_lib::{AuditMessage, Identity, PartitionProgress};
use store::{Batch, Deployment, Ingest, Store, VerdictReads};

#[global_allocator]
static GLOBAL: testkit::alloc::Counting = testkit::alloc::Counting;

/// 100 000 partitions in all: `progress(None)` reads them back whole.
const REPORTS: usize = 10;
const PARTITIONS: i32 = 10_000;

/// Reports of 10 000 partitions of topics of 249 bytes by a host of 255 (the longest
/// valid names): what a batch of the most costly valid progress is made of.
fn costly_batch() -> Batch {
    let identity = Identity::new("producer", "dc1", "h".repeat(255));
    let now = common::now_ms();
    Batch {
        messages: (0..REPORTS)
            .map(|i| {
                AuditMessage::progress(
                    &identity,
                    format!("{i:0>249}"),
                    (0..PARTITIONS)
                        .map(|partition| PartitionProgress {
                            partition,
                            next_offset: 1,
                            record_time: Some(now),
                            lag: Some(0),
                            max_record_time: Some(now),
                            log_append_time: false,
                        })
                        .collect(),
                    now,
                )
            })
            .collect(),
        rejects: vec![],
        received_at_ms: now,
    }
}

/// Peak heap growth while `store` stores `batch` as the collector does.
async fn peak_while_storing(store: &Store, batch: &Batch) -> usize {
    let baseline = testkit::alloc::reset_peak();
    let outcome = store.stage_batch(batch).await.expect("stored");
    let peak = testkit::alloc::peak_growth(baseline);
    assert_eq!(outcome.accepted(), REPORTS);
    peak
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storing_progress_costs_less_than_a_copy_of_its_names_per_partition() {
    let batch = costly_batch();
    let entries = REPORTS * PARTITIONS as usize;
    let names_per_entry = batch.messages[0].topic.len() + batch.messages[0].host.len();
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Store::connect(&format!("sqlite:{}", dir.path().join("a.db").display()))
        .await
        .unwrap();
    let db = testkit::fresh_database("rollup_memory").await;
    let postgres = Store::connect(db.url()).await.unwrap();
    for (backend, store) in [("sqlite", &sqlite), ("postgres", &postgres)] {
        store.migrate().await.expect("migrate");
        let peak = peak_while_storing(store, &batch).await;
        eprintln!(
            "{backend}: {entries} progress partitions stored, peak heap growth {} MiB ({} bytes per partition; its names are {names_per_entry} bytes)",
            peak >> 20,
            peak / entries
        );
        assert!(
            peak < entries * names_per_entry,
            "{backend}: storing {entries} partitions grew the heap by {peak} bytes"
        );
        let stored = store.progress(None).await.unwrap().len();
        assert_eq!(stored, entries, "{backend}");
    }
}
