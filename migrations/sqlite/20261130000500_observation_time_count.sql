-- Issue #14 B1: messages with no tier-invariant time (no usable field, header or
-- Kafka record timestamp) are windowed by the auditor's observation time and counted
-- apart from `count`, never compared across tiers. Rows written before it read 0.
ALTER TABLE audit_window ADD COLUMN observation_time_count INTEGER NOT NULL DEFAULT 0;
