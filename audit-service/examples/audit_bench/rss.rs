//! The memory scenario: many one-partition topics with late data spread over many
//! windows, audited by one instance; its peak RSS.

use std::time::{Duration, Instant};

use anyhow::Context;
use common::now_ms;

use crate::cpu::vm_hwm_kb;
use rdkafka::producer::Producer;

use crate::kafka::{create_topics, producer, send};
use crate::service::{bench_config, measure_service, scrape, spawn_service, stop};
use crate::{tempdir, unique};

pub(crate) fn rss(
    bootstrap: &str,
    topics: usize,
    per_topic: u64,
    windows: i64,
) -> anyhow::Result<()> {
    let dir = tempdir()?;
    let prefix = unique("bench-rss");
    let names: Vec<String> = (0..topics).map(|i| format!("{prefix}.{i:05}")).collect();
    let started = Instant::now();
    create_topics(bootstrap, &names, 1)?;
    eprintln!(
        "created {topics} topics in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let p = producer(bootstrap)?;
    let now = now_ms();
    for (ti, t) in names.iter().enumerate() {
        for i in 0..per_topic {
            // late data: event times up to `windows` minutes back
            let w = (i as i64 * 31 + ti as i64) % windows;
            let ts = now - (w + 1) * 60_000;
            send(
                &p,
                t,
                None,
                &format!("k{i}"),
                &format!("{{\"ts\":{ts},\"n\":{i}}}"),
            );
        }
    }
    p.flush(Duration::from_secs(300))?;
    let n = topics as u64 * per_topic;
    eprintln!("wrote {n} messages");
    let port = 19_600;
    let text = bench_config(
        bootstrap,
        vec![],
        Some(format!("^{}\\.", prefix.replace('-', "\\-"))),
        port,
        &dir,
    );
    let mut child = spawn_service(&text, &dir)?;
    let rate = measure_service("audit-service", port, &mut child, n)?
        .0
        .rate;
    // two more reports with everything drained
    std::thread::sleep(Duration::from_secs(11));
    let hwm = vm_hwm_kb(child.id()).context("no VmHWM")?;
    let published = scrape(port, "kafka_audit_published_messages_total").unwrap_or(0);
    stop(child)?;
    println!(
        "rss: topics={topics} messages={n} windows_per_topic={windows} open_topic_windows={} rate={rate:.0} msg/s published_audit_messages={published} peak_rss={} MB",
        topics as i64 * windows,
        hwm / 1024
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
