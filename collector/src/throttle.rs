//! Per-token bounds of the HTTP ingest: requests and messages per second (token
//! buckets, a burst of one second's worth), answered 429 with `Retry-After`; and the
//! request bodies held in memory at once (`http.max_inflight_body_bytes`), of which
//! one token holds at most half, so that one client trickling bodies cannot starve
//! the others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Keys beyond this are forgotten when their buckets are full again (without tokens
/// the key is the client address, which the client picks).
const MAX_KEYS: usize = 10_000;

struct Buckets {
    requests: f64,
    messages: f64,
    at: Instant,
    /// Body bytes this key holds in the in-flight budget.
    holding: usize,
}

pub struct Throttle {
    requests_per_second: f64,
    messages_per_second: f64,
    buckets: Mutex<HashMap<String, Buckets>>,
    /// In KiB: `Semaphore::acquire_many` counts in u32.
    bodies: Arc<Semaphore>,
    budget_bytes: usize,
}

/// A body's room in the in-flight budget, given back on drop.
pub struct BodyRoom {
    _permit: OwnedSemaphorePermit,
    throttle: Arc<Throttle>,
    key: String,
    bytes: usize,
}

impl Drop for BodyRoom {
    fn drop(&mut self) {
        if let Some(b) = self.throttle.lock().get_mut(&self.key) {
            b.holding = b.holding.saturating_sub(self.bytes);
        }
    }
}

/// Why a request must wait.
pub enum Refused {
    /// Over the token's rate: retry after this long (429).
    Rate(Duration),
    /// The token holds half the in-flight budget already (429).
    TooManyBodies,
    /// No room in the in-flight budget within the wait (503).
    Busy,
}

impl Throttle {
    pub fn new(requests_per_second: u32, messages_per_second: u32, budget_bytes: usize) -> Self {
        Throttle {
            requests_per_second: f64::from(requests_per_second),
            messages_per_second: f64::from(messages_per_second),
            buckets: Mutex::new(HashMap::new()),
            bodies: Arc::new(Semaphore::new(budget_bytes.div_ceil(1024))),
            budget_bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Buckets>> {
        self.buckets.lock().expect("throttle lock")
    }

    /// Refills `key`'s buckets and applies `f` to them.
    fn with<T>(&self, key: &str, f: impl FnOnce(&mut Buckets) -> T) -> T {
        let now = Instant::now();
        let mut map = self.lock();
        if map.len() >= MAX_KEYS && !map.contains_key(key) {
            let (r, m) = (self.requests_per_second, self.messages_per_second);
            map.retain(|_, b| b.holding > 0 || b.requests < r || b.messages < m);
        }
        let b = map.entry(key.to_string()).or_insert(Buckets {
            requests: self.requests_per_second,
            messages: self.messages_per_second,
            at: now,
            holding: 0,
        });
        let elapsed = now.duration_since(b.at).as_secs_f64();
        b.at = now;
        b.requests =
            (b.requests + elapsed * self.requests_per_second).min(self.requests_per_second);
        b.messages =
            (b.messages + elapsed * self.messages_per_second).min(self.messages_per_second);
        f(b)
    }

    /// Takes one request of `key` (0 requests per second: no limit).
    pub fn admit_request(&self, key: &str) -> Result<(), Refused> {
        if self.requests_per_second <= 0.0 {
            return Ok(());
        }
        let rate = self.requests_per_second;
        self.with(key, |b| {
            if b.requests >= 1.0 {
                b.requests -= 1.0;
                Ok(())
            } else {
                Err(Refused::Rate(Duration::from_secs_f64(
                    (1.0 - b.requests) / rate,
                )))
            }
        })
    }

    /// Takes `n` messages of `key`: admitted while the bucket is not empty, and a
    /// request larger than a second's worth leaves it in debt (the next ones wait).
    pub fn admit_messages(&self, key: &str, n: usize) -> Result<(), Refused> {
        if self.messages_per_second <= 0.0 {
            return Ok(());
        }
        let rate = self.messages_per_second;
        self.with(key, |b| {
            if b.messages >= (n as f64).min(rate) {
                b.messages -= n as f64;
                Ok(())
            } else {
                let missing = (n as f64).min(rate) - b.messages;
                Err(Refused::Rate(Duration::from_secs_f64(missing / rate)))
            }
        })
    }

    /// Room for a body of `bytes` in the in-flight budget, waiting at most `wait`.
    pub async fn room(
        self: &Arc<Self>,
        key: &str,
        bytes: usize,
        wait: Duration,
    ) -> Result<BodyRoom, Refused> {
        let bytes = bytes.min(self.budget_bytes);
        let half = (self.budget_bytes / 2).max(1);
        let held = self.with(key, |b| {
            if b.holding > 0 && b.holding + bytes > half {
                Err(Refused::TooManyBodies)
            } else {
                b.holding += bytes;
                Ok(())
            }
        });
        held?;
        let give_back = |throttle: &Self| {
            if let Some(b) = throttle.lock().get_mut(key) {
                b.holding = b.holding.saturating_sub(bytes);
            }
        };
        let kib = u32::try_from(bytes.div_ceil(1024).max(1)).unwrap_or(u32::MAX);
        match tokio::time::timeout(wait, self.bodies.clone().acquire_many_owned(kib)).await {
            Ok(Ok(permit)) => Ok(BodyRoom {
                _permit: permit,
                throttle: Arc::clone(self),
                key: key.to_string(),
                bytes,
            }),
            _ => {
                give_back(self);
                Err(Refused::Busy)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_gets_its_rate_and_a_burst_of_one_second() {
        let t = Throttle::new(10, 100, 1 << 20);
        for _ in 0..10 {
            assert!(t.admit_request("a").is_ok());
        }
        assert!(
            matches!(t.admit_request("a"), Err(Refused::Rate(d)) if d <= Duration::from_millis(100))
        );
        // Another token is not held back by this one.
        assert!(t.admit_request("b").is_ok());
        // A request larger than a second's worth passes once, then the token waits.
        assert!(t.admit_messages("a", 500).is_ok());
        assert!(matches!(t.admit_messages("a", 1), Err(Refused::Rate(_))));
    }

    #[tokio::test]
    async fn one_token_holds_at_most_half_of_the_body_budget() {
        let t = Arc::new(Throttle::new(0, 0, 4 << 20));
        let first = t.room("a", 2 << 20, Duration::from_millis(10)).await;
        assert!(first.is_ok());
        assert!(matches!(
            t.room("a", 1 << 20, Duration::from_millis(10)).await,
            Err(Refused::TooManyBodies)
        ));
        let other = t.room("b", 2 << 20, Duration::from_millis(10)).await;
        assert!(other.is_ok());
        // The budget is full: a third client waits, then is told the collector is busy.
        assert!(matches!(
            t.room("c", 1 << 20, Duration::from_millis(10)).await,
            Err(Refused::Busy)
        ));
        drop(first);
        assert!(t
            .room("c", 1 << 20, Duration::from_millis(10))
            .await
            .is_ok());
        assert!(t
            .room("a", 1 << 20, Duration::from_millis(10))
            .await
            .is_ok());
    }
}
