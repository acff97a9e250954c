//! The plugin's life in a process: several clients, the plugin loaded from two files,
//! a forked child, no thread left behind, configuration errors that fail the client's
//! creation, and a consumer tier that counts what its group committed, once, across a
//! restart. Reports are read back from the audit topic (audit-service's AuditReader).

use std::time::Duration;

use rdkafka::producer::{BaseRecord, Producer};

use crate::clients::{self, Kind, PluginConfig};
use crate::support::{producer, send_queued, AuditReader, WindowTotals};

const PARTITIONS: i32 = 3;
const LIMIT: Duration = Duration::from_secs(120);

/// A topic and its audit topic on cluster A.
async fn topics(name: &str) -> (String, String, String) {
    let a = testkit::kafka_a();
    let topic = testkit::create_unique_topic(&a, name, PARTITIONS).await;
    let audit = testkit::create_unique_topic(&a, &format!("{name}-audit"), 1).await;
    (a, topic, audit)
}

/// Count and checksum of messages `ids` of a run of `count` messages.
pub(crate) fn truth(
    ids: impl Iterator<Item = i64>,
    count: i64,
    base: i64,
    span: i64,
) -> (u64, u64) {
    ids.fold((0, 0), |(n, sum), i| {
        let (k, v, _) = clients::message(i, count, base, span);
        (
            n + 1,
            sum.wrapping_add(audit_lib::message_hash(Some(k.as_bytes()), v.as_bytes())),
        )
    })
}

/// Reads the audit topic until `topic`'s reported count reaches `n`, then a little
/// longer (a report that should not be there has its chance to arrive).
pub(crate) fn reported(a: &str, audit: &str, topic: &str, n: u64) -> (WindowTotals, u64) {
    let mut reader = AuditReader::new(a, audit, 1);
    reader.wait_for_count(topic, n, Duration::from_secs(60));
    reader.poll_for(Duration::from_secs(2));
    (reader.topic_sum(topic), reader.duplicates)
}

