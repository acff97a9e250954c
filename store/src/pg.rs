//! PostgreSQL store (production). Batches are written with `UNNEST` arrays: one
//! statement per table per batch, whatever the batch size.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgSslMode};
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use crate::aggregate::{first_in_batch, Rollup};
use crate::contract::*;
use crate::db_rows::WindowDb;
use crate::domain::*;
use crate::error::{Context, Result, StoreError};
use crate::validate::sanitize_text;

/// The advisory lock of the day partitions' creation (the SQL function
/// `audit_ensure_day_partitions` takes it too): exclusive for a preparation, shared
/// for the writers of traffic rows.
macro_rules! partition_turn {
    () => {
        "hashtext('audit_ensure_day_partitions')"
    };
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations/postgres");

const DAY_MS: i64 = 86_400_000;

/// Progress partitions per statement of `keep_progress`.
const PROGRESS_CHUNK: usize = 10_000;

/// Adds increments to their windows. Every sum saturates at `i64::MAX` (`CASE`, which
/// PostgreSQL evaluates lazily), so no increment can make the statement fail with
/// `bigint out of range` and wedge the roll-up.
static UPSERT_WINDOWS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let sum = |c: &str| crate::shared::sat_add(&format!("w.{c}"), &format!("EXCLUDED.{c}"));
    format!(
        "INSERT INTO audit_window AS w (topic, tier, datacenter, window_start_ms, window_end_ms,
             count, bytes, no_time_count, malformed_count, out_of_bounds_count, checksum,
             latency_zero_count, latency_negative_count, latency_max_ms, increments,
             first_received_at_ms, last_received_at_ms, observation_time_count,
             max_observed_at_ms, delivery_failed_count)
         SELECT t, ti, d, ws, we, c, b, nt, mf, ob, cs, z, ng, mx, inc, $16, $16, obs, mo, df
         FROM UNNEST($1::text[], $2::text[], $3::text[], $4::int8[], $5::int8[], $6::int8[],
                     $7::int8[], $8::int8[], $9::int8[], $10::int8[], $11::int8[], $12::int8[],
                     $13::int8[], $14::int8[], $15::int8[], $17::int8[], $18::int8[], $19::int8[])
              AS x(t, ti, d, ws, we, c, b, nt, mf, ob, cs, z, ng, mx, inc, obs, mo, df)
         ON CONFLICT (topic, window_start_ms, tier, datacenter) DO UPDATE SET
             window_end_ms = GREATEST(w.window_end_ms, EXCLUDED.window_end_ms),
             count = {},
             bytes = {},
             no_time_count = {},
             malformed_count = {},
             out_of_bounds_count = {},
             observation_time_count = {},
             delivery_failed_count = {},
             checksum = audit_wrap_add(w.checksum, EXCLUDED.checksum),
             latency_zero_count = {},
             latency_negative_count = {},
             latency_max_ms = GREATEST(w.latency_max_ms, EXCLUDED.latency_max_ms),
             increments = {},
             last_received_at_ms = GREATEST(w.last_received_at_ms, EXCLUDED.last_received_at_ms),
             max_observed_at_ms = GREATEST(w.max_observed_at_ms, EXCLUDED.max_observed_at_ms)
         RETURNING id, topic, tier, datacenter, window_start_ms",
        sum("count"),
        sum("bytes"),
        sum("no_time_count"),
        sum("malformed_count"),
        sum("out_of_bounds_count"),
        sum("observation_time_count"),
        sum("delivery_failed_count"),
        sum("latency_zero_count"),
        sum("latency_negative_count"),
        sum("increments"),
    )
});

#[derive(Clone, Debug)]
pub struct PgStore {
    pool: PgPool,
    /// Whether Citus distributes `audit_message`, which decides how rows are read by
    /// key ([`MessageReads`]). Looked up at connect, after migrating and at each
    /// partition upkeep (hourly), so a store distributed while running is read routed
    /// from the next upkeep on; until then reads are correct, only fanned out.
    distributed: Arc<AtomicBool>,
    window_size: crate::aggregate::WindowSizeCache,
}

impl PgStore {
    pub async fn connect(url: &str) -> Result<PgStore> {
        Self::connect_with(url, &crate::connection::StoreOptions::default()).await
    }

    pub async fn connect_with(
        url: &str,
        opts: &crate::connection::StoreOptions,
    ) -> Result<PgStore> {
        let options: PgConnectOptions = url.parse().map_err(|e: sqlx::Error| StoreError::Url {
            url: crate::connection::redact_url(url),
            reason: e.to_string(),
        })?;
        let pool = PgPoolOptions::new()
            .max_connections(opts.max_connections.max(1))
            .acquire_timeout(opts.acquire_timeout);
        let first = match pool.clone().connect_with(options.clone()).await {
            Ok(pool) => return Self::from_pool(pool).distribution_known().await,
            Err(e) => e,
        };
        let Some(cause) = tls_failure(&first) else {
            return Err(first).context("connecting to PostgreSQL");
        };
        let host = format!("{}:{}", options.get_host(), options.get_port());
        let mode = options.get_ssl_mode();
        if !matches!(mode, PgSslMode::Prefer) {
            return Err(StoreError::Tls {
                host,
                mode: libpq_name(mode),
                cause,
                source: first,
            });
        }
        // libpq's `prefer` (the default): "first try an SSL connection; if that fails,
        // try a non-SSL connection". sqlx treats a failed handshake as fatal instead.
        tracing::warn!(%host, %cause,
            "TLS with PostgreSQL failed under sslmode=prefer; connecting without TLS, as prefer allows \
             (sslmode=require or verify-full refuse to)");
        let pool = pool
            .connect_with(options.ssl_mode(PgSslMode::Disable))
            .await
            .context(
                "connecting to PostgreSQL (without TLS, after TLS failed under sslmode=prefer)",
            )?;
        Self::from_pool(pool).distribution_known().await
    }

    /// A store on `pool`, read as a store on one PostgreSQL until its next partition
    /// upkeep or migration finds out otherwise.
    pub fn from_pool(pool: PgPool) -> PgStore {
        PgStore {
            pool,
            distributed: Arc::new(AtomicBool::new(false)),
            window_size: Default::default(),
        }
    }

