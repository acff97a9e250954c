-- Time partitions and a topic in every key (issue #17).
--
-- The tables that grow with traffic (audit_window, audit_window_bucket,
-- audit_window_offset, audit_message) become declaratively partitioned by day on a
-- time taken from the audit message itself, so that retention drops whole days
-- (`DROP TABLE` of a partition: no row-by-row DELETE, almost no WAL) and so that a
-- re-delivered message always meets its first copy in the same partition:
--   - window tables: window_start_ms;
--   - audit_message: partition_ms = the window start of an increment, the emission
--     time of a progress report. A UUID is therefore remembered as long as the
--     window it counts into (with retention.messages >= retention.windows, a message
--     whose UUID is forgotten could only count into a window already deleted).
-- Every primary key holds `topic`, so that the schema can be distributed by topic
-- (Citus `create_distributed_table(..., 'topic')`, see docs/operations.md); the
-- deduplication key becomes (uuid, topic, partition_ms): PostgreSQL requires the
-- partition column in a partitioned table's unique keys.
--
-- Day partitions are named <table>_pYYYYMMDD (UTC) and created ahead by
-- audit_ensure_day_partitions (the collector calls it at start and periodically).
-- A row whose time has no partition (a window far in the future or past, from a
-- skewed or hostile auditor) goes to <table>_default: it is stored and counted like
-- any other, never refused; creating a day later moves such rows into it, and
-- retention deletes old ones from the default partition in batches.
--
-- This migration converts an existing store: the old tables are renamed, copied into
-- the partitioned ones and dropped, in the migration's one transaction. It needs
-- about the store's size again in free disk while it runs.

-- 1. Move the old tables aside, freeing the names of their indexes and constraints.
ALTER TABLE audit_window RENAME TO audit_window_v1;
ALTER TABLE audit_window_v1 RENAME CONSTRAINT audit_window_pkey TO audit_window_v1_pkey;
ALTER TABLE audit_window_v1 DROP CONSTRAINT audit_window_key;
DROP INDEX audit_window_range;
DROP INDEX audit_window_last_received;
ALTER TABLE audit_window_bucket RENAME TO audit_window_bucket_v1;
ALTER TABLE audit_window_bucket_v1 RENAME CONSTRAINT audit_window_bucket_pkey TO audit_window_bucket_v1_pkey;
ALTER TABLE audit_window_offset RENAME TO audit_window_offset_v1;
ALTER TABLE audit_window_offset_v1 RENAME CONSTRAINT audit_window_offset_pkey TO audit_window_offset_v1_pkey;
ALTER TABLE audit_message RENAME TO audit_message_v1;
ALTER TABLE audit_message_v1 RENAME CONSTRAINT audit_message_pkey TO audit_message_v1_pkey;
DROP INDEX audit_message_received_brin;
ALTER TABLE audit_pending RENAME TO audit_pending_v1;

-- 2. The partitioned tables.

-- Window ids come from a sequence (an identity column cannot be declared on a
-- partitioned table before PostgreSQL 17). They are unique by construction; the
-- buckets and offsets of a window refer to it by (topic, window_start_ms, id).
CREATE SEQUENCE audit_window_ids AS bigint;

CREATE TABLE audit_window (
    id                     bigint NOT NULL DEFAULT nextval('audit_window_ids'),
    topic                  text   NOT NULL,
    tier                   text   NOT NULL,
    datacenter             text   NOT NULL,
    window_start_ms        bigint NOT NULL,
    window_end_ms          bigint NOT NULL,
    count                  bigint NOT NULL,
    bytes                  bigint NOT NULL,
    no_time_count          bigint NOT NULL,
    malformed_count        bigint NOT NULL,
    out_of_bounds_count    bigint NOT NULL,
    checksum               bigint NOT NULL,
    latency_zero_count     bigint NOT NULL,
    latency_negative_count bigint NOT NULL,
    latency_max_ms         bigint NOT NULL,
    increments             bigint NOT NULL,
    first_received_at_ms   bigint NOT NULL,
    last_received_at_ms    bigint NOT NULL,
    -- per topic and window range (the web's topic page); also the upsert key
    CONSTRAINT audit_window_key PRIMARY KEY (topic, window_start_ms, tier, datacenter)
) PARTITION BY RANGE (window_start_ms);
ALTER SEQUENCE audit_window_ids OWNED BY audit_window.id;
-- window range across all topics (anomaly scans)
CREATE INDEX audit_window_range ON audit_window (window_start_ms, topic);
-- web (issue #6): windows that received late increments since the previous cycle
CREATE INDEX audit_window_last_received ON audit_window (last_received_at_ms);

CREATE TABLE audit_window_bucket (
    topic           text    NOT NULL,
    window_start_ms bigint  NOT NULL,
    window_id       bigint  NOT NULL,
    bucket          integer NOT NULL,
    count           bigint  NOT NULL,
    PRIMARY KEY (topic, window_start_ms, window_id, bucket)
) PARTITION BY RANGE (window_start_ms);

CREATE TABLE audit_window_offset (
    topic           text    NOT NULL,
    window_start_ms bigint  NOT NULL,
    window_id       bigint  NOT NULL,
    partition_id    integer NOT NULL,
    min_offset      bigint  NOT NULL,
    max_offset      bigint  NOT NULL,
    PRIMARY KEY (topic, window_start_ms, window_id, partition_id)
) PARTITION BY RANGE (window_start_ms);

-- uuid leads the key: the collector probes a batch's UUIDs with `uuid = ANY(...)`
-- (one index descent each), restricted to the batch's partition_ms values.
CREATE TABLE audit_message (
    uuid                   uuid     NOT NULL,
    kind                   smallint NOT NULL,
    topic                  text     NOT NULL,
    tier                   text     NOT NULL,
    datacenter             text     NOT NULL,
    host                   text     NOT NULL,
    window_start_ms        bigint,
    emitted_at_ms          bigint   NOT NULL,
    received_at_ms         bigint   NOT NULL,
    count                  bigint,
    checksum               bigint,
    window_end_ms          bigint,
    bytes                  bigint,
    no_time_count          bigint,
    malformed_count        bigint,
    out_of_bounds_count    bigint,
    latency_zero_count     bigint,
    latency_negative_count bigint,
    latency_max_ms         bigint,
    bucket_index           integer[],
    bucket_count           bigint[],
    offset_partition       integer[],
    offset_min             bigint[],
    offset_max             bigint[],
    partition_ms           bigint   NOT NULL,
    PRIMARY KEY (uuid, topic, partition_ms)
) PARTITION BY RANGE (partition_ms);

-- The roll-up queue: rows live from staging to the next roll-up (normally under a
-- second), so it is not partitioned; it carries the message's whole key so that the
-- roll-up reads each message from its own partition.
CREATE TABLE audit_pending (
    uuid         uuid   NOT NULL,
    topic        text   NOT NULL,
    partition_ms bigint NOT NULL
);

CREATE TABLE audit_window_default PARTITION OF audit_window DEFAULT;
CREATE TABLE audit_window_bucket_default PARTITION OF audit_window_bucket DEFAULT;
CREATE TABLE audit_window_offset_default PARTITION OF audit_window_offset DEFAULT;
CREATE TABLE audit_message_default PARTITION OF audit_message DEFAULT;

-- Columns that a later additive migration gave the old tables before this one ran
-- (sqlx applies a missing older migration after newer ones) are carried over as they
-- are, with their type, default and NOT NULL.
DO $$
DECLARE
    pair text[];
    col  record;
BEGIN
    FOREACH pair SLICE 1 IN ARRAY ARRAY[['audit_window_v1', 'audit_window'],
                                        ['audit_message_v1', 'audit_message']] LOOP
        FOR col IN
            SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull,
                   pg_get_expr(d.adbin, d.adrelid) AS def
            FROM pg_attribute a
            LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
            WHERE a.attrelid = pair[1]::regclass AND a.attnum > 0 AND NOT a.attisdropped
              AND NOT EXISTS (SELECT 1 FROM pg_attribute n
                              WHERE n.attrelid = pair[2]::regclass AND n.attname = a.attname
                                AND NOT n.attisdropped)
            ORDER BY a.attnum
        LOOP
            EXECUTE format('ALTER TABLE %I ADD COLUMN %I %s%s%s', pair[2], col.attname, col.type,
                           CASE WHEN col.def IS NOT NULL THEN ' DEFAULT ' || col.def ELSE '' END,
                           CASE WHEN col.attnotnull THEN ' NOT NULL' ELSE '' END);
        END LOOP;
    END LOOP;
END
$$;

-- 3. Partition maintenance.

-- Creates the missing day partitions (UTC days) of every time-partitioned table for
-- the days from the one holding from_ms to the one holding to_ms; returns how many
-- it created. Rows the default partition holds for a new day are moved into it, so
-- it never fails because a skewed auditor wrote there first. Concurrent callers
-- wait for each other.
CREATE FUNCTION audit_ensure_day_partitions(from_ms bigint, to_ms bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day_ms  constant bigint := 86400000;
    day     bigint := from_ms - (((from_ms % 86400000) + 86400000) % 86400000);
    parent  text;
    key     text;
    part    text;
    created integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('audit_ensure_day_partitions'));
    WHILE day <= to_ms LOOP
        FOREACH parent IN ARRAY ARRAY['audit_window', 'audit_window_bucket',
                                      'audit_window_offset', 'audit_message'] LOOP
            key := CASE parent WHEN 'audit_message' THEN 'partition_ms' ELSE 'window_start_ms' END;
            part := parent || '_p' || to_char(to_timestamp(day / 1000) AT TIME ZONE 'UTC', 'YYYYMMDD');
            IF to_regclass(part) IS NULL THEN
                EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS)', part, parent);
                EXECUTE format('WITH moved AS (DELETE FROM %I WHERE %I >= $1 AND %I < $2 RETURNING *)
                                INSERT INTO %I SELECT * FROM moved',
                               parent || '_default', key, key, part)
                    USING day, day + day_ms;
                EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)',
                               parent, part, day, day + day_ms);
                created := created + 1;
            END IF;
        END LOOP;
        day := day + day_ms;
    END LOOP;
    RETURN created;
