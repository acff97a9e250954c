//! Method bodies that are the same on both backends, one macro per part of the
//! contract ([`shared_deployment!`], [`shared_verdict_reads!`], [`shared_inventory!`],
//! [`alert_ledger!`], [`shared_forgetting!`], expanded in the impls of that part in
//! pg/ and sqlite.rs) or [`shared_window_reads!`] (in their inherent impls); their SQL
//! is in sql.rs. Writes of the ingest path, staging, roll-up, retention and
//! `list_topics` really differ and stay per backend.

/// The methods whose body is the same on both backends, one macro per part of the
/// contract (expanded in that part's impl in pg/ and sqlite.rs), for a store with a
/// `pool` field, a `lock_writer` method (SQLite's one writer at a time; nothing on
/// PostgreSQL), `read_turn` / `end_read` around the reads a verdict rests on (on
/// PostgreSQL a transaction holding the partition turn, pg/partitions.rs; a pooled
/// connection on SQLite) and a `ReadConn` type (the connection `read_turn` derefs to),
/// the backend's `*_capped` window reads and its
/// `TOPIC_BUCKETS` / `window_offsets_sql()` (the bucket and offset tables differ). The
/// SQL is in sql.rs; the database row types in db_rows.rs.
macro_rules! shared_deployment {
    () => {
        async fn window_size_ms(&self) -> Result<Option<i64>> {
            let size: Option<i64> = sqlx::query_scalar(crate::sql::WINDOW_SIZE)
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
            sqlx::query(crate::sql::FIX_WINDOW_SIZE)
                .bind(window_ms)
                .bind(common::now_ms())
                .bind(by)
                .bind(replace)
                .execute(&self.pool)
                .await
                .context("recording the deployment's window size")?;
            let size: i64 = sqlx::query_scalar(crate::sql::WINDOW_SIZE)
                .fetch_one(&self.pool)
                .await
                .context("reading the deployment's window size")?;
            self.window_size.set(size);
            Ok(size)
        }

        async fn latest_window_ms(&self) -> Result<Option<i64>> {
            sqlx::query_scalar(crate::sql::LATEST_WINDOW_MS)
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
            self.topic_windows_capped(topic, range, crate::contract::MAX_BUCKET_ROWS)
                .await
        }

        async fn windows_in_range(
            &self,
            range: TimeRange,
            after_topic: Option<&str>,
            topic_limit: u32,
        ) -> Result<WindowPage> {
            self.windows_in_range_capped(
                range,
                after_topic,
                topic_limit,
                crate::contract::MAX_BUCKET_ROWS,
            )
            .await
        }

        async fn window_offsets(&self, key: &WindowKey) -> Result<Vec<OffsetSpan>> {
            let mut read = self.read_turn().await?;
            let rows: Vec<crate::db_rows::OffsetDb> = sqlx::query_as(Self::window_offsets_sql())
                .bind(&key.topic)
                .bind(&key.tier)
                .bind(&key.datacenter)
                .bind(key.window_start_ms)
                .fetch_all(&mut *read)
                .await
                .context("reading offset ranges of a window")?;
            Self::end_read(read).await?;
            Ok(rows.into_iter().map(Into::into).collect())
        }

        async fn window_offsets_of_all_tiers(
            &self,
            topic: &str,
            window_start_ms: i64,
            limit: u32,
        ) -> Result<Vec<(String, String, OffsetSpan)>> {
            let mut read = self.read_turn().await?;
            let rows: Vec<(String, String, i32, i64, i64, Option<i64>)> =
                sqlx::query_as(Self::window_all_offsets_sql())
                    .bind(topic)
                    .bind(window_start_ms)
                    .bind(i64::from(limit))
                    .fetch_all(&mut *read)
                    .await
                    .context("reading offset ranges of a window")?;
            Self::end_read(read).await?;
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
            let mut read = self.read_turn().await?;
            let changed = sqlx::query_as(crate::sql::CHANGED_WINDOWS)
                .bind(since_ms)
                .bind(from_window_ms)
                .bind(i64::from(limit))
                .fetch_all(&mut *read)
                .await
                .context("listing windows with late increments")?;
            Self::end_read(read).await?;
            Ok(changed)
        }

        async fn progress(&self, topic: Option<&str>) -> Result<Vec<ProgressRow>> {
            let rows: Vec<crate::db_rows::ProgressDb> = sqlx::query_as(&crate::sql::PROGRESS)
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
            let rows: Vec<crate::db_rows::ProgressDb> = sqlx::query_as(crate::sql::PROGRESS_SINCE)
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
                sqlx::query_as(crate::sql::PROGRESS_OF_TOPICS)
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
            sqlx::query_as(crate::sql::AUDITOR_REPORTS)
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
            let rows: Vec<(i64, String)> = sqlx::query_as(crate::sql::WINDOW_KEYS)
                .bind(from_ms)
                .bind(to_ms)
                .bind(i64::from(limit))
                .fetch_all(&self.pool)
                .await
                .context("listing windows of a range")?;
            Ok(rows.into_iter().map(|(w, t)| (t, w)).collect())
        }

        async fn emitters(&self) -> Result<Vec<EmitterRow>> {
            let rows: Vec<crate::db_rows::EmitterDb> = sqlx::query_as(&crate::sql::EMITTERS)
                .fetch_all(&self.pool)
                .await
                .context("reading emitters")?;
            Ok(rows.into_iter().map(Into::into).collect())
        }

        async fn rejects(&self, limit: u32) -> Result<Vec<RejectRow>> {
            let rows: Vec<crate::db_rows::RejectDb> = sqlx::query_as(crate::sql::REJECTS)
                .bind(i64::from(limit).min(crate::contract::MAX_READ_ROWS as i64))
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
            sqlx::query_as(crate::sql::OPEN_ALERTS)
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
            sqlx::query(crate::sql::SAVE_OPEN_ALERT)
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
            sqlx::query(crate::sql::DELETE_OPEN_ALERT)
                .bind(channel)
                .bind(dedup_key)
                .execute(&self.pool)
                .await
                .context("forgetting a resolved alert")
                .map(drop)
        }

        async fn proven_losses(&self, from_ms: i64, limit: u32) -> Result<Vec<crate::ProvenLoss>> {
            let rows: Vec<(i64, String, String, String, String, String, i64)> =
                sqlx::query_as(crate::sql::PROVEN_LOSSES)
                    .bind(from_ms)
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await
                    .context("reading proven losses")?;
            Ok(rows
                .into_iter()
                .map(
                    |(window_start_ms, topic, upstream, downstream, datacenter, reason, at)| {
                        crate::ProvenLoss {
                            window_start_ms,
                            topic,
                            upstream,
                            downstream,
                            datacenter,
                            reason,
                            proven_at_ms: at,
                        }
                    },
                )
                .collect())
        }

        async fn save_proven_loss(&self, proof: &crate::ProvenLoss, now_ms: i64) -> Result<()> {
            let _writer = self.lock_writer().await;
            sqlx::query(crate::sql::SAVE_PROVEN_LOSS)
                .bind(proof.window_start_ms)
                .bind(&proof.topic)
                .bind(&proof.upstream)
                .bind(&proof.downstream)
                .bind(&proof.datacenter)
                .bind(&proof.reason)
                .bind(now_ms)
                .execute(&self.pool)
                .await
                .context("recording a proven loss")
                .map(drop)
        }

        async fn withdraw_proven_loss(&self, key: &crate::ProvenLoss) -> Result<bool> {
            let _writer = self.lock_writer().await;
            sqlx::query(crate::sql::WITHDRAW_PROVEN_LOSS)
                .bind(key.window_start_ms)
                .bind(&key.topic)
                .bind(&key.upstream)
                .bind(&key.downstream)
                .bind(&key.datacenter)
                .execute(&self.pool)
                .await
                .context("withdrawing a proven loss")
                .map(|r| r.rows_affected() > 0)
        }

        async fn forget_proven_losses(&self, window_start_ms: i64) -> Result<u64> {
            let _writer = self.lock_writer().await;
            sqlx::query(crate::sql::FORGET_PROVEN_LOSSES)
                .bind(window_start_ms)
                .execute(&self.pool)
                .await
                .context("forgetting proven losses")
                .map(|r| r.rows_affected())
        }
    };
}
pub(crate) use alert_ledger;

