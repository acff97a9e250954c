//! The one place tracing is initialised.

use serde::{Deserialize, Serialize};
use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    pub format: LogFormat,
    /// An `EnvFilter` directive; `RUST_LOG` wins when set.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::Text,
            level: "info".to_string(),
        }
    }
}

/// Installs the global subscriber (to stderr). Calling it again (tests) is harmless.
pub fn init_tracing(cfg: &LogConfig) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&cfg.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match cfg.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Lets the log line of one kind through at most once per `every`; the lines held back
/// in between are counted and said with the next one let through. For errors that come
/// in bursts — a broker's death fails every fetch of its partitions at once: 130 lines
/// in one second from one collector in a failover test — whose metric still counts
/// each one. Kinds are a program's own constants, so the table stays small.
#[derive(Debug)]
pub struct LogEvery {
    every: std::time::Duration,
    /// (kind, when a line of it last went through, lines held back since).
    last: std::sync::Mutex<Vec<(&'static str, std::time::Instant, u64)>>,
}

impl LogEvery {
    pub const fn new(every: std::time::Duration) -> Self {
        LogEvery {
            every,
            last: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// `Some(held_back)`: log this line of `kind` now, saying that `held_back` were not
    /// logged since the last one; `None`: hold it back.
    pub fn check(&self, kind: &'static str) -> Option<u64> {
        self.check_at(kind, std::time::Instant::now())
    }

    fn check_at(&self, kind: &'static str, now: std::time::Instant) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match last.iter_mut().find(|(k, _, _)| *k == kind) {
            Some((_, at, held)) if now.saturating_duration_since(*at) < self.every => {
                *held += 1;
                None
            }
            Some((_, at, held)) => {
                *at = now;
                Some(std::mem::take(held))
            }
            None => {
                last.push((kind, now, 0));
                Some(0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_burst_logs_one_line_per_period_and_counts_the_rest() {
        let limit = LogEvery::new(Duration::from_secs(1));
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(limit.check_at("consume", at(0)), Some(0));
        assert_eq!(limit.check_at("consume", at(10)), None);
        assert_eq!(limit.check_at("consume", at(999)), None);
        // Another kind has its own period.
        assert_eq!(limit.check_at("publish", at(500)), Some(0));
        assert_eq!(limit.check_at("consume", at(1000)), Some(2));
        assert_eq!(limit.check_at("consume", at(1001)), None);
        assert_eq!(limit.check_at("consume", at(5000)), Some(1));
        assert_eq!(limit.check_at("consume", at(6000)), Some(0));
    }
}
