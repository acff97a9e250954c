//! Chaos against the real broker (cluster A): three `kafka-audit audit` processes in
//! one group while a producer writes; a random instance is SIGKILLed at random
//! instants at least 20 times and restarted; then a graceful rolling restart. After
//! draining, the per-window counts and checksums equal the ground truth: 0 lost,
//! 0 counted twice.

#[path = "../../audit-service/tests/support/mod.rs"]
mod support;

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
        let toml = format!(
            r#"
[kafka]
bootstrap_servers = "{bootstrap}"
[kafka.consumer]
"session.timeout.ms" = 10000
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
enabled = false
[log]
level = "warn,audit_service=info"
"#,
            wal = dir.join("wal").display()
        );
        std::fs::write(&config, toml).unwrap();
        Instance {
            config,
            log: dir.join(format!("{id}.log")),
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

    /// SIGTERM and wait for a clean exit within a bound.
    fn sigterm(&mut self) {
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

        for k in 0..KILLS {
            std::thread::sleep(rng.millis(200, 2_500));
            let i = (rng.next() % 3) as usize;
            instances[i].assert_running();
            instances[i].sigkill();
            std::thread::sleep(rng.millis(0, 1_500));
            instances[i].start();
            reader.poll_for(Duration::from_millis(10));
            eprintln!(
                "kill {k}: instance {i}; produced {}",
                produced.load(Ordering::Relaxed)
            );
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
        // How often a kill left a pending WAL entry, and what the restart rule did.
        let logs: String = instances
            .iter()
            .map(|i| std::fs::read_to_string(&i.log).unwrap_or_default())
            .collect();
        for marker in [
            "resending pending WAL entry",
            "already published",
            "discarding",
        ] {
            eprintln!(
                "restart rule: {:>4} x {marker}",
                logs.matches(marker).count()
            );
        }
        eprintln!(
            "exact: {n} messages over {} windows; {} increments, {} duplicate UUIDs (resends, dropped by the collector)",
            truth.len(),
            reader.increments,
            reader.duplicates
        );
    });
}
