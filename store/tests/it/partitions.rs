//! PostgreSQL at fleet scale (docs/operations.md): the tables that grow with traffic are
//! partitioned by day and keyed by topic, retention drops whole days, partitions are
//! created ahead, and an existing store converts with its counts intact. The cases
//! in `on_postgres` / `on_citus` run on plain PostgreSQL and, when
//! `KAFKA_AUDIT_TEST_CITUS_URL` names a cluster, on the store distributed by topic
//! with Citus (skipped, saying so, otherwise).

use sqlx::PgPool;
use store::*;
use uuid::Uuid;

const DAY: i64 = 86_400_000;
const W: i64 = 600_000;

/// The tables that grow with traffic and the column each is partitioned by.
const TRAFFIC_TABLES: &[(&str, &str)] = &[
    ("audit_window", "window_start_ms"),
    ("audit_window_bucket", "window_start_ms"),
    ("audit_window_offset", "window_start_ms"),
    ("audit_message", "partition_ms"),
];

fn today() -> i64 {
    let now = common::now_ms();
    now - now % DAY
}

async fn pg_store(prefix: &str) -> (PgStore, testkit::TestDatabase) {
    let db = testkit::fresh_database(prefix).await;
    let store = PgStore::connect(db.url()).await.expect("connect");
    store.migrate().await.expect("migrate");
    (store, db)
}

/// A fresh store distributed by topic on the Citus cluster (`None`: no cluster).
async fn citus_store(prefix: &str) -> Option<(PgStore, testkit::TestDatabase)> {
    let db = testkit::fresh_citus_database(prefix).await?;
    Some((crate::citus::distributed_store(db.url()).await, db))
}

/// Each case as `on_postgres::case` and `on_citus::case`, with its database prefix.
macro_rules! on_postgres_and_citus {
    ($($case:ident => $prefix:literal),* $(,)?) => {
        mod on_postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let (store, _db) = super::pg_store($prefix).await;
                    super::$case(&store).await;
                }
            )*
        }
        mod on_citus {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let Some((store, _db)) = super::citus_store($prefix).await else {
                        return;
                    };
                    super::$case(&store).await;
                }
            )*
        }
    };
}

on_postgres_and_citus!(
    partitions_are_created_ahead_and_out_of_range_windows_still_count => "store_partitions_ahead",
    retention_drops_whole_day_partitions_and_keeps_the_rest => "store_partitions_retention",
    a_day_that_cannot_be_created_leaves_the_other_days_created => "store_partitions_days",
);

/// Whether the store's tables are distributed with Citus.
async fn distributed(pool: &PgPool) -> bool {
    let citus: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')")
            .fetch_one(pool)
            .await
            .unwrap();
    citus
        && sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_dist_partition
                            WHERE logicalrelid = 'audit_window'::regclass)",
        )
        .fetch_one(pool)
        .await
        .unwrap()
}

fn message(topic: &str, tier: &str, dc: &str, window_start: i64, count: u64, salt: u64) -> Message {
    let buckets: Vec<(u32, u64)> = vec![
        (100 + (salt % 7) as u32, count / 2),
        (140, count - count / 2),
    ];
    // observation_time_count stays 0: the old schema had no such column, and what the
    // conversion carries is 0.
    testkit::increment(topic, window_start, window_start + W, count)
        .tier(tier)
        .datacenter(dc)
        .host(format!("{tier}-{dc}-0"))
        .emitted_at(window_start + W + 1_000)
        .checksum(count.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt)
        .latency(
            LatencyHistogram::from_buckets(0, 0, 5_000 + salt as i64, buckets).expect("histogram"),
        )
        .offsets(vec![OffsetSpan {
            partition: (salt % 3) as i32,
            min: salt as i64 * 10,
            max: salt as i64 * 10 + count as i64,
            max_record_time: None,
        }])
        .stats(|s| {
            s.no_time_count = salt % 3;
            s.malformed_count = salt % 2;
        })
        .build()
}

fn progress(topic: &str, tier: &str, dc: &str, emitted_at: i64, next_offset: i64) -> Message {
    Message {
        version: audit_lib::AUDIT_MESSAGE_VERSION,
        uuid: Uuid::new_v4(),
        topic: topic.into(),
        tier: tier.into(),
        datacenter: dc.into(),
        host: format!("{tier}-{dc}-0"),
        emitted_at,
        body: AuditBody::Progress(vec![PartitionProgress {
            partition: 0,
            next_offset,
            record_time: Some(emitted_at - 5_000),
            lag: Some(3),
            ..Default::default()
        }]),
    }
}

fn batch(messages: Vec<Message>, received_at_ms: i64) -> Batch {
    Batch {
        messages,
        rejects: vec![],
        received_at_ms,
    }
}

fn everything() -> TimeRange {
    TimeRange::new(0, i64::MAX / 2)
}

async fn all_windows(store: &impl AuditStore) -> Vec<WindowRow> {
    let mut rows = vec![];
    for topic in store.list_topics().await.unwrap() {
        rows.extend(store.topic_windows(&topic, everything()).await.unwrap());
    }
    rows.sort_by_key(|r| r.key());
    rows
}

