-- Issue 24: verdicts on evidence. Per (window, partition) the latest record time the
-- upstream counted there, per window the latest observation time of its increments,
-- and per progress partition the latest record time the auditor read and whether its
-- records carry LogAppendTime. Additive, nullable or with a constant default (no
-- table rewrite; the day partitions take the columns from their parent): rows
-- written before, and messages of older emitters, are "unknown", judged as before
-- (docs/web.md, Verdicts). audit_message carries the staged increments' values until
-- the roll-up adds them up.
ALTER TABLE audit_window ADD COLUMN max_observed_at_ms bigint;
ALTER TABLE audit_window_offset ADD COLUMN max_record_time_ms bigint;
ALTER TABLE audit_progress
    ADD COLUMN max_record_time_ms bigint,
    ADD COLUMN log_append_time boolean NOT NULL DEFAULT false;
ALTER TABLE audit_message
    ADD COLUMN max_observed_at_ms bigint,
    ADD COLUMN offset_max_record_time bigint[];
