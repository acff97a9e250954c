//! Reads of the evaluator beyond the store contract: which windows exist in a range and
//! which received increments recently. Plain SQL over the store's tables through the
//! pools the store exposes for this purpose.

use store::{Store, StoreError};

fn db(context: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| StoreError::Database { context, source }
}

/// `(topic, window_start_ms)` of the windows starting in `[from_ms, to_ms)`, at most
/// `limit`, ordered by window start then topic.
pub async fn window_keys(
    store: &Store,
    from_ms: i64,
    to_ms: i64,
    limit: u32,
) -> Result<Vec<(String, i64)>, StoreError> {
    let limit = i64::from(limit);
    match store {
        Store::Postgres(s) => sqlx::query_as(
            "SELECT DISTINCT window_start_ms, topic FROM audit_window
             WHERE window_start_ms >= $1 AND window_start_ms < $2
             ORDER BY window_start_ms, topic LIMIT $3",
        )
        .bind(from_ms)
        .bind(to_ms)
        .bind(limit)
        .fetch_all(s.pool())
        .await
        .map_err(db("listing windows of a range")),
        Store::Sqlite(s) => sqlx::query_as(
            "SELECT DISTINCT window_start_ms, topic FROM audit_window
             WHERE window_start_ms >= ? AND window_start_ms < ?
             ORDER BY window_start_ms, topic LIMIT ?",
        )
        .bind(from_ms)
        .bind(to_ms)
        .bind(limit)
        .fetch_all(s.pool())
        .await
        .map_err(db("listing windows of a range")),
    }
    .map(|rows: Vec<(i64, String)>| rows.into_iter().map(|(w, t)| (t, w)).collect())
}

/// `(topic, window_start_ms)` of windows starting at or after `from_window_ms` that
/// received an increment at or after `since_ms` (the collector's clock), at most `limit`.
pub async fn changed_windows(
    store: &Store,
    since_ms: i64,
    from_window_ms: i64,
    limit: u32,
) -> Result<Vec<(String, i64)>, StoreError> {
    let limit = i64::from(limit);
    match store {
        Store::Postgres(s) => sqlx::query_as(
            "SELECT DISTINCT topic, window_start_ms FROM audit_window
             WHERE last_received_at_ms >= $1 AND window_start_ms >= $2 LIMIT $3",
        )
        .bind(since_ms)
        .bind(from_window_ms)
        .bind(limit)
        .fetch_all(s.pool())
        .await
        .map_err(db("listing windows with late increments")),
        Store::Sqlite(s) => sqlx::query_as(
            "SELECT DISTINCT topic, window_start_ms FROM audit_window
             WHERE last_received_at_ms >= ? AND window_start_ms >= ? LIMIT ?",
        )
        .bind(since_ms)
        .bind(from_window_ms)
        .bind(limit)
        .fetch_all(s.pool())
        .await
        .map_err(db("listing windows with late increments")),
    }
}

/// Alerts a channel has delivered and not resolved: `(dedup_key, alert JSON)`.
pub async fn open_alerts(
    store: &Store,
    channel: &str,
) -> Result<Vec<(String, String)>, StoreError> {
    let sql_pg = "SELECT dedup_key, alert FROM web_alert_open WHERE channel = $1";
    let sql_lite = "SELECT dedup_key, alert FROM web_alert_open WHERE channel = ?";
    match store {
        Store::Postgres(s) => {
            sqlx::query_as(sql_pg)
                .bind(channel)
                .fetch_all(s.pool())
                .await
        }
        Store::Sqlite(s) => {
            sqlx::query_as(sql_lite)
                .bind(channel)
                .fetch_all(s.pool())
                .await
        }
    }
    .map_err(db("reading open alerts"))
}

/// Records a delivered trigger (replacing an earlier one of the same key).
pub async fn save_open_alert(
    store: &Store,
    channel: &str,
    dedup_key: &str,
    alert: &str,
    now_ms: i64,
) -> Result<(), StoreError> {
    let sql = "INSERT INTO web_alert_open (channel, dedup_key, alert, opened_at_ms)
               VALUES ($1, $2, $3, $4)
               ON CONFLICT (channel, dedup_key) DO UPDATE SET alert = excluded.alert";
    match store {
        Store::Postgres(s) => sqlx::query(sql)
            .bind(channel)
            .bind(dedup_key)
            .bind(alert)
            .bind(now_ms)
            .execute(s.pool())
            .await
            .map(|_| ()),
        // SQLite accepts `$N` placeholders with the same meaning.
        Store::Sqlite(s) => sqlx::query(sql)
            .bind(channel)
            .bind(dedup_key)
            .bind(alert)
            .bind(now_ms)
            .execute(s.pool())
            .await
            .map(|_| ()),
    }
    .map_err(db("recording an open alert"))
}

/// Forgets a resolved alert.
pub async fn delete_open_alert(
    store: &Store,
    channel: &str,
    dedup_key: &str,
) -> Result<(), StoreError> {
    let sql = "DELETE FROM web_alert_open WHERE channel = $1 AND dedup_key = $2";
    match store {
        Store::Postgres(s) => sqlx::query(sql)
            .bind(channel)
            .bind(dedup_key)
            .execute(s.pool())
            .await
            .map(|_| ()),
        Store::Sqlite(s) => sqlx::query(sql)
            .bind(channel)
            .bind(dedup_key)
            .execute(s.pool())
            .await
            .map(|_| ()),
    }
    .map_err(db("forgetting a resolved alert"))
}

/// When each auditor last reported: `(topic, tier, datacenter, max(received_at_ms))`
/// over all its partitions, at most `limit` auditors. One row per auditor rather than
/// per partition, so a topic with a hundred thousand (forged) partitions costs one
/// row and cannot push other auditors out of the read.
pub async fn auditor_reports(
    store: &Store,
    limit: u32,
) -> Result<Vec<(String, String, String, i64)>, StoreError> {
    let limit = i64::from(limit);
    const SQL: &str = "SELECT topic, tier, datacenter, max(received_at_ms) FROM audit_progress
         GROUP BY topic, tier, datacenter ORDER BY topic, tier, datacenter LIMIT ";
    match store {
        Store::Postgres(s) => sqlx::query_as(&format!("{SQL} $1"))
            .bind(limit)
            .fetch_all(s.pool())
            .await
            .map_err(db("reading auditors' last reports")),
        Store::Sqlite(s) => sqlx::query_as(&format!("{SQL} ?"))
            .bind(limit)
            .fetch_all(s.pool())
            .await
            .map_err(db("reading auditors' last reports")),
    }
}

/// `(topic, tier, datacenter, window_start_ms)` of the increments PostgreSQL has
/// staged (`audit_pending`) and not yet added to their window rows, for windows
/// starting at or after `from_window_ms` (and of `topic` only when given). SQLite
/// adds increments up as it stores them: none. Read it after the progress and
/// before the window rows, so that increments that came with the progress are in one
/// of the two.
pub async fn staged_windows(
    store: &Store,
    topic: Option<&str>,
    from_window_ms: i64,
) -> Result<Vec<(String, String, String, i64)>, StoreError> {
    let Store::Postgres(s) = store else {
        return Ok(Vec::new());
    };
    sqlx::query_as(
        "SELECT DISTINCT m.topic, m.tier, m.datacenter, m.window_start_ms
         FROM audit_pending p JOIN audit_message m ON m.uuid = p.uuid
         WHERE ($1::text IS NULL OR m.topic = $1) AND m.window_start_ms >= $2",
    )
    .bind(topic)
    .bind(from_window_ms)
    .fetch_all(s.pool())
    .await
    .map_err(db("reading staged increments"))
}
