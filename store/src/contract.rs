//! The store contract, split by client: [`Deployment`] (everyone), [`Ingest`] (the
//! collector's writes), [`VerdictReads`] (serve's evaluator and API), [`Inventory`]
//! (listings for operators and tests), [`AlertLedger`] (web's alert channels) and
//! [`Upkeep`] (the collector's partitions and retention). [`AuditStore`] is all of
//! them: both backends implement every part and pass the same conformance suite
//! (`store/tests/it/conformance.rs`). A client names the part it uses.

use std::future::Future;

use crate::domain::*;
use crate::error::Result;

/// Upper bound on rows a read returns, so no query can load an unbounded range.
pub const MAX_READ_ROWS: usize = 100_000;

/// Upper bound on latency-bucket rows one window read loads (about 100 MB). Bucket
/// indexes run 0..=2300, so [`MAX_READ_ROWS`] windows could hold 230 M bucket rows;
/// an honest widest read (1 008 windows × 20 tier/datacenter pairs × ~100 buckets ≈
/// 2 M rows) stays well below this. Past it, the windows whose buckets were not all
/// read come back with an empty histogram (never a truncated one) and a warning is
/// logged.
pub const MAX_BUCKET_ROWS: usize = 4_000_000;

/// What every client of the store needs: the schema, liveness, and the deployment's
/// window size (the collector fixes it, serve reads it).
pub trait Deployment: Send + Sync {
    /// Applies pending migrations.
    fn migrate(&self) -> impl Future<Output = Result<()>> + Send;

    /// Checks that the database answers.
    fn ping(&self) -> impl Future<Output = Result<()>> + Send;

    /// The deployment's window size (ms) as recorded by [`Deployment::fix_window_size_ms`],
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

    /// The length (ms) of the stored window that starts last (of the longest when
    /// several start then), `None` when no window is stored. serve learns the
    /// deployment's window size from it when `[topology] window` is not set: the
    /// auditors' `audit.event_time.window_size` is the one source of truth.
    fn latest_window_ms(&self) -> impl Future<Output = Result<Option<i64>>> + Send;
}

/// The collector's writes: batches in, staged increments rolled up into their windows.
pub trait Ingest: Send + Sync {
    /// In one transaction: records each message's UUID (first seen wins), adds the
    /// first-seen increments to their window rows (counts, bytes, histogram buckets,
    /// wrapping checksum, offset ranges), keeps the latest progress per partition,
    /// updates emitters' last-seen times and stores the rejects. Messages must have
    /// passed [`crate::validate_message`]; an invalid one fails the batch with
    /// [`crate::StoreError::Invalid`].
    fn write_batch(&self, batch: &Batch) -> impl Future<Output = Result<BatchOutcome>> + Send;

    /// The collector's hot path: like [`Ingest::write_batch`] (same outcomes, same
    /// exactly-once guarantee, one transaction), except that increments may reach
    /// their window rows only at a later [`Ingest::rollup`]. PostgreSQL stores
    /// each message whole with one binary COPY and defers the roll-up; SQLite rolls up
    /// at once.
    fn stage_batch(&self, batch: &Batch) -> impl Future<Output = Result<BatchOutcome>> + Send;

    /// Adds up to `limit` staged increments to their windows, in one transaction;
    /// returns how many. Call until it returns 0 to catch up. Safe to run
    /// concurrently (each staged increment is taken by exactly one caller).
    fn rollup(&self, limit: u32) -> impl Future<Output = Result<u64>> + Send;

    /// [`Ingest::rollup`], saying how many of the increments taken had no staged
    /// message to add ([`RollupOutcome::missing`], each kept as a reject).
    fn rollup_counted(&self, limit: u32) -> impl Future<Output = Result<RollupOutcome>> + Send;
}

/// What serve's evaluator and API judge from: window rows, their offset ranges, the
/// increments not yet rolled up, and the auditors' progress.
pub trait VerdictReads: Send + Sync {
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
    /// datacenter), histograms included, bounded as [`VerdictReads::topic_windows`].
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

