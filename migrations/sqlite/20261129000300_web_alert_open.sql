-- web (issue #6): alerts delivered and not yet resolved, per channel, so that a
-- restarted `serve` neither triggers them again nor forgets to resolve them.
CREATE TABLE web_alert_open (
    channel      text   NOT NULL,
    dedup_key    text   NOT NULL,
    alert        text   NOT NULL, -- the alert as JSON
    opened_at_ms bigint NOT NULL,
    PRIMARY KEY (channel, dedup_key)
);
