//! Progress as the engine reads it (docs/web.md, Verdicts, rule 3): lag reaches 0 once a partition is read
//! to its end, also when the end is a transaction marker (B5) and when the partition
//! is empty (B2); the watermark is not pushed forward by one record with a far-future
//! CreateTime (B8) nor pulled back by one 40 days old (beyond max_past); a partition a new consumer group has not read anything of yet is
//! reported behind, not left out. Rule 4's evidence: each partition's latest record time read
//! (capped at the auditor's clock), 0 for a partition that holds nothing, the
//! LogAppendTime flag, and the latest record time the increments counted per window
//! and partition.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use audit_lib::PartitionProgress;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use support::*;

/// The latest progress of each partition of `topic` read so far.
fn latest(reader: &AuditReader, topic: &str) -> HashMap<i32, PartitionProgress> {
    let mut out = HashMap::new();
    for m in reader.progress.iter().filter(|m| m.topic == topic) {
        for p in m.as_progress().unwrap_or_default() {
            out.insert(p.partition, p.clone());
        }
    }
    out
}

/// Polls the audit topic until every partition in `parts` reports lag 0 (90 s bound).
fn wait_lag_zero(reader: &mut AuditReader, topic: &str, parts: &[i32]) -> bool {
    testkit::wait_until(Duration::from_secs(90), || {
        reader.poll_for(Duration::from_millis(200));
        let l = latest(reader, topic);
        parts
            .iter()
            .all(|p| l.get(p).is_some_and(|p| p.lag == Some(0)))
    })
}

fn send(
    p: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    partition: i32,
    i: u64,
    ts: i64,
) {
    let key = format!("k{i}");
    let value = format!("{{\"id\":{i},\"ts\":{ts}}}");
    send_queued(
        p,
        BaseRecord::to(topic)
            .key(&key)
            .payload(&value)
            .partition(partition)
            .timestamp(ts),
    );
}

/// A transactional producer (`transactional.id` unique after `name`) whose transaction
/// is open and holds records 0..20 on partition 0, event times from `base`.
fn open_transaction(s: &Setup, name: &str, base: i64) -> ThreadedProducer<DefaultProducerContext> {
    let txn: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &s.bootstrap)
        .set("transactional.id", testkit::unique(name))
        .create()
        .expect("transactional producer");
    txn.init_transactions(Duration::from_secs(30)).unwrap();
    txn.begin_transaction().unwrap();
    for i in 0..20 {
        send(&txn, &s.topic, 0, i, base + i as i64);
    }
    txn
}