    /// `(topic, window_start_ms)` of the windows starting at or after `from_window_ms`
    /// that received an increment at or after `since_ms` (the collector's clock), once
    /// per topic and window, at most `limit`, in no particular order.
    fn changed_windows(
        &self,
        since_ms: i64,
        from_window_ms: i64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<(String, i64)>>> + Send;

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

    /// [`VerdictReads::progress_since`] of the topics from `first_topic` to `last_topic`
    /// (inclusive): a page of topics in one read.
    fn progress_of_topics(
        &self,
        first_topic: &str,
        last_topic: &str,
        since_ms: i64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<ProgressRow>>> + Send;

    /// When each auditor last reported: `(topic, tier, datacenter,
    /// max(received_at_ms))` over all its partitions, ordered, at most `limit`
    /// auditors. One row per auditor rather than per partition, so a topic with a
    /// hundred thousand (forged) partitions costs one row and cannot push other
    /// auditors out of the read.
    fn auditor_reports(
        &self,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<(String, String, String, i64)>>> + Send;

    /// [`VerdictReads::auditor_reports`] of the auditors that reported at or after
    /// `since_ms` (serve's forget horizon, applied before the bound).
    fn auditor_reports_since(
        &self,
        since_ms: i64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<(String, String, String, i64)>>> + Send;
}

/// What the store holds, listed for operators and tests: topics, windows, emitters
/// and rejects. No verdict depends on these reads.
pub trait Inventory: Send + Sync {
    /// All topics that have at least one window, sorted.
    fn list_topics(&self) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// `(topic, window_start_ms)` of the windows starting in `[from_ms, to_ms)`, once
    /// per topic and window whatever the tiers and datacenters, ordered by window
    /// start then topic, at most `limit`.
    fn window_keys(
        &self,
        from_ms: i64,
        to_ms: i64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<(String, i64)>>> + Send;

    /// Every emitter with its last-seen times, ordered by (tier, datacenter, host).
    fn emitters(&self) -> impl Future<Output = Result<Vec<EmitterRow>>> + Send;

    /// The newest `limit` rejects, newest first.
    fn rejects(&self, limit: u32) -> impl Future<Output = Result<Vec<RejectRow>>> + Send;
}

/// web's alert channels' ledger: the alerts delivered and not yet resolved, so a
/// restart neither pages again nor forgets to resolve.
pub trait AlertLedger: Send + Sync {
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

    /// Losses proven before their window was final (docs/design.md §6, rule 0), of
    /// windows starting at `from_ms` or later, at most `limit`, by window start.
    fn proven_losses(
        &self,
        from_ms: i64,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<ProvenLoss>>> + Send;

    /// Records a window's proof; a window keeps its first one.
    fn save_proven_loss(
        &self,
        proof: &ProvenLoss,
        now_ms: i64,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Withdraws one window's proof (an operator found its evidence wrong: docs/design.md
    /// §6, the proven-loss hold); whether there was one. `key` is read from a
    /// [`ProvenLoss`] (its reason and time are not compared).
    fn withdraw_proven_loss(&self, key: &ProvenLoss) -> impl Future<Output = Result<bool>> + Send;

    /// Forgets the proofs of windows starting before `window_start_ms`; how many.
    fn forget_proven_losses(
        &self,
        window_start_ms: i64,
    ) -> impl Future<Output = Result<u64>> + Send;
}

/// The collector's upkeep: partitions ahead of traffic, retention behind it, and
/// forgetting what no longer reports.
pub trait Upkeep: Send + Sync {
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
}

/// The whole contract: every part, for callers that use several (tests, the demo) and
/// as the bound a backend must meet.
pub trait AuditStore:
    Deployment + Ingest + VerdictReads + Inventory + AlertLedger + Upkeep
{
}

impl<T: Deployment + Ingest + VerdictReads + Inventory + AlertLedger + Upkeep> AuditStore for T {}
