//! Mergeable latency histogram with 1 % relative accuracy (DDSketch-style), as pinned by
//! `docs/audit-message-v1.md`: a latency `v >= 1 ms` falls in bucket
//! `i = ceil(ln(v) / ln(1.02))`; latencies `< 1 ms` go to `zero_count`.
//!
//! Buckets are stored densely from the lowest non-empty one (`counts[i - base]`) because
//! every latency that fits in an i64 of milliseconds maps to an index below
//! [`MAX_BUCKET_INDEX`] (~2 200): recording is one `ln`, one add, and no allocation once
//! the vector spans the window's latencies. Starting at the lowest bucket instead of 0
//! keeps a histogram of seconds-long latencies (buckets ~350-470) a few slots long: a
//! window read from the store is one bucket or a few, and serve's cold start builds and
//! merges millions of them (a vector from 0 cost ~2-4 KB zeroed per window).

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Growth factor between buckets; relative error of a quantile is `(γ-1)/(γ+1) < 1 %`.
pub const GAMMA: f64 = 1.02;

/// Largest bucket index any `i64` latency can produce (`ceil(ln(i64::MAX)/ln(1.02))` is
/// 2 206); indexes above this in a decoded message are rejected rather than allocated.
pub const MAX_BUCKET_INDEX: u32 = 2_300;

/// Parts that do not make a histogram (see [`LatencyHistogram::from_buckets`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidHistogram(pub String);

/// A latency histogram; see the module documentation.
#[derive(Clone, Debug, Default)]
pub struct LatencyHistogram {
    zero_count: u64,
    negative_count: u64,
    /// Bucket index of `counts[0]` (0 while `counts` is empty).
    base: u32,
    /// counts[i] = number of latencies in bucket base + i; leading and trailing zeros are
    /// allowed in memory (the equality below ignores them).
    counts: Vec<u64>,
    max_ms: i64,
}

#[inline]
fn ln_gamma() -> f64 {
    GAMMA.ln()
}

/// Bucket index of a latency `v >= 1` ms: the contract's formula,
/// `ceil(ln(v) / ln(1.02))`, without its `ln`.
///
/// Counting calls this once per message, and the `ln` (a libm call) and the float
/// arithmetic around it were ~20 % of a 100-byte message's counting (`perf`).
/// Below 2^40 ms the index is read from [`BucketTable`], built once from the formula
/// itself: the latency's power of two and next 6 bits give a bucket at most one below
/// the answer, and the first latency of the next bucket says whether it is. Integer
/// work only, exact in any order.
#[inline]
pub fn bucket_index(v_ms: i64) -> u32 {
    if !(1..TABLE_BELOW).contains(&v_ms) {
        return bucket_by_formula(v_ms);
    }
    let t = BucketTable::get();
    let zeros = v_ms.leading_zeros();
    let cell = ((63 - zeros) << CELL_BITS) as usize
        | (((v_ms as u64) << zeros) >> (63 - CELL_BITS)) as usize & CELL_MASK;
    let mut i = t.estimate[cell] as usize;
    // t.firsts[i] <= v < t.firsts[i + 1] means exactly: the formula gives i.
    while v_ms >= t.firsts[i + 1] {
        i += 1;
    }
    i as u32
}

/// Latencies from this one up take the formula: below it, the `ln` of two adjacent
/// integers differs by 2^-40 and more, hundreds of ulps of the result, so the formula
/// is monotone whatever libm's last-bit rounding, and the table is exact. (2^40 ms is
/// 35 years.)
const TABLE_BELOW: i64 = 1 << 40;

/// Each power of two split in 2^CELL_BITS cells of its next bits: a cell spans at
/// most log2(1 + 1/64) · (ln 2 / ln 1.02) = 0.8 of a bucket.
const CELL_BITS: u32 = 6;
const CELL_MASK: usize = (1 << CELL_BITS) - 1;
/// The powers of two the table covers: every latency below [`TABLE_BELOW`].
const POWERS: u32 = TABLE_BELOW.trailing_zeros();

