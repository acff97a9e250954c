-- Window rows for the web benchmarks, set-based: TOPICS topics x 3 tiers (producer,
-- regional, aggregate) x 2 datacenters at 10-minute windows from FIRST to LAST (epoch ms,
-- window starts, inclusive), each with one latency bucket. About 1 % of (topic, window,
-- datacenter) lose 5 messages between regional and aggregate. Progress rows for every
-- auditor, reported at NOW.
--
-- Three phases (psql -v phase=...), so that the days can be loaded in parallel sessions
-- (bench/web-lib.sh seed_windows runs SEED_JOBS of them at once):
--   psql -v phase=prepare -v topics=1000 -v first=... -v last=... -v now_ms=... -f bench/seed-windows.sql
--   psql -v phase=day -v day=<UTC midnight, epoch ms> -v topics=... -v first=... -v last=... -v now_ms=... -f ...
--   psql -v phase=finish -f bench/seed-windows.sql
--
-- A day is loaded as the collector never would, for speed only (the schema it leaves is
-- the migrated one): its empty window and bucket partitions are detached and replaced by
-- plain tables without indexes, filled with INSERT ... SELECT generate_series, then given
-- the primary keys and indexes of the partitioned tables (one sort each instead of a
-- B-tree insertion per row) and a CHECK of the day's bounds (so that ATTACH needs no
-- scan), and attached back; ATTACH adopts the matching indexes.
--
-- Used by bench/web-anomalies.sh and bench/store-scale.sh: the one place that knows the
-- schema of the seeded tables.
\set ON_ERROR_STOP 1
SET synchronous_commit = off;
SELECT :'phase' = 'prepare' AS is_prepare, :'phase' = 'day' AS is_day,
       :'phase' = 'finish' AS is_finish \gset

\if :is_prepare
-- Every seeded day gets its partitions first (as the collector prepares them).
SELECT audit_ensure_day_partitions(:first::bigint, :now_ms::bigint + 86400000);
-- The topic list serve's first cycle reads (kept by the roll-up in the collector): every
-- topic has every window, the last one is LAST.
INSERT INTO audit_topic (topic, last_window_start_ms)
SELECT format('topic-%s', lpad(t::text, 5, '0')), :last::bigint FROM generate_series(0, :topics - 1) t;
INSERT INTO audit_progress (topic, tier, datacenter, partition_id, host, next_offset, record_time_ms,
    lag, emitted_at_ms, received_at_ms)
SELECT format('topic-%s', lpad(t::text, 5, '0')), tier, dc, 0, tier || '-' || dc, 1000000, :now_ms, 0,
       :now_ms, :now_ms
FROM generate_series(0, :topics - 1) t, unnest(ARRAY['regional', 'aggregate']) tier,
     unnest(ARRAY['dc1', 'dc2']) dc;
\endif

\if :is_day
SET maintenance_work_mem = '256MB';
SELECT greatest(:first::bigint, :day::bigint) AS lo,
       least(:last::bigint, :day::bigint + 86400000 - 600000) AS hi,
       :day::bigint + 86400000 AS day_end,
       'audit_window_p' || to_char(to_timestamp(:day / 1000) AT TIME ZONE 'UTC', 'YYYYMMDD') AS w,
       'audit_window_bucket_p' || to_char(to_timestamp(:day / 1000) AT TIME ZONE 'UTC', 'YYYYMMDD') AS b
\gset
BEGIN;
ALTER TABLE audit_window DETACH PARTITION :w;
DROP TABLE :w;
CREATE TABLE :w (LIKE audit_window INCLUDING DEFAULTS);
ALTER TABLE audit_window_bucket DETACH PARTITION :b;
DROP TABLE :b;
CREATE TABLE :b (LIKE audit_window_bucket INCLUDING DEFAULTS);
COMMIT;
INSERT INTO :w (topic, tier, datacenter, window_start_ms, window_end_ms, count, bytes,
    no_time_count, malformed_count, out_of_bounds_count, checksum, latency_zero_count,
    latency_negative_count, latency_max_ms, increments, first_received_at_ms, last_received_at_ms)
SELECT format('topic-%s', lpad(t::text, 5, '0')), tier, dc, w, w + 600000,
       c, c * 120, 0, 0, 0, c * 1000003, 0, 0, 2100, 1,
       LEAST(w + 660000, :now_ms), LEAST(w + 660000, :now_ms)
FROM generate_series(0, :topics - 1) t,
     generate_series(:lo::bigint, :hi::bigint, 600000) w,
     unnest(ARRAY['producer', 'regional', 'aggregate']) tier,
     unnest(ARRAY['dc1', 'dc2']) dc,
     LATERAL (SELECT (1000 + (t * 31 + w / 600000) % 500)
                     - CASE WHEN tier = 'aggregate' AND (t * 7919 + w / 600000 + length(dc)) % 97 = 0
                            THEN 5 ELSE 0 END AS c) x;
INSERT INTO :b (topic, window_start_ms, window_id, bucket, count)
SELECT topic, window_start_ms, id, 230, count FROM :w;
ALTER TABLE :w ADD PRIMARY KEY (topic, window_start_ms, tier, datacenter),
    ADD CONSTRAINT seed_day CHECK (window_start_ms >= :day::bigint AND window_start_ms < :day_end::bigint);
CREATE INDEX ON :w (window_start_ms, topic);
CREATE INDEX ON :w (last_received_at_ms);
ALTER TABLE :b ADD PRIMARY KEY (topic, window_start_ms, window_id, bucket),
    ADD CONSTRAINT seed_day CHECK (window_start_ms >= :day::bigint AND window_start_ms < :day_end::bigint);
VACUUM ANALYZE :w;
VACUUM ANALYZE :b;
BEGIN;
ALTER TABLE audit_window ATTACH PARTITION :w FOR VALUES FROM (:day) TO (:day_end);
ALTER TABLE audit_window_bucket ATTACH PARTITION :b FOR VALUES FROM (:day) TO (:day_end);
ALTER TABLE :w DROP CONSTRAINT seed_day;
ALTER TABLE :b DROP CONSTRAINT seed_day;
COMMIT;
\endif

\if :is_finish
ANALYZE;
\endif
