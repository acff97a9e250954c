//! What the auditor counts: only committed data (read_committed), and bad input in its
//! own columns without stopping.

use crate::support;

use std::time::Duration;

use audit_lib::message_hash;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use support::*;

const PARTITIONS: i32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_aborted_transactions_are_not_counted() {
    init_tracing();
    let Setup {
        bootstrap,
        topic,
        audit_topic,
        group,
        // Kept alive: dropping it deletes the WAL directory.
        wal: _wal,
        cfg,
    } = Setup::new("rc", PARTITIONS).await;
    let base = base_time();
    let txp: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("transactional.id", testkit::unique("rc-txn"))
        .create()
        .unwrap();
    let t = Duration::from_secs(30);
    tokio::task::block_in_place(|| txp.init_transactions(t)).unwrap();
    let mut truth = Totals::new();
    let mut aborted = Totals::new();
    // committed, aborted, committed, aborted, committed: each 600 messages
    for (round, commit) in [true, false, true, false, true].into_iter().enumerate() {
        let seq0 = round as u64 * 600;
        txp.begin_transaction().unwrap();
        let target = if commit { &mut truth } else { &mut aborted };
        tokio::task::block_in_place(|| {
            for i in seq0..seq0 + 600 {
                let (key, value, window_start) = known_message(i, base, 4);
                let w = target.entry((topic.clone(), window_start)).or_default();
                w.count += 1;
                w.bytes += (key.len() + value.len()) as u64;
                w.checksum = w
                    .checksum
                    .wrapping_add(message_hash(Some(key.as_bytes()), value.as_bytes()));
                txp.send(
                    BaseRecord::to(&topic)
                        .key(&key)
                        .payload(&value)
                        .partition((i % PARTITIONS as u64) as i32),
                )
                .map_err(|(e, _)| e)
                .unwrap();
            }
            if commit {
                txp.commit_transaction(t).unwrap();
            } else {
                txp.flush(t).unwrap();
                txp.abort_transaction(t).unwrap();
            }
        });
    }
    let svc = spawn_service(cfg);
    let mut reader = AuditReader::new(&bootstrap, &audit_topic, 3);
    let ok = tokio::task::block_in_place(|| {
        reader.wait_for_count(&topic, 1_800, Duration::from_secs(90))
    });
    // Wait until the auditor has read to the end of the log (past every marker) so
    // that a count of aborted records would have shown.
    let hw_ok = tokio::task::block_in_place(|| {
        testkit::wait_until(Duration::from_secs(60), || {
            reader.poll_for(Duration::from_millis(100));
            let c = committed(&bootstrap, &group, &topic, PARTITIONS);
            // 3000 records + 5 markers per partition; the last marker is never
            // consumed, so the committed offset stops just before it.
            c.values().sum::<i64>() >= 3_000 + 4 * PARTITIONS as i64
        })
    });
    svc.stop().await;
    tokio::task::block_in_place(|| reader.poll_for(Duration::from_secs(2)));
    assert!(
        ok && hw_ok,
        "auditor did not catch up: {} counted",
        reader.total_count(&topic)
    );
    let d = diff(&truth, &reader.topic_totals(&topic));
    assert!(
        d.is_empty(),
        "aborted records counted or committed ones lost:\n{}",
        d.join("\n")
    );
    assert_eq!(reader.total_count(&topic), 1_800);
}

