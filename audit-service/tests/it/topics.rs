//! Topic selection: regular expressions with exclusions, and topics created after
//! start are picked up by the periodic refresh.

use crate::support;

use std::time::Duration;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regex_topics_are_audited_new_ones_picked_up_and_exclusions_skipped() {
    init_tracing();
    let bootstrap = testkit::kafka_a();
    let prefix = testkit::unique("sel");
    let first = format!("{prefix}.one");
    let excluded = format!("{prefix}.tmp");
    let later = format!("{prefix}.two");
    testkit::create_topic(&bootstrap, &first, 2).await;
    testkit::create_topic(&bootstrap, &excluded, 2).await;
    let audit_topic = testkit::create_unique_topic(&bootstrap, "sel-audit", 3).await;
    let wal = tempfile::tempdir().unwrap();
    let mut cfg = audit_config(
        &bootstrap,
        &[],
        &audit_topic,
        &testkit::unique("sel-group"),
        &testkit::unique("s"),
        wal.path(),
    );
    cfg.audit.topic_regex = vec![format!("^{}\\.", regex_escape(&prefix))];
    cfg.audit.exclude_regex = vec!["\\.tmp$".into()];
    cfg.audit.topic_refresh = Duration::from_secs(1);
    let base = base_time();
    let p = producer(&bootstrap);
    let mut truth = Totals::new();
    let mut ignored = Totals::new();
    produce_known(&p, &first, 2, 500, 0, base, 2, &mut truth);
    produce_known(&p, &excluded, 2, 500, 0, base, 2, &mut ignored);

    let svc = spawn_service(cfg);
    let mut reader = AuditReader::new(&bootstrap, &audit_topic, 3);
    assert!(tokio::task::block_in_place(|| reader.wait_for_count(
        &first,
        500,
        Duration::from_secs(60)
    )));
    // A topic created while the service runs.
    testkit::create_topic(&bootstrap, &later, 2).await;
    produce_known(&p, &later, 2, 300, 0, base, 2, &mut truth);
    assert!(
        tokio::task::block_in_place(|| reader.wait_for_count(&later, 300, Duration::from_secs(60))),
        "new topic not picked up: {} counted",
        reader.total_count(&later)
    );
    svc.stop().await;
    tokio::task::block_in_place(|| reader.poll_for(Duration::from_secs(1)));
    let mut seen = reader.topic_totals(&first);
    seen.extend(reader.topic_totals(&later));
    let d = diff(&truth, &seen);
    assert!(d.is_empty(), "per-window differences:\n{}", d.join("\n"));
    assert_eq!(reader.total_count(&excluded), 0, "excluded topic audited");
    assert!(reader.progress.iter().all(|m| m.topic != excluded));
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}

