//! SQLite store (embedded default). One writer at a time (SQLite's own rule), made
//! explicit with a mutex so writers queue instead of failing with SQLITE_BUSY;
//! readers run concurrently thanks to WAL mode.

use std::collections::HashSet;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool, Transaction};
use tokio::sync::Mutex;

use crate::aggregate::{first_in_batch, Rollup};
use crate::contract::*;
use crate::db_rows::WindowDb;
use crate::domain::*;
use crate::error::{Context, Result, StoreError};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/sqlite");

/// `a + b` mod 2^64 on i64 columns without overflow: SQLite would turn an overflowing
/// integer sum into a REAL and lose the checksum.
const WRAP_ADD_CHECKSUM: &str = "CASE
    WHEN excluded.checksum > 0 AND audit_window.checksum > 9223372036854775807 - excluded.checksum
      THEN (audit_window.checksum - 9223372036854775807 - 1) + (excluded.checksum - 9223372036854775807 - 1)
    WHEN excluded.checksum < 0 AND audit_window.checksum < (-9223372036854775807 - 1) - excluded.checksum
      THEN (audit_window.checksum + 9223372036854775807 + 1) + (excluded.checksum + 9223372036854775807 + 1)
    ELSE audit_window.checksum + excluded.checksum END";

/// The larger of two nullable columns, an unknown (NULL) one left out: SQLite's
/// two-argument `max` is NULL when either is.
fn greatest_known(old: &str, new: &str) -> String {
    format!("CASE WHEN {old} IS NULL OR {new} > {old} THEN {new} ELSE {old} END")
}

#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    writer: Arc<Mutex<()>>,
    window_size: crate::aggregate::WindowSizeCache,
}

impl SqliteStore {
    /// Opens (creating if missing) the database file at `path`.
    pub async fn open(path: &str) -> Result<SqliteStore> {
        let options = SqliteConnectOptions::from_str(&format!("sqlite:{path}"))
            .map_err(|e| StoreError::Url {
                url: path.to_string(),
                reason: e.to_string(),
            })?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: a committed batch survives power loss, because Kafka offsets are
            // committed right after it.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(30))
            .foreign_keys(false);
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .context("opening the SQLite database")?;
        Ok(SqliteStore {
            pool,
            writer: Arc::new(Mutex::new(())),
            window_size: Default::default(),
        })
    }

    /// The connection pool, for tests and benchmarks that poison, lock or seed tables
    /// (feature `test-support`). Everything else goes through [`AuditStore`]: only
    /// this crate knows the schema.
    #[cfg(feature = "test-support")]
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// SQLite's one writer at a time (see the module doc).
    async fn lock_writer(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.writer.lock().await
    }

    async fn write_in(tx: &mut Transaction<'_, Sqlite>, batch: &Batch) -> Result<BatchOutcome> {
        let firsts = first_in_batch(batch)?;
        let received = batch.received_at_ms;
        let mut outcomes = vec![WriteOutcome::Duplicate; batch.messages.len()];
        let mut accepted_idx = HashSet::new();
        for &(uuid, index) in &firsts {
            let message = &batch.messages[index];
            let (topic, tier, dc, host, emitted) = (
                &message.topic,
                &message.tier,
                &message.datacenter,
                &message.host,
                message.emitted_at,
            );
            let (kind, start, count, checksum) = match &message.body {
                AuditBody::Increment(i) => (
                    0i64,
                    Some(i.window_start),
                    Some(i.stats.count as i64),
                    Some(i.stats.checksum.0 as i64),
                ),
                AuditBody::Progress(_) => (1, None, None, None),
            };
            let inserted = sqlx::query(
                "INSERT INTO audit_message (uuid, kind, topic, tier, datacenter, host, window_start_ms,
                     emitted_at_ms, received_at_ms, count, checksum)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                 ON CONFLICT (uuid) DO NOTHING",
            )
            .bind(uuid)
            .bind(kind)
            .bind(topic)
            .bind(tier)
            .bind(dc)
            .bind(host)
            .bind(start)
            .bind(emitted)
            .bind(received)
            .bind(count)
            .bind(checksum)
            .execute(&mut **tx)
            .await
            .context("recording a message UUID")?
            .rows_affected();
            if inserted == 1 {
                outcomes[index] = WriteOutcome::Accepted;
                accepted_idx.insert(index);
            }
        }
        let rollup = Rollup::of(
            batch
                .messages
                .iter()
                .enumerate()
                .filter(|(i, _)| accepted_idx.contains(i))
                .map(|(_, m)| m),
            received,
        );

