//! A day's partitions created while traffic flows (security review 3, M1): a
//! collector's first start on an empty store, or one back after more than a week,
//! creates the days back to its retention while it stages and rolls up, and serve
//! judges from the same tables. Creating a day moves its rows out of the default
//! partitions; a statement planned before that and run after it finds none of them.
//! Writers and the reads a verdict rests on take the partition turn
//! (store/src/pg/partitions.rs), so none runs across a day's creation: these tests run
//! the real staging path and serve's reads beside the creation of days that hold
//! staged messages and windows, and compare what is stored and read, message for
//! message, with what was staged.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use store::*;

const DAY: i64 = 86_400_000;
const W: i64 = 600_000;
/// Days with traffic and no partition yet (the first 30 back from 11 days ago).
const DAYS: i64 = 30;
/// How long the loops beside a creation may run at most, whatever happens.
const BOUND: Duration = Duration::from_secs(120);

/// The first of those days, fixed once (a test running across midnight keeps its days).
fn first_day() -> i64 {
    static FIRST: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *FIRST.get_or_init(|| {
        let now = common::now_ms();
        now - now % DAY - 40 * DAY
    })
}

/// What the `i`-th increment adds to its window: (count, checksum), and the window.
fn increment(topic: &str, window_start: i64, i: u64) -> Message {
    let count = 1 + i % 7;
    testkit::increment(topic, window_start, window_start + W, count)
        .checksum(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5bd1_e995)
        .offsets(vec![OffsetSpan {
            partition: (i % 3) as i32,
            min: i as i64 * 10,
            max: i as i64 * 10 + count as i64,
            max_record_time: Some(window_start + 1_000 + (i % 500) as i64),
        }])
        .build()
}

/// The `i`-th increment of the traffic: spread over the days, a dozen windows a day
/// and two topics, days interleaved (a roll-up's keys span most of the days).
fn traffic(i: u64) -> Message {
    let day = first_day() + (i as i64 % DAYS) * DAY;
    let slot = (i as i64 / DAYS) % 12;
    let topic = ["orders", "payments"][((i as i64 / DAYS / 12) % 2) as usize];
    increment(topic, day + slot * W, i)
}

/// Per window (topic, start): what its row must add up to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Sums {
    count: u64,
    increments: u64,
    checksum: u64,
}

type Windows = BTreeMap<(String, i64), Sums>;

fn add(expected: &mut Windows, m: &Message) {
    let AuditBody::Increment(i) = &m.body else {
        unreachable!("traffic is increments")
    };
    let sums = expected
        .entry((m.topic.clone(), i.window_start))
        .or_default();
    sums.count += i.stats.count;
    sums.increments += 1;
    sums.checksum = sums.checksum.wrapping_add(i.stats.checksum.0);
}

fn sums_of(rows: &[WindowRow]) -> Windows {
    rows.iter()
        .map(|r| {
            let sums = Sums {
                count: r.count,
                increments: r.increments,
                checksum: r.checksum,
            };
            ((r.topic.clone(), r.window_start_ms), sums)
        })
        .collect()
}

/// Reads of one kind beside the creation: how many answered, which of those missed
/// rows (what they missed), which failed.
#[derive(Default)]
struct Tally {
    reads: u64,
    short: Vec<String>,
    failed: Vec<String>,
}

impl Tally {
    fn attempts(&self) -> u64 {
        self.reads + self.failed.len() as u64
    }

    fn check(&mut self, whole: bool, missed: impl FnOnce() -> String) {
        self.reads += 1;
        if !whole {
            self.short.push(missed());
        }
    }
}

fn batch(messages: Vec<Message>) -> Batch {
    Batch {
        messages,
        rejects: vec![],
        received_at_ms: common::now_ms(),
    }
}

fn everything() -> TimeRange {
    TimeRange::new(0, i64::MAX / 2)
}

async fn pg_store(prefix: &str) -> (PgStore, testkit::TestDatabase) {
    let db = testkit::fresh_database(prefix).await;
    let store = PgStore::connect(db.url()).await.expect("connect");
    store.migrate().await.expect("migrate");
    (store, db)
}

