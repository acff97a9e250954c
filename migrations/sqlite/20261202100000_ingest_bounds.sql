-- The deployment's window size, fixed by configuration or at the first increment the
-- collector accepts: increments of another size are rejected at ingest, and serve
-- judges in this size when [topology] window is not set (one forged increment of
-- another size can no longer change which windows are judged).
CREATE TABLE audit_window_size (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    window_ms   INTEGER  NOT NULL CHECK (window_ms > 0),
    fixed_at_ms INTEGER  NOT NULL,
    -- 'configuration', 'first increment' or 'newest window at upgrade'
    fixed_by    TEXT     NOT NULL
);

-- A store written before this table: the size serve learned until now (the newest
-- stored window's), so an upgrade judges as before.
INSERT INTO audit_window_size (id, window_ms, fixed_at_ms, fixed_by)
SELECT 1, window_end_ms - window_start_ms, CAST(strftime('%s', 'now') AS INTEGER) * 1000, 'newest window at upgrade'
FROM audit_window ORDER BY window_start_ms DESC, window_end_ms DESC LIMIT 1;

-- Retention of progress and emitters deletes by last receipt.
CREATE INDEX audit_progress_received ON audit_progress (received_at_ms);
CREATE INDEX audit_emitter_received ON audit_emitter (last_received_at_ms);