    /// Looks up whether Citus distributes `audit_message` (see `distributed`).
    async fn distribution_known(self) -> Result<PgStore> {
        self.learn_distribution().await?;
        Ok(self)
    }

    async fn learn_distribution(&self) -> Result<()> {
        let citus: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')",
        )
        .fetch_one(&self.pool)
        .await
        .context("looking for the citus extension")?;
        // pg_dist_partition exists only with Citus.
        let distributed = citus
            && sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_dist_partition
                                WHERE logicalrelid = to_regclass('audit_message'))",
            )
            .fetch_one(&self.pool)
            .await
            .context("asking Citus whether audit_message is distributed")?;
        self.distributed.store(distributed, Ordering::Relaxed);
        Ok(())
    }

    fn message_reads(&self) -> MessageReads {
        if self.distributed.load(Ordering::Relaxed) {
            MessageReads::Routed
        } else {
            MessageReads::Local
        }
    }

    /// The connection pool, for tests and benchmarks that poison, lock or seed tables
    /// (feature `test-support`). Everything else goes through [`AuditStore`]: only
    /// this crate knows the schema.
    #[cfg(feature = "test-support")]
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// PostgreSQL takes concurrent writers: nothing to serialize.
    async fn lock_writer(&self) {}

    async fn write_in(tx: &mut Transaction<'_, Postgres>, batch: &Batch) -> Result<BatchOutcome> {
        let firsts = first_in_batch(batch)?;
        let received = batch.received_at_ms;

        // 1. Record the UUIDs; RETURNING gives the ones seen for the first time.
        let n = firsts.len();
        let mut uuids = Vec::with_capacity(n);
        let mut kinds = Vec::with_capacity(n);
        let mut topics = Vec::with_capacity(n);
        let mut tiers = Vec::with_capacity(n);
        let mut dcs = Vec::with_capacity(n);
        let mut hosts = Vec::with_capacity(n);
        let mut starts: Vec<Option<i64>> = Vec::with_capacity(n);
        let mut emitted = Vec::with_capacity(n);
        let mut counts: Vec<Option<i64>> = Vec::with_capacity(n);
        let mut checksums: Vec<Option<i64>> = Vec::with_capacity(n);
        let mut partition_ms = Vec::with_capacity(n);
        for &(uuid, index) in &firsts {
            uuids.push(uuid);
            let m = &batch.messages[index];
            partition_ms.push(crate::pgcopy::partition_ms(m));
            topics.push(m.topic.as_str());
            tiers.push(m.tier.as_str());
            dcs.push(m.datacenter.as_str());
            hosts.push(m.host.as_str());
            emitted.push(m.emitted_at);
            match &m.body {
                AuditBody::Increment(i) => {
                    kinds.push(0i16);
                    starts.push(Some(i.window_start));
                    counts.push(Some(i.stats.count as i64));
                    checksums.push(Some(i.stats.checksum.0 as i64));
                }
                AuditBody::Progress(_) => {
                    kinds.push(1i16);
                    starts.push(None);
                    counts.push(None);
                    checksums.push(None);
                }
            }
        }
        let inserted: Vec<Uuid> = if n == 0 {
            Vec::new()
        } else {
            sqlx::query_scalar(
                "INSERT INTO audit_message (uuid, kind, topic, tier, datacenter, host, window_start_ms,
                                            emitted_at_ms, received_at_ms, count, checksum, partition_ms)
                 SELECT u, k, t, ti, d, h, w, e, $9, c, cs, pm
                 FROM UNNEST($1::uuid[], $2::int2[], $3::text[], $4::text[], $5::text[], $6::text[],
                             $7::int8[], $8::int8[], $10::int8[], $11::int8[], $12::int8[])
                      AS x(u, k, t, ti, d, h, w, e, c, cs, pm)
                 ON CONFLICT (uuid, topic, partition_ms) DO NOTHING
                 RETURNING uuid",
            )
            .bind(&uuids)
            .bind(&kinds)
            .bind(&topics)
            .bind(&tiers)
            .bind(&dcs)
            .bind(&hosts)
            .bind(&starts)
            .bind(&emitted)
            .bind(received)
            .bind(&counts)
            .bind(&checksums)
            .bind(&partition_ms)
            .fetch_all(&mut **tx)
            .await
            .context("recording message UUIDs")?
        };
        let inserted: HashSet<Uuid> = inserted.into_iter().collect();
        let mut outcomes = vec![WriteOutcome::Duplicate; batch.messages.len()];
        let mut accepted = Vec::with_capacity(inserted.len());
        for &(uuid, index) in &firsts {
            if inserted.contains(&uuid) {
                outcomes[index] = WriteOutcome::Accepted;
                accepted.push(&batch.messages[index]);
            }
        }

        // 2. Roll the first-seen messages up and add them.
        let rollup = Rollup::of(accepted);
        Self::add_windows(tx, &rollup, received).await?;
        Self::keep_progress(tx, &rollup, received).await?;
        Self::touch_emitters(tx, &rollup, received).await?;
        Self::store_rejects(tx, &batch.rejects, received).await?;
        Ok(BatchOutcome { outcomes })
    }

    async fn add_windows(
        tx: &mut Transaction<'_, Postgres>,
        rollup: &Rollup<'_>,
        received: i64,
    ) -> Result<()> {
        if rollup.windows.is_empty() {
            return Ok(());
        }
        let n = rollup.windows.len();
        let mut topics = Vec::with_capacity(n);
        let mut tiers = Vec::with_capacity(n);
        let mut dcs = Vec::with_capacity(n);
        let mut starts = Vec::with_capacity(n);
        let mut ends = Vec::with_capacity(n);
        let mut cols: [Vec<i64>; 12] = Default::default();
        let mut observed: Vec<Option<i64>> = Vec::with_capacity(n);
        for (k, w) in &rollup.windows {
            observed.push(w.max_observed_at);
            topics.push(k.topic.as_str());
            tiers.push(k.tier.as_str());
            dcs.push(k.datacenter.as_str());
            starts.push(k.window_start_ms);
            ends.push(w.window_end_ms);
            for (col, v) in cols.iter_mut().zip([
                w.count,
                w.bytes,
                w.no_time_count,
                w.malformed_count,
                w.out_of_bounds_count,
                w.checksum as i64,
                w.zero_count,
                w.negative_count,
                w.max_ms,
                w.increments,
                w.observation_time_count,
                w.delivery_failed_count,
            ]) {
                col.push(v);
            }
        }
        let rows: Vec<(i64, String, String, String, i64)> = sqlx::query_as(&UPSERT_WINDOWS)
            .bind(&topics)
            .bind(&tiers)
            .bind(&dcs)
            .bind(&starts)
            .bind(&ends)
            .bind(&cols[0])
            .bind(&cols[1])
            .bind(&cols[2])
            .bind(&cols[3])
            .bind(&cols[4])
            .bind(&cols[5])
            .bind(&cols[6])
            .bind(&cols[7])
            .bind(&cols[8])
            .bind(&cols[9])
            .bind(received)
            .bind(&cols[10])
            .bind(&observed)
            .bind(&cols[11])
            .fetch_all(&mut **tx)
            .await
            .context("adding increments to windows")?;
        // The topic list: only a window newer than a topic's newest writes its row.
        sqlx::query(
            "INSERT INTO audit_topic AS t (topic, last_window_start_ms)
             SELECT topic, max(ws) FROM UNNEST($1::text[], $2::int8[]) AS x(topic, ws)
             GROUP BY topic ORDER BY topic
             ON CONFLICT (topic) DO UPDATE SET last_window_start_ms = EXCLUDED.last_window_start_ms
             WHERE t.last_window_start_ms < EXCLUDED.last_window_start_ms",
        )
        .bind(&topics)
        .bind(&starts)
        .execute(&mut **tx)
        .await
        .context("listing the windows' topics")?;
        let ids: HashMap<WindowKey, i64> = rows
            .into_iter()
            .map(|(id, topic, tier, datacenter, window_start_ms)| {
                (
                    WindowKey {
                        topic,
                        tier,
                        datacenter,
                        window_start_ms,
                    },
                    id,
                )
            })
            .collect();

        let mut b_topics = Vec::new();
        let mut b_starts = Vec::new();
        let mut b_ids = Vec::new();
        let mut b_idx = Vec::new();
        let mut b_cnt = Vec::new();
        let mut o_topics = Vec::new();
        let mut o_starts = Vec::new();
        let mut o_ids = Vec::new();
        let mut o_part = Vec::new();
        let mut o_min = Vec::new();
        let mut o_max = Vec::new();
        let mut o_time: Vec<Option<i64>> = Vec::new();
        let mut ordered: Vec<(i64, &WindowKey, &crate::aggregate::WindowDelta)> = rollup
            .windows
            .iter()
            .map(|(k, w)| {
                let id = ids.get(k).copied().ok_or_else(|| {
                    StoreError::Invalid(format!(
                        "window {k:?} missing from RETURNING of its upsert"
                    ))
                })?;
                Ok((id, k, w))
            })
            .collect::<Result<_>>()?;
        ordered.sort_unstable_by_key(|(id, _, _)| *id);
        for (id, k, w) in ordered {
            for (&bucket, &count) in &w.buckets {
                b_topics.push(k.topic.as_str());
                b_starts.push(k.window_start_ms);
                b_ids.push(id);
                b_idx.push(bucket);
                b_cnt.push(count);
            }
            for (&partition, &(min, max, record_time)) in &w.offsets {
                o_topics.push(k.topic.as_str());
                o_starts.push(k.window_start_ms);
                o_ids.push(id);
                o_part.push(partition);
                o_min.push(min);
                o_max.push(max);
                o_time.push(record_time);
            }
        }
        if !b_ids.is_empty() {
            sqlx::query(
                "INSERT INTO audit_window_bucket AS b (window_id, bucket, count, topic, window_start_ms)
                 SELECT * FROM UNNEST($1::int8[], $2::int4[], $3::int8[], $4::text[], $5::int8[])
                 ON CONFLICT (topic, window_start_ms, window_id, bucket) DO UPDATE SET count = CASE
                     WHEN b.count > 9223372036854775807 - EXCLUDED.count THEN 9223372036854775807
                     ELSE b.count + EXCLUDED.count END",
            )
            .bind(&b_ids)
            .bind(&b_idx)
            .bind(&b_cnt)
            .bind(&b_topics)
            .bind(&b_starts)
            .execute(&mut **tx)
            .await
            .context("adding latency buckets")?;
        }
        if !o_ids.is_empty() {
            sqlx::query(
                "INSERT INTO audit_window_offset AS o (window_id, partition_id, min_offset, max_offset,
                                                       topic, window_start_ms, max_record_time_ms)
                 SELECT * FROM UNNEST($1::int8[], $2::int4[], $3::int8[], $4::int8[], $5::text[],
                                      $6::int8[], $7::int8[])
                 ON CONFLICT (topic, window_start_ms, window_id, partition_id) DO UPDATE SET
                     min_offset = LEAST(o.min_offset, EXCLUDED.min_offset),
                     max_offset = GREATEST(o.max_offset, EXCLUDED.max_offset),
                     max_record_time_ms = GREATEST(o.max_record_time_ms, EXCLUDED.max_record_time_ms)",
            )
            .bind(&o_ids)
            .bind(&o_part)
            .bind(&o_min)
            .bind(&o_max)
            .bind(&o_topics)
            .bind(&o_starts)
            .bind(&o_time)
            .execute(&mut **tx)
            .await
            .context("widening offset ranges")?;
        }
        Ok(())
    }

    /// Keeps the latest progress per partition. Names are sent once per (topic, tier,
    /// datacenter) and per host, with an index per partition: a report of 10 000
    /// partitions binds its names once, not 40 000 times (with names of 250 bytes the
    /// encoded arrays alone were ~1 KB per partition).
    async fn keep_progress(
        tx: &mut Transaction<'_, Postgres>,
        rollup: &Rollup<'_>,
        received: i64,
    ) -> Result<()> {
        // In statements of PROGRESS_CHUNK partitions: the arrays and their encoding
        // stay small however many partitions the batch has (in key order, so rows
        // are still locked in the order the other writers lock them).
        let entries: Vec<_> = rollup.progress.iter().collect();
        for chunk in entries.chunks(PROGRESS_CHUNK) {
            Self::keep_progress_chunk(tx, chunk, received).await?;
        }
        Ok(())
    }

    async fn keep_progress_chunk(
        tx: &mut Transaction<'_, Postgres>,
        chunk: &[(
            &crate::aggregate::ProgressKey<'_>,
            &crate::aggregate::ProgressDelta<'_>,
        )],
        received: i64,
    ) -> Result<()> {
        let n = chunk.len();
        let (mut topics, mut tiers, mut dcs) = (Vec::new(), Vec::new(), Vec::new());
        let mut hosts: Vec<&str> = Vec::new();
        let mut host_index: HashMap<&str, i32> = HashMap::new();
        let mut groups = Vec::with_capacity(n);
        let mut host_of = Vec::with_capacity(n);
        let mut parts = Vec::with_capacity(n);
        let mut next = Vec::with_capacity(n);
        let mut rtime = Vec::with_capacity(n);
        let mut lag = Vec::with_capacity(n);
        let mut emitted = Vec::with_capacity(n);
        let mut max_rtime = Vec::with_capacity(n);
        let mut append_time = Vec::with_capacity(n);
        let mut last_group = None;
        // The map is ordered by (topic, tier, datacenter, partition): each group's
        // partitions are consecutive. Indexes are 1-based (WITH ORDINALITY).
        for &(&(topic, tier, dc, partition), p) in chunk {
            if last_group != Some((topic, tier, dc)) {
                last_group = Some((topic, tier, dc));
                topics.push(topic);
                tiers.push(tier);
                dcs.push(dc);
            }
            groups.push(topics.len() as i32);
            let next_host = hosts.len() as i32 + 1;
            let h = *host_index.entry(p.host).or_insert_with(|| {
                hosts.push(p.host);
                next_host
            });
            host_of.push(h);
            parts.push(partition);
            max_rtime.push(p.max_record_time_ms);
            append_time.push(p.log_append_time);
            next.push(p.next_offset);
            rtime.push(p.record_time_ms);
            lag.push(p.lag);
            emitted.push(p.emitted_at_ms);
        }
        // ORDER BY: rows are locked in key order, as the other writers lock them.
        sqlx::query(
            "INSERT INTO audit_progress AS p (topic, tier, datacenter, partition_id, host, next_offset,
                 record_time_ms, lag, emitted_at_ms, received_at_ms, max_record_time_ms,
                 log_append_time)
             SELECT g.t, g.ti, g.d, x.pa, h.h, x.n, x.r, x.l, x.e, $12, x.mr, x.la
             FROM UNNEST($1::int4[], $2::int4[], $3::int4[], $4::int8[], $5::int8[], $6::int8[],
                         $7::int8[], $13::int8[], $14::bool[]) AS x(gi, hi, pa, n, r, l, e, mr, la)
             JOIN UNNEST($8::text[], $9::text[], $10::text[]) WITH ORDINALITY AS g(t, ti, d, i)
               ON g.i = x.gi
             JOIN UNNEST($11::text[]) WITH ORDINALITY AS h(h, i) ON h.i = x.hi
             ORDER BY g.t, g.ti, g.d, x.pa
             ON CONFLICT (topic, tier, datacenter, partition_id) DO UPDATE SET
                 host = EXCLUDED.host, next_offset = EXCLUDED.next_offset,
                 record_time_ms = EXCLUDED.record_time_ms, lag = EXCLUDED.lag,
                 emitted_at_ms = EXCLUDED.emitted_at_ms, received_at_ms = EXCLUDED.received_at_ms,
                 max_record_time_ms = EXCLUDED.max_record_time_ms,
                 log_append_time = EXCLUDED.log_append_time
             WHERE EXCLUDED.emitted_at_ms >= p.emitted_at_ms",
        )
        .bind(&groups)
        .bind(&host_of)
        .bind(&parts)
        .bind(&next)
        .bind(&rtime)
        .bind(&lag)
        .bind(&emitted)
        .bind(&topics)
        .bind(&tiers)
        .bind(&dcs)
        .bind(&hosts)
        .bind(received)
        .bind(&max_rtime)
        .bind(&append_time)
        .execute(&mut **tx)
        .await
        .context("keeping progress watermarks")?;
        Ok(())
    }

    async fn touch_emitters(
        tx: &mut Transaction<'_, Postgres>,
        rollup: &Rollup<'_>,
        received: i64,
    ) -> Result<()> {
        if rollup.emitters.is_empty() {
            return Ok(());
        }
        let mut tiers = Vec::new();
        let mut dcs = Vec::new();
        let mut hosts = Vec::new();
        let mut emitted = Vec::new();
        let mut messages = Vec::new();
        for (&(tier, dc, host), (e, m)) in &rollup.emitters {
            tiers.push(tier);
            dcs.push(dc);
            hosts.push(host);
            emitted.push(*e);
            messages.push(*m);
        }
        sqlx::query(
            "INSERT INTO audit_emitter AS e (tier, datacenter, host, last_emitted_at_ms,
                 last_received_at_ms, messages)
             SELECT ti, d, h, em, $6, m
             FROM UNNEST($1::text[], $2::text[], $3::text[], $4::int8[], $5::int8[]) AS x(ti, d, h, em, m)
             ON CONFLICT (tier, datacenter, host) DO UPDATE SET
                 last_emitted_at_ms = GREATEST(e.last_emitted_at_ms, EXCLUDED.last_emitted_at_ms),
                 last_received_at_ms = GREATEST(e.last_received_at_ms, EXCLUDED.last_received_at_ms),
                 messages = CASE WHEN e.messages > 9223372036854775807 - EXCLUDED.messages
                     THEN 9223372036854775807 ELSE e.messages + EXCLUDED.messages END",
        )
        .bind(&tiers)
        .bind(&dcs)
        .bind(&hosts)
        .bind(&emitted)
        .bind(&messages)
        .bind(received)
        .execute(&mut **tx)
        .await
        .context("updating emitters' last-seen times")?;
        Ok(())
    }

    async fn store_rejects(
        tx: &mut Transaction<'_, Postgres>,
        rejects: &[Reject],
        received: i64,
    ) -> Result<()> {
        if rejects.is_empty() {
            return Ok(());
        }
        // PostgreSQL text cannot hold NUL: a reject must be storable whatever it says.
        let rejects: Vec<Reject> = rejects.iter().map(Reject::sanitized).collect();
        let sources: Vec<&str> = rejects.iter().map(|r| r.source.as_str()).collect();
        let reasons: Vec<&str> = rejects.iter().map(|r| r.reason.as_str()).collect();
        let payloads: Vec<&str> = rejects.iter().map(|r| r.payload.as_str()).collect();
        sqlx::query(
            "INSERT INTO audit_reject (received_at_ms, source, reason, payload)
             SELECT $4, s, r, p FROM UNNEST($1::text[], $2::text[], $3::text[]) AS x(s, r, p)",
        )
        .bind(&sources)
        .bind(&reasons)
        .bind(&payloads)
        .bind(received)
        .execute(&mut **tx)
        .await
        .context("storing rejects")?;
        Ok(())
    }
}

