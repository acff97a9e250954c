//! The collector's hot path: [`Ingest::stage_batch`] stores each first-seen message
//! whole (one binary COPY) after a deduplication probe, and [`Ingest::rollup`] adds
//! staged increments to their windows later, isolating one that cannot be added.

use std::collections::{HashMap, HashSet};

use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use crate::aggregate::{first_in_batch, Rollup};
use crate::contract::*;
use crate::domain::*;
use crate::error::{Context, Result, StoreError};
use crate::validate::sanitize_text;

use super::connect::PgStore;
use super::routing::MessageReads;

impl PgStore {
    pub(super) async fn stage_in(
        tx: &mut Transaction<'_, Postgres>,
        batch: &Batch,
        reads: MessageReads,
    ) -> Result<BatchOutcome> {
        let firsts = first_in_batch(batch)?;
        let received = batch.received_at_ms;
        let key = |m: &Message| (m.uuid, m.topic.clone(), crate::pgcopy::partition_ms(m));
        let known = Self::known_in(tx, batch, &firsts, reads).await?;
        let mut outcomes = vec![WriteOutcome::Duplicate; batch.messages.len()];
        let mut accepted = Vec::with_capacity(firsts.len());
        let mut pending = Vec::with_capacity(firsts.len());
        // `firsts` is sorted by UUID: concurrent writers insert in one order and wait
        // for each other instead of deadlocking.
        for &(_, index) in &firsts {
            let message = &batch.messages[index];
            if !known.contains(&key(message)) {
                outcomes[index] = WriteOutcome::Accepted;
                accepted.push(message);
                if matches!(message.body, AuditBody::Increment(_)) {
                    pending.push(key(message));
                }
            }
        }
        if !accepted.is_empty() {
            // A concurrent writer that stored one of these UUIDs after the probe makes
            // the COPY fail with a unique violation; the caller retries the batch.
            let data = crate::pgcopy::encode_messages(&accepted, received);
            let mut copy = tx
                .copy_in_raw(crate::pgcopy::COPY_MESSAGES)
                .await
                .context("starting COPY of messages")?;
            copy.send(data).await.context("sending COPY data")?;
            copy.finish().await.context("storing messages (COPY)")?;
        }
        if !pending.is_empty() {
            let (uuids, (topics, days)): (Vec<Uuid>, (Vec<String>, Vec<i64>)) =
                pending.into_iter().map(|(u, t, d)| (u, (t, d))).unzip();
            sqlx::query(
                "INSERT INTO audit_pending (uuid, topic, partition_ms)
                 SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::int8[])",
            )
            .bind(&uuids)
            .bind(&topics)
            .bind(&days)
            .execute(&mut **tx)
            .await
            .context("queueing increments for roll-up")?;
        }
        let rollup = Rollup::staged(accepted, received);
        Self::keep_progress(tx, &rollup, received).await?;
        Self::touch_emitters(tx, &rollup, received).await?;
        Self::store_rejects(tx, &batch.rejects, received).await?;
        Ok(BatchOutcome { outcomes })
    }

    /// Which of the batch's first-seen messages (`firsts`) are stored already, by key:
    /// index probes, far cheaper than ON CONFLICT per row, in the partitions of the
    /// batch's days only.
    pub(super) async fn known_in(
        tx: &mut Transaction<'_, Postgres>,
        batch: &Batch,
        firsts: &[(Uuid, usize)],
        reads: MessageReads,
    ) -> Result<HashSet<(Uuid, String, i64)>> {
        if firsts.is_empty() {
            return Ok(HashSet::new());
        }
        let uuids: Vec<Uuid> = firsts.iter().map(|f| f.0).collect();
        let topics: Vec<&str> = firsts
            .iter()
            .map(|&(_, i)| batch.messages[i].topic.as_str())
            .collect();
        let (lo, hi) = span(
            firsts
                .iter()
                .map(|&(_, i)| crate::pgcopy::partition_ms(&batch.messages[i])),
        );
        seqscan(tx, false).await?;
        let known = reads
            .bind_keys(
                sqlx::query_as::<_, (Uuid, String, i64)>(reads.probe()),
                &uuids,
                &topics,
            )
            .bind(lo)
            .bind(hi)
            .fetch_all(&mut **tx)
            .await
            .context("probing message UUIDs")?;
        seqscan(tx, true).await?;
        Ok(known.into_iter().collect())
    }

    /// The deduplication probe of `batch` alone, in a transaction of its own: how many
    /// of its messages are stored already (benchmarks; feature `test-support`).
    #[cfg(feature = "test-support")]
    pub async fn known_messages(&self, batch: &Batch) -> Result<usize> {
        let firsts = first_in_batch(batch)?;
        let mut tx = self.pool.begin().await.context("beginning a probe")?;
        let known = Self::known_in(&mut tx, batch, &firsts, self.message_reads()).await?;
        tx.rollback().await.context("ending a probe")?;
        Ok(known.len())
    }

    /// Takes up to `limit` staged increments off the queue (in this transaction) and
    /// reads them back.
    pub(super) async fn take_staged(
        tx: &mut Transaction<'_, Postgres>,
        limit: u32,
        reads: MessageReads,
    ) -> Result<Staged> {
        let taken: Vec<(Uuid, String, i64)> = sqlx::query_as(
            "DELETE FROM audit_pending WHERE ctid = ANY(ARRAY(
                 SELECT ctid FROM audit_pending LIMIT $1 FOR UPDATE SKIP LOCKED))
             RETURNING uuid, topic, partition_ms",
        )
        .bind(i64::from(limit.max(1)))
        .fetch_all(&mut **tx)
        .await
        .context("taking staged increments")?;
        if taken.is_empty() {
            return Ok(Staged::default());
        }
        let uuids: Vec<Uuid> = taken.iter().map(|t| t.0).collect();
        let topics: Vec<&str> = taken.iter().map(|t| t.1.as_str()).collect();
        let (lo, hi) = span(taken.iter().map(|t| t.2));
        seqscan(tx, false).await?;
        let rows: Vec<StagedDb> = reads
            .bind_keys(sqlx::query_as(reads.staged()), &uuids, &topics)
            .bind(lo)
            .bind(hi)
            .fetch_all(&mut **tx)
            .await
            .context("reading staged increments")?;
        seqscan(tx, true).await?;
        let mut rows: HashMap<(Uuid, String, i64), StagedDb> = rows
            .into_iter()
            .map(|r| ((r.uuid, r.topic.clone(), r.partition_ms), r))
            .collect();
        let mut staged = Staged {
            taken: taken.len() as u64,
            ..Staged::default()
        };
        // Retention takes the queued keys of the days it deletes off the queue in the
        // transaction that deletes them (retention.rs), so a key whose message is not
        // here was lost some other way (a partition moved or detached by hand, a shard
        // move, a read planned without the partition turn): never dropped silently.
        for key in taken {
            let problem = match rows.remove(&key).map(StagedDb::into_increment) {
                Some(Some(increment)) => {
                    staged.increments.push(increment);
                    continue;
                }
                Some(None) => "its staged message could not be read back as an increment",
                None => "its staged message was not found",
            };
            let (uuid, topic, partition_ms) = key;
            tracing::error!(%uuid, topic = %topic, partition_ms, problem,
                "roll-up: a staged increment has no message to add; kept as a reject");
            staged.missing.push(Reject {
                source: "rollup".into(),
                reason: format!(
                    "missing: {problem}; its counts are in no window (restore the \
                     audit_message row and queue its key in audit_pending again to add it)"
                ),
                payload: sanitize_text(
                    &format!("uuid {uuid} topic {topic:?} partition_ms {partition_ms}"),
                    4096,
                ),
            });
        }
        Ok(staged)
    }

    pub(super) async fn rollup_in(
        tx: &mut Transaction<'_, Postgres>,
        limit: u32,
        reads: MessageReads,
    ) -> Result<RollupOutcome> {
        let staged = Self::take_staged(tx, limit, reads).await?;
        let now = common::now_ms();
        if !staged.increments.is_empty() {
            let rollup = Rollup::of(&staged.increments, now);
            Self::add_windows(tx, &rollup, now).await?;
        }
        Self::store_rejects(tx, &staged.missing, now).await?;
        Ok(staged.outcome())
    }

    /// The roll-up after a data error: the increments are added by bisection, each
    /// part under its own savepoint; a part the database refuses is split in two until
    /// the one increment that causes it is found, which is taken off the queue and
    /// kept as a reject (source `rollup`) with the reason. The others go on, at a cost
    /// of about twice the work of a normal roll-up.
    pub(super) async fn rollup_isolating(
        tx: &mut Transaction<'_, Postgres>,
        limit: u32,
        reads: MessageReads,
    ) -> Result<RollupOutcome> {
        use sqlx::Acquire;
        let staged = Self::take_staged(tx, limit, reads).await?;
        let now = common::now_ms();
        let mut quarantined = Vec::new();
        let mut parts: Vec<&[Message]> = vec![&staged.increments];
        while let Some(part) = parts.pop() {
            if part.is_empty() {
                continue;
            }
            let mut savepoint = tx.begin().await.context("starting a savepoint")?;
            match Self::add_windows(&mut savepoint, &Rollup::of(part, now), now).await {
                Ok(()) => savepoint.commit().await.context("releasing a savepoint")?,
                Err(e) if e.is_data_error() => {
                    savepoint
                        .rollback()
                        .await
                        .context("rolling back to a savepoint")?;
                    if part.len() > 1 {
                        let (left, right) = part.split_at(part.len() / 2);
                        parts.push(right);
                        parts.push(left);
                        continue;
                    }
                    let i = &part[0];
                    if !matches!(i.body, AuditBody::Increment(_)) {
                        continue;
                    }
                    tracing::error!(uuid = %i.uuid, topic = %i.topic, error = %e,
                        "roll-up: the database refused an increment; quarantined as a reject");
                    quarantined.push(Reject {
                        source: "rollup".into(),
                        reason: format!("quarantined: the database refused this increment: {e}"),
                        payload: sanitize_text(&format!("{i:?}"), 4096),
                    });
                }
                Err(e) => return Err(e),
            }
        }
        Self::store_rejects(tx, &quarantined, now).await?;
        Self::store_rejects(tx, &staged.missing, now).await?;
        Ok(staged.outcome())
    }
}