async fn all_offsets(store: &impl AuditStore, rows: &[WindowRow]) -> Vec<Vec<OffsetSpan>> {
    let mut out = vec![];
    for r in rows {
        out.push(store.window_offsets(&r.key()).await.unwrap());
    }
    out
}

async fn rollup_all(store: &impl AuditStore) {
    while store.rollup(1000).await.unwrap() > 0 {}
}

/// Which partitions (tables) hold the window row. Each partition is asked by name:
/// on Citus a row's `tableoid` is its shard's, unknown to the coordinator.
async fn partition_of(pool: &PgPool, topic: &str, window_start_ms: i64) -> Vec<String> {
    let mut holders = vec![];
    for part in partition_names(pool, "audit_window").await {
        let n: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM {part} WHERE topic = $1 AND window_start_ms = $2"
        ))
        .bind(topic)
        .bind(window_start_ms)
        .fetch_one(pool)
        .await
        .unwrap();
        if n > 0 {
            holders.push(part);
        }
    }
    holders
}

/// Bytes the coordinator itself keeps in the tables of the day partitions: on Citus
/// the rows live in the workers' shards, and a partition whose rows were moved in
/// from the default partition must not keep a second copy on the coordinator's disk.
async fn local_bytes_of_days(pool: &PgPool) -> Vec<(String, i64)> {
    let mut sizes = vec![];
    for &(parent, _) in TRAFFIC_TABLES {
        for part in partition_names(pool, parent).await {
            let bytes: i64 = sqlx::query_scalar("SELECT pg_relation_size($1::regclass)")
                .bind(&part)
                .fetch_one(pool)
                .await
                .unwrap();
            sizes.push((part, bytes));
        }
    }
    sizes
}

async fn partition_names(pool: &PgPool, parent: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = $1::regclass ORDER BY 1",
    )
    .bind(parent)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The columns of `table`'s primary key.
async fn primary_key(pool: &PgPool, table: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT a.attname::text FROM pg_constraint c
         JOIN unnest(c.conkey) k(n) ON true
         JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n
         WHERE c.conrelid = $1::regclass AND c.contype = 'p'",
    )
    .bind(table)
    .fetch_all(pool)
    .await
    .unwrap()
}

fn day_name(parent: &str, day_ms: i64) -> String {
    let d = chrono::DateTime::from_timestamp_millis(day_ms).unwrap();
    format!("{parent}_p{}", d.format("%Y%m%d"))
}

/// Reads the catalog: each traffic table is range-partitioned on its time column by
/// day, and every unique key holds `topic`; the queue holds `topic` too. These are
/// the conditions under which Citus' `create_distributed_table(table, 'topic')`
/// accepts a table (every unique or primary key and every partitioned table's key
/// must include the distribution column); where Citus is installed it is asked too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_tables_are_partitioned_by_day_and_keyed_by_topic() {
    let (store, _db) = pg_store("store_partitions_catalog").await;
    let pool = store.pool();
    for &(table, time_column) in TRAFFIC_TABLES {
        let key: Option<(String, i16, Vec<String>)> = sqlx::query_as(
            "SELECT p.partstrat::text, p.partnatts,
                    ARRAY(SELECT a.attname::text FROM unnest(p.partattrs::int2[]) k(n)
                          JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = k.n)
             FROM pg_partitioned_table p WHERE p.partrelid = $1::regclass",
        )
        .bind(table)
        .fetch_optional(pool)
        .await
        .unwrap();
        let (strategy, columns, names) =
            key.unwrap_or_else(|| panic!("{table} is not partitioned"));
        assert_eq!(strategy, "r", "{table}: partitioned by range");
        assert_eq!(
            (columns, names),
            (1, vec![time_column.to_string()]),
            "{table}: partition key"
        );

        let pk = primary_key(pool, table).await;
        assert!(
            pk.iter().any(|c| c == "topic"),
            "{table}: primary key {pk:?} lacks topic"
        );
        assert!(
            pk.iter().any(|c| c == time_column),
            "{table}: primary key {pk:?}"
        );

        // Citus refuses a unique index or constraint without the distribution column,
        // and foreign keys between tables not co-located on it.
        let without_topic: Vec<String> = sqlx::query_scalar(
            "SELECT i.indexrelid::regclass::text FROM pg_index i
             WHERE i.indrelid = $1::regclass AND i.indisunique
               AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = i.indrelid
                               AND a.attname = 'topic' AND a.attnum = ANY(i.indkey::int2[]))",
        )
        .bind(table)
        .fetch_all(pool)
        .await
        .unwrap();
        assert!(
            without_topic.is_empty(),
            "{table}: unique indexes without topic: {without_topic:?}"
        );
        let foreign: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_constraint WHERE contype = 'f'
             AND (conrelid = $1::regclass OR confrelid = $1::regclass)",
        )
        .bind(table)
        .fetch_one(pool)
        .await
        .unwrap();
        assert_eq!(foreign, 0, "{table}: foreign keys");

        // created ahead: today and tomorrow exist after migrate, plus the default
        let parts = partition_names(pool, table).await;
        for day in [today(), today() + DAY] {
            assert!(parts.contains(&day_name(table, day)), "{table}: {parts:?}");
        }
        assert!(
            parts.contains(&format!("{table}_default")),
            "{table}: {parts:?}"
        );
    }
    // Co-located with them by topic (not time-partitioned: they grow with topics).
    for table in ["audit_progress", "audit_topic"] {
        let pk = primary_key(pool, table).await;
        assert!(
            pk.iter().any(|c| c == "topic"),
            "{table}: primary key {pk:?}"
        );
    }
    let queue: Vec<String> = sqlx::query_scalar(
        "SELECT attname::text FROM pg_attribute WHERE attrelid = 'audit_pending'::regclass AND attnum > 0",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(
        queue.iter().any(|c| c == "topic"),
        "audit_pending: {queue:?}"
    );

    // Where this server preloads Citus (a single-node install), it is asked too; an
    // extension installed but not preloaded cannot even be created. A cluster is
    // asked in on_citus_the_tables_are_distributed_as_documented.
    let citus: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'citus')
            AND 'citus' = ANY (SELECT btrim(l, ' \"') FROM unnest(string_to_array(
                     current_setting('shared_preload_libraries'), ',')) AS l)",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    if !citus {
        eprintln!("Citus not preloaded on this server: the distribution is checked on KAFKA_AUDIT_TEST_CITUS_URL's cluster");
        return;
    }
    sqlx::raw_sql(crate::citus::DISTRIBUTE)
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("Citus refused deploy/citus/distribute.sql: {e}"));
}

