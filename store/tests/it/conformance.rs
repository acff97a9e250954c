//! One contract, two stores: every case runs against PostgreSQL (a fresh database on
//! the dev server per test) and SQLite (a fresh file per test), and against PostgreSQL
//! distributed by topic on a Citus cluster when `KAFKA_AUDIT_TEST_CITUS_URL` names one
//! (skipped, saying so, otherwise: README, "Tests on Citus").

use std::collections::BTreeMap;
use std::time::Duration;

use store::*;
use uuid::Uuid;

const W: i64 = 600_000; // 10-minute windows
const T0: i64 = 1_764_410_400_000;

/// Keeps whatever backs a store (database, temp dir) alive for the test.
enum Backing {
    Pg(#[allow(dead_code)] testkit::TestDatabase),
    Sqlite(#[allow(dead_code)] tempfile::TempDir),
}

async fn postgres() -> (Store, Backing) {
    let db = testkit::fresh_database("store_conformance").await;
    let store = Store::connect(db.url())
        .await
        .expect("connect to the test database");
    store.migrate().await.expect("migrate");
    (store, Backing::Pg(db))
}

/// A fresh database on the Citus cluster, migrated and distributed with the commands
/// of docs/operations.md (`deploy/citus/distribute.sql`).
async fn citus() -> Option<(Store, Backing)> {
    let db = testkit::fresh_citus_database("store_conformance").await?;
    let store = crate::citus::distributed_store(db.url()).await;
    Some((Store::Postgres(store), Backing::Pg(db)))
}

async fn sqlite() -> (Store, Backing) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("audit.db");
    let store = Store::connect(path.to_str().unwrap())
        .await
        .expect("open sqlite");
    store.migrate().await.expect("migrate");
    (store, Backing::Sqlite(dir))
}

macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod on_postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let (store, _backing) = super::postgres().await;
                    super::$case(&store).await;
                }
            )*
        }
        mod on_sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let (store, _backing) = super::sqlite().await;
                    super::$case(&store).await;
                }
            )*
        }
        mod on_citus {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let Some((store, _backing)) = super::citus().await else {
                        return;
                    };
                    super::$case(&store).await;
                }
            )*
        }
    };
}

conformance!(
    a_message_written_twice_is_stored_once,
    increments_add_up_exactly_against_ground_truth,
    checksums_add_modulo_2_pow_64,
    progress_keeps_the_latest_watermark_per_partition,
    progress_from_the_future_does_not_pin_out_later_reports,
    every_progress_read_carries_the_record_time_evidence,
    emitters_record_last_seen_times,
    windows_in_range_pages_by_topic,
    windows_in_range_across_a_day_boundary_read_each_bucket_once,
    offset_ranges_widen,
    rejects_are_kept_with_their_reason,
    retention_removes_old_windows_and_uuids_in_batches,
    an_invalid_message_fails_the_batch_and_writes_nothing,
    concurrent_writers_of_the_same_messages_count_them_once,
    migrating_twice_is_harmless,
    staged_increments_add_up_exactly_after_rollup,
    staged_and_direct_writes_deduplicate_each_other,
    concurrent_staging_and_rollups_count_each_increment_once,
    sums_saturate_at_i64_max_instead_of_failing,
    nul_in_a_name_or_a_reject_is_never_a_database_error,
    bucket_reads_are_capped_and_never_truncate_a_histogram,
    window_keys_list_each_topic_window_once_in_order,
    changed_windows_are_those_with_recent_increments,
    auditor_reports_give_one_row_per_auditor,
    staged_windows_are_increments_not_yet_rolled_up,
    open_alerts_are_saved_replaced_listed_and_deleted,
    proven_losses_keep_the_first_proof_and_are_forgotten_by_window,
    latest_window_ms_is_the_length_of_the_newest_window,
);

/// Rolls up everything staged.
async fn rollup_all(store: &Store) -> u64 {
    let mut total = 0;
    loop {
        let n = store.rollup(1000).await.unwrap();
        if n == 0 {
            return total;
        }
        total += n;
    }
}

async fn all_rows(store: &Store) -> Vec<WindowRow> {
    let mut stored = vec![];
    for topic in store.list_topics().await.unwrap() {
        stored.extend(store.topic_windows(&topic, all()).await.unwrap());
    }
    stored.sort_by_key(|r| r.key());
    stored
}

async fn staged_increments_add_up_exactly_after_rollup(store: &Store) {
    let mut rng = Rng(99);
    let increments: Vec<Increment> = (0..500).map(|_| random_increment(&mut rng)).collect();
    let mut progress_msg = progress("topic-0", "auditor-9", T0 + 5, &[(3, 77)]);
    progress_msg.tier = "regional".into();
    let mut first = batch(vec![Message::from(progress_msg.clone())]);
    first.rejects = vec![Reject {
        source: "s".into(),
        reason: "r".into(),
        payload: "p".into(),
    }];
    assert_eq!(
        store.stage_batch(&first).await.unwrap().outcomes,
        vec![WriteOutcome::Accepted]
    );
    for chunk in increments.chunks(64) {
        let out = store
            .stage_batch(&batch(chunk.iter().cloned().map(Message::from).collect()))
            .await
            .unwrap();
        assert_eq!(out.accepted(), chunk.len());
    }
    for chunk in increments.chunks(100) {
        let out = store
            .stage_batch(&batch(chunk.iter().cloned().map(Message::from).collect()))
            .await
            .unwrap();
        assert_eq!(
            out.duplicates(),
            chunk.len(),
            "a replay is all duplicates, staged or not"
        );
    }
    let rolled = rollup_all(store).await;
    assert!(
        rolled == 0 || rolled == increments.len() as u64,
        "rolled up {rolled}"
    );
    assert_eq!(rollup_all(store).await, 0, "nothing is rolled up twice");
    let truth = ground_truth(&increments);
    let expected: Vec<&WindowRow> = truth.values().map(|(r, _)| r).collect();
    assert_rows_match(&all_rows(store).await, &expected);
    for (key, (_, offsets)) in &truth {
        assert_eq!(store.window_offsets(key).await.unwrap(), spans(offsets));
    }
    // Progress, emitters and rejects are written at staging time.
    let p = store.progress(Some("topic-0")).await.unwrap();
    assert_eq!((p.len(), p[0].next_offset), (1, 77));
    assert!(store
        .emitters()
        .await
        .unwrap()
        .iter()
        .any(|e| e.host == "auditor-9"));
    assert_eq!(store.rejects(10).await.unwrap().len(), 1);
}

async fn staged_and_direct_writes_deduplicate_each_other(store: &Store) {
    let a = increment("orders", "regional", "dc1", 0, 10);
    let b = increment("orders", "regional", "dc1", 0, 20);
    assert_eq!(
        store
            .write_batch(&batch(vec![Message::from(a.clone())]))
            .await
            .unwrap()
            .accepted(),
        1
    );
    assert_eq!(
        store
            .stage_batch(&batch(vec![Message::from(b.clone())]))
            .await
            .unwrap()
            .accepted(),
        1
    );
    let out = store
        .stage_batch(&batch(vec![
            Message::from(a.clone()),
            Message::from(b.clone()),
        ]))
        .await
        .unwrap();
    assert_eq!(
        out.outcomes,
        vec![WriteOutcome::Duplicate, WriteOutcome::Duplicate]
    );
    let out = store
        .write_batch(&batch(vec![Message::from(b), Message::from(a)]))
        .await
        .unwrap();
    assert_eq!(
        out.outcomes,
        vec![WriteOutcome::Duplicate, WriteOutcome::Duplicate]
    );
    rollup_all(store).await;
    let rows = all_rows(store).await;
    assert_eq!((rows.len(), rows[0].count, rows[0].increments), (1, 30, 2));
}

