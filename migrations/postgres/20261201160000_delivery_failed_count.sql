-- Issue #26: a producer tier (the librdkafka interceptor plugin) counts the messages it
-- was told it could not deliver apart from `count`: its known loss, next to the
-- silent loss the next tier's count shows. Additive with a constant default (no table
-- rewrite): rows written before it, and every other emitter's messages, read 0.
ALTER TABLE audit_window ADD COLUMN delivery_failed_count bigint NOT NULL DEFAULT 0;
ALTER TABLE audit_message ADD COLUMN delivery_failed_count bigint NOT NULL DEFAULT 0;
