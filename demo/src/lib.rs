//! `kafka-audit demo`: the whole pipeline in one process, with nothing installed.
//!
//! Two embedded Kafka clusters (librdkafka's mock cluster): `regional` (datacenter
//! `dc1`) and `aggregate` (datacenter `agg`). A traffic generator is the producer tier
//! (audit-lib embedded); a replicator copies regional → aggregate and injects loss,
//! duplication and delay in chosen windows; one auditor per cluster (the real
//! audit-service, at-least-once since the mock cluster has no transactions); the real
//! collector into SQLite; the real web service with the dashboard. Everything is
//! configured through the same TOML files the subcommands read, written to the demo
//! directory so they can be looked at and reused.
//!
//! A crate of its own, so that the `kafka-audit` binary crate stays a thin dispatcher
//! and the demo's dependencies (the mock cluster, the replicator, the traffic
//! generator) are named here only.

mod replicator;
mod traffic;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use audit_lib::Identity;
use clap::Args;
use rdkafka::mocking::MockCluster;
use store::Deployment;
use tokio_util::sync::CancellationToken;

const TOPICS: [&str; 3] = ["orders", "payments", "clicks"];
const AUDIT_TOPIC: &str = "_kafka_audit";

#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    /// Where the dashboard and the API listen.
    #[arg(
        long,
        default_value = "127.0.0.1:8080",
        env = "KAFKA_AUDIT_DEMO_LISTEN"
    )]
    pub listen: SocketAddr,
    /// Directory for the SQLite store, the auditors' WAL and the generated configs
    /// (default: a new directory under the system's temp dir).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Window size (short, so that verdicts come within minutes).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub window: Duration,
    /// How long after a window's end late data is waited for before judging it.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub grace: Duration,
    /// Messages per second produced over all topics.
    #[arg(long, default_value_t = 300)]
    pub rate: u32,
    /// Fraction of `payments` messages the replicator drops, in every third window.
    #[arg(long, default_value_t = 0.05)]
    pub loss: f64,
    /// Fraction of `clicks` messages the replicator sends twice, in every third window.
    #[arg(long, default_value_t = 0.03)]
    pub duplication: f64,
    /// How long the replicator holds back every `orders` message.
    #[arg(long, default_value = "4s", value_parser = humantime::parse_duration)]
    pub delay: Duration,
    /// Fraction of messages whose event time is late (by up to half a window).
    #[arg(long, default_value_t = 0.02)]
    pub late: f64,
    /// Writes what the replicator injected, per topic and window, to this JSON file.
    #[arg(long)]
    pub injections: Option<PathBuf>,
    /// Stop by itself after this long (default: run until ctrl-c).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
}

pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    common::init_tracing(&common::LogConfig {
        level: "info,rdkafka=warn,librdkafka=error".into(),
        ..Default::default()
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let shutdown = common::shutdown_on_signals();
        if let Some(d) = args.duration {
            let s = shutdown.clone();
            tokio::spawn(async move {
                tokio::time::sleep(d).await;
                tracing::info!("demo: --duration reached, stopping");
                s.cancel();
            });
        }
        run_demo(args, shutdown).await
    })
}

/// A small, fast generator (splitmix64): the demo needs variety, not cryptography.
pub(crate) struct Rng(u64);

impl Rng {
    pub fn seeded() -> Rng {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Rng(nanos ^ u64::from(std::process::id()).rotate_left(32))
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p && p > 0.0
    }
}