async fn concurrent_staging_and_rollups_count_each_increment_once(store: &Store) {
    let mut rng = Rng(5);
    let increments: Vec<Increment> = (0..600).map(|_| random_increment(&mut rng)).collect();
    let mut tasks = vec![];
    for writer in 0..4usize {
        let store = store.clone();
        let mut mine = increments.clone();
        mine.rotate_left(writer * 131);
        let size = 40 + writer * 17;
        tasks.push(tokio::spawn(async move {
            let mut accepted = 0;
            for chunk in mine.chunks(size) {
                let b = batch(chunk.iter().cloned().map(Message::from).collect());
                accepted += store.stage_batch(&b).await.unwrap().accepted();
                // Roll up concurrently with the other writers' staging.
                store.rollup(50).await.unwrap();
            }
            accepted
        }));
    }
    let mut accepted = 0;
    for t in tasks {
        accepted += t.await.unwrap();
    }
    assert_eq!(
        accepted,
        increments.len(),
        "each UUID accepted by exactly one writer"
    );
    rollup_all(store).await;
    let truth = ground_truth(&increments);
    let expected: Vec<&WindowRow> = truth.values().map(|(r, _)| r).collect();
    assert_rows_match(&all_rows(store).await, &expected);
}

/// Small deterministic generator (no dependency needed for a test's random numbers).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The flat shape these tests write increments in; the store takes audit-lib's
/// `AuditMessage`, which `Message::from` builds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Increment {
    uuid: Uuid,
    topic: String,
    tier: String,
    datacenter: String,
    host: String,
    window_start_ms: i64,
    window_end_ms: i64,
    emitted_at_ms: i64,
    count: u64,
    bytes: u64,
    no_time_count: u64,
    malformed_count: u64,
    out_of_bounds_count: u64,
    observation_time_count: u64,
    delivery_failed_count: u64,
    checksum: u64,
    latency: Latency,
    offsets: Vec<OffsetSpan>,
    max_observed_at: Option<i64>,
}

/// A latency histogram by its parts, as the tests write and compare them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Latency {
    zero_count: u64,
    negative_count: u64,
    max_ms: u64,
    buckets: Vec<(i32, u64)>,
}

impl Latency {
    fn histogram(&self) -> LatencyHistogram {
        LatencyHistogram::from_buckets(
            self.zero_count,
            self.negative_count,
            self.max_ms as i64,
            self.buckets.iter().map(|&(i, c)| (i as u32, c)),
        )
        .expect("a valid test histogram")
    }

    fn of(h: &LatencyHistogram) -> Latency {
        Latency {
            zero_count: h.zero_count(),
            negative_count: h.negative_count(),
            max_ms: h.max_ms() as u64,
            buckets: h.buckets().map(|(i, c)| (i as i32, c)).collect(),
        }
    }
}

impl From<Increment> for Message {
    fn from(i: Increment) -> Message {
        Message {
            version: audit_lib::AUDIT_MESSAGE_VERSION,
            uuid: i.uuid,
            topic: i.topic,
            tier: i.tier,
            datacenter: i.datacenter,
            host: i.host,
            emitted_at: i.emitted_at_ms,
            body: AuditBody::Increment(store::Increment {
                window_start: i.window_start_ms,
                window_end: i.window_end_ms,
                stats: WindowStats {
                    count: i.count,
                    bytes: i.bytes,
                    no_time_count: i.no_time_count,
                    malformed_count: i.malformed_count,
                    out_of_bounds_count: i.out_of_bounds_count,
                    observation_time_count: i.observation_time_count,
                    delivery_failed_count: i.delivery_failed_count,
                    checksum: audit_lib::Checksum(i.checksum),
                    latency: i.latency.histogram(),
                    offsets: i.offsets,
                    max_observed_at: i.max_observed_at,
                },
            }),
        }
    }
}

/// A progress report as the tests write it.
#[derive(Debug, Clone)]
struct Progress {
    uuid: Uuid,
    topic: String,
    tier: String,
    datacenter: String,
    host: String,
    emitted_at_ms: i64,
    partitions: Vec<PartitionProgress>,
}

impl From<Progress> for Message {
    fn from(p: Progress) -> Message {
        Message {
            version: audit_lib::AUDIT_MESSAGE_VERSION,
            uuid: p.uuid,
            topic: p.topic,
            tier: p.tier,
            datacenter: p.datacenter,
            host: p.host,
            emitted_at: p.emitted_at_ms,
            body: AuditBody::Progress(p.partitions),
        }
    }
}

fn increment(topic: &str, tier: &str, dc: &str, window: i64, count: u64) -> Increment {
    Increment {
        uuid: Uuid::new_v4(),
        topic: topic.into(),
        tier: tier.into(),
        datacenter: dc.into(),
        host: "auditor-0".into(),
        window_start_ms: T0 + window * W,
        window_end_ms: T0 + (window + 1) * W,
        emitted_at_ms: T0 + (window + 1) * W + 1000,
        count,
        bytes: count.saturating_mul(100).min(i64::MAX as u64),
        no_time_count: 0,
        malformed_count: 0,
        out_of_bounds_count: 0,
        observation_time_count: 0,
        delivery_failed_count: 0,
        checksum: count.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        latency: Latency {
            zero_count: 0,
            negative_count: 0,
            max_ms: 0,
            buckets: vec![],
        },
        offsets: vec![],
        max_observed_at: None,
    }
}

fn random_increment(rng: &mut Rng) -> Increment {
    let topic = format!("topic-{}", rng.below(4));
    let tier = ["producer", "regional", "aggregate"][rng.below(3) as usize];
    let dc = ["dc1", "dc2"][rng.below(2) as usize];
    let count = 1 + rng.below(1000);
    let mut i = increment(&topic, tier, dc, rng.below(3) as i64, count);
    i.host = format!("auditor-{}", rng.below(3));
    i.bytes = rng.below(1 << 40);
    i.no_time_count = rng.below(count / 4 + 1);
    i.malformed_count = rng.below(count / 4 + 1);
    i.out_of_bounds_count = rng.below(count / 4 + 1);
    i.observation_time_count = rng.below(50);
    i.delivery_failed_count = rng.below(20);
    i.checksum = rng.next();
    let zero = rng.below(count / 4 + 1);
    let mut left = count - zero;
    let mut index = 100 + rng.below(50) as i32;
    let mut buckets = vec![];
    while left > 0 && buckets.len() < 20 {
        let c = 1 + rng.below(left);
        buckets.push((index, c));
        left -= c;
        index += 1 + rng.below(5) as i32;
    }
    i.latency = Latency {
        zero_count: zero,
        negative_count: rng.below(zero + 1),
        max_ms: rng.below(100_000),
        buckets,
    };
    let p = rng.below(4) as i32;
    let min = rng.below(1_000_000) as i64;
    // The record-time evidence, known or not (an emitter older than the fields), so that
    // unknown ones are seen to merge as "no evidence", not as 0.
    let known = |rng: &mut Rng| (rng.below(3) > 0).then(|| T0 + rng.below(100_000) as i64);
    i.offsets = vec![OffsetSpan {
        partition: p,
        min,
        max: min + rng.below(10_000) as i64,
        max_record_time: known(rng),
    }];
    i.max_observed_at = known(rng);
    i
}

fn batch(messages: Vec<Message>) -> Batch {
    Batch {
        messages,
        rejects: vec![],
        received_at_ms: T0 + 10 * W,
    }
}

fn all() -> TimeRange {
    TimeRange::new(T0 - 100 * W, T0 + 100 * W)
}

/// The expected window rows: the fold of `increments`, computed without the store.
/// Expected row and offset ranges (partition → (min, max, latest record time)) per
/// window.
type Truth = BTreeMap<WindowKey, (WindowRow, BTreeMap<i32, (i64, i64, Option<i64>)>)>;