/// Staged increments taken off the queue by one roll-up.
#[derive(Default)]
pub(super) struct Staged {
    /// How many keys were taken.
    taken: u64,
    /// The increments read back, to be added.
    increments: Vec<Message>,
    /// A reject for each key taken without a message to add.
    missing: Vec<Reject>,
}

impl Staged {
    fn outcome(&self) -> RollupOutcome {
        RollupOutcome {
            taken: self.taken,
            missing: self.missing.len() as u64,
        }
    }
}

#[derive(sqlx::FromRow)]
struct StagedDb {
    uuid: Uuid,
    topic: String,
    tier: String,
    datacenter: String,
    host: String,
    window_start_ms: Option<i64>,
    window_end_ms: Option<i64>,
    emitted_at_ms: i64,
    count: Option<i64>,
    bytes: Option<i64>,
    no_time_count: Option<i64>,
    malformed_count: Option<i64>,
    out_of_bounds_count: Option<i64>,
    observation_time_count: i64,
    delivery_failed_count: i64,
    checksum: Option<i64>,
    latency_zero_count: Option<i64>,
    latency_negative_count: Option<i64>,
    latency_max_ms: Option<i64>,
    bucket_index: Option<Vec<i32>>,
    bucket_count: Option<Vec<i64>>,
    offset_partition: Option<Vec<i32>>,
    offset_min: Option<Vec<i64>>,
    offset_max: Option<Vec<i64>>,
    partition_ms: i64,
    max_observed_at_ms: Option<i64>,
    /// NULL for messages staged before the column existed (and for partitions
    /// without one: NULL elements).
    offset_max_record_time: Option<Vec<Option<i64>>>,
}