        // Saturating sums: SQLite would silently turn an overflowing sum into a REAL.
        let sat =
            |c: &str| crate::sql::sat_add(&format!("audit_window.{c}"), &format!("excluded.{c}"));
        let upsert_window = format!(
            "INSERT INTO audit_window (topic, tier, datacenter, window_start_ms, window_end_ms,
                 count, bytes, no_time_count, malformed_count, out_of_bounds_count, checksum,
                 latency_zero_count, latency_negative_count, latency_max_ms, increments,
                 first_received_at_ms, last_received_at_ms, observation_time_count,
                 max_observed_at_ms, delivery_failed_count)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?16, ?17,
                     ?18, ?19)
             ON CONFLICT (topic, window_start_ms, tier, datacenter) DO UPDATE SET
                 window_end_ms = max(audit_window.window_end_ms, excluded.window_end_ms),
                 count = {count},
                 bytes = {bytes},
                 no_time_count = {no_time_count},
                 malformed_count = {malformed_count},
                 out_of_bounds_count = {out_of_bounds_count},
                 observation_time_count = {observation_time_count},
                 delivery_failed_count = {delivery_failed_count},
                 checksum = {WRAP_ADD_CHECKSUM},
                 latency_zero_count = {latency_zero_count},
                 latency_negative_count = {latency_negative_count},
                 latency_max_ms = max(audit_window.latency_max_ms, excluded.latency_max_ms),
                 increments = {increments},
                 last_received_at_ms = max(audit_window.last_received_at_ms, excluded.last_received_at_ms),
                 max_observed_at_ms = {max_observed_at_ms}
             RETURNING id",
            max_observed_at_ms = greatest_known("audit_window.max_observed_at_ms", "excluded.max_observed_at_ms"),
            count = sat("count"),
            bytes = sat("bytes"),
            no_time_count = sat("no_time_count"),
            malformed_count = sat("malformed_count"),
            out_of_bounds_count = sat("out_of_bounds_count"),
            observation_time_count = sat("observation_time_count"),
            delivery_failed_count = sat("delivery_failed_count"),
            latency_zero_count = sat("latency_zero_count"),
            latency_negative_count = sat("latency_negative_count"),
            increments = sat("increments"),
        );
        for (k, w) in &rollup.windows {
            let id: i64 = sqlx::query_scalar(&upsert_window)
                .bind(&k.topic)
                .bind(&k.tier)
                .bind(&k.datacenter)
                .bind(k.window_start_ms)
                .bind(w.window_end_ms)
                .bind(w.count)
                .bind(w.bytes)
                .bind(w.no_time_count)
                .bind(w.malformed_count)
                .bind(w.out_of_bounds_count)
                .bind(w.checksum as i64)
                .bind(w.zero_count)
                .bind(w.negative_count)
                .bind(w.max_ms)
                .bind(w.increments)
                .bind(received)
                .bind(w.observation_time_count)
                .bind(w.max_observed_at)
                .bind(w.delivery_failed_count)
                .fetch_one(&mut **tx)
                .await
                .context("adding an increment to its window")?;
            for (&bucket, &count) in &w.buckets {
                sqlx::query(
                    "INSERT INTO audit_window_bucket (window_id, bucket, count) VALUES (?1, ?2, ?3)
                     ON CONFLICT (window_id, bucket) DO UPDATE SET count = CASE
                         WHEN audit_window_bucket.count > 9223372036854775807 - excluded.count THEN 9223372036854775807
                         ELSE audit_window_bucket.count + excluded.count END",
                )
                .bind(id)
                .bind(bucket)
                .bind(count)
                .execute(&mut **tx)
                .await
                .context("adding a latency bucket")?;
            }
            for (&partition, &(min, max, record_time)) in &w.offsets {
                sqlx::query(&format!(
                    "INSERT INTO audit_window_offset (window_id, partition_id, min_offset, max_offset,
                         max_record_time_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (window_id, partition_id) DO UPDATE SET
                         min_offset = min(audit_window_offset.min_offset, excluded.min_offset),
                         max_offset = max(audit_window_offset.max_offset, excluded.max_offset),
                         max_record_time_ms = {}",
                    greatest_known(
                        "audit_window_offset.max_record_time_ms",
                        "excluded.max_record_time_ms"
                    )
                ))
                .bind(id)
                .bind(partition)
                .bind(min)
                .bind(max)
                .bind(record_time)
                .execute(&mut **tx)
                .await
                .context("widening an offset range")?;
            }
        }
        for (&(topic, tier, dc, partition), p) in &rollup.progress {
            sqlx::query(
                "INSERT INTO audit_progress (topic, tier, datacenter, partition_id, host, next_offset,
                     record_time_ms, lag, emitted_at_ms, received_at_ms, max_record_time_ms,
                     log_append_time)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
                 ON CONFLICT (topic, tier, datacenter, partition_id) DO UPDATE SET
                     host = excluded.host, next_offset = excluded.next_offset,
                     record_time_ms = excluded.record_time_ms, lag = excluded.lag,
                     emitted_at_ms = excluded.emitted_at_ms, received_at_ms = excluded.received_at_ms,
                     max_record_time_ms = excluded.max_record_time_ms,
                     log_append_time = excluded.log_append_time
                 WHERE min(excluded.emitted_at_ms, excluded.received_at_ms)
                    >= min(audit_progress.emitted_at_ms, audit_progress.received_at_ms)",
            )
            .bind(topic)
            .bind(tier)
            .bind(dc)
            .bind(partition)
            .bind(p.host)
            .bind(p.next_offset)
            .bind(p.record_time_ms)
            .bind(p.lag)
            .bind(p.emitted_at_ms)
            .bind(received)
            .bind(p.max_record_time_ms)
            .bind(p.log_append_time)
            .execute(&mut **tx)
            .await
            .context("keeping a progress watermark")?;
        }
        for (&(tier, dc, host), (emitted, messages)) in &rollup.emitters {
            sqlx::query(
                "INSERT INTO audit_emitter (tier, datacenter, host, last_emitted_at_ms, last_received_at_ms, messages)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (tier, datacenter, host) DO UPDATE SET
                     last_emitted_at_ms = max(audit_emitter.last_emitted_at_ms, excluded.last_emitted_at_ms),
                     last_received_at_ms = max(audit_emitter.last_received_at_ms, excluded.last_received_at_ms),
                     messages = CASE WHEN audit_emitter.messages > 9223372036854775807 - excluded.messages
                         THEN 9223372036854775807 ELSE audit_emitter.messages + excluded.messages END",
            )
            .bind(tier)
            .bind(dc)
            .bind(host)
            .bind(emitted)
            .bind(received)
            .bind(messages)
            .execute(&mut **tx)
            .await
            .context("updating an emitter's last-seen time")?;
        }
        for r in batch.rejects.iter().map(Reject::sanitized) {
            sqlx::query("INSERT INTO audit_reject (received_at_ms, source, reason, payload) VALUES (?1, ?2, ?3, ?4)")
                .bind(received)
                .bind(&r.source)
                .bind(&r.reason)
                .bind(&r.payload)
                .execute(&mut **tx)
                .await
                .context("storing a reject")?;
        }
        Ok(BatchOutcome { outcomes })
    }
}

