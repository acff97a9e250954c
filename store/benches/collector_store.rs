//! First-seen increments per second into PostgreSQL through `Ingest::stage_batch`
//! (deduplication by UUID, each new increment stored whole and queued for roll-up,
//! emitters, one transaction per batch), against a baseline measured in the same run:
//! a raw binary `COPY` of the same rows into the same table (`audit_message`), one
//! transaction per batch, no deduplication. Also replays every batch (all duplicates)
//! and then rolls everything up.
//!
//! Run through `bench/collector-store.sh` (PostgreSQL from deploy/dev). Arguments:
//! `--increments N --batch B --buckets K --topics T --rounds R --rollup L [--url URL]
//! [--citus]`. With `--url`, the rounds run in that (migrated) database next to the rows
//! it holds (bench/store-scale.sh: a store of 60 M window rows): between rounds only the
//! bench's own rows (topics `topic-NNNN`, messages) are deleted instead of every table
//! truncated. With `--citus`, a fresh database on the Citus cluster of
//! `KAFKA_AUDIT_TEST_CITUS_URL`, distributed with deploy/citus/distribute.sql
//! (bench/citus-store.sh runs it against one PostgreSQL in the same run).
//!
//! The hot path is `stage_batch` (what the collector calls); the roll-up into window
//! rows runs behind it, and its rate (increments/s, `L` per transaction) is reported
//! too: sustained ingestion is bounded by both.

use std::time::{Duration, Instant};

use sqlx::postgres::PgPoolCopyExt;
use sqlx::PgPool;
use store::{
    AuditBody, Batch, Deployment, Increment, Ingest, LatencyHistogram, Message, OffsetSpan,
    PgStore, Upkeep, WindowStats,
};
use uuid::Uuid;

struct Args {
    increments: usize,
    batch: usize,
    buckets: usize,
    topics: u64,
    rounds: usize,
    rollup: u32,
    /// An existing database to ingest into (`None`: a fresh one).
    url: Option<String>,
    /// A fresh database on the Citus cluster, distributed by topic.
    citus: bool,
}

fn args() -> Args {
    let mut a = Args {
        increments: 200_000,
        batch: 5_000,
        buckets: 8,
        topics: 200,
        rounds: 3,
        rollup: 200_000,
        url: None,
        citus: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--bench" {
            continue; // passed by `cargo bench`
        }
        if flag == "--citus" {
            a.citus = true;
            continue;
        }
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        let parse = |v: &str| {
            v.parse::<usize>()
                .unwrap_or_else(|e| panic!("{flag} {v}: {e}"))
        };
        match flag.as_str() {
            "--increments" => a.increments = parse(&value),
            "--batch" => a.batch = parse(&value).max(1),
            "--buckets" => a.buckets = parse(&value),
            "--topics" => a.topics = parse(&value).max(1) as u64,
            "--rounds" => a.rounds = parse(&value).max(1),
            "--rollup" => a.rollup = parse(&value).max(1) as u32,
            "--url" => a.url = Some(value),
            _ => panic!("unknown argument {flag}"),
        }
    }
    a
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const W: i64 = 600_000;
const T0: i64 = 1_764_410_400_000;

