//! Turning a found value into epoch milliseconds, exactly.
//!
//! Numbers are converted with decimal integer arithmetic, not floats, so
//! `1764410400.123` seconds is exactly `1764410400123` ms. Sub-millisecond parts are
//! floored (toward −∞, like window assignment), so `-0.5` ms is `-1` ms.

use serde::{Deserialize, Serialize};

use crate::config::Unit;

/// The unit or format an event time was read in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TimeUnit {
    #[serde(rename = "s")]
    Seconds,
    #[serde(rename = "ms")]
    Millis,
    #[serde(rename = "us")]
    Micros,
    #[serde(rename = "ns")]
    Nanos,
    /// An RFC 3339 / ISO-8601 date-time string.
    #[serde(rename = "rfc3339")]
    Rfc3339,
}

impl TimeUnit {
    pub fn as_str(self) -> &'static str {
        match self {
            TimeUnit::Seconds => "s",
            TimeUnit::Millis => "ms",
            TimeUnit::Micros => "us",
            TimeUnit::Nanos => "ns",
            TimeUnit::Rfc3339 => "rfc3339",
        }
    }

    /// Power of ten that converts this unit to milliseconds.
    fn ms_shift(self) -> i32 {
        match self {
            TimeUnit::Seconds => 3,
            TimeUnit::Millis => 0,
            TimeUnit::Micros => -3,
            TimeUnit::Nanos => -6,
            TimeUnit::Rfc3339 => 0,
        }
    }
}

/// Why a value is not a usable time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    #[error("not a number or RFC 3339 date-time")]
    NotATime,
    /// A well-formed time that does not fit in i64 milliseconds.
    #[error("time does not fit in i64 milliseconds")]
    OutOfRange { negative: bool, unit: TimeUnit },
}

/// Picks the unit of a number from its magnitude (see [`Unit::Auto`]).
fn detect_unit(abs_int_digits: i64) -> TimeUnit {
    // abs_int_digits: number of digits of the integer part (0 for |v| < 1).
    match abs_int_digits {
        ..=11 => TimeUnit::Seconds, // < 1e11
        12..=14 => TimeUnit::Millis,
        15..=17 => TimeUnit::Micros,
        _ => TimeUnit::Nanos,
    }
}

const MAX_MANTISSA_DIGITS: usize = 36;

/// Converts a plain integer in `unit` to ms (the scanner's fast path).
#[inline]
pub fn int_to_ms(v: i64, unit: Unit) -> Result<(i64, TimeUnit), TimeError> {
    let a = v.unsigned_abs();
    let u = match unit {
        Unit::Auto => {
            if a < 100_000_000_000 {
                TimeUnit::Seconds
            } else if a < 100_000_000_000_000 {
                TimeUnit::Millis
            } else if a < 100_000_000_000_000_000 {
                TimeUnit::Micros
            } else {
                TimeUnit::Nanos
            }
        }
        other => resolve_unit(other, 0),
    };
    let r = match u {
        TimeUnit::Millis | TimeUnit::Rfc3339 => Some(v),
        TimeUnit::Seconds => v.checked_mul(1000),
        TimeUnit::Micros => Some(v.div_euclid(1000)),
        TimeUnit::Nanos => Some(v.div_euclid(1_000_000)),
    };
    r.map(|ms| (ms, u)).ok_or(TimeError::OutOfRange {
        negative: v < 0,
        unit: u,
    })
}

