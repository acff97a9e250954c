//! Hot-path benchmarks, each with its baseline in the same run:
//! - extraction of top-level `ts` from a 100-byte message vs `serde_json::from_slice`
//!   into a one-field struct (goal: ≥ 10×);
//! - extraction from a 1 KB message with the field last vs the same baseline (≥ 3×);
//! - the full record path (extract + window + histogram + checksum), goal ≤ 100 ns per
//!   100-byte message;
//! - the checksum's per-message hash at 100 B and 1 KB (bytes/s) vs one `xxh3_64` over
//!   the same bytes already contiguous (what the audit service's counting thread does);
//! - a latency's histogram bucket: the table lookup vs the formula's `ln`.
//!
//! Run: `cargo bench -p audit-lib --bench hot_path`, then
//! `python3 audit-lib/benches/ratios.py` prints medians and ratios.

use std::hint::black_box;

use audit_lib::histogram::{bucket_by_formula, bucket_index};
use audit_lib::scan::{find_path, RawValue};
use audit_lib::timeparse::{int_to_ms, number_to_ms};
use audit_lib::{classify, Aggregator, EventTimeConfig, Identity, Limits, Observation, Unit};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde::Deserialize;

const T0: i64 = 1_764_410_400_000;
const N: usize = 1024;

#[derive(Deserialize)]
struct OneField {
    ts: i64,
}

