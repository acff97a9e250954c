//! The scanner's fast path for the commonest layout: a compact object whose first key
//! is the wanted top-level field and whose value is a short plain integer
//! (`{"ts":1764410400000,`), read without the general walk.

use super::swar::{align_digits, leading_digits, load8, parse_8_digits, POW10};

/// The value at `at` when it is a plain integer of at most 16 digits followed directly
/// by `,` or `}` (a compact producer's timestamp), read with two loads and two
/// independent SWAR conversions; `None` sends the caller to the general reader, which
/// returns the same `RawValue::Int` for every input this accepts.
#[inline(always)]
pub(super) fn compact_int(b: &[u8], at: usize) -> Option<i64> {
    let neg = *b.get(at)? == b'-';
    let s = at + usize::from(neg);
    if s + 16 > b.len() {
        return None;
    }
    let w0 = load8(b, s);
    let k0 = leading_digits(w0);
    // No digit, or a leading zero before more digits: not a plain integer.
    if k0 == 0 || (k0 > 1 && w0 & 0xFF == u64::from(b'0')) {
        return None;
    }
    let (v, next) = if k0 < 8 {
        (parse_8_digits(align_digits(w0, k0)), w0 >> (8 * k0))
    } else {
        let w1 = load8(b, s + 8);
        let k1 = leading_digits(w1);
        if k1 == 8 {
            return None; // 16 digits or more: the general reader
        }
        let hi = parse_8_digits(w0);
        let lo = if k1 == 0 {
            0
        } else {
            parse_8_digits(align_digits(w1, k1))
        };
        (hi * POW10[k1] as u64 + lo, w1 >> (8 * k1))
    };
    if !matches!(next as u8, b',' | b'}') {
        return None;
    }
    let v = v as i64;
    Some(if neg { -v } else { v })
}

/// The commonest layout, precompiled for one top-level field: a compact object whose
/// first key is the field (`{"ts":` …) and whose value is a plain integer of at most 16
/// digits followed directly by `,` or `}`. Matching the opening bytes is two masked
/// word compares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactPrefix {
    words: [u64; 2],
    masks: [u64; 2],
    len: usize,
}

impl CompactPrefix {
    /// For a top-level field name of up to 12 bytes that needs no JSON escaping.
    pub fn new(name: &str) -> Option<CompactPrefix> {
        if name.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
            return None;
        }
        let prefix = format!("{{\"{name}\":");
        let len = prefix.len();
        if len > 16 {
            return None;
        }
        let mut bytes = [0u8; 16];
        bytes[..len].copy_from_slice(prefix.as_bytes());
        let mut mask_bytes = [0u8; 16];
        mask_bytes[..len].fill(0xFF);
        let word = |b: &[u8; 16], i: usize| load8(b, i);
        Some(CompactPrefix {
            words: [word(&bytes, 0), word(&bytes, 8)],
            masks: [word(&mask_bytes, 0), word(&mask_bytes, 8)],
            len,
        })
    }

    /// `Some(v)` exactly when the document has this layout; then
    /// `find_path(doc, [name])` is `Ok(Some(RawValue::Int(v)))`. `None` says nothing:
    /// ask `find_path`.
    #[inline(always)]
    pub fn int(&self, doc: &[u8]) -> Option<i64> {
        if doc.len() < 16 {
            return None;
        }
        let differ = ((load8(doc, 0) ^ self.words[0]) & self.masks[0])
            | ((load8(doc, 8) ^ self.words[1]) & self.masks[1]);
        if differ != 0 {
            return None;
        }
        compact_int(doc, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::{find_path, find_path_general, RawValue};

    /// The compact-integer shortcut returns exactly what the general reader returns:
    /// every digit count from 0 to 20, signs, leading zeros, each kind of follower, and
    /// documents too short for its two loads.
    #[test]
    fn compact_int_agrees_with_the_general_reader() {
        let followers = [
            ",", "}", " ,", ".5,", "e3,", "E+1}", "x", "", "\"", "-", "+", "]", "1",
        ];
        let mut checked = 0;
        for sign in ["", "-", "+"] {
            for lead in ["", "0", "00"] {
                for nd in 0..=20usize {
                    let digits: String =
                        (0..nd).map(|i| char::from(b'1' + (i % 9) as u8)).collect();
                    for f in followers {
                        for pad in ["", r#""a":1}"#, r#""pad":"xxxxxxxxxxxxxxxxxxxxxxxx"}"#] {
                            let doc = format!(r#"{{"ts":{sign}{lead}{digits}{f}{pad}"#);
                            let fast = find_path(doc.as_bytes(), &["ts"]);
                            let general = find_path_general(doc.as_bytes(), &["ts"]);
                            assert_eq!(fast, general, "{doc}");
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 3 * 3 * 21 * 13 * 3);
        // The precompiled prefix agrees with find_path wherever it answers.
        let ts = CompactPrefix::new("ts").unwrap();
        for doc in [
            r#"{"ts":1764410400000,"a":1}"#,
            r#"{"ts":1764410400000}       "#,
            r#"{"ts":-1764410400000,"a":1}"#,
            r#"{"ts":17644104000000000,"a":1}"#,
            r#"{"ts": 1764410400000,"a":1}"#,
            r#"{"tss":1764410400000,"a":1}"#,
            r#"{"t\u0073":1764410400000,"a":1}"#,
            r#"{"ts":1764410400000.5,"a":1}"#,
            r#"{"ts":1764"#,
        ] {
            let want = match find_path(doc.as_bytes(), &["ts"]) {
                Ok(Some(RawValue::Int(v))) => Some(v),
                _ => None,
            };
            let got = ts.int(doc.as_bytes());
            assert!(got.is_none() || got == want, "{doc}: {got:?} vs {want:?}");
        }
        assert_eq!(
            ts.int(br#"{"ts":1764410400000,"a":1}"#),
            Some(1_764_410_400_000)
        );
        assert_eq!(ts.int(br#"{"ts": 1764410400000,"a":1}"#), None);
        assert!(CompactPrefix::new("timestamp").is_some());
        assert!(CompactPrefix::new("event_timestamp").is_none());
        assert!(CompactPrefix::new("a\"b").is_none());
        // And the shortcut is taken where it should be.
        assert_eq!(
            compact_int(br#"{"ts":1764410400000,"a":1}"#, 6),
            Some(1_764_410_400_000)
        );
        assert_eq!(
            compact_int(br#"{"ts":-12345678,"abc":1}"#, 6),
            Some(-12_345_678)
        );
        assert_eq!(compact_int(br#"{"ts":0,"a":1234567890}"#, 6), Some(0));
        assert_eq!(compact_int(br#"{"ts":012,"a":123456789}"#, 6), None);
        assert_eq!(compact_int(br#"{"ts":1234567890123456,"a":1}"#, 6), None);
    }
}
