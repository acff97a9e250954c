//! First, do no harm (docs/plugin.md, Counters, threads, and the host's faults): the
//! fault matrix of the plugin's host, each case as an application meets it (`harm` in
//! client.c and client.py): the application gets what librdkafka gives it without the
//! plugin, the process lives on, and the plugin's counts say what happened.

use std::time::Duration;

use crate::clients::{self, Kind, PluginConfig};

const LIMIT: Duration = Duration::from_secs(120);

fn harm_args(case: &str, bootstrap: &str) -> Vec<String> {
    vec!["harm".into(), bootstrap.into(), case.into()]
}

/// librdkafka's `rd_kafka_produce_batch` hands `on_acknowledgement` the application's
/// own array element when its partitioner refuses a message (here: the topic does not
/// exist), whose `rkt` it never set: before, the plugin read the topic through it and
/// the host died of SIGSEGV. Now the batch's messages get their errors, and the plugin
/// counts them apart (`refused_unattributed`); the first message, refused after it was
/// queued, is librdkafka's own and counted as a delivery failure of its window.
#[tokio::test(flavor = "multi_thread")]
async fn a_produce_batch_refused_before_queueing_gets_its_errors_and_the_host_lives_on() {
    let a = testkit::kafka_a();
    let audit = testkit::create_unique_topic(&a, "kai-harm-audit", 1).await;
    for kind in [Kind::C, Kind::Python] {
        let settings = [
            ("datacenter", "dc1"),
            ("bootstrap.servers", a.as_str()),
            ("audit_topic", audit.as_str()),
        ];
        // librdkafka's mock cluster, which never creates a topic it is asked about.
        let cfg = PluginConfig::new(kind, &settings).with(&[
            "test.mock.num.brokers=1",
            "allow.auto.create.topics=false",
            // the topic is known missing at once, not after 30 s of retries
            "topic.metadata.propagation.max.ms=10",
            "kai.topic=kai-no-such-topic",
        ]);
        let out = clients::run(kind, &harm_args("produce-batch", ""), &cfg, LIMIT);
        assert!(out.ok, "{kind:?}: {} {}", out.json, out.stderr);
        assert_ne!(out.json["first_err"], 0, "{kind:?}: {}", out.json);
        assert_eq!(
            out.json["batches"],
            serde_json::json!([[0, 1000], [0, 1000]]),
            "{kind:?}: every message of both batches refused with its error"
        );
        let plugin = &out.json["plugin"];
        assert_eq!(plugin["refused_unattributed"], 2000, "{kind:?}: {plugin}");
        assert_eq!(plugin["delivery_failed"], 1, "{kind:?}: {plugin}");
        assert_eq!(plugin["clients_active"], 0, "{kind:?}: {plugin}");
    }
}

/// A client whose creation fails after `on_new` (a CA file that does not exist) leaves
/// nothing behind: the emitter starts with the first count, so no thread was started
/// — also where the application keeps the configuration of the failed client
/// (rust-rdkafka), so that the plugin's instance on it is never closed (before, its
/// emitter thread ran for the life of the process) — and the configuration's destroy
/// (Python, on the wheel's librdkafka 2.16) ends the plugin's client.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_client_creation_leaves_no_thread_and_no_client_behind() {
    let settings = [("datacenter", "dc1")];
    for kind in [Kind::Python, Kind::Rust] {
        let cfg = PluginConfig::new(kind, &settings).with(&[
            "security.protocol=ssl",
            "ssl.ca.location=/nonexistent/ca.pem",
        ]);
        let out = clients::run(kind, &harm_args("failed-new", "127.0.0.1:1"), &cfg, LIMIT);
        assert!(out.ok, "{kind:?}: {} {}", out.json, out.stderr);
        assert_eq!(out.json["created"], false, "{kind:?}: {}", out.json);
        assert_eq!(
            out.json["threads_after"], out.json["threads_before"],
            "{kind:?}: no thread left: {}",
            out.json
        );
        if kind == Kind::Python {
            assert_eq!(out.json["plugin"]["clients_active"], 0, "{}", out.json);
        }
    }
}

