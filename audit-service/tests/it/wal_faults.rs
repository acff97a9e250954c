//! WAL faults against the real broker: a pending entry left by a crash is resent when
//! the restart rule allows it; an entry with a flipped byte or a torn tail is detected,
//! truncated and never sent, and its messages are recounted from the committed
//! offsets; a WAL disk that fills up mid-run (failed and partial writes) makes the
//! auditor count the unwritten reports again. Either way the per-window totals equal
//! the ground truth.

use crate::support;

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::time::Duration;

use audit_lib::{Aggregator, Identity, Limits, Observation};
use audit_service::wal::{CommittedRange, Wal, WalMessage, WalOptions};
use support::*;

const PARTITIONS: i32 = 4;
const WINDOWS: i64 = 3;

/// The WAL entry the service would have written for messages `seq0..seq0+n` (which
/// continue every partition from `start`), as if it crashed before publishing.
fn crafted_entry(
    cfg: &audit_service::Config,
    topic: &str,
    seq0: u64,
    n: u64,
    base: i64,
    start: i64,
) -> (Vec<CommittedRange>, Vec<WalMessage>, HashSet<uuid::Uuid>) {
    let a = &cfg.audit;
    let mut agg = Aggregator::new(
        Identity::new(&a.tier, &a.datacenter, &a.instance_id),
        a.event_time.clone(),
        Limits::default(),
    )
    .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut next = vec![start; PARTITIONS as usize];
    for i in seq0..seq0 + n {
        let (key, value, _) = known_message(i, base, WINDOWS);
        let p = (i % PARTITIONS as u64) as i32;
        let mut obs = Observation::new(topic, value.as_bytes(), now);
        obs.key = Some(key.as_bytes());
        obs.partition = p;
        obs.offset = next[p as usize];
        agg.record(&obs);
        next[p as usize] += 1;
    }
    let msgs = agg.drain(now);
    let uuids = msgs.iter().map(|m| m.uuid).collect();
    let ranges = (0..PARTITIONS)
        .map(|p| CommittedRange {
            topic: topic.to_string(),
            partition: p,
            start: Some(start),
            end: next[p as usize],
        })
        .collect();
    let wal_msgs = msgs
        .iter()
        .map(|m| WalMessage {
            key: m.topic.clone(),
            payload: m.to_json(),
        })
        .collect();
    (ranges, wal_msgs, uuids)
}

fn last_segment(dir: &Path) -> PathBuf {
    let mut segs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| std::fs::metadata(p).unwrap().len() > 0)
        .collect();
    segs.sort();
    segs.pop().expect("a non-empty WAL segment")
}

async fn run_until(cfg: &audit_service::Config, reader: &mut AuditReader, topic: &str, n: u64) {
    let svc = spawn_service(cfg.clone());
    let ok =
        tokio::task::block_in_place(|| reader.wait_for_count(topic, n, Duration::from_secs(90)));
    svc.stop().await;
    assert!(ok, "only {} of {n} counted", reader.total_count(topic));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_or_torn_wal_entries_are_truncated_and_counts_stay_exact() {
    init_tracing();
    let Setup {
        bootstrap,
        topic,
        audit_topic,
        group,
        // Kept alive: dropping it deletes the WAL directory.
        wal: _wal,
        cfg,
    } = Setup::new("walf", PARTITIONS).await;
    let wal_dir = cfg.audit.instance_wal_dir();
    let base = base_time();
    let p = producer(&bootstrap);
    let mut truth = Totals::new();
    let mut reader = AuditReader::new(&bootstrap, &audit_topic, 3);

    produce_known(&p, &topic, PARTITIONS, 2_000, 0, base, WINDOWS, &mut truth);
    run_until(&cfg, &mut reader, &topic, 2_000).await;
    assert_eq!(
        committed_total(&bootstrap, &group, &topic, PARTITIONS),
        2_000
    );

    // 1. Flipped byte: a crash left an entry for batch 2 whose bytes are damaged. It
    // must not be sent; batch 2 is recounted from the committed offsets.
    produce_known(
        &p, &topic, PARTITIONS, 2_000, 2_000, base, WINDOWS, &mut truth,
    );
    let (ranges, msgs, flipped_uuids) = crafted_entry(&cfg, &topic, 2_000, 2_000, base, 500);
    {
        let (mut wal, _) = Wal::open(&wal_dir, WalOptions::default()).unwrap();
        wal.append(ranges, msgs).unwrap();
    }
    let seg = last_segment(&wal_dir);
    let mut data = std::fs::read(&seg).unwrap();
    let mid = data.len() / 2;
    data[mid] ^= 0x01;
    std::fs::write(&seg, &data).unwrap();
    run_until(&cfg, &mut reader, &topic, 4_000).await;
    assert!(
        flipped_uuids.iter().all(|u| !reader.uuids.contains(u)),
        "the corrupt entry was sent"
    );

    // 2. A valid pending entry for batch 3 (resent: the offsets are still at its
    // start) followed by a torn record (never sent).
    produce_known(
        &p, &topic, PARTITIONS, 2_000, 4_000, base, WINDOWS, &mut truth,
    );
    let (ranges, msgs, resent_uuids) = crafted_entry(&cfg, &topic, 4_000, 2_000, base, 1_000);
    let (bogus_ranges, bogus_msgs, torn_uuids) =
        crafted_entry(&cfg, &topic, 4_000, 2_000, base, 1_000);
    {
        let (mut wal, _) = Wal::open(&wal_dir, WalOptions::default()).unwrap();
        wal.append(ranges, msgs).unwrap();
        wal.append(bogus_ranges, bogus_msgs).unwrap();
    }
    let seg = last_segment(&wal_dir);
    let len = std::fs::metadata(&seg).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    run_until(&cfg, &mut reader, &topic, 6_000).await;
    assert!(
        resent_uuids.iter().all(|u| reader.uuids.contains(u)),
        "the valid pending entry was resent"
    );
    assert!(
        torn_uuids.iter().all(|u| !reader.uuids.contains(u)),
        "the torn entry was sent"
    );

    assert_windows_exact(&mut reader, &truth, &topic, Duration::from_secs(2));
    assert_eq!(
        committed_total(&bootstrap, &group, &topic, PARTITIONS),
        6_000
    );
}

/// A tmpfs of `size` mounted at a directory for the life of the value (the tests run
/// as root): a real disk-full for the WAL.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mount tmpfs at {} (root needed)",
            dir.display()
        );
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Fills the file system holding `path` with zeros, a page at a time, until it is
/// full; returns the file's length.
fn fill(path: &Path) -> u64 {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let page = [0u8; 4096];
    loop {
        match f.write(&page) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
            Err(e) => panic!("fill {}: {e}", path.display()),
        }
    }
    let _ = f.sync_all();
    std::fs::metadata(path).unwrap().len()
}

