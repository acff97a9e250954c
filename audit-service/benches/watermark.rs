//! Cost of the partition watermark on the counting thread's per-record path (the minimum
//! watermark, docs/audit-message-v1.md, Progress), with its baselines in the same run:
//! - `last_record_time`: what the worker did before (the last record's CreateTime);
//! - `min_watermark`: [`Watermark::push`] (min over the report interval and the last
//!   32 records, capped at observation time);
//! - `aggregator_record`: audit-lib's whole per-record path on 100-byte JSON
//!   messages, to put the difference in proportion.
//!
//! Run: `cargo bench -p audit-service --bench watermark`; criterion prints the time per
//! 1024 records of each.

use std::hint::black_box;

use audit_lib::{Aggregator, EventTimeConfig, Identity, Limits, Observation};
use audit_service::counting::Watermark;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const T0: i64 = 1_764_410_400_000;
const N: usize = 1024;
/// Records per run of one partition (the worker looks a partition up once per run).
const RUN: usize = 64;

fn bench(c: &mut Criterion) {
    // Timestamps a little out of order, as with several producers per partition.
    let ts: Vec<i64> = (0..N as i64).map(|i| T0 + i * 3 - (i % 7) * 5).collect();
    let msgs: Vec<Vec<u8>> = (0..N)
        .map(|i| format!("{{\"ts\":{},\"id\":{i},\"pad\":\"abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklm\"}}", ts[i]).into_bytes())
        .collect();
    let mut g = c.benchmark_group("watermark_1024");
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("last_record_time", |b| {
        let mut state: [(i64, Option<i64>); N / RUN] = [(0, None); N / RUN];
        b.iter(|| {
            for (run, chunk) in ts.chunks(RUN).enumerate() {
                let mut last: Option<(i64, Option<i64>)> = None;
                for (i, &t) in chunk.iter().enumerate() {
                    let t = black_box(Some(t));
                    let record_time = t.or(last.and_then(|p| p.1));
                    last = Some(((run * RUN + i) as i64 + 1, record_time));
                }
                state[run] = last.unwrap();
            }
            black_box(&state);
        })
    });
    g.bench_function("min_watermark", |b| {
        let mut state: Vec<(i64, Watermark)> = vec![(0, Watermark::default()); N / RUN];
        let rule = EventTimeConfig::default()
            .compile()
            .unwrap()
            .rule_for("orders")
            .clone();
        b.iter(|| {
            for (run, chunk) in ts.chunks(RUN).enumerate() {
                let p = &mut state[run];
                for (i, &t) in chunk.iter().enumerate() {
                    p.0 = (run * RUN + i) as i64 + 1;
                    p.1.push(black_box(t), T0 + 10_000, &rule);
                }
            }
            for p in &mut state {
                black_box(p.1.take());
            }
        })
    });
    let mut agg = Aggregator::new(
        Identity::new("regional", "dc1", "bench"),
        EventTimeConfig::default(),
        Limits::default(),
    )
    .unwrap();
    g.bench_function("aggregator_record", |b| {
        b.iter(|| {
            for (i, m) in msgs.iter().enumerate() {
                let obs = Observation {
                    topic: "orders",
                    partition: (i / RUN) as i32,
                    offset: i as i64,
                    key: None,
                    value: Some(black_box(m)),
                    headers: &audit_lib::NoHeaders,
                    record_timestamp: None,
                    observed_at_ms: T0 + 10_000,
                };
                black_box(agg.record(&obs));
            }
            let _ = agg.drain(T0 + 10_000);
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