fn ground_truth(increments: &[Increment]) -> Truth {
    let mut truth = Truth::new();
    for i in increments {
        let key = WindowKey {
            topic: i.topic.clone(),
            tier: i.tier.clone(),
            datacenter: i.datacenter.clone(),
            window_start_ms: i.window_start_ms,
        };
        let (row, offsets) = truth.entry(key).or_insert_with(|| {
            (
                WindowRow {
                    topic: i.topic.clone(),
                    tier: i.tier.clone(),
                    datacenter: i.datacenter.clone(),
                    window_start_ms: i.window_start_ms,
                    window_end_ms: i.window_end_ms,
                    count: 0,
                    bytes: 0,
                    no_time_count: 0,
                    malformed_count: 0,
                    out_of_bounds_count: 0,
                    observation_time_count: 0,
                    delivery_failed_count: 0,
                    checksum: 0,
                    latency: LatencyHistogram::new(),
                    increments: 0,
                    first_received_at_ms: 0,
                    last_received_at_ms: 0,
                    latency_unread: false,
                    max_observed_at_ms: None,
                    record_times: vec![],
                    max_offsets: vec![],
                },
                BTreeMap::new(),
            )
        });
        row.count += i.count;
        row.bytes += i.bytes;
        row.no_time_count += i.no_time_count;
        row.malformed_count += i.malformed_count;
        row.out_of_bounds_count += i.out_of_bounds_count;
        row.observation_time_count += i.observation_time_count;
        row.delivery_failed_count += i.delivery_failed_count;
        row.checksum = row.checksum.wrapping_add(i.checksum);
        row.latency.merge(&i.latency.histogram());
        row.increments += 1;
        row.max_observed_at_ms = row.max_observed_at_ms.max(i.max_observed_at);
        for o in &i.offsets {
            let e = offsets
                .entry(o.partition)
                .or_insert((o.min, o.max, o.max_record_time));
            e.0 = e.0.min(o.min);
            e.1 = e.1.max(o.max);
            e.2 = e.2.max(o.max_record_time);
        }
        row.record_times = offsets
            .iter()
            .filter_map(|(&p, &(_, _, t))| Some((p, t?)))
            .collect();
        row.max_offsets = offsets.iter().map(|(&p, &(_, max, _))| (p, max)).collect();
    }
    truth
}

/// The offset spans a window's truth expects `window_offsets` to read back.
fn spans(offsets: &BTreeMap<i32, (i64, i64, Option<i64>)>) -> Vec<OffsetSpan> {
    offsets
        .iter()
        .map(|(&partition, &(min, max, max_record_time))| OffsetSpan {
            partition,
            min,
            max,
            max_record_time,
        })
        .collect()
}

/// Compares everything but the receive times, which the store sets.
fn assert_rows_match(stored: &[WindowRow], expected: &[&WindowRow]) {
    assert_eq!(stored.len(), expected.len(), "number of window rows");
    for (s, e) in stored.iter().zip(expected) {
        let mut s = s.clone();
        s.first_received_at_ms = 0;
        s.last_received_at_ms = 0;
        assert_eq!(&s, *e);
    }
}

async fn a_message_written_twice_is_stored_once(store: &Store) {
    let i = increment("orders", "regional", "dc1", 0, 1000);
    let out = store
        .write_batch(&batch(vec![
            Message::from(i.clone()),
            Message::from(i.clone()),
        ]))
        .await
        .unwrap();
    assert_eq!(
        out.outcomes,
        vec![WriteOutcome::Accepted, WriteOutcome::Duplicate]
    );
    let again = store
        .write_batch(&batch(vec![Message::from(i.clone())]))
        .await
        .unwrap();
    assert_eq!(again.outcomes, vec![WriteOutcome::Duplicate]);
    let rows = store.topic_windows("orders", all()).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].count, 1000);
    assert_eq!(rows[0].increments, 1);
    assert_eq!(rows[0].checksum, i.checksum);
}

async fn increments_add_up_exactly_against_ground_truth(store: &Store) {
    let mut rng = Rng(42);
    let increments: Vec<Increment> = (0..600).map(|_| random_increment(&mut rng)).collect();
    for chunk in increments.chunks(70) {
        let out = store
            .write_batch(&batch(chunk.iter().cloned().map(Message::from).collect()))
            .await
            .unwrap();
        assert_eq!(out.accepted(), chunk.len());
    }
    // Replaying everything (in other batch boundaries) changes nothing.
    for chunk in increments.chunks(111) {
        let out = store
            .write_batch(&batch(chunk.iter().cloned().map(Message::from).collect()))
            .await
            .unwrap();
        assert_eq!(out.duplicates(), chunk.len());
    }
    let truth = ground_truth(&increments);
    let topics = store.list_topics().await.unwrap();
    let expected_topics: Vec<String> = {
        let mut t: Vec<String> = truth.keys().map(|k| k.topic.clone()).collect();
        t.dedup();
        t
    };
    assert_eq!(topics, expected_topics);
    for topic in &topics {
        let stored = store.topic_windows(topic, all()).await.unwrap();
        // Expected order: window_start, tier, datacenter.
        let mut expected: Vec<&WindowRow> = truth
            .iter()
            .filter(|(k, _)| &k.topic == topic)
            .map(|(_, (row, _))| row)
            .collect();
        expected.sort_by(|a, b| {
            (a.window_start_ms, &a.tier, &a.datacenter).cmp(&(
                b.window_start_ms,
                &b.tier,
                &b.datacenter,
            ))
        });
        assert_rows_match(&stored, &expected);
        for row in &stored {
            let offsets = store.window_offsets(&row.key()).await.unwrap();
            assert_eq!(
                offsets,
                spans(&truth[&row.key()].1),
                "offsets of {:?}",
                row.key()
            );
        }
    }
    // A sub-range selects by window start, half-open.
    let one = store
        .topic_windows("topic-0", TimeRange::new(T0 + W, T0 + 2 * W))
        .await
        .unwrap();
    assert!(!one.is_empty());
    assert!(one.iter().all(|r| r.window_start_ms == T0 + W));
}

async fn checksums_add_modulo_2_pow_64(store: &Store) {
    // Values whose i64 views overflow both ways: two "large positive" and two whose
    // i64 reinterpretation is very negative, in separate batches so the database adds.
    let values = [
        u64::MAX,
        u64::MAX - 5,
        1u64 << 63,
        (1u64 << 63) + 7,
        i64::MAX as u64,
        3,
    ];
    let mut expected = 0u64;
    for v in values {
        let mut i = increment("sums", "regional", "dc1", 0, 1);
        i.checksum = v;
        expected = expected.wrapping_add(v);
        store
            .write_batch(&batch(vec![Message::from(i)]))
            .await
            .unwrap();
        let rows = store.topic_windows("sums", all()).await.unwrap();
        assert_eq!(rows[0].checksum, expected, "after adding {v:#x}");
    }
    assert_eq!(
        store.topic_windows("sums", all()).await.unwrap()[0].count,
        values.len() as u64
    );
}

fn progress(topic: &str, host: &str, emitted: i64, parts: &[(i32, i64)]) -> Progress {
    Progress {
        uuid: Uuid::new_v4(),
        topic: topic.into(),
        tier: "regional".into(),
        datacenter: "dc1".into(),
        host: host.into(),
        emitted_at_ms: emitted,
        partitions: parts
            .iter()
            .map(|&(partition, next_offset)| PartitionProgress {
                partition,
                next_offset,
                record_time: Some(emitted - 100),
                lag: Some(0),
                ..Default::default()
            })
            .collect(),
    }
}

async fn progress_keeps_the_latest_watermark_per_partition(store: &Store) {
    let newer = progress("orders", "auditor-1", T0 + 2000, &[(0, 500), (1, 700)]);
    let older = progress("orders", "auditor-0", T0 + 1000, &[(0, 100), (2, 50)]);
    store
        .write_batch(&batch(vec![Message::from(newer)]))
        .await
        .unwrap();
    store
        .write_batch(&batch(vec![Message::from(older)]))
        .await
        .unwrap();
    let other = progress("payments", "auditor-0", T0, &[(0, 9)]);
    store
        .write_batch(&batch(vec![Message::from(other)]))
        .await
        .unwrap();
    let rows = store.progress(Some("orders")).await.unwrap();
    let got: Vec<(i32, &str, i64)> = rows
        .iter()
        .map(|r| (r.partition, r.host.as_str(), r.next_offset))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, "auditor-1", 500),
            (1, "auditor-1", 700),
            (2, "auditor-0", 50)
        ]
    );
    assert_eq!(rows[0].record_time_ms, Some(T0 + 1900));
    assert_eq!(store.progress(None).await.unwrap().len(), 4);
}