/// On a Citus cluster, deploy/citus/distribute.sql (the commands of
/// docs/operations.md) leaves every table as the documentation's table says: the
/// tables that grow with traffic and every one of their partitions, the progress and
/// the topic list distributed by topic and co-located; emitters and open alerts
/// reference tables; the roll-up queue and the rejects local to the coordinator.
/// Running it again changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_citus_the_tables_are_distributed_as_documented() {
    let Some((store, _db)) = citus_store("store_citus_catalog").await else {
        return;
    };
    let pool = store.pool();
    sqlx::raw_sql(crate::citus::DISTRIBUTE)
        .execute(pool)
        .await
        .expect("distribute.sql a second time");
    let tables: Vec<(String, String, String, i32)> = sqlx::query_as(
        "SELECT table_name::text, citus_table_type, distribution_column, colocation_id
         FROM citus_tables",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let find = |name: &str| tables.iter().find(|t| t.0 == name);
    let colocation = find("audit_window").expect("audit_window distributed").3;
    let mut distributed = vec!["audit_progress".to_string(), "audit_topic".to_string()];
    for &(table, _) in TRAFFIC_TABLES {
        distributed.push(table.to_string());
        let parts = partition_names(pool, table).await;
        assert!(parts.len() >= 3, "{table}: {parts:?}");
        distributed.extend(parts);
    }
    for name in &distributed {
        let t = find(name).unwrap_or_else(|| panic!("{name} not distributed: {tables:?}"));
        assert_eq!(
            (t.1.as_str(), t.2.as_str(), t.3),
            ("distributed", "topic", colocation),
            "{name}"
        );
    }
    for name in ["audit_emitter", "web_alert_open", "web_proven_loss"] {
        assert_eq!(
            find(name).map(|t| t.1.as_str()),
            Some("reference"),
            "{name}"
        );
    }
    for name in ["audit_pending", "audit_reject"] {
        assert!(find(name).is_none(), "{name} must stay local: {tables:?}");
    }
}

/// Partitions are created ahead; a window with no partition for its day (a skewed or
/// hostile auditor's far future or past) is stored in the default partition and
/// counted like any other, never failing the batch; creating its day later moves it.
async fn partitions_are_created_ahead_and_out_of_range_windows_still_count(store: &PgStore) {
    let pool = store.pool();
    let in_five_days = today() + 5 * DAY + 6 * W;
    let far_future = 4_102_444_800_000; // 2100-01-01
    let long_ago = 86_400_000; // 1970-01-02
    let mut sent = vec![];
    for (i, start) in [in_five_days, far_future, long_ago].into_iter().enumerate() {
        sent.push(message(
            "orders",
            "regional",
            "dc1",
            start,
            10 + i as u64,
            i as u64,
        ));
    }
    let out = store
        .stage_batch(&batch(sent.clone(), common::now_ms()))
        .await
        .unwrap();
    assert!(
        out.outcomes.iter().all(|o| *o == WriteOutcome::Accepted),
        "{out:?}"
    );
    rollup_all(store).await;
    let rows = all_windows(store).await;
    assert_eq!(
        rows.iter().map(|r| r.count).collect::<Vec<_>>(),
        vec![12, 10, 11]
    );
    assert_eq!(
        partition_of(pool, "orders", in_five_days).await,
        vec!["audit_window_default"]
    );

    // The collector prepares the days ahead; the row moves into its day.
    let created = store
        .prepare_partitions(today(), today() + 7 * DAY)
        .await
        .unwrap();
    assert_eq!(created, 4 * 6, "days 2..=7 of four tables");
    assert_eq!(
        partition_of(pool, "orders", in_five_days).await,
        vec![day_name("audit_window", today() + 5 * DAY)]
    );
    if distributed(pool).await {
        let kept: Vec<_> = local_bytes_of_days(pool)
            .await
            .into_iter()
            .filter(|(_, bytes)| *bytes > 0)
            .collect();
        assert!(kept.is_empty(), "the coordinator keeps rows of: {kept:?}");
    }
    assert_eq!(
        store
            .prepare_partitions(today(), today() + 7 * DAY)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        all_windows(store).await,
        rows,
        "moving changed nothing readable"
    );
    // and its UUID still deduplicates, now from the new partition
    let again = store
        .stage_batch(&batch(sent, common::now_ms()))
        .await
        .unwrap();
    assert!(
        again.outcomes.iter().all(|o| *o == WriteOutcome::Duplicate),
        "{again:?}"
    );
    let offsets = all_offsets(store, &rows).await;
    assert!(offsets.iter().all(|o| o.len() == 1), "{offsets:?}");
}

