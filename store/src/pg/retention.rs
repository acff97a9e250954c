//! [`Upkeep`]: whole day partitions dropped behind the retention, then short batches
//! of deletes in the default partitions, each step alone.

use crate::contract::*;
use crate::domain::*;
use crate::error::{Context, Result};

use super::connect::{PgStore, DAY_MS};

impl Upkeep for PgStore {
    async fn prepare_partitions(&self, from_ms: i64, to_ms: i64) -> Result<u64> {
        self.prepare_days(from_ms, to_ms).await
    }

    async fn retention(
        &self,
        window_cutoff_ms: i64,
        message_cutoff_ms: i64,
        batch_size: u32,
    ) -> Result<RetentionOutcome> {
        let limit = i64::from(batch_size.max(1));
        // Each step is its own transaction and none depends on another: one that
        // fails (a lock timeout, a statement the database refuses) is logged and
        // counted, and the others still delete what they should.
        let mut outcome = RetentionOutcome::default();
        let mut step = |name: &'static str, result: Result<u64>| match result {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(step = name, error = %e, "retention step failed; the others ran");
                outcome.failed_steps += 1;
                0
            }
        };
        let partitions = step(
            "dropping day partitions",
            self.drop_old_days(window_cutoff_ms, message_cutoff_ms)
                .await,
        );
        step(
            "forgetting topics without windows",
            self.forget_old_topics(window_cutoff_ms).await,
        );
        let windows = step(
            "deleting old windows",
            self.delete_old_default_windows(window_cutoff_ms, limit)
                .await,
        );
        let messages = step(
            "deleting old message UUIDs",
            self.delete_old_default_messages(message_cutoff_ms, limit)
                .await,
        );
        let rejects = step(
            "deleting old rejects",
            self.delete_old_rejects(message_cutoff_ms, limit).await,
        );
        outcome.partitions = partitions;
        outcome.windows = windows;
        outcome.messages = messages;
        outcome.rejects = rejects;
        Ok(outcome)
    }

    crate::shared::shared_forgetting!();
}

/// Partition upkeep and the steps of [`Upkeep::retention`], each in a transaction
/// of its own. No `FOR UPDATE` on the tables that Citus distributes (it refuses row
/// locks in a multi-shard query): a step waits at most `MAINTENANCE_LOCK_TIMEOUT` (partitions.rs)
/// for rows an ingesting transaction holds and otherwise fails alone, to be retried at
/// the next pass. The old rows retention deletes are rarely written (late data older
/// than the retention), so waiting is rare.
impl PgStore {
    /// Whole days: a `DROP TABLE` per partition, no row-by-row delete. Dropping a
    /// partition waits for the transactions using its table; with the lock timeout
    /// ingestion never queues behind it for long, and a pass that times out leaves
    /// the days to the next one.
    ///
    /// The staged keys of the days whose messages go (the whole days before the
    /// message cutoff) leave the roll-up queue in the same transaction, with the
    /// partition turn taken exclusively (partitions.rs): no writer or roll-up runs
    /// between, so a roll-up never finds a queued key whose message retention deleted,
    /// and a key without its message is always an error to report (staging.rs).
    pub(super) async fn drop_old_days(
        &self,
        window_cutoff_ms: i64,
        message_cutoff_ms: i64,
    ) -> Result<u64> {
        let mut tx = self.partition_turn_transaction().await?;
        let unqueued = sqlx::query("DELETE FROM audit_pending WHERE partition_ms < $1")
            .bind(message_cutoff_ms.div_euclid(DAY_MS) * DAY_MS)
            .execute(&mut *tx)
            .await
            .context("taking the staged keys of deleted days off the queue")?
            .rows_affected();
        if unqueued > 0 {
            tracing::warn!(
                unqueued,
                "retention: staged increments older than the message retention were never rolled up; dropped with their days"
            );
        }
        let partitions: i32 = sqlx::query_scalar("SELECT audit_drop_day_partitions($1, $2)")
            .bind(window_cutoff_ms)
            .bind(message_cutoff_ms)
            .fetch_one(&mut *tx)
            .await
            .context("dropping day partitions")?;
        tx.commit().await.context("committing dropped partitions")?;
        Ok(partitions.max(0) as u64)
    }