/// The WAL disk fills up while the auditor runs: reports fail whole (no space at
/// all), then part-way (one page free, entries larger than that), and /healthz says
/// so. Traffic continues; once space returns, every window's count and checksum equal
/// the ground truth and the committed offsets equal what was produced: the counts of
/// the reports that could not be written were counted again, not lost (A1), and a
/// partial write did not leave the WAL unreadable (B10).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_wal_disk_mid_run_loses_no_count() {
    // Many windows per report: entries of several pages, so one free page gives a
    // partial write.
    const MANY_WINDOWS: i64 = 40;
    init_tracing();
    let Setup {
        bootstrap,
        topic,
        audit_topic,
        group,
        wal: _unused,
        mut cfg,
    } = Setup::new("walfull", PARTITIONS).await;
    let mnt = tempfile::tempdir().unwrap();
    let _tmpfs = Tmpfs::mount(mnt.path(), "16m");
    cfg.audit.wal_dir = mnt.path().join("wal");
    enable_ops(&mut cfg);
    let base = base_time();
    let p = producer(&bootstrap);
    let mut truth = Totals::new();
    let mut reader = AuditReader::new(&bootstrap, &audit_topic, 3);
    let svc = start_service(cfg.clone()).await;
    let port = svc.ops_port();

    // Batches of 2 000 messages over many windows; `seq` counts what was produced.
    let mut seq = 0;
    let mut produce_batch = || {
        produce_known(
            &p,
            &topic,
            PARTITIONS,
            2_000,
            seq,
            base,
            MANY_WINDOWS,
            &mut truth,
        );
        seq += 2_000;
    };
    produce_batch();
    assert!(tokio::task::block_in_place(|| reader.wait_for_count(
        &topic,
        2_000,
        Duration::from_secs(90)
    )));

    let wal_errors = || metric(port, "errors_total{kind=\"wal\"}");
    let unhealthy_wal = || matches!(ops_get(port, "/healthz"), Some((503, body)) if body.contains("cannot write WAL"));
    let consumed = || metric(port, "consumed_messages_total");
    let ballast = mnt.path().join("ballast");
    for (phase, free) in [("no space", 0u64), ("one page", 4096)] {
        let len = fill(&ballast);
        if free > 0 {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&ballast)
                .unwrap()
                .set_len(len - free)
                .unwrap();
        }
        let errors_before = wal_errors();
        let consumed_before = consumed();
        produce_batch();
        // Reports covering the new messages failed (twice, so the recount failed too)
        // and /healthz said so.
        let mut saw_unhealthy = false;
        let failed = tokio::task::block_in_place(|| {
            testkit::wait_until(Duration::from_secs(90), || {
                saw_unhealthy |= unhealthy_wal();
                consumed() >= consumed_before + 2_000.0 && wal_errors() >= errors_before + 3.0
            })
        });
        assert!(
            failed,
            "{phase}: WAL errors {} -> {}, consumed {consumed_before} -> {}",
            errors_before,
            wal_errors(),
            consumed()
        );
        assert!(
            saw_unhealthy || unhealthy_wal(),
            "{phase}: /healthz did not report the WAL fault: {:?}",
            ops_get(port, "/healthz")
        );
        std::fs::remove_file(&ballast).unwrap();
    }

    // Space is back; traffic goes on.
    produce_batch();
    let all = seq;
    let ok = tokio::task::block_in_place(|| {
        reader.wait_for_count(&topic, all, Duration::from_secs(120))
    });
    let healthy = tokio::task::block_in_place(|| {
        testkit::wait_until(Duration::from_secs(60), || {
            matches!(ops_get(port, "/healthz"), Some((200, _)))
        })
    });
    svc.stop().await;
    assert_all_counted_exactly(&mut reader, &truth, &topic, ok, all);
    assert!(
        healthy,
        "/healthz after space returned: {:?}",
        ops_get(port, "/healthz")
    );
    assert_eq!(
        committed_total(&bootstrap, &group, &topic, PARTITIONS),
        all as i64
    );
}