fn settings(audit: &str) -> Vec<(&str, &str)> {
    vec![
        ("datacenter", "dc1"),
        ("audit_topic", audit),
        ("report.interval.ms", "500"),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn several_clients_in_one_process_report_each_message_once_and_leave_no_thread() {
    let (a, topic, audit) = topics("kai-several").await;
    let (n, base) = (400, common::now_ms());
    let mut args = clients::produce_args(&a, &topic, n, base, 10_000, PARTITIONS);
    args.push("kai.clients=4".into());
    let out = clients::run(
        Kind::C,
        &args,
        &PluginConfig::new(Kind::C, &settings(&audit)),
        LIMIT,
    );
    assert!(out.ok, "{} {}", out.json, out.stderr);
    assert_eq!(out.json["delivered"], n);
    // Every client's report thread was joined when it was destroyed (librdkafka never
    // unloads a plugin, so the library itself stays mapped).
    assert_eq!(out.json["threads_after"], 1, "threads left: {}", out.json);
    let (seen, resent) = reported(&a, &audit, &topic, n as u64);
    assert_eq!(
        (seen.count, seen.checksum),
        truth(0..n, n, base, 10_000),
        "resent {resent}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_plugin_loaded_from_two_files_counts_each_message_once() {
    let (a, topic, audit) = topics("kai-twice").await;
    // A second copy of the library: the loader maps it as another object, with its own
    // state, as when two applications' plugin directories meet in one process.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("libkafka_audit_interceptor-copy.so");
    std::fs::copy(clients::plugin(), &copy).unwrap();
    let (n, base) = (300, common::now_ms());

    // Two clients, one per copy.
    let mut args = clients::produce_args(&a, &topic, n, base, 10_000, PARTITIONS);
    args.extend([
        "kai.clients=2".to_string(),
        format!("kai.alt_plugin={}", copy.display()),
    ]);
    let out = clients::run(
        Kind::C,
        &args,
        &PluginConfig::new(Kind::C, &settings(&audit)),
        LIMIT,
    );
    assert!(out.ok, "{} {}", out.json, out.stderr);
    // One client listing both copies: the second registers nothing (same interceptor
    // name on one configuration), so its messages are counted once too.
    let both = format!("{};{}", clients::plugin().display(), copy.display());
    let cfg = PluginConfig::with_library(Kind::C, std::path::Path::new(&both), &settings(&audit));
    let base2 = base + 1;
    let out = clients::run(
        Kind::C,
        &clients::produce_args(&a, &topic, n, base2, 10_000, PARTITIONS),
        &cfg,
        LIMIT,
    );
    assert!(out.ok, "{} {}", out.json, out.stderr);
    let (seen, _) = reported(&a, &audit, &topic, 2 * n as u64);
    let (c1, s1) = truth(0..n, n, base, 10_000);
    let (c2, s2) = truth(0..n, n, base2, 10_000);
    assert_eq!((seen.count, seen.checksum), (c1 + c2, s1.wrapping_add(s2)));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forked_child_reports_its_own_messages_and_never_its_parents() {
    let (a, topic, audit) = topics("kai-fork").await;
    let (n, more, base) = (200, 50, common::now_ms());
    let mut args = clients::produce_args(&a, &topic, n, base, 10_000, PARTITIONS);
    // The child destroys the producer it inherited (the plugin's close runs there, with
    // the parent's unreported counts in memory), then produces with a client of its own.
    args.push(format!("kai.fork={more}"));
    // A long interval: the parent's counts are still unreported at the fork.
    let mut s = settings(&audit);
    s.retain(|(k, _)| *k != "report.interval.ms");
    s.push(("report.interval.ms", "60000"));
    let out = clients::run(Kind::C, &args, &PluginConfig::new(Kind::C, &s), LIMIT);
    assert!(out.ok, "{} {}", out.json, out.stderr);
    let (seen, _) = reported(&a, &audit, &topic, (n + more) as u64);
    // The parent's messages 0..n once (by the parent, at its destroy), the child's
    // n..n+more once; a child reporting the parent's counts would add n more.
    let (c1, s1) = truth(0..n, n, base, 10_000);
    let (c2, s2) = truth(n..n + more, n + more, base, 10_000);
    assert_eq!((seen.count, seen.checksum), (c1 + c2, s1.wrapping_add(s2)));
}

#[tokio::test(flavor = "multi_thread")]
async fn configuration_errors_fail_the_clients_creation_with_their_reason() {
    let (a, topic, audit) = topics("kai-config").await;
    let args = clients::produce_args(&a, &topic, 1, common::now_ms(), 1, PARTITIONS);
    for (kind, bad, says) in [
        (
            Kind::C,
            ("report.interval.ms", "soon"),
            "kafka_audit.report.interval.ms",
        ),
        (
            Kind::C,
            ("event_time.config", "/nonexistent/event-time.toml"),
            "/nonexistent/event-time.toml",
        ),
        (Kind::C, ("tier", "producer tier"), "kafka_audit.tier"),
        (
            Kind::C,
            ("no.such.property", "1"),
            "kafka_audit.no.such.property",
        ),
        (
            Kind::Python,
            ("report.interval.ms", "soon"),
            "kafka_audit.report.interval.ms",
        ),
        (
            Kind::Rust,
            ("audit_topic", "a/b"),
            "kafka_audit.audit_topic",
        ),
    ] {
        let mut s = settings(&audit);
        s.push(bad);
        let out = clients::run(kind, &args, &PluginConfig::new(kind, &s), LIMIT);
        assert!(
            !out.ok,
            "{kind:?} {bad:?}: the client was created: {}",
            out.json
        );
        let error = out.json["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(says),
            "{kind:?} {bad:?}: {error} (stderr {})",
            out.stderr
        );
    }
    // Without a datacenter librdkafka creates the client anyway (it only logs an
    // on_new error): the client works, unaudited, and says why.
    let s = vec![("audit_topic", audit.as_str())];
    let out = clients::run(Kind::C, &args, &PluginConfig::new(Kind::C, &s), LIMIT);
    assert!(out.ok, "{} {}", out.json, out.stderr);
    assert!(
        out.stderr.contains("kafka_audit.datacenter is required"),
        "stderr: {}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_tier_counts_what_its_group_committed_once_across_a_restart() {
    let (a, topic, audit) = topics("kai-restart").await;
    let (n, base) = (300i64, common::now_ms());
    let plain = producer(&a);
    for i in 0..n {
        let (k, v, _) = clients::message(i, n, base, 10_000);
        let p = (i % PARTITIONS as i64) as i32;
        send_queued(
            &plain,
            BaseRecord::to(&topic).key(&k).payload(&v).partition(p),
        );
    }
    plain.flush(Duration::from_secs(30)).unwrap();
    let group = testkit::unique("kai-restart-group");
    let s = settings(&audit);
    // The first consumer reads everything but commits only after its first 100
    // messages; the second, in the same group, reads the rest again from there.
    let mut first = clients::consume_args(&a, &topic, &group, n as u64, 60);
    first.push("kai.commit_after=100".into());
    let out = clients::run(
        Kind::Python,
        &first,
        &PluginConfig::new(Kind::Python, &s),
        LIMIT,
    );
    assert!(out.ok, "{} {}", out.json, out.stderr);
    assert_eq!(out.json["consumed"], n);
    let second = clients::consume_args(&a, &topic, &group, (n - 100) as u64, 60);
    let out = clients::run(
        Kind::Python,
        &second,
        &PluginConfig::new(Kind::Python, &s),
        LIMIT,
    );
    assert!(out.ok, "{} {}", out.json, out.stderr);
    assert_eq!(out.json["consumed"], n - 100);
    let (seen, _) = reported(&a, &audit, &topic, n as u64);
    assert_eq!(
        (seen.count, seen.checksum),
        truth(0..n, n, base, 10_000),
        "every message once: the first consumer's 200 uncommitted ones only by the second"
    );
}

#[test]
#[allow(unsafe_code)]
fn the_plugin_brings_no_librdkafka_of_its_own() {
    // What the PyPI wheel needs: nothing of librdkafka defined in the plugin (it would
    // be a second copy) and nothing left for the loader to find (there is none global).
    let path = std::ffi::CString::new(clients::plugin().display().to_string()).unwrap();
    // SAFETY: loading the plugin runs no code of it (it has no initialisers that act).
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(
            !h.is_null(),
            "the plugin loads without any librdkafka in the process"
        );
        for sym in [c"rd_kafka_new", c"rd_kafka_conf_interceptor_add_on_new"] {
            assert!(
                libc::dlsym(h, sym.as_ptr()).is_null(),
                "{sym:?} defined by the plugin"
            );
        }
        assert!(!libc::dlsym(h, c"conf_init".as_ptr()).is_null());
        libc::dlclose(h);
    }
}