/// Partition upkeep creates one day per transaction: a day whose creation fails (here
/// its table's name is taken by a type) fails alone; the days before and after it
/// are created, and the next call creates it, moving the day's rows out of the
/// default partition.
async fn a_day_that_cannot_be_created_leaves_the_other_days_created(store: &PgStore) {
    let pool = store.pool();
    let blocked_day = today() + 4 * DAY;
    let early = message("orders", "regional", "dc1", blocked_day + 3 * W, 5, 1);
    store
        .write_batch(&batch(vec![early], common::now_ms()))
        .await
        .unwrap();
    let taken = day_name("audit_window_offset", blocked_day);
    sqlx::query(&format!("CREATE TYPE {taken} AS ENUM ('taken')"))
        .execute(pool)
        .await
        .unwrap();
    let result = store.prepare_partitions(today(), today() + 7 * DAY).await;
    assert!(result.is_err(), "{result:?}");
    for &(table, _) in TRAFFIC_TABLES {
        let parts = partition_names(pool, table).await;
        for d in [2, 3, 5, 6, 7] {
            let day = day_name(table, today() + d * DAY);
            assert!(parts.contains(&day), "{day} missing: {parts:?}");
        }
        assert!(!parts.contains(&day_name(table, blocked_day)), "{parts:?}");
    }
    sqlx::query(&format!("DROP TYPE {taken}"))
        .execute(pool)
        .await
        .unwrap();
    assert_eq!(
        store
            .prepare_partitions(today(), today() + 7 * DAY)
            .await
            .unwrap(),
        4,
        "the blocked day of four tables"
    );
    assert_eq!(
        partition_of(pool, "orders", blocked_day + 3 * W).await,
        vec![day_name("audit_window", blocked_day)]
    );
    let rows = store.topic_windows("orders", everything()).await.unwrap();
    assert_eq!(rows.iter().map(|r| r.count).collect::<Vec<_>>(), vec![5]);
}

/// Retention drops whole day partitions: nothing of a day past the cutoff remains,
/// the day holding the cutoff and later days are kept whole, and old rows of the
/// default partition are deleted in batches as before.
async fn retention_drops_whole_day_partitions_and_keeps_the_rest(store: &PgStore) {
    let pool = store.pool();
    let day0 = today() - 3 * DAY;
    store.prepare_partitions(day0, today() + DAY).await.unwrap();
    let mut messages = vec![];
    for d in 0..3 {
        for w in [0, 70, 143] {
            messages.push(message(
                "orders",
                "regional",
                "dc1",
                day0 + d * DAY + w * W,
                5,
                w as u64,
            ));
            messages.push(message(
                "payments",
                "producer",
                "dc2",
                day0 + d * DAY + w * W,
                7,
                1,
            ));
        }
    }
    // a topic with windows only on day 0: forgotten with the day
    messages.push(message("gone", "regional", "dc1", day0 + 5 * W, 3, 0));
    let ancient = message("orders", "regional", "dc1", DAY, 1, 0); // default partition
    messages.push(ancient.clone());
    store
        .write_batch(&batch(messages.clone(), common::now_ms()))
        .await
        .unwrap();
    assert_eq!(all_windows(store).await.len(), 20);
    assert_eq!(
        store.list_topics().await.unwrap(),
        ["gone", "orders", "payments"]
    );

    // The cutoff is in the middle of day 1: day 0 goes, day 1 stays whole.
    let cutoff = day0 + DAY + 100 * W;
    let mut total = RetentionOutcome::default();
    loop {
        let out = Store::Postgres(store.clone())
            .retention(cutoff, cutoff, 1000)
            .await
            .unwrap();
        if out.total() == 0 {
            break;
        }
        total.partitions += out.partitions;
        total.windows += out.windows;
        total.messages += out.messages;
    }
    assert_eq!(total.partitions, 4, "day 0 of four tables: {total:?}");
    assert_eq!(
        (total.windows, total.messages),
        (1, 1),
        "the default partition's old row: {total:?}"
    );
    for &(table, _) in TRAFFIC_TABLES {
        let parts = partition_names(pool, table).await;
        assert!(!parts.contains(&day_name(table, day0)), "{parts:?}");
        assert!(parts.contains(&day_name(table, day0 + DAY)), "{parts:?}");
    }
    assert_eq!(store.list_topics().await.unwrap(), ["orders", "payments"]);
    let rows = all_windows(store).await;
    assert_eq!(rows.len(), 12);
    assert!(rows.iter().all(|r| r.window_start_ms >= day0 + DAY));
    assert!(
        rows.iter().any(|r| r.window_start_ms < cutoff),
        "day 1 is kept whole"
    );
    // The kept days' UUIDs still deduplicate; a replay into a dropped day counts again
    // into a window retention deleted (why retention.messages must outlast replays).
    let out = store
        .write_batch(&batch(messages[6..18].to_vec(), common::now_ms()))
        .await
        .unwrap();
    assert!(
        out.outcomes.iter().all(|o| *o == WriteOutcome::Duplicate),
        "{out:?}"
    );
    let out = store
        .write_batch(&batch(vec![messages[0].clone()], common::now_ms()))
        .await
        .unwrap();
    assert_eq!(out.outcomes, vec![WriteOutcome::Accepted]);
    let out = store
        .write_batch(&batch(vec![ancient], common::now_ms()))
        .await
        .unwrap();
    assert_eq!(
        out.outcomes,
        vec![WriteOutcome::Accepted],
        "deleted from the default partition"
    );
}

