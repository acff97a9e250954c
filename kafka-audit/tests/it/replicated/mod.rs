//! Real Kafka failures on the replicated cluster R (three KRaft nodes, each broker and
//! controller, started by `deploy/dev/kafka start r`; docs/testing.md): nodes SIGKILLed
//! and restarted under the real auditor, collector and serve, and a real data loss by
//! an unclean leader election. Every scenario here kills nodes of the one cluster, so
//! they run one after the other in one test ([`run_scenarios`], the crate's
//! `cluster_r_failover_scenarios`) and take [`Cluster::take`] first; a scenario that
//! fails still leaves every node started again.
//!
//! What the tests share: the cluster handle (kill / start a node, a partition's leader,
//! the group and transaction coordinators), the producer tier (a Rust producer that
//! counts, through audit-lib, exactly what the cluster acknowledged), the ground truth
//! read back from the log, and the rig (auditor, collector into PostgreSQL, serve with
//! its alerts to a local webhook receiver).

mod coordinator;
mod kills;
mod loss;
mod two_down;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use audit_lib::sink::{KafkaSink, Sink};
use audit_lib::{Aggregator, Identity};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::topic_partition_list::TopicPartitionList;
use rdkafka::ClientContext;
use store::{Deployment, VerdictReads};
use web::AppState;

use crate::e2e::{Pages, Service};
use crate::support::WINDOW_MS;

/// One scenario at a time on cluster R: each kills its nodes.
static CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A scenario: an async test body of its own runtime.
type Scenario = fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>;

/// The scenarios on cluster R, by the names `KAFKA_AUDIT_TEST_R_SCENARIOS` selects.
fn scenarios() -> Vec<(&'static str, Scenario)> {
    vec![
        ("coordinator", || {
            Box::pin(
                coordinator::a_group_coordinator_gone_from_the_metadata_does_not_hold_the_auditor(),
            )
        }),
        ("kills", || {
            Box::pin(kills::counts_stay_exact_and_nothing_pages_across_ten_node_kills())
        }),
        ("loss_acks_all", || {
            Box::pin(loss::acks_all_with_two_in_sync_replicas_loses_nothing_and_pages_nothing())
        }),
        ("loss_unclean", || {
            Box::pin(
                loss::an_unclean_election_drops_acknowledged_records_and_the_loss_is_paged_exactly(
                ),
            )
        }),
        ("two_down", || {
            Box::pin(two_down::two_nodes_down_stall_the_auditor_which_is_paged_resolved_and_exact())
        }),
    ]
}

/// Runs the scenarios on cluster R one after the other — all, or those named (comma or
/// space separated) in `KAFKA_AUDIT_TEST_R_SCENARIOS` — each on a runtime of its own
/// (4 workers, as `#[tokio::test(flavor = "multi_thread")]` gave them), every one even
/// after another failed; panics at the end naming those that failed (each one's own
/// panic is printed above, with its timing).
pub fn run_scenarios() {
    let only = std::env::var("KAFKA_AUDIT_TEST_R_SCENARIOS").ok();
    let all = scenarios();
    let names: Vec<&str> = all.iter().map(|(n, _)| *n).collect();
    let selected: Vec<(&str, Scenario)> = all
        .into_iter()
        .filter(|(n, _)| {
            only.as_deref()
                .is_none_or(|o| o.split([',', ' ']).any(|x| x.trim() == *n))
        })
        .collect();
    assert!(
        !selected.is_empty(),
        "KAFKA_AUDIT_TEST_R_SCENARIOS={} names none of the scenarios {names:?}",
        only.as_deref().unwrap_or_default()
    );
    let mut failed = Vec::new();
    for (name, scenario) in selected {
        let t = Instant::now();
        eprintln!("cluster R: scenario {name} starts");
        let passed = std::thread::Builder::new()
            .name(format!("r-{name}"))
            .spawn(move || {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(4)
                    .enable_all()
                    .build()
                    .expect("a runtime")
                    .block_on(scenario())
            })
            .expect("a scenario thread")
            .join()
            .is_ok();
        eprintln!(
            "cluster R: scenario {name} {} after {:?}",
            if passed { "passed" } else { "FAILED" },
            t.elapsed()
        );
        if !passed {
            failed.push(name);
        }
    }
    assert!(
        failed.is_empty(),
        "scenarios on cluster R failed: {failed:?} (each one's panic is printed above; \
         KAFKA_AUDIT_TEST_R_SCENARIOS={} runs them again alone)",
        failed.join(",")
    );
}

const METADATA_TIMEOUT: Duration = Duration::from_secs(5);

/// A partition as the cluster's metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    pub partition: i32,
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// Cluster R, held by one test. Dropping it starts every node again.
pub struct Cluster {
    pub bootstrap: String,
    admin: AdminClient<DefaultClientContext>,
    _one_at_a_time: tokio::sync::MutexGuard<'static, ()>,
}