impl PgStore {
    async fn stage_in(
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
        let rollup = Rollup::staged(accepted);
        Self::keep_progress(tx, &rollup, received).await?;
        Self::touch_emitters(tx, &rollup, received).await?;
        Self::store_rejects(tx, &batch.rejects, received).await?;
        Ok(BatchOutcome { outcomes })
    }

    /// Which of the batch's first-seen messages (`firsts`) are stored already, by key:
    /// index probes, far cheaper than ON CONFLICT per row, in the partitions of the
    /// batch's days only.
    async fn known_in(
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

    /// This store reading by key as on one PostgreSQL even where Citus distributes the
    /// tables (one query to every shard), for benchmarks that compare both (feature
    /// `test-support`).
    #[cfg(feature = "test-support")]
    pub fn unrouted(&self) -> PgStore {
        PgStore::from_pool(self.pool.clone())
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
    /// reads them back: (how many were taken, the increments still stored).
    async fn take_staged(
        tx: &mut Transaction<'_, Postgres>,
        limit: u32,
        reads: MessageReads,
    ) -> Result<(u64, Vec<Message>)> {
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
            return Ok((0, Vec::new()));
        }
        let uuids: Vec<Uuid> = taken.iter().map(|t| t.0).collect();
        let topics: Vec<&str> = taken.iter().map(|t| t.1.as_str()).collect();
        let (lo, hi) = span(taken.iter().map(|t| t.2));
        let taken_keys: HashSet<(Uuid, String, i64)> = taken.iter().cloned().collect();
        seqscan(tx, false).await?;
        let rows: Vec<StagedDb> = reads
            .bind_keys(sqlx::query_as(reads.staged()), &uuids, &topics)
            .bind(lo)
            .bind(hi)
            .fetch_all(&mut **tx)
            .await
            .context("reading staged increments")?;
        seqscan(tx, true).await?;
        // A staged UUID whose message retention already deleted has nothing to add.
        let increments: Vec<Message> = rows
            .into_iter()
            .filter(|r| taken_keys.contains(&(r.uuid, r.topic.clone(), r.partition_ms)))
            .filter_map(StagedDb::into_increment)
            .collect();
        Ok((taken.len() as u64, increments))
    }

    async fn rollup_in(
        tx: &mut Transaction<'_, Postgres>,
        limit: u32,
        reads: MessageReads,
    ) -> Result<u64> {
        let (taken, increments) = Self::take_staged(tx, limit, reads).await?;
        if taken > 0 {
            let rollup = Rollup::of(&increments);
            Self::add_windows(tx, &rollup, common::now_ms()).await?;
        }
        Ok(taken)
    }

    /// The roll-up after a data error: the increments are added by bisection, each
    /// part under its own savepoint; a part the database refuses is split in two until
    /// the one increment that causes it is found, which is taken off the queue and
    /// kept as a reject (source `rollup`) with the reason. The others go on, at a cost
    /// of about twice the work of a normal roll-up.
    async fn rollup_isolating(
        tx: &mut Transaction<'_, Postgres>,
        limit: u32,
        reads: MessageReads,
    ) -> Result<u64> {
        use sqlx::Acquire;
        let (taken, increments) = Self::take_staged(tx, limit, reads).await?;
        let now = common::now_ms();
        let mut quarantined = Vec::new();
        let mut parts: Vec<&[Message]> = vec![&increments];
        while let Some(part) = parts.pop() {
            if part.is_empty() {
                continue;
            }
            let mut savepoint = tx.begin().await.context("starting a savepoint")?;
            match Self::add_windows(&mut savepoint, &Rollup::of(part), now).await {
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
        Ok(taken)
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
    fn into_increment(self) -> Option<Message> {
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

/// How `audit_message` rows are read by key: by their UUIDs (and, routed, their
/// topics: one each) and the span of their `partition_ms`. A span, not `partition_ms
/// = ANY(...)`: two arrays in one index condition make the B-tree descend once per
/// pair (UUIDs × distinct windows); the span prunes to the batch's days (usually one
/// or two) and costs one descent per UUID and day. The rows are a superset of the
/// exact keys: callers match them exactly.
#[derive(Clone, Copy, Debug)]
enum MessageReads {
    /// One PostgreSQL: one query on the table by UUID (`$1` UUIDs, `$2..=$3` the span).
    Local,
    /// Citus: `audit_messages_by_key` (migration 20261201170100, `$1` UUIDs, `$2`
    /// their topics, `$3..=$4` the span), one query per shard with only its topics'
    /// UUIDs, each routed to that shard. Not used on one PostgreSQL, where it cost the
    /// probe of a replay about 2× (the rows go through the function's tuplestore, and
    /// a bound array of topics is compared row by row, not hashed).
    Routed,
}

impl MessageReads {
    /// `query` with the keys bound as the variant's SQL takes them.
    fn bind_keys<'q, O>(
        self,
        query: sqlx::query::QueryAs<'q, Postgres, O, sqlx::postgres::PgArguments>,
        uuids: &'q [Uuid],
        topics: &'q [&'q str],
    ) -> sqlx::query::QueryAs<'q, Postgres, O, sqlx::postgres::PgArguments> {
        match self {
            MessageReads::Local => query.bind(uuids),
            MessageReads::Routed => query.bind(uuids).bind(topics),
        }
    }

    /// The keys of the messages of a batch already stored (the deduplication probe).
    fn probe(self) -> &'static str {
        match self {
            MessageReads::Local => {
                "SELECT uuid, topic, partition_ms FROM audit_message
                 WHERE uuid = ANY($1) AND partition_ms >= $2 AND partition_ms <= $3"
            }
            MessageReads::Routed => {
                "SELECT uuid, topic, partition_ms FROM audit_messages_by_key($1, $2, $3, $4)"
            }
        }
    }

    /// Staged increments whole, for the roll-up.
    fn staged(self) -> &'static str {
        static LOCAL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            format!(
                "SELECT {STAGED_COLUMNS} FROM audit_message
                 WHERE uuid = ANY($1) AND partition_ms >= $2 AND partition_ms <= $3 AND kind = 0"
            )
        });
        static ROUTED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            format!(
                "SELECT {STAGED_COLUMNS} FROM audit_messages_by_key($1, $2, $3, $4) WHERE kind = 0"
            )
        });
        match self {
            MessageReads::Local => &LOCAL,
            MessageReads::Routed => &ROUTED,
        }
    }

    /// `(topic, tier, datacenter, window_start_ms)` of the queued increments: `$1` a
    /// topic or NULL, `$2` the first window start.
    fn staged_windows(self) -> &'static str {
        match self {
            MessageReads::Local => {
                "SELECT DISTINCT m.topic, m.tier, m.datacenter, m.window_start_ms
                 FROM audit_pending p JOIN audit_message m
                      ON m.uuid = p.uuid AND m.topic = p.topic AND m.partition_ms = p.partition_ms
                 WHERE ($1::text IS NULL OR m.topic = $1) AND m.window_start_ms >= $2"
            }
            // The queue is local (a coordinator table) and short: its keys are read
            // first and their messages looked up by key, routed to the shards of the
            // queued topics; the join above goes to every shard (~420 ms a serve cycle
            // on two workers, issue #32).
            MessageReads::Routed => {
                "WITH p AS (SELECT uuid, topic, partition_ms FROM audit_pending
                            WHERE $1::text IS NULL OR topic = $1),
                      k AS (SELECT array_agg(uuid) AS uuids, array_agg(topic) AS topics,
                                   min(partition_ms) AS lo, max(partition_ms) AS hi FROM p)
                 SELECT DISTINCT m.topic, m.tier, m.datacenter, m.window_start_ms
                 FROM k, audit_messages_by_key(k.uuids, k.topics, k.lo, k.hi) m
                 JOIN p ON p.uuid = m.uuid AND p.topic = m.topic AND p.partition_ms = m.partition_ms
                 WHERE m.window_start_ms >= $2"
            }
        }
    }
}