fn pad_to(mut s: String, len: usize, closing: &str) -> String {
    // `s` is an unterminated object; a padding string member brings it to `len`.
    let budget = len - s.len() - closing.len() - r#","pad":"""#.len();
    s.push_str(r#","pad":""#);
    s.extend(std::iter::repeat_n('x', budget));
    s.push('"');
    s.push_str(closing);
    assert_eq!(s.len(), len, "{s}");
    s
}

/// 100-byte click events, `ts` first: seven fields of mixed types, as a tracking
/// producer writes them (the page path is lengthened to make exactly 100 bytes).
fn small_messages() -> Vec<Vec<u8>> {
    const EVENTS: [&str; 4] = ["click", "view", "scroll", "buy"];
    (0..N)
        .map(|i| {
            let mut page = String::from("/p/");
            loop {
                let s = format!(
                    r#"{{"ts":{},"uid":{},"sid":"{:08x}","event":"{}","page":"{}","x":{},"y":{}}}"#,
                    T0 - 1000 - (i as i64 * 7919) % 3_000_000,
                    10_000 + i * 31 % 90_000,
                    (i as u32).wrapping_mul(2_654_435_761),
                    EVENTS[i % 4],
                    page,
                    i % 1920,
                    i % 1080
                );
                match s.len() {
                    100 => return s.into_bytes(),
                    n if n < 100 => page.push((b'a' + (page.len() % 26) as u8) as char),
                    n => panic!("message too long: {n}"),
                }
            }
        })
        .collect()
}

/// 1 KB messages with nested objects, arrays and strings before `ts`, which is last.
fn large_messages() -> Vec<Vec<u8>> {
    (0..N)
        .map(|i| {
            let mut s = format!(
                r#"{{"user":{{"id":"u-{i:05}","name":"Jane \"JD\" Doe","tags":["a","b","vip"],"geo":{{"lat":52.52,"lon":13.405,"city":"Berlin"}}}},"#
            );
            s.push_str(r#""items":["#);
            for k in 0..6 {
                s.push_str(&format!(
                    r#"{{"sku":"SKU-{k}{i}","qty":{},"price":{}.99,"attrs":{{"color":"blue","size":"M"}}}},"#,
                    k + 1,
                    10 + k
                ));
            }
            s.pop();
            s.push_str(r#"],"session":{"id":"5b1c9e0e-2f3a-4c1d-9e8f-0a1b2c3d4e5f","ua":"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36","ts_ms":"not this one"},"note":"the field \"ts\": appears in this string""#);
            let s = pad_to(s, 1024 - 24, "");
            let s = format!(r#"{s},"ts":{}}}"#, T0 - (i as i64 * 7919) % 3_000_000);
            // Fix the total to exactly 1 KB with spaces before the closing brace.
            let mut s = s;
            while s.len() < 1024 {
                s.insert(s.len() - 1, ' ');
            }
            assert_eq!(s.len(), 1024, "{}", s.len());
            s.into_bytes()
        })
        .collect()
}

fn extract_ms(doc: &[u8]) -> Option<i64> {
    match find_path(doc, &["ts"]) {
        Ok(Some(RawValue::Int(v))) => int_to_ms(v, Unit::Millis).ok().map(|(t, _)| t),
        Ok(Some(RawValue::Number(n))) => number_to_ms(n, Unit::Millis).ok().map(|(t, _)| t),
        _ => None,
    }
}

fn bench_extract(c: &mut Criterion, name: &str, msgs: &[Vec<u8>]) {
    for m in msgs {
        let want: OneField = serde_json::from_slice(m).unwrap();
        assert_eq!(
            extract_ms(m),
            Some(want.ts),
            "scanner disagrees on the bench input"
        );
    }
    let mut cfg = EventTimeConfig::default();
    cfg.default.fields = vec!["ts".into()];
    cfg.default.unit = Unit::Millis;
    let compiled = cfg.compile().unwrap();
    let rule = compiled.rule_for("t").clone();

    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(msgs.len() as u64));
    g.bench_function("serde_json_one_field_struct", |b| {
        b.iter(|| {
            let mut sum = 0i64;
            for m in msgs {
                let v: OneField = serde_json::from_slice(black_box(m)).unwrap();
                sum = sum.wrapping_add(v.ts);
            }
            sum
        })
    });
    g.bench_function("scanner", |b| {
        b.iter(|| {
            let mut sum = 0i64;
            for m in msgs {
                sum = sum.wrapping_add(extract_ms(black_box(m)).unwrap());
            }
            sum
        })
    });
    g.bench_function("classify", |b| {
        b.iter(|| {
            let mut n = 0u64;
            for m in msgs {
                let obs = Observation::new("t", black_box(m), T0);
                if matches!(
                    classify(&rule, &obs),
                    audit_lib::Classification::EventTime { .. }
                ) {
                    n += 1;
                }
            }
            n
        })
    });
    g.finish();
}

fn extraction(c: &mut Criterion) {
    bench_extract(c, "extract_100B_ts_first", &small_messages());
    bench_extract(c, "extract_1KB_ts_last", &large_messages());
}

fn record_path(c: &mut Criterion) {
    let msgs = small_messages();
    let keys: Vec<Vec<u8>> = (0..N).map(|i| format!("key-{i}").into_bytes()).collect();
    let mut agg = Aggregator::new(
        Identity::new("regional", "dc1", "bench"),
        EventTimeConfig::default(),
        Limits::default(),
    )
    .unwrap();
    let mut g = c.benchmark_group("record_100B");
    g.throughput(Throughput::Elements(msgs.len() as u64));
    // Baseline in the same run: serde_json parse of the same messages.
    g.bench_function("serde_json_one_field_struct", |b| {
        b.iter(|| {
            let mut sum = 0i64;
            for m in &msgs {
                let v: OneField = serde_json::from_slice(black_box(m)).unwrap();
                sum = sum.wrapping_add(v.ts);
            }
            sum
        })
    });
    g.bench_function("aggregator_record", |b| {
        b.iter(|| {
            for (i, m) in msgs.iter().enumerate() {
                let obs = Observation {
                    topic: "orders",
                    partition: (i & 3) as i32,
                    offset: i as i64,
                    key: Some(&keys[i]),
                    value: Some(black_box(m)),
                    headers: &audit_lib::NoHeaders,
                    // As an auditor reads them: every record has its CreateTime.
                    record_timestamp: Some(audit_lib::RecordTimestamp {
                        ms: T0 - (i as i64 & 1023),
                        kind: audit_lib::TimestampType::CreateTime,
                    }),
                    observed_at_ms: T0,
                };
                black_box(agg.record(&obs));
            }
        })
    });
    g.finish();
    // Release the state; nothing was recorded when a filter skipped this bench.
    drop(agg.drain(T0));
}

/// The window checksum's per-message hash, in bytes per second, at the benchmark's two
/// payload sizes (key `k123456` as the service bench writes), against a one-shot
/// `xxh3_64` over the same bytes already contiguous (the hash's floor) in the same run.
/// At 1 KB the checksum is the one step of counting that reads every byte.
fn checksum(c: &mut Criterion) {
    for size in [100usize, 1024] {
        let values: Vec<Vec<u8>> = (0..N).map(|i| vec![b'a' + (i % 26) as u8; size]).collect();
        let key = b"k123456";
        let contiguous: Vec<Vec<u8>> = values
            .iter()
            .map(|v| {
                let mut b = (key.len() as u32).to_le_bytes().to_vec();
                b.extend_from_slice(key);
                b.extend_from_slice(v);
                b
            })
            .collect();
        let mut g = c.benchmark_group(format!("checksum_{size}B"));
        g.throughput(Throughput::Bytes((N * (4 + key.len() + size)) as u64));
        g.bench_function("message_hash", |b| {
            b.iter(|| {
                let mut sum = 0u64;
                for v in &values {
                    sum = sum.wrapping_add(audit_lib::checksum::message_hash(
                        Some(black_box(key)),
                        black_box(v),
                    ));
                }
                sum
            })
        });
        g.bench_function("xxh3_64_contiguous", |b| {
            b.iter(|| {
                let mut sum = 0u64;
                for m in &contiguous {
                    sum = sum.wrapping_add(xxhash_rust::xxh3::xxh3_64(black_box(m)));
                }
                sum
            })
        });
        g.finish();
    }
}

/// A latency's histogram bucket, once per counted message: the table lookup
/// (`bucket_index`) against the contract's formula with its `ln` (`bucket_by_formula`),
/// on latencies a second to an hour apart in random order (no run helps either).
fn latency_bucket(c: &mut Criterion) {
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let latencies: Vec<i64> = (0..N)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            1_000 + (x >> 33) as i64 % 3_600_000
        })
        .collect();
    for &v in &latencies {
        assert_eq!(bucket_index(v), bucket_by_formula(v));
    }
    let mut g = c.benchmark_group("latency_bucket");
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("formula_ln", |b| {
        b.iter(|| {
            latencies
                .iter()
                .map(|&v| bucket_by_formula(black_box(v)))
                .sum::<u32>()
        })
    });
    g.bench_function("table", |b| {
        b.iter(|| {
            latencies
                .iter()
                .map(|&v| bucket_index(black_box(v)))
                .sum::<u32>()
        })
    });
    g.finish();
}

criterion_group!(benches, extraction, record_path, checksum, latency_bucket);
criterion_main!(benches);
