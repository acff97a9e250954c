-- Issue #26: a producer tier counts the messages it was told it could not deliver
-- apart from `count`. Rows written before it read 0.
ALTER TABLE audit_window ADD COLUMN delivery_failed_count INTEGER NOT NULL DEFAULT 0;