/// The columns of a staged increment ([`StagedDb`]).
const STAGED_COLUMNS: &str = "uuid, topic, tier, datacenter, host, window_start_ms, window_end_ms,
     emitted_at_ms, count, bytes, no_time_count, malformed_count, out_of_bounds_count,
     observation_time_count, delivery_failed_count, checksum, latency_zero_count,
     latency_negative_count, latency_max_ms, bucket_index, bucket_count, offset_partition,
     offset_min, offset_max, partition_ms, max_observed_at_ms, offset_max_record_time";

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

/// What went wrong in words, when `e` is a failure of TLS (the server refused it, or
/// the handshake failed), `None` for any other connection error. rustls' errors reach
/// here as I/O errors of kind `InvalidData` and are told apart by their text: the
/// store does not link rustls itself (sqlx does), so it cannot match their types.
fn tls_failure(e: &sqlx::Error) -> Option<String> {
    let text = match e {
        sqlx::Error::Tls(e) => e.to_string(),
        sqlx::Error::Io(e) if e.kind() == std::io::ErrorKind::InvalidData => e.to_string(),
        _ => return None,
    };
    let words = [
        (
            "UnsupportedCertVersion",
            "the server's certificate is X.509 v1, which rustls (kafka-audit's TLS library) \
             cannot use even unverified; give the server an X.509 v3 certificate, or connect \
             without TLS (sslmode=prefer or disable)",
        ),
        (
            "UnknownIssuer",
            "the server's certificate is not signed by a root of sslrootcert (nor by a \
             public web root)",
        ),
        (
            "NotValidForName",
            "the server's certificate is not valid for the URL's host name",
        ),
        ("Expired", "the server's certificate has expired"),
        ("NotValidYet", "the server's certificate is not valid yet"),
        (
            "server does not support TLS",
            "the server does not offer TLS (ssl = off)",
        ),
    ];
    let said = words
        .iter()
        .find(|(key, _)| text.contains(key))
        .map(|w| w.1);
    Some(match said {
        Some(words) => format!("{words} ({text})"),
        None => text,
    })
}

