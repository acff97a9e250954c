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
