//! Reads: window rows with their histograms (bounded by the bucket cap), the staged
//! increments, topics; the rest of [`VerdictReads`] and [`Inventory`] is shared with
//! SQLite (shared.rs).

use crate::contract::*;
use crate::db_rows::WindowDb;
use crate::domain::*;
use crate::error::{Context, Result};

use super::connect::PgStore;

/// The connection the shared window reads run on: a transaction's, which holds the
/// partition turn ([`PgStore::read_turn`]).
type ReadConn = sqlx::PgConnection;

impl VerdictReads for PgStore {
    async fn staged_windows(
        &self,
        topic: Option<&str>,
        from_window_ms: i64,
    ) -> Result<Vec<(String, String, String, i64)>> {
        // Under the turn: a staged message read while its day is created would be
        // missed, and its window judged without the increment (rule 5 bypassed).
        let mut read = self.read_turn().await?;
        let staged = sqlx::query_as(self.message_reads().staged_windows())
            .bind(topic)
            .bind(from_window_ms)
            .fetch_all(&mut *read)
            .await
            .context("reading staged increments")?;
        Self::end_read(read).await?;
        Ok(staged)
    }

    crate::shared::shared_verdict_reads!();
}

impl Inventory for PgStore {
    async fn list_topics(&self) -> Result<Vec<String>> {
        // audit_topic, kept by the roll-up: a loose index scan of the partitioned
        // audit_window would descend every day partition once per topic.
        sqlx::query_scalar("SELECT topic FROM audit_topic ORDER BY topic")
            .fetch_all(&self.pool)
            .await
            .context("listing topics")
    }

    crate::shared::shared_inventory!();
}

impl PgStore {
    crate::shared::shared_window_reads!();

    const TOPIC_BUCKETS: &'static str = crate::sql::PG_TOPIC_BUCKETS;
    const TOPIC_RECORD_TIMES: &'static str = crate::sql::PG_TOPIC_RECORD_TIMES;