/// The committed-offset read at assignment fails (A2): another producer holds an open
/// transaction on the group's offsets, so OffsetFetch (require_stable) stays unstable
/// past `publish_timeout`. A pending WAL entry left by a crash must then be discarded
/// (consumption starts at the committed offsets, i.e. at the entry's start, so its
/// messages are recounted), never resent later on top of the recount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_offset_read_at_assignment_discards_instead_of_resending_later() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::producer::{BaseProducer, Producer};
    use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
    init_tracing();
    let Setup {
        bootstrap,
        topic,
        audit_topic,
        group,
        wal: _wal,
        mut cfg,
    } = Setup::new("walunst", PARTITIONS).await;
    enable_ops(&mut cfg);
    cfg.audit.publish_timeout = Duration::from_secs(3);
    let wal_dir = cfg.audit.instance_wal_dir();
    let base = base_time();
    let p = producer(&bootstrap);
    let mut truth = Totals::new();
    let mut reader = AuditReader::new(&bootstrap, &audit_topic, 3);

    produce_known(&p, &topic, PARTITIONS, 2_000, 0, base, WINDOWS, &mut truth);
    run_until(&cfg, &mut reader, &topic, 2_000).await;
    let committed_before = committed(&bootstrap, &group, &topic, PARTITIONS);
    assert_eq!(committed_before.values().sum::<i64>(), 2_000);

    // A crash left an entry for batch 2, starting at the committed offsets.
    produce_known(
        &p, &topic, PARTITIONS, 2_000, 2_000, base, WINDOWS, &mut truth,
    );
    let (ranges, msgs, _) = crafted_entry(&cfg, &topic, 2_000, 2_000, base, 500);
    {
        let (mut wal, _) = Wal::open(&wal_dir, WalOptions::default()).unwrap();
        wal.append(ranges, msgs).unwrap();
    }

    // Another producer's open transaction on the group's offsets (same values).
    let helper: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("transactional.id", testkit::unique("unstable-offsets"))
        .set("transaction.timeout.ms", "60000")
        .create()
        .unwrap();
    let member: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", &group)
        .create()
        .unwrap();
    let mut offsets = TopicPartitionList::new();
    for (part, o) in &committed_before {
        offsets
            .add_partition_offset(&topic, *part, Offset::Offset(*o))
            .unwrap();
    }
    tokio::task::block_in_place(|| {
        helper.init_transactions(Duration::from_secs(30)).unwrap();
        helper.begin_transaction().unwrap();
        helper
            .send_offsets_to_transaction(
                &offsets,
                &member.group_metadata().expect("group metadata"),
                Duration::from_secs(30),
            )
            .unwrap();
    });

    let svc = start_service(cfg.clone()).await;
    let port = svc.ops_port();
    // The auditor's offset read failed at assignment; then the other transaction ends.
    let failed = tokio::task::block_in_place(|| {
        testkit::wait_until(Duration::from_secs(90), || {
            metric(port, "errors_total{kind=\"committed_offsets\"}") >= 1.0
        })
    });
    tokio::task::block_in_place(|| helper.abort_transaction(Duration::from_secs(30)).unwrap());
    assert!(
        failed,
        "the committed-offset read at assignment did not fail"
    );

    let ok = tokio::task::block_in_place(|| {
        reader.wait_for_count(&topic, 4_000, Duration::from_secs(90))
    });
    // Long enough for several interval reports (and any late resend) to land.
    tokio::task::block_in_place(|| reader.poll_for(Duration::from_secs(5)));
    let discarded = metric(
        port,
        "restart_decisions_total{origin=\"earlier_session\",decision=\"discard\"}",
    );
    svc.stop().await;
    assert_eq!(
        discarded, 1.0,
        "the restart rule's branch: discard at assignment"
    );
    assert_all_counted_exactly(&mut reader, &truth, &topic, ok, 4_000);
    assert_eq!(
        committed_total(&bootstrap, &group, &topic, PARTITIONS),
        4_000
    );
}

