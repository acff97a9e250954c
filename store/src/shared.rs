//! Reads and small writes whose SQL is the same on both backends: SQLite accepts
//! PostgreSQL's `$N` placeholders with the same meaning (sqlx binds `$N` to the N-th
//! argument), and `CAST($1 AS TEXT)` replaces PostgreSQL's `$1::text`. One text per
//! statement here, one method body in a macro per part of the contract
//! ([`shared_deployment!`], [`shared_verdict_reads!`], [`shared_inventory!`],
//! [`alert_ledger!`], [`shared_forgetting!`], expanded in the impls of that part in
//! pg.rs and sqlite.rs) or [`shared_window_reads!`] (in their inherent impls). Writes of the ingest path, staging,
//! roll-up, retention and `list_topics` really differ and stay per backend.

use std::sync::LazyLock;

use crate::contract::MAX_READ_ROWS;

/// `old + new` for non-negative i64 columns, saturating at `i64::MAX`, in SQL that
/// PostgreSQL and SQLite evaluate alike (SQLite would turn an overflowing sum into a
/// REAL, PostgreSQL would fail the statement).
pub(crate) fn sat_add(old: &str, new: &str) -> String {
    format!(
        "CASE WHEN {old} > 9223372036854775807 - {new} THEN 9223372036854775807 ELSE {old} + {new} END"
    )
}

pub(crate) const WINDOW_COLUMNS: &str =
    "id, topic, tier, datacenter, window_start_ms, window_end_ms, count, bytes,
    no_time_count, malformed_count, out_of_bounds_count, observation_time_count, checksum, latency_zero_count,
    latency_negative_count, latency_max_ms, increments, first_received_at_ms, last_received_at_ms,
    max_observed_at_ms, delivery_failed_count";

/// Window rows of one topic in a range: `$1` topic, `$2..$3` window starts.
pub(crate) static TOPIC_WINDOWS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {WINDOW_COLUMNS} FROM audit_window
         WHERE topic = $1 AND window_start_ms >= $2 AND window_start_ms < $3
         ORDER BY window_start_ms, tier, datacenter LIMIT {MAX_READ_ROWS}"
    )
});

/// Latency buckets of [`TOPIC_WINDOWS`]' rows, same binds; the caller appends the LIMIT.
/// SQLite's; PostgreSQL's bucket rows carry their window's topic and start
/// ([`PG_TOPIC_BUCKETS`]), its partition and distribution keys.
pub(crate) const TOPIC_BUCKETS: &str =
    "SELECT b.window_id, b.bucket, b.count FROM audit_window_bucket b
     JOIN audit_window w ON w.id = b.window_id
     WHERE w.topic = $1 AND w.window_start_ms >= $2 AND w.window_start_ms < $3
     ORDER BY b.window_id, b.bucket";

/// Topics with windows in `$1..$2`, after `$3` (none: from the first), at most `$4`.
pub(crate) const RANGE_TOPICS: &str = "SELECT DISTINCT topic FROM audit_window
     WHERE window_start_ms >= $1 AND window_start_ms < $2
       AND (CAST($3 AS TEXT) IS NULL OR topic > $3)
     ORDER BY topic LIMIT $4";

pub(crate) const PG_TOPIC_BUCKETS: &str = "SELECT window_id, bucket, count FROM audit_window_bucket
     WHERE topic = $1 AND window_start_ms >= $2 AND window_start_ms < $3
     ORDER BY window_id, bucket";

/// Per-partition record times of [`TOPIC_WINDOWS`]' rows (issue 24's upstream
/// evidence), same binds; the caller appends the LIMIT. Only partitions with one.
/// SQLite's; PostgreSQL's is [`PG_TOPIC_RECORD_TIMES`].
pub(crate) const TOPIC_RECORD_TIMES: &str =
    "SELECT o.window_id, o.partition_id, o.max_record_time_ms FROM audit_window_offset o
     JOIN audit_window w ON w.id = o.window_id
     WHERE w.topic = $1 AND w.window_start_ms >= $2 AND w.window_start_ms < $3
       AND o.max_record_time_ms IS NOT NULL
     ORDER BY o.window_id, o.partition_id";

pub(crate) const PG_TOPIC_RECORD_TIMES: &str =
    "SELECT window_id, partition_id, max_record_time_ms FROM audit_window_offset
     WHERE topic = $1 AND window_start_ms >= $2 AND window_start_ms < $3
       AND max_record_time_ms IS NOT NULL
     ORDER BY window_id, partition_id";