/// A store filled by the old schema (several topics, tiers and datacenters, windows
/// across three days, UUIDs, progress, emitters, increments staged and not yet rolled
/// up) converts with every window's counts, checksum, histogram and offsets, the
/// progress and the emitters identical to a store that received the same messages
/// natively; its UUIDs still deduplicate and its queued increments still roll up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversion_keeps_counts_and_what_verdicts_read() {
    let received = common::now_ms();
    let day0 = today() - 2 * DAY;
    let mut counted = vec![];
    let mut staged = vec![];
    let mut salt = 0;
    for topic in ["orders", "payments", "refunds"] {
        for (tier, lost) in [("producer", 0), ("regional", 3), ("aggregate", 0)] {
            for dc in ["dc1", "dc2"] {
                for d in 0..3 {
                    for w in [1, 66, 140] {
                        salt += 1;
                        let start = day0 + d * DAY + w * W;
                        // two increments per window (instances, or a late one)
                        counted.push(message(topic, tier, dc, start, 100 - lost, salt));
                        let late = message(topic, tier, dc, start, 20, salt + 1000);
                        if salt % 5 == 0 {
                            staged.push(late);
                        } else {
                            counted.push(late);
                        }
                    }
                }
                counted.push(progress(
                    topic,
                    tier,
                    dc,
                    received - 60_000,
                    1_000 + salt as i64,
                ));
            }
        }
    }

    // The reference: the new schema receiving everything natively.
    let (reference, _ref_db) = pg_store("store_conversion_reference").await;
    reference
        .write_batch(&batch(counted.clone(), received))
        .await
        .unwrap();
    let (partial, _partial_db) = pg_store("store_conversion_partial").await;
    partial
        .write_batch(&batch(counted.clone(), received))
        .await
        .unwrap();
    reference
        .write_batch(&batch(staged.clone(), received))
        .await
        .unwrap();

    // The old store: the old migrations, filled with the partial state through the
    // old schema's SQL, then the staged increments as the old collector queued them.
    let db = testkit::fresh_database("store_conversion_old").await;
    // through the store: its sslmode handling copes with a server Citus gave TLS
    let pool = PgStore::connect(db.url()).await.unwrap().pool().clone();
    store::old_schema::migrate(&pool).await;
    store::old_schema::fill(&pool, &partial, &counted, &staged).await;
    let old_windows: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_window")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(old_windows, 3 * 3 * 2 * 3 * 3);

    let store = PgStore::connect(db.url()).await.unwrap();
    store.migrate().await.expect("the conversion migration");
    // Before the roll-up: exactly what the old store counted.
    let converted = all_windows(&store).await;
    assert_eq!(converted.len() as i64, old_windows);
    assert_eq!(
        converted,
        all_windows(&partial).await,
        "counts per window after conversion"
    );
    assert_eq!(
        all_offsets(&store, &converted).await,
        all_offsets(&partial, &converted).await
    );
    assert_eq!(
        store.progress(None).await.unwrap(),
        partial.progress(None).await.unwrap()
    );
    assert_eq!(
        store.emitters().await.unwrap(),
        partial.emitters().await.unwrap()
    );
    let queued = store.staged_windows(None, 0).await.unwrap();
    assert_eq!(queued.len(), staged.len(), "the queue survives: {queued:?}");

    // Converted UUIDs still deduplicate, the queue rolls up, and then the store
    // equals the one that received everything natively.
    let again = store
        .stage_batch(&batch(counted.clone(), received))
        .await
        .unwrap();
    assert!(again.outcomes.iter().all(|o| *o == WriteOutcome::Duplicate));
    let again = store
        .stage_batch(&batch(staged.clone(), received))
        .await
        .unwrap();
    assert!(again.outcomes.iter().all(|o| *o == WriteOutcome::Duplicate));
    rollup_all(&store).await;
    let mut after: Vec<WindowRow> = all_windows(&store).await;
    let mut expected = all_windows(&reference).await;
    for r in after.iter_mut().chain(expected.iter_mut()) {
        r.first_received_at_ms = 0;
        r.last_received_at_ms = 0; // the roll-up stamps its own clock
    }
    assert_eq!(after, expected, "counts per window after the roll-up");
    assert_eq!(
        all_offsets(&store, &after).await,
        all_offsets(&reference, &after).await
    );
    // New windows still get ids past the converted ones (no collision of buckets).
    let fresh = message("orders", "regional", "dc3", today() + 3 * W, 9, 77);
    store
        .write_batch(&batch(vec![fresh], received))
        .await
        .unwrap();
    let row = store
        .topic_windows("orders", TimeRange::new(today() + 3 * W, today() + 4 * W))
        .await
        .unwrap();
    assert_eq!(row.iter().map(|r| r.count).collect::<Vec<_>>(), vec![9]);
    assert_eq!(row[0].latency.buckets().count(), 2);
    // Days of the old data got their partitions.
    for d in 0..3 {
        let name = day_name("audit_window", day0 + d * DAY);
        assert!(
            partition_names(store.pool(), "audit_window")
                .await
                .contains(&name),
            "{name}"
        );
    }
}

