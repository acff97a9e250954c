//! The wall clock in the unit the audit messages and the store use, and the one
//! exponential backoff of every retry loop (store writes, roll-up, Kafka at start,
//! alert deliveries). audit-lib stays without a clock: its callers pass `now_ms()` in.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch; 0 for a clock set before 1970.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Delays that double from `initial` up to `max`: `next_delay` gives the wait before
/// the next attempt, `reset` starts over after a success.
///
/// A delay is never shorter than 1 ms (a zero `initial` or `max` in a config file must
/// not turn a retry loop into a busy loop) and never longer than `max`.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

const FLOOR: Duration = Duration::from_millis(1);

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        let max = max.max(FLOOR);
        let initial = initial.clamp(FLOOR, max);
        Backoff {
            initial,
            max,
            next: initial,
        }
    }

    /// The wait before the next attempt; the one after is twice as long, up to `max`.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = delay.saturating_mul(2).min(self.max);
        delay
    }

    /// Back to `initial` (after a success).
    pub fn reset(&mut self) {
        self.next = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn doubles_up_to_max_and_stays_there() {
        let mut b = Backoff::new(ms(100), ms(1000));
        let delays: Vec<_> = (0..7).map(|_| b.next_delay()).collect();
        assert_eq!(
            delays,
            [
                ms(100),
                ms(200),
                ms(400),
                ms(800),
                ms(1000),
                ms(1000),
                ms(1000)
            ]
        );
    }

    #[test]
    fn reset_starts_over() {
        let mut b = Backoff::new(ms(100), ms(1000));
        b.next_delay();
        b.next_delay();
        b.reset();
        assert_eq!(b.next_delay(), ms(100));
        assert_eq!(b.next_delay(), ms(200));
    }

    #[test]
    fn zero_durations_never_busy_loop() {
        let mut b = Backoff::new(Duration::ZERO, Duration::ZERO);
        assert!((0..5).all(|_| b.next_delay() == ms(1)));
        let mut b = Backoff::new(Duration::ZERO, ms(10));
        let delays: Vec<_> = (0..6).map(|_| b.next_delay()).collect();
        assert_eq!(delays, [ms(1), ms(2), ms(4), ms(8), ms(10), ms(10)]);
    }

    #[test]
    fn never_longer_than_max() {
        let mut b = Backoff::new(ms(5000), ms(1000));
        assert_eq!(b.next_delay(), ms(1000));
        let mut b = Backoff::new(Duration::MAX, Duration::MAX);
        b.next_delay();
        assert_eq!(b.next_delay(), Duration::MAX, "doubling saturates");
    }

    #[test]
    fn now_ms_is_the_unix_time_in_milliseconds() {
        let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let now = now_ms();
        let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        assert!(before.as_millis() as i64 <= now && now <= after.as_millis() as i64);
        // 2020-01-01 .. 2100-01-01: milliseconds, not seconds or microseconds.
        assert!(
            (1_577_836_800_000..4_102_444_800_000).contains(&now),
            "{now}"
        );
    }
}
