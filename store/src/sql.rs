//! SQL whose text is the same on both backends: SQLite accepts PostgreSQL's `$N`
//! placeholders with the same meaning (sqlx binds `$N` to the N-th argument), and
//! `CAST($1 AS TEXT)` replaces PostgreSQL's `$1::text`. One text per statement (a
//! `PG_` one where the bucket and offset tables differ); the method bodies that run
//! them are in shared.rs.

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

/// Per-partition latest record time (null when no increment carried one) and highest
/// offset of [`TOPIC_WINDOWS`]' rows (the upstream evidence of docs/design.md §6, rules 4
/// and 0), same binds; the caller appends the LIMIT. SQLite's; PostgreSQL's is
/// [`PG_TOPIC_RECORD_TIMES`].
pub(crate) const TOPIC_RECORD_TIMES: &str =
    "SELECT o.window_id, o.partition_id, o.max_record_time_ms, o.max_offset FROM audit_window_offset o
     JOIN audit_window w ON w.id = o.window_id
     WHERE w.topic = $1 AND w.window_start_ms >= $2 AND w.window_start_ms < $3
     ORDER BY o.window_id, o.partition_id";

pub(crate) const PG_TOPIC_RECORD_TIMES: &str =
    "SELECT window_id, partition_id, max_record_time_ms, max_offset FROM audit_window_offset
     WHERE topic = $1 AND window_start_ms >= $2 AND window_start_ms < $3
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

/// Uses the primary key (window_start_ms first).
pub(crate) const PROVEN_LOSSES: &str =
    "SELECT window_start_ms, topic, upstream, downstream, datacenter, reason, proven_at_ms
     FROM web_proven_loss WHERE window_start_ms >= $1
     ORDER BY window_start_ms, topic, upstream, downstream, datacenter LIMIT $2";

pub(crate) const SAVE_PROVEN_LOSS: &str = "INSERT INTO web_proven_loss
       (window_start_ms, topic, upstream, downstream, datacenter, reason, proven_at_ms)
     VALUES ($1, $2, $3, $4, $5, $6, $7)
     ON CONFLICT (window_start_ms, topic, upstream, downstream, datacenter) DO NOTHING";

/// One row by its primary key.
pub(crate) const WITHDRAW_PROVEN_LOSS: &str = "DELETE FROM web_proven_loss
     WHERE window_start_ms = $1 AND topic = $2 AND upstream = $3 AND downstream = $4
       AND datacenter = $5";

pub(crate) const FORGET_PROVEN_LOSSES: &str =
    "DELETE FROM web_proven_loss WHERE window_start_ms < $1";

pub(crate) const DELETE_OPEN_ALERT: &str =
    "DELETE FROM web_alert_open WHERE channel = $1 AND dedup_key = $2";