/// What [`bucket_index`] reads, computed once per process by the formula (~1 400
/// buckets and 2 560 cells, a few `ln` each: well under a millisecond).
struct BucketTable {
    /// `firsts[i]`: the smallest latency whose bucket is `i` or above, for every bucket
    /// below [`TABLE_BELOW`] and one past it (bucket `i` holds
    /// `firsts[i] .. firsts[i + 1]`, empty when they are equal, as buckets 1-35 are).
    firsts: Vec<i64>,
    /// Per cell (power of two `k`, next bits `j`): the bucket of the cell's smallest
    /// latency, so no larger than that of any latency in it.
    estimate: Vec<u16>,
}

impl BucketTable {
    #[inline]
    fn get() -> &'static BucketTable {
        static TABLE: std::sync::OnceLock<BucketTable> = std::sync::OnceLock::new();
        TABLE.get_or_init(BucketTable::build)
    }

    fn build() -> BucketTable {
        let last = bucket_by_formula(TABLE_BELOW) as usize + 1;
        let mut firsts = vec![1i64];
        for i in 1..=last as u32 {
            // v > 1.02^(i-1) starts bucket i (the ceil of anything above i - 1); the
            // float estimate is then corrected by the formula, a step or two either way.
            let mut v = (GAMMA.powi(i as i32 - 1).floor() as i64).max(*firsts.last().unwrap());
            while v > 1 && bucket_by_formula(v - 1) >= i {
                v -= 1;
            }
            while bucket_by_formula(v) < i {
                v += 1;
            }
            firsts.push(v);
        }
        let estimate = (0..POWERS << CELL_BITS)
            .map(|cell| {
                let (k, j) = (cell >> CELL_BITS, i64::from(cell) & CELL_MASK as i64);
                // The cell's smallest latency (below 2^6 a cell holds one latency or none).
                let smallest = if k >= CELL_BITS {
                    (1i64 << k) + (j << (k - CELL_BITS))
                } else {
                    (1i64 << k) + (j >> (CELL_BITS - k))
                };
                bucket_by_formula(smallest) as u16
            })
            .collect();
        BucketTable { firsts, estimate }
    }
}

/// `ceil(ln(v) / ln(1.02))` for `v >= 1`, the contract's definition ([`bucket_index`]
/// gives the same, faster; public for the benchmark that shows it).
#[doc(hidden)]
#[inline]
pub fn bucket_by_formula(v_ms: i64) -> u32 {
    debug_assert!(v_ms >= 1);
    let x = (v_ms as f64).ln() / ln_gamma();
    // ceil(x) for x >= 0 without a libm call (f64::ceil is not inlined on baseline
    // x86-64); v = 1 gives exactly 0, and the cast saturates on any float oddity.
    let t = x as u32;
    if (t as f64) < x {
        t + 1
    } else {
        t
    }
}

/// Representative value of bucket `i`: within 1 % of every value in it.
#[inline]
pub fn bucket_value(i: u32) -> f64 {
    2.0 * GAMMA.powi(i as i32) / (GAMMA + 1.0)
}

impl LatencyHistogram {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one latency in milliseconds (observed − event time; may be negative).
    #[inline]
    pub fn record(&mut self, latency_ms: i64) {
        self.record_n(latency_ms, 1);
    }

    /// Records `n` occurrences of one latency.
    #[inline]
    pub fn record_n(&mut self, latency_ms: i64, n: u64) {
        if n == 0 {
            return;
        }
        if latency_ms < 1 {
            self.zero_count += n;
            if latency_ms < 0 {
                self.negative_count += n;
            }
            return;
        }
        if latency_ms > self.max_ms {
            self.max_ms = latency_ms;
        }
        *self.slot(bucket_index(latency_ms)) += n;
    }

    /// The count of bucket `i`, the vector grown (at either end) to hold it.
    #[inline]
    fn slot(&mut self, i: u32) -> &mut u64 {
        if self.counts.is_empty() {
            self.base = i;
        } else if i < self.base {
            // At least doubled (down to bucket 0 at most): buckets given in descending
            // order cost amortized O(1) each, not a shift of the vector each.
            let grow = ((self.base - i) as usize)
                .max(self.counts.len())
                .min(self.base as usize);
            self.counts.splice(0..0, std::iter::repeat_n(0, grow));
            self.base -= grow as u32;
        }
        let at = (i - self.base) as usize;
        if at >= self.counts.len() {
            self.counts.resize(at + 1, 0);
        }
        &mut self.counts[at]
    }