/// The days' creation, one transaction a day as the collector does it, in a task.
fn create_the_days(store: &PgStore) -> tokio::task::JoinHandle<Result<u64, StoreError>> {
    let store = store.clone();
    tokio::spawn(async move {
        store
            .prepare_partitions(first_day(), first_day() + (DAYS - 1) * DAY)
            .await
    })
}

/// The collector's two paths on days being created: increments staged (stored whole,
/// keyed in the queue, into default partitions the creation moves), and roll-ups
/// behind them. Every staged increment reaches its window exactly once, none is
/// reported missing, nothing is quarantined, and no call fails (no deadlock, no
/// `23514`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn staged_increments_roll_up_whole_beside_a_day_creation() {
    let (store, _db) = pg_store("store_day_creation_rollup").await;
    let mut expected = Windows::new();
    // Staged before: 6 000 increments on 30 days without partitions.
    let mut next = 0u64;
    for _ in 0..12 {
        let messages: Vec<Message> = (next..next + 500).map(traffic).collect();
        next += 500;
        store.stage_batch(&batch(messages.clone())).await.unwrap();
        messages.iter().for_each(|m| add(&mut expected, m));
    }
    let started = Instant::now();
    let creating = create_the_days(&store);
    // Staged during the creation too, a batch at a time (a failed batch is staged
    // again, as the collector does; the failure is reported below).
    let stager = {
        let store = store.clone();
        let creating = creating.abort_handle();
        tokio::spawn(async move {
            let (mut staged, mut errors) = (Vec::new(), Vec::new());
            let mut i = 1_000_000u64;
            while !creating.is_finished() && staged.len() < 20_000 && started.elapsed() < BOUND {
                let messages: Vec<Message> = (i..i + 50).map(traffic).collect();
                i += 50;
                for _attempt in 0..5 {
                    match store.stage_batch(&batch(messages.clone())).await {
                        Ok(_) => {
                            staged.extend(messages);
                            break;
                        }
                        Err(e) => errors.push(format!("{e}")),
                    }
                }
            }
            (staged, errors)
        })
    };
    let (mut rollups, mut missing, mut errors) = (0u64, 0u64, Vec::new());
    while !creating.is_finished() && rollups < 50_000 && started.elapsed() < BOUND {
        match store.rollup_counted(50).await {
            Ok(outcome) => missing += outcome.missing,
            Err(e) => errors.push(format!("{e}")),
        }
        rollups += 1;
    }
    let created = creating.await.unwrap();
    let (staged, stage_errors) = stager.await.unwrap();
    staged.iter().for_each(|m| add(&mut expected, m));
    // Then the rest of the queue (bounded: 26 000 increments at most, 1 000 a call).
    for _ in 0..100 {
        let outcome = store.rollup_counted(1_000).await.unwrap();
        missing += outcome.missing;
        if outcome.taken == 0 {
            break;
        }
    }
    assert!(
        rollups > 0 && !staged.is_empty(),
        "the creation ended first"
    );

    let mut rows = Vec::new();
    for topic in ["orders", "payments"] {
        rows.extend(store.topic_windows(topic, everything()).await.unwrap());
    }
    let stored = sums_of(&rows);
    let wrong: Vec<_> = expected
        .iter()
        .filter(|(key, sums)| stored.get(*key) != Some(*sums))
        .map(|(key, sums)| (key, sums, stored.get(key)))
        .collect();
    assert!(
        wrong.is_empty() && stored.len() == expected.len(),
        "{} of {} windows are not what was staged (lost increments), e.g. {:?}",
        wrong.len(),
        expected.len(),
        wrong.first()
    );
    let pending: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_pending")
        .fetch_one(store.pool())
        .await
        .unwrap();
    let rejects = store.rejects(10).await.unwrap();
    assert!(
        missing == 0 && pending == 0 && rejects.is_empty(),
        "{missing} staged increments missing, {pending} left queued, rejects {rejects:?}"
    );
    assert!(
        errors.is_empty() && stage_errors.is_empty(),
        "{} of {rollups} roll-ups and {} stagings failed: {:?}",
        errors.len(),
        stage_errors.len(),
        errors.first().or(stage_errors.first())
    );
    assert_eq!(
        created.ok(),
        Some(4 * DAYS as u64),
        "every day was created here"
    );
}

