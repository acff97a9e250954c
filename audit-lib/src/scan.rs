//! The targeted JSON field scanner: finds one value by path without building a document.
//!
//! Rules (the differential tests hold the scanner to them against a full parser):
//! - **Duplicate keys: first occurrence at the requested level.** For `a.b`, the first
//!   `a` of the top-level object is taken; if it is not an object, or has no `b`, the
//!   field is absent (a later duplicate `a` is not consulted). serde_json's `Value`
//!   would keep the last duplicate instead; the oracle in the tests implements this
//!   rule on top of serde_json's tokenizer.
//! - Keys are compared after JSON unescaping: `"t\u0073"` is the key `ts`. Only keys
//!   containing a backslash are decoded (through serde_json, allocating; rare).
//! - **Early exit**: scanning stops at the field's value (or at the end of the object
//!   that lacks it). Bytes after that point are not validated, and values that are
//!   skipped are checked only for structure (string ends, bracket nesting), not for
//!   full grammar. So on every document a full parser accepts the scanner returns
//!   exactly what the oracle returns; a document that is malformed only where the
//!   scanner does not look may still yield its field. A document whose defect lies on
//!   the scanner's path (truncation before the value, bad syntax in the keys it
//!   reads, an invalid target value) is reported as [`ScanError`].
//! - A top-level value that is not an object has no fields: `Ok(None)` when it is
//!   valid JSON (checked by the full parser, the fallback where the scanner cannot
//!   decide), an error otherwise.

use std::borrow::Cow;

use serde::de::IgnoredAny;

mod compact;
mod swar;

use compact::compact_int;
pub use compact::CompactPrefix;
use swar::{
    align_digits, block_masks, escaped_mask, has_byte, leading_digits, load8, parse_8_digits,
    prefix_xor, POW10,
};