/// librdkafka before 2.13.0 (rdkafka-sys's 2.12.1 here) double-frees a configuration
/// whose `rd_kafka_new` failed once any interceptor is on it (#4142): the plugin
/// refuses such a librdkafka at `plugin.library.paths`, a configuration error the
/// application sees at once, unless the operator accepts it for an application that
/// never destroys a configuration after a failed `rd_kafka_new`. The C client does, so
/// with the refusal overridden it dies: the reason for the refusal.
#[tokio::test(flavor = "multi_thread")]
async fn a_librdkafka_with_the_double_free_is_refused_with_the_reason() {
    let settings = [("datacenter", "dc1")];
    let failing = [
        "security.protocol=ssl",
        "ssl.ca.location=/nonexistent/ca.pem",
    ];
    let args = harm_args("failed-new", "127.0.0.1:1");
    let refused = PluginConfig::new(Kind::C, &settings)
        .without_accepting_4142()
        .with(&failing);
    let out = clients::run(Kind::C, &args, &refused, LIMIT);
    assert!(!out.ok, "created: {}", out.json);
    let error = out.json["error"].as_str().unwrap_or_default();
    for says in ["librdkafka 2.12.1", "2.13.0", "#4142", clients::ACCEPT_4142] {
        assert!(error.contains(says), "{says:?} not in {error}");
    }
    let accepted = PluginConfig::new(Kind::C, &settings).with(&failing);
    let out = clients::run(Kind::C, &args, &accepted, LIMIT);
    assert!(
        !out.ok && out.json.is_null(),
        "librdkafka 2.12.1 survived #4142 (fixed? then the refusal can go): {} {}",
        out.json,
        out.stderr
    );
}