/// serve's reads beside the creation of days holding rolled-up windows and staged
/// increments: every read sees every window whole (count, increments, checksum, record
/// times, highest offsets, offset ranges) and every staged increment's window as
/// staged. A staged increment read as absent makes serve judge its window without it
/// (rule 5, "roll-up behind: pending", bypassed); a window read short, the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serve_reads_miss_nothing_beside_a_day_creation() {
    let (store, _db) = pg_store("store_day_creation_reads").await;
    // Rolled up: 2 400 increments; then staged and left queued: one per day.
    let mut expected = Windows::new();
    let mut all = Vec::new();
    for start in (0..2_400).step_by(600) {
        let messages: Vec<Message> = (start..start + 600).map(traffic).collect();
        store.stage_batch(&batch(messages.clone())).await.unwrap();
        messages.iter().for_each(|m| add(&mut expected, m));
        all.extend(messages);
    }
    while store.rollup(1_000).await.unwrap() > 0 {}
    let queued: Vec<Message> = (0..DAYS)
        .map(|d| increment("queued", first_day() + d * DAY + 20 * W, d as u64))
        .collect();
    store.stage_batch(&batch(queued.clone())).await.unwrap();
    let staged_keys: BTreeSet<(String, String, String, i64)> = queued
        .iter()
        .map(|m| {
            let AuditBody::Increment(i) = &m.body else {
                unreachable!()
            };
            (
                m.topic.clone(),
                m.tier.clone(),
                m.datacenter.clone(),
                i.window_start,
            )
        })
        .collect();
    // The offset ranges of the first window of each day of one topic, as read before.
    let mut spans: BTreeMap<WindowKey, Vec<OffsetSpan>> = BTreeMap::new();
    for m in &all {
        let AuditBody::Increment(i) = &m.body else {
            unreachable!()
        };
        if i.window_start % DAY == 0 && m.topic == "orders" {
            let key = WindowKey {
                topic: m.topic.clone(),
                tier: m.tier.clone(),
                datacenter: m.datacenter.clone(),
                window_start_ms: i.window_start,
            };
            let read = store.window_offsets(&key).await.unwrap();
            assert!(!read.is_empty(), "offset ranges of {key:?}");
            spans.insert(key, read);
        }
    }
    let whole = |rows: &[WindowRow]| sums_of(rows) == expected;
    let page = store
        .windows_in_range(everything(), None, 100)
        .await
        .unwrap();
    assert!(whole(&page.rows), "the windows before the creation");
    let reference = page.rows;

    let started = Instant::now();
    let creating = create_the_days(&store);
    let running = || !creating.is_finished() && started.elapsed() < BOUND;
    // Each read in a loop of its own, for as long as the creation runs.
    let staged_reader = {
        let (store, creating) = (store.clone(), creating.abort_handle());
        let staged_keys = staged_keys.clone();
        tokio::spawn(async move {
            let mut tally = Tally::default();
            while !creating.is_finished() && tally.attempts() < 100_000 && started.elapsed() < BOUND
            {
                match store.staged_windows(None, first_day()).await {
                    Ok(read) => {
                        let read: BTreeSet<_> = read.into_iter().collect();
                        let missed = staged_keys.difference(&read).count();
                        tally.check(read == staged_keys, || format!("{missed} missed"));
                    }
                    Err(e) => tally.failed.push(format!("staged_windows: {e}")),
                }
            }
            tally
        })
    };
    let window_reader = {
        let (store, creating) = (store.clone(), creating.abort_handle());
        let reference = reference.clone();
        tokio::spawn(async move {
            let orders: Vec<WindowRow> = reference
                .iter()
                .filter(|r| r.topic == "orders")
                .cloned()
                .collect();
            let mut tally = Tally::default();
            while !creating.is_finished() && tally.attempts() < 100_000 && started.elapsed() < BOUND
            {
                match store.windows_in_range(everything(), None, 100).await {
                    Ok(page) => tally.check(page.rows == reference, || {
                        format!("windows_in_range: {} rows", page.rows.len())
                    }),
                    Err(e) => tally.failed.push(format!("windows_in_range: {e}")),
                }
                match store.topic_windows("orders", everything()).await {
                    Ok(rows) => tally.check(rows == orders, || {
                        format!("topic_windows: {} rows", rows.len())
                    }),
                    Err(e) => tally.failed.push(format!("topic_windows: {e}")),
                }
            }
            tally
        })
    };
    let mut offsets = Tally::default();
    'reading: while running() {
        for (key, spans) in &spans {
            match store.window_offsets(key).await {
                Ok(read) => offsets.check(read == *spans, || {
                    format!(
                        "{}: {} of {} spans",
                        key.window_start_ms,
                        read.len(),
                        spans.len()
                    )
                }),
                Err(e) => offsets.failed.push(format!("window_offsets: {e}")),
            }
            if !running() || offsets.attempts() >= 100_000 {
                break 'reading;
            }
        }
    }
    let created = creating.await.unwrap();
    let staged = staged_reader.await.unwrap();
    let windows = window_reader.await.unwrap();
    let tallies = [
        ("staged windows", &staged),
        ("windows", &windows),
        ("offsets", &offsets),
    ];
    for (what, tally) in tallies {
        assert!(
            tally.attempts() > 0,
            "the creation ended before a read of {what}"
        );
        assert!(
            tally.short.is_empty(),
            "{} of {} reads of {what} missed rows, e.g. {:?}",
            tally.short.len(),
            tally.reads,
            tally.short.first()
        );
    }
    for (what, tally) in tallies {
        assert!(
            tally.failed.is_empty(),
            "{} reads of {what} failed, e.g. {:?}",
            tally.failed.len(),
            tally.failed.first()
        );
    }
    assert_eq!(
        created.ok(),
        Some(4 * DAYS as u64),
        "every day was created here"
    );
    // And after: the same.
    let page = store
        .windows_in_range(everything(), None, 100)
        .await
        .unwrap();
    assert_eq!(page.rows, reference);
    let read: BTreeSet<_> = store
        .staged_windows(None, first_day())
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(read, staged_keys);
}

