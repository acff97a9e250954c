//! Bounds per emitter: what an honest auditor can send, checked for every message of
//! the HTTP ingest and of the audit topics alike (after `store::validate_ingest`,
//! which bounds what the store can hold). A message outside them is rejected on its
//! own, with its reason and a count per bound (`kafka_audit_collector_bound_rejects`).
//!
//! - **Window size**: every auditor of a deployment counts in one window size. An
//!   increment of another size is rejected: `[ingest] window`, or when it is unset,
//!   the size the store recorded at the first increment it accepted (changed only by
//!   setting `[ingest] window`). With the size fixed and starts aligned to it, a
//!   (topic, tier, datacenter) has at most one window per window length of time:
//!   a flood of unaligned or misaligned windows is not stored at all.
//! - **Window age**: with retention on, a window that starts before the retention of
//!   windows is rejected (the next retention pass would delete it): distinct windows
//!   per (topic, tier, datacenter) are then at most `retention.windows / window`
//!   (plus the hour of clock skew ahead), whatever the rate.
//! - **Partitions**: a topic's auditor knows its partition count; ids at or above
//!   `[ingest] max_partitions` are rejected (in progress reports and offset ranges),
//!   so a (topic, tier, datacenter) holds at most that many progress rows.

use store::{AuditBody, Message, Store};

use crate::config::{IngestConfig, RetentionConfig};
pub use crate::metrics::Bound;
use crate::metrics::{BoundLabels, Metrics};

pub struct Bounds {
    /// `[ingest] window` in ms.
    configured_window_ms: Option<i64>,
    /// Where the recorded window size is cached (see `Store::cached_window_size_ms`).
    store: Store,
    max_partitions: i32,
    /// `retention.windows` in ms when retention is on.
    max_window_age_ms: Option<i64>,
    metrics: Metrics,
}

impl Bounds {
    pub fn new(
        ingest: &IngestConfig,
        retention: &RetentionConfig,
        store: Store,
        metrics: Metrics,
    ) -> Bounds {
        let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Bounds {
            configured_window_ms: ingest.window.map(ms),
            store,
            max_partitions: i32::try_from(ingest.max_partitions).unwrap_or(i32::MAX),
            max_window_age_ms: retention.enabled.then(|| ms(retention.windows)),
            metrics,
        }
    }

    /// At start: records `[ingest] window` in the store (configuration changes what
    /// is recorded), or reads the recorded size into the store's cache.
    pub async fn prepare(&self) -> store::Result<()> {
        use store::Deployment;
        match self.configured_window_ms {
            Some(ms) => {
                self.store
                    .fix_window_size_ms(ms, "configuration", true)
                    .await?;
                tracing::info!(window_ms = ms, "window size from [ingest] window");
            }
            None => match self.store.window_size_ms().await? {
                Some(ms) => tracing::info!(
                    window_ms = ms,
                    "window size as recorded in the store ([ingest] window is not set)"
                ),
                None => tracing::warn!(
                    "no window size known yet ([ingest] window is not set): the first increment stored fixes it; set [ingest] window to the auditors' window_size"
                ),
            },
        }
        Ok(())
    }

    /// The deployment's window size, when known.
    pub fn window_ms(&self) -> Option<i64> {
        self.configured_window_ms
            .or_else(|| self.store.cached_window_size_ms())
    }

    /// Why `m`, received at `received_at_ms`, is outside the bounds (counted).
    pub fn check(&self, m: &Message, received_at_ms: i64) -> Result<(), String> {
        self.refusal(m, received_at_ms).map_err(|(bound, reason)| {
            self.count(bound);
            reason
        })
    }

    pub fn count(&self, bound: Bound) {
        self.metrics
            .bound_rejects
            .get_or_create(&BoundLabels { bound })
            .inc();
    }

    fn partition(&self, what: &str, partition: i32) -> Result<(), (Bound, String)> {
        if partition >= self.max_partitions {
            return Err((
                Bound::partition,
                format!(
                    "{what} of partition {partition}: partition ids must be below {} (ingest.max_partitions)",
                    self.max_partitions
                ),
            ));
        }
        Ok(())
    }

    fn refusal(&self, m: &Message, received_at_ms: i64) -> Result<(), (Bound, String)> {
        match &m.body {
            AuditBody::Increment(i) => {
                let size = i.window_end - i.window_start;
                if let Some(w) = self.window_ms().filter(|&w| w != size) {
                    return Err((
                        Bound::window_size,
                        format!(
                            "window [{}, {}) is {size} ms long; this deployment's windows are {w} ms (ingest.window, or the size of the first stored increment)",
                            i.window_start, i.window_end
                        ),
                    ));
                }
                if let Some(age) = self.max_window_age_ms {
                    if i.window_start < received_at_ms.saturating_sub(age) {
                        return Err((
                            Bound::window_age,
                            format!(
                                "window_start {} is older than retention.windows ({age} ms): retention would delete it",
                                i.window_start
                            ),
                        ));
                    }
                }
                for o in &i.stats.offsets {
                    self.partition("offset range", o.partition)?;
                }
            }
            AuditBody::Progress(parts) => {
                for p in parts {
                    self.partition("progress", p.partition)?;
                }
            }
        }
        Ok(())
    }
}
