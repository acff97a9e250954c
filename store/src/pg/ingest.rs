//! The write path of [`crate::Ingest::write_batch`] and the roll-up: window rows (one
//! `UNNEST` statement per table per batch, whatever the batch size), progress,
//! emitters and rejects, inside the caller's transaction.

use std::collections::{HashMap, HashSet};

use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use crate::aggregate::{first_in_batch, Rollup};
use crate::domain::*;
use crate::error::{Context, Result, StoreError};

use super::connect::PgStore;

/// Progress partitions per statement of `keep_progress`.
const PROGRESS_CHUNK: usize = 10_000;

/// Adds increments to their windows. Every sum saturates at `i64::MAX` (`CASE`, which
/// PostgreSQL evaluates lazily), so no increment can make the statement fail with
/// `bigint out of range` and wedge the roll-up.
static UPSERT_WINDOWS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let sum = |c: &str| crate::sql::sat_add(&format!("w.{c}"), &format!("EXCLUDED.{c}"));
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

impl PgStore {
    pub(super) async fn write_in(
        tx: &mut Transaction<'_, Postgres>,
        batch: &Batch,
    ) -> Result<BatchOutcome> {
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
        let rollup = Rollup::of(accepted, received);
        Self::add_windows(tx, &rollup, received).await?;
        Self::keep_progress(tx, &rollup, received).await?;
        Self::touch_emitters(tx, &rollup, received).await?;
        Self::store_rejects(tx, &batch.rejects, received).await?;
        Ok(BatchOutcome { outcomes })
    }

    pub(super) async fn add_windows(
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

    /// Keeps the latest progress per partition: latest by `emitted_at`, but never later
    /// than when it was received (`emitted_at` may be up to an hour ahead, and one
    /// report dated in the future must not pin out the honest ones after it).
    ///
    /// Names are sent once per (topic, tier, datacenter) and per host, with an index
    /// per partition: a report of 10 000 partitions binds its names once, not 40 000
    /// times (with names of 250 bytes the encoded arrays alone were ~1 KB per
    /// partition).
    pub(super) async fn keep_progress(
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

    pub(super) async fn keep_progress_chunk(
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
             WHERE LEAST(EXCLUDED.emitted_at_ms, EXCLUDED.received_at_ms)
                >= LEAST(p.emitted_at_ms, p.received_at_ms)",
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

    pub(super) async fn touch_emitters(
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

    pub(super) async fn store_rejects(
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
