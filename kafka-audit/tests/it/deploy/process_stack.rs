//! The compose stack without Docker: `kafka-audit migrate`, `audit`, `collect` and
//! `serve` run as processes (the real binary) with the compose configs, addresses
//! swapped for the dev Kafka and PostgreSQL; they answer the health checks, count
//! produced messages into the store, expose the metrics the rules use, and exit 0 on
//! SIGTERM.

use std::path::{Path, PathBuf};

use super::support::*;

/// A `kafka-audit` child process; killed if the test ends without stopping it.
pub(crate) struct Process {
    name: &'static str,
    child: std::process::Child,
    log: PathBuf,
}

impl Process {
    /// Its peak resident set (`VmHWM` of /proc/PID/status), in KiB.
    pub(crate) fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no VmHWM for {}: {status}", self.name))
    }

    pub(crate) fn start(
        name: &'static str,
        args: &[&str],
        env: &[(&str, &str)],
        dir: &Path,
    ) -> Process {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_kafka-audit"))
            .args(args)
            .envs(env.iter().copied())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("start kafka-audit {name}: {e}"));
        Process { name, child, log }
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, as `docker stop`, Kubernetes and systemd send, then waits: a clean
    /// shutdown exits 0 (which systemd's Restart=on-failure does not restart).
    pub(crate) fn stop(mut self) {
        let pid = self.child.id().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(sent.success());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(45);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(
                    status.success(),
                    "{} exited with {status} after SIGTERM:\n{}",
                    self.name,
                    self.log()
                );
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} did not stop within 45 s of SIGTERM:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    pub(crate) fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("{} exited with {status}:\n{}", self.name, self.log());
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn http_get(url: &str) -> Option<(u16, String)> {
    let response = reqwest::get(url).await.ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.ok()?))
}