/// A process that creates and destroys producers one after another (a client per job)
/// with a spool: each client's spool slot and its lock's descriptor are released when
/// it is destroyed, so the next takes the same slot again; no descriptor, slot or
/// thread accumulates. Before, each client kept its lock open for the life of the
/// process: 50 descriptors and 50 slots.
#[tokio::test(flavor = "multi_thread")]
async fn short_lived_clients_leave_no_descriptor_slot_or_thread_behind() {
    let a = testkit::kafka_a();
    let topic = testkit::create_unique_topic(&a, "kai-churn", 1).await;
    let audit = testkit::create_unique_topic(&a, "kai-churn-audit", 1).await;
    let spool = tempfile::tempdir().unwrap();
    let spool_dir = spool.path().display().to_string();
    let settings = [
        ("datacenter", "dc1"),
        ("audit_topic", audit.as_str()),
        ("spool.dir", spool_dir.as_str()),
    ];
    let topic_prop = format!("kai.topic={topic}");
    let cfg = PluginConfig::new(Kind::C, &settings).with(&["kai.clients=50", &topic_prop]);
    let out = clients::run(Kind::C, &harm_args("churn", &a), &cfg, LIMIT);
    assert!(out.ok, "{} {}", out.json, out.stderr);
    assert_eq!(out.json["delivered"], 50, "{}", out.json);
    assert_eq!(
        out.json["fds_after"], out.json["fds_before"],
        "descriptors: {}",
        out.json
    );
    assert_eq!(
        out.json["threads_after"], out.json["threads_before"],
        "threads: {}",
        out.json
    );
    let slots: Vec<_> = std::fs::read_dir(spool.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(slots, vec!["producer-0".to_string()], "spool slots");
    // The plugin stays loaded after its last client (no unload, no leak of its statics).
    assert_eq!(out.json["plugin"]["clients_active"], 0, "{}", out.json);
    assert_eq!(out.json["plugin"]["acknowledged"], 50, "{}", out.json);
}

/// The C client's cases under valgrind (the fault matrix's memory check):
/// no invalid read or write, no use of uninitialised memory, nothing definitely lost —
/// produce_batch refused before queueing, clients made and destroyed in turn with a
/// spool, purge / timed-out flush / destroy in flight, an unreachable audit cluster, and
/// a forked child producing after destroying what it inherited.
/// Before, the produce-batch case read the application's element through its unset
/// topic handle and past the array's end (and died of it). valgrind is installed by
/// test.sh (Debian's package).
#[tokio::test(flavor = "multi_thread")]
async fn the_c_hosts_cases_are_clean_under_valgrind() {
    let a = testkit::kafka_a();
    let topic = testkit::create_unique_topic(&a, "kai-vg", 1).await;
    let audit = testkit::create_unique_topic(&a, "kai-vg-audit", 1).await;
    let valgrind = [
        "valgrind",
        "--error-exitcode=99",
        "--leak-check=full",
        "--errors-for-leak-kinds=definite",
        "--show-leak-kinds=definite",
        "--quiet",
        "--keep-debuginfo=yes",
    ];
    let spool = tempfile::tempdir().unwrap();
    let spool_dir = spool.path().display().to_string();
    let settings = [
        ("datacenter", "dc1"),
        ("bootstrap.servers", a.as_str()),
        ("audit_topic", audit.as_str()),
        ("spool.dir", spool_dir.as_str()),
    ];
    let topic_prop = format!("kai.topic={topic}");
    let harm = |case: &str, bootstrap: &str| harm_args(case, bootstrap);
    // The forked child destroys the producer it inherited, then produces with its own.
    let mut fork = clients::produce_args(&a, &topic, 200, common::now_ms(), 10_000, 1);
    fork.push("kai.fork=50".into());
    for (case, args, props) in [
        (
            "produce-batch",
            harm("produce-batch", ""),
            vec![
                "test.mock.num.brokers=1",
                "allow.auto.create.topics=false",
                // the topic is known missing at once, not after 30 s of retries
                "topic.metadata.propagation.max.ms=10",
                "kai.topic=kai-no-such-topic",
            ],
        ),
        (
            "churn",
            harm("churn", &a),
            vec!["kai.clients=5", topic_prop.as_str()],
        ),
        (
            "abandon",
            harm("abandon", &a),
            vec!["kai.count=2000", topic_prop.as_str()],
        ),
        // The audit cluster unreachable for the whole run: the application's message is
        // delivered, the report waits its bound and goes to the spool.
        (
            "unreachable audit cluster",
            harm("churn", &a),
            vec![
                "kai.clients=1",
                topic_prop.as_str(),
                "kafka_audit.bootstrap.servers=127.0.0.1:1",
            ],
        ),
        ("fork", fork, vec![]),
    ] {
        let cfg = PluginConfig::new(Kind::C, &settings).with(&props);
        // A forked child inherits what the parent's threads own, and those threads are
        // not there to free it: in the child only errors count, not leaks.
        let mut wrapper = valgrind.to_vec();
        if case == "fork" {
            wrapper.retain(|o| !o.contains("leak"));
            wrapper.push("--leak-check=no");
        }
        let out = clients::run_under(&wrapper, Kind::C, &args, &cfg, Duration::from_secs(300));
        let report: Vec<&str> = out.stderr.lines().filter(|l| l.starts_with("==")).collect();
        assert!(
            out.ok && report.is_empty(),
            "{case} under valgrind: {}\n{}",
            out.json,
            report.join("\n")
        );
        if case == "unreachable audit cluster" {
            // The report is kept in the spool for the next client of the slot.
            assert_eq!(out.json["delivered"], 1, "{}", out.json);
            assert_eq!(out.json["plugin"]["spooled"], 1, "{}", out.json);
        }
    }
}

/// Debian 12's own librdkafka (2.0.2, `librdkafka1`), in a real dynamically linked host:
/// kcat. Without the operator's acceptance the plugin refuses it with the reason (kcat
/// exits at once, nothing produced); accepted (kcat never destroys a configuration
/// after a failed `rd_kafka_new`), every message is counted exactly: count and
/// checksum per window against what was sent. kcat is installed by test.sh.
#[tokio::test(flavor = "multi_thread")]
async fn debians_librdkafka_2_0_2_in_kcat_is_refused_or_counted_exactly() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let a = testkit::kafka_a();
    let topic = testkit::create_unique_topic(&a, "kai-kcat", 3).await;
    let audit = testkit::create_unique_topic(&a, "kai-kcat-audit", 1).await;
    let (n, base, span) = (200i64, common::now_ms(), 10_000);
    let input: String = (0..n)
        .map(|i| {
            let (k, v, _) = clients::message(i, n, base, span);
            format!("{k}\t{v}\n")
        })
        .collect();
    let kcat = |accept: bool| {
        let mut cmd = Command::new("kcat");
        cmd.args(["-P", "-b", &a, "-t", &topic, "-K", "\t"])
            .args([
                "-X",
                &format!("plugin.library.paths={}", clients::plugin().display()),
            ])
            .args(["-X", "kafka_audit.datacenter=dc1"])
            .args(["-X", &format!("kafka_audit.audit_topic={audit}")])
            .args(["-X", "kafka_audit.report.interval.ms=500"])
            .env_remove(clients::ACCEPT_4142)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if accept {
            cmd.env(clients::ACCEPT_4142, "1");
        }
        let mut child = cmd
            .spawn()
            .expect("kcat (Debian's package; test.sh installs it)");
        // A refused kcat exits before it reads: its stdin may be closed already.
        let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, stderr) = kcat(false);
    assert!(
        !ok,
        "kcat ran with the plugin on librdkafka 2.0.2 unaccepted"
    );
    assert!(
        stderr.contains("librdkafka 2.0.2 is older than 2.13.0") && stderr.contains("#4142"),
        "{stderr}"
    );
    let (ok, stderr) = kcat(true);
    assert!(ok, "kcat: {stderr}");
    let (seen, _) = crate::lifecycle::reported(&a, &audit, &topic, n as u64);
    assert_eq!(
        (seen.count, seen.checksum),
        crate::lifecycle::truth(0..n, n, base, span)
    );
}