/// A store migrated by main between the additive migration of `observation_time_count`
/// and the partitions (the old tables plus that column, 20261130000500 recorded as
/// applied) converts too, and keeps the column: sqlx applies the older, missing
/// conversion after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_applied_the_observation_count_migration_first_converts_too() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for entry in std::fs::read_dir(root.join("tests/fixtures/postgres_v1")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    let later = "20261130000500_observation_time_count.sql";
    std::fs::copy(
        root.join("../migrations/postgres").join(later),
        dir.path().join(later),
    )
    .unwrap();
    let db = testkit::fresh_database("store_conversion_after_b1").await;
    // through the store: its sslmode handling copes with a server Citus gave TLS
    let pool = PgStore::connect(db.url()).await.unwrap().pool().clone();
    sqlx::migrate::Migrator::new(dir.path())
        .await
        .unwrap()
        .run(&pool)
        .await
        .unwrap();
    let mut m = message("orders", "regional", "dc1", today() - DAY + 7 * W, 40, 3);
    if let AuditBody::Increment(i) = &mut m.body {
        i.stats.observation_time_count = 5;
    }
    sqlx::query(
        "INSERT INTO audit_window (topic, tier, datacenter, window_start_ms, window_end_ms, count,
             bytes, no_time_count, malformed_count, out_of_bounds_count, checksum,
             latency_zero_count, latency_negative_count, latency_max_ms, increments,
             first_received_at_ms, last_received_at_ms, observation_time_count)
         VALUES ('orders', 'regional', 'dc1', $1, $1 + 600000, 40, 4000, 0, 0, 0, 7, 0, 0, 10,
                 1, 1, 1, 5)",
    )
    .bind(today() - DAY + 7 * W)
    .execute(&pool)
    .await
    .unwrap();

    let store = PgStore::connect(db.url()).await.unwrap();
    store
        .migrate()
        .await
        .expect("the conversion after the additive migration");
    let rows = all_windows(&store).await;
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].count, rows[0].observation_time_count), (40, 5));
    // and the store works: a new increment with an observation count adds up
    store
        .write_batch(&batch(vec![m], common::now_ms()))
        .await
        .unwrap();
    let rows = all_windows(&store).await;
    assert_eq!((rows[0].count, rows[0].observation_time_count), (80, 10));
}

/// Each retention step is its own transaction and fails alone: a day partition whose
/// drop cannot get its lock (a long reader holds the table), or a default partition
/// whose delete the database refuses, leaves the other steps to delete what they
/// should, and the failures are counted in the outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_retention_step_leaves_the_others_to_run() {
    let (store, _db) = pg_store("store_retention_steps").await;
    let pool = store.pool();
    let day0 = today() - 3 * DAY;
    store.prepare_partitions(day0, today()).await.unwrap();
    let old_day = message("orders", "regional", "dc1", day0 + 3 * W, 5, 1);
    let ancient = message("orders", "regional", "dc1", DAY + 3 * W, 2, 2); // default partition
    let mut old = batch(vec![old_day, ancient], day0);
    old.rejects = vec![Reject {
        source: "test".into(),
        reason: "old".into(),
        payload: "x".into(),
    }];
    store.write_batch(&old).await.unwrap();
    let cutoff = day0 + DAY + W;
    let count = |sql: &'static str| async move {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(pool)
            .await
            .unwrap()
    };

    // A reader holds audit_window: the day's drop waits out its lock timeout.
    let mut reader = pool.begin().await.unwrap();
    sqlx::query("SELECT count(*) FROM audit_window")
        .execute(&mut *reader)
        .await
        .unwrap();
    let out = store.retention(cutoff, cutoff, 1000).await.unwrap();
    assert_eq!(out.failed_steps, 1, "{out:?}");
    assert_eq!(out.partitions, 0, "{out:?}");
    assert_eq!(
        (out.windows, out.messages, out.rejects),
        (1, 1, 1),
        "the default partitions and the rejects were still cleaned: {out:?}"
    );
    reader.rollback().await.unwrap();
    assert_eq!(count("SELECT count(*) FROM audit_window_default").await, 0);
    assert_eq!(count("SELECT count(*) FROM audit_reject").await, 0);

    // The next pass drops the day; a refused delete of the default windows does not
    // keep the UUIDs behind it from going.
    let ancient = message("orders", "regional", "dc1", DAY + 5 * W, 2, 3);
    store
        .write_batch(&batch(vec![ancient], day0))
        .await
        .unwrap();
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'refused' USING ERRCODE = '55000'; END $$;
         CREATE TRIGGER refuse_delete BEFORE DELETE ON audit_window_bucket_default
             FOR EACH ROW EXECUTE FUNCTION refuse_delete();",
    )
    .execute(pool)
    .await
    .unwrap();
    let out = store.retention(cutoff, cutoff, 1000).await.unwrap();
    assert_eq!(out.failed_steps, 1, "{out:?}");
    assert_eq!(
        (out.partitions, out.windows, out.messages),
        (4, 0, 1),
        "{out:?}"
    );
    assert_eq!(count("SELECT count(*) FROM audit_window_default").await, 1);
    assert_eq!(count("SELECT count(*) FROM audit_message_default").await, 0);
}