END
$$;

-- Retention: drops the day partitions whose whole day is before the cutoff (window
-- tables: window_cutoff_ms; audit_message: message_cutoff_ms); returns how many.
-- A day is dropped once its end has passed the cutoff, so rows live between the
-- retention and the retention plus one day. The default partitions are left to
-- batched deletes.
CREATE FUNCTION audit_drop_day_partitions(window_cutoff_ms bigint, message_cutoff_ms bigint)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    r       record;
    cutoff  bigint;
    dropped integer := 0;
BEGIN
    FOR r IN
        SELECT c.oid::regclass AS part, i.inhparent AS parent,
               (regexp_match(pg_get_expr(c.relpartbound, c.oid),
                             'TO \(''?(-?[0-9]+)''?\)'))[1]::bigint AS upper_ms
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent IN ('audit_window'::regclass, 'audit_window_bucket'::regclass,
                              'audit_window_offset'::regclass, 'audit_message'::regclass)
        ORDER BY upper_ms
    LOOP
        cutoff := CASE WHEN r.parent = 'audit_message'::regclass THEN message_cutoff_ms
                       ELSE window_cutoff_ms END;
        IF r.upper_ms IS NOT NULL AND r.upper_ms <= cutoff THEN
            EXECUTE format('DROP TABLE %s', r.part);
            dropped := dropped + 1;
        END IF;
    END LOOP;
    RETURN dropped;