/// Offset ranges of one window: `$1` topic, `$2` tier, `$3` datacenter, `$4` start.
/// SQLite's; PostgreSQL's is [`PG_WINDOW_OFFSETS`].
pub(crate) static WINDOW_OFFSETS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT o.partition_id, o.min_offset, o.max_offset, o.max_record_time_ms
         FROM audit_window_offset o
         JOIN audit_window w ON w.id = o.window_id
         WHERE w.topic = $1 AND w.tier = $2 AND w.datacenter = $3 AND w.window_start_ms = $4
         ORDER BY o.partition_id LIMIT {MAX_READ_ROWS}"
    )
});

pub(crate) static PG_WINDOW_OFFSETS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT o.partition_id, o.min_offset, o.max_offset, o.max_record_time_ms
         FROM audit_window_offset o
         JOIN audit_window w ON w.id = o.window_id AND w.topic = o.topic
                            AND w.window_start_ms = o.window_start_ms
         WHERE w.topic = $1 AND w.tier = $2 AND w.datacenter = $3 AND w.window_start_ms = $4
           AND o.topic = $1 AND o.window_start_ms = $4
         ORDER BY o.partition_id LIMIT {MAX_READ_ROWS}"
    )
});

/// The columns of a progress row ([`crate::db_rows::ProgressDb`]), one list for every
/// progress read (reads that listed their own lost columns added later).
macro_rules! progress_columns {
    () => {
        "SELECT topic, tier, datacenter, partition_id, host, next_offset, record_time_ms, lag,
                emitted_at_ms, received_at_ms, max_record_time_ms, log_append_time
         FROM audit_progress"
    };
}

pub(crate) static PROGRESS: LazyLock<String> = LazyLock::new(|| {
    format!(
        concat!(
            progress_columns!(),
            " WHERE (CAST($1 AS TEXT) IS NULL OR topic = $1)
         ORDER BY topic, tier, datacenter, partition_id LIMIT {}"
        ),
        MAX_READ_ROWS
    )
});

/// [`PROGRESS`] of the rows received at or after `$2`, at most `$3`: the forget
/// horizon applied before the bound, not after it.
pub(crate) const PROGRESS_SINCE: &str = concat!(
    progress_columns!(),
    "
     WHERE (CAST($1 AS TEXT) IS NULL OR topic = $1) AND received_at_ms >= $2
     ORDER BY topic, tier, datacenter, partition_id LIMIT $3"
);

pub(crate) static EMITTERS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT tier, datacenter, host, last_emitted_at_ms, last_received_at_ms, messages
         FROM audit_emitter ORDER BY tier, datacenter, host LIMIT {MAX_READ_ROWS}"
    )
});

pub(crate) const REJECTS: &str =
    "SELECT id, received_at_ms, source, reason, payload FROM audit_reject ORDER BY id DESC LIMIT $1";

pub(crate) const WINDOW_KEYS: &str = "SELECT DISTINCT window_start_ms, topic FROM audit_window
     WHERE window_start_ms >= $1 AND window_start_ms < $2
     ORDER BY window_start_ms, topic LIMIT $3";

pub(crate) const CHANGED_WINDOWS: &str = "SELECT DISTINCT topic, window_start_ms FROM audit_window
     WHERE last_received_at_ms >= $1 AND window_start_ms >= $2 LIMIT $3";

/// [`PROGRESS_SINCE`] of the topics from `$1` to `$2` (inclusive): one read for a page
/// of topics.
pub(crate) const PROGRESS_OF_TOPICS: &str = concat!(
    progress_columns!(),
    "
     WHERE topic >= $1 AND topic <= $2 AND received_at_ms >= $3
     ORDER BY topic, tier, datacenter, partition_id LIMIT $4"
);

/// Auditors that reported at or after `$1` (the forget horizon, applied before the
/// bound `$2`).
pub(crate) const AUDITOR_REPORTS: &str =
    "SELECT topic, tier, datacenter, max(received_at_ms) FROM audit_progress
     WHERE received_at_ms >= $1
     GROUP BY topic, tier, datacenter ORDER BY topic, tier, datacenter LIMIT $2";

