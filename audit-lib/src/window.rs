//! Tumbling event-time windows aligned to the Unix epoch.
//!
//! A window is `[start, start + size)` in epoch milliseconds, with `start` a multiple of
//! the size. Window membership uses floor division (`div_euclid`), so negative
//! timestamps (before 1970) land in the window that contains them rather than being
//! rounded toward zero: `-1 ms` is in `[-size, 0)`.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Size of a tumbling window in milliseconds; always positive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WindowSize(i64);

/// Error for a window size that is zero, negative or does not fit in i64 milliseconds.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("window size must be between 1 ms and i64::MAX ms, got {0} ms")]
pub struct InvalidWindowSize(pub i128);

impl WindowSize {
    /// The default of the design: 10 minutes.
    pub const DEFAULT: WindowSize = WindowSize(10 * 60 * 1000);

    pub fn from_millis(ms: i64) -> Result<Self, InvalidWindowSize> {
        if ms > 0 {
            Ok(WindowSize(ms))
        } else {
            Err(InvalidWindowSize(ms as i128))
        }
    }

    pub fn from_duration(d: Duration) -> Result<Self, InvalidWindowSize> {
        let ms = d.as_millis();
        match i64::try_from(ms) {
            Ok(ms) => Self::from_millis(ms),
            Err(_) => Err(InvalidWindowSize(ms as i128)),
        }
    }

    pub fn as_millis(self) -> i64 {
        self.0
    }

    /// Index of the window containing `ts_ms`: `floor(ts_ms / size)`.
    #[inline]
    pub fn index_of(self, ts_ms: i64) -> i64 {
        ts_ms.div_euclid(self.0)
    }

    /// Start (inclusive) of the window with the given index. Saturates at the i64
    /// range: only reachable for indexes no real timestamp maps to.
    #[inline]
    pub fn start_of_index(self, index: i64) -> i64 {
        index.saturating_mul(self.0)
    }

    /// The window containing `ts_ms`.
    #[inline]
    pub fn window_of(self, ts_ms: i64) -> Window {
        self.window_at(self.index_of(ts_ms))
    }

    /// The window with the given index.
    #[inline]
    pub fn window_at(self, index: i64) -> Window {
        let start_ms = self.start_of_index(index);
        Window {
            start_ms,
            end_ms: start_ms.saturating_add(self.0),
        }
    }

    /// The windows from the one containing `from_ms` up to the last one starting
    /// before `to_ms`, in order.
    pub fn windows_between(self, from_ms: i64, to_ms: i64) -> impl Iterator<Item = Window> {
        (self.index_of(from_ms)..)
            .map(move |i| self.window_at(i))
            .take_while(move |w| w.start_ms < to_ms)
    }
}

impl Default for WindowSize {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Display for WindowSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}",
            humantime_serde::re::humantime::format_duration(Duration::from_millis(self.0 as u64))
        )
    }
}

/// Serialised as a humantime duration string (`"10m"`) in configuration files.
impl Serialize for WindowSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        humantime_serde::serialize(&Duration::from_millis(self.0 as u64), s)
    }
}

impl<'de> Deserialize<'de> for WindowSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let dur: Duration = humantime_serde::deserialize(d)?;
        WindowSize::from_duration(dur).map_err(serde::de::Error::custom)
    }
}

/// One tumbling window, `[start_ms, end_ms)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Window {
    pub start_ms: i64,
    pub end_ms: i64,
}

impl Window {
    pub fn contains(&self, ts_ms: i64) -> bool {
        self.start_ms <= ts_ms && ts_ms < self.end_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn default_is_ten_minutes() {
        assert_eq!(WindowSize::default().as_millis(), 600_000);
    }

    #[test]
    fn boundaries_belong_to_the_window_they_start() {
        let w = WindowSize::from_millis(1000).unwrap();
        assert_eq!(
            w.window_of(0),
            Window {
                start_ms: 0,
                end_ms: 1000
            }
        );
        assert_eq!(
            w.window_of(999),
            Window {
                start_ms: 0,
                end_ms: 1000
            }
        );
        assert_eq!(
            w.window_of(1000),
            Window {
                start_ms: 1000,
                end_ms: 2000
            }
        );
    }

    #[test]
    fn negative_timestamps_round_down_not_toward_zero() {
        let w = WindowSize::from_millis(1000).unwrap();
        assert_eq!(
            w.window_of(-1),
            Window {
                start_ms: -1000,
                end_ms: 0
            }
        );
        assert_eq!(
            w.window_of(-1000),
            Window {
                start_ms: -1000,
                end_ms: 0
            }
        );
        assert_eq!(
            w.window_of(-1001),
            Window {
                start_ms: -2000,
                end_ms: -1000
            }
        );
        assert_eq!(w.index_of(-1), -1);
    }

    #[test]
    fn extreme_timestamps_do_not_panic() {
        let w = WindowSize::DEFAULT;
        let lo = w.window_of(i64::MIN);
        assert!(lo.start_ms <= i64::MIN / 2);
        let hi = w.window_of(i64::MAX);
        assert!(hi.contains(i64::MAX) || hi.end_ms == i64::MAX);
    }

    #[test]
    fn windows_between_covers_the_range() {
        let w = WindowSize::from_millis(10).unwrap();
        let starts: Vec<i64> = w.windows_between(15, 40).map(|w| w.start_ms).collect();
        assert_eq!(starts, vec![10, 20, 30]);
        assert_eq!(w.windows_between(20, 20).count(), 0);
    }

    #[test]
    fn invalid_sizes_are_rejected() {
        assert!(WindowSize::from_millis(0).is_err());
        assert!(WindowSize::from_millis(-5).is_err());
        assert!(WindowSize::from_duration(Duration::from_micros(10)).is_err());
    }

    #[test]
    fn serde_uses_humantime() {
        #[derive(Deserialize, Serialize)]
        struct C {
            w: WindowSize,
        }
        let c: C = serde_json::from_str(r#"{"w":"5m"}"#).unwrap();
        assert_eq!(c.w.as_millis(), 300_000);
        assert_eq!(serde_json::to_string(&c).unwrap(), r#"{"w":"5m"}"#);
        assert!(serde_json::from_str::<C>(r#"{"w":"0s"}"#).is_err());
    }

    proptest! {
        #[test]
        fn window_contains_its_timestamp(size in 1i64..10_000_000_000, ts in -(1i64 << 50)..(1i64 << 50)) {
            let w = WindowSize::from_millis(size).unwrap();
            let win = w.window_of(ts);
            prop_assert!(win.contains(ts));
            prop_assert_eq!(win.start_ms.rem_euclid(size), 0);
            prop_assert_eq!(win.end_ms - win.start_ms, size);
        }
    }
}
