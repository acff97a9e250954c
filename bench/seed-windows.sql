-- Window rows for the web benchmarks, set-based (one INSERT ... SELECT generate_series per
-- table): TOPICS topics x 3 tiers (producer, regional, aggregate) x 2 datacenters at
-- 10-minute windows from FIRST to LAST (epoch ms, window starts, inclusive), each with one
-- latency bucket. About 1 % of (topic, window, datacenter) lose 5 messages between regional
-- and aggregate. Progress rows for every auditor, reported at NOW.
--
--   psql -v topics=1000 -v first=... -v last=... -v now_ms=... -f bench/seed-windows.sql
--
-- Used by bench/web-anomalies.sh and bench/store-scale.sh: the one place that knows the
-- schema of the seeded tables.
\set ON_ERROR_STOP 1
-- On the day-partitioned schema every seeded day gets its partition first (as the
-- collector prepares them); otherwise every row would land in the DEFAULT partition.
SELECT audit_ensure_day_partitions(:first::bigint, :now_ms::bigint + 86400000);
INSERT INTO audit_window (topic, tier, datacenter, window_start_ms, window_end_ms, count, bytes,
    no_time_count, malformed_count, out_of_bounds_count, checksum, latency_zero_count,
    latency_negative_count, latency_max_ms, increments, first_received_at_ms, last_received_at_ms)
SELECT format('topic-%s', lpad(t::text, 5, '0')), tier, dc, w, w + 600000,
       c, c * 120, 0, 0, 0, c * 1000003, 0, 0, 2100, 1,
       LEAST(w + 660000, :now_ms), LEAST(w + 660000, :now_ms)
FROM generate_series(0, :topics - 1) t,
     generate_series(:first::bigint, :last::bigint, 600000) w,
     unnest(ARRAY['producer', 'regional', 'aggregate']) tier,
     unnest(ARRAY['dc1', 'dc2']) dc,
     LATERAL (SELECT (1000 + (t * 31 + w / 600000) % 500)
                     - CASE WHEN tier = 'aggregate' AND (t * 7919 + w / 600000 + length(dc)) % 97 = 0
                            THEN 5 ELSE 0 END AS c) x;
INSERT INTO audit_window_bucket (topic, window_start_ms, window_id, bucket, count)
SELECT topic, window_start_ms, id, 230, count FROM audit_window;
-- The topic list serve's first cycle reads (kept by the roll-up in the collector).
INSERT INTO audit_topic (topic, last_window_start_ms)
SELECT topic, max(window_start_ms) FROM audit_window GROUP BY topic;
INSERT INTO audit_progress (topic, tier, datacenter, partition_id, host, next_offset, record_time_ms,
    lag, emitted_at_ms, received_at_ms)
SELECT format('topic-%s', lpad(t::text, 5, '0')), tier, dc, 0, tier || '-' || dc, 1000000, :now_ms, 0,
       :now_ms, :now_ms
FROM generate_series(0, :topics - 1) t, unnest(ARRAY['regional', 'aggregate']) tier,
     unnest(ARRAY['dc1', 'dc2']) dc;
ANALYZE;