/// `emitted_at` is accepted up to an hour ahead of the collector's clock
/// (`MAX_CLOCK_SKEW_MS`): if the latest `emitted_at` won as sent, one report dated
/// now + 59 min (say a forged `replicator:` evidence tier) would make the store keep it
/// over every honest report for an hour. A report is ordered by when it was sent, but
/// never later than when it was received.
async fn progress_from_the_future_does_not_pin_out_later_reports(store: &Store) {
    let now = T0 + 10 * W;
    let evidence = |emitted: i64, next_offset: i64| {
        let mut p = progress("payments", "auditor-0", emitted, &[(0, next_offset)]);
        p.tier = "replicator:group/mirror".into();
        Message::from(p)
    };
    let received_at = |messages: Vec<Message>, received_at_ms: i64| Batch {
        messages,
        rejects: vec![],
        received_at_ms,
    };
    let next_offset = |rows: Vec<ProgressRow>| -> Vec<(i32, i64)> {
        rows.iter().map(|r| (r.partition, r.next_offset)).collect()
    };
    let forged = evidence(now + 59 * 60_000, 1 << 62);
    let honest = evidence(now, 240);
    store
        .write_batch(&received_at(vec![forged.clone()], now))
        .await
        .unwrap();
    store
        .write_batch(&received_at(vec![honest], now + 1000))
        .await
        .unwrap();
    let rows = store.progress(Some("payments")).await.unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].tier, "replicator:group/mirror");
    assert_eq!(next_offset(rows), vec![(0, 240)]);

    // The same when both arrive in one batch: the forged report counts as sent when
    // the batch was received, so the honest report of the next batch replaces it.
    let mut forged = forged;
    forged.uuid = Uuid::new_v4();
    forged.topic = "orders".into();
    let mut honest = evidence(now + 2000, 250);
    honest.topic = "orders".into();
    store
        .write_batch(&received_at(vec![forged, honest], now + 2000))
        .await
        .unwrap();
    let mut next = evidence(now + 2500, 255);
    next.topic = "orders".into();
    store
        .write_batch(&received_at(vec![next], now + 3000))
        .await
        .unwrap();
    let rows = store.progress(Some("orders")).await.unwrap();
    assert_eq!(next_offset(rows), vec![(0, 255)]);

    // An honest sender whose clock is a little behind still orders its own reports.
    let late = evidence(now + 1500, 260);
    store
        .write_batch(&received_at(vec![late], now + 3000))
        .await
        .unwrap();
    let earlier = evidence(now + 1200, 230);
    store
        .write_batch(&received_at(vec![earlier], now + 4000))
        .await
        .unwrap();
    let rows = store.progress(Some("payments")).await.unwrap();
    assert_eq!(next_offset(rows), vec![(0, 260)]);

    // Staged writes keep progress at once, by the same rule.
    let mut forged = evidence(now + 59 * 60_000, 1 << 62);
    forged.topic = "refunds".into();
    store
        .stage_batch(&received_at(vec![forged], now))
        .await
        .unwrap();
    let mut honest = evidence(now, 240);
    honest.topic = "refunds".into();
    store
        .stage_batch(&received_at(vec![honest], now + 1000))
        .await
        .unwrap();
    let rows = store.progress(Some("refunds")).await.unwrap();
    assert_eq!(next_offset(rows), vec![(0, 240)]);
}

/// The reads serve judges with (per topic since the forget horizon, per page of
/// topics) return the same rows as the plain read, evidence included: a read that
/// left out `max_record_time_ms` failed every cycle ("no column found").
async fn every_progress_read_carries_the_record_time_evidence(store: &Store) {
    let mut p = progress("orders", "auditor-0", T0 + 2000, &[(0, 500), (1, 700)]);
    for (i, part) in p.partitions.iter_mut().enumerate() {
        part.max_record_time = Some(T0 + 1500 + i as i64);
        part.log_append_time = i == 1;
    }
    store
        .write_batch(&batch(vec![Message::from(p)]))
        .await
        .unwrap();
    let plain = store.progress(Some("orders")).await.unwrap();
    let evidence: Vec<_> = plain
        .iter()
        .map(|r| (r.max_record_time_ms, r.log_append_time))
        .collect();
    assert_eq!(
        evidence,
        vec![(Some(T0 + 1500), false), (Some(T0 + 1501), true)]
    );
    let since = store.progress_since(Some("orders"), 0, 1000).await.unwrap();
    assert_eq!(since, plain);
    let page = store
        .progress_of_topics("orders", "orders", 0, 1000)
        .await
        .unwrap();
    assert_eq!(page, plain);
}

async fn emitters_record_last_seen_times(store: &Store) {
    let mut a = increment("orders", "regional", "dc1", 0, 1);
    a.host = "auditor-0".into();
    a.emitted_at_ms = T0 + 5000;
    let mut b = increment("orders", "regional", "dc1", 1, 1);
    b.host = "auditor-0".into();
    b.emitted_at_ms = T0 + 3000;
    let p = progress("orders", "auditor-1", T0 + 7000, &[(0, 1)]);
    let mut first = batch(vec![Message::from(a), Message::from(p)]);
    first.received_at_ms = T0 + 10_000;
    store.write_batch(&first).await.unwrap();
    let mut second = batch(vec![Message::from(b)]);
    second.received_at_ms = T0 + 20_000;
    store.write_batch(&second).await.unwrap();
    let rows = store.emitters().await.unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (
            rows[0].host.as_str(),
            rows[0].last_emitted_at_ms,
            rows[0].last_received_at_ms,
            rows[0].messages
        ),
        ("auditor-0", T0 + 5000, T0 + 20_000, 2)
    );
    assert_eq!(
        (
            rows[1].host.as_str(),
            rows[1].last_emitted_at_ms,
            rows[1].messages
        ),
        ("auditor-1", T0 + 7000, 1)
    );
}

