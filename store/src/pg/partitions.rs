//! Day partitions: created ahead of traffic one day per transaction, with writers of
//! traffic rows taking the preparations' turn shared so neither deadlocks the other.

use sqlx::{Postgres, Transaction};

use crate::error::{Context, Result};

use super::connect::{PgStore, DAY_MS};

/// The advisory lock of the day partitions' creation (the SQL function
/// `audit_ensure_day_partitions` takes it too): exclusive for a preparation, shared
/// for the writers of traffic rows.
macro_rules! partition_turn {
    () => {
        "hashtext('audit_ensure_day_partitions')"
    };
}

/// Partition upkeep, each day in a transaction of its own.
impl PgStore {
    /// [`crate::Upkeep::prepare_partitions`]: the days of `[from_ms, to_ms]`, one transaction
    /// each.
    pub(super) async fn prepare_days(&self, from_ms: i64, to_ms: i64) -> Result<u64> {
        // Hourly from the collector, and at every migration: a store distributed since
        // the connect is read routed from here on.
        self.learn_distribution().await?;
        // One day per transaction, the days traffic needs first (today and ahead, then
        // back from yesterday): the locks a day's creation takes are held for that day
        // only (on Citus a day of four tables takes about a second), and a day that
        // fails (its lock timeout) keeps neither the others nor ingestion waiting. The
        // next call retries it.
        let today = common::now_ms().div_euclid(DAY_MS) * DAY_MS;
        let (first, last) = (from_ms.div_euclid(DAY_MS), to_ms.div_euclid(DAY_MS));
        let days = (first..=last).map(|d| d * DAY_MS);
        let (back, ahead): (Vec<i64>, Vec<i64>) = days.partition(|&d| d < today);
        let mut created = 0;
        let mut failed = None;
        for day in ahead.into_iter().chain(back.into_iter().rev()) {
            match self.prepare_day(day).await {
                Ok(n) => created += n,
                Err(e) => {
                    tracing::warn!(day_ms = day, error = %e, "creating a day's partitions failed; the other days go on");
                    failed.get_or_insert(e);
                }
            }
        }
        match failed {
            None => Ok(created),
            Some(e) => Err(e),
        }
    }

    /// A transaction that writes traffic rows (a batch, a roll-up). It first takes the
    /// partition preparations' turn shared: creating a day locks the parent tables and
    /// moves that day's rows out of the default partitions, and a writer holding one
    /// of those tables while it waited for another deadlocked with it (PostgreSQL
    /// aborted the writer after its deadlock_timeout). Writers share the turn with
    /// each other; a day's creation waits for the writers in hand, and they for it.
    pub(super) async fn writing_transaction(&self) -> Result<Transaction<'static, Postgres>> {
        self.shared_turn("beginning a write transaction").await
    }

    /// A transaction of the reads a verdict rests on (serve's staged windows, window
    /// rows, their offsets and record times), with the turn taken shared as writers
    /// take it (security review 3, M1). A statement planned while a day's creation
    /// holds the default partitions (its `ATTACH`) waits for them with the partitions
    /// it knew before, then runs with a snapshot taken after the creation committed:
    /// the day's rows have left the default partition for a table the plan does not
    /// scan, and the read finds none of them (a staged increment read as absent, a
    /// window without its count). Under the turn every statement of the read is
    /// planned and run entirely before or entirely after a day's creation. On Citus the
    /// turn is the coordinator's (where the reads are planned), as for the writers.
    /// Ended by [`PgStore::end_read`]. The cost: three short round trips (BEGIN, the
    /// turn, COMMIT) and, while a day is created, the wait for it (a read waited for
    /// the default partition's lock before, and then missed the day's rows); a
    /// creation waits for the reads in hand, each bounded by the read caps.
    pub(super) async fn read_turn(&self) -> Result<Transaction<'static, Postgres>> {
        self.shared_turn("beginning a read").await
    }

    /// Ends a read begun by [`PgStore::read_turn`] (commits: it wrote nothing), letting
    /// a waiting day's creation go.
    pub(super) async fn end_read(tx: Transaction<'static, Postgres>) -> Result<()> {
        tx.commit().await.context("ending a read")
    }

    /// A transaction that has taken the partition turn shared.
    async fn shared_turn(&self, beginning: &'static str) -> Result<Transaction<'static, Postgres>> {
        let mut tx = self.pool.begin().await.context(beginning)?;
        sqlx::query(concat!(
            "SELECT pg_advisory_xact_lock_shared(",
            partition_turn!(),
            ")"
        ))
        .execute(&mut *tx)
        .await
        .context("waiting for a partition preparation")?;
        Ok(tx)
    }

    /// Creates the missing partitions of the UTC day starting at `day_ms`, in one
    /// transaction; how many.
    pub(super) async fn prepare_day(&self, day_ms: i64) -> Result<u64> {
        // Preparations take turns (the function's advisory lock, taken first so that
        // the lock timeout is not for the turn): `serve` migrating while the collector
        // prepares its range waits for it rather than failing to start.
        let mut tx = self.partition_turn_transaction().await?;
        let created: i32 = sqlx::query_scalar("SELECT audit_ensure_day_partitions($1, $1)")
            .bind(day_ms)
            .fetch_one(&mut *tx)
            .await
            .context("creating day partitions")?;
        tx.commit()
            .await
            .context("committing partition maintenance")?;
        Ok(created.max(0) as u64)
    }

    /// A maintenance transaction ([`PgStore::maintenance_transaction`]) that first takes
    /// the partition turn exclusively, as a day's creation does: the writers and
    /// roll-ups in hand finish first, and the next ones wait until it commits.
    pub(super) async fn partition_turn_transaction(
        &self,
    ) -> Result<Transaction<'static, Postgres>> {
        let mut tx = self
            .pool
            .begin()
            .await
            .context("beginning partition maintenance")?;
        // The turn first, so that the lock timeout below is not for the turn.
        sqlx::query(concat!(
            "SELECT pg_advisory_xact_lock(",
            partition_turn!(),
            ")"
        ))
        .execute(&mut *tx)
        .await
        .context("waiting for the partition turn")?;
        Self::limit_lock_waits(&mut tx).await?;
        Ok(tx)
    }

    /// A transaction whose statements wait at most [`MAINTENANCE_LOCK_TIMEOUT`] for a lock.
    pub(super) async fn maintenance_transaction(&self) -> Result<Transaction<'static, Postgres>> {
        let mut tx = self
            .pool
            .begin()
            .await
            .context("beginning a maintenance transaction")?;
        Self::limit_lock_waits(&mut tx).await?;
        Ok(tx)
    }

    /// Makes `tx`'s statements wait at most [`MAINTENANCE_LOCK_TIMEOUT`] for a lock.
    pub(super) async fn limit_lock_waits(tx: &mut Transaction<'static, Postgres>) -> Result<()> {
        for setting in MAINTENANCE_LOCK_TIMEOUT {
            sqlx::query(setting)
                .execute(&mut **tx)
                .await
                .context("setting a lock timeout")?;
        }
        Ok(())
    }
}

/// How long a maintenance step waits for a lock before it fails (and is retried at
/// the next pass). On Citus the setting must reach the workers too, where the shards'
/// rows are locked: `citus.propagate_set_commands` sends the transaction's `SET LOCAL`s
/// along (on plain PostgreSQL it is an unused placeholder setting).
pub(super) const MAINTENANCE_LOCK_TIMEOUT: [&str; 2] = [
    "SET LOCAL citus.propagate_set_commands = 'local'",
    "SET LOCAL lock_timeout = '5s'",
];