macro_rules! shared_forgetting {
    () => {
        async fn forget_progress(&self, received_before_ms: i64, batch_size: u32) -> Result<u64> {
            let _writer = self.lock_writer().await;
            Ok(sqlx::query(crate::sql::FORGET_PROGRESS)
                .bind(received_before_ms)
                .bind(i64::from(batch_size.max(1)))
                .execute(&self.pool)
                .await
                .context("deleting forgotten progress")?
                .rows_affected())
        }

        async fn forget_emitters(&self, received_before_ms: i64, batch_size: u32) -> Result<u64> {
            let _writer = self.lock_writer().await;
            Ok(sqlx::query(crate::sql::FORGET_EMITTERS)
                .bind(received_before_ms)
                .bind(i64::from(batch_size.max(1)))
                .execute(&self.pool)
                .await
                .context("deleting forgotten emitters")?
                .rows_affected())
        }

        async fn trim_rejects(&self, keep: u32, batch_size: u32) -> Result<u64> {
            let _writer = self.lock_writer().await;
            Ok(sqlx::query(crate::sql::TRIM_REJECTS)
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
        pub(crate) async fn note_window_size(&self, batch: &Batch, outcome: &BatchOutcome) {
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
            // The window rows, their buckets and record times under one turn of the
            // partitions ([`Self::read_turn`]).
            let mut read = self.read_turn().await?;
            let rows: Vec<crate::db_rows::WindowDb> = sqlx::query_as(&crate::sql::TOPIC_WINDOWS)
                .bind(topic)
                .bind(range.start_ms)
                .bind(range.end_ms)
                .fetch_all(&mut *read)
                .await
                .context("reading windows of a topic")?;
            // (window id, key, value) rows of the topic's windows; one row past the cap
            // shows whether it was hit.
            let limit = crate::db_rows::bucket_limit(max_bucket_rows);
            let buckets: Vec<(i64, i32, i64)> =
                sqlx::query_as(&format!("{} LIMIT {limit}", Self::TOPIC_BUCKETS))
                    .bind(topic)
                    .bind(range.start_ms)
                    .bind(range.end_ms)
                    .fetch_all(&mut *read)
                    .await
                    .context("reading latency buckets")?;
            let record_times: Vec<(i64, i32, Option<i64>, i64)> =
                sqlx::query_as(&format!("{} LIMIT {limit}", Self::TOPIC_RECORD_TIMES))
                    .bind(topic)
                    .bind(range.start_ms)
                    .bind(range.end_ms)
                    .fetch_all(&mut *read)
                    .await
                    .context("reading record times of windows")?;
            Self::end_read(read).await?;
            let record_times = crate::db_rows::partition_maxima(record_times);
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
        /// topic to continue after (`None`: last page), on `read` (`ReadConn`: the
        /// backend's connection, as its `read_turn` gives it).
        async fn range_topics(
            read: &mut ReadConn,
            range: TimeRange,
            after_topic: Option<&str>,
            topic_limit: u32,
        ) -> Result<(Vec<String>, Option<String>)> {
            let topics: Vec<String> = sqlx::query_scalar(crate::sql::RANGE_TOPICS)
                .bind(range.start_ms)
                .bind(range.end_ms)
                .bind(after_topic)
                .bind(i64::from(topic_limit.max(1)) + 1)
                .fetch_all(read)
                .await
                .context("listing topics of a range")?;
            Ok(crate::db_rows::page(topics, topic_limit))
        }
    };
}
pub(crate) use shared_window_reads;