impl Cluster {
    /// Waits for the other tests on R, then starts any node a previous test left down,
    /// waits until the internal topics are fully replicated again, leads each of their
    /// partitions by its preferred replica and deletes the topics earlier tests left.
    pub async fn take() -> Cluster {
        // What the auditor and the collector warn of is the story of a failure here.
        common::init_tracing(&common::LogConfig {
            level: "warn,audit_service=info,collector=info".into(),
            ..Default::default()
        });
        let guard = CLUSTER.lock().await;
        let bootstrap = testkit::kafka_r();
        let admin = testkit::client_config(&bootstrap)
            .create()
            .expect("admin client for cluster R");
        let c = Cluster {
            bootstrap,
            admin,
            _one_at_a_time: guard,
        };
        tokio::task::block_in_place(|| {
            c.dev_kafka(&["start", "r"]);
            let internal: Vec<&str> = ["__consumer_offsets", "__transaction_state"]
                .into_iter()
                .filter(|t| !c.partitions(t).is_empty())
                .collect();
            assert!(
                c.wait_in_sync(&internal, Duration::from_secs(120)),
                "internal topics of R not fully replicated: {:?}",
                internal.iter().map(|t| c.partitions(t)).collect::<Vec<_>>()
            );
            // A node started after the others leads nothing until Kafka rebalances
            // (every 5 minutes): the tests pick nodes by the roles they hold.
            let preferred = internal
                .iter()
                .flat_map(|t| c.partitions(t))
                .all(|p| p.replicas.first() == Some(&p.leader));
            if !preferred {
                c.dev_kafka(&["elect", "r"]);
            }
            c.wait_producer_ids(Duration::from_secs(300));
        });
        c.delete_leftover_topics().await;
        c
    }

    /// Waits until every node, as a transaction coordinator, hands out a producer id: a
    /// node restarted by an earlier test may ask the controller for its block of ids
    /// only minutes later (~95 s seen in a fresh-clone run), and the auditor started
    /// next (transactional) or the producer tier (idempotent) would wait on it inside a
    /// test's bound on counting: a CI run failed so, "counting did not start" after
    /// 240 s. Asks each node through a transactional id of a `__transaction_state`
    /// partition it leads.
    fn wait_producer_ids(&self, timeout: Duration) {
        self.ensure_internal_topic("__transaction_state");
        let parts = self.partitions("__transaction_state");
        for node in 1..=3 {
            let Some(p) = parts.iter().find(|p| p.leader == node) else {
                continue;
            };
            let id = (0..)
                .map(|i| format!("r-ready-{node}-{i}"))
                .find(|id| coordinator_partition(id, parts.len() as i32) == p.partition)
                .expect("a transactional id for every partition");
            let producer: ThreadedProducer<rdkafka::producer::DefaultProducerContext> =
                testkit::client_config(&self.bootstrap)
                    .set("transactional.id", &id)
                    .create()
                    .expect("create producer");
            let t = Instant::now();
            let mut last = None;
            while t.elapsed() < timeout {
                match producer.init_transactions(Duration::from_secs(30)) {
                    Ok(()) => {
                        last = None;
                        break;
                    }
                    Err(e) => last = Some(e),
                }
            }
            assert!(
                last.is_none(),
                "node {node} of R handed out no producer id in {timeout:?}: {last:?}"
            );
            if t.elapsed() > Duration::from_secs(5) {
                eprintln!(
                    "cluster R: node {node} handed out a producer id after {:?}",
                    t.elapsed()
                );
            }
        }
    }

    /// Deletes every topic but Kafka's own. A restarted node recovers each log it
    /// holds before it serves (after a SIGKILL it scans their unflushed segments): with
    /// the topics of every earlier run kept, a restart took over a minute under load,
    /// ~20 s of it loading ~120 logs.
    async fn delete_leftover_topics(&self) {
        let names = |c: &Cluster| -> Vec<String> {
            c.admin
                .inner()
                .fetch_metadata(None, METADATA_TIMEOUT)
                .map(|md| {
                    md.topics()
                        .iter()
                        .map(|t| t.name().to_string())
                        .filter(|n| !n.starts_with("__"))
                        .collect()
                })
                .unwrap_or_default()
        };
        let leftover = tokio::task::block_in_place(|| names(self));
        if leftover.is_empty() {
            return;
        }
        let refs: Vec<&str> = leftover.iter().map(String::as_str).collect();
        let res = self
            .admin
            .delete_topics(
                &refs,
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
            )
            .await
            .expect("delete topics");
        for r in res {
            r.unwrap_or_else(|(name, e)| panic!("delete topic {name} on R: {e}"));
        }
        let gone = tokio::task::block_in_place(|| {
            testkit::wait_until(Duration::from_secs(60), || names(self).is_empty())
        });
        assert!(gone, "topics left on R: {:?}", names(self));
    }