impl Deployment for SqliteStore {
    async fn migrate(&self) -> Result<()> {
        let _writer = self.writer.lock().await;
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .context("pinging SQLite")?;
        Ok(())
    }

    crate::shared::shared_deployment!();
}

impl Ingest for SqliteStore {
    async fn write_batch(&self, batch: &Batch) -> Result<BatchOutcome> {
        let outcome = {
            let _writer = self.writer.lock().await;
            let mut tx = self
                .pool
                .begin()
                .await
                .context("beginning a batch transaction")?;
            let outcome = Self::write_in(&mut tx, batch).await?;
            tx.commit().await.context("committing a batch")?;
            outcome
        };
        self.note_window_size(batch, &outcome).await;
        Ok(outcome)
    }

    /// SQLite has one writer and no bulk path worth deferring for: rolls up at once.
    async fn stage_batch(&self, batch: &Batch) -> Result<BatchOutcome> {
        self.write_batch(batch).await
    }

    async fn rollup(&self, _limit: u32) -> Result<u64> {
        Ok(0)
    }

    async fn rollup_counted(&self, _limit: u32) -> Result<RollupOutcome> {
        Ok(RollupOutcome::default())
    }
}

impl VerdictReads for SqliteStore {
    /// Nothing is ever staged: [`Ingest::stage_batch`] adds increments up at once.
    async fn staged_windows(
        &self,
        _topic: Option<&str>,
        _from_window_ms: i64,
    ) -> Result<Vec<(String, String, String, i64)>> {
        Ok(Vec::new())
    }