/// At-least-once mode (A4), the documented bound: instance A published a report's
/// audit messages and died before committing its offsets; instance B took the
/// partitions and counted the same messages again under new UUIDs. Those messages are
/// counted twice, exactly once more and no more: when A comes back its pending entry
/// is settled (its partitions moved on), never resent on top.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_counts_a_moved_report_twice_and_no_more() {
    use audit_lib::AuditMessage;
    use rdkafka::producer::BaseRecord;
    init_tracing();
    let Setup {
        bootstrap,
        topic,
        audit_topic,
        group,
        wal: _wal,
        mut cfg,
    } = Setup::new("alomove", PARTITIONS).await;
    cfg.audit.mode = audit_service::Mode::AtLeastOnce;
    cfg.audit.static_membership = false;
    enable_ops(&mut cfg);
    let base = base_time();
    let p = producer(&bootstrap);
    let mut truth = Totals::new();
    let mut reader = AuditReader::new(&bootstrap, &audit_topic, 3);

    produce_known(&p, &topic, PARTITIONS, 2_000, 0, base, WINDOWS, &mut truth);
    run_until(&cfg, &mut reader, &topic, 2_000).await;

    // A's report of batch 2: flushed to the audit topic, offsets never committed
    // (killed between flush and commit), the entry still pending in A's WAL.
    produce_known(
        &p, &topic, PARTITIONS, 2_000, 2_000, base, WINDOWS, &mut truth,
    );
    let (ranges, msgs, _) = crafted_entry(&cfg, &topic, 2_000, 2_000, base, 500);
    let mut twice = Totals::new();
    for m in &msgs {
        let msg = AuditMessage::from_json(m.payload.as_bytes()).unwrap();
        if let Some(inc) = msg.as_increment() {
            let t = twice.entry((topic.clone(), inc.window_start)).or_default();
            t.count += inc.stats.count;
            t.bytes += inc.stats.bytes;
            t.checksum = t.checksum.wrapping_add(inc.stats.checksum.0);
        }
        p.send(BaseRecord::to(&audit_topic).key(&m.key).payload(&m.payload))
            .map_err(|(e, _)| e)
            .unwrap();
    }
    rdkafka::producer::Producer::flush(&p, Duration::from_secs(30)).unwrap();
    {
        let (mut wal, _) = Wal::open(&cfg.audit.instance_wal_dir(), WalOptions::default()).unwrap();
        wal.append(ranges, msgs).unwrap();
    }

    // B owns the partitions meanwhile and counts from the committed offsets.
    let mut cfg_b = cfg.clone();
    cfg_b.audit.instance_id = testkit::unique("alomove-b");
    cfg_b.ops.enabled = false;
    run_until(&cfg_b, &mut reader, &topic, 6_000).await;

    // A comes back: its entry's partitions moved on; it is settled, never resent.
    let svc = start_service(cfg.clone()).await;
    let port = svc.ops_port();
    let settled = tokio::task::block_in_place(|| {
        testkit::wait_until(Duration::from_secs(90), || {
            // B committed exactly the entry's end: "already published" (by A, in
            // fact); any other offset would discard it. Either way: not resent.
            metric(port, "restart_decisions_total{origin=\"earlier_session\"") >= 1.0
        })
    });
    tokio::task::block_in_place(|| reader.poll_for(Duration::from_secs(3)));
    let resent = metric(port, "decision=\"resend\"");
    svc.stop().await;
    assert!(
        settled && resent == 0.0,
        "A's pending entry: settled {settled}, resent {resent}"
    );

    // Truth, plus batch 2's report once more: the documented bound, reached exactly.
    let mut expected = truth.clone();
    for (k, v) in twice {
        let e = expected.entry(k).or_default();
        e.count += v.count;
        e.bytes += v.bytes;
        e.checksum = e.checksum.wrapping_add(v.checksum);
    }
    let d = diff(&expected, &reader.topic_totals(&topic));
    assert!(d.is_empty(), "per-window differences:\n{}", d.join("\n"));
    assert_eq!(
        committed_total(&bootstrap, &group, &topic, PARTITIONS),
        4_000
    );
}
