-- web (issue #28): losses the replicator's evidence proved before their window was
-- final, with the proof's reason, so that a restarted `serve` keeps judging them lost
-- whatever arrives later (docs/web.md, "Replication evidence"). serve deletes the rows
-- of windows that left its horizon.
CREATE TABLE web_proven_loss (
    window_start_ms INTEGER NOT NULL,
    topic           TEXT NOT NULL,
    upstream        TEXT NOT NULL,
    downstream      TEXT NOT NULL,
    datacenter      TEXT NOT NULL,
    reason          TEXT NOT NULL,
    proven_at_ms    INTEGER NOT NULL,
    PRIMARY KEY (window_start_ms, topic, upstream, downstream, datacenter)
);