    fn dev_kafka(&self, args: &[&str]) -> String {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/dev/kafka");
        let out = std::process::Command::new(script)
            .args(args)
            .output()
            .expect("run deploy/dev/kafka");
        assert!(
            out.status.success(),
            "deploy/dev/kafka {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn node_address(&self, node: i32) -> String {
        let nodes: Vec<&str> = self.bootstrap.split(',').collect();
        nodes[(node - 1) as usize].trim().to_string()
    }

    /// SIGKILLs node `node` (1-3) and checks it is gone.
    pub fn kill(&self, node: i32) {
        let out = self.dev_kafka(&["kill", &format!("r:{node}")]);
        let address = self.node_address(node);
        let gone = testkit::wait_until(Duration::from_secs(10), || {
            std::net::TcpStream::connect(&address).is_err()
        });
        assert!(
            gone,
            "node {node} of R ({address}) still answers after `deploy/dev/kafka kill r:{node}` \
             ({out}): R was not started from this checkout's deploy/dev/kafka (its state \
             directory, KAFKA_AUDIT_DEV_HOME), so its nodes cannot be killed from here"
        );
    }

    /// Starts node `node` again and waits until it answers.
    pub fn start(&self, node: i32) {
        self.dev_kafka(&["start", &format!("r:{node}")]);
    }

    /// `topic`'s partitions (empty when the topic is unknown or metadata cannot be read).
    pub fn partitions(&self, topic: &str) -> Vec<PartitionInfo> {
        let Ok(md) = self
            .admin
            .inner()
            .fetch_metadata(Some(topic), METADATA_TIMEOUT)
        else {
            return Vec::new();
        };
        let mut out: Vec<PartitionInfo> = md
            .topics()
            .iter()
            .filter(|t| t.name() == topic && t.error().is_none())
            .flat_map(|t| t.partitions())
            .map(|p| PartitionInfo {
                partition: p.id(),
                leader: p.leader(),
                replicas: p.replicas().to_vec(),
                isr: p.isr().to_vec(),
            })
            .collect();
        out.sort_by_key(|p| p.partition);
        out
    }

    /// The leader of `topic` [`partition`] (-1: none known).
    pub fn leader(&self, topic: &str, partition: i32) -> i32 {
        self.partitions(topic)
            .iter()
            .find(|p| p.partition == partition)
            .map_or(-1, |p| p.leader)
    }

    /// The node coordinating consumer group `group`: the leader of its partition of
    /// `__consumer_offsets` (Kafka's `abs(group.hashCode()) % partitions`).
    pub fn group_coordinator(&self, group: &str) -> i32 {
        self.coordinator("__consumer_offsets", group)
    }

    /// The node coordinating `transactional_id`: the leader of its partition of
    /// `__transaction_state`.
    pub fn transaction_coordinator(&self, transactional_id: &str) -> i32 {
        self.coordinator("__transaction_state", transactional_id)
    }

    fn coordinator(&self, internal_topic: &str, id: &str) -> i32 {
        self.ensure_internal_topic(internal_topic);
        let n = self.partitions(internal_topic).len();
        assert!(n > 0, "{internal_topic} does not exist on R yet");
        self.leader(internal_topic, coordinator_partition(id, n as i32))
    }

    /// Kafka creates its internal topics at the first request that needs them; on a
    /// fresh cluster R (CI) no group or transaction has asked yet. Asks once: an offset
    /// fetch of a group (its coordinator lookup creates `__consumer_offsets`), or a
    /// transactional producer's init (`__transaction_state`).
    fn ensure_internal_topic(&self, internal_topic: &str) {
        if !self.partitions(internal_topic).is_empty() {
            return;
        }
        if internal_topic == "__consumer_offsets" {
            let consumer: BaseConsumer = testkit::client_config(&self.bootstrap)
                .set("group.id", testkit::unique("r-offsets"))
                .create()
                .expect("create consumer");
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition("__consumer_offsets", 0);
            let _ = consumer.committed_offsets(tpl, Duration::from_secs(30));
        } else {
            let producer: ThreadedProducer<rdkafka::producer::DefaultProducerContext> =
                testkit::client_config(&self.bootstrap)
                    .set("transactional.id", testkit::unique("r-txn"))
                    .create()
                    .expect("create producer");
            let _ = producer.init_transactions(Duration::from_secs(30));
        }
        assert!(
            testkit::wait_until(Duration::from_secs(60), || !self
                .partitions(internal_topic)
                .is_empty()),
            "{internal_topic} was not created on R"
        );
    }

    /// What Kafka's own tools say (`deploy/dev/kafka coordinator r group|transaction ID`):
    /// checks [`Cluster::group_coordinator`] and [`Cluster::transaction_coordinator`].
    pub fn coordinator_by_kafka_tools(&self, kind: &str, id: &str) -> i32 {
        let out = self.dev_kafka(&["coordinator", "r", kind, id]);
        out.trim()
            .parse()
            .unwrap_or_else(|_| panic!("coordinator of {kind} {id}: {out:?}"))
    }

    /// The node ids the cluster's metadata lists: a SIGKILLed node drops out once the
    /// controller has fenced it (broker session timeout), and clients drop it then.
    pub fn brokers(&self) -> Vec<i32> {
        let Ok(md) = self.admin.inner().fetch_metadata(None, METADATA_TIMEOUT) else {
            return Vec::new();
        };
        let mut ids: Vec<i32> = md.brokers().iter().map(|b| b.id()).collect();
        ids.sort();
        ids
    }

    /// Waits until every partition of `topics` has a leader and all its replicas in
    /// sync; whether they did within `timeout`.
    pub fn wait_in_sync(&self, topics: &[&str], timeout: Duration) -> bool {
        testkit::wait_until(timeout, || {
            topics.iter().all(|t| {
                let parts = self.partitions(t);
                !parts.is_empty()
                    && parts.iter().all(|p| {
                        let (mut r, mut i) = (p.replicas.clone(), p.isr.clone());
                        r.sort();
                        i.sort();
                        p.leader >= 0 && r == i
                    })
            })
        })
    }

    /// Creates `topic` with `partitions` of replication factor 3 and `config`, or with
    /// the replicas `assignment` gives each partition; waits until each has a leader.
    pub async fn create_topic(
        &self,
        topic: &str,
        partitions: i32,
        assignment: Option<&[&[i32]]>,
        config: &[(&str, &str)],
    ) {
        let replication = match assignment {
            Some(a) => TopicReplication::Variable(a),
            None => TopicReplication::Fixed(3),
        };
        let mut t = NewTopic::new(topic, partitions, replication);
        for (k, v) in config {
            t = t.set(k, v);
        }
        let res = self
            .admin
            .create_topics(
                [&t],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
            )
            .await
            .expect("create topic");
        for r in res {
            r.unwrap_or_else(|(name, e)| panic!("create topic {name} on R: {e}"));
        }
        let ready =
            tokio::task::block_in_place(|| self.wait_in_sync(&[topic], Duration::from_secs(30)));
        assert!(ready, "{topic}: {:?}", self.partitions(topic));
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // The next test (or a developer) finds every node up, even after a failure here.
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/dev/kafka");
        let _ = std::process::Command::new(script)
            .args(["start", "r"])
            .output();
    }
}

/// Kafka's partition for a coordinator key: `Utils.abs(key.hashCode()) % partitions`,
/// with Java's `String.hashCode` over UTF-16 code units (and Kafka's `Utils.abs`, which
/// maps `Integer.MIN_VALUE` to 0: not the partitioner's `& 0x7fffffff`).
pub fn coordinator_partition(key: &str, partitions: i32) -> i32 {
    let hash = key
        .encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)));
    let abs = if hash == i32::MIN { 0 } else { hash.abs() };
    abs % partitions
}

