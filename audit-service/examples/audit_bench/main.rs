//! Benchmark driver for bench/audit-service.sh (real broker).
//!
//! `audit_bench throughput BOOTSTRAP MESSAGES ROUNDS [SIZE:MESSAGES,...]`: for each
//! payload size (default `100:MESSAGES,1024:MESSAGES/5`), fills a 12-partition topic
//! with JSON messages of exactly that many bytes, then alternately (a) consumes it with
//! a bare rdkafka consumer built from the audit service's own consumer settings (one
//! `poll` per message), then with a bare consumer that reads in batches as the service
//! does (`BENCH_BARE_BATCH=0`: not), and (b) runs the audit service (a child process of
//! this binary, the same code as `kafka-audit audit`) on it, each with a fresh group. Rate = messages from the 10 %
//! mark to the last one ÷ elapsed time; the service's count (messages audited) is read
//! from its /metrics every 10 ms. CPU per message = the process's user + system time
//! over the same span ÷ messages. Prints a table per size and a summary that states the
//! bare consumer's CPU per message on this machine, so figures from different machines
//! can be compared.
//!
//! `audit_bench rss BOOTSTRAP TOPICS PER_TOPIC WINDOWS`: creates TOPICS one-partition
//! topics, writes PER_TOPIC messages to each with event times spread over WINDOWS
//! one-minute windows in the past (late data keeps many windows open), audits them all
//! and reports the child's peak RSS (VmHWM).
//!
//! `audit_bench serve CONFIG`: runs the audit service (used as the child).
//!
//! `audit_bench cleanup BOOTSTRAP`: deletes the topics the benchmark created
//! (`bench-tp-*`, `bench-rss-*`, `bench-audit-*`), so the dev cluster does not keep
//! thousands of them.

mod bare;
mod cpu;
mod kafka;
mod rss;
mod service;
mod throughput;

use anyhow::bail;
use common::now_ms;

pub(crate) fn unique(prefix: &str) -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix}-{}-{}-{n}", std::process::id(), now_ms())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("serve") => serve(&args[2]),
        Some("throughput") => {
            let n: u64 = args[3].parse()?;
            let sizes = match args.get(5) {
                Some(spec) => throughput::parse_sizes(spec)?,
                None => vec![(100, n), (1024, (n / 5).max(1))],
            };
            throughput::throughput(&args[2], args[4].parse()?, &sizes)
        }
        Some("rss") => rss::rss(&args[2], args[3].parse()?, args[4].parse()?, args[5].parse()?),
        Some("cleanup") => kafka::cleanup(&args[2]),
        _ => bail!("usage: audit_bench serve CONFIG | throughput BOOTSTRAP MESSAGES ROUNDS [SIZE:MESSAGES,...] | rss BOOTSTRAP TOPICS PER_TOPIC WINDOWS | cleanup BOOTSTRAP"),
    }
}

fn serve(config: &str) -> anyhow::Result<()> {
    let cfg = audit_service::Config::load(Some(config.as_ref()))?;
    common::init_tracing(&cfg.log);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move { audit_service::run(cfg, common::shutdown_on_signals()).await })
}

/// A fresh directory under the system's temp dir for one run's WAL and configs.
pub(crate) fn tempdir() -> anyhow::Result<String> {
    let d = std::env::temp_dir().join(unique("audit-bench"));
    std::fs::create_dir_all(&d)?;
    Ok(d.display().to_string())
}
