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