/// A topic deleted while its counts wait for publication: the entry carrying them also
/// carries offsets of partitions that no longer exist, which `send_offsets_to_transaction`
/// retries until the publish timeout (30 s) while every other topic of the auditor waits.
/// The kept topic's counts must keep arriving well within that, and the deleted topic's
/// counts must still be published (only the offsets of its gone partitions are dropped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_topic_with_pending_counts_neither_stalls_the_others_nor_loses_its_counts() {
    init_tracing();
    let bootstrap = testkit::kafka_a();
    let kept = testkit::create_unique_topic(&bootstrap, "delpub-kept", 2).await;
    let gone = testkit::create_unique_topic(&bootstrap, "delpub-gone", 2).await;
    let audit_topic = testkit::create_unique_topic(&bootstrap, "delpub-audit", 3).await;
    let wal = tempfile::tempdir().unwrap();
    let mut cfg = audit_config(
        &bootstrap,
        &[kept.clone(), gone.clone()],
        &audit_topic,
        &testkit::unique("delpub-group"),
        &testkit::unique("d"),
        wal.path(),
    );
    // Long enough that the deletion lands between counting and publishing.
    cfg.audit.report_interval = Duration::from_secs(3);
    enable_ops(&mut cfg);
    let base = base_time();
    let p = producer(&bootstrap);
    let mut truth = Totals::new();
    produce_known(&p, &kept, 2, 200, 0, base, 2, &mut truth);
    produce_known(&p, &gone, 2, 200, 0, base, 2, &mut truth);
    let svc = start_service(cfg).await;
    let port = svc.ops_port();
    let mut reader = AuditReader::new(&bootstrap, &audit_topic, 3);
    tokio::task::block_in_place(|| {
        assert!(reader.wait_for_count(&kept, 200, Duration::from_secs(60)));
        assert!(reader.wait_for_count(&gone, 200, Duration::from_secs(60)));
    });
    // More for the doomed topic; delete it as soon as the auditor has consumed them,
    // before the next report publishes them.
    let consumed = tokio::task::block_in_place(|| metric(port, "kafka_audit_consumed_messages"));
    produce_known(&p, &gone, 2, 100, 200, base, 2, &mut truth);
    let read = tokio::task::block_in_place(|| {
        testkit::wait_until(Duration::from_secs(30), || {
            metric(port, "kafka_audit_consumed_messages") >= consumed + 100.0
        })
    });
    assert!(
        read,
        "the auditor did not consume the last messages of {gone}"
    );
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        testkit::client_config(&bootstrap).create().unwrap();
    admin
        .delete_topics(&[&gone], &rdkafka::admin::AdminOptions::new())
        .await
        .expect("delete topic");
    // The kept topic keeps being counted and published: each batch within 12 s (the
    // publish timeout is 30 s; the report interval 3 s).
    let mut seq = 200;
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(35) {
        produce_known(&p, &kept, 2, 50, seq, base, 2, &mut truth);
        seq += 50;
        let t = std::time::Instant::now();
        let ok = tokio::task::block_in_place(|| {
            reader.wait_for_count(&kept, seq, Duration::from_secs(12))
        });
        assert!(
            ok,
            "{kept} not published for {:?} after {gone} was deleted ({} of {seq} counted)",
            t.elapsed(),
            reader.total_count(&kept)
        );
    }
    tokio::task::block_in_place(|| {
        assert!(
            reader.wait_for_count(&gone, 300, Duration::from_secs(30)),
            "the counts of the deleted topic were lost: {} of 300",
            reader.total_count(&gone)
        )
    });
    svc.stop().await;
    tokio::task::block_in_place(|| reader.poll_for(Duration::from_secs(1)));
    let mut seen = reader.topic_totals(&kept);
    seen.extend(reader.topic_totals(&gone));
    let d = diff(&truth, &seen);
    assert!(d.is_empty(), "per-window differences:\n{}", d.join("\n"));
}

/// Partitions the auditor's consumer did not know when it joined: added to a topic
/// while it runs, or not yet propagated to the broker that answered its metadata
/// request (seen on cluster R in a fresh-clone CI run: a topic created a second
/// before, the auditor's first assignment had 0 partitions, and nothing was counted
/// for the 240 s the test waited). librdkafka reads the metadata of a subscription
/// again only every `topic.metadata.refresh.interval.ms`, 5 minutes by default; the
/// auditor sets it to its `topic_refresh`, so such partitions are counted within that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_added_while_auditing_are_counted_within_the_topic_refresh() {
    init_tracing();
    let bootstrap = testkit::kafka_a();
    let topic = testkit::create_unique_topic(&bootstrap, "grown", 1).await;
    let audit_topic = testkit::create_unique_topic(&bootstrap, "grown-audit", 1).await;
    let wal = tempfile::tempdir().unwrap();
    let mut cfg = audit_config(
        &bootstrap,
        std::slice::from_ref(&topic),
        &audit_topic,
        &testkit::unique("grown-group"),
        &testkit::unique("g"),
        wal.path(),
    );
    cfg.audit.topic_refresh = Duration::from_secs(5);
    let base = base_time();
    let p = producer(&bootstrap);
    let mut truth = Totals::new();
    produce_known(&p, &topic, 1, 100, 0, base, 2, &mut truth);
    let svc = spawn_service(cfg);
    let mut reader = AuditReader::new(&bootstrap, &audit_topic, 1);
    assert!(tokio::task::block_in_place(|| reader.wait_for_count(
        &topic,
        100,
        Duration::from_secs(60)
    )));
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        testkit::client_config(&bootstrap).create().unwrap();
    for r in admin
        .create_partitions(
            &[rdkafka::admin::NewPartitions::new(&topic, 2)],
            &rdkafka::admin::AdminOptions::new(),
        )
        .await
        .expect("create partitions")
    {
        r.expect("partition added");
    }
    // Spread over both partitions, half on the new one (a producer that knows it).
    produce_known(
        &producer(&bootstrap),
        &topic,
        2,
        200,
        100,
        base,
        2,
        &mut truth,
    );
    // Several refresh intervals and reports; librdkafka's own default took up to 300 s.
    let counted =
        tokio::task::block_in_place(|| reader.wait_for_count(&topic, 300, Duration::from_secs(40)));
    svc.stop().await;
    assert!(
        counted,
        "the added partition not counted within 40 s: {} of 300",
        reader.total_count(&topic)
    );
    let d = diff(&truth, &reader.topic_totals(&topic));
    assert!(d.is_empty(), "per-window differences:\n{}", d.join("\n"));
}