async fn windows_in_range_pages_by_topic(store: &Store) {
    let mut messages = vec![];
    for t in 0..5 {
        for w in 0..3 {
            messages.push(Message::from(increment(
                &format!("t{t}"),
                "regional",
                "dc1",
                w,
                10,
            )));
            messages.push(Message::from(increment(
                &format!("t{t}"),
                "aggregate",
                "dc1",
                w,
                10,
            )));
        }
    }
    store.write_batch(&batch(messages)).await.unwrap();
    let range = TimeRange::new(T0 + W, T0 + 3 * W); // windows 1 and 2
    let mut after: Option<String> = None;
    let mut pages = vec![];
    loop {
        let page = store
            .windows_in_range(range, after.as_deref(), 2)
            .await
            .unwrap();
        let topics: Vec<String> = {
            let mut t: Vec<String> = page.rows.iter().map(|r| r.topic.clone()).collect();
            t.dedup();
            t
        };
        assert!(page
            .rows
            .iter()
            .all(|r| r.window_start_ms >= T0 + W && r.window_start_ms < T0 + 3 * W));
        assert_eq!(
            page.rows.len(),
            topics.len() * 4,
            "2 windows x 2 tiers per topic"
        );
        pages.push(topics);
        match page.next_after_topic {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(pages, vec![vec!["t0", "t1"], vec!["t2", "t3"], vec!["t4"]]);
}

/// Windows on both sides of midnight (two day partitions on PostgreSQL), each with
/// several latency buckets, some written by two increments, read in pages of 1, 2 and
/// 10 topics over a range across the boundary: every window once, with its whole
/// histogram (each bucket row once) and its count, as the per-topic read has them.
async fn windows_in_range_across_a_day_boundary_read_each_bucket_once(store: &Store) {
    const DAY: i64 = 86_400_000;
    let midnight = (T0 / DAY + 1) * DAY;
    let first = (midnight - T0) / W - 2; // 23:40, 23:50, 00:00, 00:10
    store
        .prepare_partitions(midnight - DAY, midnight + DAY)
        .await
        .unwrap();
    let mut expected: BTreeMap<(String, String, String, i64), (u64, LatencyHistogram)> =
        BTreeMap::new();
    let mut messages = vec![];
    for t in 0..4u64 {
        for w in first..first + 4 {
            for (tier, dc) in [
                ("regional", "dc1"),
                ("aggregate", "dc1"),
                ("aggregate", "dc2"),
            ] {
                // t1's windows get two increments: their buckets add up in one row.
                for copy in 0..if t == 1 { 2 } else { 1 } {
                    let mut inc = increment(&format!("t{t}"), tier, dc, w, 10 + t + copy);
                    inc.latency = Latency {
                        zero_count: 1,
                        negative_count: 0,
                        max_ms: 900,
                        buckets: vec![(5, 2), (100 + (w % 7) as i32, 3 + copy), (300, 4 + t)],
                    };
                    let e = expected
                        .entry((
                            inc.topic.clone(),
                            tier.into(),
                            dc.into(),
                            inc.window_start_ms,
                        ))
                        .or_insert((0, LatencyHistogram::new()));
                    e.0 += inc.count;
                    e.1.merge(&inc.latency.histogram());
                    messages.push(Message::from(inc));
                }
            }
        }
    }
    store.write_batch(&batch(messages)).await.unwrap();
    let range = TimeRange::new(T0 + (first + 1) * W, T0 + (first + 3) * W);
    let key = |r: &WindowRow| {
        (
            r.topic.clone(),
            r.tier.clone(),
            r.datacenter.clone(),
            r.window_start_ms,
        )
    };
    let mut per_topic = vec![];
    for t in 0..4 {
        per_topic.extend(store.topic_windows(&format!("t{t}"), range).await.unwrap());
    }
    assert_eq!(
        per_topic.len(),
        4 * 2 * 3,
        "4 topics x 2 windows x 3 tiers/dcs"
    );
    for limit in [1, 2, 10] {
        let mut read = vec![];
        let mut after: Option<String> = None;
        loop {
            let page = store
                .windows_in_range(range, after.as_deref(), limit)
                .await
                .unwrap();
            read.extend(page.rows);
            match page.next_after_topic {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        assert_eq!(read, per_topic, "pages of {limit} topics");
        for r in &read {
            let (count, latency) = &expected[&key(r)];
            assert_eq!((r.count, &r.latency), (*count, latency), "{:?}", key(r));
        }
    }
}

async fn offset_ranges_widen(store: &Store) {
    // Partition 0's latest record time is the largest known one; partition 1 has none
    // (an emitter older than the field): unknown, never 0.
    let mut a = increment("orders", "regional", "dc1", 0, 1);
    a.offsets = vec![
        OffsetSpan {
            max: 200,
            ..OffsetSpan::new(0, 100, Some(T0 + 10))
        },
        OffsetSpan::new(1, 5, None),
    ];
    let mut b = increment("orders", "regional", "dc1", 0, 1);
    b.offsets = vec![OffsetSpan {
        max: 150,
        ..OffsetSpan::new(0, 50, Some(T0 + 30))
    }];
    b.max_observed_at = Some(T0 + 40);
    let mut c = increment("orders", "regional", "dc1", 0, 1);
    c.offsets = vec![OffsetSpan {
        max: 400,
        ..OffsetSpan::new(0, 180, None)
    }];
    store
        .write_batch(&batch(vec![Message::from(a), Message::from(b)]))
        .await
        .unwrap();
    store
        .write_batch(&batch(vec![Message::from(c)]))
        .await
        .unwrap();
    let key = WindowKey {
        topic: "orders".into(),
        tier: "regional".into(),
        datacenter: "dc1".into(),
        window_start_ms: T0,
    };
    assert_eq!(
        store.window_offsets(&key).await.unwrap(),
        vec![
            OffsetSpan {
                max: 400,
                ..OffsetSpan::new(0, 50, Some(T0 + 30))
            },
            OffsetSpan::new(1, 5, None),
        ]
    );
    // The window read carries the evidence: per partition (those with a time only)
    // and the latest observation time.
    let row = store
        .topic_windows("orders", all())
        .await
        .unwrap()
        .remove(0);
    assert_eq!(
        (row.record_times, row.max_observed_at_ms),
        (vec![(0, T0 + 30)], Some(T0 + 40))
    );
    let missing = WindowKey {
        window_start_ms: T0 + W,
        ..key
    };
    assert!(store.window_offsets(&missing).await.unwrap().is_empty());
}

async fn rejects_are_kept_with_their_reason(store: &Store) {
    let mut b = batch(vec![Message::from(increment(
        "orders", "regional", "dc1", 0, 1,
    ))]);
    b.rejects = vec![
        Reject {
            source: "kafka:a/audit/0@7".into(),
            reason: "not JSON".into(),
            payload: "garbage\0here".into(),
        },
        Reject {
            source: "http:127.0.0.1".into(),
            reason: "unknown version 9".into(),
            payload: "{}".into(),
        },
    ];
    store.write_batch(&b).await.unwrap();
    let rows = store.rejects(10).await.unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].reason, "unknown version 9", "newest first");
    assert_eq!(rows[1].source, "kafka:a/audit/0@7");
    assert!(rows[1].payload.starts_with("garbage"));
    assert_eq!(store.rejects(1).await.unwrap().len(), 1);
}

async fn retention_removes_old_windows_and_uuids_in_batches(store: &Store) {
    let mut old = vec![];
    for w in 0..5 {
        let mut i = increment("orders", "regional", "dc1", w, 1);
        i.latency.buckets = vec![(10, 1)];
        i.latency.zero_count = 0;
        i.offsets = vec![OffsetSpan {
            partition: 0,
            min: 1,
            max: 2,
            max_record_time: None,
        }];
        old.push(i);
    }
    let mut b = batch(old.iter().cloned().map(Message::from).collect());
    b.received_at_ms = T0;
    store.write_batch(&b).await.unwrap();
    let recent = increment("orders", "regional", "dc1", 50, 7);
    let mut b = batch(vec![Message::from(recent.clone())]);
    b.received_at_ms = T0 + 100 * W;
    store.write_batch(&b).await.unwrap();

    let mut total = RetentionOutcome::default();
    let mut passes = 0;
    loop {
        let out = store.retention(T0 + 10 * W, T0 + 50 * W, 2).await.unwrap();
        assert!(
            out.windows <= 2 && out.messages <= 2,
            "bounded batches: {out:?}"
        );
        passes += 1;
        if out.total() == 0 {
            break;
        }
        total.windows += out.windows;
        total.messages += out.messages;
        assert!(passes < 20, "retention does not converge");
    }
    assert_eq!((total.windows, total.messages), (5, 5));
    let rows = store.topic_windows("orders", all()).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].count, 7);
    // The recent UUID is still known; an old one is forgotten (and would count again,
    // which is why UUID retention must outlast any replay).
    let again = store
        .write_batch(&batch(vec![Message::from(recent)]))
        .await
        .unwrap();
    assert_eq!(again.outcomes, vec![WriteOutcome::Duplicate]);
    let replay = store
        .write_batch(&batch(vec![Message::from(old[0].clone())]))
        .await
        .unwrap();
    assert_eq!(replay.outcomes, vec![WriteOutcome::Accepted]);
    // Its window was deleted with its buckets and offsets: it comes back with only the replay.
    let rows = store
        .topic_windows("orders", TimeRange::new(T0, T0 + W))
        .await
        .unwrap();
    assert_eq!(Latency::of(&rows[0].latency).buckets, vec![(10, 1)]);
    assert_eq!(rows[0].increments, 1);
    let key = rows[0].key();
    assert_eq!(
        store.window_offsets(&key).await.unwrap(),
        vec![OffsetSpan {
            partition: 0,
            min: 1,
            max: 2,
            max_record_time: None,
        }]
    );
}

async fn an_invalid_message_fails_the_batch_and_writes_nothing(store: &Store) {
    let good = increment("orders", "regional", "dc1", 0, 10);
    let mut bad = increment("orders", "regional", "dc1", 0, 10);
    bad.count = u64::MAX;
    assert!(validate_message(&Message::from(bad.clone())).is_err());
    let err = store
        .write_batch(&batch(vec![
            Message::from(good.clone()),
            Message::from(bad),
        ]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Invalid(ref m) if m.contains("count")),
        "{err}"
    );
    assert!(store
        .topic_windows("orders", all())
        .await
        .unwrap()
        .is_empty());
    let out = store
        .write_batch(&batch(vec![Message::from(good)]))
        .await
        .unwrap();
    assert_eq!(out.outcomes, vec![WriteOutcome::Accepted]);
}