    /// Adds `other` into `self`: exactly equal to having recorded both inputs here.
    /// Counts saturate instead of overflowing: only hostile input gets near 2^64.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        self.zero_count = self.zero_count.saturating_add(other.zero_count);
        self.negative_count = self.negative_count.saturating_add(other.negative_count);
        self.max_ms = self.max_ms.max(other.max_ms);
        let Some(last) = other.counts.len().checked_sub(1) else {
            return;
        };
        // Grow to span other's buckets (both ends), then add slot by slot.
        self.slot(other.base);
        self.slot(other.base + last as u32);
        let from = (other.base - self.base) as usize;
        for (mine, theirs) in self.counts[from..].iter_mut().zip(&other.counts) {
            *mine = mine.saturating_add(*theirs);
        }
    }

    /// A histogram from its parts as stored or sent (`docs/audit-message-v1.md`):
    /// `(index, count)` buckets in any order, duplicate indexes summed (the merge rule
    /// applied within one message), counts saturating.
    pub fn from_buckets(
        zero_count: u64,
        negative_count: u64,
        max_ms: i64,
        buckets: impl IntoIterator<Item = (u32, u64)>,
    ) -> Result<Self, InvalidHistogram> {
        if negative_count > zero_count {
            return Err(InvalidHistogram(format!(
                "latency: negative_count {negative_count} exceeds zero_count {zero_count}"
            )));
        }
        if max_ms < 0 {
            return Err(InvalidHistogram(format!(
                "latency: max_ms must be >= 0, got {max_ms}"
            )));
        }
        let mut h = LatencyHistogram {
            zero_count,
            negative_count,
            base: 0,
            counts: Vec::new(),
            max_ms,
        };
        for (i, c) in buckets {
            if i > MAX_BUCKET_INDEX {
                return Err(InvalidHistogram(format!(
                    "latency: bucket index {i} above the maximum {MAX_BUCKET_INDEX}"
                )));
            }
            let slot = h.slot(i);
            *slot = slot.saturating_add(c);
        }
        Ok(h)
    }

    /// Total number of recorded latencies.
    pub fn count(&self) -> u64 {
        self.counts
            .iter()
            .fold(self.zero_count, |acc, c| acc.saturating_add(*c))
    }

    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }

    /// Latencies below 1 ms, negative ones included.
    pub fn zero_count(&self) -> u64 {
        self.zero_count
    }

    /// Of [`Self::zero_count`]: latencies below 0 (event time ahead of the observer).
    pub fn negative_count(&self) -> u64 {
        self.negative_count
    }

    /// Largest latency recorded, clamped at 0 (0 when empty or all latencies < 1 ms).
    pub fn max_ms(&self) -> i64 {
        self.max_ms
    }

    /// Non-empty buckets as `(index, count)`, sorted by index.
    pub fn buckets(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| (self.base + i as u32, *c))
    }

    /// The `q`-quantile (`0 <= q <= 1`) in milliseconds, within 1 % of the exact value
    /// of the element of rank `floor(q * (count - 1))` in the sorted latencies (values
    /// below 1 ms read as 0). `None` when empty or `q` is not in `[0, 1]`.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let [v] = self.quantiles([q]);
        v
    }

    /// [`Self::quantile`] of each of `qs`, in one pass over the buckets (in any order;
    /// each answer is where its `q` was).
    pub fn quantiles<const N: usize>(&self, qs: [f64; N]) -> [Option<f64>; N] {
        let mut out = [None; N];
        let n = self.count();
        if n == 0 {
            return out;
        }
        let mut order: [usize; N] = std::array::from_fn(|i| i);
        order.sort_by(|&a, &b| qs[a].total_cmp(&qs[b]));
        let mut seen = self.zero_count;
        let mut buckets = self.buckets();
        let mut last = None;
        for i in order {
            let q = qs[i];
            if !(0.0..=1.0).contains(&q) {
                continue;
            }
            let rank = (q * (n - 1) as f64).floor() as u64;
            if rank < self.zero_count {
                out[i] = Some(0.0);
                continue;
            }
            while rank >= seen {
                let Some((b, c)) = buckets.next() else { break };
                seen = seen.saturating_add(c);
                last = Some(b);
            }
            out[i] = if rank < seen {
                last.map(bucket_value)
            } else {
                // Unreachable when counts are consistent; the largest bucket is the
                // safe answer.
                self.buckets().last().map(|(b, _)| bucket_value(b))
            };
        }
        out
    }
}