/// `sslmode` as libpq (and the URL) spells it.
fn libpq_name(mode: PgSslMode) -> &'static str {
    match mode {
        PgSslMode::Disable => "disable",
        PgSslMode::Allow => "allow",
        PgSslMode::Prefer => "prefer",
        PgSslMode::Require => "require",
        PgSslMode::VerifyCa => "verify-ca",
        PgSslMode::VerifyFull => "verify-full",
    }
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

impl Deployment for PgStore {
    async fn migrate(&self) -> Result<()> {
        MIGRATOR.run(&self.pool).await?;
        // Today and tomorrow at least; the collector prepares its whole range.
        let now = common::now_ms();
        self.prepare_partitions(now, now + DAY_MS).await?;
        Ok(())
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .context("pinging PostgreSQL")?;
        Ok(())
    }

    crate::shared::shared_deployment!();
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

impl VerdictReads for PgStore {
    async fn staged_windows(
        &self,
        topic: Option<&str>,
        from_window_ms: i64,
    ) -> Result<Vec<(String, String, String, i64)>> {
        sqlx::query_as(self.message_reads().staged_windows())
            .bind(topic)
            .bind(from_window_ms)
            .fetch_all(&self.pool)
            .await
            .context("reading staged increments")
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

impl AlertLedger for PgStore {
    crate::shared::alert_ledger!();
}

impl Upkeep for PgStore {
    async fn prepare_partitions(&self, from_ms: i64, to_ms: i64) -> Result<u64> {
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

    async fn retention(
        &self,
        window_cutoff_ms: i64,
        message_cutoff_ms: i64,
        batch_size: u32,
    ) -> Result<RetentionOutcome> {
        let limit = i64::from(batch_size.max(1));
        // Each step is its own transaction and none depends on another: one that
        // fails (a lock timeout, a statement the database refuses) is logged and
        // counted, and the others still delete what they should.
        let mut outcome = RetentionOutcome::default();
        let mut step = |name: &'static str, result: Result<u64>| match result {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(step = name, error = %e, "retention step failed; the others ran");
                outcome.failed_steps += 1;
                0
            }
        };
        let partitions = step(
            "dropping day partitions",
            self.drop_old_days(window_cutoff_ms, message_cutoff_ms)
                .await,
        );
        step(
            "forgetting topics without windows",
            self.forget_old_topics(window_cutoff_ms).await,
        );
        let windows = step(
            "deleting old windows",
            self.delete_old_default_windows(window_cutoff_ms, limit)
                .await,
        );
        let messages = step(
            "deleting old message UUIDs",
            self.delete_old_default_messages(message_cutoff_ms, limit)
                .await,
        );
        let rejects = step(
            "deleting old rejects",
            self.delete_old_rejects(message_cutoff_ms, limit).await,
        );
        outcome.partitions = partitions;
        outcome.windows = windows;
        outcome.messages = messages;
        outcome.rejects = rejects;
        Ok(outcome)
    }

    crate::shared::shared_forgetting!();
}

/// Partition upkeep and the steps of [`Upkeep::retention`], each in a transaction
/// of its own. No `FOR UPDATE` on the tables that Citus distributes (it refuses row
/// locks in a multi-shard query): a step waits at most [`MAINTENANCE_LOCK_TIMEOUT`]
/// for rows an ingesting transaction holds and otherwise fails alone, to be retried at
/// the next pass. The old rows retention deletes are rarely written (late data older
/// than the retention), so waiting is rare.
impl PgStore {
    /// Creates the missing partitions of the UTC day starting at `day_ms`, in one
    /// transaction; how many.
    /// A transaction that writes traffic rows (a batch, a roll-up). It first takes the
    /// partition preparations' turn shared: creating a day locks the parent tables and
    /// moves that day's rows out of the default partitions, and a writer holding one
    /// of those tables while it waited for another deadlocked with it (PostgreSQL
    /// aborted the writer after its deadlock_timeout). Writers share the turn with
    /// each other; a day's creation waits for the writers in hand, and they for it.
    async fn writing_transaction(&self) -> Result<Transaction<'static, Postgres>> {
        let mut tx = self
            .pool
            .begin()
            .await
            .context("beginning a write transaction")?;
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