/// The value of an unlabelled sample in Prometheus text, or the sum over its label sets.
fn sample_sum(metrics: &str, name: &str, label_filter: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| {
            (l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{")))
                && l.contains(label_filter)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Polls `probe` every 250 ms until it returns `Some`, for up to `secs`.
async fn eventually<T, F, Fut>(secs: u64, what: &str, procs: &mut [&mut Process], mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        for p in procs.iter_mut() {
            p.assert_running();
        }
        if std::time::Instant::now() > deadline {
            let logs: Vec<String> = procs
                .iter()
                .map(|p| format!("--- {} ---\n{}", p.name, p.log()))
                .collect();
            panic!("{what}: not within {secs} s\n{}", logs.join("\n"));
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// A compose config with the addresses and names of this test: the compose network's
/// `kafka:9092` becomes the dev cluster, names become unique so that concurrent tests
/// on the shared cluster do not meet.
fn compose_config(file: &str, edit: impl FnOnce(&mut toml::Table)) -> String {
    let mut doc: toml::Table =
        toml::from_str(&read(&repo().join("deploy/compose/config").join(file))).unwrap();
    edit(&mut doc);
    toml::to_string(&doc).unwrap()
}

fn table<'a>(doc: &'a mut toml::Table, key: &str) -> &'a mut toml::Table {
    doc.get_mut(key)
        .and_then(toml::Value::as_table_mut)
        .unwrap_or_else(|| panic!("no [{key}]"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_configs_run_the_pipeline_with_the_real_binary() {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    use store::VerdictReads;
    let bootstrap = testkit::kafka_a();
    let db = testkit::fresh_database("compose_smoke").await;
    let dir = std::env::temp_dir().join(testkit::unique("compose-smoke"));
    std::fs::create_dir_all(&dir).unwrap();
    let topic = testkit::unique("compose-smoke");
    let audit_topic = testkit::unique("compose-smoke-audit");
    testkit::create_topic(&bootstrap, &topic, 3).await;
    let (ops, ingest, api) = (free_port(), free_port(), free_port());

    let audit_toml = compose_config("audit.toml", |d| {
        table(d, "kafka").insert("bootstrap_servers".into(), bootstrap.clone().into());
        let a = table(d, "audit");
        a.insert("group_id".into(), testkit::unique("compose-smoke").into());
        a.insert("topic_regex".into(), toml::Value::Array(vec![]));
        a.insert(
            "topics".into(),
            vec![toml::Value::from(topic.clone())].into(),
        );
        a.insert("audit_topic".into(), audit_topic.clone().into());
        a.insert("wal_dir".into(), dir.join("wal").to_str().unwrap().into());
        table(d, "ops").insert("listen".into(), format!("127.0.0.1:{ops}").into());
    });
    let collect_toml = compose_config("collect.toml", |d| {
        let source = d["sources"].as_array_mut().unwrap()[0]
            .as_table_mut()
            .unwrap();
        source.insert(
            "topics".into(),
            vec![toml::Value::from(audit_topic.clone())].into(),
        );
        source.insert("group_id".into(), testkit::unique("compose-smoke").into());
        table(source, "kafka").insert("bootstrap_servers".into(), bootstrap.clone().into());
        table(d, "http").insert("listen".into(), format!("127.0.0.1:{ingest}").into());
    });
    let serve_toml = compose_config("serve.toml", |d| {
        let s = table(d, "serve");
        s.insert("listen".into(), format!("127.0.0.1:{api}").into());
    });
    for (name, text) in [
        ("audit.toml", &audit_toml),
        ("collect.toml", &collect_toml),
        ("serve.toml", &serve_toml),
    ] {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let config = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let instance = testkit::unique("compose-smoke");

    // As compose: `migrate` first, with the URL from the environment.
    let migrate = std::process::Command::new(env!("CARGO_BIN_EXE_kafka-audit"))
        .arg("migrate")
        .env("KAFKA_AUDIT__STORE__URL", db.url())
        .output()
        .unwrap();
    assert!(
        migrate.status.success(),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );

    // The instance id from the environment, as Kubernetes and systemd set it.
    let audit_cfg = config("audit.toml");
    let mut audit = Process::start(
        "audit",
        &["audit", "--config", &audit_cfg],
        &[("KAFKA_AUDIT__AUDIT__INSTANCE_ID", &instance)],
        &dir,
    );
    let collect_cfg = config("collect.toml");
    let mut collect = Process::start(
        "collect",
        &["collect", "--config", &collect_cfg],
        &[("KAFKA_AUDIT__STORE__URL", db.url())],
        &dir,
    );
    let serve_cfg = config("serve.toml");
    // The database URL from the environment, as compose, Kubernetes and systemd set it.
    let mut serve = Process::start(
        "serve",
        &["serve", "--config", &serve_cfg],
        &[("KAFKA_AUDIT__SERVE__DATABASE_URL", db.url())],
        &dir,
    );

    // The health checks of the compose file and the Kubernetes probes answer 200.
    for (port, path) in [(ops, "/healthz"), (ingest, "/healthz"), (api, "/healthz")] {
        let url = format!("http://127.0.0.1:{port}{path}");
        eventually(
            60,
            &url,
            &mut [&mut audit, &mut collect, &mut serve],
            || async { http_get(&url).await.filter(|(s, _)| *s == 200) },
        )
        .await;
    }
    eventually(60, "auditor assigned", &mut [&mut audit], || async {
        let (_, m) = http_get(&format!("http://127.0.0.1:{ops}/metrics")).await?;
        (sample_sum(&m, "kafka_audit_assigned_partitions", "") >= 3.0).then_some(())
    })
    .await;

    const N: usize = 300;
    let producer: FutureProducer = testkit::client_config(&bootstrap).create().unwrap();
    let now = now_ms();
    for i in 0..N {
        let payload = format!("{{\"ts\":{now},\"i\":{i}}}");
        let key = i.to_string();
        producer
            .send(
                FutureRecord::to(&topic).key(&key).payload(&payload),
                std::time::Duration::from_secs(10),
            )
            .await
            .unwrap();
    }

    // Counted by the auditor, published, collected into the store.
    let store = store::Store::connect(db.url()).await.unwrap();
    let rows = eventually(
        90,
        "collected counts",
        &mut [&mut audit, &mut collect],
        || async {
            let rows = store
                .topic_windows(&topic, store::TimeRange::new(0, i64::MAX))
                .await
                .ok()?;
            (rows.iter().map(|r| r.count).sum::<u64>() == N as u64).then_some(rows)
        },
    )
    .await;
    assert!(rows
        .iter()
        .all(|r| r.tier == "regional" && r.datacenter == "dc1"));
    // The health check of the compose file and the Kubernetes probe answer 200 once
    // serve has evaluated.
    let readyz = format!("http://127.0.0.1:{api}/readyz");
    eventually(60, "/readyz ready", &mut [&mut serve], || async {
        http_get(&readyz).await.filter(|(s, _)| *s == 200)
    })
    .await;

    // The metrics the alert rules and dashboards use are exposed with values.
    let (_, m) = http_get(&format!("http://127.0.0.1:{ops}/metrics"))
        .await
        .unwrap();
    assert_eq!(
        sample_sum(&m, "kafka_audit_consumed_messages_total", ""),
        N as f64
    );
    assert!(sample_sum(&m, "kafka_audit_published_messages_total", "") > 0.0);
    let (_, m) = http_get(&format!("http://127.0.0.1:{ingest}/metrics"))
        .await
        .unwrap();
    assert!(
        sample_sum(
            &m,
            "kafka_audit_collector_messages_total",
            "outcome=\"Accepted\""
        ) > 0.0
    );
    assert_eq!(sample_sum(&m, "kafka_audit_collector_store_up", ""), 1.0);

    // The web service evaluates the stored windows (every 15 s in the compose config).
    let url = format!("http://127.0.0.1:{api}/api/v1/topics");
    eventually(60, "topic in /api/v1/topics", &mut [&mut serve], || async {
        http_get(&url)
            .await
            .filter(|(s, body)| *s == 200 && body.contains(&topic))
    })
    .await;
    let (_, m) = http_get(&format!("http://127.0.0.1:{api}/metrics"))
        .await
        .unwrap();
    assert!(sample_sum(&m, "kafka_audit_evaluations_total", "") >= 1.0);

    serve.stop();
    collect.stop();
    audit.stop();
    // The auditor took its instance id from the environment: its WAL is named by it.
    assert!(dir.join("wal").join(&instance).is_dir());
    let _ = std::fs::remove_dir_all(&dir);
}