async fn create_big_topic(bootstrap: &str, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let nt =
        NewTopic::new(topic, 1, TopicReplication::Fixed(1)).set("max.message.bytes", "12582912");
    let res = admin
        .create_topics(
            [&nt],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .unwrap();
    for r in res {
        r.unwrap();
    }
    assert!(testkit::wait_until(Duration::from_secs(30), || {
        admin
            .inner()
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .is_ok_and(|m| {
                m.topics().first().is_some_and(|t| {
                    t.error().is_none()
                        && t.partitions().iter().all(|p| p.leader() >= 0)
                        && !t.partitions().is_empty()
                })
            })
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_counted_in_its_own_columns_and_the_service_keeps_running() {
    init_tracing();
    let bootstrap = testkit::kafka_a();
    let topic = testkit::unique("bad");
    create_big_topic(&bootstrap, &topic).await;
    let audit_topic = testkit::create_unique_topic(&bootstrap, "bad-audit", 3).await;
    let group = testkit::unique("bad-group");
    let wal = tempfile::tempdir().unwrap();
    let mut cfg = audit_config(
        &bootstrap,
        std::slice::from_ref(&topic),
        &audit_topic,
        &group,
        &testkit::unique("bad"),
        wal.path(),
    );
    // Messages without a usable payload time are windowed by the record timestamp
    // (CreateTime, the default), counted in `count` and in their reason's column.
    cfg.kafka
        .consumer
        .insert("fetch.max.bytes".into(), "20971520".into());
    cfg.kafka
        .consumer
        .insert("max.partition.fetch.bytes".into(), "20971520".into());
    cfg.kafka
        .consumer
        .insert("receive.message.max.bytes".into(), "25000000".into());

    let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("message.max.bytes", "12000000")
        .set("compression.type", "none")
        .create()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let good_ts = base_time();
    let mut big = format!("{{\"ts\":{good_ts},\"blob\":\"");
    big.push_str(&"x".repeat(10 * 1024 * 1024));
    big.push_str("\"}");
    let binary: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    // (payload, expected column)
    let inputs: Vec<(Vec<u8>, &str)> = vec![
        (b"{\"ts\": 12".to_vec(), "malformed"),
        (b"not json at all".to_vec(), "malformed"),
        (binary.clone(), "malformed"),
        (b"{\"ts\":\"yesterday-ish\"}".to_vec(), "malformed"),
        (
            format!("{{\"ts\":{}}}", now + 100 * 365 * 86_400_000).into_bytes(),
            "out_of_bounds",
        ),
        (b"{\"ts\":1}".to_vec(), "out_of_bounds"),
        (b"{\"other\":5}".to_vec(), "no_time"),
        (big.clone().into_bytes(), "event_time"),
        (format!("{{\"ts\":{good_ts}}}").into_bytes(), "event_time"),
    ];
    let mut expected = WindowTotals::default();
    for (i, (payload, col)) in inputs.iter().enumerate() {
        let key = format!("bad{i}");
        tokio::task::block_in_place(|| {
            p.send(BaseRecord::to(&topic).key(&key).payload(payload))
                .map_err(|(e, _)| e)
                .unwrap();
        });
        expected.count += 1;
        expected.bytes += (key.len() + payload.len()) as u64;
        expected.checksum = expected
            .checksum
            .wrapping_add(message_hash(Some(key.as_bytes()), payload));
        match *col {
            "malformed" => expected.malformed += 1,
            "out_of_bounds" => expected.out_of_bounds += 1,
            "no_time" => expected.no_time += 1,
            _ => {}
        }
    }
    tokio::task::block_in_place(|| p.flush(Duration::from_secs(60))).unwrap();

    let svc = spawn_service(cfg);
    let mut reader = AuditReader::new(&bootstrap, &audit_topic, 3);
    let ok = tokio::task::block_in_place(|| {
        reader.wait_for_count(&topic, inputs.len() as u64, Duration::from_secs(90))
    });
    assert!(
        ok,
        "only {} of {} counted",
        reader.total_count(&topic),
        inputs.len()
    );
    // Still running: later good messages are counted too.
    let (key, value, _) = known_message(1, base_time(), 1);
    tokio::task::block_in_place(|| {
        p.send(BaseRecord::to(&topic).key(&key).payload(&value))
            .map_err(|(e, _)| e)
            .unwrap();
        p.flush(Duration::from_secs(30)).unwrap();
    });
    expected.count += 1;
    expected.bytes += (key.len() + value.len()) as u64;
    expected.checksum = expected
        .checksum
        .wrapping_add(message_hash(Some(key.as_bytes()), value.as_bytes()));
    let ok = tokio::task::block_in_place(|| {
        reader.wait_for_count(&topic, inputs.len() as u64 + 1, Duration::from_secs(60))
    });
    assert!(ok, "service stopped counting after bad input");
    assert!(!svc.is_finished(), "service exited on bad input");
    svc.stop().await;
    tokio::task::block_in_place(|| reader.poll_for(Duration::from_secs(1)));

    assert_eq!(reader.topic_sum(&topic), expected);
    // The 10 MB message and the good one are in their event-time window.
    let w = reader
        .topic_totals(&topic)
        .get(&(topic.clone(), good_ts))
        .cloned()
        .unwrap_or_default();
    assert!(w.count >= 2 && w.bytes > 10 * 1024 * 1024, "{w:?}");
}

/// `headers` plus one header whose *name* is the bytes `[0xff, 0xfe]` (not UTF-8).
/// rdkafka's safe API only takes `&str` names, but any producer can write raw bytes
/// (`rd_kafka_header_add` takes a length), so the test does what such a producer does.
#[allow(unsafe_code)]
fn with_non_utf8_header_name(
    headers: rdkafka::message::OwnedHeaders,
) -> rdkafka::message::OwnedHeaders {
    use rdkafka::bindings::{rd_kafka_header_add, rd_kafka_headers_t};
    let name = [0xffu8, 0xfe];
    let value = b"x";
    // `as_borrowed` is rdkafka's own cast of the native `rd_kafka_headers_t` pointer to
    // a `&BorrowedHeaders` (a zero-sized type), so its address is that pointer.
    let native = headers.as_borrowed() as *const rdkafka::message::BorrowedHeaders
        as *mut rd_kafka_headers_t;
    // SAFETY: `native` is the live, writable header list owned by `headers` (an
    // `OwnedHeaders` always is, see `OwnedHeaders::insert`); librdkafka copies `name`
    // and `value` (explicit lengths, no NUL needed) before returning, and nothing reads
    // `headers` concurrently.
    let err = unsafe {
        rd_kafka_header_add(
            native,
            name.as_ptr().cast(),
            name.len() as isize,
            value.as_ptr() as *const std::ffi::c_void,
            value.len() as isize,
        )
    };
    assert_eq!(
        err,
        rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
    );
    headers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_name_that_is_not_utf8_is_ignored_and_its_record_counted_once() {
    use rdkafka::message::{Header, OwnedHeaders};
    init_tracing();
    let Setup {
        bootstrap,
        topic,
        audit_topic,
        wal: _wal,
        mut cfg,
        ..
    } = Setup::new("hdr", 1).await;
    // The event time is read from the payload's `ts`, else from the `et` header;
    // never from the broker, so a record without either has no tier-invariant time:
    // it is counted apart (`observation_time_count`), outside `count` and the checksum.
    cfg.audit.event_time.default.header = Some("et".into());
    cfg.audit.event_time.default.record_timestamp = false;
    enable_ops(&mut cfg);
    let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .unwrap();
    let good_ts = base_time();
    let with_time = format!("{{\"ts\":{good_ts}}}");
    let et = good_ts.to_string();
    // (payload, headers, expected observed only)
    let inputs: Vec<(&str, OwnedHeaders, bool)> = vec![
        // Plain record, no headers.
        (&with_time, OwnedHeaders::new(), false),
        // Time in the payload; the bad header is irrelevant.
        (
            &with_time,
            with_non_utf8_header_name(OwnedHeaders::new()),
            false,
        ),
        // Time in the good header beside the bad one.
        (
            "{}",
            with_non_utf8_header_name(OwnedHeaders::new().insert(Header {
                key: "et",
                value: Some(&et),
            })),
            false,
        ),
        // Only the bad header: like a missing header, no time.
        ("{}", with_non_utf8_header_name(OwnedHeaders::new()), true),
        // Plain record after the bad ones.
        (&with_time, OwnedHeaders::new(), false),
    ];
    let mut expected = WindowTotals::default();
    for (i, (payload, headers, observed)) in inputs.iter().enumerate() {
        let key = format!("h{i}");
        tokio::task::block_in_place(|| {
            p.send(
                BaseRecord::to(&topic)
                    .key(&key)
                    .payload(*payload)
                    .headers(headers.clone()),
            )
            .map_err(|(e, _)| e)
            .unwrap();
        });
        if *observed {
            expected.observed += 1;
            continue;
        }
        expected.count += 1;
        expected.bytes += (key.len() + payload.len()) as u64;
        expected.checksum = expected
            .checksum
            .wrapping_add(message_hash(Some(key.as_bytes()), payload.as_bytes()));
    }
    tokio::task::block_in_place(|| p.flush(Duration::from_secs(60))).unwrap();

    let svc = start_service(cfg).await;
    let ops_port = svc.ops_port();
    let mut reader = AuditReader::new(&bootstrap, &audit_topic, 3);
    let ok = tokio::task::block_in_place(|| {
        reader.wait_for_count(&topic, expected.count, Duration::from_secs(90))
    });
    assert!(
        ok,
        "only {} of {} counted",
        reader.total_count(&topic),
        expected.count
    );
    assert!(!svc.is_finished(), "service exited on a bad header name");
    let ignored = tokio::task::block_in_place(|| metric(ops_port, "unreadable_headers"));
    svc.stop().await;
    // Exactly once: nothing more arrives.
    tokio::task::block_in_place(|| reader.poll_for(Duration::from_secs(2)));
    assert_eq!(reader.topic_sum(&topic), expected);
    // The four records with a time are in its window (none fell back to no time
    // because of the bad header beside the good one).
    let w = reader
        .topic_totals(&topic)
        .get(&(topic.clone(), good_ts))
        .cloned()
        .unwrap_or_default();
    assert_eq!((w.count, w.no_time), (4, 0), "{w:?}");
    assert_eq!(
        ignored, 3.0,
        "headers with a non-UTF-8 name, counted by reason"
    );
}