/// Offset ranges of every tier and datacenter of one window: `$1` topic, `$2` start,
/// at most `$3` rows. SQLite's; PostgreSQL's is [`PG_WINDOW_ALL_OFFSETS`].
pub(crate) const WINDOW_ALL_OFFSETS: &str =
    "SELECT w.tier, w.datacenter, o.partition_id, o.min_offset, o.max_offset, o.max_record_time_ms
     FROM audit_window_offset o JOIN audit_window w ON w.id = o.window_id
     WHERE w.topic = $1 AND w.window_start_ms = $2
     ORDER BY w.tier, w.datacenter, o.partition_id LIMIT $3";

pub(crate) const PG_WINDOW_ALL_OFFSETS: &str =
    "SELECT w.tier, w.datacenter, o.partition_id, o.min_offset, o.max_offset, o.max_record_time_ms
     FROM audit_window_offset o
     JOIN audit_window w ON w.id = o.window_id AND w.topic = o.topic
                        AND w.window_start_ms = o.window_start_ms
     WHERE w.topic = $1 AND w.window_start_ms = $2 AND o.topic = $1 AND o.window_start_ms = $2
     ORDER BY w.tier, w.datacenter, o.partition_id LIMIT $3";

/// The deployment's window size (one row, `id = 1`).
pub(crate) const WINDOW_SIZE: &str = "SELECT window_ms FROM audit_window_size WHERE id = 1";

/// Records `$1` as the window size unless one is recorded (`$4` false) or always
/// (`$4` true: configuration changes it); `$2` now, `$3` who fixed it.
pub(crate) const FIX_WINDOW_SIZE: &str =
    "INSERT INTO audit_window_size (id, window_ms, fixed_at_ms, fixed_by) VALUES (1, $1, $2, $3)
     ON CONFLICT (id) DO UPDATE SET window_ms = excluded.window_ms,
         fixed_at_ms = excluded.fixed_at_ms, fixed_by = excluded.fixed_by
     WHERE $4 AND audit_window_size.window_ms <> excluded.window_ms";

/// Progress not received since `$1`, at most `$2` rows. The outer condition is checked
/// again on the row deleted: one refreshed since the inner read stays. Keyed, without
/// `FOR UPDATE`, so that it runs on a distributed table too.
pub(crate) const FORGET_PROGRESS: &str = "DELETE FROM audit_progress WHERE received_at_ms < $1
       AND (topic, tier, datacenter, partition_id) IN (
           SELECT topic, tier, datacenter, partition_id FROM audit_progress
           WHERE received_at_ms < $1 LIMIT $2)";

/// Emitters not heard from since `$1`, at most `$2` rows (as [`FORGET_PROGRESS`]).
pub(crate) const FORGET_EMITTERS: &str = "DELETE FROM audit_emitter WHERE last_received_at_ms < $1
       AND (tier, datacenter, host) IN (
           SELECT tier, datacenter, host FROM audit_emitter
           WHERE last_received_at_ms < $1 LIMIT $2)";

/// The oldest rejects beyond the newest `$1`, at most `$2` of them.
pub(crate) const TRIM_REJECTS: &str = "DELETE FROM audit_reject WHERE id IN (
         SELECT id FROM audit_reject WHERE id <= (
             SELECT id FROM audit_reject ORDER BY id DESC LIMIT 1 OFFSET $1)
         ORDER BY id LIMIT $2)";

/// Uses `audit_window_range` (window_start_ms, topic) backwards: one index probe.
pub(crate) const LATEST_WINDOW_MS: &str = "SELECT window_end_ms - window_start_ms FROM audit_window
     ORDER BY window_start_ms DESC, window_end_ms DESC LIMIT 1";

pub(crate) const OPEN_ALERTS: &str =
    "SELECT dedup_key, alert FROM web_alert_open WHERE channel = $1";

pub(crate) const SAVE_OPEN_ALERT: &str =
    "INSERT INTO web_alert_open (channel, dedup_key, alert, opened_at_ms)
     VALUES ($1, $2, $3, $4)
     ON CONFLICT (channel, dedup_key) DO UPDATE SET alert = excluded.alert";

pub(crate) const DELETE_OPEN_ALERT: &str =
    "DELETE FROM web_alert_open WHERE channel = $1 AND dedup_key = $2";