impl StagedDb {
    pub(super) fn into_increment(self) -> Option<Message> {
        let u = |v: Option<i64>| v.and_then(|v| u64::try_from(v).ok());
        let buckets: Vec<(u32, u64)> = self
            .bucket_index?
            .into_iter()
            .zip(self.bucket_count?)
            .map(|(b, c)| Some((u32::try_from(b).ok()?, c.max(0) as u64)))
            .collect::<Option<_>>()?;
        let record_times = self.offset_max_record_time.unwrap_or_default();
        let offsets = self
            .offset_partition?
            .into_iter()
            .zip(self.offset_min?)
            .zip(self.offset_max?)
            .enumerate()
            .map(|(i, ((partition, min), max))| OffsetSpan {
                partition,
                min,
                max,
                max_record_time: record_times.get(i).copied().flatten(),
            })
            .collect();
        let latency = LatencyHistogram::from_buckets(
            u(self.latency_zero_count)?,
            u(self.latency_negative_count)?,
            self.latency_max_ms?,
            buckets,
        )
        .ok()?;
        Some(Message {
            version: audit_lib::AUDIT_MESSAGE_VERSION,
            uuid: self.uuid,
            topic: self.topic,
            tier: self.tier,
            datacenter: self.datacenter,
            host: self.host,
            emitted_at: self.emitted_at_ms,
            body: AuditBody::Increment(Increment {
                window_start: self.window_start_ms?,
                window_end: self.window_end_ms?,
                stats: WindowStats {
                    count: u(self.count)?,
                    bytes: u(self.bytes)?,
                    no_time_count: u(self.no_time_count)?,
                    malformed_count: u(self.malformed_count)?,
                    out_of_bounds_count: u(self.out_of_bounds_count)?,
                    observation_time_count: u(Some(self.observation_time_count))?,
                    delivery_failed_count: u(Some(self.delivery_failed_count))?,
                    checksum: audit_lib::Checksum(self.checksum? as u64),
                    latency,
                    offsets,
                    max_observed_at: self.max_observed_at_ms,
                },
            }),
        })
    }
}