/// On Citus, what the collector and serve do for the topics of a batch goes to the
/// shards that hold those topics, never to every shard: the UUID probe (a replay),
/// staging new increments, the roll-up, the staged-increment read serve makes every
/// cycle, and a topic's windows, offsets and progress. Counted by Citus itself
/// (`citus_stat_counters`, multi-shard query executions of this test's database).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_citus_a_batchs_probes_and_reads_go_to_the_shards_of_its_topics() {
    let Some(db) = testkit::fresh_citus_database("store_citus_routed").await else {
        return;
    };
    {
        let admin = PgStore::connect(db.url()).await.unwrap();
        sqlx::query(&format!(
            "ALTER DATABASE \"{}\" SET citus.enable_stat_counters = on",
            db.name()
        ))
        .execute(admin.pool())
        .await
        .unwrap();
    }
    // Connections opened from now on count.
    let store = crate::citus::distributed_store(db.url()).await;
    let pool = store.pool();
    let now = common::now_ms();
    let window = today() + 6 * W;
    let increments = |topic: &str, n: u64| -> Vec<Message> {
        (0..n)
            .map(|i| message(topic, "regional", "dc1", window, 10 + i, i))
            .collect()
    };
    let seeded: Vec<Message> = ["orders", "payments", "refunds", "shipments"]
        .into_iter()
        .flat_map(|t| increments(t, 20))
        .chain([progress("orders", "regional", "dc1", now, 7)])
        .collect();
    store
        .stage_batch(&batch(seeded.clone(), now))
        .await
        .unwrap();
    rollup_all(&store).await;
    let multi_shard = || async move {
        sqlx::query_scalar::<_, i64>(
            "SELECT query_execution_multi_shard FROM citus_stat_counters
             WHERE name = current_database()",
        )
        .fetch_one(pool)
        .await
        .unwrap()
    };
    let mut fanned_out = vec![];
    macro_rules! routed {
        ($what:literal, $op:expr) => {{
            let before = multi_shard().await;
            let result = $op;
            let after = multi_shard().await;
            if after > before {
                fanned_out.push(($what, after - before));
            }
            result
        }};
    }
    // The collector: a replay of two topics, new increments and progress of one, the
    // roll-up.
    let replay: Vec<Message> = seeded
        .iter()
        .filter(|m| m.topic == "orders" || m.topic == "refunds")
        .cloned()
        .collect();
    let out = routed!(
        "probe of a replay",
        store.stage_batch(&batch(replay, now)).await.unwrap()
    );
    assert_eq!(out.accepted(), 0);
    let fresh: Vec<Message> = increments("orders", 5)
        .into_iter()
        .chain([progress("orders", "regional", "dc1", now + 1, 9)])
        .collect();
    let out = routed!(
        "staging",
        store.stage_batch(&batch(fresh, now)).await.unwrap()
    );
    assert_eq!(out.accepted(), 6);
    // serve, every cycle, then on a topic's page
    let staged = routed!(
        "staged windows",
        store.staged_windows(None, 0).await.unwrap()
    );
    assert_eq!(staged.len(), 1, "{staged:?}");
    let staged = routed!(
        "staged windows of a topic",
        store.staged_windows(Some("orders"), 0).await.unwrap()
    );
    assert_eq!(staged.len(), 1, "{staged:?}");
    let rolled = routed!("roll-up", store.rollup(1000).await.unwrap());
    assert_eq!(rolled, 5);
    let rows = routed!(
        "a topic's windows",
        store.topic_windows("orders", everything()).await.unwrap()
    );
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].count, (10..30).sum::<u64>() + (10..15).sum::<u64>());
    routed!(
        "a window's offsets",
        store.window_offsets(&rows[0].key()).await.unwrap()
    );
    let p = routed!(
        "a topic's progress",
        store.progress(Some("orders")).await.unwrap()
    );
    assert_eq!(p[0].next_offset, 9);
    assert!(fanned_out.is_empty(), "went to every shard: {fanned_out:?}");
}