#[test]
fn coordinator_partitions_are_kafkas() {
    // Computed with Java 17: "…".hashCode(), then Utils.abs(h) % 8.
    for (key, partition) in [
        ("kills-regional-11764-325015313-4", 0), // hash 2123954416
        (
            "kafka-audit-kills-regional-11764-325015313-4-regional-dc1-0",
            5,
        ), // hash -1828808533
    ] {
        assert_eq!(coordinator_partition(key, 8), partition, "{key}");
    }
}

/// A record Kafka acknowledged to the producer.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Record {
    pub partition: i32,
    pub offset: i64,
    pub key: String,
    pub ts: i64,
}

impl Record {
    pub fn window(&self) -> i64 {
        self.ts / WINDOW_MS * WINDOW_MS
    }
}

/// With `acks=all` and min.insync.replicas 2 the log holds every acknowledged record
/// (by key, unique per message: a delivery report may not know the offset, -1001 for a
/// resent message a later batch's answer acknowledged); panics with the keys if not.
///
/// It may hold one **more than once**: the idempotent producer can write a record again
/// when a partition leader dies (seen in `kills`; docs/operations.md, "Duplicates an
/// idempotent producer writes under failover"). That is a real duplicate, which the
/// regional tier counts and serve must page. Returns, per window, how many records the
/// log holds beyond what was acknowledged (written twice, or never acknowledged).
pub fn written_beyond_acks(acked: &[Record], log: &[Record]) -> BTreeMap<i64, u64> {
    let acked_keys: BTreeSet<&str> = acked.iter().map(|r| r.key.as_str()).collect();
    let mut seen: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in log {
        seen.entry(r.key.as_str()).or_default().push(r);
    }
    let lost: Vec<&str> = acked_keys
        .iter()
        .filter(|k| !seen.contains_key(*k))
        .copied()
        .collect();
    assert!(lost.is_empty(), "acknowledged but not in the log: {lost:?}");
    let mut beyond = BTreeMap::new();
    for (key, copies) in &seen {
        let extra = if acked_keys.contains(key) {
            copies.len() - 1
        } else {
            copies.len()
        };
        if extra > 0 {
            eprintln!("the log holds {key} beyond its acknowledgement: {copies:?}");
            *beyond.entry(copies[0].window()).or_default() += extra as u64;
        }
    }
    beyond
}

/// The pages of `topic` a run must have sent given what the log holds beyond the
/// acknowledgements ([`written_beyond_acks`]): one `duplication` trigger per such
/// window, paged with that many more records downstream than upstream, and no other
/// page but those `verdicts_also_allowed` name (e.g. `stalled`). Waits (bounded) for
/// the duplication pages first: each comes once its window is final.
pub async fn assert_pages_are_the_logs_duplicates(
    pages: &Pages,
    topic: &str,
    beyond: &BTreeMap<i64, u64>,
    verdicts_also_allowed: &[&str],
) {
    let is_duplication =
        |p: &serde_json::Value| p["topic"] == topic && p["verdict"] == "duplication";
    testkit::wait_until_async(Duration::from_secs(60), || {
        let n = pages.all().iter().filter(|p| is_duplication(p)).count();
        async move { n >= beyond.len() }
    })
    .await;
    let all = pages.all();
    let others: Vec<&serde_json::Value> = all
        .iter()
        .filter(|p| !is_duplication(p))
        .filter(|p| {
            !verdicts_also_allowed
                .iter()
                .any(|v| p["verdict"] == *v && p["topic"] == topic)
        })
        .collect();
    assert!(
        others.is_empty(),
        "pages other than the log's duplicates: {others:#?}"
    );
    let mut got: Vec<_> = pages
        .of(topic)
        .into_iter()
        .filter(|(_, verdict, _)| verdict == "duplication")
        .collect();
    got.sort();
    let want: Vec<(String, String, Option<i64>)> = beyond
        .keys()
        .map(|&w| ("trigger".to_string(), "duplication".to_string(), Some(w)))
        .collect();
    assert_eq!(got, want, "duplication pages: {all:#?}");
    for p in all.iter().filter(|p| is_duplication(p)) {
        let w = p["window_start"].as_i64().unwrap();
        let difference = p["observed"].as_i64().unwrap() - p["expected"].as_i64().unwrap();
        assert_eq!(difference as u64, beyond[&w], "window {w}: {p:#}");
        assert_eq!(
            (p["upstream"].as_str(), p["downstream"].as_str()),
            (Some("producer"), Some("regional"))
        );
    }
    if !beyond.is_empty() {
        eprintln!("the log held records beyond their acknowledgement in windows {beyond:?}: paged as duplication");
    }
}

