//! What the plugin did, for every client of this process that loaded this copy of it:
//! read through `kafka_audit_interceptor_stats` (JSON), and summarised on stderr when
//! something goes wrong (an unreachable audit topic, a full spool).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        #[derive(Default)]
        pub struct Counters {
            $($(#[$doc])* pub $name: AtomicU64,)*
            /// The last error of the emitter, if any.
            pub last_error: Mutex<Option<String>>,
        }

        impl Counters {
            pub const fn new() -> Self {
                Counters {
                    $($name: AtomicU64::new(0),)*
                    last_error: Mutex::new(None),
                }
            }

            /// Every counter as one JSON object.
            pub fn to_json(&self) -> String {
                let mut m = serde_json::Map::new();
                $(m.insert(stringify!($name).into(), self.$name.load(Ordering::Relaxed).into());)*
                let last = self.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone();
                m.insert("last_error".into(), last.map_or(serde_json::Value::Null, Into::into));
                serde_json::Value::Object(m).to_string()
            }
        }
    };
}

counters! {
    /// Clients with the plugin active now.
    clients_active,
    /// Clients the plugin refused to audit (their configuration was incomplete).
    clients_unaudited,
    /// Messages the cluster acknowledged (producer tier).
    acknowledged,
    /// Messages the producer was told it could not deliver.
    delivery_failed,
    /// Messages refused before librdkafka queued them (unknown topic or partition, topic
    /// not authorised) by `rd_kafka_produce_batch`, which hands the interceptor the
    /// application's own struct, without its topic: counted here, in no window.
    refused_unattributed,
    /// Messages consumed (consumer tier), counted once committed.
    consumed,
    /// Consumed messages counted because their group committed them.
    committed,
    /// Consumed messages never counted: uncommitted when their partition was read again
    /// or moved (whoever commits them counts them), or at close.
    uncommitted_discarded,
    /// Uncommitted messages dropped because the buffer was full (never counted: the
    /// consumer tier shows them missing).
    uncommitted_overflow,
    /// Audit messages delivered to the audit topic.
    increments_sent,
    /// Reports that could not be delivered at once (kept in memory or spooled).
    send_failures,
    /// Batches written to the spool.
    spooled,
    /// Spooled batches delivered later.
    replayed,
    /// Audit messages dropped because the memory backlog (no spool, or a full spool)
    /// was full: their counts are lost.
    increments_dropped,
    /// Audit messages waiting in memory for the audit topic.
    backlog,
}

pub static COUNTERS: Counters = Counters::new();

pub fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

pub fn sub(c: &AtomicU64, n: u64) {
    c.fetch_sub(n, Ordering::Relaxed);
}

/// Records `e` as the last error and says it on stderr, at most once a minute per
/// kind of message: the plugin has no logger of its own (the client's is not its to
/// call), and an unreachable audit topic must not flood the application's output.
pub fn report_error(e: String) {
    use std::sync::atomic::AtomicI64;
    static LAST_SAID: AtomicI64 = AtomicI64::new(i64::MIN);
    let now = crate::now_ms();
    let said = LAST_SAID.load(Ordering::Relaxed);
    if now.saturating_sub(said) >= 60_000
        && LAST_SAID
            .compare_exchange(said, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        eprintln!("kafka-audit-interceptor: {e}");
    }
    *COUNTERS
        .last_error
        .lock()
        .unwrap_or_else(|p| p.into_inner()) = Some(e);
}