    crate::shared::shared_verdict_reads!();
}

impl Inventory for SqliteStore {
    async fn list_topics(&self) -> Result<Vec<String>> {
        sqlx::query_scalar("SELECT DISTINCT topic FROM audit_window ORDER BY topic")
            .fetch_all(&self.pool)
            .await
            .context("listing topics")
    }

    crate::shared::shared_inventory!();
}

impl AlertLedger for SqliteStore {
    crate::shared::alert_ledger!();
}

impl Upkeep for SqliteStore {
    async fn prepare_partitions(&self, _from_ms: i64, _to_ms: i64) -> Result<u64> {
        Ok(0)
    }

    async fn retention(
        &self,
        window_cutoff_ms: i64,
        message_cutoff_ms: i64,
        batch_size: u32,
    ) -> Result<RetentionOutcome> {
        let limit = i64::from(batch_size.max(1));
        let _writer = self.writer.lock().await;
        let mut tx = self
            .pool
            .begin()
            .await
            .context("beginning a retention transaction")?;
        // Under the writer lock the same ORDER BY id LIMIT selects the same windows in
        // all three statements.
        let doomed = "SELECT id FROM audit_window WHERE window_start_ms < ?1 ORDER BY id LIMIT ?2";
        for table in ["audit_window_bucket", "audit_window_offset"] {
            sqlx::query(&format!(
                "DELETE FROM {table} WHERE window_id IN ({doomed})"
            ))
            .bind(window_cutoff_ms)
            .bind(limit)
            .execute(&mut *tx)
            .await
            .context("deleting children of old windows")?;
        }
        let windows = sqlx::query(&format!("DELETE FROM audit_window WHERE id IN ({doomed})"))
            .bind(window_cutoff_ms)
            .bind(limit)
            .execute(&mut *tx)
            .await
            .context("deleting old windows")?
            .rows_affected();
        let messages = sqlx::query(
            "DELETE FROM audit_message WHERE uuid IN (
                 SELECT uuid FROM audit_message WHERE received_at_ms < ?1 LIMIT ?2)",
        )
        .bind(message_cutoff_ms)
        .bind(limit)
        .execute(&mut *tx)
        .await
        .context("deleting old message UUIDs")?
        .rows_affected();
        let rejects = sqlx::query(
            "DELETE FROM audit_reject WHERE id IN (SELECT id FROM audit_reject WHERE received_at_ms < ?1 LIMIT ?2)",
        )
        .bind(message_cutoff_ms)
        .bind(limit)
        .execute(&mut *tx)
        .await
        .context("deleting old rejects")?
        .rows_affected();
        tx.commit().await.context("committing retention")?;
        Ok(RetentionOutcome {
            windows,
            messages,
            rejects,
            partitions: 0,
            failed_steps: 0,
        })
    }

    crate::shared::shared_forgetting!();
}

/// The connection the shared window reads run on ([`SqliteStore::read_turn`]).
type ReadConn = sqlx::SqliteConnection;

impl SqliteStore {
    crate::shared::shared_window_reads!();