END
$$;

-- 4. Copy the old store. Days with data get their partitions (within a year back and
-- a week ahead; rows outside go to the default partitions), and today and tomorrow.
SELECT audit_ensure_day_partitions(d, d)
FROM (SELECT DISTINCT window_start_ms - (window_start_ms % 86400000) AS d FROM audit_window_v1
      UNION
      SELECT DISTINCT coalesce(window_start_ms, emitted_at_ms)
                      - (coalesce(window_start_ms, emitted_at_ms) % 86400000)
      FROM audit_message_v1) days
WHERE d >= (extract(epoch FROM now()) * 1000)::bigint - 366 * 86400000::bigint
  AND d <= (extract(epoch FROM now()) * 1000)::bigint + 7 * 86400000::bigint
ORDER BY d;
SELECT audit_ensure_day_partitions((extract(epoch FROM now()) * 1000)::bigint,
                                   (extract(epoch FROM now()) * 1000)::bigint + 86400000);

-- Every column of the old tables (the ones above and any a later migration added).
DO $$
DECLARE
    cols text;
BEGIN
    SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO cols
    FROM pg_attribute WHERE attrelid = 'audit_window_v1'::regclass AND attnum > 0 AND NOT attisdropped;
    EXECUTE format('INSERT INTO audit_window (%s) SELECT %s FROM audit_window_v1', cols, cols);
    SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO cols
    FROM pg_attribute WHERE attrelid = 'audit_message_v1'::regclass AND attnum > 0 AND NOT attisdropped;
    EXECUTE format('INSERT INTO audit_message (%s, partition_ms)
                    SELECT %s, coalesce(window_start_ms, emitted_at_ms) FROM audit_message_v1',
                   cols, cols);
END
$$;
SELECT setval('audit_window_ids', coalesce(max(id), 0) + 1, false) FROM audit_window_v1;

-- Buckets and offsets whose window retention already deleted were invisible; they
-- are not carried over.
INSERT INTO audit_window_bucket (topic, window_start_ms, window_id, bucket, count)
SELECT w.topic, w.window_start_ms, b.window_id, b.bucket, b.count
FROM audit_window_bucket_v1 b JOIN audit_window_v1 w ON w.id = b.window_id;

INSERT INTO audit_window_offset (topic, window_start_ms, window_id, partition_id, min_offset, max_offset)
SELECT w.topic, w.window_start_ms, o.window_id, o.partition_id, o.min_offset, o.max_offset
FROM audit_window_offset_v1 o JOIN audit_window_v1 w ON w.id = o.window_id;

-- A queued UUID whose message retention already deleted had nothing to add.
INSERT INTO audit_pending (uuid, topic, partition_ms)
SELECT p.uuid, m.topic, coalesce(m.window_start_ms, m.emitted_at_ms)
FROM audit_pending_v1 p JOIN audit_message_v1 m ON m.uuid = p.uuid;

DROP TABLE audit_pending_v1, audit_message_v1, audit_window_offset_v1, audit_window_bucket_v1,
           audit_window_v1;

ANALYZE audit_window, audit_window_bucket, audit_window_offset, audit_message, audit_pending;