/// The methods whose body is the same on both backends, one macro per part of the
/// contract (expanded in that part's impl in pg.rs and sqlite.rs), for a store with a
/// `pool` field, a `lock_writer` method (SQLite's one writer at a time; nothing on
/// PostgreSQL), the backend's `*_capped` window reads and its
/// `TOPIC_BUCKETS` / `window_offsets_sql()` (the bucket and offset tables differ). The
/// SQL is above; the database row types in db_rows.rs.
macro_rules! shared_deployment {
    () => {
        async fn window_size_ms(&self) -> Result<Option<i64>> {
            let size: Option<i64> = sqlx::query_scalar(crate::shared::WINDOW_SIZE)
                .fetch_optional(&self.pool)
                .await
                .context("reading the deployment's window size")?;
            if let Some(ms) = size {
                self.window_size.set(ms);
            }
            Ok(size)
        }

        async fn fix_window_size_ms(&self, window_ms: i64, by: &str, replace: bool) -> Result<i64> {
            let _writer = self.lock_writer().await;
            sqlx::query(crate::shared::FIX_WINDOW_SIZE)
                .bind(window_ms)
                .bind(common::now_ms())
                .bind(by)
                .bind(replace)
                .execute(&self.pool)
                .await
                .context("recording the deployment's window size")?;
            let size: i64 = sqlx::query_scalar(crate::shared::WINDOW_SIZE)
                .fetch_one(&self.pool)
                .await
                .context("reading the deployment's window size")?;
            self.window_size.set(size);
            Ok(size)
        }

        async fn latest_window_ms(&self) -> Result<Option<i64>> {
            sqlx::query_scalar(crate::shared::LATEST_WINDOW_MS)
                .fetch_optional(&self.pool)
                .await
                .context("reading the newest window's length")
        }
    };
}
pub(crate) use shared_deployment;

macro_rules! shared_verdict_reads {
    () => {
        async fn topic_windows(&self, topic: &str, range: TimeRange) -> Result<Vec<WindowRow>> {
            self.topic_windows_capped(topic, range, crate::MAX_BUCKET_ROWS)
                .await
        }

        async fn windows_in_range(
            &self,
            range: TimeRange,
            after_topic: Option<&str>,
            topic_limit: u32,
        ) -> Result<WindowPage> {
            self.windows_in_range_capped(range, after_topic, topic_limit, crate::MAX_BUCKET_ROWS)
                .await
        }

        async fn window_offsets(&self, key: &WindowKey) -> Result<Vec<OffsetSpan>> {
            let rows: Vec<crate::db_rows::OffsetDb> = sqlx::query_as(Self::window_offsets_sql())
                .bind(&key.topic)
                .bind(&key.tier)
                .bind(&key.datacenter)
                .bind(key.window_start_ms)
                .fetch_all(&self.pool)
                .await
                .context("reading offset ranges of a window")?;
            Ok(rows.into_iter().map(Into::into).collect())
        }

        async fn window_offsets_of_all_tiers(
            &self,
            topic: &str,
            window_start_ms: i64,
            limit: u32,
        ) -> Result<Vec<(String, String, OffsetSpan)>> {
            let rows: Vec<(String, String, i32, i64, i64, Option<i64>)> =
                sqlx::query_as(Self::window_all_offsets_sql())
                    .bind(topic)
                    .bind(window_start_ms)
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await
                    .context("reading offset ranges of a window")?;
            Ok(rows
                .into_iter()
                .map(|(tier, datacenter, partition, min, max, max_record_time)| {
                    (
                        tier,
                        datacenter,
                        OffsetSpan {
                            partition,
                            min,
                            max,
                            max_record_time,
                        },
                    )
                })
                .collect())
        }

        async fn changed_windows(
            &self,
            since_ms: i64,
            from_window_ms: i64,
            limit: u32,
        ) -> Result<Vec<(String, i64)>> {
            sqlx::query_as(crate::shared::CHANGED_WINDOWS)
                .bind(since_ms)
                .bind(from_window_ms)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await
                .context("listing windows with late increments")
        }

        async fn progress(&self, topic: Option<&str>) -> Result<Vec<ProgressRow>> {
            let rows: Vec<crate::db_rows::ProgressDb> = sqlx::query_as(&crate::shared::PROGRESS)
                .bind(topic)
                .fetch_all(&self.pool)
                .await
                .context("reading progress")?;
            Ok(rows.into_iter().map(Into::into).collect())
        }

        async fn progress_since(
            &self,
            topic: Option<&str>,
            since_ms: i64,
            limit: u32,
        ) -> Result<Vec<ProgressRow>> {
            let rows: Vec<crate::db_rows::ProgressDb> =
                sqlx::query_as(crate::shared::PROGRESS_SINCE)
                    .bind(topic)
                    .bind(since_ms)
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await
                    .context("reading progress")?;
            Ok(rows.into_iter().map(Into::into).collect())
        }

        async fn progress_of_topics(
            &self,
            first_topic: &str,
            last_topic: &str,
            since_ms: i64,
            limit: u32,
        ) -> Result<Vec<ProgressRow>> {
            let rows: Vec<crate::db_rows::ProgressDb> =
                sqlx::query_as(crate::shared::PROGRESS_OF_TOPICS)
                    .bind(first_topic)
                    .bind(last_topic)
                    .bind(since_ms)
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await
                    .context("reading progress of a page of topics")?;
            Ok(rows.into_iter().map(Into::into).collect())
        }

        async fn auditor_reports(&self, limit: u32) -> Result<Vec<(String, String, String, i64)>> {
            self.auditor_reports_since(i64::MIN, limit).await
        }

        async fn auditor_reports_since(
            &self,
            since_ms: i64,
            limit: u32,
        ) -> Result<Vec<(String, String, String, i64)>> {
            sqlx::query_as(crate::shared::AUDITOR_REPORTS)
                .bind(since_ms)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await
                .context("reading auditors' last reports")
        }
    };
}
pub(crate) use shared_verdict_reads;