/// Converts a JSON number text (already validated by the grammar) to ms.
pub fn number_to_ms(b: &[u8], unit: Unit) -> Result<(i64, TimeUnit), TimeError> {
    let mut i = 0;
    let negative = b.first() == Some(&b'-');
    if negative {
        i += 1;
    }
    // Fast path: a plain integer of up to 18 digits (every realistic timestamp).
    let digits_end = b[i..]
        .iter()
        .position(|c| !c.is_ascii_digit())
        .map_or(b.len(), |p| p + i);
    if digits_end == b.len() && digits_end - i <= 18 && digits_end > i {
        let mut v: i64 = 0;
        for &c in &b[i..digits_end] {
            v = v * 10 + (c - b'0') as i64;
        }
        let int_digits = if v == 0 { 0 } else { (digits_end - i) as i64 };
        let u = resolve_unit(unit, int_digits);
        let ms = scale_i128(v as i128, u.ms_shift(), false);
        return finish(ms, negative, u);
    }
    // General path: mantissa digits and a decimal exponent.
    let mut mantissa: u128 = 0;
    let mut sig_digits = 0usize;
    let mut exp10: i64 = 0;
    let mut inexact = false; // digits dropped beyond MAX_MANTISSA_DIGITS
    let mut int_digits: i64 = 0;
    let mut seen_nonzero = false;
    while i < b.len() && b[i].is_ascii_digit() {
        let d = b[i] - b'0';
        if d != 0 || seen_nonzero {
            seen_nonzero = true;
            int_digits += 1;
            if sig_digits < MAX_MANTISSA_DIGITS {
                mantissa = mantissa * 10 + d as u128;
                sig_digits += 1;
            } else {
                exp10 += 1;
                inexact |= d != 0;
            }
        }
        i += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            let d = b[i] - b'0';
            if d != 0 || seen_nonzero {
                seen_nonzero = true;
                if sig_digits < MAX_MANTISSA_DIGITS {
                    mantissa = mantissa * 10 + d as u128;
                    sig_digits += 1;
                    exp10 -= 1;
                } else {
                    inexact |= d != 0;
                }
            } else {
                exp10 -= 1;
            }
            i += 1;
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        let eneg = b.get(i) == Some(&b'-');
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let mut e: i64 = 0;
        while i < b.len() && b[i].is_ascii_digit() {
            // Clamp: anything beyond ±10^6 is far outside i64 ms either way.
            e = (e * 10 + (b[i] - b'0') as i64).min(1_000_000);
            i += 1;
        }
        exp10 += if eneg { -e } else { e };
    }
    if i != b.len() {
        return Err(TimeError::NotATime);
    }
    // Digits of the integer part of |v|: sig digits + exponent (value = m · 10^exp10).
    let int_part_digits = if mantissa == 0 {
        0
    } else {
        (sig_digits as i64 + exp10).max(0)
    };
    let _ = int_digits;
    let u = resolve_unit(unit, int_part_digits);
    let e = exp10 + u.ms_shift() as i64;
    let ms = scale_u128(mantissa, e, inexact, negative);
    finish(ms, negative, u)
}

fn resolve_unit(unit: Unit, int_digits: i64) -> TimeUnit {
    match unit {
        Unit::Auto => detect_unit(int_digits),
        Unit::Seconds => TimeUnit::Seconds,
        Unit::Millis => TimeUnit::Millis,
        Unit::Micros => TimeUnit::Micros,
        Unit::Nanos => TimeUnit::Nanos,
    }
}

/// v · 10^shift for a non-negative integer v, with floor semantics applied later by
/// `finish` through the sign; returns None on overflow.
fn scale_i128(v: i128, shift: i32, _inexact: bool) -> Option<(i128, bool)> {
    if shift >= 0 {
        v.checked_mul(10i128.pow(shift as u32)).map(|x| (x, false))
    } else {
        let d = 10i128.pow((-shift) as u32);
        Some((v / d, v % d != 0))
    }
}

/// m · 10^e as (integer part, had a fractional remainder); None on overflow.
fn scale_u128(m: u128, e: i64, inexact: bool, _negative: bool) -> Option<(i128, bool)> {
    if m == 0 {
        return Some((0, false));
    }
    if e >= 0 {
        if e > 38 {
            return None;
        }
        let p = 10u128.checked_pow(e as u32)?;
        let v = m.checked_mul(p)?;
        let v = i128::try_from(v).ok()?;
        Some((v, inexact))
    } else {
        let ne = -e;
        if ne > 38 {
            return Some((0, true));
        }
        let d = 10u128.pow(ne as u32);
        Some(((m / d) as i128, m % d != 0 || inexact))
    }
}

