//! Multiset checksum of a window, pinned by `docs/audit-message-v1.md`:
//! per message `h = xxh3_64(le_u32(len(key)) ‖ key ‖ value)` (seed 0), summed with
//! wrapping arithmetic. The length prefix keeps `(key "ab", value "c")` and
//! `(key "a", value "bc")` apart; the sum makes the checksum independent of order and
//! of how a window is split into increments.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use xxhash_rust::xxh3::{xxh3_64, Xxh3Default};

/// Wrapping sum of message hashes; serialised as 16 lowercase hex digits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Checksum(pub u64);

/// Messages up to this size are hashed from a stack copy in one shot, which is several
/// times faster than the streaming hasher for small inputs.
const STACK_HASH_LIMIT: usize = 512;
const SMALL_STACK_HASH_LIMIT: usize = 160;

#[inline(always)]
fn hash_in(buf: &mut [u8], key_len: &[u8; 4], key: &[u8], value: &[u8]) -> u64 {
    let total = 4 + key.len() + value.len();
    buf[..4].copy_from_slice(key_len);
    buf[4..4 + key.len()].copy_from_slice(key);
    buf[4 + key.len()..total].copy_from_slice(value);
    xxh3_64(&buf[..total])
}

/// The pinned 64-bit hash of one message. An absent key hashes like an empty key.
#[inline]
pub fn message_hash(key: Option<&[u8]>, value: &[u8]) -> u64 {
    let key = key.unwrap_or(&[]);
    // Keys longer than u32::MAX cannot exist in Kafka; saturate rather than panic.
    let key_len = key_len_prefix(key.len());
    let total = 4 + key.len() + value.len();
    // Two stack sizes: zeroing the buffer is part of the cost, so typical ~100-byte
    // messages use the small one.
    if total <= SMALL_STACK_HASH_LIMIT {
        let mut buf = [0u8; SMALL_STACK_HASH_LIMIT];
        hash_in(&mut buf, &key_len, key, value)
    } else if total <= STACK_HASH_LIMIT {
        let mut buf = [0u8; STACK_HASH_LIMIT];
        hash_in(&mut buf, &key_len, key, value)
    } else {
        let mut h = Xxh3Default::new();
        h.update(&key_len);
        h.update(key);
        h.update(value);
        h.digest()
    }
}

/// [`message_hash`] of a message whose bytes the caller already holds contiguous, as
/// hashed: `le_u32(len(key)) ‖ key ‖ value`. One pass, no copy.
#[inline]
pub fn prefixed_message_hash(prefixed: &[u8]) -> u64 {
    xxh3_64(prefixed)
}

/// The 4-byte prefix of [`prefixed_message_hash`] for a key of `key_len` bytes.
#[inline]
pub fn key_len_prefix(key_len: usize) -> [u8; 4] {
    u32::try_from(key_len).unwrap_or(u32::MAX).to_le_bytes()
}

impl Checksum {
    /// Adds one message.
    #[inline]
    pub fn add_message(&mut self, key: Option<&[u8]>, value: &[u8]) {
        self.0 = self.0.wrapping_add(message_hash(key, value));
    }

    /// Adds one message by its hash, [`message_hash`] of its key and value (computed
    /// elsewhere, e.g. in one pass over bytes that are already contiguous).
    #[inline]
    pub fn add_hash(&mut self, hash: u64) {
        self.0 = self.0.wrapping_add(hash);
    }

    /// Adds another checksum (the union of both multisets).
    #[inline]
    pub fn merge(&mut self, other: Checksum) {
        self.0 = self.0.wrapping_add(other.0);
    }
}

impl fmt::Display for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// Error for a checksum string that is not 16 hex digits.
#[derive(Debug, thiserror::Error)]
#[error("checksum must be 16 lowercase hex digits, got {0:?}")]
pub struct InvalidChecksum(pub String);

impl FromStr for Checksum {
    type Err = InvalidChecksum;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ok = s.len() == 16
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !ok {
            return Err(InvalidChecksum(s.to_owned()));
        }
        u64::from_str_radix(s, 16)
            .map(Checksum)
            .map_err(|_| InvalidChecksum(s.to_owned()))
    }
}

impl Serialize for Checksum {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Checksum {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The reference definition, written the slow obvious way.
    fn reference(key: Option<&[u8]>, value: &[u8]) -> u64 {
        let key = key.unwrap_or(&[]);
        let mut buf = (key.len() as u32).to_le_bytes().to_vec();
        buf.extend_from_slice(key);
        buf.extend_from_slice(value);
        xxh3_64(&buf)
    }

    #[test]
    fn pinned_values_for_other_languages() {
        // xxh3_64 of the 4 zero bytes of an empty key and empty value.
        assert_eq!(message_hash(None, b""), xxh3_64(&[0, 0, 0, 0]));
        assert_eq!(message_hash(Some(b""), b""), message_hash(None, b""));
        assert_ne!(
            message_hash(Some(b"ab"), b"c"),
            message_hash(Some(b"a"), b"bc")
        );
    }

    #[test]
    fn hex_round_trip_and_strictness() {
        let c = Checksum(0x9f86d081884c7d65);
        assert_eq!(serde_json::to_string(&c).unwrap(), "\"9f86d081884c7d65\"");
        let back: Checksum = serde_json::from_str("\"9f86d081884c7d65\"").unwrap();
        assert_eq!(back, c);
        assert_eq!(Checksum(1).to_string(), "0000000000000001");
        for bad in [
            "\"9F86D081884C7D65\"",
            "\"123\"",
            "\"+f86d081884c7d65\"",
            "12",
        ] {
            assert!(serde_json::from_str::<Checksum>(bad).is_err(), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn fast_path_equals_reference(key in prop::option::of(prop::collection::vec(any::<u8>(), 0..300)),
                                      value in prop::collection::vec(any::<u8>(), 0..1200)) {
            prop_assert_eq!(message_hash(key.as_deref(), &value), reference(key.as_deref(), &value));
        }

        #[test]
        fn prefixed_hash_equals_message_hash(key in prop::option::of(prop::collection::vec(any::<u8>(), 0..300)),
                                             value in prop::collection::vec(any::<u8>(), 0..1200)) {
            let k = key.as_deref().unwrap_or(&[]);
            let mut buf = key_len_prefix(k.len()).to_vec();
            buf.extend_from_slice(k);
            buf.extend_from_slice(&value);
            prop_assert_eq!(prefixed_message_hash(&buf), message_hash(key.as_deref(), &value));
        }

        #[test]
        fn order_and_split_do_not_matter(msgs in prop::collection::vec((prop::collection::vec(any::<u8>(), 0..8), prop::collection::vec(any::<u8>(), 0..16)), 0..50), split in 0usize..50) {
            let mut all = Checksum::default();
            for (k, v) in &msgs { all.add_message(Some(k), v); }
            let split = split.min(msgs.len());
            let (mut a, mut b) = (Checksum::default(), Checksum::default());
            for (k, v) in msgs[..split].iter().rev() { a.add_message(Some(k), v); }
            for (k, v) in &msgs[split..] { b.add_message(Some(k), v); }
            a.merge(b);
            prop_assert_eq!(a, all);
        }
    }
}