macro_rules! shared_inventory {
    () => {
        async fn window_keys(
            &self,
            from_ms: i64,
            to_ms: i64,
            limit: u32,
        ) -> Result<Vec<(String, i64)>> {
            let rows: Vec<(i64, String)> = sqlx::query_as(crate::shared::WINDOW_KEYS)
                .bind(from_ms)
                .bind(to_ms)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await
                .context("listing windows of a range")?;
            Ok(rows.into_iter().map(|(w, t)| (t, w)).collect())
        }

        async fn emitters(&self) -> Result<Vec<EmitterRow>> {
            let rows: Vec<crate::db_rows::EmitterDb> = sqlx::query_as(&crate::shared::EMITTERS)
                .fetch_all(&self.pool)
                .await
                .context("reading emitters")?;
            Ok(rows.into_iter().map(Into::into).collect())
        }

        async fn rejects(&self, limit: u32) -> Result<Vec<RejectRow>> {
            let rows: Vec<crate::db_rows::RejectDb> = sqlx::query_as(crate::shared::REJECTS)
                .bind(i64::from(limit).min(crate::MAX_READ_ROWS as i64))
                .fetch_all(&self.pool)
                .await
                .context("reading rejects")?;
            Ok(rows.into_iter().map(Into::into).collect())
        }
    };
}
pub(crate) use shared_inventory;

macro_rules! alert_ledger {
    () => {
        async fn open_alerts(&self, channel: &str) -> Result<Vec<(String, String)>> {
            sqlx::query_as(crate::shared::OPEN_ALERTS)
                .bind(channel)
                .fetch_all(&self.pool)
                .await
                .context("reading open alerts")
        }

        async fn save_open_alert(
            &self,
            channel: &str,
            dedup_key: &str,
            alert: &str,
            now_ms: i64,
        ) -> Result<()> {
            let _writer = self.lock_writer().await;
            sqlx::query(crate::shared::SAVE_OPEN_ALERT)
                .bind(channel)
                .bind(dedup_key)
                .bind(alert)
                .bind(now_ms)
                .execute(&self.pool)
                .await
                .context("recording an open alert")
                .map(drop)
        }

        async fn delete_open_alert(&self, channel: &str, dedup_key: &str) -> Result<()> {
            let _writer = self.lock_writer().await;
            sqlx::query(crate::shared::DELETE_OPEN_ALERT)
                .bind(channel)
                .bind(dedup_key)
                .execute(&self.pool)
                .await
                .context("forgetting a resolved alert")
                .map(drop)
        }
    };
}
pub(crate) use alert_ledger;