#[derive(Serialize, Deserialize)]
struct Wire {
    zero_count: u64,
    negative_count: u64,
    buckets: Vec<(u32, u64)>,
    max_ms: i64,
}

impl Serialize for LatencyHistogram {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Wire {
            zero_count: self.zero_count,
            negative_count: self.negative_count,
            buckets: self.buckets().collect(),
            max_ms: self.max_ms,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for LatencyHistogram {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = Wire::deserialize(d)?;
        LatencyHistogram::from_buckets(w.zero_count, w.negative_count, w.max_ms, w.buckets)
            .map_err(D::Error::custom)
    }
}

// Equality ignores leading and trailing empty buckets (an in-memory capacity detail).
impl PartialEq for LatencyHistogram {
    fn eq(&self, other: &Self) -> bool {
        self.same_as(other)
    }
}

impl Eq for LatencyHistogram {}

impl LatencyHistogram {
    /// The index of the first non-empty bucket and the counts from it to the last
    /// non-empty one (`(0, [])` when there is none).
    fn trimmed(&self) -> (u32, &[u64]) {
        let Some(start) = self.counts.iter().position(|c| *c > 0) else {
            return (0, &[]);
        };
        let end = self
            .counts
            .iter()
            .rposition(|c| *c > 0)
            .map_or(0, |p| p + 1);
        (self.base + start as u32, &self.counts[start..end])
    }

    /// True when both histograms hold the same counts.
    pub fn same_as(&self, other: &LatencyHistogram) -> bool {
        self.zero_count == other.zero_count
            && self.negative_count == other.negative_count
            && self.max_ms == other.max_ms
            && self.trimmed() == other.trimmed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn quantiles_in_one_pass_equal_each_quantile_in_any_order() {
        let mut h = LatencyHistogram::new();
        for ms in [0, 0, 3, 7, 7, 40, 41, 900, 5_000, 60_000] {
            h.record(ms);
        }
        let qs = [0.99, 0.0, 0.5, 1.0, 0.95, 0.25, 2.0, 0.1];
        let each: Vec<Option<f64>> = qs.iter().map(|&q| h.quantile(q)).collect();
        assert_eq!(h.quantiles(qs).to_vec(), each);
        assert_eq!(h.quantiles(qs)[6], None, "q outside [0, 1]");
        assert_eq!(h.quantiles(qs)[1], Some(0.0));
        assert_eq!(LatencyHistogram::new().quantiles([0.5, 0.9]), [None, None]);
    }

    #[test]
    fn pinned_bucket_indexes() {
        // Values other languages must reproduce.
        assert_eq!(bucket_index(1), 0);
        assert_eq!(bucket_index(2), 36); // ln 2 / ln 1.02 = 35.0028...
        assert_eq!(bucket_index(10), 117); // 116.27...
        assert_eq!(bucket_index(1000), 349); // 348.83...
        assert!(bucket_index(i64::MAX) <= MAX_BUCKET_INDEX);
    }

    #[test]
    fn bucket_index_is_the_contract_formula() {
        let formula = |v: i64| ((v as f64).ln() / GAMMA.ln()).ceil() as u32;
        for v in (1..200_000).chain((0..2000).map(|k| 1i64 << (k % 62) | k)) {
            assert_eq!(bucket_index(v), formula(v), "v = {v}");
        }
    }

    #[test]
    fn the_table_answers_what_the_formula_does_whatever_the_order() {
        // Every latency of the first 1 M ms in order (runs through every bucket there).
        for v in 1..1_000_000 {
            assert_eq!(bucket_index(v), bucket_by_formula(v), "v = {v}");
        }
        let table = BucketTable::get();
        // Every cell's estimate is its smallest latency's bucket, at most one below its
        // largest's (one step of correction).
        for k in CELL_BITS..POWERS {
            for j in 0..1i64 << CELL_BITS {
                let smallest = (1i64 << k) + (j << (k - CELL_BITS));
                let largest = smallest + (1i64 << (k - CELL_BITS)) - 1;
                let e = u32::from(table.estimate[(k << CELL_BITS) as usize | j as usize]);
                assert_eq!(e, bucket_by_formula(smallest), "cell {k}/{j}");
                assert!(bucket_by_formula(largest) - e <= 1, "cell {k}/{j}");
            }
        }
        // Both sides of every bucket's first latency in the table, in table order.
        let firsts = &table.firsts;
        assert!(*firsts.last().unwrap() >= TABLE_BELOW);
        for (i, &f) in firsts.iter().enumerate() {
            assert!(bucket_by_formula(f) >= i as u32, "firsts[{i}] = {f}");
            assert!(
                f == 1 || bucket_by_formula(f - 1) < i as u32,
                "firsts[{i}] = {f}"
            );
            for v in [f - 1, f, f + 1, f + 7, f + 1000]
                .into_iter()
                .filter(|&v| v >= 1)
            {
                assert_eq!(bucket_index(v), bucket_by_formula(v), "v = {v}");
            }
        }
        // Jumps anywhere, small steps from each, and latencies past the table.
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for n in 0..300_000u64 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let v = match n % 4 {
                0 => (x >> 23) as i64 + 1, // up to 2^41
                1 => (x >> 1) as i64 | 1,  // anywhere in i64
                _ => (x >> 40) as i64 + 1, // up to 2^24
            };
            for w in [v, v.saturating_add(1), v.saturating_add((n % 50) as i64)] {
                assert_eq!(bucket_index(w), bucket_by_formula(w), "v = {w}");
            }
        }
        for v in [
            TABLE_BELOW - 1,
            TABLE_BELOW,
            TABLE_BELOW + 1,
            i64::MAX - 1,
            i64::MAX,
        ] {
            assert_eq!(bucket_index(v), bucket_by_formula(v), "v = {v}");
        }
    }