/// `serve` migrating while the collector prepares its partitions (at start: every day
/// of retention and a week ahead, hundreds of tables, seconds on a loaded machine)
/// waits for it: the preparations take turns on an advisory lock, and the 5 s lock
/// timeout that keeps ingestion from queueing behind an attach is for table locks, not
/// for that turn. (It was not: `serve` failed to start, "canceling statement due to
/// lock timeout", seen in the transactional end-to-end test.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_waits_for_a_concurrent_partition_preparation() {
    let (store, db) = pg_store("store_partitions_turn").await;
    let other = PgPool::connect(db.url()).await.expect("connect");
    // The collector's preparation, holding the turn for longer than the lock timeout.
    let mut collector = other.begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('audit_ensure_day_partitions'))")
        .execute(&mut *collector)
        .await
        .unwrap();
    let migrating = tokio::spawn(async move { store.migrate().await });
    let waiting = testkit::wait_until_async(std::time::Duration::from_secs(30), || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        .fetch_one(&other)
        .await
        .unwrap();
        n > 0
    })
    .await;
    assert!(waiting, "the migration never waited for its turn");
    // The fault: the other preparation takes longer than the lock timeout (5 s).
    tokio::time::sleep(std::time::Duration::from_millis(6_000)).await;
    collector.commit().await.unwrap();
    let migrated = tokio::time::timeout(std::time::Duration::from_secs(60), migrating)
        .await
        .expect("the migration finished once the other preparation did")
        .unwrap();
    assert!(migrated.is_ok(), "{migrated:?}");
}

/// Security review 3, M1: a staged increment whose message is not where the roll-up
/// looks (a partition moved or detached by hand, a shard move, a code path that reads
/// without the partition turn) was taken off the queue as "deleted by retention",
/// counted as rolled up, and lost without a trace. It is kept as a reject (source
/// `rollup`) that names it, so an operator can find it and restore it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_key_without_its_message_is_not_dropped_silently() {
    let (store, _db) = pg_store("store_pending_without_message").await;
    let m = message("orders", "regional", "dc1", today() + 3 * W, 10, 1);
    let uuid = m.uuid;
    // The collector's path: staged (message stored whole, key queued), not rolled up.
    store
        .stage_batch(&batch(vec![m], common::now_ms()))
        .await
        .unwrap();
    let deleted = sqlx::query("DELETE FROM audit_message WHERE uuid = $1")
        .bind(uuid)
        .execute(store.pool())
        .await
        .unwrap()
        .rows_affected();
    assert_eq!(deleted, 1, "the staged message was stored");

    let outcome = store.rollup_counted(100).await.unwrap();
    assert_eq!(
        outcome,
        RollupOutcome {
            taken: 1,
            missing: 1
        },
        "counted as missing, not as rolled up"
    );
    assert_eq!(
        store.rollup(100).await.unwrap(),
        0,
        "taken off the queue once"
    );

    let pending: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_pending")
        .fetch_one(store.pool())
        .await
        .unwrap();
    let rejects = store.rejects(10).await.unwrap();
    let named: Vec<&RejectRow> = rejects
        .iter()
        .filter(|r| r.source == "rollup" && r.payload.contains(&uuid.to_string()))
        .collect();
    assert!(
        named.len() == 1 && pending == 0,
        "expected one roll-up reject naming {uuid} (and the key off the queue): \
         {pending} pending, rejects {rejects:?}"
    );
    assert!(all_windows(&store).await.is_empty());
}

/// The one exception to the test above: retention deleting a day's messages takes
/// their staged keys off the queue in the same transaction (dropped days, and old
/// messages of the default partition), so the roll-up never finds those keys and
/// reports nothing; younger staged increments still roll up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_takes_the_staged_keys_of_the_messages_it_deletes_off_the_queue() {
    let (store, _db) = pg_store("store_pending_retention").await;
    // A day with its partitions and one older than every partition (default partition).
    let (dropped_day, default_day) = (today() - 10 * DAY, today() - 400 * DAY);
    store
        .prepare_partitions(dropped_day, dropped_day)
        .await
        .unwrap();
    let old = [
        message("orders", "regional", "dc1", dropped_day + W, 10, 1),
        message("orders", "regional", "dc1", default_day + W, 10, 2),
    ];
    let young = message("orders", "regional", "dc1", today() + W, 7, 3);
    store
        .stage_batch(&batch(
            vec![old[0].clone(), old[1].clone(), young],
            common::now_ms(),
        ))
        .await
        .unwrap();
    let cutoff = today() - 2 * DAY;
    let outcome = store.retention(cutoff, cutoff, 1000).await.unwrap();
    assert_eq!(
        (outcome.failed_steps, outcome.messages),
        (0, 1),
        "{outcome:?}"
    );
    assert!(outcome.partitions >= 4, "{outcome:?}");

    let outcome = store.rollup_counted(100).await.unwrap();
    assert_eq!(
        outcome,
        RollupOutcome {
            taken: 1,
            missing: 0
        }
    );
    assert!(store.rejects(10).await.unwrap().is_empty());
    let counts: Vec<(i64, u64)> = all_windows(&store)
        .await
        .iter()
        .map(|r| (r.window_start_ms, r.count))
        .collect();
    assert_eq!(counts, vec![(today() + W, 7)]);
}
