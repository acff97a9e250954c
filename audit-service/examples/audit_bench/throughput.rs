//! The throughput scenario: per payload size, a 12-partition topic read alternately by
//! the bare consumers and the audit service, round after round; a table per size and a
//! summary.

use std::time::{Duration, Instant};

use anyhow::Context;
use common::now_ms;

use crate::bare::{measure_bare, measure_bare_batch};
use rdkafka::producer::Producer;

use crate::kafka::{create_topics, producer, send};
use crate::service::{
    bench_config, measure_service, spawn_service, spawn_service_of, stop, Measured,
};
use crate::{tempdir, unique};

/// `100:10000000,1024:2000000` → [(100, 10000000), (1024, 2000000)].
pub(crate) fn parse_sizes(spec: &str) -> anyhow::Result<Vec<(usize, u64)>> {
    spec.split(',')
        .map(|p| {
            let (size, n) = p
                .split_once(':')
                .with_context(|| format!("{p:?}: expected SIZE:MESSAGES"))?;
            let size: usize = size.parse()?;
            anyhow::ensure!(size >= 80, "payloads under 80 bytes cannot hold the JSON");
            Ok((size, n.parse()?))
        })
        .collect()
}

/// A JSON click event of exactly `size` bytes, `ts` first (padded with a string field).
pub(crate) fn payload(size: usize, ts: i64, i: u64) -> String {
    let mut v = format!(
        "{{\"ts\":{ts},\"user\":\"u{}\",\"event\":\"click\",\"page\":\"/products/{}\",\"pad\":\"",
        i % 10_000,
        i % 977
    );
    let pad = size.saturating_sub(v.len() + 2);
    v.extend(std::iter::repeat_n('x', pad));
    v.push_str("\"}");
    v
}

pub(crate) fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