    #[test]
    fn below_one_ms_and_negative_go_to_zero_count() {
        let mut h = LatencyHistogram::new();
        h.record(0);
        h.record(-5);
        h.record(3);
        assert_eq!(h.zero_count(), 2);
        assert_eq!(h.negative_count(), 1);
        assert_eq!(h.count(), 3);
        assert_eq!(h.max_ms(), 3);
        assert_eq!(h.quantile(0.0), Some(0.0));
    }

    #[test]
    fn serde_matches_contract_example_shape() {
        let mut h = LatencyHistogram::new();
        h.record(0);
        h.record(-1);
        h.record(10);
        h.record(10);
        h.record(10);
        h.record(1000);
        let v = serde_json::to_value(&h).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"zero_count":2,"negative_count":1,"buckets":[[117,3],[349,1]],"max_ms":1000})
        );
        let back: LatencyHistogram = serde_json::from_value(v).unwrap();
        assert!(back.same_as(&h));
    }

    #[test]
    fn hostile_input_is_rejected_not_allocated() {
        let r: Result<LatencyHistogram, _> = serde_json::from_str(
            r#"{"zero_count":0,"negative_count":0,"buckets":[[4000000000,1]],"max_ms":1}"#,
        );
        assert!(r.unwrap_err().to_string().contains("bucket index"));
        let r: Result<LatencyHistogram, _> =
            serde_json::from_str(r#"{"zero_count":0,"negative_count":1,"buckets":[],"max_ms":0}"#);
        assert!(r.is_err());
    }

    #[test]
    fn from_buckets_rebuilds_what_buckets_gave_out() {
        let mut h = LatencyHistogram::new();
        for v in [-3, 0, 1, 2, 10, 10, 999, 86_400_000] {
            h.record(v);
        }
        let back = LatencyHistogram::from_buckets(
            h.zero_count(),
            h.negative_count(),
            h.max_ms(),
            h.buckets(),
        )
        .unwrap();
        assert_eq!(back, h);
        for q in [0.0, 0.5, 0.9, 0.99, 1.0] {
            assert_eq!(back.quantile(q), h.quantile(q));
        }
        // Order does not matter; duplicate indexes add up; empty buckets vanish.
        let a = LatencyHistogram::from_buckets(0, 0, 10, [(117, 2), (36, 1), (117, 1), (5, 0)])
            .unwrap();
        assert_eq!(a.buckets().collect::<Vec<_>>(), vec![(36, 1), (117, 3)]);
        assert_eq!(a.count(), 4);
        // What a reader must not accept.
        assert!(LatencyHistogram::from_buckets(0, 1, 0, []).is_err());
        assert!(LatencyHistogram::from_buckets(0, 0, -1, []).is_err());
        assert!(LatencyHistogram::from_buckets(0, 0, 1, [(MAX_BUCKET_INDEX + 1, 1)]).is_err());
    }

    #[test]
    fn empty_has_no_quantile() {
        assert_eq!(LatencyHistogram::new().quantile(0.5), None);
        let mut h = LatencyHistogram::new();
        h.record(5);
        assert_eq!(h.quantile(1.5), None);
    }

    fn exact_quantile(sorted: &[i64], q: f64) -> f64 {
        let rank = (q * (sorted.len() - 1) as f64).floor() as usize;
        sorted[rank].max(0) as f64
    }

    /// Skewed data: most latencies small, a heavy tail of large ones.
    fn skewed() -> impl Strategy<Value = Vec<i64>> {
        prop::collection::vec(
            prop_oneof![
                6 => 0i64..50,
                3 => 50i64..5_000,
                1 => 5_000i64..86_400_000,
                1 => 86_400_000i64..i64::MAX / 2,
            ],
            1..2000,
        )
    }

    proptest! {
        /// Buckets are stored from the lowest one: recording or decoding in any order
        /// (the vector grown at the front as well as the back) gives the same histogram.
        #[test]
        fn recording_and_decoding_order_does_not_matter(values in skewed()) {
            let mut sorted = values.clone();
            sorted.sort_unstable();
            let mut up = LatencyHistogram::new();
            let mut down = LatencyHistogram::new();
            for v in &sorted { up.record(*v); }
            for v in sorted.iter().rev() { down.record(*v); }
            let buckets: Vec<(u32, u64)> = up.buckets().collect();
            prop_assert_eq!(&down.buckets().collect::<Vec<_>>(), &buckets);
            prop_assert!(up.same_as(&down));
            prop_assert_eq!(down.count(), values.len() as u64);
            let back = LatencyHistogram::from_buckets(
                down.zero_count(), down.negative_count(), down.max_ms(),
                buckets.iter().rev().copied(),
            ).unwrap();
            prop_assert!(back.same_as(&up));
            prop_assert_eq!(back.quantiles([0.0, 0.5, 0.99, 1.0]), up.quantiles([0.0, 0.5, 0.99, 1.0]));
            let mut merged = LatencyHistogram::new();
            merged.merge(&back);
            merged.merge(&LatencyHistogram::new());
            prop_assert!(merged.same_as(&up));
        }

        #[test]
        fn merging_n_histograms_equals_one_histogram_of_all_values_and_quantiles_are_within_1pct(
            values in skewed(),
            parts in 1usize..8,
        ) {
            let mut whole = LatencyHistogram::new();
            for v in &values { whole.record(*v); }
            let mut merged = LatencyHistogram::new();
            for chunk in values.chunks(values.len().div_ceil(parts)) {
                let mut h = LatencyHistogram::new();
                for v in chunk { h.record(*v); }
                // Through the wire format too: what the collector will merge.
                let h: LatencyHistogram = serde_json::from_str(&serde_json::to_string(&h).unwrap()).unwrap();
                merged.merge(&h);
            }
            prop_assert!(merged.same_as(&whole));
            let mut sorted = values.clone();
            sorted.sort_unstable();
            for q in [0.0, 0.01, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0] {
                let exact = exact_quantile(&sorted, q);
                let got = merged.quantile(q).unwrap();
                prop_assert_eq!(got, whole.quantile(q).unwrap());
                if exact == 0.0 {
                    prop_assert_eq!(got, 0.0);
                } else {
                    let rel = (got - exact).abs() / exact;
                    prop_assert!(rel <= 0.01, "q={} exact={} got={} rel={}", q, exact, got, rel);
                }
            }
            prop_assert_eq!(merged.max_ms(), sorted.last().copied().unwrap().max(0));
        }

        #[test]
        fn merge_is_associative_and_commutative(a in skewed(), b in skewed(), c in skewed()) {
            let h = |v: &Vec<i64>| { let mut h = LatencyHistogram::new(); for x in v { h.record(*x); } h };
            let (ha, hb, hc) = (h(&a), h(&b), h(&c));
            let mut left = ha.clone(); left.merge(&hb); left.merge(&hc);
            let mut bc = hb.clone(); bc.merge(&hc);
            let mut right = bc.clone(); right.merge(&ha);
            prop_assert!(left.same_as(&right));
        }
    }
}