/// Messages purged from the queue, a flush that times out, and a destroy with messages
/// in flight: the process goes on, and the plugin never counts a message twice nor
/// more than were produced (the valgrind test runs this case too). Not every message is
/// counted: librdkafka frees what is still queued at a destroy without a flush with no
/// delivery report and no acknowledgement for any interceptor, and it may finish the
/// destroy (and so the plugin's last report) after `rd_kafka_destroy` returned — both
/// librdkafka's, and the reason the README asks for a flush before destroy.
#[tokio::test(flavor = "multi_thread")]
async fn purged_timed_out_and_abandoned_messages_are_never_counted_twice() {
    let a = testkit::kafka_a();
    let topic = testkit::create_unique_topic(&a, "kai-abandon", 1).await;
    let audit = testkit::create_unique_topic(&a, "kai-abandon-audit", 1).await;
    let settings = [("datacenter", "dc1"), ("audit_topic", audit.as_str())];
    let topic_prop = format!("kai.topic={topic}");
    let cfg = PluginConfig::new(Kind::C, &settings).with(&["kai.count=20000", &topic_prop]);
    for _ in 0..3 {
        let out = clients::run(Kind::C, &harm_args("abandon", &a), &cfg, LIMIT);
        assert!(out.ok, "{} {}", out.json, out.stderr);
        let plugin = &out.json["plugin"];
        let n = |v: &serde_json::Value| v.as_u64().unwrap();
        let (acknowledged, failed) = (n(&plugin["acknowledged"]), n(&plugin["delivery_failed"]));
        assert!(acknowledged + failed <= 20_000, "{}", out.json);
        // What the application was told before the destroy, the plugin saw too
        // (unless its last report came after the process read the stats: then 0).
        if acknowledged + failed > 0 {
            assert!(acknowledged >= n(&out.json["delivered"]), "{}", out.json);
            assert!(failed >= n(&out.json["failed"]), "{}", out.json);
        }
    }
}