    /// Topics whose newest window is a day older than the cutoff have no window left
    /// in a day partition (and the default partition's go with the windows below).
    pub(super) async fn forget_old_topics(&self, window_cutoff_ms: i64) -> Result<u64> {
        let mut tx = self.maintenance_transaction().await?;
        let n = sqlx::query("DELETE FROM audit_topic WHERE last_window_start_ms < $1")
            .bind(window_cutoff_ms.saturating_sub(DAY_MS))
            .execute(&mut *tx)
            .await
            .context("forgetting topics without windows")?
            .rows_affected();
        tx.commit().await.context("committing forgotten topics")?;
        Ok(n)
    }

    /// Up to `limit` windows of the default partition (times no day partition
    /// covered) older than the cutoff, with their buckets and offsets.
    pub(super) async fn delete_old_default_windows(
        &self,
        window_cutoff_ms: i64,
        limit: i64,
    ) -> Result<u64> {
        let mut tx = self.maintenance_transaction().await?;
        let windows: i64 = sqlx::query_scalar(
            "WITH doomed AS (
                 SELECT topic, window_start_ms, id FROM audit_window_default
                 WHERE window_start_ms < $1
                 ORDER BY window_start_ms LIMIT $2),
             w AS (DELETE FROM audit_window_default
                   WHERE (topic, window_start_ms, id) IN (SELECT * FROM doomed)
                   RETURNING topic, window_start_ms, id),
             b AS (DELETE FROM audit_window_bucket_default
                   WHERE (topic, window_start_ms, window_id) IN (SELECT * FROM w)),
             o AS (DELETE FROM audit_window_offset_default
                   WHERE (topic, window_start_ms, window_id) IN (SELECT * FROM w))
             SELECT count(*) FROM w",
        )
        .bind(window_cutoff_ms)
        .bind(limit)
        .fetch_one(&mut *tx)
        .await
        .context("deleting old windows")?;
        tx.commit().await.context("committing deleted windows")?;
        Ok(windows.max(0) as u64)
    }

    /// Up to `limit` message UUIDs of the default partition older than the cutoff.
    pub(super) async fn delete_old_default_messages(
        &self,
        message_cutoff_ms: i64,
        limit: i64,
    ) -> Result<u64> {
        let mut tx = self.maintenance_transaction().await?;
        let deleted: Vec<(uuid::Uuid, String, i64)> = sqlx::query_as(
            "DELETE FROM audit_message_default WHERE (uuid, topic, partition_ms) IN (
                 SELECT uuid, topic, partition_ms FROM audit_message_default
                 WHERE partition_ms < $1 LIMIT $2)
             RETURNING uuid, topic, partition_ms",
        )
        .bind(message_cutoff_ms)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await
        .context("deleting old message UUIDs")?;
        // Their keys still queued for roll-up go with them (see `drop_old_days`). A
        // roll-up that took one first holds it: this waits, and finds it gone.
        let (uuids, (topics, days)): (Vec<_>, (Vec<_>, Vec<_>)) = deleted
            .iter()
            .map(|(u, t, d)| (*u, (t.as_str(), *d)))
            .unzip();
        if !uuids.is_empty() {
            sqlx::query(
                "DELETE FROM audit_pending WHERE (uuid, topic, partition_ms) IN (
                     SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::int8[]))",
            )
            .bind(&uuids)
            .bind(&topics)
            .bind(&days)
            .execute(&mut *tx)
            .await
            .context("taking the staged keys of deleted messages off the queue")?;
        }
        tx.commit().await.context("committing deleted UUIDs")?;
        Ok(deleted.len() as u64)
    }

    /// Up to `limit` rejects received before the cutoff. `audit_reject` stays a local
    /// table under Citus too, so rows an ingesting transaction holds are skipped.
    pub(super) async fn delete_old_rejects(
        &self,
        message_cutoff_ms: i64,
        limit: i64,
    ) -> Result<u64> {
        let n = sqlx::query(
            "DELETE FROM audit_reject WHERE id IN (
                 SELECT id FROM audit_reject WHERE received_at_ms < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
        )
        .bind(message_cutoff_ms)
        .bind(limit)
        .execute(&self.pool)
        .await
        .context("deleting old rejects")?
        .rows_affected();
        Ok(n)
    }
}