macro_rules! shared_forgetting {
    () => {
        async fn forget_progress(&self, received_before_ms: i64, batch_size: u32) -> Result<u64> {
            let _writer = self.lock_writer().await;
            Ok(sqlx::query(crate::shared::FORGET_PROGRESS)
                .bind(received_before_ms)
                .bind(i64::from(batch_size.max(1)))
                .execute(&self.pool)
                .await
                .context("deleting forgotten progress")?
                .rows_affected())
        }

        async fn forget_emitters(&self, received_before_ms: i64, batch_size: u32) -> Result<u64> {
            let _writer = self.lock_writer().await;
            Ok(sqlx::query(crate::shared::FORGET_EMITTERS)
                .bind(received_before_ms)
                .bind(i64::from(batch_size.max(1)))
                .execute(&self.pool)
                .await
                .context("deleting forgotten emitters")?
                .rows_affected())
        }

        async fn trim_rejects(&self, keep: u32, batch_size: u32) -> Result<u64> {
            let _writer = self.lock_writer().await;
            Ok(sqlx::query(crate::shared::TRIM_REJECTS)
                .bind(i64::from(keep))
                .bind(i64::from(batch_size.max(1)))
                .execute(&self.pool)
                .await
                .context("deleting the oldest rejects")?
                .rows_affected())
        }
    };
}
pub(crate) use shared_forgetting;

/// The inherent window reads whose body is the same on both backends.
macro_rules! shared_window_reads {
    () => {
        /// The deployment's window size as last read or fixed by this store, without
        /// asking the database (`None`: not known here yet).
        pub fn cached_window_size_ms(&self) -> Option<i64> {
            self.window_size.get()
        }

        /// After a committed batch: while no window size is known, the first
        /// increment the store accepted fixes it (the first writer wins; a failure is
        /// logged and the next batch tries again).
        async fn note_window_size(&self, batch: &Batch, outcome: &BatchOutcome) {
            if self.window_size.get().is_some() {
                return;
            }
            let Some(size) = crate::aggregate::first_window_ms(batch, outcome) else {
                return;
            };
            match self.fix_window_size_ms(size, "first increment", false).await {
                Ok(fixed) => tracing::info!(window_ms = fixed, "the deployment's window size is fixed by the first stored increment"),
                Err(e) => tracing::warn!(error = %e, "cannot record the window size; the next batch tries again"),
            }
        }

        /// [`VerdictReads::topic_windows`] with the bucket-row cap as a parameter (tests
        /// lower it).
        #[doc(hidden)]
        pub async fn topic_windows_capped(
            &self,
            topic: &str,
            range: TimeRange,
            max_bucket_rows: usize,
        ) -> Result<Vec<WindowRow>> {
            let rows: Vec<crate::db_rows::WindowDb> = sqlx::query_as(&crate::shared::TOPIC_WINDOWS)
                .bind(topic)
                .bind(range.start_ms)
                .bind(range.end_ms)
                .fetch_all(&self.pool)
                .await
                .context("reading windows of a topic")?;
            // (window id, key, value) rows of the topic's windows; one row past the cap
            // shows whether it was hit.
            let per_window = |sql: &str, what: &'static str| {
                let sql = format!("{sql} LIMIT {}", crate::db_rows::bucket_limit(max_bucket_rows));
                async move {
                    sqlx::query_as::<_, (i64, i32, i64)>(&sql)
                        .bind(topic)
                        .bind(range.start_ms)
                        .bind(range.end_ms)
                        .fetch_all(&self.pool)
                        .await
                        .context(what)
                }
            };
            let buckets = per_window(Self::TOPIC_BUCKETS, "reading latency buckets").await?;
            let record_times =
                per_window(Self::TOPIC_RECORD_TIMES, "reading record times of windows").await?;
            Ok(crate::db_rows::join_buckets_capped(
                rows,
                buckets,
                record_times,
                max_bucket_rows,
                topic,
                range,
            ))
        }

        /// The page of topics a [`VerdictReads::windows_in_range`] call reads, and the
        /// topic to continue after (`None`: last page).
        async fn range_topics(
            &self,
            range: TimeRange,
            after_topic: Option<&str>,
            topic_limit: u32,
        ) -> Result<(Vec<String>, Option<String>)> {
            let topics: Vec<String> = sqlx::query_scalar(crate::shared::RANGE_TOPICS)
                .bind(range.start_ms)
                .bind(range.end_ms)
                .bind(after_topic)
                .bind(i64::from(topic_limit.max(1)) + 1)
                .fetch_all(&self.pool)
                .await
                .context("listing topics of a range")?;
            Ok(crate::db_rows::page(topics, topic_limit))
        }
    };
}
pub(crate) use shared_window_reads;