/// A value found by the scanner, borrowed from the document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RawValue<'a> {
    Null,
    Bool(bool),
    /// A plain integer (no fraction or exponent, at most 18 digits), already converted.
    Int(i64),
    /// Any other number: its text (ASCII), validated against the JSON grammar.
    Number(&'a [u8]),
    /// The decoded string.
    String(Cow<'a, str>),
    /// An object or array: present, but not a scalar time.
    Compound,
}

/// Why the scanner could not read the document on its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSON at byte {offset}: {what}")]
pub struct ScanError {
    pub offset: usize,
    pub what: &'static str,
}

fn err<T>(offset: usize, what: &'static str) -> Result<T, ScanError> {
    Err(ScanError { offset, what })
}

#[inline(always)]
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    #[inline(always)]
    fn skip_ws(&mut self) {
        while self.i < self.b.len() && is_ws(self.b[self.i]) {
            self.i += 1;
        }
    }

    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// With `i` just after an opening quote: returns the index of the closing quote and
    /// whether a backslash occurred. Eight bytes per step (SWAR) for the short strings
    /// that dominate JSON (keys, enum values); memchr (SIMD) for long ones.
    #[inline(always)]
    fn string_end(&mut self) -> Result<(usize, bool), ScanError> {
        let start = self.i;
        let mut escaped = false;
        let b = self.b;
        let mut i = self.i;
        let short_end = (i + 32).min(b.len());
        loop {
            // Find the next quote or backslash.
            let at = if i + 8 <= short_end {
                let chunk = load8(b, i);
                let m = has_byte(chunk, b'"') | has_byte(chunk, b'\\');
                if m == 0 {
                    i += 8;
                    continue;
                }
                i + (m.trailing_zeros() / 8) as usize
            } else if i < short_end {
                if b[i] != b'"' && b[i] != b'\\' {
                    i += 1;
                    continue;
                }
                i
            } else if i >= b.len() {
                return err(start, "unterminated string");
            } else {
                match memchr::memchr2(b'"', b'\\', &b[i..]) {
                    None => return err(start, "unterminated string"),
                    Some(p) => i + p,
                }
            };
            if b[at] == b'"' {
                self.i = at + 1;
                return Ok((at, escaped));
            }
            escaped = true;
            i = at + 2;
        }
    }

    /// Skips one value of any type; checks structure only.
    fn skip_value(&mut self) -> Result<(), ScanError> {
        match self.peek() {
            Some(b'"') => {
                self.i += 1;
                self.string_end().map(|_| ())
            }
            Some(b'{') | Some(b'[') => self.skip_compound(),
            Some(b'-' | b'0'..=b'9') => {
                let start = self.i;
                while self.i < self.b.len()
                    && matches!(
                        self.b[self.i],
                        b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'
                    )
                {
                    self.i += 1;
                }
                if self.i == start + 1 && self.b[start] == b'-' {
                    return err(start, "invalid number");
                }
                Ok(())
            }
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(_) => err(self.i, "expected a value"),
            None => err(self.i, "unexpected end of input, expected a value"),
        }
    }

    fn literal(&mut self, lit: &'static [u8]) -> Result<(), ScanError> {
        if self.b[self.i..].starts_with(lit) {
            self.i += lit.len();
            Ok(())
        } else {
            err(self.i, "invalid literal")
        }
    }

    /// Skips a nested object or array, 64 bytes per step: SIMD compares give bit
    /// masks of quotes, backslashes and brackets; escapes and a prefix XOR give the
    /// bytes inside strings; popcounts track the depth, and bits are walked one by one
    /// only in the block where the depth can return to zero (simdjson's stage 1, in
    /// safe Rust through `wide`).
    ///
    /// Only the compound's own bracket pair is counted: in valid JSON the other pair
    /// nests properly inside it and cannot close it. On invalid input the result may
    /// differ from a full parser's (the differential tests only require agreement on
    /// valid documents), but it never panics.
    fn skip_compound(&mut self) -> Result<(), ScanError> {
        let start = self.i;
        let b = self.b;
        let open = b[start];
        let close = open + 2; // '{' → '}', '[' → ']'
        let mut depth: i64 = 0;
        let mut in_string: u64 = 0;
        let mut escape_carry: u64 = 0;
        let mut pos = start;
        let mut padded = [b' '; 64];
        while pos < b.len() {
            let block: &[u8] = if pos + 64 <= b.len() {
                &b[pos..pos + 64]
            } else {
                // Spaces are neutral padding for a short last block.
                let n = b.len() - pos;
                padded[..n].copy_from_slice(&b[pos..]);
                &padded
            };
            let (quotes, backslashes, opens, closes) = block_masks(block, open, close);
            let escaped = if backslashes == 0 && escape_carry == 0 {
                0
            } else {
                escaped_mask(backslashes, &mut escape_carry)
            };
            let inside = prefix_xor(quotes & !escaped) ^ in_string;
            in_string = 0u64.wrapping_sub(inside >> 63);
            let opens = opens & !inside;
            let closes = closes & !inside;
            let n_close = closes.count_ones() as i64;
            if depth - n_close > 0 {
                depth += opens.count_ones() as i64 - n_close;
            } else {
                let mut events = opens | closes;
                while events != 0 {
                    let t = events.trailing_zeros();
                    events &= events - 1;
                    if (opens >> t) & 1 == 1 {
                        depth += 1;
                    } else {
                        depth -= 1;
                        if depth == 0 {
                            self.i = pos + t as usize + 1;
                            return Ok(());
                        }
                    }
                }
            }
            pos += 64;
        }
        err(start, "unterminated object or array")
    }

    /// After a value inside an object: `,` (more members) → true, `}` → false.
    #[inline(always)]
    fn member_separator(&mut self) -> Result<bool, ScanError> {
        self.skip_ws();
        match self.peek() {
            Some(b',') => {
                self.i += 1;
                Ok(true)
            }
            Some(b'}') => {
                self.i += 1;
                Ok(false)
            }
            Some(_) => err(self.i, "expected ',' or '}' after an object member"),
            None => err(self.i, "unexpected end of input inside an object"),
        }
    }

    /// Reads the target value (strictly) and checks what follows it.
    #[inline(always)]
    fn read_target(&mut self) -> Result<RawValue<'a>, ScanError> {
        let start = self.i;
        let v = match self.peek() {
            Some(b'"') => {
                self.i += 1;
                let (end, escaped) = self.string_end()?;
                let raw = &self.b[start + 1..end];
                if escaped {
                    match serde_json::from_slice::<String>(&self.b[start..end + 1]) {
                        Ok(s) => RawValue::String(Cow::Owned(s)),
                        Err(_) => return err(start, "invalid string escape"),
                    }
                } else {
                    if raw.iter().any(|&c| c < 0x20) {
                        return err(start, "control character in string");
                    }
                    match std::str::from_utf8(raw) {
                        Ok(s) => RawValue::String(Cow::Borrowed(s)),
                        Err(_) => return err(start, "string is not UTF-8"),
                    }
                }
            }
            Some(b'-' | b'0'..=b'9') => {
                // Fast path, fused validation and conversion: a plain integer of at
                // most 18 digits (every realistic timestamp).
                let b = &self.b[start..];
                let neg = b[0] == b'-';
                let ds = usize::from(neg);
                let mut i = ds;
                let mut v: i64 = 0;
                // Eight digits at a time (SWAR) while they last: timestamps have 10–19
                // digits, so one or two steps replace most dependent multiply-adds.
                while i + 8 <= b.len() && i - ds <= 10 {
                    let chunk = load8(b, i);
                    let k = leading_digits(chunk);
                    if k < 8 {
                        // The digits that end in this chunk, parsed from the register
                        // already loaded (at most 18 digits in all: no overflow).
                        if k > 0 && i - ds + k <= 18 {
                            v = v * POW10[k] + parse_8_digits(align_digits(chunk, k)) as i64;
                            i += k;
                        }
                        break;
                    }
                    v = v * 100_000_000 + parse_8_digits(chunk) as i64;
                    i += 8;
                }
                while i < b.len() && i - ds < 18 {
                    let d = b[i].wrapping_sub(b'0');
                    if d > 9 {
                        break;
                    }
                    v = v * 10 + d as i64;
                    i += 1;
                }
                let nd = i - ds;
                let plain = (1..=18).contains(&nd)
                    && !(nd > 1 && b[ds] == b'0')
                    && (i == b.len()
                        || !matches!(b[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-'));
                if plain {
                    self.i += i;
                    let v = RawValue::Int(if neg { -v } else { v });
                    self.member_separator()?;
                    return Ok(v);
                }
                let len = number_len(&self.b[start..]).ok_or(ScanError {
                    offset: start,
                    what: "invalid number",
                })?;
                self.i += len;
                RawValue::Number(&self.b[start..start + len])
            }
            Some(b't') => {
                self.literal(b"true")?;
                RawValue::Bool(true)
            }
            Some(b'f') => {
                self.literal(b"false")?;
                RawValue::Bool(false)
            }
            Some(b'n') => {
                self.literal(b"null")?;
                RawValue::Null
            }
            Some(b'{') | Some(b'[') => {
                // Not a time; validate it so an unterminated compound is malformed.
                self.skip_compound()?;
                RawValue::Compound
            }
            Some(_) => return err(start, "expected a value"),
            None => return err(start, "unexpected end of input, expected a value"),
        };
        // The value must be followed by a member separator, as in a valid document.
        self.member_separator()?;
        Ok(v)
    }
}

/// Length of the JSON number at the start of `b`, strictly per the grammar
/// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`; `None` if invalid.
pub fn number_len(b: &[u8]) -> Option<usize> {
    let mut i = 0;
    if b.first() == Some(&b'-') {
        i += 1;
    }
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            while matches!(b.get(i), Some(b'0'..=b'9')) {
                i += 1;
            }
        }
        _ => return None,
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        let s = i;
        while matches!(b.get(i), Some(b'0'..=b'9')) {
            i += 1;
        }
        if i == s {
            return None;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let s = i;
        while matches!(b.get(i), Some(b'0'..=b'9')) {
            i += 1;
        }
        if i == s {
            return None;
        }
    }
    // A number directly followed by another number character is not a number.
    if matches!(
        b.get(i),
        Some(b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
    ) {
        return None;
    }
    Some(i)
}

/// Finds the value at `path` (segments of a dotted path) in the JSON document `doc`.
/// `Ok(None)`: the document has no such field. See the module docs for the rules.
#[inline]
pub fn find_path<'a, S: AsRef<str>>(
    doc: &'a [u8],
    path: &[S],
) -> Result<Option<RawValue<'a>>, ScanError> {
    // Fast path for the commonest layout, a compact object whose first key is the
    // (top-level) field: `{"ts":...`. Same result as the general walk below.
    if let [only] = path {
        let name = only.as_ref().as_bytes();
        let n = name.len();
        if doc.len() > n + 4
            && doc[0] == b'{'
            && doc[1] == b'"'
            && doc[n + 2] == b'"'
            && doc[n + 3] == b':'
            && doc[2..n + 2].iter().zip(name).all(|(a, b)| a == b)
        {
            if let Some(v) = compact_int(doc, n + 4) {
                return Ok(Some(RawValue::Int(v)));
            }
            let mut c = Cursor { b: doc, i: n + 4 };
            c.skip_ws();
            return c.read_target().map(Some);
        }
    }
    find_path_general(doc, path)
}

