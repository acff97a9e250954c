//! Seeds a store through its real write path with a small pipeline history that has
//! every kind of verdict: `seed STORE_URL [HOURS]` (HOURS = 0: only migrate). Also
//! `seed --retention STORE_URL CUTOFF_MS [BATCH]`: the collector's retention pass
//! (`Upkeep::retention` until nothing older than CUTOFF_MS is left), timed, for
//! bench/store-scale.sh. Topology to serve it with:
//! bench/serve-seeded.toml (producer → regional one-to-one in dc1/dc2, regional →
//! aggregate many-to-one into `agg`).
//!
//! Per topic and window: `orders` loses 3 messages in every 5th window between
//! regional and aggregate, `payments` duplicates 2 in every 7th, `clicks.eu` has equal
//! counts but a different checksum in every 11th, `logs.web` is healthy.

use common::now_ms;
use store::{
    AuditBody, Batch, Deployment, Increment, Ingest, LatencyHistogram, Message, OffsetSpan,
    PartitionProgress, Upkeep, WindowStats,
};

const WINDOW: i64 = 600_000;

fn inc(
    topic: &str,
    tier: &str,
    dc: &str,
    w: i64,
    count: u64,
    checksum: u64,
    offset: i64,
) -> Message {
    Message {
        version: audit_lib::AUDIT_MESSAGE_VERSION,
        uuid: uuid::Uuid::new_v4(),
        topic: topic.into(),
        tier: tier.into(),
        datacenter: dc.into(),
        host: format!("{tier}-{dc}-0"),
        emitted_at: now_ms(),
        body: AuditBody::Increment(Increment {
            window_start: w,
            window_end: w + WINDOW,
            stats: WindowStats {
                count,
                bytes: count * 120,
                no_time_count: count / 100,
                malformed_count: 0,
                out_of_bounds_count: 0,
                observation_time_count: 0,
                delivery_failed_count: 0,
                checksum: audit_lib::Checksum(checksum),
                latency: LatencyHistogram::from_buckets(
                    1,
                    0,
                    2_100,
                    [(230, count.saturating_sub(3)), (300, 1), (386, 1)],
                )
                .expect("a valid histogram"),
                offsets: vec![OffsetSpan {
                    partition: 0,
                    min: offset,
                    max: offset + count as i64 - 1,
                    max_record_time: None,
                }],
                max_observed_at: None,
            },
        }),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1).peekable();
    if args.next_if_eq("--retention").is_some() {
        let usage = || anyhow::anyhow!("usage: seed --retention STORE_URL CUTOFF_MS [BATCH]");
        let url = args.next().ok_or_else(usage)?;
        let cutoff: i64 = args.next().ok_or_else(usage)?.parse()?;
        let batch: u32 = args
            .next()
            .map(|b| b.parse())
            .transpose()?
            .unwrap_or(10_000);
        let store = store::Store::connect(&url).await?;
        let started = std::time::Instant::now();
        let (mut windows, mut messages, mut batches) = (0u64, 0u64, 0u64);
        loop {
            let out = store.retention(cutoff, cutoff, batch).await?;
            batches += 1;
            windows += out.windows;
            messages += out.messages;
            if out.total() == 0 {
                break;
            }
        }
        println!(
            "retention: {windows} windows, {messages} messages deleted in {batches} batches of {batch} in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        return Ok(());
    }
    let url = args
        .next()
        .ok_or_else(|| anyhow::anyhow!("usage: seed STORE_URL [HOURS]"))?;
    let hours: i64 = args.next().map(|h| h.parse()).transpose()?.unwrap_or(6);
    let store = store::Store::connect(&url).await?;
    store.migrate().await?;
    if hours == 0 {
        println!("migrated {url}; nothing seeded (HOURS = 0)");
        return Ok(());
    }
    let now = now_ms();
    let last = (now - 40 * 60_000).div_euclid(WINDOW) * WINDOW;
    let first = last - hours * 3_600_000;
    let topics = ["orders", "payments", "clicks.eu", "logs.web"];
    let mut messages = Vec::new();
    for (ti, topic) in topics.iter().enumerate() {
        let mut w = first;
        let mut n = 0i64;
        while w <= now {
            let base = 1_000 + (n as u64 * 37 + ti as u64 * 101) % 500;
            let sum = |c: u64| c.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let mut agg = 0;
            for (di, dc) in ["dc1", "dc2"].iter().enumerate() {
                let c = base + di as u64 * 10;
                let off = n * 10_000;
                messages.push(inc(topic, "producer", dc, w, c, sum(c), off));
                messages.push(inc(topic, "regional", dc, w, c, sum(c), off));
                agg += c;
            }
            let (count, checksum) = match *topic {
                "orders" if n % 5 == 0 => (agg - 3, sum(agg - 3)),
                "payments" if n % 7 == 0 => (agg + 2, sum(agg + 2)),
                "clicks.eu" if n % 11 == 0 => (agg, sum(agg) ^ 0xff),
                _ => (agg, sum(agg)),
            };
            messages.push(inc(
                topic,
                "aggregate",
                "agg",
                w,
                count,
                checksum,
                n * 20_000,
            ));
            w += WINDOW;
            n += 1;
        }
        for (tier, dc) in [
            ("regional", "dc1"),
            ("regional", "dc2"),
            ("aggregate", "agg"),
        ] {
            messages.push(Message {
                version: audit_lib::AUDIT_MESSAGE_VERSION,
                uuid: uuid::Uuid::new_v4(),
                topic: topic.to_string(),
                tier: tier.into(),
                datacenter: dc.into(),
                host: format!("{tier}-{dc}-0"),
                emitted_at: now,
                body: AuditBody::Progress(vec![PartitionProgress {
                    partition: 0,
                    next_offset: n * 20_000,
                    record_time: Some(now),
                    lag: Some(0),
                    ..Default::default()
                }]),
            });
        }
    }
    let total = messages.len();
    for chunk in messages.chunks(500) {
        store
            .write_batch(&Batch {
                messages: chunk.to_vec(),
                rejects: vec![],
                received_at_ms: now,
            })
            .await?;
    }
    println!(
        "seeded {total} messages into {url} ({} topics, {hours} h)",
        topics.len()
    );
    Ok(())
}
