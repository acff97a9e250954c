//! audit-lib: the sans-io core of kafka-audit (docs/design.md §3, §4).
//!
//! Event-time extraction ([`extract`], on top of the targeted JSON [`scan`]ner),
//! tumbling [`window`]s, mergeable [`stats`] ([`histogram`], [`checksum`]), the audit
//! [`message`] format v1 (`docs/audit-message-v1.md`), the [`Aggregator`] that ties them
//! together, and [`sink`]s. No async runtime, no Kafka client and no database in the
//! core: time is passed in, so every behaviour is testable without clocks. The Kafka
//! and HTTP sinks sit behind the `kafka` and `http` features.

pub mod aggregator;
pub mod checksum;
pub mod config;
pub mod extract;
pub mod histogram;
pub mod inspect;
pub mod message;
pub mod observation;
pub mod scan;
pub mod sink;
pub mod stats;
pub mod timeparse;
pub mod topic;
pub mod window;

pub use aggregator::{Aggregator, Limits};
pub use checksum::{message_hash, Checksum};
pub use config::{
    is_reserved_tier, CompiledConfig, CompiledRule, ConfigError, EventTimeConfig, TimeRule,
    TopicRule, Unit, RESERVED_TIER_PREFIX,
};
pub use extract::{classify, Classification, Fallback, MalformedReason, TimeSource};
pub use histogram::{InvalidHistogram, LatencyHistogram};
pub use message::{
    AuditBody, AuditMessage, Identity, Increment, MessageKind, PartitionProgress,
    AUDIT_MESSAGE_VERSION,
};
pub use observation::{HeaderLookup, NoHeaders, Observation, RecordTimestamp, TimestampType};
pub use sink::{MemorySink, Sink, SinkError, SpoolStats, SpoolingSink};
pub use stats::{Counted, CountedKind, OffsetSpan, WindowStats, RECORD_TIME_SLACK_MS};
pub use timeparse::TimeUnit;
pub use topic::{TopicGlob, TopicPartition};
pub use window::{Window, WindowSize};
