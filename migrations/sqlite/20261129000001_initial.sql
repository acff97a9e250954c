-- kafka-audit store, SQLite (embedded default). Same model as migrations/postgres.
-- Times are epoch milliseconds. u64 checksums are stored as their two's-complement
-- i64 reinterpretation; the store adds them with a wrap-safe expression because
-- SQLite turns an overflowing integer addition into a REAL.

CREATE TABLE audit_message (
    uuid            BLOB    NOT NULL PRIMARY KEY,
    kind            INTEGER NOT NULL,
    topic           TEXT    NOT NULL,
    tier            TEXT    NOT NULL,
    datacenter      TEXT    NOT NULL,
    host            TEXT    NOT NULL,
    window_start_ms INTEGER,
    emitted_at_ms   INTEGER NOT NULL,
    received_at_ms  INTEGER NOT NULL,
    count           INTEGER,
    checksum        INTEGER
) WITHOUT ROWID;
CREATE INDEX audit_message_received ON audit_message (received_at_ms);

CREATE TABLE audit_window (
    id                     INTEGER PRIMARY KEY,
    topic                  TEXT    NOT NULL,
    tier                   TEXT    NOT NULL,
    datacenter             TEXT    NOT NULL,
    window_start_ms        INTEGER NOT NULL,
    window_end_ms          INTEGER NOT NULL,
    count                  INTEGER NOT NULL,
    bytes                  INTEGER NOT NULL,
    no_time_count          INTEGER NOT NULL,
    malformed_count        INTEGER NOT NULL,
    out_of_bounds_count    INTEGER NOT NULL,
    checksum               INTEGER NOT NULL,
    latency_zero_count     INTEGER NOT NULL,
    latency_negative_count INTEGER NOT NULL,
    latency_max_ms         INTEGER NOT NULL,
    increments             INTEGER NOT NULL,
    first_received_at_ms   INTEGER NOT NULL,
    last_received_at_ms    INTEGER NOT NULL,
    UNIQUE (topic, window_start_ms, tier, datacenter)
);
CREATE INDEX audit_window_range ON audit_window (window_start_ms, topic);

CREATE TABLE audit_window_bucket (
    window_id INTEGER NOT NULL,
    bucket    INTEGER NOT NULL,
    count     INTEGER NOT NULL,
    PRIMARY KEY (window_id, bucket)
) WITHOUT ROWID;

CREATE TABLE audit_window_offset (
    window_id    INTEGER NOT NULL,
    partition_id INTEGER NOT NULL,
    min_offset   INTEGER NOT NULL,
    max_offset   INTEGER NOT NULL,
    PRIMARY KEY (window_id, partition_id)
) WITHOUT ROWID;

CREATE TABLE audit_progress (
    topic          TEXT    NOT NULL,
    tier           TEXT    NOT NULL,
    datacenter     TEXT    NOT NULL,
    partition_id   INTEGER NOT NULL,
    host           TEXT    NOT NULL,
    next_offset    INTEGER NOT NULL,
    record_time_ms INTEGER,
    lag            INTEGER,
    emitted_at_ms  INTEGER NOT NULL,
    received_at_ms INTEGER NOT NULL,
    PRIMARY KEY (topic, tier, datacenter, partition_id)
);

CREATE TABLE audit_emitter (
    tier                TEXT    NOT NULL,
    datacenter          TEXT    NOT NULL,
    host                TEXT    NOT NULL,
    last_emitted_at_ms  INTEGER NOT NULL,
    last_received_at_ms INTEGER NOT NULL,
    messages            INTEGER NOT NULL,
    PRIMARY KEY (tier, datacenter, host)
);

CREATE TABLE audit_reject (
    id             INTEGER PRIMARY KEY,
    received_at_ms INTEGER NOT NULL,
    source         TEXT    NOT NULL,
    reason         TEXT    NOT NULL,
    payload        TEXT    NOT NULL
);
CREATE INDEX audit_reject_received ON audit_reject (received_at_ms);