    async fn prepare_day(&self, day_ms: i64) -> Result<u64> {
        let mut tx = self
            .pool
            .begin()
            .await
            .context("beginning partition maintenance")?;
        // Preparations take turns (the function's advisory lock, taken here first so
        // that the lock timeout below is not for the turn): `serve` migrating while the
        // collector prepares its range waits for it rather than failing to start.
        sqlx::query(concat!(
            "SELECT pg_advisory_xact_lock(",
            partition_turn!(),
            ")"
        ))
        .execute(&mut *tx)
        .await
        .context("waiting for a concurrent partition preparation")?;
        Self::limit_lock_waits(&mut tx).await?;
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

    /// A transaction whose statements wait at most [`MAINTENANCE_LOCK_TIMEOUT`] for a lock.
    async fn maintenance_transaction(&self) -> Result<Transaction<'static, Postgres>> {
        let mut tx = self
            .pool
            .begin()
            .await
            .context("beginning a maintenance transaction")?;
        Self::limit_lock_waits(&mut tx).await?;
        Ok(tx)
    }

    /// Makes `tx`'s statements wait at most [`MAINTENANCE_LOCK_TIMEOUT`] for a lock.
    async fn limit_lock_waits(tx: &mut Transaction<'static, Postgres>) -> Result<()> {
        for setting in MAINTENANCE_LOCK_TIMEOUT {
            sqlx::query(setting)
                .execute(&mut **tx)
                .await
                .context("setting a lock timeout")?;
        }
        Ok(())
    }

