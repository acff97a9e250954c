-- Issue 24: verdicts on evidence. Per (window, partition) the latest record time the
-- upstream counted there, per window the latest observation time of its increments,
-- and per progress partition the latest record time the auditor read and whether its
-- records carry LogAppendTime. All nullable (or false): rows written before, and
-- messages of older emitters, are "unknown", judged as before (docs/web.md, Verdicts).
ALTER TABLE audit_window ADD COLUMN max_observed_at_ms INTEGER;
ALTER TABLE audit_window_offset ADD COLUMN max_record_time_ms INTEGER;
ALTER TABLE audit_progress ADD COLUMN max_record_time_ms INTEGER;
ALTER TABLE audit_progress ADD COLUMN log_append_time INTEGER NOT NULL DEFAULT 0;
