//! The PostgreSQL schema before the day partitions (docs/operations.md, Layout), for
//! tests of the conversion migration in this crate and in web (feature `test-support`):
//! its migrations, and a filler that writes a store's contents with the old schema's SQL.

use sqlx::PgPool;

use crate::contract::*;
use crate::domain::*;
use crate::pg::PgStore;

async fn all_windows(store: &PgStore) -> Vec<WindowRow> {
    let mut rows = vec![];
    for topic in store.list_topics().await.unwrap() {
        rows.extend(
            store
                .topic_windows(&topic, TimeRange::new(0, i64::MAX / 2))
                .await
                .unwrap(),
        );
    }
    rows
}

/// Applies the migrations of the schema before the time partitions (copies embedded
/// from `store/tests/fixtures/postgres_v1`, so tests need no git history).
pub async fn migrate(pool: &PgPool) {
    static OLD: sqlx::migrate::Migrator = sqlx::migrate!("tests/fixtures/postgres_v1");
    OLD.run(pool).await.expect("old migrations apply");
}

/// Writes the rows `reference` holds (its window rows with buckets and offsets, the
/// UUIDs of `counted`, progress and emitters) into an old-schema store with the old
/// schema's SQL, and queues `staged` as the old collector left increments between
/// staging and roll-up.
pub async fn fill(pool: &PgPool, reference: &PgStore, counted: &[Message], staged: &[Message]) {
    for r in all_windows(reference).await {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO audit_window (topic, tier, datacenter, window_start_ms, window_end_ms,
                 count, bytes, no_time_count, malformed_count, out_of_bounds_count, checksum,
                 latency_zero_count, latency_negative_count, latency_max_ms, increments,
                 first_received_at_ms, last_received_at_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
             RETURNING id",
        )
        .bind(&r.topic)
        .bind(&r.tier)
        .bind(&r.datacenter)
        .bind(r.window_start_ms)
        .bind(r.window_end_ms)
        .bind(r.count as i64)
        .bind(r.bytes as i64)
        .bind(r.no_time_count as i64)
        .bind(r.malformed_count as i64)
        .bind(r.out_of_bounds_count as i64)
        .bind(r.checksum as i64)
        .bind(r.latency.zero_count() as i64)
        .bind(r.latency.negative_count() as i64)
        .bind(r.latency.max_ms())
        .bind(r.increments as i64)
        .bind(r.first_received_at_ms)
        .bind(r.last_received_at_ms)
        .fetch_one(pool)
        .await
        .unwrap();
        for (bucket, count) in r.latency.buckets() {
            sqlx::query(
                "INSERT INTO audit_window_bucket (window_id, bucket, count) VALUES ($1, $2, $3)",
            )
            .bind(id)
            .bind(bucket as i32)
            .bind(count as i64)
            .execute(pool)
            .await
            .unwrap();
        }
        for o in reference.window_offsets(&r.key()).await.unwrap() {
            sqlx::query(
                "INSERT INTO audit_window_offset (window_id, partition_id, min_offset, max_offset)
                 VALUES ($1, $2, $3, $4)",
            )
            .bind(id)
            .bind(o.partition)
            .bind(o.min)
            .bind(o.max)
            .execute(pool)
            .await
            .unwrap();
        }
    }
    for p in reference.progress(None).await.unwrap() {
        sqlx::query(
            "INSERT INTO audit_progress (topic, tier, datacenter, partition_id, host, next_offset,
                 record_time_ms, lag, emitted_at_ms, received_at_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(&p.topic)
        .bind(&p.tier)
        .bind(&p.datacenter)
        .bind(p.partition)
        .bind(&p.host)
        .bind(p.next_offset)
        .bind(p.record_time_ms)
        .bind(p.lag)
        .bind(p.emitted_at_ms)
        .bind(p.received_at_ms)
        .execute(pool)
        .await
        .unwrap();
    }
    for e in reference.emitters().await.unwrap() {
        sqlx::query(
            "INSERT INTO audit_emitter (tier, datacenter, host, last_emitted_at_ms,
                 last_received_at_ms, messages) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&e.tier)
        .bind(&e.datacenter)
        .bind(&e.host)
        .bind(e.last_emitted_at_ms)
        .bind(e.last_received_at_ms)
        .bind(e.messages as i64)
        .execute(pool)
        .await
        .unwrap();
    }
    // The deduplication record of every counted message, and the staged increments
    // whole (as the old COPY stored them) with their queue entries.
    for (m, queued) in counted
        .iter()
        .map(|m| (m, false))
        .chain(staged.iter().map(|m| (m, true)))
    {
        let (kind, start, end, count, checksum) = match &m.body {
            AuditBody::Increment(i) => (
                0i16,
                Some(i.window_start),
                Some(i.window_end),
                Some(i.stats.count as i64),
                Some(i.stats.checksum.0 as i64),
            ),
            AuditBody::Progress(_) => (1, None, None, None, None),
        };
        let staged_columns = match (&m.body, queued) {
            (AuditBody::Increment(i), true) => Some(i),
            _ => None,
        };
        let s = staged_columns.map(|i| &i.stats);
        let buckets: Option<Vec<(u32, u64)>> = s.map(|s| s.latency.buckets().collect());
        sqlx::query(
            "INSERT INTO audit_message (uuid, kind, topic, tier, datacenter, host, window_start_ms,
                 emitted_at_ms, received_at_ms, count, checksum, window_end_ms, bytes, no_time_count,
                 malformed_count, out_of_bounds_count, latency_zero_count, latency_negative_count,
                 latency_max_ms, bucket_index, bucket_count, offset_partition, offset_min, offset_max)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
                     $18, $19, $20, $21, $22, $23, $24)",
        )
        .bind(m.uuid)
        .bind(kind)
        .bind(&m.topic)
        .bind(&m.tier)
        .bind(&m.datacenter)
        .bind(&m.host)
        .bind(start)
        .bind(m.emitted_at)
        .bind(m.emitted_at + 500)
        .bind(count)
        .bind(checksum)
        .bind(end)
        .bind(s.map(|s| s.bytes as i64))
        .bind(s.map(|s| s.no_time_count as i64))
        .bind(s.map(|s| s.malformed_count as i64))
        .bind(s.map(|s| s.out_of_bounds_count as i64))
        .bind(s.map(|s| s.latency.zero_count() as i64))
        .bind(s.map(|s| s.latency.negative_count() as i64))
        .bind(s.map(|s| s.latency.max_ms()))
        .bind(buckets.as_ref().map(|b| b.iter().map(|b| b.0 as i32).collect::<Vec<_>>()))
        .bind(buckets.as_ref().map(|b| b.iter().map(|b| b.1 as i64).collect::<Vec<_>>()))
        .bind(s.map(|s| s.offsets.iter().map(|o| o.partition).collect::<Vec<_>>()))
        .bind(s.map(|s| s.offsets.iter().map(|o| o.min).collect::<Vec<_>>()))
        .bind(s.map(|s| s.offsets.iter().map(|o| o.max).collect::<Vec<_>>()))
        .execute(pool)
        .await
        .unwrap();
        if queued {
            sqlx::query("INSERT INTO audit_pending (uuid) VALUES ($1)")
                .bind(m.uuid)
                .execute(pool)
                .await
                .unwrap();
        }
    }
}
