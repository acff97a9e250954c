//! The consumer's client configuration, and what the auditor reads from it.

use crate::config::Config;

/// The consumer's client configuration: the user's properties with the settings
/// exactly-once needs forced. Public so a benchmark's bare consumer can use the very
/// same settings.
pub fn consumer_client_config(cfg: &Config) -> rdkafka::ClientConfig {
    let a = &cfg.audit;
    let stats_ms = a
        .report_interval
        .as_millis()
        .clamp(1000, 60_000)
        .to_string();
    let metadata_refresh_ms = a.topic_refresh.as_millis().clamp(1000, 300_000).to_string();
    let mut overrides: Vec<(&str, &str)> = vec![
        ("group.id", &a.group_id),
        ("enable.auto.commit", "false"),
        ("enable.auto.offset.store", "false"),
        ("isolation.level", "read_committed"),
        ("statistics.interval.ms", &stats_ms),
    ];
    if a.static_membership {
        overrides.push(("group.instance.id", &a.instance_id));
    }
    cfg.kafka.client_config_with_defaults(
        common::KafkaRole::Consumer,
        &[
            ("auto.offset.reset", "earliest"),
            // Kafka's default (KIP-735). The session must outlast a move of the group
            // coordinator (the broker's own session, 9 s by default, then the new
            // coordinator loading the group): past it librdkafka takes the assignment
            // for lost and rejoins without its member id, and the coordinator fences the
            // static member's old id, which librdkafka reports as a fatal error. Every
            // group coordinator failure then cost a recreated consumer and a recount
            // from the committed offsets (10 s here before: seen on the replicated
            // cluster, tests/it/replicated). A dead instance's partitions wait as long
            // for another one; a restarted one keeps them (static membership).
            ("session.timeout.ms", "45000"),
            // librdkafka's default (1000 ms) idles a consumer that reads faster than
            // one fetch fills the queue (queued.min.messages): measured here, it
            // capped a bare consumer at ~300k msg/s with the machine 85 % idle; at
            // 10 ms it reads ~2M msg/s. See bench/audit-service.sh.
            ("fetch.queue.backoff.ms", "10"),
            // Fetched-but-unread data is held in whole fetch responses; 16 MB (of
            // librdkafka's 64 MB) is still tens of milliseconds at full speed and keeps
            // the 2 000-topic memory benchmark at ~225 MB instead of ~245 MB.
            ("queued.max.messages.kbytes", "16384"),
            // librdkafka reads a subscription's metadata again only this often (5 min
            // by default): partitions it did not know when the group was joined —
            // added to a topic, or a new topic not yet propagated to the broker that
            // answered (seen on a three-node cluster: an assignment of 0 partitions
            // and nothing counted for minutes) — are assigned after the next read.
            // As often as the auditor re-reads its topic list (`topic_refresh`).
            ("topic.metadata.refresh.interval.ms", &metadata_refresh_ms),
        ],
        &overrides,
    )
}

/// Beyond `fetch.wait.max.ms`, how late a fetch response may be (round trip, a busy
/// broker or client thread). Progress is dated that much earlier: windows settle as
/// much later, which grace (minutes) absorbs.
const FETCH_SLACK_MS: i64 = 1000;

/// The consumer's `fetch.wait.max.ms` (librdkafka's default 500 ms when not set)
/// plus [`FETCH_SLACK_MS`]: the longest the high watermark of a fetched partition in
/// the statistics is taken to be older than the statistics.
pub(crate) fn fetch_age_ms(cfg: &Config) -> i64 {
    consumer_client_config(cfg)
        .get("fetch.wait.max.ms")
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|&ms| ms >= 0)
        .unwrap_or(500)
        .saturating_add(FETCH_SLACK_MS)
}

/// Whether a partition without a committed offset is read from its log start
/// (`auto.offset.reset` earliest, the auditor's default).
pub(crate) fn starts_at_log_start(cfg: &crate::config::Config) -> bool {
    matches!(
        consumer_client_config(cfg).get("auto.offset.reset"),
        None | Some("earliest" | "smallest" | "beginning")
    )
}
