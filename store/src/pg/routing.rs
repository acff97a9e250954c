//! How `audit_message` rows are read by key, on one PostgreSQL and on Citus.

use sqlx::Postgres;
use uuid::Uuid;

/// How `audit_message` rows are read by key: by their UUIDs (and, routed, their
/// topics: one each) and the span of their `partition_ms`. A span, not `partition_ms
/// = ANY(...)`: two arrays in one index condition make the B-tree descend once per
/// pair (UUIDs × distinct windows); the span prunes to the batch's days (usually one
/// or two) and costs one descent per UUID and day. The rows are a superset of the
/// exact keys: callers match them exactly.
#[derive(Clone, Copy, Debug)]
pub(super) enum MessageReads {
    /// One PostgreSQL: one query on the table by UUID (`$1` UUIDs, `$2..=$3` the span).
    Local,
    /// Citus: `audit_messages_by_key` (migration 20261201170100, `$1` UUIDs, `$2`
    /// their topics, `$3..=$4` the span), one query per shard with only its topics'
    /// UUIDs, each routed to that shard. Not used on one PostgreSQL, where it cost the
    /// probe of a replay about 2× (the rows go through the function's tuplestore, and
    /// a bound array of topics is compared row by row, not hashed).
    Routed,
}

impl MessageReads {
    /// `query` with the keys bound as the variant's SQL takes them.
    pub(super) fn bind_keys<'q, O>(
        self,
        query: sqlx::query::QueryAs<'q, Postgres, O, sqlx::postgres::PgArguments>,
        uuids: &'q [Uuid],
        topics: &'q [&'q str],
    ) -> sqlx::query::QueryAs<'q, Postgres, O, sqlx::postgres::PgArguments> {
        match self {
            MessageReads::Local => query.bind(uuids),
            MessageReads::Routed => query.bind(uuids).bind(topics),
        }
    }

    /// The keys of the messages of a batch already stored (the deduplication probe).
    pub(super) fn probe(self) -> &'static str {
        match self {
            MessageReads::Local => {
                "SELECT uuid, topic, partition_ms FROM audit_message
                 WHERE uuid = ANY($1) AND partition_ms >= $2 AND partition_ms <= $3"
            }
            MessageReads::Routed => {
                "SELECT uuid, topic, partition_ms FROM audit_messages_by_key($1, $2, $3, $4)"
            }
        }
    }

    /// Staged increments whole, for the roll-up.
    pub(super) fn staged(self) -> &'static str {
        static LOCAL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            format!(
                "SELECT {STAGED_COLUMNS} FROM audit_message
                 WHERE uuid = ANY($1) AND partition_ms >= $2 AND partition_ms <= $3 AND kind = 0"
            )
        });
        static ROUTED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            format!(
                "SELECT {STAGED_COLUMNS} FROM audit_messages_by_key($1, $2, $3, $4) WHERE kind = 0"
            )
        });
        match self {
            MessageReads::Local => &LOCAL,
            MessageReads::Routed => &ROUTED,
        }
    }

    /// `(topic, tier, datacenter, window_start_ms)` of the queued increments: `$1` a
    /// topic or NULL, `$2` the first window start.
    pub(super) fn staged_windows(self) -> &'static str {
        match self {
            MessageReads::Local => {
                "SELECT DISTINCT m.topic, m.tier, m.datacenter, m.window_start_ms
                 FROM audit_pending p JOIN audit_message m
                      ON m.uuid = p.uuid AND m.topic = p.topic AND m.partition_ms = p.partition_ms
                 WHERE ($1::text IS NULL OR m.topic = $1) AND m.window_start_ms >= $2"
            }
            // The queue is local (a coordinator table) and short: its keys are read
            // first and their messages looked up by key, routed to the shards of the
            // queued topics; the join above goes to every shard (~420 ms a serve cycle
            // on two workers).
            MessageReads::Routed => {
                "WITH p AS (SELECT uuid, topic, partition_ms FROM audit_pending
                            WHERE $1::text IS NULL OR topic = $1),
                      k AS (SELECT array_agg(uuid) AS uuids, array_agg(topic) AS topics,
                                   min(partition_ms) AS lo, max(partition_ms) AS hi FROM p)
                 SELECT DISTINCT m.topic, m.tier, m.datacenter, m.window_start_ms
                 FROM k, audit_messages_by_key(k.uuids, k.topics, k.lo, k.hi) m
                 JOIN p ON p.uuid = m.uuid AND p.topic = m.topic AND p.partition_ms = m.partition_ms
                 WHERE m.window_start_ms >= $2"
            }
        }
    }
}

/// The columns of a staged increment (`StagedDb`, staging.rs).
pub(super) const STAGED_COLUMNS: &str =
    "uuid, topic, tier, datacenter, host, window_start_ms, window_end_ms,
     emitted_at_ms, count, bytes, no_time_count, malformed_count, out_of_bounds_count,
     observation_time_count, delivery_failed_count, checksum, latency_zero_count,
     latency_negative_count, latency_max_ms, bucket_index, bucket_count, offset_partition,
     offset_min, offset_max, partition_ms, max_observed_at_ms, offset_max_record_time";