    /// Whole days: a `DROP TABLE` per partition, no row-by-row delete. Dropping a
    /// partition waits for the transactions using its table; with the lock timeout
    /// ingestion never queues behind it for long, and a pass that times out leaves
    /// the days to the next one.
    async fn drop_old_days(&self, window_cutoff_ms: i64, message_cutoff_ms: i64) -> Result<u64> {
        let mut tx = self.maintenance_transaction().await?;
        let partitions: i32 = sqlx::query_scalar("SELECT audit_drop_day_partitions($1, $2)")
            .bind(window_cutoff_ms)
            .bind(message_cutoff_ms)
            .fetch_one(&mut *tx)
            .await
            .context("dropping day partitions")?;
        tx.commit().await.context("committing dropped partitions")?;
        Ok(partitions.max(0) as u64)
    }

    /// Topics whose newest window is a day older than the cutoff have no window left
    /// in a day partition (and the default partition's go with the windows below).
    async fn forget_old_topics(&self, window_cutoff_ms: i64) -> Result<u64> {
        let mut tx = self.maintenance_transaction().await?;
        let n = sqlx::query("DELETE FROM audit_topic WHERE last_window_start_ms < $1")
            .bind(window_cutoff_ms.saturating_sub(DAY_MS))
            .execute(&mut *tx)
            .await
            .context("forgetting topics without windows")?
            .rows_affected();
        tx.commit().await.context("committing forgotten topics")?;
        Ok(n)
    }