/// Messages per window start.
pub fn per_window<'a>(records: impl IntoIterator<Item = &'a Record>) -> BTreeMap<i64, u64> {
    let mut out = BTreeMap::new();
    for r in records {
        *out.entry(r.window()).or_default() += 1;
    }
    out
}

/// What the producer tier's delivery callback shares with it.
struct Acks {
    aggregator: Mutex<Aggregator>,
    acked: Mutex<Vec<Record>>,
    failed: AtomicU64,
}

impl ClientContext for Acks {}

impl ProducerContext for Acks {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let m = match result {
            Ok(m) => m,
            // Not acknowledged, so not counted: the producer tier reports what the
            // cluster said it has.
            Err(_) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let record_timestamp = audit_service::counting::record_timestamp(m.timestamp());
        let obs = audit_service::counting::observation_without_headers(m, common::now_ms());
        self.aggregator.lock().unwrap().record(&obs);
        self.acked.lock().unwrap().push(Record {
            partition: m.partition(),
            offset: m.offset(),
            key: String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned(),
            ts: record_timestamp.map_or(-1, |t| t.ms),
        });
    }
}

/// The producer tier: writes JSON messages (event time `ts`, also the record
/// timestamp) to a topic and counts each one the cluster acknowledged — partition,
/// offset, timestamp, key and value as the delivery report gives them — into
/// audit-lib's [`Aggregator`], whose increments it publishes to the audit topic every
/// 500 ms through audit-lib's [`KafkaSink`] (a failed batch is sent again, same
/// UUIDs, until it is delivered).
pub struct ProducerTier {
    producer: Arc<ThreadedProducer<Acks>>,
    topic: String,
    partitions: i32,
    sent: AtomicU64,
    stop_reporting: Arc<AtomicBool>,
    reporter: Mutex<Option<std::thread::JoinHandle<u64>>>,
}