/// A row PostgreSQL routes to a partition whose bounds exclude it (what a writer
/// planned before a day's creation meets after waiting for it) is a `23514` without a
/// constraint: retried, never bisected as the data of a message. A CHECK
/// constraint's `23514` names the constraint, and stays a data error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_outside_its_partition_is_retried_and_a_check_violation_is_data() {
    let (store, _db) = pg_store("store_day_creation_23514").await;
    let now = common::now_ms();
    let today = increment("orders", now - now % DAY + W, 1);
    store.stage_batch(&batch(vec![today])).await.unwrap();
    let into_default =
        sqlx::query("INSERT INTO audit_message_default SELECT * FROM audit_message LIMIT 1")
            .execute(store.pool())
            .await
            .expect_err("today's row is outside the default partition");
    let check = sqlx::query(
        "INSERT INTO audit_window_size (id, window_ms, fixed_at_ms, fixed_by) VALUES (2, 1, 0, 'x')",
    )
    .execute(store.pool())
    .await
    .expect_err("id = 1 is checked");
    for e in [&into_default, &check] {
        let code = e.as_database_error().and_then(|d| d.code());
        assert_eq!(code.as_deref(), Some("23514"), "{e}");
    }
    let error = |source| StoreError::Database {
        context: "testing",
        source,
    };
    assert!(!error(into_default).is_data_error());
    assert!(error(check).is_data_error());
}