    /// Up to `limit` windows of the default partition (times no day partition
    /// covered) older than the cutoff, with their buckets and offsets.
    async fn delete_old_default_windows(&self, window_cutoff_ms: i64, limit: i64) -> Result<u64> {
        let mut tx = self.maintenance_transaction().await?;
        let windows: i64 = sqlx::query_scalar(
            "WITH doomed AS (
                 SELECT topic, window_start_ms, id FROM audit_window_default
                 WHERE window_start_ms < $1
                 ORDER BY window_start_ms LIMIT $2),
             w AS (DELETE FROM audit_window_default
                   WHERE (topic, window_start_ms, id) IN (SELECT * FROM doomed)
                   RETURNING topic, window_start_ms, id),
             b AS (DELETE FROM audit_window_bucket_default
                   WHERE (topic, window_start_ms, window_id) IN (SELECT * FROM w)),
             o AS (DELETE FROM audit_window_offset_default
                   WHERE (topic, window_start_ms, window_id) IN (SELECT * FROM w))
             SELECT count(*) FROM w",
        )
        .bind(window_cutoff_ms)
        .bind(limit)
        .fetch_one(&mut *tx)
        .await
        .context("deleting old windows")?;
        tx.commit().await.context("committing deleted windows")?;
        Ok(windows.max(0) as u64)
    }

    /// Up to `limit` message UUIDs of the default partition older than the cutoff.
    async fn delete_old_default_messages(&self, message_cutoff_ms: i64, limit: i64) -> Result<u64> {
        let mut tx = self.maintenance_transaction().await?;
        let n = sqlx::query(
            "DELETE FROM audit_message_default WHERE (uuid, topic, partition_ms) IN (
                 SELECT uuid, topic, partition_ms FROM audit_message_default
                 WHERE partition_ms < $1 LIMIT $2)",
        )
        .bind(message_cutoff_ms)
        .bind(limit)
        .execute(&mut *tx)
        .await
        .context("deleting old message UUIDs")?
        .rows_affected();
        tx.commit().await.context("committing deleted UUIDs")?;
        Ok(n)
    }

    /// Up to `limit` rejects received before the cutoff. `audit_reject` stays a local
    /// table under Citus too, so rows an ingesting transaction holds are skipped.
    async fn delete_old_rejects(&self, message_cutoff_ms: i64, limit: i64) -> Result<u64> {
        let n = sqlx::query(
            "DELETE FROM audit_reject WHERE id IN (
                 SELECT id FROM audit_reject WHERE received_at_ms < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
        )
        .bind(message_cutoff_ms)
        .bind(limit)
        .execute(&self.pool)
        .await
        .context("deleting old rejects")?
        .rows_affected();
        Ok(n)
    }
}

/// How long a maintenance step waits for a lock before it fails (and is retried at
/// the next pass). On Citus the setting must reach the workers too, where the shards'
/// rows are locked: `citus.propagate_set_commands` sends the transaction's `SET LOCAL`s
/// along (on plain PostgreSQL it is an unused placeholder setting).
const MAINTENANCE_LOCK_TIMEOUT: [&str; 2] = [
    "SET LOCAL citus.propagate_set_commands = 'local'",
    "SET LOCAL lock_timeout = '5s'",
];

impl PgStore {
    crate::shared::shared_window_reads!();

    const TOPIC_BUCKETS: &'static str = crate::shared::PG_TOPIC_BUCKETS;
    const TOPIC_RECORD_TIMES: &'static str = crate::shared::PG_TOPIC_RECORD_TIMES;

    fn window_all_offsets_sql() -> &'static str {
        crate::shared::PG_WINDOW_ALL_OFFSETS
    }

    fn window_offsets_sql() -> &'static str {
        &crate::shared::PG_WINDOW_OFFSETS
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
        let (topics, next_after_topic) = self.range_topics(range, after_topic, topic_limit).await?;
        let (Some(first), Some(last)) = (topics.first(), topics.last()) else {
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
                crate::shared::WINDOW_COLUMNS
            )
        };
        let read = |order: &str| {
            let sql = sql(order);
            async move {
                sqlx::query_as::<_, WindowDb>(&sql)
                    .bind(first)
                    .bind(last)
                    .bind(range.start_ms)
                    .bind(range.end_ms)
                    .fetch_all(&self.pool)
                    .await
                    .context("reading windows of a range")
            }
        };
        let mut rows = read("").await?;
        if rows.len() >= MAX_READ_ROWS {
            rows = read("ORDER BY topic, window_start_ms, tier, datacenter").await?;
        } else {
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
        // The rows (window id, key, value) of `table` for those windows, as above.
        let per_window =
            |table: &'static str, key: &'static str, value: &'static str, what: &'static str| {
                let sql = format!(
                "SELECT coalesce(array_agg(window_id), '{{}}'), coalesce(array_agg({key}), '{{}}'),
                        coalesce(array_agg({value}), '{{}}')
                 FROM (SELECT window_id, {key}, {value} FROM {table}
                       WHERE topic = ANY($1) AND window_start_ms >= $2 AND window_start_ms < $3
                         AND {value} IS NOT NULL
                       ORDER BY window_id, {key} LIMIT {}) x",
                crate::db_rows::bucket_limit(max_bucket_rows)
            );
                let read_topics = &read_topics;
                async move {
                    let (ids, keys, values): (Vec<i64>, Vec<i32>, Vec<i64>) = sqlx::query_as(&sql)
                        .bind(read_topics)
                        .bind(range.start_ms)
                        .bind(range.end_ms)
                        .fetch_one(&self.pool)
                        .await
                        .context(what)?;
                    let mut triples: Vec<(i64, i32, i64)> = ids
                        .into_iter()
                        .zip(keys)
                        .zip(values)
                        .map(|((id, k), v)| (id, k, v))
                        .collect();
                    if !triples.is_sorted_by_key(|b| (b.0, b.1)) {
                        triples.sort_unstable_by_key(|b| (b.0, b.1));
                    }
                    Ok::<_, StoreError>(triples)
                }
            };
        let buckets = per_window(
            "audit_window_bucket",
            "bucket",
            "count",
            "reading latency buckets",
        )
        .await?;
        // The windows' per-partition record times, the same way (only partitions with
        // one: upstream evidence, issue 24).
        let record_times = per_window(
            "audit_window_offset",
            "partition_id",
            "max_record_time_ms",
            "reading record times of windows",
        )
        .await?;
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