impl ProducerTier {
    /// `acks` and the other librdkafka properties of the audited producer in `props`.
    pub fn start(
        bootstrap: &str,
        topic: &str,
        partitions: i32,
        audit_topic: &str,
        props: &[(&str, &str)],
    ) -> ProducerTier {
        let event_time = audit_lib::EventTimeConfig {
            window_size: audit_lib::WindowSize::from_millis(WINDOW_MS).unwrap(),
            ..Default::default()
        };
        let acks = Acks {
            aggregator: Mutex::new(
                Aggregator::new(
                    Identity::new("producer", "dc1", "producer-0"),
                    event_time,
                    audit_lib::Limits::default(),
                )
                .unwrap(),
            ),
            acked: Mutex::new(Vec::new()),
            failed: AtomicU64::new(0),
        };
        let mut cfg = testkit::client_config(bootstrap);
        cfg.set("linger.ms", "5");
        for (k, v) in props {
            cfg.set(*k, *v);
        }
        let producer: Arc<ThreadedProducer<Acks>> =
            Arc::new(cfg.create_with_context(acks).expect("audited producer"));
        let stop_reporting = Arc::new(AtomicBool::new(false));
        let reporter = {
            let (producer, stop) = (producer.clone(), stop_reporting.clone());
            let mut sink =
                KafkaSink::with_brokers(bootstrap, audit_topic, Duration::from_secs(10)).unwrap();
            std::thread::spawn(move || {
                let mut published = 0;
                loop {
                    let last = stop.load(Ordering::Relaxed);
                    let batch = producer
                        .context()
                        .aggregator
                        .lock()
                        .unwrap()
                        .drain(common::now_ms());
                    // Bounded: 10 minutes of retries at most.
                    let mut delivered = batch.is_empty();
                    for _ in 0..600 {
                        if delivered {
                            break;
                        }
                        match sink.send(&batch) {
                            Ok(()) => delivered = true,
                            Err(e) => {
                                eprintln!("producer tier: audit messages not delivered: {e}");
                                std::thread::sleep(Duration::from_secs(1));
                            }
                        }
                    }
                    assert!(delivered, "producer tier: increments never delivered");
                    published += batch.len() as u64;
                    if last {
                        return published;
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
            })
        };
        ProducerTier {
            producer,
            topic: topic.to_string(),
            partitions,
            sent: AtomicU64::new(0),
            stop_reporting,
            reporter: Mutex::new(Some(reporter)),
        }
    }

    /// Sends message number `i`: key `k{i}`, JSON with event time now.
    fn send(&self, i: u64) {
        let ts = common::now_ms();
        let key = format!("k{i}");
        let value = format!("{{\"id\":{i},\"ts\":{ts}}}");
        let mut rec = BaseRecord::to(&self.topic)
            .key(&key)
            .payload(&value)
            .partition((i % self.partitions as u64) as i32)
            .timestamp(ts);
        loop {
            match self.producer.send(rec) {
                Ok(()) => break,
                Err((_, r)) => {
                    rec = r;
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        }
    }

    /// Sends `n` messages at `rate` per second (numbered on from the last call), then
    /// waits until each was acknowledged or failed.
    pub fn send_batch(&self, n: u64, rate: u64) {
        let started = Instant::now();
        let first = self.sent.fetch_add(n, Ordering::Relaxed);
        for j in 0..n {
            let due = started + Duration::from_micros(j * 1_000_000 / rate);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            self.send(first + j);
        }
        self.flush();
    }

    /// Sends at `rate` per second until `stop` is set (checked between messages).
    pub fn send_until(&self, rate: u64, stop: &AtomicBool) {
        let started = Instant::now();
        let mut j = 0;
        while !stop.load(Ordering::Relaxed) {
            let due = started + Duration::from_micros(j * 1_000_000 / rate);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            self.send(self.sent.fetch_add(1, Ordering::Relaxed));
            j += 1;
        }
        self.flush();
    }

    /// Waits until nothing is in flight (librdkafka retries within its
    /// `message.timeout.ms`; its `flush` returns early on its own timeout).
    pub fn flush(&self) {
        let deadline = Instant::now() + Duration::from_secs(300);
        while self.producer.in_flight_count() > 0 && Instant::now() < deadline {
            let _ = self.producer.flush(Duration::from_secs(5));
        }
        assert_eq!(
            self.producer.in_flight_count(),
            0,
            "deliveries still pending"
        );
    }

    /// Every record acknowledged so far.
    pub fn acked(&self) -> Vec<Record> {
        self.producer.context().acked.lock().unwrap().clone()
    }

    pub fn acked_count(&self) -> u64 {
        self.producer.context().acked.lock().unwrap().len() as u64
    }

    pub fn failed(&self) -> u64 {
        self.producer.context().failed.load(Ordering::Relaxed)
    }

    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Publishes the last increments and stops reporting; how many audit messages it
    /// published in all.
    pub fn finish(&self) -> u64 {
        self.flush();
        self.stop_reporting.store(true, Ordering::Relaxed);
        let reporter = self.reporter.lock().unwrap().take().expect("reporting");
        reporter.join().expect("producer tier reporter")
    }
}

impl Drop for ProducerTier {
    fn drop(&mut self) {
        self.stop_reporting.store(true, Ordering::Relaxed);
    }
}

/// What `topic` holds now ([`testkit::read_log`]) as [`Record`]s.
pub fn read_log(bootstrap: &str, topic: &str, partitions: i32) -> Vec<Record> {
    testkit::read_log(bootstrap, topic, partitions)
        .into_iter()
        .map(|r| Record {
            partition: r.partition,
            offset: r.offset,
            key: String::from_utf8_lossy(&r.key.unwrap_or_default()).into_owned(),
            ts: r.timestamp,
        })
        .collect()
}

/// serve's config for the edge producer → regional in dc1: 10 s windows judged
/// `grace` after they end, every difference paged (thresholds 0), auditors stalled
/// after `stall_after`, alerts to the webhook at `hook`.
///
/// The producer tier reports no progress, so its windows are judged by the clock: its
/// count of a window is taken as complete at window end + grace. A fault that holds
/// its acknowledgements up for longer (an outage of the topic's in-sync replicas) must
/// be outlasted by grace, or the regional tier's count of records acknowledged late is
/// paged as duplication (against a producer count of 0) until they arrive: seen in a
/// run of two_down with 5 s. Production's default grace is 20 minutes.
pub fn serve_config(stall_after: &str, grace: &str, hook: &str) -> web::Config {
    toml::from_str(&format!(
        r#"
[serve]
evaluate_every = "500ms"
[topology]
window = "10s"
grace = "{grace}"
stall_after = "{stall_after}"
tiers = [{{ name = "producer", progress = false }}, {{ name = "regional" }}]
[[topology.edges]]
upstream = "producer"
downstream = "regional"
[[alerting.channels]]
name = "hook"
kind = "webhook"
url = "{hook}"
"#
    ))
    .expect("serve config parses")
}

/// The pipeline on R: an audited topic and its audit topic (one partition, so "the
/// audit topic's leader" is one node; replication factor 3, min.insync.replicas 2),
/// a fresh database, the webhook receiver, serve and its jobs, the collector.
pub struct Rig {
    pub cluster: Cluster,
    pub topic: String,
    pub partitions: i32,
    pub audit_topic: String,
    pub group: String,
    pub pages: Pages,
    /// Dropped with the rig: the database goes at the end of the test.
    _db: testkit::TestDatabase,
    pub state: AppState,
    pub stop: tokio_util::sync::CancellationToken,
    _stop_on_drop: tokio_util::sync::DropGuard,
    services: Vec<Service>,
    jobs: Vec<tokio::task::JoinHandle<()>>,
    wal: tempfile::TempDir,
}

impl Rig {
    /// `topic_config` and `assignment` as [`Cluster::create_topic`] takes them.
    pub async fn start(
        cluster: Cluster,
        name: &str,
        partitions: i32,
        assignment: Option<&[&[i32]]>,
        topic_config: &[(&str, &str)],
        stall_after: &str,
        grace: &str,
    ) -> Rig {
        let topic = testkit::unique(name);
        let audit_topic = testkit::unique(&format!("{name}-audit"));
        cluster
            .create_topic(&topic, partitions, assignment, topic_config)
            .await;
        cluster
            .create_topic(&audit_topic, 1, None, &[("min.insync.replicas", "2")])
            .await;
        let (pages, hook) = crate::e2e::start_receiver().await;
        let db = testkit::fresh_database(&name.replace('-', "_")).await;
        let store = store::Store::connect(db.url()).await.expect("connect");
        store.migrate().await.expect("migrate");
        let state = AppState::new(serve_config(stall_after, grace, &hook), store).expect("state");
        let stop = tokio_util::sync::CancellationToken::new();
        let jobs = state.spawn_jobs(&stop);
        let collector = tokio::spawn(collector::run(
            crate::e2e::collect_config(db.url(), &[("r", &cluster.bootstrap, &audit_topic)], 500),
            stop.clone(),
        ));
        Rig {
            group: testkit::unique(&format!("{name}-regional")),
            cluster,
            topic,
            partitions,
            audit_topic,
            pages,
            _db: db,
            state,
            _stop_on_drop: stop.clone().drop_guard(),
            stop,
            services: vec![collector],
            jobs,
            wal: tempfile::tempdir().unwrap(),
        }
    }

    /// The regional auditor's config (exactly-once, this rig's group).
    pub fn auditor_config(&self) -> audit_service::Config {
        let mut cfg = crate::support::audit_config(
            &self.cluster.bootstrap,
            std::slice::from_ref(&self.topic),
            &self.audit_topic,
            &self.group,
            "regional-dc1-0",
            self.wal.path(),
        );
        cfg.audit.audit_topic_partitions = 1;
        cfg.audit.audit_topic_replication = 3;
        cfg
    }

    /// Starts the regional auditor; it runs until the rig stops.
    pub fn start_auditor(&mut self) {
        let svc = tokio::spawn(audit_service::run(self.auditor_config(), self.stop.clone()));
        self.services.push(svc);
    }

    /// The auditor's transactional id.
    pub fn transactional_id(&self) -> String {
        self.auditor_config().audit.transactional_id()
    }

    /// The producer tier writing to this rig's topic with `props`.
    pub fn producer_tier(&self, props: &[(&str, &str)]) -> Arc<ProducerTier> {
        Arc::new(ProducerTier::start(
            &self.cluster.bootstrap,
            &self.topic,
            self.partitions,
            &self.audit_topic,
            props,
        ))
    }

    /// Waits until the stored regional count reaches `n`; how long it took (None: not
    /// within `timeout`).
    pub async fn wait_counted(&self, n: u64, timeout: Duration) -> Option<Duration> {
        let t = Instant::now();
        testkit::wait_until_async(timeout, || async {
            let got = self
                .try_stored("regional")
                .await
                .map_or(0, |w| w.values().sum());
            if got < n {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            got >= n
        })
        .await
        .then(|| t.elapsed())
    }

    /// Waits until the regional tier's first count is stored; panics after `timeout`
    /// with what each part had done by then, so a failure says which one held it up:
    /// the producer tier's acknowledgements and stored count (the collector works if it
    /// is not 0), and the audit topic's end (the auditor publishes there too).
    pub async fn wait_counting_started(&self, producer: &ProducerTier, timeout: Duration) {
        if self.wait_counted(1, timeout).await.is_some() {
            return;
        }
        let (acked, stored_producer) =
            (producer.acked_count(), self.stored_total("producer").await);
        let audit_end = tokio::task::block_in_place(|| {
            let consumer: BaseConsumer = testkit::client_config(&self.cluster.bootstrap)
                .create()
                .expect("consumer");
            consumer.fetch_watermarks(&self.audit_topic, 0, METADATA_TIMEOUT)
        });
        panic!(
            "counting did not start in {timeout:?}: the producer tier acknowledged {acked} \
             and has {stored_producer} stored; the regional tier has 0 stored; the audit \
             topic's watermarks {audit_end:?}; the cluster's partitions: {:?} {:?}",
            self.cluster.partitions(&self.topic),
            self.cluster.partitions(&self.audit_topic)
        );
    }

    /// The stored count of `tier` over every window of the topic.
    pub async fn stored_total(&self, tier: &str) -> u64 {
        self.stored(tier).await.values().sum()
    }

    /// The stored counts of `tier` per window start.
    pub async fn stored(&self, tier: &str) -> BTreeMap<i64, u64> {
        self.try_stored(tier).await.expect("rows")
    }

    /// [`Rig::stored`], or the database's error (the shared server may drop a
    /// connection; a poll asks again).
    async fn try_stored(&self, tier: &str) -> Result<BTreeMap<i64, u64>, store::StoreError> {
        let now = common::now_ms();
        let rows = self
            .state
            .store
            .topic_windows(
                &self.topic,
                store::TimeRange::new(now - 3_600_000, now + 3_600_000),
            )
            .await?;
        let mut out = BTreeMap::new();
        for r in rows.iter().filter(|r| r.tier == tier) {
            *out.entry(r.window_start_ms).or_default() += r.count;
        }
        Ok(out)
    }

    /// Waits (bounded) until both tiers' stored counts equal `producer` and
    /// `regional` and an evaluation after that judged every window final.
    pub async fn wait_final(
        &self,
        producer: &BTreeMap<i64, u64>,
        regional: &BTreeMap<i64, u64>,
        timeout: Duration,
    ) -> bool {
        let windows: Vec<i64> = producer.keys().chain(regional.keys()).copied().collect();
        let from = *windows.iter().min().expect("traffic");
        let to = windows.iter().max().unwrap() + WINDOW_MS;
        crate::e2e::wait_final(
            &self.state,
            &self.topic,
            (from, to),
            &[
                ("producer", producer.values().sum()),
                ("regional", regional.values().sum()),
            ],
            false,
            timeout,
        )
        .await
    }

    /// Stops every service and job; a service that failed fails the test.
    pub async fn shutdown(&mut self) {
        self.stop.cancel();
        for s in self.services.drain(..) {
            tokio::time::timeout(Duration::from_secs(90), s)
                .await
                .expect("a service stops within 90 s")
                .expect("service task")
                .expect("service result");
        }
        for j in self.jobs.drain(..) {
            j.await.expect("job");
        }
    }
}

/// Steady traffic under the regional auditor: the rig of a topic of `partitions` (RF 3,
/// min.insync.replicas 2) with its auditor running, and the producer tier (`acks=all`,
/// idempotent) writing `rate` messages a second from a thread of its own until
/// [`Steady::stop_traffic`] (or the drop of this value).
pub struct Steady {
    pub rig: Rig,
    pub producer: Arc<ProducerTier>,
    stop: Arc<AtomicBool>,
    traffic: Option<std::thread::JoinHandle<()>>,
}

impl Steady {
    /// `stall_after` and `grace` as [`serve_config`] takes them.
    pub async fn start(
        name: &str,
        partitions: i32,
        rate: u64,
        stall_after: &str,
        grace: &str,
    ) -> Steady {
        let cluster = Cluster::take().await;
        let mut rig = Rig::start(
            cluster,
            name,
            partitions,
            None,
            &[("min.insync.replicas", "2")],
            stall_after,
            grace,
        )
        .await;
        rig.start_auditor();
        let producer = rig.producer_tier(&[
            ("acks", "all"),
            ("enable.idempotence", "true"),
            ("message.timeout.ms", "300000"),
        ]);
        let stop = Arc::new(AtomicBool::new(false));
        let traffic = {
            let (p, stop) = (producer.clone(), stop.clone());
            std::thread::spawn(move || p.send_until(rate, &stop))
        };
        // The producer's first acknowledgement waits for its producer id. A node
        // restarted by the test before handed none out for ~95 s in a fresh-clone run
        // (its broker asked the controller for a block of ids only then; the
        // transactional auditor had its id at once): the tests' bounds on counting
        // start after it.
        let t = std::time::Instant::now();
        let acked = tokio::task::block_in_place(|| {
            testkit::wait_until(Duration::from_secs(240), || producer.acked_count() > 0)
        });
        assert!(
            acked,
            "the producer tier had no acknowledgement in 240 s: sent {}, failed {}",
            producer.sent(),
            producer.failed()
        );
        if t.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "{name}: the producer tier's first acknowledgement took {:?}",
                t.elapsed()
            );
        }
        Steady {
            rig,
            producer,
            stop,
            traffic: Some(traffic),
        }
    }

    /// Stops the traffic, delivers what is in flight and the producer tier's last
    /// increments; what it acknowledged, and what the log holds.
    pub fn stop_traffic(&mut self) -> (Vec<Record>, Vec<Record>) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.traffic.take() {
            t.join().expect("traffic");
        }
        self.producer.finish();
        let log = read_log(
            &self.rig.cluster.bootstrap,
            &self.rig.topic,
            self.rig.partitions,
        );
        (self.producer.acked(), log)
    }
}

impl Drop for Steady {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The dedup keys of the pages of `verdict` with `action` (trigger or resolve).
pub fn page_keys(pages: &[serde_json::Value], verdict: &str, action: &str) -> BTreeSet<String> {
    pages
        .iter()
        .filter(|p| p["verdict"] == verdict && p["action"] == action)
        .map(|p| p["dedup_key"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Both tiers' stored counts equal the ground truth window for window, and every
/// window was judged final with them (`final_ok`, from [`Rig::wait_final`]).
pub fn assert_exact_and_final(
    final_ok: bool,
    (want_producer, stored_producer): (&BTreeMap<i64, u64>, &BTreeMap<i64, u64>),
    (want_regional, stored_regional): (&BTreeMap<i64, u64>, &BTreeMap<i64, u64>),
) {
    let (p, r) = (
        window_diff(want_producer, stored_producer),
        window_diff(want_regional, stored_regional),
    );
    assert!(
        p.is_empty() && r.is_empty(),
        "stored counts differ from ground truth; producer {p:?}; regional {r:?}"
    );
    assert!(final_ok, "windows not all judged final");
}

/// Per-window differences between `truth` and `stored`, for assertion messages.
pub fn window_diff(truth: &BTreeMap<i64, u64>, stored: &BTreeMap<i64, u64>) -> Vec<String> {
    let keys: BTreeSet<i64> = truth.keys().chain(stored.keys()).copied().collect();
    keys.into_iter()
        .filter_map(|w| {
            let (t, s) = (
                truth.get(&w).copied().unwrap_or(0),
                stored.get(&w).copied().unwrap_or(0),
            );
            (t != s).then(|| format!("window {w}: truth {t}, stored {s}"))
        })
        .collect()
}
