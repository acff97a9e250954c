//! Chaos against the real broker (cluster A): three `kafka-audit audit` processes in
//! one group while a producer writes; a random instance is SIGKILLed 20 times (more,
//! up to 60, until both branches below were taken) and restarted: some at random
//! instants and restarted at once (static membership gives it its partitions back),
//! some right after an interval report (its transaction in flight), some only after
//! the other two took its partitions over, and some while partitions move (a second
//! instance killed during the rebalance a restart causes); then a graceful rolling
//! restart. Each recovery's restart-rule decisions
//! are read from its log; resends (same owner) and discards (partitions moved) must
//! both occur. After draining, the per-window counts and checksums equal the ground
//! truth: 0 lost, 0 counted twice.

use crate::support;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::*;

const PARTITIONS: i32 = 12;
const WINDOWS: i64 = 5;
const KILLS: usize = 20;

struct Instance {
    config: PathBuf,
    log: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Instance {
    fn new(
        dir: &Path,
        bootstrap: &str,
        topic: &str,
        audit_topic: &str,
        group: &str,
        id: &str,
    ) -> Instance {
        let config = dir.join(format!("{id}.toml"));
        let port = free_port();
        let toml = format!(
            r#"
[kafka]
bootstrap_servers = "{bootstrap}"
[kafka.consumer]
"session.timeout.ms" = 6000
[audit]
instance_id = "{id}"
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
enabled = true
listen = "127.0.0.1:{port}"
[log]
level = "warn,audit_service=info"
"#,
            wal = dir.join("wal").display()
        );
        std::fs::write(&config, toml).unwrap();
        Instance {
            config,
            log: dir.join(format!("{id}.log")),
            port,
            child: None,
        }
    }

    fn start(&mut self) {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_kafka-audit"))
            .args(["audit", "--config"])
            .arg(&self.config)
            .env("RUST_LOG", "warn,audit_service=info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn kafka-audit audit");
        self.child = Some(child);
    }

    fn sigkill(&mut self) {
        let mut c = self.child.take().expect("running");
        c.kill().unwrap(); // SIGKILL on Unix
        c.wait().unwrap();
    }

    /// SIGTERM and wait for a clean exit within a bound. First waits (bounded) until it
    /// serves its ops port: a process signalled before its runtime installed the handler
    /// (just restarted by a kill round) dies by the default action, which says nothing
    /// about its shutdown.
    fn sigterm(&mut self) {
        assert!(
            testkit::wait_until(Duration::from_secs(60), || ops_get(self.port, "/healthz")
                .is_some()),
            "instance never served its ops port; log {}",
            self.log.display()
        );
        let mut c = self.child.take().expect("running");
        let st = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = c.try_wait().unwrap() {
                assert!(
                    status.success(),
                    "instance exited with {status} after SIGTERM; log {}",
                    self.log.display()
                );
                return;
            }
            assert!(Instant::now() < deadline, "no exit within 60 s of SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Bytes of its log so far: where the next recovery's lines start.
    fn log_len(&self) -> u64 {
        std::fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0)
    }

    /// Waits (bounded) until it has just written an interval report: its transaction
    /// is then about to run or running, so a kill leaves a pending WAL entry.
    fn await_report(&self) {
        let reports = || metric(self.port, "reports_total{kind=\"interval\"}");
        let before = reports();
        let deadline = Instant::now() + Duration::from_secs(5);
        while reports() <= before && Instant::now() < deadline {}
    }

    /// Partitions it owns now (0 while it does not answer).
    fn assigned(&self) -> f64 {
        metric(self.port, "kafka_audit_assigned_partitions ")
    }

    fn assert_running(&mut self) {
        if let Some(c) = &mut self.child {
            if let Some(status) = c.try_wait().unwrap() {
                panic!(
                    "instance died on its own ({status}); log {}",
                    self.log.display()
                );
            }
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// xorshift64*: a seeded sequence of random instants, printed so a failure replays.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_survive_20_sigkills_and_a_rolling_restart_with_exact_counts() {
    let _alone = crate::ALONE.lock().await;
    let bootstrap = testkit::kafka_a();
    let topic = testkit::create_unique_topic(&bootstrap, "chaos", PARTITIONS).await;
    let audit_topic = testkit::create_unique_topic(&bootstrap, "chaos-audit", 3).await;
    let group = testkit::unique("chaos-group");
    let dir = tempfile::tempdir().unwrap();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("chaos seed {seed}, logs in {}", dir.path().display());
    let mut rng = Rng(seed);

    tokio::task::block_in_place(|| {
        let mut instances: Vec<Instance> = (0..3)
            .map(|i| {
                Instance::new(
                    dir.path(),
                    &bootstrap,
                    &topic,
                    &audit_topic,
                    &group,
                    &format!("{}-{i}", testkit::unique("c")),
                )
            })
            .collect();
        for inst in &mut instances {
            inst.start();
        }

        // A producer writes known messages throughout.
        let stop = Arc::new(AtomicBool::new(false));
        let truth = Arc::new(Mutex::new(Totals::new()));
        let produced = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let writer = {
            let (stop, truth, produced, bootstrap, topic) = (
                stop.clone(),
                truth.clone(),
                produced.clone(),
                bootstrap.clone(),
                topic.clone(),
            );
            std::thread::spawn(move || {
                let p = producer(&bootstrap);
                let base = base_time();
                let mut seq = 0;
                while !stop.load(Ordering::Relaxed) {
                    let mut t = truth.lock().unwrap();
                    produce_known(&p, &topic, PARTITIONS, 200, seq, base, WINDOWS, &mut t);
                    drop(t);
                    seq += 200;
                    produced.store(seq, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        };
        let mut reader = AuditReader::new(&bootstrap, &audit_topic, 3);

        // Each restart of a killed instance: (kill number, instance, how, where its
        // log lines start).
        let mut recoveries: Vec<(usize, usize, &str, u64)> = Vec::new();
        let mut k = 0;
        // At least KILLS kills; more (bounded) until both restart branches the test
        // asserts were taken: a resend, and a discard in a recovery after a move (the
        // same measure as the assertions below, or the loop could stop on a discard
        // after an in-place restart and the assertion then fail).
        let mut round = 0;
        while k < KILLS
            || (k < 3 * KILLS && {
                let d = restart_decisions(&instances, &recoveries, false);
                d.totals[0] == 0 || d.discards_after_move == 0
            })
        {
            // Rounds of four: a kill at a random instant, one right after a report,
            // both restarted at once; one restarted after its partitions moved; one
            // like that with a second kill while partitions move again.
            let phase = round % 4;
            round += 1;
            std::thread::sleep(rng.millis(200, 2_500));
            let i = (rng.next() % 3) as usize;
            instances[i].assert_running();
            if phase == 1 {
                // Its transaction is then in flight: the kill leaves a pending entry.
                instances[i].await_report();
            }
            instances[i].sigkill();
            k += 1;
            let how = if phase >= 2 {
                // The other two take its partitions over before it comes back (its
                // static membership times out): its pending entries' partitions moved.
                let others: Vec<usize> = (0..3).filter(|&j| j != i).collect();
                let moved = testkit::wait_until(Duration::from_secs(60), || {
                    others.iter().map(|&j| instances[j].assigned()).sum::<f64>()
                        >= PARTITIONS as f64
                });
                assert!(
                    moved,
                    "kill {k}: the others never took instance {i}'s partitions"
                );
                "after its partitions moved"
            } else {
                std::thread::sleep(rng.millis(0, 1_500));
                if phase == 1 {
                    "at once, killed right after a report"
                } else {
                    "at once"
                }
            };
            recoveries.push((k, i, how, instances[i].log_len()));
            instances[i].start();
            eprintln!(
                "kill {k}: instance {i}, restarted {how}; produced {}",
                produced.load(Ordering::Relaxed)
            );
            if phase == 3 {
                // Its return moves partitions again: kill another one meanwhile.
                std::thread::sleep(rng.millis(0, 1_000));
                let j = (i + 1 + (rng.next() % 2) as usize) % 3;
                instances[j].assert_running();
                instances[j].sigkill();
                k += 1;
                std::thread::sleep(rng.millis(0, 1_500));
                recoveries.push((
                    k,
                    j,
                    "killed while partitions moved",
                    instances[j].log_len(),
                ));
                instances[j].start();
                eprintln!("kill {k}: instance {j}, killed while partitions moved");
            }
            reader.poll_for(Duration::from_millis(10));
        }
        // Graceful rolling restart while the producer still writes.
        for (i, inst) in instances.iter_mut().enumerate() {
            let before = reader.total_count(&topic);
            inst.sigterm();
            inst.start();
            assert!(
                reader.wait_for_count(&topic, before + 1, Duration::from_secs(60)),
                "counting did not resume after restarting instance {i}"
            );
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        let n = produced.load(Ordering::Relaxed);
        let ok = reader.wait_for_count(&topic, n, Duration::from_secs(120));
        for inst in &mut instances {
            inst.assert_running();
        }
        for inst in &mut instances {
            inst.sigterm();
        }
        reader.poll_for(Duration::from_secs(2));
        let truth = truth.lock().unwrap();
        let d = diff(&truth, &reader.topic_totals(&topic));
        assert!(
            ok && d.is_empty(),
            "{} produced, {} counted; per-window differences:\n{}",
            n,
            reader.total_count(&topic),
            d.join("\n")
        );
        // What the restart rule did in each recovery (its log lines up to the
        // instance's next restart).
        let d = restart_decisions(&instances, &recoveries, true);
        let totals = d.totals;
        let discards_after_move = d.discards_after_move;
        eprintln!(
            "restart rule in total: {} resent, {} already published, {} discarded",
            totals[0], totals[1], totals[2]
        );
        assert!(
            totals[0] >= 1,
            "no recovery resent a pending entry (the same-owner branch was never taken)"
        );
        assert!(
            discards_after_move >= 1,
            "no recovery after a partition move discarded a pending entry (the moved-partition branch was never taken)"
        );
        eprintln!(
            "exact: {n} messages over {} windows; {} increments, {} duplicate UUIDs (resends, dropped by the collector)",
            truth.len(),
            reader.increments,
            reader.duplicates
        );
    });
}

/// What the restart rule decided in the recoveries so far, from each instance's log
/// lines between its restart and its next one.
struct RestartDecisions {
    /// Resent, already published, discarded.
    totals: [usize; 3],
    /// Discards in recoveries after the instance's partitions moved.
    discards_after_move: usize,
}

fn restart_decisions(
    instances: &[Instance],
    recoveries: &[(usize, usize, &str, u64)],
    print: bool,
) -> RestartDecisions {
    let logs: Vec<String> = instances
        .iter()
        .map(|i| std::fs::read_to_string(&i.log).unwrap_or_default())
        .collect();
    let mut d = RestartDecisions {
        totals: [0; 3],
        discards_after_move: 0,
    };
    for (r, &(k, i, how, from)) in recoveries.iter().enumerate() {
        let to = recoveries[r + 1..]
            .iter()
            .find(|x| x.1 == i)
            .map(|x| x.3 as usize)
            .unwrap_or(logs[i].len())
            .min(logs[i].len());
        let lines = logs[i].get(from as usize..to).unwrap_or_default();
        let counts = [
            "resending pending WAL entry",
            "pending WAL entry was already published",
            "discarding pending WAL entry",
        ]
        .map(|m| lines.matches(m).count());
        for (t, c) in d.totals.iter_mut().zip(counts) {
            *t += c;
        }
        if !how.starts_with("at once") {
            d.discards_after_move += counts[2];
        }
        if print {
            eprintln!(
                "recovery of kill {k:>2} (instance {i}, {how}): {} resent, {} already published, {} discarded",
                counts[0], counts[1], counts[2]
            );
            for l in lines.lines().filter(|l| {
                l.contains("pending WAL entry")
                    || l.contains("committed offset")
                    || l.contains("resend failed")
                    || l.contains("partitions assigned")
            }) {
                eprintln!("    {l}");
            }
        }
    }
    d
}