    pub(super) fn window_all_offsets_sql() -> &'static str {
        crate::sql::PG_WINDOW_ALL_OFFSETS
    }

    pub(super) fn window_offsets_sql() -> &'static str {
        &crate::sql::PG_WINDOW_OFFSETS
    }

    /// [`VerdictReads::windows_in_range`] with the bucket-row cap as a parameter (tests lower it).
    #[doc(hidden)]
    pub async fn windows_in_range_capped(
        &self,
        range: TimeRange,
        after_topic: Option<&str>,
        topic_limit: u32,
        max_bucket_rows: usize,
    ) -> Result<WindowPage> {
        // The topics, windows, buckets and record times under one turn of the
        // partitions ([`PgStore::read_turn`]).
        let mut read = self.read_turn().await?;
        let (topics, next_after_topic) =
            Self::range_topics(&mut read, range, after_topic, topic_limit).await?;
        let (Some(first), Some(last)) = (topics.first(), topics.last()) else {
            Self::end_read(read).await?;
            return Ok(WindowPage {
                rows: Vec::new(),
                next_after_topic,
            });
        };
        // The page's topics are exactly those with windows in range between first and
        // last, so bounds on topic select them (with the range of starts, one scan of
        // the index (window_start_ms, topic) per day partition). Binding the list
        // instead (`topic = ANY($1)`, and the buckets by `window_id = ANY(ids)`) gave
        // the prepared statement a generic plan of one probe per listed value: ~36 s
        // per hour of the 60 M store's horizon (bench/store-scale.sh). The rows come
        // unordered and are sorted here: ORDER BY spilled the page (~40 000 rows, 7 MB)
        // to disk past work_mem and took two thirds of the query's time. A read that
        // hits the row cap is read again in order, so that what it keeps is the oldest
        // windows, as before.
        let sql = |order: &str| {
            format!(
                "SELECT {} FROM audit_window
                 WHERE topic >= $1 AND topic <= $2 AND window_start_ms >= $3 AND window_start_ms < $4
                 {order} LIMIT {MAX_READ_ROWS}",
                crate::sql::WINDOW_COLUMNS
            )
        };
        let read_ordered = "ORDER BY topic, window_start_ms, tier, datacenter";
        let mut rows = Vec::new();
        for order in ["", read_ordered] {
            rows = sqlx::query_as::<_, WindowDb>(&sql(order))
                .bind(first)
                .bind(last)
                .bind(range.start_ms)
                .bind(range.end_ms)
                .fetch_all(&mut *read)
                .await
                .context("reading windows of a range")?;
            if rows.len() < MAX_READ_ROWS {
                break;
            }
        }
        if rows.len() < MAX_READ_ROWS {
            rows.sort_unstable_by(|a, b| {
                (&a.topic, a.window_start_ms, &a.tier, &a.datacenter).cmp(&(
                    &b.topic,
                    b.window_start_ms,
                    &b.tier,
                    &b.datacenter,
                ))
            });
        }
        // Buckets by the topics of the windows read (one index descent per topic into
        // the key (topic, window_start_ms, ...), then the range of starts): a bucket row
        // carries its window's topic and start, so these are the buckets of the windows
        // above, each once (buckets of windows written since are not joined). Bounds on
        // the topic instead would scan every start of the day partition per topic.
        // One row past the cap shows whether it was hit.
        // The bucket rows come as three arrays in one row: a row each cost serve more
        // to receive and decode than the window it belongs to (~14 % of serve's CPU in
        // a cold start). The LIMIT picks the same rows as before (in the subquery, after
        // its ORDER BY); the arrays keep that order in practice, and are sorted here if
        // they do not (the cap's cut needs them by window).
        let mut read_topics: Vec<&str> = rows.iter().map(|r| r.topic.as_str()).collect();
        read_topics.dedup();
        let sql = format!(
            "SELECT coalesce(array_agg(window_id), '{{}}'), coalesce(array_agg(bucket), '{{}}'),
                    coalesce(array_agg(count), '{{}}')
             FROM (SELECT window_id, bucket, count FROM audit_window_bucket
                   WHERE topic = ANY($1) AND window_start_ms >= $2 AND window_start_ms < $3
                     AND count IS NOT NULL
                   ORDER BY window_id, bucket LIMIT {}) x",
            crate::db_rows::bucket_limit(max_bucket_rows)
        );
        let (ids, keys, values): (Vec<i64>, Vec<i32>, Vec<i64>) = sqlx::query_as(&sql)
            .bind(&read_topics)
            .bind(range.start_ms)
            .bind(range.end_ms)
            .fetch_one(&mut *read)
            .await
            .context("reading latency buckets")?;
        let mut buckets: Vec<(i64, i32, i64)> = ids
            .into_iter()
            .zip(keys)
            .zip(values)
            .map(|((id, k), v)| (id, k, v))
            .collect();
        if !buckets.is_sorted_by_key(|b| (b.0, b.1)) {
            buckets.sort_unstable_by_key(|b| (b.0, b.1));
        }
        // The windows' per-partition latest record times and highest offsets, the same
        // way (the upstream evidence of docs/design.md §6, rules 4 and 0).
        let sql = format!(
            "SELECT coalesce(array_agg(window_id), '{{}}'), coalesce(array_agg(partition_id), '{{}}'),
                    coalesce(array_agg(max_record_time_ms), '{{}}'), coalesce(array_agg(max_offset), '{{}}')
             FROM (SELECT window_id, partition_id, max_record_time_ms, max_offset FROM audit_window_offset
                   WHERE topic = ANY($1) AND window_start_ms >= $2 AND window_start_ms < $3
                   ORDER BY window_id, partition_id LIMIT {}) x",
            crate::db_rows::bucket_limit(max_bucket_rows)
        );
        #[allow(clippy::type_complexity)]
        let (ids, partitions, times, offsets): (
            Vec<i64>,
            Vec<i32>,
            Vec<Option<i64>>,
            Vec<i64>,
        ) = sqlx::query_as(&sql)
            .bind(&read_topics)
            .bind(range.start_ms)
            .bind(range.end_ms)
            .fetch_one(&mut *read)
            .await
            .context("reading record times of windows")?;
        Self::end_read(read).await?;
        let mut record_times: Vec<(i64, i32, Option<i64>, i64)> = ids
            .into_iter()
            .zip(partitions)
            .zip(times)
            .zip(offsets)
            .map(|(((id, p), t), o)| (id, p, t, o))
            .collect();
        if !record_times.is_sorted_by_key(|b| (b.0, b.1)) {
            record_times.sort_unstable_by_key(|b| (b.0, b.1));
        }
        let record_times = crate::db_rows::partition_maxima(record_times);
        Ok(WindowPage {
            rows: crate::db_rows::join_buckets_capped(
                rows,
                buckets,
                record_times,
                max_bucket_rows,
                &crate::db_rows::topic_span(&topics),
                range,
            ),
            next_after_topic,
        })
    }
}
