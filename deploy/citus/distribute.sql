-- Distributes the kafka-audit store by topic on a Citus cluster (docs/operations.md,
-- "Distributing by topic with Citus"). Run it on the coordinator's database after
-- `kafka-audit migrate`, with the workers added:
--   psql "$URL" -v ON_ERROR_STOP=1 -f deploy/citus/distribute.sql
-- Running it again changes nothing: a table already distributed is left as it is.
CREATE EXTENSION IF NOT EXISTS citus;

-- Distributed by topic, co-located, so that a topic's windows, buckets, offsets,
-- messages and progress live on one worker and their joins stay on it. Partitions
-- (existing and created later by audit_ensure_day_partitions) are distributed with
-- their parent.
SELECT create_distributed_table('audit_window', 'topic')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = 'audit_window'::regclass);
SELECT create_distributed_table(t::regclass, 'topic', colocate_with => 'audit_window')
FROM unnest(ARRAY['audit_window_bucket', 'audit_window_offset', 'audit_message',
                  'audit_progress', 'audit_topic']) WITH ORDINALITY AS x(t, n)
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = t::regclass)
ORDER BY n;

-- Small tables every worker may need: a copy on every node.
SELECT create_reference_table(t::regclass)
FROM unnest(ARRAY['audit_emitter', 'web_alert_open', 'web_proven_loss']) AS x(t)
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = t::regclass);

-- audit_pending (the roll-up queue, taken by ctid with SKIP LOCKED) and audit_reject
-- (a reject may have no topic) stay local tables on the coordinator.
