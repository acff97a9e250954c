-- Staged ingestion (PostgreSQL). The collector's hot path stores each first-seen
-- message whole in audit_message with one binary COPY per batch and lists the
-- increments still to be added to their windows in audit_pending; a roll-up step
-- moves them into audit_window / audit_window_bucket / audit_window_offset in bulk
-- (deleting from audit_pending in the same transaction, so each is added exactly
-- once). The more increments wait, the more share a window in one roll-up, so the
-- roll-up gets cheaper per increment exactly when it falls behind.
ALTER TABLE audit_message
    ADD COLUMN window_end_ms          bigint,
    ADD COLUMN bytes                  bigint,
    ADD COLUMN no_time_count          bigint,
    ADD COLUMN malformed_count        bigint,
    ADD COLUMN out_of_bounds_count    bigint,
    ADD COLUMN latency_zero_count     bigint,
    ADD COLUMN latency_negative_count bigint,
    ADD COLUMN latency_max_ms         bigint,
    ADD COLUMN bucket_index           integer[],
    ADD COLUMN bucket_count           bigint[],
    ADD COLUMN offset_partition       integer[],
    ADD COLUMN offset_min             bigint[],
    ADD COLUMN offset_max             bigint[];

-- Increments stored but not yet rolled up. No index: the roll-up takes any rows
-- (FOR UPDATE SKIP LOCKED by ctid), so inserting costs only a heap append.
CREATE TABLE audit_pending (
    uuid uuid NOT NULL
);
