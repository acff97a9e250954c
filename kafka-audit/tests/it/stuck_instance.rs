//! Stall judged per partition, not on the freshest report (docs/web.md, Verdicts,
//! rule 3), end to end: two auditor instances of one tier in one consumer group, one a
//! `kafka-audit audit` process that is then frozen (SIGSTOP: it stays in the group for
//! its long session timeout, and its partitions stop progressing) while the other keeps
//! reporting. The evaluator alerts the tier's auditor stalled, naming the frozen
//! instance and its partitions, and the webhook receiver gets the page. Before the fix
//! the freshest report of any partition hid the stuck one: no stall, no page.
//!
//! Every threshold and wait here derives from the instances' report interval, the one
//! bound the product promises (an auditor reports each of its partitions every
//! `report_interval`; the collector stores a report as it arrives). A busy machine
//! delays reports by many intervals (in CI the live instance's came more than 10 s,
//! 20 intervals, apart), so the thresholds carry a wide margin and each wait is a wait
//! on its condition with a ceiling that only turns a hang into a failure.

use crate::e2e;
use crate::support;

use std::collections::BTreeSet;
use std::fs::File;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use e2e::*;
use store::{Deployment, VerdictReads};
use support::*;
use tokio_util::sync::CancellationToken;

const PARTITIONS: i32 = 4;

/// Both instances' `report_interval` (the support's `audit_config` sets the same).
const REPORT_INTERVAL: Duration = Duration::from_millis(500);

/// `stall_after`: 60 report intervals (30 s) without a report of a partition. The
/// product promises one every interval; the margin is three times the worst delay a
/// loaded CI machine showed (20 intervals), so the live instance is never stalled.
const STALL_AFTER: Duration = Duration::from_millis(60 * REPORT_INTERVAL.as_millis() as u64);

/// How long the evaluator may take, beyond `stall_after`, to judge the frozen instance
/// stalled and page: it evaluates every 500 ms and pages at once; the rest is slack for
/// a loaded machine (a ceiling, not an expectation).
const STALL_SEEN_WITHIN: Duration = Duration::from_secs(90);

/// The frozen instance's session timeout: it must stay in the group (its partitions
/// unreported) until the stall has been seen, or the group would hand its partitions
/// to the live instance and end the stall. Longer than `stall_after` plus the ceiling.
const FROZEN_SESSION: Duration = Duration::from_secs(150);

const _: () = assert!(
    STALL_AFTER.as_secs() + STALL_SEEN_WITHIN.as_secs() < FROZEN_SESSION.as_secs(),
    "the frozen instance must stay in the group until the stall wait's ceiling"
);

/// A partition's owner is who reported it within the last 10 report intervals: older
/// rows are a previous owner's (before a rebalance). A report delayed longer only makes
/// the wait below poll again.
const FRESH: Duration = Duration::from_millis(10 * REPORT_INTERVAL.as_millis() as u64);

/// Ceiling of a wait for the group to (re)balance and both instances to report: no
/// bound is promised for a rebalance on a loaded machine, so a generous one.
const BALANCED_WITHIN: Duration = Duration::from_secs(120);

/// A spawned `kafka-audit audit`, killed (SIGKILL) when dropped.
struct Process(Child);

