//! The audit store: writes for the collector, reads for the web service.
//!
//! One contract, [`AuditStore`], two implementations: [`PgStore`] (PostgreSQL,
//! production) and [`SqliteStore`] (embedded default: a file path, nothing to install).
//! [`Store`] picks one from a URL and dispatches, so callers need no generics.
//!
//! Exactly-once: [`AuditStore::write_batch`] records every message's UUID and adds
//! only first-seen increments, in one transaction. A batch that fails changed nothing
//! and can be retried as a whole.
//!
//! The collector uses [`AuditStore::stage_batch`] instead: on PostgreSQL it stores
//! each first-seen message whole (one binary COPY) and queues its increment; the
//! collector's roll-up task ([`AuditStore::rollup`]) adds queued increments to their
//! window rows a moment later (normally well under a second behind). Readers of
//! window rows therefore see increments after the roll-up; progress, emitters and
//! rejects are written at staging time.
//!
//! Schema (migrations/postgres, migrations/sqlite): `audit_window` (one row per
//! topic, tier, datacenter, window; times in epoch ms; checksum is the u64 as bigint),
//! `audit_window_bucket` (window_id, bucket, count: merge with `sum(count) GROUP BY
//! bucket`), `audit_window_offset`, `audit_progress`, `audit_emitter`,
//! `audit_reject`, `audit_message` (every accepted UUID, the deduplication record),
//! `audit_pending` (PostgreSQL: increments staged, not yet rolled up), `audit_topic`
//! (PostgreSQL: the topics with windows),
//! `web_alert_open` (alerts web's channels delivered and have not resolved). No other
//! crate runs SQL on these tables: the pools are private to this crate.
//!
//! On PostgreSQL the tables that grow with traffic (`audit_window`, its buckets and
//! offsets, `audit_message`) are partitioned by day on a time from the message itself,
//! carry `topic` in every key (distributable with Citus), and retention drops whole
//! days ([`AuditStore::prepare_partitions`], [`AuditStore::retention`];
//! docs/operations.md).

mod aggregate;
mod model;
#[cfg(feature = "test-support")]
pub mod old_schema;
mod pg;
pub mod pgcopy;
mod rows;
mod shared;
mod sqlite;

use std::future::Future;

pub use model::*;
pub use pg::PgStore;
pub use sqlite::SqliteStore;

/// Errors of the store. Every database error is worth retrying (connection lost,
/// server restarting, serialization conflict) except [`StoreError::Invalid`].
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error while {context}: {source}")]
    Database {
        context: &'static str,
        #[source]
        source: sqlx::Error,
    },
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// `url` has its password masked ([`redact_url`]).
    #[error("invalid store url {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("invalid input: {0}")]
    Invalid(String),
    /// TLS with the server failed in a mode that requires it (`require`, `verify-ca`,
    /// `verify-full`): `host` is the URL's `host:port`, `mode` its `sslmode` as libpq
    /// spells it, `cause` what went wrong in words (docs/operations.md, "TLS to
    /// PostgreSQL"). Retried like any connection error: a server's certificate can
    /// be fixed while the process waits.
    #[error("TLS with PostgreSQL at {host} failed (sslmode={mode}): {cause}")]
    Tls {
        host: String,
        mode: &'static str,
        cause: String,
        #[source]
        source: sqlx::Error,
    },
}

impl StoreError {
    /// An error the data of the batch caused (validation, or a PostgreSQL data or
    /// integrity exception other than a unique violation): retrying the same batch
    /// cannot succeed, so the caller must set the offending message aside instead.
    pub fn is_data_error(&self) -> bool {
        match self {
            StoreError::Invalid(_) => true,
            StoreError::Database {
                source: sqlx::Error::Database(db),
                ..
            } => db.code().is_some_and(|code| {
                // 22: data exception; 23: integrity constraint violation (23505, a
                // concurrent writer of the same UUID, is retried by the store itself).
                code.starts_with("22") || (code.starts_with("23") && code != "23505")
            }),
            StoreError::Database {
                source:
                    sqlx::Error::Encode(_) | sqlx::Error::Decode(_) | sqlx::Error::ColumnDecode { .. },
                ..
            } => true,
            _ => false,
        }
    }
}

