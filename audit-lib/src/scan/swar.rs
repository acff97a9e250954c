//! Word-at-a-time primitives of the scanner: bit masks of a 64-byte block (through
//! `wide`'s SIMD compares), eight-byte loads, and ASCII digit runs read and parsed
//! eight at a time.

/// Bit masks (bit k = byte k) of `"`, `\\`, `open` and `close` in a 64-byte block.
#[inline(always)]
pub(super) fn block_masks(block: &[u8], open: u8, close: u8) -> (u64, u64, u64, u64) {
    use wide::u8x16;
    let (q, bs, o, c) = (
        u8x16::splat(b'"'),
        u8x16::splat(b'\\'),
        u8x16::splat(open),
        u8x16::splat(close),
    );
    let (mut mq, mut mb, mut mo, mut mc) = (0u64, 0u64, 0u64, 0u64);
    for k in 0..4 {
        let mut lane = [0u8; 16];
        lane.copy_from_slice(&block[k * 16..k * 16 + 16]);
        let v = u8x16::new(lane);
        let shift = 16 * k;
        mq |= (v.simd_eq(q).to_bitmask() as u64 & 0xFFFF) << shift;
        mb |= (v.simd_eq(bs).to_bitmask() as u64 & 0xFFFF) << shift;
        mo |= (v.simd_eq(o).to_bitmask() as u64 & 0xFFFF) << shift;
        mc |= (v.simd_eq(c).to_bitmask() as u64 & 0xFFFF) << shift;
    }
    (mq, mb, mo, mc)
}

/// Positions escaped by a backslash. `carry` (bit 0) says the block's first byte is
/// escaped by the previous block's last backslash, and receives the same for the
/// next block. Backslashes are rare, so walking them one by one is cheap and obviously
/// right (an escaped backslash escapes nothing).
#[inline]
pub(super) fn escaped_mask(backslashes: u64, carry: &mut u64) -> u64 {
    let mut escaped = *carry;
    *carry = 0;
    let mut bits = backslashes;
    while bits != 0 {
        let i = bits.trailing_zeros();
        bits &= bits - 1;
        if (escaped >> i) & 1 == 1 {
            continue;
        }
        if i == 63 {
            *carry = 1;
        } else {
            escaped |= 1 << (i + 1);
        }
    }
    escaped
}

/// Bit k set when an odd number of bits at positions <= k are set: from an opening
/// quote up to (not including) its closing quote.
#[inline(always)]
pub(super) fn prefix_xor(mut x: u64) -> u64 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x
}

/// Eight bytes at `i` as a little-endian u64 (caller checks `i + 8 <= b.len()`).
#[inline(always)]
pub(super) fn load8(b: &[u8], i: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&b[i..i + 8]);
    u64::from_le_bytes(bytes)
}

/// Non-zero when some byte of `x` equals `c`; the lowest set 0x80 bit marks the first
/// such byte exactly (bits above it may be false positives from the borrow).
#[inline(always)]
pub(super) fn has_byte(x: u64, c: u8) -> u64 {
    let y = x ^ (0x0101_0101_0101_0101u64 * c as u64);
    y.wrapping_sub(0x0101_0101_0101_0101) & !y & 0x8080_8080_8080_8080
}

const ZEROS: u64 = 0x3030_3030_3030_3030;
pub(super) const POW10: [i64; 9] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

/// How many of the bytes of `chunk` (loaded little-endian) are ASCII digits before
/// the first other byte (8 when all are). A carry out of a non-digit byte can only
/// disturb later bytes, never the position of the first non-digit.
#[inline(always)]
pub(super) fn leading_digits(chunk: u64) -> usize {
    let hi = chunk & 0xF0F0_F0F0_F0F0_F0F0;
    let hi6 = chunk.wrapping_add(0x0606_0606_0606_0606) & 0xF0F0_F0F0_F0F0_F0F0;
    let nondigit = (hi ^ ZEROS) | (hi6 ^ ZEROS);
    (nondigit.trailing_zeros() / 8) as usize
}

/// True when all eight bytes of `chunk` are ASCII digits (the reference for
/// `leading_digits` in the tests).
#[cfg(test)]
fn all_digits(chunk: u64) -> bool {
    (chunk & 0xF0F0_F0F0_F0F0_F0F0) == 0x3030_3030_3030_3030
        && (chunk.wrapping_add(0x0606_0606_0606_0606) & 0xF0F0_F0F0_F0F0_F0F0)
            == 0x3030_3030_3030_3030
}

/// The value of eight ASCII digits loaded little-endian (first digit in the low byte).
#[inline(always)]
pub(super) fn parse_8_digits(chunk: u64) -> u64 {
    const MASK: u64 = 0x0000_00FF_0000_00FF;
    const MUL1: u64 = 100 + (1_000_000 << 32);
    const MUL2: u64 = 1 + (10_000 << 32);
    let c = chunk.wrapping_sub(0x3030_3030_3030_3030);
    let c = c.wrapping_mul(10).wrapping_add(c >> 8);
    ((c & MASK)
        .wrapping_mul(MUL1)
        .wrapping_add(((c >> 16) & MASK).wrapping_mul(MUL2)))
        >> 32
}

/// The first `k` (1..=7) digit bytes of `chunk` moved to the top, zeros ('0') below:
/// the eight-digit form of the same number.
#[inline(always)]
pub(super) fn align_digits(chunk: u64, k: usize) -> u64 {
    (chunk << (8 * (8 - k))) | (ZEROS >> (8 * k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eight_digit_parsing() {
        for s in [
            "00000000", "12345678", "99999999", "17644104", "00000001", "10000000",
        ] {
            let c = u64::from_le_bytes(s.as_bytes().try_into().unwrap());
            assert!(all_digits(c));
            assert_eq!(parse_8_digits(c), s.parse::<u64>().unwrap(), "{s}");
        }
        for s in ["1234567a", "/2345678", ":2345678", "1234 678", "12345.78"] {
            let mut b = [0u8; 8];
            b.copy_from_slice(&s.as_bytes()[..8]);
            assert!(!all_digits(u64::from_le_bytes(b)), "{s}");
        }
        for byte in 0..=255u8 {
            let c = u64::from_le_bytes([b'1', b'2', b'3', byte, b'5', b'6', b'7', b'8']);
            assert_eq!(all_digits(c), byte.is_ascii_digit(), "byte {byte}");
            let want = if byte.is_ascii_digit() { 8 } else { 3 };
            assert_eq!(leading_digits(c), want, "byte {byte}");
            let c = u64::from_le_bytes([byte, b'2', b'3', b'4', 0xff, b'6', b'7', b'8']);
            assert_eq!(
                leading_digits(c),
                if byte.is_ascii_digit() { 4 } else { 0 },
                "byte {byte}"
            );
        }
    }
}