impl Process {
    fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .args([sig, &self.0.id().to_string()])
            .status()
            .expect("kill");
        assert!(st.success(), "kill {sig}");
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `(partition, host)` of every progress row of `topic` reported within [`FRESH`].
async fn fresh_owners(store: &store::Store, topic: &str) -> BTreeSet<(i32, String)> {
    let now = common::now_ms();
    store
        .progress(Some(topic))
        .await
        .expect("progress")
        .into_iter()
        .filter(|p| now - p.received_at_ms < FRESH.as_millis() as i64)
        .map(|p| (p.partition, p.host))
        .collect()
}

/// Polls [`fresh_owners`] until `cond` holds (at most [`BALANCED_WITHIN`]).
async fn owners_when(
    store: &store::Store,
    topic: &str,
    cond: impl Fn(&BTreeSet<(i32, String)>) -> bool,
) -> Option<BTreeSet<(i32, String)>> {
    let deadline = std::time::Instant::now() + BALANCED_WITHIN;
    while std::time::Instant::now() < deadline {
        let owners = fresh_owners(store, topic).await;
        if cond(&owners) {
            return Some(owners);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_instance_is_alerted_stalled_while_the_other_reports() {
    let _alone = crate::ALONE.lock().await;
    let a = testkit::kafka_a();
    let topic = testkit::create_unique_topic(&a, "stuck-e2e", PARTITIONS).await;
    let audit_topic = testkit::create_unique_topic(&a, "stuck-e2e-audit", 3).await;
    let group = testkit::unique("stuck-e2e-group");
    let dir = tempfile::tempdir().unwrap();
    let frozen_id = testkit::unique("frozen");
    let wal = tempfile::tempdir().unwrap();
    let live_id = testkit::unique("live");
    let live_config = audit_config(
        &a,
        std::slice::from_ref(&topic),
        &audit_topic,
        &group,
        &live_id,
        wal.path(),
    );
    assert_eq!(live_config.audit.report_interval, REPORT_INTERVAL);
    let config = dir.path().join("frozen.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[kafka]
bootstrap_servers = "{a}"
[kafka.consumer]
"session.timeout.ms" = {session_ms}
[audit]
instance_id = "{frozen_id}"
tier = "regional"
datacenter = "dc1"
group_id = "{group}"
topics = ["{topic}"]
audit_topic = "{audit_topic}"
audit_topic_replication = 1
report_interval = "{interval_ms}ms"
wal_dir = "{wal}"
[audit.event_time]
window_size = "10s"
[ops]
enabled = false
[log]
level = "warn,audit_service=info"
"#,
            wal = dir.path().join("wal").display(),
            session_ms = FROZEN_SESSION.as_millis(),
            interval_ms = REPORT_INTERVAL.as_millis(),
        ),
    )
    .unwrap();

    let (pages, hook) = start_receiver().await;
    let db = testkit::fresh_database("stuck_e2e").await;
    let store = store::Store::connect(db.url()).await.expect("connect");
    store.migrate().await.expect("migrate");
    let stop = CancellationToken::new();
    let _stop_on_panic = stop.clone().drop_guard();
    let collector = tokio::spawn(collector::run(
        collect_config(db.url(), &[("a", &a, &audit_topic)], 500),
        stop.clone(),
    ));

    // The process first (it takes every partition), then the in-process instance.
    let frozen = Process(
        Command::new(env!("CARGO_BIN_EXE_kafka-audit"))
            .args(["audit", "--config"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(File::create(dir.path().join("frozen.log")).unwrap())
            .spawn()
            .expect("spawn kafka-audit audit"),
    );
    let owners = owners_when(&store, &topic, |o| {
        o.len() == PARTITIONS as usize && o.iter().all(|(_, h)| *h == frozen_id)
    })
    .await;
    let all_by_frozen = owners.is_some();
    assert!(all_by_frozen, "the process never reported every partition");
    let live = tokio::spawn(audit_service::run(live_config, stop.clone()));
    // Both report their share after the rebalance.
    let owners = owners_when(&store, &topic, |o| {
        let hosts: BTreeSet<&str> = o.iter().map(|(_, h)| h.as_str()).collect();
        o.len() == PARTITIONS as usize && hosts.len() == 2
    })
    .await;
    let owners = owners.expect("the instances never shared the partitions");
    let frozen_parts: Vec<i32> = owners
        .iter()
        .filter(|(_, h)| *h == frozen_id)
        .map(|(p, _)| *p)
        .collect();

    let stall_after = format!("{}ms", STALL_AFTER.as_millis());
    let state = web::AppState::new(
        serve_config(r#"{ dc1 = "agg" }"#, &stall_after, &hook),
        store,
    )
    .expect("state");
    let jobs = state.spawn_jobs(&stop);
    frozen.signal("-STOP");
    let frozen_at = std::time::Instant::now();

    // Stalled after `stall_after` without a report of its partitions, within its
    // session: the frozen instance alone, with its partitions, and paged.
    let key = (topic.clone(), "regional".to_string(), "dc1".to_string());
    let stalled = testkit::wait_until_async(STALL_AFTER + STALL_SEEN_WITHIN, || {
        let status = state.index.read().unwrap().auditors.get(&key).cloned();
        let paged = pages
            .of(&topic)
            .contains(&("trigger".into(), "stalled".into(), None));
        let frozen_alone = status.is_some_and(|s| {
            let mut parts = s.stalled_partitions.clone();
            parts.sort();
            s.stalled && s.stalled_instances == [frozen_id.as_str()] && parts == frozen_parts
        });
        async move { paged && frozen_alone }
    })
    .await;
    let seen_after = frozen_at.elapsed();
    let status = state.index.read().unwrap().auditors.get(&key).cloned();
    drop(frozen);
    stop.cancel();
    for t in [live, collector] {
        t.await.expect("service task").expect("service result");
    }
    for j in jobs {
        j.await.expect("job");
    }
    assert!(
        stalled,
        "not paged stalled with only {frozen_id} (partitions {frozen_parts:?}) stalled within \
         {:?} of the freeze; pages {:?}; status {status:?}",
        STALL_AFTER + STALL_SEEN_WITHIN,
        pages.all()
    );
    eprintln!("frozen instance alerted stalled {seen_after:?} after the freeze");
}
