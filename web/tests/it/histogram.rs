//! The engine reads latency percentiles from stored histograms with its own small
//! reader of the wire format (it merges thousands of stored rows per cycle without a
//! JSON round trip). This checks it against audit-lib's LatencyHistogram, the format's
//! reference: same counts, same percentiles, after merging several partial histograms.

use audit_lib::histogram::LatencyHistogram;
use web::engine::Histogram;

/// The wire JSON of `h` read the way the store hands buckets to the engine.
fn from_wire(h: &LatencyHistogram) -> Histogram {
    let v = serde_json::to_value(h).expect("serialize");
    Histogram {
        zero_count: v["zero_count"].as_u64().unwrap(),
        negative_count: v["negative_count"].as_u64().unwrap(),
        max_ms: v["max_ms"].as_u64().unwrap(),
        buckets: v["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_i64().unwrap() as i32, p[1].as_u64().unwrap()))
            .collect(),
    }
}

#[test]
fn percentiles_agree_with_audit_lib_after_merging() {
    // Deterministic pseudo-random latencies from several shapes: uniform, heavy
    // tail, clustered, with negatives and sub-millisecond values.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for case in 0..40 {
        let parts = 1 + case % 5;
        let mut reference = LatencyHistogram::new();
        let mut mine = Histogram::default();
        for _ in 0..parts {
            let mut part = LatencyHistogram::new();
            let n = 1 + next() % 500;
            for _ in 0..n {
                let r = next();
                let v = match r % 4 {
                    0 => (r >> 8) as i64 % 1_000,
                    1 => ((r >> 8) % 20) as i64 * ((r >> 40) % 100_000) as i64,
                    2 => 250 + ((r >> 8) % 5) as i64,
                    _ => ((r >> 8) % 3) as i64 - 1,
                };
                part.record(v);
            }
            mine.merge(&from_wire(&part));
            reference.merge(&part);
        }
        assert_eq!(mine.count(), reference.count(), "case {case}");
        assert_eq!(mine.max_ms as i64, reference.max_ms(), "case {case}");
        for q in [0.0, 0.5, 0.9, 0.95, 0.99, 1.0] {
            let expected = reference
                .quantile(q)
                .map(|v| v.min(reference.max_ms() as f64));
            assert_eq!(mine.quantile(q), expected, "case {case}, q {q}");
        }
    }
}
