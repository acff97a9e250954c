//! Issue 14, B7 end to end: two auditor instances of one tier in one consumer group,
//! one a `kafka-audit audit` process that is then frozen (SIGSTOP: it stays in the
//! group, its session timeout is 60 s, and its partitions stop progressing) while the
//! other keeps reporting. The evaluator alerts the tier's auditor stalled, naming the
//! frozen instance and its partitions, and the webhook receiver gets the page. Before
//! the fix the freshest report of any partition hid the stuck one: no stall, no page.

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

/// `(partition, host)` of every progress row of `topic` reported within the last 3 s.
async fn fresh_owners(store: &store::Store, topic: &str) -> BTreeSet<(i32, String)> {
    let now = common::now_ms();
    store
        .progress(Some(topic))
        .await
        .expect("progress")
        .into_iter()
        .filter(|p| now - p.received_at_ms < 3_000)
        .map(|p| (p.partition, p.host))
        .collect()
}

/// Polls [`fresh_owners`] until `cond` holds (60 s bound).
async fn owners_when(
    store: &store::Store,
    topic: &str,
    cond: impl Fn(&BTreeSet<(i32, String)>) -> bool,
) -> Option<BTreeSet<(i32, String)>> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
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
    let config = dir.path().join("frozen.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[kafka]
bootstrap_servers = "{a}"
[kafka.consumer]
"session.timeout.ms" = 60000
[audit]
instance_id = "{frozen_id}"
tier = "regional"
datacenter = "dc1"
group_id = "{group}"
topics = ["{topic}"]
audit_topic = "{audit_topic}"
audit_topic_replication = 1
report_interval = "500ms"
wal_dir = "{wal}"
[audit.event_time]
window_size = "10s"
[ops]
enabled = false
[log]
level = "warn,audit_service=info"
"#,
            wal = dir.path().join("wal").display()
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
    let wal = tempfile::tempdir().unwrap();
    let live_id = testkit::unique("live");
    let live = tokio::spawn(audit_service::run(
        audit_config(
            &a,
            std::slice::from_ref(&topic),
            &audit_topic,
            &group,
            &live_id,
            wal.path(),
        ),
        stop.clone(),
    ));
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

    let state =
        web::AppState::new(serve_config(r#"{ dc1 = "agg" }"#, "10s", &hook), store).expect("state");
    let jobs = state.spawn_jobs(&stop);
    frozen.signal("-STOP");

    // Stalled after 10 s without a report of its partitions, within the 60 s session.
    let key = (topic.clone(), "regional".to_string(), "dc1".to_string());
    let stalled = testkit::wait_until_async(Duration::from_secs(45), || {
        let status = state.index.read().unwrap().auditors.get(&key).cloned();
        let paged = pages
            .of(&topic)
            .contains(&("trigger".into(), "stalled".into(), None));
        async move { paged && status.is_some_and(|s| s.stalled) }
    })
    .await;
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
        "no stalled page ({:?}); status {status:?}",
        pages.all()
    );
    let mut status = status.expect("auditor status");
    status.stalled_partitions.sort();
    assert_eq!(status.stalled_instances, vec![frozen_id]);
    assert_eq!(status.stalled_partitions, frozen_parts);
}