/// Sends records `seq0..seq0+n` (event times from `base`) to `partition` without a
/// transaction and flushes them.
fn send_flushed(s: &Setup, partition: i32, seq0: u64, base: i64, n: u64) {
    let plain = producer(&s.bootstrap);
    for i in 0..n {
        send(&plain, &s.topic, partition, seq0 + i, base + i as i64);
    }
    plain.flush(Duration::from_secs(30)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_ending_in_a_transaction_marker_reaches_lag_zero() {
    init_tracing();
    let s = Setup::new("txnlag", 2).await;
    let base = base_time();
    let txn = open_transaction(&s, "txnlag-producer", base);
    txn.commit_transaction(Duration::from_secs(30)).unwrap();
    drop(txn);
    send_flushed(&s, 1, 100, base, 20);

    let svc = spawn_service(s.cfg.clone());
    let mut reader = AuditReader::new(&s.bootstrap, &s.audit_topic, 3);
    let ok = tokio::task::block_in_place(|| wait_lag_zero(&mut reader, &s.topic, &[0, 1]));
    let l = latest(&reader, &s.topic);
    assert!(ok, "lag never reached 0 on both partitions: {l:?}");
    // Partition 0: 20 records and the commit marker; the position is past the marker.
    assert_eq!(l[&0].next_offset, 21, "{l:?}");
    assert_eq!(l[&1].next_offset, 20, "{l:?}");
    assert_eq!(reader.total_count(&s.topic), 40);
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_partition_reports_progress_with_lag_zero() {
    init_tracing();
    let s = Setup::new("emptylag", 2).await;
    let base = base_time();
    send_flushed(&s, 0, 0, base, 20);

    let svc = spawn_service(s.cfg.clone());
    let mut reader = AuditReader::new(&s.bootstrap, &s.audit_topic, 3);
    let ok = tokio::task::block_in_place(|| wait_lag_zero(&mut reader, &s.topic, &[0, 1]));
    let l = latest(&reader, &s.topic);
    assert!(ok, "no lag-0 progress for the empty partition: {l:?}");
    assert_eq!(l[&1].next_offset, 0, "{l:?}");
    assert_eq!(l[&1].record_time, None, "{l:?}");
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_far_future_create_time_does_not_push_the_watermark() {
    init_tracing();
    let s = Setup::new("skew", 1).await;
    // A lagging backlog an hour old, the last record from a producer an hour fast.
    let base = base_time();
    let plain = producer(&s.bootstrap);
    for i in 0..300 {
        send(&plain, &s.topic, 0, i, base + i as i64);
    }
    let real_end = base + 299;
    // Kafka 4 refuses CreateTimes more than an hour ahead of the broker
    // (log.message.timestamp.after.max.ms): 45 minutes ahead is accepted.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let future = now + 45 * 60_000;
    send(&plain, &s.topic, 0, 300, future);
    plain.flush(Duration::from_secs(30)).unwrap();

    let svc = spawn_service(s.cfg.clone());
    let mut reader = AuditReader::new(&s.bootstrap, &s.audit_topic, 3);
    let ok = tokio::task::block_in_place(|| {
        testkit::wait_until(Duration::from_secs(90), || {
            reader.poll_for(Duration::from_millis(200));
            latest(&reader, &s.topic)
                .get(&0)
                .is_some_and(|p| p.next_offset == 301)
        })
    });
    assert!(
        ok,
        "partition not read to its end: {:?}",
        latest(&reader, &s.topic)
    );
    for m in reader.progress.iter().filter(|m| m.topic == s.topic) {
        for p in m.as_progress().unwrap_or_default() {
            let rt = p.record_time.expect("records have timestamps");
            assert!(
                rt <= real_end,
                "watermark {rt} past the backlog's last real time {real_end} (next {})",
                p.next_offset
            );
        }
    }
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_40_days_old_create_time_does_not_pull_the_watermark_back() {
    init_tracing();
    let s = Setup::new("oldskew", 1).await;
    // Current records, one of them (the 50th) stamped 40 days ago: beyond the
    // default max_past (30 d), so it must not become the partition's watermark.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let start = now - 60_000;
    let plain = producer(&s.bootstrap);
    for i in 0..100 {
        let ts = if i == 50 {
            now - 40 * 86_400_000
        } else {
            start + i as i64
        };
        send(&plain, &s.topic, 0, i, ts);
    }
    plain.flush(Duration::from_secs(30)).unwrap();

    let svc = spawn_service(s.cfg.clone());
    let mut reader = AuditReader::new(&s.bootstrap, &s.audit_topic, 3);
    let ok = tokio::task::block_in_place(|| {
        testkit::wait_until(Duration::from_secs(90), || {
            reader.poll_for(Duration::from_millis(200));
            latest(&reader, &s.topic)
                .get(&0)
                .is_some_and(|p| p.next_offset == 100)
        })
    });
    assert!(
        ok,
        "partition not read to its end: {:?}",
        latest(&reader, &s.topic)
    );
    for m in reader.progress.iter().filter(|m| m.topic == s.topic) {
        for p in m.as_progress().unwrap_or_default() {
            let rt = p.record_time.expect("records have timestamps");
            assert!(
                rt >= start,
                "watermark {rt} pulled back before the current records' {start} (next {})",
                p.next_offset
            );
        }
    }
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_transaction_is_not_caught_up_until_it_commits() {
    init_tracing();
    let s = Setup::new("opentxn", 2).await;
    let base = base_time();
    let txn = open_transaction(&s, "opentxn-producer", base);
    txn.flush(Duration::from_secs(30)).unwrap();
    send_flushed(&s, 1, 100, base, 20);

    let svc = spawn_service(s.cfg.clone());
    let mut reader = AuditReader::new(&s.bootstrap, &s.audit_topic, 3);
    // Reports flow and the statistics know the partitions' ends...
    assert!(tokio::task::block_in_place(|| wait_lag_zero(
        &mut reader,
        &s.topic,
        &[1]
    )));
    // ...over several more reports (500 ms apart), the partition holding the open
    // transaction is never reported caught up: its records count once committed.
    tokio::task::block_in_place(|| reader.poll_for(Duration::from_secs(3)));
    for m in reader.progress.iter().filter(|m| m.topic == s.topic) {
        for p in m.as_progress().unwrap_or_default() {
            assert!(
                p.partition != 0 || p.lag != Some(0),
                "caught up during an open transaction: {p:?}"
            );
        }
    }
    txn.commit_transaction(Duration::from_secs(30)).unwrap();
    let ok = tokio::task::block_in_place(|| wait_lag_zero(&mut reader, &s.topic, &[0]));
    let l = latest(&reader, &s.topic);
    assert!(ok, "lag never reached 0 after the commit: {l:?}");
    assert_eq!(l[&0].next_offset, 21, "{l:?}");
    assert!(tokio::task::block_in_place(|| reader.wait_for_count(
        &s.topic,
        40,
        Duration::from_secs(60)
    )));
    svc.stop().await;
}

/// A new consumer group (no committed offsets) and a partition with records of which
/// nothing could be read yet — an open transaction from its first offset, so a
/// `read_committed` fetch returns nothing: the partition is in every report with its
/// lag, not left out until its first record is read. Left out, it could not hold a
/// window back: the engine judges an auditor by the partitions it reports, and the
/// other partition is caught up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_not_read_yet_by_a_new_group_is_reported_behind() {
    init_tracing();
    let s = Setup::new("unread", 2).await;
    let base = base_time();
    let txn = open_transaction(&s, "unread-producer", base);
    txn.flush(Duration::from_secs(30)).unwrap();
    send_flushed(&s, 1, 100, base, 20);

    let svc = spawn_service(s.cfg.clone());
    let mut reader = AuditReader::new(&s.bootstrap, &s.audit_topic, 3);
    assert!(tokio::task::block_in_place(|| wait_lag_zero(
        &mut reader,
        &s.topic,
        &[1]
    )));
    // From the report that has partition 1 caught up on, partition 0 is there, behind.
    let ok = tokio::task::block_in_place(|| {
        testkit::wait_until(Duration::from_secs(30), || {
            reader.poll_for(Duration::from_millis(200));
            latest(&reader, &s.topic)
                .get(&0)
                .is_some_and(|p| p.lag.is_some())
        })
    });
    let l = latest(&reader, &s.topic);
    assert!(ok, "partition 0 left out of the reports: {l:?}");
    assert_eq!(l[&0].next_offset, 0, "{l:?}");
    assert_eq!(l[&0].lag, Some(20), "{l:?}");
    assert_eq!(l[&0].record_time, None, "{l:?}");
    for m in reader.progress.iter().filter(|m| m.topic == s.topic) {
        let parts = m.as_progress().unwrap_or_default();
        let p1_caught_up = parts.iter().any(|p| p.partition == 1 && p.lag == Some(0));
        assert!(
            !p1_caught_up || parts.iter().any(|p| p.partition == 0),
            "a report with partition 1 caught up and without partition 0: {parts:?}"
        );
    }
    txn.abort_transaction(Duration::from_secs(30)).unwrap();
    svc.stop().await;
}

/// Lag 0 holds as of when librdkafka's statistics measured the high watermark, not
/// as of the report. The auditor's fetches are held back by the broker (fetch.min.bytes
/// never reached, fetch.wait.max.ms 3 s), so bursts appended after a fetch response
/// stay unread, and the statistics' high watermark stale, for up to 3 s, while reports
/// go out every 100 ms. No report may claim lag 0 dated at or after a burst was
/// acknowledged while the burst is unread (its `next_offset` short of the burst's end):
/// the engine would judge windows read past records not counted yet (a false final).
/// Before, reports were dated when made: lag 0 (position at the stale end) with
/// `emitted_at` after the burst, in reports of every burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lag_zero_is_dated_after_records_still_unread() {
    init_tracing();
    let mut s = Setup::new("lagdated", 1).await;
    s.cfg.audit.report_interval = Duration::from_millis(100);
    let consumer = &mut s.cfg.kafka.consumer;
    consumer.insert("fetch.min.bytes".into(), "50000000".into());
    consumer.insert("fetch.wait.max.ms".into(), "3000".into());
    let base = base_time();
    send_flushed(&s, 0, 0, base, 10);

    let svc = spawn_service(s.cfg.clone());
    let mut reader = AuditReader::new(&s.bootstrap, &s.audit_topic, 3);
    // Until a report claims lag 0 at `end` dated at or after `since`: the dating
    // moves on with the statistics (a claim read past the bursts is made).
    let read_to = |reader: &mut AuditReader, end: i64, since: i64| {
        testkit::wait_until(Duration::from_secs(90), || {
            reader.poll_for(Duration::from_millis(100));
            reader
                .progress
                .iter()
                .filter(|m| m.topic == s.topic && m.emitted_at >= since)
                .flat_map(|m| m.as_progress().unwrap_or_default())
                .any(|p| p.lag == Some(0) && p.next_offset == end)
        })
    };
    let ok = tokio::task::block_in_place(|| read_to(&mut reader, 10, 0));
    assert!(
        ok,
        "first records never read: {:?}",
        latest(&reader, &s.topic)
    );

    // Four bursts 700 ms apart: spread over the 3 s fetch cycle.
    let mut bursts = Vec::new();
    let mut end = 10;
    for _ in 0..4 {
        send_flushed(&s, 0, end as u64, base, 10);
        end += 10;
        bursts.push((common::now_ms(), end));
        tokio::task::block_in_place(|| reader.poll_for(Duration::from_millis(700)));
    }
    let last_acked = bursts[bursts.len() - 1].0;
    let ok = tokio::task::block_in_place(|| read_to(&mut reader, end, last_acked));
    assert!(ok, "bursts never read: {:?}", latest(&reader, &s.topic));
    svc.stop().await;

    let mut claims = 0;
    let mut false_claims = Vec::new();
    for m in reader.progress.iter().filter(|m| m.topic == s.topic) {
        for p in m.as_progress().unwrap_or_default() {
            if p.lag != Some(0) {
                continue;
            }
            claims += 1;
            for &(acked, burst_end) in &bursts {
                if m.emitted_at >= acked && p.next_offset < burst_end {
                    false_claims.push(format!(
                        "lag 0 at next_offset {} dated {} ms after the burst ending at {burst_end} \
                         was acknowledged",
                        p.next_offset,
                        m.emitted_at - acked
                    ));
                }
            }
        }
    }
    assert!(claims > 0);
    // reverted (dated when the report was made): dozens of false claims
    assert!(false_claims.is_empty(), "{}", false_claims.join("\n"));
}

/// Rule 4's evidence on a real broker: what the engine compares. Partition 0 gets records of
/// two windows with known CreateTimes, the last one 45 minutes ahead of the clock
/// (counted as "now": capped), partition 1 nothing. Progress: partition 0's latest
/// record time read is the cap, partition 1's is 0 (it holds nothing); the increments
/// carry each window's latest (capped) record time in partition 0. A topic whose
/// records carry LogAppendTime is flagged so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_latest_record_times_read_and_counted_are_reported() {
    init_tracing();
    let mut s = Setup::new("latest", 2).await;
    let appended = testkit::unique("latest-append-time");
    testkit::create_topic_with_config(
        &s.bootstrap,
        &appended,
        1,
        &[("message.timestamp.type", "LogAppendTime")],
    )
    .await;
    s.cfg.audit.topics.push(appended.clone());
    let base = base_time();
    let plain = producer(&s.bootstrap);
    // Window `base`: times base..base+99; window base + 10 s: the rest.
    for i in 0..200 {
        send(&plain, &s.topic, 0, i, base + i as i64 * 100);
    }
    let before = common::now_ms();
    send(&plain, &s.topic, 0, 200, before + 45 * 60_000);
    for i in 0..10 {
        send(&plain, &appended, 0, i, base);
    }
    plain.flush(Duration::from_secs(30)).unwrap();

    let svc = spawn_service(s.cfg.clone());
    let mut reader = AuditReader::new(&s.bootstrap, &s.audit_topic, 3);
    let ok = tokio::task::block_in_place(|| {
        testkit::wait_until(Duration::from_secs(90), || {
            reader.poll_for(Duration::from_millis(200));
            let (l, a) = (latest(&reader, &s.topic), latest(&reader, &appended));
            l.get(&0).is_some_and(|p| p.next_offset == 201)
                && l.get(&1).is_some_and(|p| p.lag == Some(0))
                && a.get(&0).is_some_and(|p| p.next_offset == 10)
        })
    });
    // Capped at the auditor's clock plus the slack of a clock read per batch.
    let after = common::now_ms() + audit_lib::RECORD_TIME_SLACK_MS;
    svc.stop().await;
    let (l, a) = (latest(&reader, &s.topic), latest(&reader, &appended));
    assert!(ok, "not read to the end: {l:?} {a:?}");
    let capped = l[&0].max_record_time.expect("a latest record time");
    assert!(
        (before..=after).contains(&capped),
        "the record 45 min ahead counts as when it was read: {capped} not in {before}..={after}"
    );
    assert!(!l[&0].log_append_time);
    assert_eq!(l[&1].max_record_time, Some(0), "an empty partition: {l:?}");
    assert!(a[&0].log_append_time, "LogAppendTime topic: {a:?}");
    let appended_at = a[&0].max_record_time.expect("a latest record time");
    assert!((before..=after).contains(&appended_at), "{appended_at}");
    // The increments: per window of partition 0, the latest record time counted.
    let times = |w: i64| reader.record_times.get(&(s.topic.clone(), w, 0)).copied();
    let w0 = base / WINDOW_MS * WINDOW_MS;
    let last_of = |w: i64| {
        (0..200)
            .map(|i| base + i * 100)
            .filter(|t| t / WINDOW_MS * WINDOW_MS == w)
            .max()
    };
    assert_eq!(times(w0), last_of(w0));
    assert_eq!(times(w0 + WINDOW_MS), last_of(w0 + WINDOW_MS));
    let now_window = reader
        .record_times
        .iter()
        .find(|((t, w, _), _)| *t == s.topic && *w > w0 + WINDOW_MS)
        .map(|(_, &rt)| rt);
    assert!(
        now_window.is_some_and(|rt| (before..=after).contains(&rt)),
        "the far-future record, windowed by its (45 min ahead) event time, counted at its cap: {now_window:?}"
    );
}