fn finish(
    r: Option<(i128, bool)>,
    negative: bool,
    unit: TimeUnit,
) -> Result<(i64, TimeUnit), TimeError> {
    let Some((mag, frac)) = r else {
        return Err(TimeError::OutOfRange { negative, unit });
    };
    let v = if negative {
        -mag - if frac { 1 } else { 0 }
    } else {
        mag
    };
    i64::try_from(v)
        .map(|ms| (ms, unit))
        .map_err(|_| TimeError::OutOfRange { negative, unit })
}

/// A time written as text: a decimal number (in `unit`) or an RFC 3339 date-time.
pub fn text_to_ms(text: &str, unit: Unit) -> Result<(i64, TimeUnit), TimeError> {
    let t = text.trim();
    if crate::scan::number_len(t.as_bytes()) == Some(t.len()) {
        return number_to_ms(t.as_bytes(), unit);
    }
    match chrono::DateTime::parse_from_rfc3339(t) {
        Ok(dt) => Ok((dt.timestamp_millis(), TimeUnit::Rfc3339)),
        Err(_) => Err(TimeError::NotATime),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(t: &str, u: Unit) -> Result<(i64, TimeUnit), TimeError> {
        number_to_ms(t.as_bytes(), u)
    }

    #[test]
    fn all_four_units_explicit() {
        assert_eq!(
            ms("1764410400", Unit::Seconds),
            Ok((1_764_410_400_000, TimeUnit::Seconds))
        );
        assert_eq!(
            ms("1764410400123", Unit::Millis),
            Ok((1_764_410_400_123, TimeUnit::Millis))
        );
        assert_eq!(
            ms("1764410400123456", Unit::Micros),
            Ok((1_764_410_400_123, TimeUnit::Micros))
        );
        assert_eq!(
            ms("1764410400123456789", Unit::Nanos),
            Ok((1_764_410_400_123, TimeUnit::Nanos))
        );
    }

    #[test]
    fn all_four_units_by_magnitude() {
        assert_eq!(
            ms("1764410400", Unit::Auto),
            Ok((1_764_410_400_000, TimeUnit::Seconds))
        );
        assert_eq!(
            ms("1764410400123", Unit::Auto),
            Ok((1_764_410_400_123, TimeUnit::Millis))
        );
        assert_eq!(
            ms("1764410400123456", Unit::Auto),
            Ok((1_764_410_400_123, TimeUnit::Micros))
        );
        assert_eq!(
            ms("1764410400123456789", Unit::Auto),
            Ok((1_764_410_400_123, TimeUnit::Nanos))
        );
        assert_eq!(ms("0", Unit::Auto), Ok((0, TimeUnit::Seconds)));
        assert_eq!(
            ms("-86400", Unit::Auto),
            Ok((-86_400_000, TimeUnit::Seconds))
        );
    }

    #[test]
    fn fractions_and_exponents_are_exact() {
        assert_eq!(
            ms("1764410400.123", Unit::Auto),
            Ok((1_764_410_400_123, TimeUnit::Seconds))
        );
        assert_eq!(
            ms("1.764410400123e9", Unit::Seconds),
            Ok((1_764_410_400_123, TimeUnit::Seconds))
        );
        assert_eq!(
            ms("1.764410400123E12", Unit::Auto),
            Ok((1_764_410_400_123, TimeUnit::Millis))
        );
        assert_eq!(
            ms("17644104001230e-1", Unit::Millis),
            Ok((1_764_410_400_123, TimeUnit::Millis))
        );
        assert_eq!(
            ms("1764410400123.9", Unit::Millis),
            Ok((1_764_410_400_123, TimeUnit::Millis))
        );
        assert_eq!(ms("-0.5", Unit::Millis), Ok((-1, TimeUnit::Millis)));
        assert_eq!(ms("-1.5", Unit::Seconds), Ok((-1500, TimeUnit::Seconds)));
        assert_eq!(ms("-1500", Unit::Micros), Ok((-2, TimeUnit::Micros)));
        assert_eq!(ms("0.0e5", Unit::Auto), Ok((0, TimeUnit::Seconds)));
        assert_eq!(ms("1e-400", Unit::Millis), Ok((0, TimeUnit::Millis)));
    }

    #[test]
    fn out_of_range_is_reported_not_wrapped() {
        assert!(matches!(
            ms("1e30", Unit::Seconds),
            Err(TimeError::OutOfRange {
                negative: false,
                ..
            })
        ));
        assert!(matches!(
            ms("-9223372036854775808", Unit::Seconds),
            Err(TimeError::OutOfRange { negative: true, .. })
        ));
        assert!(matches!(
            ms("1e999999999999", Unit::Auto),
            Err(TimeError::OutOfRange { .. })
        ));
        assert_eq!(
            ms("9223372036854775807", Unit::Millis),
            Ok((i64::MAX, TimeUnit::Millis))
        );
    }

    #[test]
    fn strings_rfc3339_with_offsets_and_numbers() {
        assert_eq!(
            text_to_ms("2025-11-29T10:00:00Z", Unit::Auto),
            Ok((1_764_410_400_000, TimeUnit::Rfc3339))
        );
        assert_eq!(
            text_to_ms("2025-11-29T11:00:00.123+01:00", Unit::Auto),
            Ok((1_764_410_400_123, TimeUnit::Rfc3339))
        );
        assert_eq!(
            text_to_ms("2025-11-29T04:30:00-05:30", Unit::Auto),
            Ok((1_764_410_400_000, TimeUnit::Rfc3339))
        );
        assert_eq!(
            text_to_ms("1969-12-31T23:59:59.9995Z", Unit::Auto),
            Ok((-1, TimeUnit::Rfc3339))
        );
        assert_eq!(
            text_to_ms("1764410400123", Unit::Auto),
            Ok((1_764_410_400_123, TimeUnit::Millis))
        );
        assert_eq!(
            text_to_ms("yesterday", Unit::Auto),
            Err(TimeError::NotATime)
        );
        assert_eq!(
            text_to_ms("2025-13-01T00:00:00Z", Unit::Auto),
            Err(TimeError::NotATime)
        );
    }

    proptest! {
        #[test]
        fn int_fast_path_equals_text_path(v in any::<i64>(), unit in prop::sample::select(vec![Unit::Auto, Unit::Seconds, Unit::Millis, Unit::Micros, Unit::Nanos])) {
            prop_assert_eq!(int_to_ms(v, unit), number_to_ms(v.to_string().as_bytes(), unit));
        }

        /// Ground truth: an integer ms value rendered in each unit (with exact decimal
        /// fractions) must come back as the same ms.
        #[test]
        fn units_round_trip_exactly(t in -(1i64 << 45)..(1i64 << 45)) {
            let sign = if t < 0 { "-" } else { "" };
            let a = t.unsigned_abs();
            let secs = format!("{sign}{}.{:03}", a / 1000, a % 1000);
            prop_assert_eq!(ms(&secs, Unit::Seconds).unwrap().0, t);
            prop_assert_eq!(ms(&t.to_string(), Unit::Millis).unwrap().0, t);
            prop_assert_eq!(ms(&format!("{}", t as i128 * 1000 + 999), Unit::Micros).unwrap().0, t);
            prop_assert_eq!(ms(&format!("{}e6", t), Unit::Nanos).unwrap().0, t);
            prop_assert_eq!(ms(&format!("{}", t as i128 * 1_000_000), Unit::Nanos).unwrap().0, t);
        }

        #[test]
        fn general_path_agrees_with_fast_path(v in 0i64..999_999_999_999_999_999) {
            let plain = ms(&v.to_string(), Unit::Millis).unwrap();
            let expo = ms(&format!("{v}.000e0"), Unit::Millis).unwrap();
            prop_assert_eq!(plain, expo);
        }
    }
}