async fn concurrent_writers_of_the_same_messages_count_them_once(store: &Store) {
    let mut rng = Rng(7);
    let increments: Vec<Increment> = (0..400).map(|_| random_increment(&mut rng)).collect();
    let mut tasks = vec![];
    for writer in 0..4usize {
        let store = store.clone();
        let mut mine = increments.clone();
        // Different orders and batch boundaries per writer.
        mine.rotate_left(writer * 97);
        let size = 50 + writer * 13;
        tasks.push(tokio::spawn(async move {
            let mut accepted = 0;
            for chunk in mine.chunks(size) {
                let b = batch(chunk.iter().cloned().map(Message::from).collect());
                // A deadlock or serialization failure is retryable by contract.
                let mut attempts = 0;
                loop {
                    match store.write_batch(&b).await {
                        Ok(out) => {
                            accepted += out.accepted();
                            break;
                        }
                        Err(StoreError::Database { .. }) if attempts < 10 => {
                            attempts += 1;
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            accepted
        }));
    }
    let mut accepted = 0;
    for t in tasks {
        accepted += t.await.unwrap();
    }
    assert_eq!(
        accepted,
        increments.len(),
        "each UUID accepted by exactly one writer"
    );
    let truth = ground_truth(&increments);
    let mut stored = vec![];
    for topic in store.list_topics().await.unwrap() {
        stored.extend(store.topic_windows(&topic, all()).await.unwrap());
    }
    stored.sort_by_key(|r| r.key());
    let expected: Vec<&WindowRow> = truth.values().map(|(r, _)| r).collect();
    assert_rows_match(&stored, &expected);
}

async fn migrating_twice_is_harmless(store: &Store) {
    store.migrate().await.unwrap();
    store.ping().await.unwrap();
    store
        .write_batch(&batch(vec![Message::from(increment(
            "x", "regional", "dc1", 0, 1,
        ))]))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    assert_eq!(store.list_topics().await.unwrap(), vec!["x".to_string()]);
}

/// Security review H1 / correctness B9: one increment near i64::MAX made every later
/// roll-up fail with `bigint out of range` on PostgreSQL (and turned the sum into a
/// REAL on SQLite, which then failed to read). Sums saturate instead; the store goes
/// on with other windows.
async fn sums_saturate_at_i64_max_instead_of_failing(store: &Store) {
    let max = i64::MAX as u64;
    let huge = |window| {
        let mut i = increment("orders", "regional", "dc1", window, max);
        i.bytes = max;
        i.no_time_count = max;
        i.latency = Latency {
            zero_count: max,
            negative_count: max,
            max_ms: max,
            buckets: vec![],
        };
        i
    };
    let mut small = increment("orders", "regional", "dc1", 0, 1);
    small.latency.buckets = vec![(100, 1)];
    let mut huge_bucket = increment("orders", "regional", "dc1", 0, max);
    huge_bucket.latency.buckets = vec![(100, max)];
    // Staged path (the collector's), then the direct path, each with a roll-up between.
    store
        .stage_batch(&batch(vec![Message::from(small)]))
        .await
        .unwrap();
    rollup_all(store).await;
    for m in [huge(0), huge_bucket] {
        store
            .stage_batch(&batch(vec![Message::from(m)]))
            .await
            .unwrap();
        rollup_all(store).await;
    }
    store
        .write_batch(&batch(vec![
            Message::from(increment("orders", "regional", "dc1", 1, 5)),
            Message::from(huge(1)),
        ]))
        .await
        .unwrap();
    store
        .write_batch(&batch(vec![Message::from(huge(1))]))
        .await
        .unwrap();
    let honest = increment("payments", "regional", "dc1", 0, 7);
    store
        .stage_batch(&batch(vec![Message::from(honest)]))
        .await
        .unwrap();
    rollup_all(store).await;

    let rows = store.topic_windows("orders", all()).await.unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    for row in &rows {
        assert_eq!(
            (row.count, row.bytes, row.no_time_count),
            (max, max, max),
            "saturated at i64::MAX: {row:?}"
        );
        assert_eq!(
            (row.latency.zero_count(), row.latency.negative_count()),
            (max, max)
        );
    }
    assert_eq!(rows[0].increments, 3);
    assert_eq!(Latency::of(&rows[0].latency).buckets, vec![(100, max)]);
    let other = store.topic_windows("payments", all()).await.unwrap();
    assert_eq!(
        other.iter().map(|r| r.count).collect::<Vec<_>>(),
        vec![7],
        "another topic's increment reaches its window"
    );
}

/// Security review H2: PostgreSQL text cannot hold NUL. A NUL in a name must be refused
/// by validation (`Invalid`: the collector turns it into a reject), and a NUL in a
/// reject's reason or source must be stored (replaced), never fail the transaction.
async fn nul_in_a_name_or_a_reject_is_never_a_database_error(store: &Store) {
    let mut poisoned = increment("a\0b", "regional", "dc1", 0, 1);
    assert!(validate_message(&Message::from(poisoned.clone())).is_err());
    poisoned.topic = "orders".into();
    poisoned.host = "h\0".into();
    for bad in [increment("a\0b", "regional", "dc1", 0, 1), poisoned] {
        for result in [
            store
                .stage_batch(&batch(vec![Message::from(bad.clone())]))
                .await,
            store
                .write_batch(&batch(vec![Message::from(bad.clone())]))
                .await,
        ] {
            assert!(matches!(result, Err(StoreError::Invalid(_))), "{result:?}");
        }
    }
    let mut b = batch(vec![Message::from(increment(
        "orders", "regional", "dc1", 0, 3,
    ))]);
    b.rejects = vec![Reject {
        source: "kafka:a/audit\0/0@1".into(),
        reason: "unknown variant `\0`, expected `increment` or `progress`".into(),
        payload: "{\"kind\":\"\0\"}".into(),
    }];
    store.stage_batch(&b).await.unwrap();
    let mut again = b.clone();
    again.messages.clear();
    store.write_batch(&again).await.unwrap();
    rollup_all(store).await;
    let rejects = store.rejects(10).await.unwrap();
    assert_eq!(rejects.len(), 2);
    for r in &rejects {
        assert!(
            !r.reason.contains('\0') && r.reason.contains("unknown variant"),
            "{r:?}"
        );
        assert!(
            !r.source.contains('\0') && r.source.starts_with("kafka:a/audit"),
            "{r:?}"
        );
        assert!(!r.payload.contains('\0'), "{r:?}");
    }
    assert_eq!(
        store.topic_windows("orders", all()).await.unwrap()[0].count,
        3
    );
}

/// Correctness B9 / security H1, the general case: whatever data error the database
/// raises while rolling up (here a trigger stands in for one), the roll-up must not
/// retry the same rows forever. The offending increment is quarantined as a reject and
/// the others reach their windows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_rollup_quarantines_an_increment_the_database_refuses() {
    let (store, _backing) = postgres().await;
    let Store::Postgres(pg) = &store else {
        unreachable!()
    };
    testkit::refuse_poison(pg.pool(), "audit_window", "poisoned window", "22003").await;
    let honest = increment("orders", "regional", "dc1", 0, 5);
    let other = increment("payments", "regional", "dc1", 0, 6);
    let poison = increment("poison", "regional", "dc1", 0, 7);
    // Many others around it, in windows of their own: the poison is found by bisection.
    let mut messages = vec![
        Message::from(honest),
        Message::from(poison.clone()),
        Message::from(other),
    ];
    messages.extend((1..40).map(|w| Message::from(increment("orders", "regional", "dc1", w, 1))));
    store.stage_batch(&batch(messages)).await.unwrap();
    let mut rolled = 0;
    for _ in 0..10 {
        match store
            .rollup(1000)
            .await
            .expect("a data error is not a roll-up error")
        {
            0 => break,
            n => rolled += n,
        }
    }
    assert_eq!(rolled, 42);
    let orders = store.topic_windows("orders", all()).await.unwrap();
    assert_eq!(orders.len(), 40);
    assert_eq!(orders.iter().map(|r| r.count).sum::<u64>(), 5 + 39);
    assert_eq!(
        store.topic_windows("payments", all()).await.unwrap()[0].count,
        6
    );
    assert!(store
        .topic_windows("poison", all())
        .await
        .unwrap()
        .is_empty());
    let rejects = store.rejects(10).await.unwrap();
    assert_eq!(rejects.len(), 1, "{rejects:?}");
    assert_eq!(rejects[0].source, "rollup");
    assert!(
        rejects[0].reason.contains("poisoned window")
            && rejects[0].payload.contains(&poison.uuid.to_string()),
        "{:?}",
        rejects[0]
    );
    // A replay of the quarantined message is a duplicate, not counted again.
    let out = store
        .stage_batch(&batch(vec![Message::from(poison)]))
        .await
        .unwrap();
    assert_eq!(out.duplicates(), 1);
}

/// Gives every window of `topic` the buckets 0..per_window (count 1 each), in one
/// statement per backend.
async fn seed_buckets(store: &Store, topic: &str, per_window: i32) {
    match store {
        Store::Postgres(pg) => sqlx::query(
            "INSERT INTO audit_window_bucket (topic, window_start_ms, window_id, bucket, count)
             SELECT w.topic, w.window_start_ms, w.id, g, 1
             FROM audit_window w CROSS JOIN generate_series(0, $2 - 1) g
             WHERE w.topic = $1",
        )
        .bind(topic)
        .bind(per_window)
        .execute(pg.pool())
        .await
        .map(drop),
        Store::Sqlite(lite) => sqlx::query(
            "WITH RECURSIVE g(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM g WHERE n + 1 < ?2)
             INSERT INTO audit_window_bucket (window_id, bucket, count)
             SELECT w.id, g.n, 1 FROM audit_window w, g WHERE w.topic = ?1",
        )
        .bind(topic)
        .bind(per_window)
        .execute(lite.pool())
        .await
        .map(drop),
    }
    .expect("seeding buckets");
}

/// Security review M3: a read's latency buckets are bounded. Past the cap, windows
/// whose buckets were not all read get an empty histogram, never a truncated one.
async fn bucket_reads_are_capped_and_never_truncate_a_histogram(store: &Store) {
    const WINDOWS: usize = 5;
    const PER_WINDOW: usize = 100;
    let messages = (0..WINDOWS as i64)
        .map(|w| {
            let mut i = increment("orders", "regional", "dc1", w, 1000);
            i.latency.zero_count = 3;
            i.latency.negative_count = 1;
            i.latency.max_ms = 50;
            Message::from(i)
        })
        .collect();
    store.write_batch(&batch(messages)).await.unwrap();
    // Another topic in the range, so the range read pages over more than "orders".
    store
        .write_batch(&batch(vec![Message::from(increment(
            "payments", "regional", "dc1", 0, 1,
        ))]))
        .await
        .unwrap();
    seed_buckets(store, "orders", PER_WINDOW as i32).await;
    let full: Vec<(i32, u64)> = (0..PER_WINDOW as i32).map(|b| (b, 1)).collect();

    // Checks one read of "orders": at most `cap` bucket rows, every histogram whole
    // or empty, and exactly the whole windows that fit under the cap have one.
    let check = |rows: Vec<WindowRow>, cap: usize, what: &str| {
        let rows: Vec<WindowRow> = rows.into_iter().filter(|r| r.topic == "orders").collect();
        assert_eq!(rows.len(), WINDOWS, "{what}: every window is returned");
        let read: usize = rows.iter().map(|r| r.latency.buckets().count()).sum();
        assert!(read <= cap, "{what}: {read} bucket rows over the cap {cap}");
        let whole = Latency {
            zero_count: 3,
            negative_count: 1,
            max_ms: 50,
            buckets: full.clone(),
        }
        .histogram();
        let none = LatencyHistogram::new();
        for r in &rows {
            assert!(
                r.latency == whole || r.latency == none,
                "{what}: window {} has a partial latency: {} buckets, {} zero",
                r.window_start_ms,
                r.latency.buckets().count(),
                r.latency.zero_count()
            );
            assert_eq!(r.count, 1000, "{what}: counts are never capped");
            // An empty histogram must say it stands for an unread one, or it reads as
            // "no latency" and a `delayed` is hidden (review 2, finding 7).
            assert_eq!(
                r.latency_unread,
                r.latency == none,
                "{what}: window {} says whether its latency was read",
                r.window_start_ms
            );
        }
        let with_latency = rows.iter().filter(|r| r.latency == whole).count();
        assert_eq!(
            with_latency,
            (cap / PER_WINDOW).min(WINDOWS),
            "{what}: the windows past the cap have no latency"
        );
    };

    for cap in [250, 200, 99, WINDOWS * PER_WINDOW, 10_000] {
        let rows = store
            .topic_windows_capped("orders", all(), cap)
            .await
            .unwrap();
        check(rows, cap, &format!("topic_windows, cap {cap}"));
        let page = store
            .windows_in_range_capped(all(), None, 10, cap)
            .await
            .unwrap();
        assert_eq!(page.next_after_topic, None);
        check(page.rows, cap, &format!("windows_in_range, cap {cap}"));
    }
    // The public reads use MAX_BUCKET_ROWS, far above this: all histograms whole.
    check(
        store.topic_windows("orders", all()).await.unwrap(),
        MAX_BUCKET_ROWS,
        "topic_windows",
    );
}

/// The evaluator's plan of work: `(topic, window_start)` of windows starting in a
/// range, one per topic and window whatever the tiers and datacenters, ordered by
/// window then topic, at most `limit`.
async fn window_keys_list_each_topic_window_once_in_order(store: &Store) {
    let mut messages = vec![];
    for window in 0..4 {
        for (topic, tier, dc) in [
            ("b", "regional", "dc1"),
            ("a", "regional", "dc1"),
            ("a", "regional", "dc2"),
            ("a", "aggregate", "dc1"),
        ] {
            messages.push(Message::from(increment(topic, tier, dc, window, 1)));
        }
    }
    store.write_batch(&batch(messages)).await.unwrap();
    let keys = store.window_keys(T0 + W, T0 + 3 * W, 100).await.unwrap();
    let expected: Vec<(String, i64)> = [(1, "a"), (1, "b"), (2, "a"), (2, "b")]
        .iter()
        .map(|&(w, t)| (t.to_string(), T0 + w * W))
        .collect();
    assert_eq!(keys, expected);
    assert_eq!(
        store.window_keys(T0 + W, T0 + 3 * W, 3).await.unwrap(),
        expected[..3]
    );
    assert!(store
        .window_keys(T0 + 10 * W, T0 + 20 * W, 100)
        .await
        .unwrap()
        .is_empty());
}

/// Windows that received an increment at or after a time (the collector's clock),
/// starting at or after a window, once per topic and window.
async fn changed_windows_are_those_with_recent_increments(store: &Store) {
    let early = T0 + 10 * W;
    let late = early + 60_000;
    let mut first = batch(
        (0..3)
            .flat_map(|w| {
                [
                    Message::from(increment("a", "regional", "dc1", w, 1)),
                    Message::from(increment("b", "regional", "dc1", w, 1)),
                ]
            })
            .collect(),
    );
    first.received_at_ms = early;
    store.write_batch(&first).await.unwrap();
    // Later increments for a's windows 0 and 2 (two tiers) and b's window 1.
    let mut second = batch(vec![
        Message::from(increment("a", "regional", "dc1", 0, 1)),
        Message::from(increment("a", "regional", "dc1", 2, 1)),
        Message::from(increment("a", "aggregate", "dc1", 2, 1)),
        Message::from(increment("b", "regional", "dc1", 1, 1)),
    ]);
    second.received_at_ms = late;
    store.write_batch(&second).await.unwrap();

    let sorted = |mut v: Vec<(String, i64)>| {
        v.sort();
        v
    };
    let key = |t: &str, w: i64| (t.to_string(), T0 + w * W);
    assert_eq!(
        sorted(store.changed_windows(late, T0, 100).await.unwrap()),
        vec![key("a", 0), key("a", 2), key("b", 1)]
    );
    assert_eq!(
        sorted(store.changed_windows(late, T0 + W, 100).await.unwrap()),
        vec![key("a", 2), key("b", 1)]
    );
    assert_eq!(
        store.changed_windows(early, T0, 100).await.unwrap().len(),
        6
    );
    assert_eq!(store.changed_windows(early, T0, 4).await.unwrap().len(), 4);
    assert!(store
        .changed_windows(late + 1, T0, 100)
        .await
        .unwrap()
        .is_empty());
}

/// When each auditor (topic, tier, datacenter) last reported: the newest receive time
/// over all its partitions, one row per auditor, ordered, at most `limit`.
async fn auditor_reports_give_one_row_per_auditor(store: &Store) {
    let at = |received: i64, p: Progress| {
        let mut b = batch(vec![Message::from(p)]);
        b.received_at_ms = received;
        b
    };
    let mut other_dc = progress("orders", "auditor-2", T0 + 300, &[(0, 10)]);
    other_dc.datacenter = "dc2".into();
    for b in [
        at(
            T0 + 5_000,
            progress("orders", "auditor-0", T0 + 100, &[(0, 10), (1, 20)]),
        ),
        at(
            T0 + 9_000,
            progress("orders", "auditor-1", T0 + 200, &[(2, 30)]),
        ),
        at(T0 + 7_000, other_dc),
        at(
            T0 + 8_000,
            progress("payments", "auditor-0", T0 + 100, &[(0, 1)]),
        ),
    ] {
        store.write_batch(&b).await.unwrap();
    }
    let row =
        |t: &str, dc: &str, at: i64| (t.to_string(), "regional".to_string(), dc.to_string(), at);
    let expected = vec![
        row("orders", "dc1", T0 + 9_000),
        row("orders", "dc2", T0 + 7_000),
        row("payments", "dc1", T0 + 8_000),
    ];
    assert_eq!(store.auditor_reports(100).await.unwrap(), expected);
    assert_eq!(store.auditor_reports(2).await.unwrap(), expected[..2]);
}

/// Increments staged and not yet added to their window rows, by (topic, tier,
/// datacenter, window): PostgreSQL lists them until the roll-up; SQLite adds
/// increments up as it stores them and never has any.
async fn staged_windows_are_increments_not_yet_rolled_up(store: &Store) {
    let messages = vec![
        Message::from(increment("a", "regional", "dc1", 0, 1)),
        Message::from(increment("a", "regional", "dc1", 0, 2)),
        Message::from(increment("a", "aggregate", "dc2", 1, 1)),
        Message::from(increment("b", "regional", "dc1", 1, 1)),
    ];
    store.stage_batch(&batch(messages)).await.unwrap();
    let sorted = |mut v: Vec<(String, String, String, i64)>| {
        v.sort();
        v
    };
    let key = |t: &str, tier: &str, dc: &str, w: i64| {
        (t.to_string(), tier.to_string(), dc.to_string(), T0 + w * W)
    };
    let all_staged = sorted(store.staged_windows(None, T0).await.unwrap());
    let of_a_from_1 = store.staged_windows(Some("a"), T0 + W).await.unwrap();
    match store {
        Store::Postgres(_) => {
            assert_eq!(
                all_staged,
                vec![
                    key("a", "aggregate", "dc2", 1),
                    key("a", "regional", "dc1", 0),
                    key("b", "regional", "dc1", 1),
                ]
            );
            assert_eq!(of_a_from_1, vec![key("a", "aggregate", "dc2", 1)]);
        }
        Store::Sqlite(_) => {
            assert!(all_staged.is_empty() && of_a_from_1.is_empty());
        }
    }
    rollup_all(store).await;
    assert!(store.staged_windows(None, T0).await.unwrap().is_empty());
    assert_eq!(all_rows(store).await.len(), 3);
}

/// Alerts a channel delivered and has not resolved, kept across restarts: saving a key
/// again replaces its alert; channels do not see each other's.
async fn open_alerts_are_saved_replaced_listed_and_deleted(store: &Store) {
    let pair = |k: &str, a: &str| (k.to_string(), a.to_string());
    assert!(store.open_alerts("slack").await.unwrap().is_empty());
    store
        .save_open_alert("slack", "k1", r#"{"v":1}"#, T0)
        .await
        .unwrap();
    store
        .save_open_alert("slack", "k1", r#"{"v":2}"#, T0 + 1)
        .await
        .unwrap();
    store
        .save_open_alert("slack", "k2", r#"{"v":3}"#, T0 + 2)
        .await
        .unwrap();
    store
        .save_open_alert("pager", "k1", r#"{"v":4}"#, T0 + 3)
        .await
        .unwrap();
    let mut slack = store.open_alerts("slack").await.unwrap();
    slack.sort();
    assert_eq!(
        slack,
        vec![pair("k1", r#"{"v":2}"#), pair("k2", r#"{"v":3}"#)]
    );
    store.delete_open_alert("slack", "k1").await.unwrap();
    // Forgetting an alert that is not open is no error.
    store.delete_open_alert("slack", "k1").await.unwrap();
    assert_eq!(
        store.open_alerts("slack").await.unwrap(),
        vec![pair("k2", r#"{"v":3}"#)]
    );
    assert_eq!(
        store.open_alerts("pager").await.unwrap(),
        vec![pair("k1", r#"{"v":4}"#)]
    );
}

/// Losses proven before their window was final (docs/design.md §6, rule 0): a window
/// keeps its first proof, reads start at a window and are capped in key order, and
/// forgetting removes the windows before a start.
async fn proven_losses_keep_the_first_proof_and_are_forgotten_by_window(store: &Store) {
    let proof = |w: i64, topic: &str, dc: &str, reason: &str| ProvenLoss {
        window_start_ms: w,
        topic: topic.into(),
        upstream: "regional".into(),
        downstream: "aggregate".into(),
        datacenter: dc.into(),
        reason: reason.into(),
        // As read back: the time of the first save.
        proven_at_ms: T0 + 1,
    };
    assert!(store.proven_losses(0, 10).await.unwrap().is_empty());
    let w1 = T0 + W;
    let first = [
        proof(w1, "orders", "agg", "at least 37 missing"),
        proof(T0, "orders", "agg", "at least 5 missing"),
        proof(w1, "orders", "dc2", "at least 1 missing"),
        // Names are data: stored as given (sorting after "orders" in every collation).
        proof(w1, "z-ordérs 💥", "agg", "at least 2 missing"),
    ];
    for p in &first {
        store.save_proven_loss(p, T0 + 1).await.unwrap();
    }
    // A window keeps its first proof.
    store
        .save_proven_loss(&proof(w1, "orders", "agg", "at least 99 missing"), T0 + 2)
        .await
        .unwrap();
    let all = store.proven_losses(0, 10).await.unwrap();
    assert_eq!(
        all,
        vec![
            first[1].clone(),
            first[0].clone(),
            first[2].clone(),
            first[3].clone()
        ]
    );
    assert_eq!(
        store.proven_losses(w1, 10).await.unwrap(),
        all[1..].to_vec()
    );
    assert_eq!(store.proven_losses(0, 2).await.unwrap(), all[..2].to_vec());
    assert_eq!(store.forget_proven_losses(w1).await.unwrap(), 1);
    assert_eq!(store.proven_losses(0, 10).await.unwrap(), all[1..].to_vec());
    assert_eq!(store.forget_proven_losses(w1).await.unwrap(), 0);
    // Withdrawn by its key alone (an admin's withdrawal): once.
    let mut key = all[1].clone();
    key.reason = "not compared".into();
    assert!(store.withdraw_proven_loss(&key).await.unwrap());
    assert!(!store.withdraw_proven_loss(&key).await.unwrap());
    assert_eq!(store.proven_losses(0, 10).await.unwrap(), all[2..].to_vec());
}

/// serve learns the deployment's window size from the store: the length of the window
/// that starts last (none on an empty store).
async fn latest_window_ms_is_the_length_of_the_newest_window(store: &Store) {
    assert_eq!(store.latest_window_ms().await.unwrap(), None);
    let mut messages: Vec<Message> = (0..3)
        .map(|w| Message::from(increment("a", "regional", "dc1", w, 1)))
        .collect();
    // The auditors were reconfigured to 5-minute windows: the newest window is short.
    let mut short = increment("b", "regional", "dc1", 5, 1);
    short.window_end_ms = short.window_start_ms + 300_000;
    messages.push(Message::from(short));
    // An older window of another size does not count.
    let mut long = increment("c", "regional", "dc1", 0, 1);
    long.window_end_ms = long.window_start_ms + 3_600_000;
    messages.push(Message::from(long));
    store.write_batch(&batch(messages)).await.unwrap();
    assert_eq!(store.latest_window_ms().await.unwrap(), Some(300_000));
}
