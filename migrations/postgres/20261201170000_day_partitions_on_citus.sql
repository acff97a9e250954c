-- Day partitions on a store distributed with Citus (issue #32).
--
-- audit_ensure_day_partitions moves the rows the default partition holds for a new
-- day into the new table before attaching it. On Citus the attach distributes the
-- table and copies those rows into its shards, but leaves them on the coordinator's
-- disk as well (invisible: "the local data in the table is no longer visible, but is
-- still on disk"). The function now truncates that leftover in the same transaction
-- (truncate_local_data_after_distributing_table), when Citus distributed the table.
-- On plain PostgreSQL nothing changes. The caller (PgStore::prepare_partitions)
-- creates one day per transaction, so that the locks of a day's creation are held
-- for that day only.
CREATE OR REPLACE FUNCTION audit_ensure_day_partitions(from_ms bigint, to_ms bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day_ms  constant bigint := 86400000;
    day     bigint := from_ms - (((from_ms % 86400000) + 86400000) % 86400000);
    parent  text;
    key     text;
    part    text;
    moved   bigint;
    citus   boolean := EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus');
    distributed boolean;
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
                GET DIAGNOSTICS moved = ROW_COUNT;
                EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)',
                               parent, part, day, day + day_ms);
                -- pg_dist_partition exists only with Citus: looked up dynamically.
                IF citus AND moved > 0 THEN
                    EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = $1::regclass)'
                        INTO distributed USING part;
                    IF distributed THEN
                        PERFORM truncate_local_data_after_distributing_table(part::regclass);
                    END IF;
                END IF;
                created := created + 1;
            END IF;
        END LOOP;
        day := day + day_ms;
    END LOOP;
    RETURN created;
END
$$;