/// `old + new` for non-negative i64 columns, saturating at `i64::MAX`, in SQL that
/// PostgreSQL and SQLite evaluate alike (SQLite would turn an overflowing sum into a
/// REAL, PostgreSQL would fail the statement).
pub(crate) fn sat_add(old: &str, new: &str) -> String {
    format!(
        "CASE WHEN {old} > 9223372036854775807 - {new} THEN 9223372036854775807 ELSE {old} + {new} END"
    )
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// The URL with its password replaced by `***`, for errors and logs. The password is
/// everything between the first `:` after `scheme://` and the last `@`, so one with
/// un-encoded `@`, `#`, `/` or `?` is masked whole.
pub fn redact_url(url: &str) -> String {
    let Some(s) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[s + 3..];
    match rest.rfind('@') {
        Some(at) => match rest[..at].split_once(':') {
            Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &rest[at..]),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

pub(crate) trait Context<T> {
    fn context(self, context: &'static str) -> Result<T>;
}

impl<T> Context<T> for std::result::Result<T, sqlx::Error> {
    fn context(self, context: &'static str) -> Result<T> {
        self.map_err(|source| StoreError::Database { context, source })
    }
}

/// Upper bound on rows a read returns, so no query can load an unbounded range.
pub const MAX_READ_ROWS: usize = 100_000;

/// Upper bound on latency-bucket rows one window read loads (about 100 MB). Bucket
/// indexes run 0..=2300, so [`MAX_READ_ROWS`] windows could hold 230 M bucket rows;
/// an honest widest read (1 008 windows × 20 tier/datacenter pairs × ~100 buckets ≈
/// 2 M rows) stays well below this. Past it, the windows whose buckets were not all
/// read come back with an empty histogram (never a truncated one) and a warning is
/// logged.
pub const MAX_BUCKET_ROWS: usize = 4_000_000;

/// The store contract. Both implementations pass the same conformance suite
/// (`store/tests/conformance.rs`).
pub trait AuditStore: Send + Sync {
    /// Applies pending migrations.
    fn migrate(&self) -> impl Future<Output = Result<()>> + Send;

    /// Checks that the database answers.
    fn ping(&self) -> impl Future<Output = Result<()>> + Send;

    /// In one transaction: records each message's UUID (first seen wins), adds the
    /// first-seen increments to their window rows (counts, bytes, histogram buckets,
    /// wrapping checksum, offset ranges), keeps the latest progress per partition,
    /// updates emitters' last-seen times and stores the rejects. Messages must have
    /// passed [`validate_message`]; an invalid one fails the batch with
    /// [`StoreError::Invalid`].
    fn write_batch(&self, batch: &Batch) -> impl Future<Output = Result<BatchOutcome>> + Send;

    /// The collector's hot path: like [`AuditStore::write_batch`] (same outcomes, same
    /// exactly-once guarantee, one transaction), except that increments may reach
    /// their window rows only at a later [`AuditStore::rollup`]. PostgreSQL stores
    /// each message whole with one binary COPY and defers the roll-up; SQLite rolls up
    /// at once.
    fn stage_batch(&self, batch: &Batch) -> impl Future<Output = Result<BatchOutcome>> + Send;

    /// Adds up to `limit` staged increments to their windows, in one transaction;
    /// returns how many. Call until it returns 0 to catch up. Safe to run
    /// concurrently (each staged increment is taken by exactly one caller).
    fn rollup(&self, limit: u32) -> impl Future<Output = Result<u64>> + Send;

    /// All topics that have at least one window, sorted.
    fn list_topics(&self) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// Window rows of one topic whose start is in `range`, every tier and datacenter,
    /// ordered by (window_start, tier, datacenter), histograms included. At most
    /// [`MAX_READ_ROWS`] windows and [`MAX_BUCKET_ROWS`] bucket rows: windows past the
    /// bucket bound come back with no latency (logged), never a partial histogram.
    fn topic_windows(
        &self,
        topic: &str,
        range: TimeRange,
    ) -> impl Future<Output = Result<Vec<WindowRow>>> + Send;

    /// Window rows of every topic whose start is in `range`, for up to `topic_limit`
    /// topics after `after_topic` (exclusive), ordered by (topic, window_start, tier,
    /// datacenter), histograms included, bounded as [`AuditStore::topic_windows`].
    fn windows_in_range(
        &self,
        range: TimeRange,
        after_topic: Option<&str>,
        topic_limit: u32,
    ) -> impl Future<Output = Result<WindowPage>> + Send;

    /// Offset ranges behind one window row, by partition.
    fn window_offsets(
        &self,
        key: &WindowKey,
    ) -> impl Future<Output = Result<Vec<OffsetSpan>>> + Send;

    /// Latest progress per (topic, tier, datacenter, partition), optionally of one
    /// topic, ordered by (topic, tier, datacenter, partition).
    fn progress(
        &self,
        topic: Option<&str>,
    ) -> impl Future<Output = Result<Vec<ProgressRow>>> + Send;

    /// Latest progress per partition (of `topic`, or of every topic) received at or
    /// after `since_ms` (the collector's clock; older progress is forgotten by serve),
    /// ordered by (topic, tier, datacenter, partition), at most `limit` rows: the
    /// horizon applies before the bound, so forgotten rows cannot push others out.
    /// Ask for one row more than kept to see whether the bound was reached.
    fn progress_since(
        &self,
        topic: Option<&str>,
        since_ms: i64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<ProgressRow>>> + Send;

    /// Every emitter with its last-seen times, ordered by (tier, datacenter, host).
    fn emitters(&self) -> impl Future<Output = Result<Vec<EmitterRow>>> + Send;

    /// The newest `limit` rejects, newest first.
    fn rejects(&self, limit: u32) -> impl Future<Output = Result<Vec<RejectRow>>> + Send;

    /// `(topic, window_start_ms)` of the windows starting in `[from_ms, to_ms)`, once
    /// per topic and window whatever the tiers and datacenters, ordered by window
    /// start then topic, at most `limit`.
    fn window_keys(
        &self,
        from_ms: i64,
        to_ms: i64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<(String, i64)>>> + Send;

    /// `(topic, window_start_ms)` of the windows starting at or after `from_window_ms`
    /// that received an increment at or after `since_ms` (the collector's clock), once
    /// per topic and window, at most `limit`, in no particular order.
    fn changed_windows(
        &self,
        since_ms: i64,
        from_window_ms: i64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<(String, i64)>>> + Send;

    /// When each auditor last reported: `(topic, tier, datacenter,
    /// max(received_at_ms))` over all its partitions, ordered, at most `limit`
    /// auditors. One row per auditor rather than per partition, so a topic with a
    /// hundred thousand (forged) partitions costs one row and cannot push other
    /// auditors out of the read.
    fn auditor_reports(
        &self,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<(String, String, String, i64)>>> + Send;

    /// [`AuditStore::progress_since`] of the topics from `first_topic` to `last_topic`
    /// (inclusive): a page of topics in one read.
    fn progress_of_topics(
        &self,
        first_topic: &str,
        last_topic: &str,
        since_ms: i64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<ProgressRow>>> + Send;

    /// [`AuditStore::auditor_reports`] of the auditors that reported at or after
    /// `since_ms` (serve's forget horizon, applied before the bound).
    fn auditor_reports_since(
        &self,
        since_ms: i64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<(String, String, String, i64)>>> + Send;

    /// Offset ranges of every tier and datacenter of `topic`'s window starting at
    /// `window_start_ms`, as `(tier, datacenter, span)` ordered by tier, datacenter
    /// and partition, at most `limit`: one query for a window however many tiers and
    /// datacenters have rows in it.
    fn window_offsets_of_all_tiers(
        &self,
        topic: &str,
        window_start_ms: i64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<(String, String, OffsetSpan)>>> + Send;

    /// The deployment's window size (ms) as recorded by [`AuditStore::fix_window_size_ms`],
    /// `None` before anything recorded one.
    fn window_size_ms(&self) -> impl Future<Output = Result<Option<i64>>> + Send;

    /// Records `window_ms` as the deployment's window size when none is recorded
    /// yet, or, with `replace` (the size comes from configuration), whatever is
    /// recorded; `by` says who fixed it. Returns the size recorded afterwards: with
    /// several collectors the first one wins.
    fn fix_window_size_ms(
        &self,
        window_ms: i64,
        by: &str,
        replace: bool,
    ) -> impl Future<Output = Result<i64>> + Send;

    /// Deletes at most `batch_size` progress rows last received before
    /// `received_before_ms`; call again while it deletes something. A row refreshed
    /// meanwhile stays.
    fn forget_progress(
        &self,
        received_before_ms: i64,
        batch_size: u32,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Deletes at most `batch_size` emitters last heard from before
    /// `received_before_ms`.
    fn forget_emitters(
        &self,
        received_before_ms: i64,
        batch_size: u32,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Deletes at most `batch_size` of the oldest rejects beyond the newest `keep`.
    fn trim_rejects(&self, keep: u32, batch_size: u32) -> impl Future<Output = Result<u64>> + Send;

    /// `(topic, tier, datacenter, window_start_ms)` of the increments staged and not
    /// yet added to their window rows, for windows starting at or after
    /// `from_window_ms` (and of `topic` only when given). Only PostgreSQL stages;
    /// SQLite adds increments up as it stores them and returns none. Read it after
    /// the progress and before the window rows, so that increments that came with the
    /// progress are in one of the two.
    fn staged_windows(
        &self,
        topic: Option<&str>,
        from_window_ms: i64,
    ) -> impl Future<Output = Result<Vec<(String, String, String, i64)>>> + Send;

    /// The length (ms) of the stored window that starts last (of the longest when
    /// several start then), `None` when no window is stored. serve learns the
    /// deployment's window size from it when `[topology] window` is not set: the
    /// auditors' `audit.event_time.window_size` is the one source of truth.
    fn latest_window_ms(&self) -> impl Future<Output = Result<Option<i64>>> + Send;

    /// Alerts a channel has delivered and not resolved: `(dedup_key, alert JSON)`.
    fn open_alerts(
        &self,
        channel: &str,
    ) -> impl Future<Output = Result<Vec<(String, String)>>> + Send;

    /// Records a delivered alert of a channel, replacing an earlier one of the same key.
    fn save_open_alert(
        &self,
        channel: &str,
        dedup_key: &str,
        alert: &str,
        now_ms: i64,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Forgets a resolved alert (none open under that key: nothing to do).
    fn delete_open_alert(
        &self,
        channel: &str,
        dedup_key: &str,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Creates the time partitions (PostgreSQL: one per UTC day of each table that
    /// grows with traffic) covering `[from_ms, to_ms]` that do not exist yet, moving
    /// into them any rows the default partition holds for their days; returns how many
    /// it created. The collector calls it at start and periodically, for the days from
    /// its retention cutoff to a week ahead. SQLite is not partitioned: nothing to do.
    fn prepare_partitions(
        &self,
        from_ms: i64,
        to_ms: i64,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Deletes at most `batch_size` windows whose start is before `window_cutoff_ms`
    /// (with their buckets and offsets), at most `batch_size` message UUIDs and rejects
    /// received before `message_cutoff_ms`. Short transactions: call again while it
    /// deletes something. UUIDs must be kept longer than any message can be replayed.
    ///
    /// PostgreSQL first drops every day partition whose whole day is before its cutoff
    /// (`partitions` in the outcome; a UUID's day is its window start, or a progress
    /// report's emission time), so rows of the day holding the cutoff stay until that
    /// day is past; the batches then apply to the default partitions and rejects.
    fn retention(
        &self,
        window_cutoff_ms: i64,
        message_cutoff_ms: i64,
        batch_size: u32,
    ) -> impl Future<Output = Result<RetentionOutcome>> + Send;
}

/// Connection settings beyond the URL.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Most connections the pool opens (PostgreSQL; SQLite uses a few readers).
    pub max_connections: u32,
    /// How long getting a connection may take, reconnecting included. While the
    /// database is down a write fails after this long, and the caller's retry and
    /// backoff take over.
    pub acquire_timeout: std::time::Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            max_connections: 8,
            acquire_timeout: std::time::Duration::from_secs(5),
        }
    }
}

/// A store chosen at run time from its URL.
#[derive(Clone, Debug)]
pub enum Store {
    Postgres(PgStore),
    Sqlite(SqliteStore),
}

impl Store {
    /// `postgres://...` / `postgresql://...` → PostgreSQL; `sqlite:PATH` or a plain
    /// file path → SQLite (the file is created if missing).
    pub async fn connect(url: &str) -> Result<Store> {
        Self::connect_with(url, &StoreOptions::default()).await
    }

    /// [`Store::connect`] with explicit [`StoreOptions`].
    pub async fn connect_with(url: &str, options: &StoreOptions) -> Result<Store> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Store::Postgres(PgStore::connect_with(url, options).await?))
        } else if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            Ok(Store::Sqlite(SqliteStore::open(path).await?))
        } else if url.contains("://") {
            Err(StoreError::Url {
                url: redact_url(url),
                reason: "expected postgres://, postgresql://, sqlite: or a file path".into(),
            })
        } else {
            Ok(Store::Sqlite(SqliteStore::open(url).await?))
        }
    }

    /// `"postgres"` or `"sqlite"`, for logs.
    pub fn backend(&self) -> &'static str {
        match self {
            Store::Postgres(_) => "postgres",
            Store::Sqlite(_) => "sqlite",
        }
    }
}

macro_rules! dispatch {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            Store::Postgres($s) => $e,
            Store::Sqlite($s) => $e,
        }
    };
}

impl Store {
    /// [`AuditStore::topic_windows`] with the bucket-row cap as a parameter instead of
    /// [`MAX_BUCKET_ROWS`], so tests can reach it without seeding millions of rows.
    #[doc(hidden)]
    pub async fn topic_windows_capped(
        &self,
        topic: &str,
        range: TimeRange,
        max_bucket_rows: usize,
    ) -> Result<Vec<WindowRow>> {
        dispatch!(self, s => s.topic_windows_capped(topic, range, max_bucket_rows).await)
    }

    /// The deployment's window size as this store last read, fixed or saw fixed by a
    /// write, without asking the database (`None`: not known here yet).
    pub fn cached_window_size_ms(&self) -> Option<i64> {
        dispatch!(self, s => s.cached_window_size_ms())
    }

    /// [`AuditStore::windows_in_range`] with the bucket-row cap as a parameter.
    #[doc(hidden)]
    pub async fn windows_in_range_capped(
        &self,
        range: TimeRange,
        after_topic: Option<&str>,
        topic_limit: u32,
        max_bucket_rows: usize,
    ) -> Result<WindowPage> {
        dispatch!(self, s => s
            .windows_in_range_capped(range, after_topic, topic_limit, max_bucket_rows)
            .await)
    }
}

impl AuditStore for Store {
    async fn migrate(&self) -> Result<()> {
        dispatch!(self, s => s.migrate().await)
    }
    async fn ping(&self) -> Result<()> {
        dispatch!(self, s => s.ping().await)
    }
    async fn write_batch(&self, batch: &Batch) -> Result<BatchOutcome> {
        dispatch!(self, s => s.write_batch(batch).await)
    }
    async fn stage_batch(&self, batch: &Batch) -> Result<BatchOutcome> {
        dispatch!(self, s => s.stage_batch(batch).await)
    }
    async fn rollup(&self, limit: u32) -> Result<u64> {
        dispatch!(self, s => s.rollup(limit).await)
    }
    async fn list_topics(&self) -> Result<Vec<String>> {
        dispatch!(self, s => s.list_topics().await)
    }
    async fn topic_windows(&self, topic: &str, range: TimeRange) -> Result<Vec<WindowRow>> {
        dispatch!(self, s => s.topic_windows(topic, range).await)
    }
    async fn windows_in_range(
        &self,
        range: TimeRange,
        after_topic: Option<&str>,
        topic_limit: u32,
    ) -> Result<WindowPage> {
        dispatch!(self, s => s.windows_in_range(range, after_topic, topic_limit).await)
    }
    async fn window_offsets(&self, key: &WindowKey) -> Result<Vec<OffsetSpan>> {
        dispatch!(self, s => s.window_offsets(key).await)
    }
    async fn progress(&self, topic: Option<&str>) -> Result<Vec<ProgressRow>> {
        dispatch!(self, s => s.progress(topic).await)
    }
    async fn emitters(&self) -> Result<Vec<EmitterRow>> {
        dispatch!(self, s => s.emitters().await)
    }
    async fn rejects(&self, limit: u32) -> Result<Vec<RejectRow>> {
        dispatch!(self, s => s.rejects(limit).await)
    }
    async fn window_keys(
        &self,
        from_ms: i64,
        to_ms: i64,
        limit: u32,
    ) -> Result<Vec<(String, i64)>> {
        dispatch!(self, s => s.window_keys(from_ms, to_ms, limit).await)
    }
    async fn changed_windows(
        &self,
        since_ms: i64,
        from_window_ms: i64,
        limit: u32,
    ) -> Result<Vec<(String, i64)>> {
        dispatch!(self, s => s.changed_windows(since_ms, from_window_ms, limit).await)
    }
    async fn auditor_reports(&self, limit: u32) -> Result<Vec<(String, String, String, i64)>> {
        dispatch!(self, s => s.auditor_reports(limit).await)
    }
    async fn staged_windows(
        &self,
        topic: Option<&str>,
        from_window_ms: i64,
    ) -> Result<Vec<(String, String, String, i64)>> {
        dispatch!(self, s => s.staged_windows(topic, from_window_ms).await)
    }
    async fn progress_since(
        &self,
        topic: Option<&str>,
        since_ms: i64,
        limit: u32,
    ) -> Result<Vec<ProgressRow>> {
        dispatch!(self, s => s.progress_since(topic, since_ms, limit).await)
    }
    async fn progress_of_topics(
        &self,
        first_topic: &str,
        last_topic: &str,
        since_ms: i64,
        limit: u32,
    ) -> Result<Vec<ProgressRow>> {
        dispatch!(self, s => s.progress_of_topics(first_topic, last_topic, since_ms, limit).await)
    }
    async fn auditor_reports_since(
        &self,
        since_ms: i64,
        limit: u32,
    ) -> Result<Vec<(String, String, String, i64)>> {
        dispatch!(self, s => s.auditor_reports_since(since_ms, limit).await)
    }
    async fn window_offsets_of_all_tiers(
        &self,
        topic: &str,
        window_start_ms: i64,
        limit: u32,
    ) -> Result<Vec<(String, String, OffsetSpan)>> {
        dispatch!(self, s => s.window_offsets_of_all_tiers(topic, window_start_ms, limit).await)
    }
    async fn window_size_ms(&self) -> Result<Option<i64>> {
        dispatch!(self, s => s.window_size_ms().await)
    }
    async fn fix_window_size_ms(&self, window_ms: i64, by: &str, replace: bool) -> Result<i64> {
        dispatch!(self, s => s.fix_window_size_ms(window_ms, by, replace).await)
    }
    async fn forget_progress(&self, received_before_ms: i64, batch_size: u32) -> Result<u64> {
        dispatch!(self, s => s.forget_progress(received_before_ms, batch_size).await)
    }
    async fn forget_emitters(&self, received_before_ms: i64, batch_size: u32) -> Result<u64> {
        dispatch!(self, s => s.forget_emitters(received_before_ms, batch_size).await)
    }
    async fn trim_rejects(&self, keep: u32, batch_size: u32) -> Result<u64> {
        dispatch!(self, s => s.trim_rejects(keep, batch_size).await)
    }
    async fn latest_window_ms(&self) -> Result<Option<i64>> {
        dispatch!(self, s => s.latest_window_ms().await)
    }
    async fn open_alerts(&self, channel: &str) -> Result<Vec<(String, String)>> {
        dispatch!(self, s => s.open_alerts(channel).await)
    }
    async fn save_open_alert(
        &self,
        channel: &str,
        dedup_key: &str,
        alert: &str,
        now_ms: i64,
    ) -> Result<()> {
        dispatch!(self, s => s.save_open_alert(channel, dedup_key, alert, now_ms).await)
    }
    async fn delete_open_alert(&self, channel: &str, dedup_key: &str) -> Result<()> {
        dispatch!(self, s => s.delete_open_alert(channel, dedup_key).await)
    }
    async fn prepare_partitions(&self, from_ms: i64, to_ms: i64) -> Result<u64> {
        dispatch!(self, s => s.prepare_partitions(from_ms, to_ms).await)
    }
    async fn retention(
        &self,
        window_cutoff_ms: i64,
        message_cutoff_ms: i64,
        batch_size: u32,
    ) -> Result<RetentionOutcome> {
        dispatch!(self, s => s.retention(window_cutoff_ms, message_cutoff_ms, batch_size).await)
    }
}

#[cfg(test)]
mod url_tests {
    use super::*;

    /// A generated password with `#`, `/` or `?` left un-encoded makes the URL
    /// unparsable; the error (printed by `main`, logged by the collector) must not
    /// carry the password.
    #[tokio::test]
    async fn a_bad_url_error_masks_the_password() {
        for url in [
            "postgres://kafka_audit:s3cr#t/pw?x@db:5432/audit",
            "postgresql://kafka_audit:s3cr#t@db:notaport/audit",
            "mysql://kafka_audit:s3cr#t@db/audit",
        ] {
            let Err(e) = Store::connect(url).await else {
                panic!("{url} connected")
            };
            let text = format!("{e} {e:?}");
            assert!(!text.contains("s3cr"), "{text}");
            assert!(text.contains("kafka_audit:***@db"), "{text}");
        }
    }

    #[test]
    fn redact_keeps_what_helps_and_hides_the_password() {
        assert_eq!(
            redact_url("postgres://u:p@ss@h:5432/db?sslmode=verify-full"),
            "postgres://u:***@h:5432/db?sslmode=verify-full"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("sqlite:/var/lib/a.db"), "sqlite:/var/lib/a.db");
    }
}