    /// A connection for the reads a verdict rests on: SQLite has no partitions, so no
    /// turn to take (PostgreSQL's, pg/partitions.rs).
    async fn read_turn(&self) -> Result<sqlx::pool::PoolConnection<sqlx::Sqlite>> {
        self.pool.acquire().await.context("acquiring a connection")
    }

    async fn end_read(_read: sqlx::pool::PoolConnection<sqlx::Sqlite>) -> Result<()> {
        Ok(())
    }

    const TOPIC_BUCKETS: &'static str = crate::sql::TOPIC_BUCKETS;
    const TOPIC_RECORD_TIMES: &'static str = crate::sql::TOPIC_RECORD_TIMES;

    fn window_all_offsets_sql() -> &'static str {
        crate::sql::WINDOW_ALL_OFFSETS
    }

    fn window_offsets_sql() -> &'static str {
        &crate::sql::WINDOW_OFFSETS
    }

    /// [`VerdictReads::windows_in_range`] with the bucket-row cap as a parameter (tests lower it).
    #[doc(hidden)]
    pub async fn windows_in_range_capped(
        &self,
        range: TimeRange,
        after_topic: Option<&str>,
        topic_limit: u32,
        max_bucket_rows: usize,
    ) -> Result<WindowPage> {
        let (topics, next_after_topic) = Self::range_topics(
            &mut *self.read_turn().await?,
            range,
            after_topic,
            topic_limit,
        )
        .await?;
        let (Some(first), Some(last)) = (topics.first(), topics.last()) else {
            return Ok(WindowPage {
                rows: Vec::new(),
                next_after_topic,
            });
        };
        // The page's topics are exactly those with windows in range between first and
        // last, so a range on topic selects them without binding a list.
        let rows: Vec<WindowDb> = sqlx::query_as(&format!(
            "SELECT {} FROM audit_window
             WHERE topic >= ?1 AND topic <= ?2 AND window_start_ms >= ?3 AND window_start_ms < ?4
             ORDER BY topic, window_start_ms, tier, datacenter LIMIT {}",
            crate::sql::WINDOW_COLUMNS,
            MAX_READ_ROWS
        ))
        .bind(first)
        .bind(last)
        .bind(range.start_ms)
        .bind(range.end_ms)
        .fetch_all(&self.pool)
        .await
        .context("reading windows of a range")?;
        // (window id, key, value) rows of the windows of the page's topics.
        let per_window = |sql: &'static str| {
            sqlx::query_as::<_, (i64, i32, i64)>(sql)
                .bind(first)
                .bind(last)
                .bind(range.start_ms)
                .bind(range.end_ms)
                .bind(crate::db_rows::bucket_limit(max_bucket_rows))
                .fetch_all(&self.pool)
        };
        let buckets = per_window(
            "SELECT b.window_id, b.bucket, b.count FROM audit_window_bucket b
             JOIN audit_window w ON w.id = b.window_id
             WHERE w.topic >= ?1 AND w.topic <= ?2 AND w.window_start_ms >= ?3 AND w.window_start_ms < ?4
             ORDER BY b.window_id, b.bucket LIMIT ?5",
        )
        .await
        .context("reading latency buckets")?;
        let record_times: Vec<(i64, i32, Option<i64>, i64)> = sqlx::query_as(
            "SELECT o.window_id, o.partition_id, o.max_record_time_ms, o.max_offset FROM audit_window_offset o
             JOIN audit_window w ON w.id = o.window_id
             WHERE w.topic >= ?1 AND w.topic <= ?2 AND w.window_start_ms >= ?3 AND w.window_start_ms < ?4
             ORDER BY o.window_id, o.partition_id LIMIT ?5",
        )
        .bind(first)
        .bind(last)
        .bind(range.start_ms)
        .bind(range.end_ms)
        .bind(crate::db_rows::bucket_limit(max_bucket_rows))
        .fetch_all(&self.pool)
        .await
        .context("reading record times of windows")?;
        let record_times = crate::db_rows::partition_maxima(record_times);
        Ok(WindowPage {
            rows: crate::db_rows::join_buckets_capped(
                rows,
                buckets,
                record_times,
                max_bucket_rows,
                &crate::db_rows::topic_span(&topics),
                range,
            ),
            next_after_topic,
        })
    }
}