fn humantime_str(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn audit_toml(
    name: &str,
    datacenter: &str,
    bootstrap: &str,
    dir: &Path,
    args: &DemoArgs,
) -> String {
    let topics: Vec<String> = TOPICS.iter().map(|t| toml_str(t)).collect();
    format!(
        r#"# Generated by `kafka-audit demo`: the {name} tier's auditor.
[kafka]
bootstrap_servers = {bootstrap}

[audit]
instance_id = "demo-{name}-0"
tier = "{name}"
datacenter = "{datacenter}"
group_id = "kafka-audit-demo-{name}"
topics = [{topics}]
audit_topic = "{AUDIT_TOPIC}"
create_audit_topic = false
# librdkafka's mock cluster accepts transactional calls but does not implement them.
mode = "at-least-once"
report_interval = "2s"
wal_dir = {wal}
static_membership = false
# The mock cluster does not answer DescribeConfigs.
durability_checks = false

[audit.event_time]
window_size = "{window}"

[ops]
enabled = false
"#,
        bootstrap = toml_str(bootstrap),
        topics = topics.join(", "),
        wal = toml_str(&dir.join("wal").display().to_string()),
        window = humantime_str(args.window),
    )
}

fn collect_toml(db: &str, regional: &str, aggregate: &str) -> String {
    format!(
        r#"# Generated by `kafka-audit demo`: the collector, both clusters' audit topics into SQLite.
[store]
url = {db}
migrate = true

[[sources]]
name = "regional"
topics = ["{AUDIT_TOPIC}"]
group_id = "kafka-audit-demo-collector"
[sources.kafka]
bootstrap_servers = {regional}

[[sources]]
name = "aggregate"
topics = ["{AUDIT_TOPIC}"]
group_id = "kafka-audit-demo-collector"
[sources.kafka]
bootstrap_servers = {aggregate}

[http]
enabled = false

[batch]
max_wait = "100ms"
"#,
        db = toml_str(db),
        regional = toml_str(regional),
        aggregate = toml_str(aggregate),
    )
}

fn serve_toml(db: &str, args: &DemoArgs) -> String {
    let mut s = format!(
        r#"# Generated by `kafka-audit demo`: the web service and the topology it judges.
[serve]
listen = "{listen}"
database_url = {db}
migrate = false
evaluate_every = "2s"

[topology]
# No `window`: learned from the auditors' audit.event_time.window_size (the stored
# windows), the one source of truth.
grace = "{grace}"
stall_after = "2m"

[[topology.tiers]]
name = "producer"
# Producers embed audit-lib and read nothing: no progress watermarks.
progress = false

[[topology.tiers]]
name = "regional"

[[topology.tiers]]
name = "aggregate"

[[topology.edges]]
upstream = "producer"
downstream = "regional"

[[topology.edges]]
upstream = "regional"
downstream = "aggregate"
[topology.edges.datacenters]
dc1 = "agg"
"#,
        listen = args.listen,
        db = toml_str(db),
        grace = humantime_str(args.grace),
    );
    // Keep the file readable when printed.
    let _ = writeln!(s);
    s
}

/// `--dir`, or a new directory in the temporary directory. The default name is
/// predictable (the pid): on a shared `/tmp` another user could create it first and
/// read or plant the demo's files, so it must not exist yet and is made private.
fn demo_dir(given: Option<&std::path::Path>) -> anyhow::Result<std::path::PathBuf> {
    if let Some(d) = given {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        return Ok(d.to_path_buf());
    }
    let dir = std::env::temp_dir().join(format!("kafka-audit-demo-{}", std::process::id()));
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(&dir).with_context(|| {
        format!(
            "creating {} (it must not exist yet; pass --dir to choose another)",
            dir.display()
        )
    })?;
    Ok(dir)
}

async fn run_demo(args: DemoArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.window >= Duration::from_secs(5) && args.window.as_millis() % 1000 == 0,
        "--window must be a whole number of seconds, at least 5s"
    );
    let dir = demo_dir(args.dir.as_deref())?;

    // The two clusters. Partitions stay small (the mock cluster keeps ~5 MiB each) and
    // the demo's producers compress with lz4.
    let regional = MockCluster::new(1).context("starting the regional mock cluster")?;
    let aggregate = MockCluster::new(1).context("starting the aggregate mock cluster")?;
    for cluster in [&regional, &aggregate] {
        for t in TOPICS {
            cluster
                .create_topic(t, 3, 1)
                .context("creating a demo topic")?;
        }
        cluster
            .create_topic(AUDIT_TOPIC, 3, 1)
            .context("creating the audit topic")?;
    }
    let regional_bootstrap = regional.bootstrap_servers();
    let aggregate_bootstrap = aggregate.bootstrap_servers();

    // Configs, written where the user can read them, loaded by the subcommands' own loaders.
    let db = format!("sqlite:{}", dir.join("kafka-audit-demo.db").display());
    let files = [
        (
            "audit-regional.toml",
            audit_toml("regional", "dc1", &regional_bootstrap, &dir, &args),
        ),
        (
            "audit-aggregate.toml",
            audit_toml("aggregate", "agg", &aggregate_bootstrap, &dir, &args),
        ),
        (
            "collect.toml",
            collect_toml(&db, &regional_bootstrap, &aggregate_bootstrap),
        ),
        ("serve.toml", serve_toml(&db, &args)),
    ];
    for (name, text) in &files {
        std::fs::write(dir.join(name), text).with_context(|| format!("writing {name}"))?;
    }
    let audit_regional = audit_service::Config::load(Some(&dir.join("audit-regional.toml")))?;
    let audit_aggregate = audit_service::Config::load(Some(&dir.join("audit-aggregate.toml")))?;
    let collect = collector::CollectConfig::load(Some(&dir.join("collect.toml")))?;
    let serve = web::Config::load(Some(&dir.join("serve.toml")))?;

    // The collector and the web service share the file: migrate it once, before both.
    store::Store::connect(&db)
        .await
        .context("opening the demo's SQLite store")?
        .migrate()
        .await
        .context("migrating the demo's SQLite store")?;

    let mut tasks = tokio::task::JoinSet::new();
    let token = shutdown.child_token();
    {
        let t = token.child_token();
        tasks.spawn(async move {
            (
                "auditor regional",
                audit_service::run(audit_regional, t).await,
            )
        });
        let t = token.child_token();
        tasks.spawn(async move {
            (
                "auditor aggregate",
                audit_service::run(audit_aggregate, t).await,
            )
        });
        let t = token.child_token();
        tasks.spawn(async move { ("collector", collector::run(collect, t).await) });
        let t = token.child_token();
        tasks.spawn(async move { ("web", web::run(serve, web::Mode::All, t).await) });
    }
    let traffic_cfg = traffic::TrafficConfig {
        bootstrap: regional_bootstrap.clone(),
        topics: TOPICS.iter().map(|t| t.to_string()).collect(),
        audit_topic: AUDIT_TOPIC.into(),
        rate: args.rate,
        late_fraction: args.late,
        max_lateness: args.window / 2,
        report_interval: Duration::from_secs(2),
        identity: Identity::new("producer", "dc1", "demo-traffic"),
        event_time: audit_lib::EventTimeConfig {
            window_size: audit_lib::WindowSize::from_millis(args.window.as_millis() as i64)
                .context("--window")?,
            ..Default::default()
        },
    };
    let t = token.child_token();
    tasks.spawn(async move { ("traffic", traffic::run(traffic_cfg, t).await) });
    let replicator_cfg = replicator::ReplicatorConfig {
        source: regional_bootstrap.clone(),
        target: aggregate_bootstrap.clone(),
        topics: TOPICS.iter().map(|t| t.to_string()).collect(),
        window_ms: args.window.as_millis() as i64,
        faults: replicator::Faults {
            loss_topic: "payments".into(),
            loss_ratio: args.loss,
            loss_phase: 1,
            duplication_topic: "clicks".into(),
            duplication_ratio: args.duplication,
            duplication_phase: 2,
            period: 3,
            delay_topic: "orders".into(),
            delay: args.delay,
        },
        injections_file: args.injections.clone(),
    };
    let injections = replicator::Injections::default();
    let t = token.child_token();
    tasks.spawn(async move {
        let result =
            tokio::task::spawn_blocking(move || replicator::run(replicator_cfg, injections, t))
                .await
                .map_err(anyhow::Error::from)
                .and_then(|r| r);
        ("replicator", result)
    });

    println!(
        "\nkafka-audit demo\n  dashboard:  http://{listen}/\n  API:        http://{listen}/api/v1/topics\n  \
         clusters:   regional {regional_bootstrap} (dc1), aggregate {aggregate_bootstrap} (agg)\n  \
         faults:     payments loses {loss:.0}% and clicks is duplicated {dup:.0}% in every third window; \
         orders is delayed {delay}\n  windows:    {window}, judged {grace} after they end\n  \
         files:      {dir} (configs, SQLite store, WAL)\n  Ctrl-C stops everything.\n",
        listen = args.listen,
        loss = args.loss * 100.0,
        dup = args.duplication * 100.0,
        delay = humantime_str(args.delay),
        window = humantime_str(args.window),
        grace = humantime_str(args.grace),
        dir = dir.display(),
    );

    // The first task to end (a failure, or all of them after ctrl-c) ends the demo.
    let mut result = Ok(());
    while let Some(joined) = tasks.join_next().await {
        let (name, r) = joined.context("a demo task panicked")?;
        if let Err(e) = r {
            tracing::error!(task = name, error = %format!("{e:#}"), "demo task failed; stopping the demo");
            if result.is_ok() {
                result = Err(e.context(format!("demo: {name} failed")));
            }
        } else {
            tracing::info!(task = name, "stopped");
        }
        token.cancel();
    }
    drop(regional);
    drop(aggregate);
    result
}

#[cfg(test)]
mod tests {
    /// Review L6: a default demo directory someone else created first is refused.
    #[test]
    fn a_pre_created_default_directory_is_refused() {
        let dir = std::env::temp_dir().join(format!("kafka-audit-demo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let result = super::demo_dir(None);
        std::fs::remove_dir_all(&dir).unwrap();
        let e = result.expect_err("a pre-created directory is used");
        assert!(format!("{e:#}").contains("must not exist yet"), "{e:#}");
        let made = super::demo_dir(None).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&made).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700);
        }
        std::fs::remove_dir_all(&made).unwrap();
    }
}
