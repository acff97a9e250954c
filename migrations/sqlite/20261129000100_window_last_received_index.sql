-- web (issue #6): the evaluator re-judges windows that received late increments since
-- its previous cycle; without this index that is a scan of every window in the horizon.
CREATE INDEX audit_window_last_received ON audit_window (last_received_at_ms);
