-- kafka-audit store, PostgreSQL. Times are epoch milliseconds (bigint), as on the wire.
-- u64 quantities from the wire are stored as bigint; checksums (full u64 range) are
-- stored as their two's-complement reinterpretation and added with audit_wrap_add.

-- Wrapping (mod 2^64) addition of two u64 values held as bigint. Plain bigint addition
-- raises "bigint out of range" on overflow; this never does. Pure integer arithmetic
-- (no numeric), and only the branch that cannot overflow is evaluated.
CREATE FUNCTION audit_wrap_add(a bigint, b bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT CASE
    WHEN b > 0 AND a > 9223372036854775807 - b
      THEN (a - 9223372036854775807 - 1) + (b - 9223372036854775807 - 1)
    WHEN b < 0 AND a < (-9223372036854775807 - 1) - b
      THEN (a + 9223372036854775807 + 1) + (b + 9223372036854775807 + 1)
    ELSE a + b
  END
$$;

-- Every audit message ever accepted, by UUID: the deduplication record (first seen
-- wins) and an audit trail of who reported what. kind: 0 = increment, 1 = progress.
CREATE TABLE audit_message (
    uuid            uuid     PRIMARY KEY,
    kind            smallint NOT NULL,
    topic           text     NOT NULL,
    tier            text     NOT NULL,
    datacenter      text     NOT NULL,
    host            text     NOT NULL,
    window_start_ms bigint,
    emitted_at_ms   bigint   NOT NULL,
    received_at_ms  bigint   NOT NULL,
    count           bigint,
    checksum        bigint
);
-- Rows arrive in received order, so a BRIN index finds old ones for retention at
-- almost no cost on the ingest path.
CREATE INDEX audit_message_received_brin ON audit_message USING brin (received_at_ms);

-- Sum of all first-seen increments per (topic, tier, datacenter, window).
CREATE TABLE audit_window (
    id                     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
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
    CONSTRAINT audit_window_key UNIQUE (topic, window_start_ms, tier, datacenter)
);
-- window range across all topics (anomaly scans, retention)
CREATE INDEX audit_window_range ON audit_window (window_start_ms, topic);

-- Latency histogram buckets of a window, one row per bucket index: SQL merges them
-- with sum(count) ... GROUP BY bucket. No foreign key: it would cost a lookup and a
-- row lock per bucket on the ingest path; retention deletes children with the window.
CREATE TABLE audit_window_bucket (
    window_id bigint  NOT NULL,
    bucket    integer NOT NULL,
    count     bigint  NOT NULL,
    PRIMARY KEY (window_id, bucket)
);

-- Lowest and highest offset counted per partition of the audited topic, per window.
CREATE TABLE audit_window_offset (
    window_id    bigint  NOT NULL,
    partition_id integer NOT NULL,
    min_offset   bigint  NOT NULL,
    max_offset   bigint  NOT NULL,
    PRIMARY KEY (window_id, partition_id)
);

-- Latest progress watermark per audited partition and tier (by emitted_at).
CREATE TABLE audit_progress (
    topic          text    NOT NULL,
    tier           text    NOT NULL,
    datacenter     text    NOT NULL,
    partition_id   integer NOT NULL,
    host           text    NOT NULL,
    next_offset    bigint  NOT NULL,
    record_time_ms bigint,
    lag            bigint,
    emitted_at_ms  bigint  NOT NULL,
    received_at_ms bigint  NOT NULL,
    PRIMARY KEY (topic, tier, datacenter, partition_id)
);

-- Last time each emitter (auditor instance) was heard from: stalled-auditor detection.
CREATE TABLE audit_emitter (
    tier                text   NOT NULL,
    datacenter          text   NOT NULL,
    host                text   NOT NULL,
    last_emitted_at_ms  bigint NOT NULL,
    last_received_at_ms bigint NOT NULL,
    messages            bigint NOT NULL,
    PRIMARY KEY (tier, datacenter, host)
);

-- Messages that failed validation: skipped, never counted, kept with the reason.
CREATE TABLE audit_reject (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    received_at_ms bigint NOT NULL,
    source         text   NOT NULL,
    reason         text   NOT NULL,
    payload        text   NOT NULL
);
CREATE INDEX audit_reject_received_brin ON audit_reject USING brin (received_at_ms);
