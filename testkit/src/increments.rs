//! The audit increments tests produce and store: [`increment`] gives one with every
//! field a test does not care about at a plain default, and the builder sets the rest.

use audit_lib::{
    AuditMessage, Checksum, Identity, LatencyHistogram, OffsetSpan, Window, WindowStats,
};

/// An increment of `count` messages of `topic` in the window `[start_ms, end_ms)`, by
/// host `regional-0` of tier `regional` in `dc1`, emitted at `end_ms`: `count × 100`
/// bytes, checksum `count`, no latencies, no offsets. A fresh UUID each [`build`].
///
/// [`build`]: IncrementBuilder::build
pub fn increment(topic: &str, start_ms: i64, end_ms: i64, count: u64) -> IncrementBuilder {
    IncrementBuilder {
        topic: topic.to_string(),
        tier: "regional".into(),
        datacenter: "dc1".into(),
        host: None,
        window: Window { start_ms, end_ms },
        emitted_at: end_ms,
        stats: WindowStats {
            count,
            bytes: count * 100,
            checksum: Checksum(count),
            ..WindowStats::default()
        },
    }
}

/// An increment being built; see [`increment`].
#[derive(Clone, Debug)]
pub struct IncrementBuilder {
    topic: String,
    tier: String,
    datacenter: String,
    /// `None`: `{tier}-0`.
    host: Option<String>,
    window: Window,
    emitted_at: i64,
    stats: WindowStats,
}

impl IncrementBuilder {
    /// The emitter's tier (its host becomes `{tier}-0` unless set).
    pub fn tier(mut self, tier: &str) -> Self {
        self.tier = tier.to_string();
        self
    }

    pub fn datacenter(mut self, datacenter: &str) -> Self {
        self.datacenter = datacenter.to_string();
        self
    }

    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.host = Some(host.into());
        self
    }

    pub fn emitted_at(mut self, emitted_at_ms: i64) -> Self {
        self.emitted_at = emitted_at_ms;
        self
    }

    pub fn checksum(mut self, checksum: u64) -> Self {
        self.stats.checksum = Checksum(checksum);
        self
    }

    pub fn latency(mut self, latency: LatencyHistogram) -> Self {
        self.stats.latency = latency;
        self
    }

    pub fn offsets(mut self, offsets: Vec<OffsetSpan>) -> Self {
        self.stats.offsets = offsets;
        self
    }

    /// Any other statistics (`no_time_count`, `malformed_count`, ...), set in place.
    pub fn stats(mut self, set: impl FnOnce(&mut WindowStats)) -> Self {
        set(&mut self.stats);
        self
    }

    /// The message, with a fresh UUID.
    pub fn build(self) -> AuditMessage {
        let host = self.host.unwrap_or_else(|| format!("{}-0", self.tier));
        let identity = Identity::new(&self.tier, &self.datacenter, host);
        AuditMessage::increment(
            &identity,
            &self.topic,
            self.window,
            self.stats,
            self.emitted_at,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_increment_has_the_documented_defaults_and_takes_what_is_set() {
        let plain = increment("orders", 600_000, 1_200_000, 7).build();
        assert_eq!(
            (
                plain.topic.as_str(),
                plain.tier.as_str(),
                plain.datacenter.as_str()
            ),
            ("orders", "regional", "dc1")
        );
        assert_eq!(
            (plain.host.as_str(), plain.emitted_at),
            ("regional-0", 1_200_000)
        );
        let i = plain.as_increment().expect("an increment");
        assert_eq!((i.window_start, i.window_end), (600_000, 1_200_000));
        assert_eq!(
            (i.stats.count, i.stats.bytes, i.stats.checksum),
            (7, 700, Checksum(7))
        );
        let set = increment("orders", 0, 600_000, 3)
            .tier("producer")
            .datacenter("dc2")
            .checksum(99)
            .emitted_at(5)
            .offsets(vec![OffsetSpan::new(1, 10, None)])
            .stats(|s| s.malformed_count = 2)
            .build();
        assert_eq!(
            (set.tier.as_str(), set.host.as_str()),
            ("producer", "producer-0")
        );
        assert_eq!((set.datacenter.as_str(), set.emitted_at), ("dc2", 5));
        let i = set.as_increment().expect("an increment");
        assert_eq!(
            (i.stats.checksum, i.stats.malformed_count),
            (Checksum(99), 2)
        );
        assert_eq!(i.stats.offsets, vec![OffsetSpan::new(1, 10, None)]);
        assert_ne!(
            increment("t", 0, 600_000, 1).build().uuid,
            increment("t", 0, 600_000, 1).build().uuid
        );
    }
}