pub(crate) fn throughput(
    bootstrap: &str,
    rounds: usize,
    sizes: &[(usize, u64)],
) -> anyhow::Result<()> {
    let dir = tempdir()?;
    // A/B of two builds in one run: BENCH_COMPARE_BIN names another audit_bench binary
    // (e.g. built from the previous commit) whose service runs as a third side in every
    // round, right after this build's, with the same settings.
    let compare = std::env::var_os("BENCH_COMPARE_BIN").map(std::path::PathBuf::from);
    // The batch-reading bare consumer as a side of every round (BENCH_BARE_BATCH=0: not).
    let bare_batch = std::env::var("BENCH_BARE_BATCH").map_or(true, |v| v != "0");
    let mut summaries = Vec::new();
    for &(size, n) in sizes {
        let topic = unique("bench-tp");
        create_topics(bootstrap, std::slice::from_ref(&topic), 12)?;
        let p = producer(bootstrap)?;
        let base = now_ms() - 3_600_000;
        let started = Instant::now();
        for i in 0..n {
            let v = payload(size, base + (i as i64 % 3_600_000), i);
            debug_assert_eq!(v.len(), size);
            send(&p, &topic, Some((i % 12) as i32), &format!("k{i}"), &v);
        }
        p.flush(Duration::from_secs(300))?;
        drop(p);
        eprintln!(
            "== {size} B: filled {topic} with {n} messages in {:.1}s",
            started.elapsed().as_secs_f64()
        );
        let mut rows: Vec<(Measured, Measured)> = Vec::new();
        let mut compared: Vec<Measured> = Vec::new();
        let mut batched: Vec<Measured> = Vec::new();
        for round in 0..rounds {
            let port = 19_500 + (summaries.len() * rounds + round) as u16;
            // Same settings, own group and instance id for each side.
            let bare_cfg: audit_service::Config = common::config::from_toml_str(&bench_config(
                bootstrap,
                vec![topic.clone()],
                None,
                port,
                &dir,
            ))?;
            let text = bench_config(bootstrap, vec![topic.clone()], None, port, &dir);
            // Alternate which side goes first: the broker's page cache and JIT state
            // drift between back-to-back runs.
            let run_service = || -> anyhow::Result<(Measured, u64)> {
                let mut child = spawn_service(&text, &dir)?;
                let r = measure_service("audit-service", port, &mut child, n)?;
                stop(child)?;
                Ok(r)
            };
            let run_compare = |exe: &std::path::Path| -> anyhow::Result<Measured> {
                // Its own group, instance id and port.
                let port = port + 1000;
                let text = bench_config(bootstrap, vec![topic.clone()], None, port, &dir);
                let mut child = spawn_service_of(exe, &text, &dir)?;
                let r = measure_service("comparison build", port, &mut child, n)?.0;
                stop(child)?;
                Ok(r)
            };
            // With a comparison build, the two services also alternate.
            let c_first = compare.as_ref().filter(|_| round % 2 == 1);
            let c_last = compare.as_ref().filter(|_| round % 2 == 0);
            if let Some(exe) = c_first {
                compared.push(run_compare(exe)?);
            }
            // The batch-reading bare consumer right after the bare one, in its own group.
            let run_bare = || -> anyhow::Result<(Measured, Option<Measured>)> {
                let b = measure_bare(&bare_cfg, &topic, n)?;
                if !bare_batch {
                    return Ok((b, None));
                }
                let mut cfg = bare_cfg.clone();
                cfg.audit.group_id.push_str("-batches");
                Ok((b, Some(measure_bare_batch(&cfg, &topic, n)?)))
            };
            let ((b, bb), (a, hwm)) = if round % 2 == 0 {
                let b = run_bare()?;
                (b, run_service()?)
            } else {
                let a = run_service()?;
                (run_bare()?, a)
            };
            if let Some(bb) = bb {
                eprintln!(
                    "{size} B round {round}: batch-reading bare consumer {:.0} msg/s ({:.2} µs \
                     CPU/msg, machine {:.0}% busy); audit-service / it {:.3}",
                    bb.rate,
                    bb.cpu_us,
                    bb.busy,
                    a.rate / bb.rate
                );
                batched.push(bb);
            }
            if let Some(exe) = c_last {
                compared.push(run_compare(exe)?);
            }
            if let Some(c) = compared.last() {
                eprintln!(
                    "{size} B round {round}: comparison build {:.0} msg/s ({:.2} µs CPU/msg), \
                     ratio {:.3} to bare; this build {:.2} µs CPU/msg",
                    c.rate,
                    c.cpu_us,
                    c.rate / b.rate,
                    a.cpu_us
                );
            }
            eprintln!(
                "{size} B round {round}: bare {:.0} msg/s ({:.2} µs CPU/msg, machine {:.0}% busy), \
                 audit-service {:.0} msg/s ({:.2} µs CPU/msg, machine {:.0}% busy), ratio {:.3}, \
                 service peak RSS {} MB",
                b.rate,
                b.cpu_us,
                b.busy,
                a.rate,
                a.cpu_us,
                a.busy,
                a.rate / b.rate,
                hwm / 1024
            );
            rows.push((b, a));
        }
        println!("\n{size}-byte payloads, {n} messages per side per round:");
        println!("| round | bare msg/s | service msg/s | ratio | CPU/msg bare → service (µs) |");
        println!("|---|---|---|---|---|");
        for (round, (b, a)) in rows.iter().enumerate() {
            println!(
                "| {round} | {:.2} M | {:.2} M | {:.3} | {:.3} → {:.3} ({:.2}×) |",
                b.rate / 1e6,
                a.rate / 1e6,
                a.rate / b.rate,
                b.cpu_us,
                a.cpu_us,
                a.cpu_us / b.cpu_us
            );
        }
        let ratios: Vec<f64> = rows.iter().map(|(b, a)| a.rate / b.rate).collect();
        let bare_cpu = median(&rows.iter().map(|(b, _)| b.cpu_us).collect::<Vec<_>>());
        let audit_cpu = median(&rows.iter().map(|(_, a)| a.cpu_us).collect::<Vec<_>>());
        let line = format!(
            "{size} B: median ratio {:.3} (min {:.3}, max {:.3}); median CPU/msg bare {bare_cpu:.3} µs, \
             audit-service {audit_cpu:.3} µs ({:.2}× the bare consumer); median rates bare {:.2} M, \
             audit-service {:.2} M msg/s",
            median(&ratios),
            ratios.iter().copied().fold(f64::INFINITY, f64::min),
            ratios.iter().copied().fold(0.0, f64::max),
            audit_cpu / bare_cpu,
            median(&rows.iter().map(|(b, _)| b.rate).collect::<Vec<_>>()) / 1e6,
            median(&rows.iter().map(|(_, a)| a.rate).collect::<Vec<_>>()) / 1e6,
        );
        println!("{line}");
        if !compared.is_empty() {
            let c_ratios: Vec<f64> = rows
                .iter()
                .zip(&compared)
                .map(|((b, _), c)| c.rate / b.rate)
                .collect();
            let c_cpu = median(&compared.iter().map(|c| c.cpu_us).collect::<Vec<_>>());
            println!(
                "{size} B comparison build: median ratio {:.3} (min {:.3}); median CPU/msg {c_cpu:.3} µs \
                 ({:.2}× the bare consumer); this build {audit_cpu:.3} µs",
                median(&c_ratios),
                c_ratios.iter().copied().fold(f64::INFINITY, f64::min),
                c_cpu / bare_cpu
            );
        }
        if !batched.is_empty() {
            let bb_ratios: Vec<f64> = rows
                .iter()
                .zip(&batched)
                .map(|((_, a), bb)| a.rate / bb.rate)
                .collect();
            let bb_cpu = median(&batched.iter().map(|c| c.cpu_us).collect::<Vec<_>>());
            println!(
                "{size} B batch-reading bare consumer (reads as the service, counts nothing): median \
                 rate {:.2} M msg/s, CPU/msg {bb_cpu:.3} µs; audit-service / it: median ratio {:.3} \
                 (min {:.3}), CPU {:.2}×",
                median(&batched.iter().map(|c| c.rate).collect::<Vec<_>>()) / 1e6,
                median(&bb_ratios),
                bb_ratios.iter().copied().fold(f64::INFINITY, f64::min),
                audit_cpu / bb_cpu
            );
        }
        summaries.push((size, bare_cpu, line));
    }
    println!("\nsummary ({rounds} rounds per size, alternating which side goes first):");
    for (size, bare_cpu, line) in &summaries {
        println!("  this machine's bare consumer: {bare_cpu:.3} µs CPU per {size}-byte message");
        println!("  {line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