/// Increments as a fleet of auditors would emit them: T topics, 3 tiers, 2
/// datacenters, the current and two late windows, 20 hosts, K latency buckets each
/// around a per-increment typical latency.
fn generate(a: &Args) -> Vec<Message> {
    let mut rng = Rng(1);
    let tiers = ["producer", "regional", "aggregate"];
    let dcs = ["dc1", "dc2"];
    (0..a.increments)
        .map(|_| {
            let window = rng.below(3) as i64;
            let count = 1 + rng.below(10_000);
            let base = 150 + rng.below(100) as i32;
            let per = (count / (a.buckets as u64 + 1)).max(1);
            let buckets: Vec<(u32, u64)> = (0..a.buckets as i32)
                .map(|k| ((base + k) as u32, per))
                .collect();
            let in_buckets: u64 = buckets.iter().map(|b| b.1).sum();
            let partition = rng.below(12) as i32;
            let min = rng.below(1 << 40) as i64;
            Message {
                version: audit_lib::AUDIT_MESSAGE_VERSION,
                uuid: Uuid::new_v4(),
                topic: format!("topic-{:04}", rng.below(a.topics)),
                tier: tiers[rng.below(3) as usize].into(),
                datacenter: dcs[rng.below(2) as usize].into(),
                host: format!("auditor-{}", rng.below(20)),
                emitted_at: T0 + 3 * W + rng.below(1000) as i64,
                body: AuditBody::Increment(Increment {
                    window_start: T0 + window * W,
                    window_end: T0 + (window + 1) * W,
                    stats: WindowStats {
                        count: count.max(in_buckets),
                        bytes: count * 120,
                        no_time_count: 0,
                        malformed_count: 0,
                        out_of_bounds_count: 0,
                        observation_time_count: 0,
                        delivery_failed_count: 0,
                        checksum: audit_lib::Checksum(rng.next()),
                        latency: LatencyHistogram::from_buckets(0, 0, 5_000, buckets).unwrap(),
                        offsets: vec![OffsetSpan {
                            partition,
                            min,
                            max: min + count as i64,
                            max_record_time: None,
                        }],
                        max_observed_at: None,
                    },
                }),
            }
        })
        .collect()
}

const RECEIVED: i64 = T0 + 4 * W;

async fn copy_baseline(pool: &PgPool, increments: &[Message], batch: usize) -> Duration {
    let started = Instant::now();
    for chunk in increments.chunks(batch) {
        // The very bytes stage_batch sends for first-seen messages; encoding is part
        // of the cost on both sides.
        let messages: Vec<Message> = chunk.to_vec();
        let refs: Vec<&Message> = messages.iter().collect();
        let rows = store::pgcopy::encode_messages(&refs, RECEIVED);
        let mut copy = pool
            .copy_in_raw(store::pgcopy::COPY_MESSAGES)
            .await
            .expect("start COPY");
        copy.send(rows).await.expect("send COPY data");
        let n = copy.finish().await.expect("finish COPY");
        assert_eq!(n as usize, chunk.len());
    }
    started.elapsed()
}

async fn ingest(
    store: &PgStore,
    increments: &[Message],
    batch: usize,
    expect_first_seen: bool,
) -> Duration {
    let started = Instant::now();
    for chunk in increments.chunks(batch) {
        let b = Batch {
            messages: chunk.to_vec(),
            rejects: vec![],
            received_at_ms: RECEIVED,
        };
        let out = store.stage_batch(&b).await.expect("stage_batch");
        let expected = if expect_first_seen { chunk.len() } else { 0 };
        assert_eq!(out.accepted(), expected, "first-seen count of a batch");
    }
    started.elapsed()
}

/// The deduplication probe alone (`PgStore::known_messages`) of every batch, all
/// stored already: the time per batch.
async fn probe(store: &PgStore, increments: &[Message], batch: usize) -> Duration {
    let started = Instant::now();
    let mut batches = 0;
    for chunk in increments.chunks(batch) {
        let b = Batch {
            messages: chunk.to_vec(),
            rejects: vec![],
            received_at_ms: RECEIVED,
        };
        let known = store.known_messages(&b).await.expect("probe");
        assert_eq!(known, chunk.len(), "every message of the batch is known");
        batches += 1;
    }
    started.elapsed() / batches
}

/// Rolls up everything staged, `limit` increments per transaction.
async fn rollup(store: &PgStore, limit: u32) -> Duration {
    let started = Instant::now();
    while store.rollup(limit).await.expect("rollup") > 0 {}
    started.elapsed()
}

/// Windows of the bench's topics (`$1`: `topic-NNNN`; bench/seed-windows.sql seeds
/// `topic-NNNNN`).
const OWN_WINDOWS: &str = "SELECT id FROM audit_window WHERE topic = ANY($1)";