/// The lowest and highest of `values` (an empty span, `(i64::MAX, i64::MIN)`, for none).
fn span(values: impl Iterator<Item = i64>) -> (i64, i64) {
    values.fold((i64::MAX, i64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)))
}

/// Turns sequential scans off (and back on) around lookups by UUID. `uuid =
/// ANY(thousands)` must use the primary key; right after a table was created or
/// truncated the planner's statistics say it is tiny and it picks a sequential scan
/// that compares every row with every UUID (measured: seconds per batch instead of
/// milliseconds). An error aborts the transaction, which resets the setting. On
/// Citus the shards are planned on the workers, which get the setting through
/// `citus.propagate_set_commands` (a placeholder setting on plain PostgreSQL).
async fn seqscan(tx: &mut Transaction<'_, Postgres>, on: bool) -> Result<()> {
    let statements: &[&str] = if on {
        &["SET LOCAL enable_seqscan = on"]
    } else {
        &[
            "SET LOCAL citus.propagate_set_commands = 'local'",
            "SET LOCAL enable_seqscan = off",
        ]
    };
    for statement in statements {
        sqlx::query(statement)
            .execute(&mut **tx)
            .await
            .context("planning a lookup by UUID")?;
    }
    Ok(())
}

fn is_unique_violation(e: &StoreError) -> bool {
    let StoreError::Database {
        source: sqlx::Error::Database(db),
        ..
    } = e
    else {
        return false;
    };
    match db.code().as_deref() {
        Some("23505") => true,
        // Citus re-raises a shard's error in a COPY without its SQLSTATE (XX000,
        // ReportCopyError in multi_copy.c), with PostgreSQL's text. A server whose
        // lc_messages is not English is not recognised here: the batch fails and the
        // collector's own retry stages it again.
        Some("XX000") => db
            .message()
            .starts_with("duplicate key value violates unique constraint"),
        _ => false,
    }
}

impl Ingest for PgStore {
    async fn write_batch(&self, batch: &Batch) -> Result<BatchOutcome> {
        let mut tx = self.writing_transaction().await?;
        let outcome = Self::write_in(&mut tx, batch).await?;
        tx.commit().await.context("committing a batch")?;
        self.note_window_size(batch, &outcome).await;
        Ok(outcome)
    }

    async fn stage_batch(&self, batch: &Batch) -> Result<BatchOutcome> {
        let mut attempt = 0;
        loop {
            let mut tx = self.writing_transaction().await?;
            match Self::stage_in(&mut tx, batch, self.message_reads()).await {
                Ok(outcome) => {
                    tx.commit().await.context("committing a batch")?;
                    self.note_window_size(batch, &outcome).await;
                    return Ok(outcome);
                }
                // Another writer stored one of these messages since the probe: the
                // next attempt sees it as a duplicate.
                Err(e) if is_unique_violation(&e) && attempt < 5 => {
                    attempt += 1;
                    tracing::debug!(
                        attempt,
                        "concurrent writer stored a message of this batch; retrying"
                    );
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn rollup(&self, limit: u32) -> Result<u64> {
        Ok(self.rollup_counted(limit).await?.taken)
    }

    async fn rollup_counted(&self, limit: u32) -> Result<RollupOutcome> {
        let mut tx = self.writing_transaction().await?;
        match Self::rollup_in(&mut tx, limit, self.message_reads()).await {
            Ok(n) => {
                tx.commit().await.context("committing a roll-up")?;
                Ok(n)
            }
            // Retrying would fail the same way forever (the same rows come back):
            // isolate the increment that causes it instead.
            Err(e) if e.is_data_error() => {
                // Roll back now, not on drop: sqlx sends a dropped transaction's
                // ROLLBACK only when its connection is next used, and until then the
                // rows taken stay locked, so the isolating pass below (on another
                // connection of the pool) would skip them all and roll up nothing.
                tx.rollback()
                    .await
                    .context("rolling back a failed roll-up")?;
                tracing::warn!(error = %e, "roll-up hit a data error; rolling up one increment at a time");
                let mut tx = self.writing_transaction().await?;
                let n = Self::rollup_isolating(&mut tx, limit, self.message_reads()).await?;
                tx.commit().await.context("committing a roll-up")?;
                Ok(n)
            }
            Err(e) => Err(e),
        }
    }
}
