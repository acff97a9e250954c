//! [`Store`]: a backend chosen at run time from its URL, dispatching every part of the
//! contract to it, so callers need no generics.

use crate::connection::{redact_url, StoreOptions};
use crate::contract::*;
use crate::domain::*;
use crate::error::{Result, StoreError};
use crate::pg::PgStore;
use crate::sqlite::SqliteStore;

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
    /// [`VerdictReads::topic_windows`] with the bucket-row cap as a parameter instead of
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

    /// [`VerdictReads::windows_in_range`] with the bucket-row cap as a parameter.
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

impl Deployment for Store {
    async fn migrate(&self) -> Result<()> {
        dispatch!(self, s => s.migrate().await)
    }
    async fn ping(&self) -> Result<()> {
        dispatch!(self, s => s.ping().await)
    }
    async fn window_size_ms(&self) -> Result<Option<i64>> {
        dispatch!(self, s => s.window_size_ms().await)
    }
    async fn fix_window_size_ms(&self, window_ms: i64, by: &str, replace: bool) -> Result<i64> {
        dispatch!(self, s => s.fix_window_size_ms(window_ms, by, replace).await)
    }
    async fn latest_window_ms(&self) -> Result<Option<i64>> {
        dispatch!(self, s => s.latest_window_ms().await)
    }
}

impl Ingest for Store {
    async fn write_batch(&self, batch: &Batch) -> Result<BatchOutcome> {
        dispatch!(self, s => s.write_batch(batch).await)
    }
    async fn stage_batch(&self, batch: &Batch) -> Result<BatchOutcome> {
        dispatch!(self, s => s.stage_batch(batch).await)
    }
    async fn rollup(&self, limit: u32) -> Result<u64> {
        dispatch!(self, s => s.rollup(limit).await)
    }
    async fn rollup_counted(&self, limit: u32) -> Result<RollupOutcome> {
        dispatch!(self, s => s.rollup_counted(limit).await)
    }
}

impl VerdictReads for Store {
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
    async fn window_offsets_of_all_tiers(
        &self,
        topic: &str,
        window_start_ms: i64,
        limit: u32,
    ) -> Result<Vec<(String, String, OffsetSpan)>> {
        dispatch!(self, s => s.window_offsets_of_all_tiers(topic, window_start_ms, limit).await)
    }
    async fn changed_windows(
        &self,
        since_ms: i64,
        from_window_ms: i64,
        limit: u32,
    ) -> Result<Vec<(String, i64)>> {
        dispatch!(self, s => s.changed_windows(since_ms, from_window_ms, limit).await)
    }
    async fn staged_windows(
        &self,
        topic: Option<&str>,
        from_window_ms: i64,
    ) -> Result<Vec<(String, String, String, i64)>> {
        dispatch!(self, s => s.staged_windows(topic, from_window_ms).await)
    }
    async fn progress(&self, topic: Option<&str>) -> Result<Vec<ProgressRow>> {
        dispatch!(self, s => s.progress(topic).await)
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
    async fn auditor_reports(&self, limit: u32) -> Result<Vec<(String, String, String, i64)>> {
        dispatch!(self, s => s.auditor_reports(limit).await)
    }
    async fn auditor_reports_since(
        &self,
        since_ms: i64,
        limit: u32,
    ) -> Result<Vec<(String, String, String, i64)>> {
        dispatch!(self, s => s.auditor_reports_since(since_ms, limit).await)
    }
}

impl Inventory for Store {
    async fn list_topics(&self) -> Result<Vec<String>> {
        dispatch!(self, s => s.list_topics().await)
    }
    async fn window_keys(
        &self,
        from_ms: i64,
        to_ms: i64,
        limit: u32,
    ) -> Result<Vec<(String, i64)>> {
        dispatch!(self, s => s.window_keys(from_ms, to_ms, limit).await)
    }
    async fn emitters(&self) -> Result<Vec<EmitterRow>> {
        dispatch!(self, s => s.emitters().await)
    }
    async fn rejects(&self, limit: u32) -> Result<Vec<RejectRow>> {
        dispatch!(self, s => s.rejects(limit).await)
    }
}

impl AlertLedger for Store {
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
    async fn proven_losses(&self, from_ms: i64, limit: u32) -> Result<Vec<ProvenLoss>> {
        dispatch!(self, s => s.proven_losses(from_ms, limit).await)
    }
    async fn save_proven_loss(&self, proof: &ProvenLoss, now_ms: i64) -> Result<()> {
        dispatch!(self, s => s.save_proven_loss(proof, now_ms).await)
    }
    async fn withdraw_proven_loss(&self, key: &ProvenLoss) -> Result<bool> {
        dispatch!(self, s => s.withdraw_proven_loss(key).await)
    }
    async fn forget_proven_losses(&self, window_start_ms: i64) -> Result<u64> {
        dispatch!(self, s => s.forget_proven_losses(window_start_ms).await)
    }
}

impl Upkeep for Store {
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
    async fn forget_progress(&self, received_before_ms: i64, batch_size: u32) -> Result<u64> {
        dispatch!(self, s => s.forget_progress(received_before_ms, batch_size).await)
    }
    async fn forget_emitters(&self, received_before_ms: i64, batch_size: u32) -> Result<u64> {
        dispatch!(self, s => s.forget_emitters(received_before_ms, batch_size).await)
    }
    async fn trim_rejects(&self, keep: u32, batch_size: u32) -> Result<u64> {
        dispatch!(self, s => s.trim_rejects(keep, batch_size).await)
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