fn own_topics(a: &Args) -> Vec<String> {
    (0..a.topics).map(|t| format!("topic-{t:04}")).collect()
}

/// Empties what the rounds write: every table of a fresh database, or with `--url` the
/// bench's own rows only.
async fn truncate(pool: &PgPool, shared: Option<&[String]>) {
    if let Some(topics) = shared {
        for sql in [
            // Every row of a window carries its topic (the distribution key).
            String::from("DELETE FROM audit_window_bucket WHERE topic = ANY($1)"),
            "DELETE FROM audit_window_offset WHERE topic = ANY($1)".into(),
            "DELETE FROM audit_window WHERE topic = ANY($1)".into(),
            "DELETE FROM audit_topic WHERE topic = ANY($1)".into(),
            "TRUNCATE audit_message, audit_pending, audit_emitter, audit_reject".into(),
            "CHECKPOINT".into(),
        ] {
            let q = sqlx::query(&sql);
            let q = if sql.contains("$1") {
                q.bind(topics)
            } else {
                q
            };
            q.execute(pool).await.expect("cleaning the bench's rows");
        }
        return;
    }
    sqlx::query(
        "TRUNCATE audit_message, audit_pending, audit_window, audit_window_bucket, audit_window_offset,
                  audit_topic, audit_progress, audit_emitter, audit_reject",
    )
    .execute(pool)
    .await
    .expect("truncate");
    sqlx::query("CHECKPOINT")
        .execute(pool)
        .await
        .expect("checkpoint");
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

fn main() {
    // `cargo test --all-targets` runs bench targets without `--bench`: building it is
    // the check there, measuring is for `cargo bench` and bench/collector-store.sh.
    if !std::env::args().any(|a| a == "--bench") {
        println!("collector_store: not run without --bench (use bench/collector-store.sh)");
        return;
    }
    let a = args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let fresh;
        let url = match &a.url {
            Some(url) => url.as_str(),
            None if a.citus => {
                fresh = testkit::fresh_citus_database("bench_collector_citus")
                    .await
                    .expect("--citus needs KAFKA_AUDIT_TEST_CITUS_URL");
                fresh.url()
            }
            None => {
                fresh = testkit::fresh_database("bench_collector_store").await;
                fresh.url()
            }
        };
        let store = PgStore::connect(url).await.expect("connect");
        store.migrate().await.expect("migrate");
        if a.citus {
            sqlx::raw_sql(include_str!("../../deploy/citus/distribute.sql"))
                .execute(store.pool())
                .await
                .expect("deploy/citus/distribute.sql");
        }
        // The windows' day gets its partition, as the collector prepares them.
        store
            .prepare_partitions(T0, T0 + 86_400_000)
            .await
            .expect("day partitions");
        // The collector's first partition upkeep on a fresh store: its default
        // retention back (30 days) and a week ahead, one day per transaction.
        let now = common::now_ms();
        let started = Instant::now();
        let created = store
            .prepare_partitions(now - 30 * 86_400_000, now + 7 * 86_400_000)
            .await
            .expect("the collector's day partitions");
        println!(
            "partition upkeep: {created} partitions (30 days back, 7 ahead) in {:.2} s",
            started.elapsed().as_secs_f64()
        );
        let own = own_topics(&a);
        let shared = a.url.as_ref().map(|_| own.as_slice());
        let pool = store.pool().clone();
        let increments = generate(&a);
        let buckets_total: usize = increments
            .iter()
            .filter_map(|m| m.as_increment().map(|i| i.stats.latency.buckets().count()))
            .sum();
        println!(
            "workload: {} increments, batch {}, {} topics x 3 tiers x 2 dcs x 3 windows, {} buckets/increment ({} bucket values), 1 offset range each",
            a.increments, a.batch, a.topics, a.buckets, buckets_total
        );
        let mut ours_rates = vec![];
        let mut copy_rates = vec![];
        let mut replay_rates = vec![];
        let mut rollup_rates = vec![];
        let mut ratios = vec![];
        for round in 1..=a.rounds {
            truncate(&pool, shared).await;
            let copy = copy_baseline(&pool, &increments, a.batch).await;
            truncate(&pool, shared).await;
            let ours = ingest(&store, &increments, a.batch, true).await;
            let replay = ingest(&store, &increments, a.batch, false).await;
            let probed = probe(&store, &increments, a.batch).await;
            // The probe as it was before it was routed: one query to every shard.
            let fanned_out = if a.citus {
                format!(
                    " | probe to every shard {:.3} s per batch",
                    probe(&store.unrouted(), &increments, a.batch).await.as_secs_f64()
                )
            } else {
                String::new()
            };
            let rolled = rollup(&store, a.rollup).await;
            let (windows, bucket_rows): (i64, i64) = sqlx::query_as(&format!(
                "SELECT (SELECT count(*) FROM ({OWN_WINDOWS}) w),
                        (SELECT count(*) FROM audit_window_bucket WHERE topic = ANY($1))"
            ))
            .bind(&own)
            .fetch_one(&pool)
            .await
            .unwrap();
            let stored: i64 = sqlx::query_scalar(
                "SELECT sum(count)::int8 FROM audit_window WHERE topic = ANY($1)",
            )
            .bind(&own)
            .fetch_one(&pool)
            .await
            .unwrap();
            let expected: u64 = increments
                .iter()
                .filter_map(|m| m.as_increment().map(|i| i.stats.count))
                .sum();
            assert_eq!(stored as u64, expected, "stored counts equal the sum of increments");
            println!(
                "round {round}: stage_batch {:>7.0} first-seen increments/s ({:.2} s) | raw COPY {:>7.0} rows/s ({:.2} s) | ratio {:.2} | replay (all duplicates) {:>7.0}/s ({:.3} s per batch of {}) | probe {:.3} s per batch{fanned_out} | roll-up {:>7.0} increments/s ({:.2} s) into {} windows, {} bucket rows",
                rate(a.increments, ours),
                ours.as_secs_f64(),
                rate(a.increments, copy),
                copy.as_secs_f64(),
                copy.as_secs_f64() / ours.as_secs_f64(),
                rate(a.increments, replay),
                replay.as_secs_f64() * a.batch as f64 / a.increments as f64,
                a.batch,
                probed.as_secs_f64(),
                rate(a.increments, rolled),
                rolled.as_secs_f64(),
                windows,
                bucket_rows
            );
            ours_rates.push(rate(a.increments, ours));
            copy_rates.push(rate(a.increments, copy));
            replay_rates.push(rate(a.increments, replay));
            rollup_rates.push(rate(a.increments, rolled));
            ratios.push(copy.as_secs_f64() / ours.as_secs_f64());
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            v[v.len() / 2]
        };
        let (ours, copy, replay) = (median(&mut ours_rates), median(&mut copy_rates), median(&mut replay_rates));
        let rolled = median(&mut rollup_rates);
        // The ratio is taken per round (both measured back to back under the same
        // load of a shared machine), then the median.
        let ratio = median(&mut ratios);
        println!(
            "median: stage_batch {ours:.0} first-seen increments/s, raw COPY {copy:.0} rows/s, ratio of rounds {ratio:.2}, replay {replay:.0}/s ({:.3} s per batch of {}), roll-up {rolled:.0} increments/s ({} per transaction)",
            a.batch as f64 / replay,
            a.batch,
            a.rollup
        );
        if a.citus {
            // The targets are one PostgreSQL's; bench/citus-store.sh sets Citus beside it.
            println!("targets: not applied on Citus");
            return;
        }
        let ok = ours >= 50_000.0 && ratio >= 0.5;
        println!("targets (>= 50000/s and >= 0.5x COPY): {}", if ok { "met" } else { "NOT met" });
        if !ok {
            std::process::exit(1);
        }
    });
}