#[inline(never)]
fn find_path_general<'a, S: AsRef<str>>(
    doc: &'a [u8],
    path: &[S],
) -> Result<Option<RawValue<'a>>, ScanError> {
    let mut c = Cursor { b: doc, i: 0 };
    c.skip_ws();
    match c.peek() {
        Some(b'{') => {}
        None => return err(0, "empty document"),
        Some(_) => {
            // Valid JSON that is not an object has no fields; deciding validity needs
            // the full parser.
            return match serde_json::from_slice::<IgnoredAny>(doc) {
                Ok(_) => Ok(None),
                Err(_) => err(c.i, "not a JSON document"),
            };
        }
    }
    let Some((last, parents)) = path.split_last() else {
        return Ok(None);
    };
    for seg in parents {
        if !find_member(&mut c, seg.as_ref())? {
            return Ok(None);
        }
        // Descend into the first occurrence only. One that is not an object means the
        // field is absent, provided it is a well-formed value (a truncated or invalid
        // one is an error, as the full parser would say).
        if c.peek() != Some(b'{') {
            c.read_target()?;
            return Ok(None);
        }
    }
    if find_member(&mut c, last.as_ref())? {
        c.read_target().map(Some)
    } else {
        Ok(None)
    }
}

/// With the cursor on `{`: advances to the value of the first member named `name`
/// and returns true, or consumes the object and returns false.
#[inline]
fn find_member(c: &mut Cursor<'_>, name: &str) -> Result<bool, ScanError> {
    debug_assert_eq!(c.peek(), Some(b'{'));
    c.i += 1;
    c.skip_ws();
    if c.peek() == Some(b'}') {
        c.i += 1;
        return Ok(false);
    }
    let name = name.as_bytes();
    loop {
        if c.peek() != Some(b'"') {
            return err(c.i, "expected a quoted object key");
        }
        let key_start = c.i;
        c.i += 1;
        let (key_end, escaped) = c.string_end()?;
        let matched = if escaped {
            match serde_json::from_slice::<String>(&c.b[key_start..key_end + 1]) {
                Ok(k) => k.as_bytes() == name,
                Err(_) => return err(key_start, "invalid escape in object key"),
            }
        } else {
            // Short names: a byte loop beats a call to memcmp.
            let key = &c.b[key_start + 1..key_end];
            key.len() == name.len() && key.iter().zip(name).all(|(a, b)| a == b)
        };
        c.skip_ws();
        if c.peek() != Some(b':') {
            return err(c.i, "expected ':' after an object key");
        }
        c.i += 1;
        c.skip_ws();
        if matched {
            return Ok(true);
        }
        c.skip_value()?;
        if !c.member_separator()? {
            return Ok(false);
        }
        c.skip_ws();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f<'a>(doc: &'a str, path: &str) -> Result<Option<RawValue<'a>>, ScanError> {
        let segs: Vec<&str> = path.split('.').collect();
        find_path(doc.as_bytes(), &segs)
    }
    fn num(s: &str) -> Result<Option<RawValue<'_>>, ScanError> {
        Ok(Some(match s.parse::<i64>() {
            Ok(v) if !s.starts_with("-0") => RawValue::Int(v),
            _ => RawValue::Number(s.as_bytes()),
        }))
    }

    #[test]
    fn top_level_number() {
        assert_eq!(f(r#"{"ts":123}"#, "ts"), num("123"));
        assert_eq!(f(r#" { "a" : 1 , "ts" : -1.5e3 } "#, "ts"), num("-1.5e3"));
        assert_eq!(f(r#"{"a":1}"#, "ts"), Ok(None));
        assert_eq!(f(r#"{}"#, "ts"), Ok(None));
    }

    #[test]
    fn nested_values_before_the_field_are_skipped() {
        let d = r#"{"a":{"ts":1,"b":[{"ts":2},"}",["]"]]},"c":[1,[2,{"x":"ts"}]],"ts":3}"#;
        assert_eq!(f(d, "ts"), num("3"));
        assert_eq!(f(d, "a.ts"), num("1"));
        assert_eq!(f(d, "a.b"), Ok(Some(RawValue::Compound)));
        assert_eq!(f(d, "a.x"), Ok(None));
        assert_eq!(f(d, "c.x"), Ok(None));
    }

    #[test]
    fn field_name_inside_strings_and_escaped_quotes() {
        let d = r#"{"msg":"he said \"ts\":5, \\","ts\\":7,"ts":9}"#;
        assert_eq!(f(d, "ts"), num("9"));
    }

    #[test]
    fn escaped_keys_are_decoded() {
        assert_eq!(f(r#"{"t\u0073":42}"#, "ts"), num("42"));
        assert_eq!(
            f(r#"{"\u0074s":"x\u0041"}"#, "ts"),
            Ok(Some(RawValue::String("xA".into())))
        );
        assert!(f(r#"{"t\q":1}"#, "ts").is_err());
    }

    #[test]
    fn duplicates_first_occurrence_at_requested_level() {
        assert_eq!(f(r#"{"ts":1,"ts":2}"#, "ts"), num("1"));
        // First `a` is not an object: absent, the second `a` is not consulted.
        assert_eq!(f(r#"{"a":5,"a":{"b":1}}"#, "a.b"), Ok(None));
        assert_eq!(f(r#"{"a":{"c":1},"a":{"b":1}}"#, "a.b"), Ok(None));
    }

    #[test]
    fn malformed_on_the_path_is_an_error() {
        for d in [
            "",
            "   ",
            "{",
            r#"{"ts""#,
            r#"{"ts":"#,
            r#"{"ts":12"#,
            r#"{"ts":01}"#,
            r#"{"ts":1.}"#,
            r#"{"ts":-}"#,
            r#"{"ts":1x}"#,
            r#"{"a":"#,
            r#"{"a":[1,2"#,
            "{a:1}",
            "{'ts':1}",
            r#"{"ts":tru}"#,
            r#"{"ts":"a"#,
            "\u{feff}{\"ts\":1}",
            r#"{"ts" 1}"#,
        ] {
            assert!(f(d, "ts").is_err(), "{d:?} should be malformed");
        }
    }

    #[test]
    fn long_integers_leave_the_fast_path_without_overflow() {
        // Found by cargo-fuzz: 19+ digits overflowed the fast path's accumulator.
        assert_eq!(
            f(r#"{"ts":98884001247744240420.0}"#, "ts"),
            Ok(Some(RawValue::Number(b"98884001247744240420.0")))
        );
        assert_eq!(
            f(r#"{"ts":9999999999999999999}"#, "ts"),
            Ok(Some(RawValue::Number(b"9999999999999999999")))
        );
        assert_eq!(
            f(r#"{"ts":-999999999999999999}"#, "ts"),
            Ok(Some(RawValue::Int(-999_999_999_999_999_999)))
        );
    }

    #[test]
    fn block_skipping_across_64_byte_boundaries_and_escapes() {
        // Backslashes, escaped quotes and brackets inside strings land at every offset
        // relative to the 64-byte blocks, including a backslash as a block's last byte.
        for pad in 0..200 {
            for tail in [r#"\\"#, r#"\""#, r#"}]"#, r#"\\\""#, "{[", r#"\\\\"#] {
                let filler = "x".repeat(pad);
                let doc = format!(
                    r#"{{"a":{{"s":"{filler}{tail}","n":[1,{{"k":"{tail}{filler}"}},[[]]],"t":{{}}}},"ts":5,"z":[{{"q":"{tail}"}}]}}"#
                );
                let v: serde_json::Value =
                    serde_json::from_str(&doc).unwrap_or_else(|e| panic!("{e}: {doc}"));
                assert_eq!(v["ts"], 5);
                assert_eq!(f(&doc, "ts"), num("5"), "{doc}");
                assert_eq!(f(&doc, "zz"), Ok(None), "{doc}");
                // Truncated inside the skipped compound: malformed, never a wrong answer.
                let field_at = doc.find(r#","ts""#).unwrap();
                for cut in [field_at / 3, field_at / 2, field_at - 1] {
                    assert!(f(&doc[..cut], "ts").is_err(), "{}", &doc[..cut]);
                }
            }
        }
    }

    #[test]
    fn escaped_mask_and_prefix_xor() {
        let mut carry = 0;
        // "\\" at 0-1 (escaped backslash), "\\\"" at 3-4: byte 4 escaped.
        let bs = 0b0_1011;
        assert_eq!(escaped_mask(bs, &mut carry), 0b1_0010);
        assert_eq!(carry, 0);
        assert_eq!(escaped_mask(1 << 63, &mut carry), 0);
        assert_eq!(carry, 1);
        assert_eq!(escaped_mask(0, &mut carry), 1);
        assert_eq!(carry, 0);
        // Quotes at 2 and 5: bytes 2..=4 are inside; an unclosed quote at 7 runs on.
        assert_eq!(prefix_xor(0b0010_0100), 0b0001_1100);
        assert_eq!(prefix_xor(0b1001_0010), 0xFFFF_FFFF_FFFF_FF8E);
    }

    #[test]
    fn non_objects_have_no_fields() {
        assert_eq!(f("[1,2]", "ts"), Ok(None));
        assert_eq!(f("17", "ts"), Ok(None));
        assert_eq!(f(r#""ts""#, "ts"), Ok(None));
        assert!(f("[1,", "ts").is_err());
        assert!(f("\u{1}\u{2}binary", "ts").is_err());
    }

    #[test]
    fn binary_payloads_never_panic() {
        let bytes: Vec<u8> = (0..=255u8).cycle().take(2000).collect();
        assert!(find_path(&bytes, &["ts"]).is_err());
        let mut b = b"{\"ts\":\"".to_vec();
        b.extend_from_slice(&[0xff, 0xfe, b'"', b'}']);
        assert!(find_path(&b, &["ts"]).is_err());
    }
}
