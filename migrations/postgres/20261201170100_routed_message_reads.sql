-- Reads of audit_message by key that Citus routes to the shards holding them
-- (issue #32).
--
-- The collector's UUID probe (`uuid = ANY(batch)`), the roll-up's read of staged
-- increments and serve's read of the roll-up queue did not name the distribution
-- column: on Citus every one went to all shards (32 by default), each shard probing
-- every UUID of the batch (measured: ~1 s per batch of 10 000 on two loopback
-- workers). audit_messages_by_key returns the rows of audit_message whose uuid is one
-- of `uuids`, whose topic is one of `topics` (`topics[i]` is the topic of `uuids[i]`)
-- and whose partition_ms is in [from_ms, to_ms]: on plain PostgreSQL with one query;
-- where Citus distributes audit_message, with one query per shard that holds some of
-- the topics, each naming only its topics and their UUIDs, so Citus routes it to that
-- one shard. The rows are a superset of the exact keys (a UUID of one topic also
-- matches a row of another topic of the same shard): callers match keys exactly.
CREATE FUNCTION audit_messages_by_key(uuids uuid[], topics text[], from_ms bigint, to_ms bigint)
RETURNS SETOF audit_message
LANGUAGE plpgsql STABLE AS $$
DECLARE
    distributed boolean := false;
    shard record;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        -- pg_dist_partition exists only with Citus: looked up dynamically.
        EXECUTE $q$SELECT EXISTS (SELECT 1 FROM pg_dist_partition
                                 WHERE logicalrelid = 'audit_message'::regclass
                                   AND partmethod = 'h')$q$
            INTO distributed;
    END IF;
    IF NOT distributed THEN
        RETURN QUERY SELECT * FROM audit_message m
            WHERE m.uuid = ANY(uuids) AND m.topic = ANY(topics)
              AND m.partition_ms >= from_ms AND m.partition_ms <= to_ms;
        RETURN;
    END IF;
    FOR shard IN EXECUTE $q$SELECT array_agg(k.uuid) AS uuids, array_agg(DISTINCT k.topic) AS topics
                           FROM unnest($1, $2) AS k(uuid, topic)
                           GROUP BY get_shard_id_for_distribution_column('audit_message', k.topic)$q$
        USING uuids, topics
    LOOP
        RETURN QUERY SELECT * FROM audit_message m
            WHERE m.uuid = ANY(shard.uuids) AND m.topic = ANY(shard.topics)
              AND m.partition_ms >= from_ms AND m.partition_ms <= to_ms;
    END LOOP;
END
$$;
