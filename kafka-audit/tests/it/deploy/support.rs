//! What the deploy tests share: the subcommands' config loaders, one deployment's
//! consistency check, the metric names and label values the services expose (for the
//! Prometheus rules and the Grafana panels), the dashboard, and the helpers that read
//! how the services are started (compose, Kubernetes, systemd).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub use common::now_ms;
use serde_json::Value as Json;
use serde_norway::Value as Yaml;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("kafka-audit sits in the workspace")
        .to_path_buf()
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Which subcommand reads a config file, from its name (`audit*.toml`, `collect*.toml`,
/// `serve*.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subcommand {
    Audit,
    Collect,
    Serve,
}

impl Subcommand {
    pub fn of(file_name: &str) -> Subcommand {
        if file_name.starts_with("audit") {
            Subcommand::Audit
        } else if file_name.starts_with("collect") {
            Subcommand::Collect
        } else if file_name.starts_with("serve") {
            Subcommand::Serve
        } else {
            panic!("{file_name}: not an audit*, collect* or serve* config")
        }
    }
}

/// A config as loaded by its subcommand (kafka-audit/src/{audit,collect,serve}.rs).
#[derive(Debug)]
pub enum Loaded {
    Audit(Box<audit_service::Config>),
    Collect(Box<collector::CollectConfig>),
    Serve(Box<web::Config>),
}

/// Loads `path` exactly as `kafka-audit <subcommand> --config path` does, plus the
/// checks the service runs at start (`collector::start` calls `check`).
pub fn load(path: &Path) -> anyhow::Result<Loaded> {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    Ok(match Subcommand::of(&name) {
        Subcommand::Audit => Loaded::Audit(Box::new(audit_service::Config::load(Some(path))?)),
        Subcommand::Collect => {
            let c = collector::CollectConfig::load(Some(path))?;
            c.check()?;
            Loaded::Collect(Box::new(c))
        }
        Subcommand::Serve => Loaded::Serve(Box::new(web::Config::load(Some(path))?)),
    })
}

pub fn config_dir() -> PathBuf {
    repo().join("deploy/config")
}

/// The auditors, the collector and the web service of one deployment fit together:
/// every auditor's tier is in the topology (with progress watermarks, which auditors
/// publish), the window size has one source of truth (the auditors' `window_size`, all
/// equal; serve's `[topology] window` unset, so serve learns it from the stored
/// windows), every audit topic is collected from the auditor's own cluster, instance
/// ids are unique.
pub fn check_one_deployment(
    audits: &[audit_service::Config],
    collect: &collector::CollectConfig,
    serve: &web::Config,
    context: &str,
) {
    let sizes: BTreeSet<i64> = audits
        .iter()
        .map(|a| a.audit.event_time.window_size.as_millis())
        .collect();
    assert_eq!(
        sizes.len(),
        1,
        "{context}: auditors' window sizes {sizes:?}"
    );
    // Pinned where it is checked: unpinned, the first stored increment would fix it
    // (security review 2, finding 5).
    let size = sizes.first().copied();
    assert_eq!(
        serve
            .topology
            .window
            .map(|w| i64::try_from(w.as_millis()).unwrap()),
        size,
        "{context}: [topology] window must pin the auditors' audit.event_time.window_size"
    );
    assert_eq!(
        collect
            .ingest
            .window
            .map(|w| i64::try_from(w.as_millis()).unwrap()),
        size,
        "{context}: collect.toml's [ingest] window must pin the auditors' window_size"
    );
    for a in audits {
        let id = format!("{context}: auditor {}", a.audit.instance_id);
        let tier = serve
            .topology
            .tiers
            .iter()
            .find(|t| t.name == a.audit.tier)
            .unwrap_or_else(|| panic!("{id}: tier {:?} not in [topology]", a.audit.tier));
        // A tier declared without progress would never be judged stalled.
        assert!(
            tier.progress,
            "{id}: tier {} has progress = false",
            tier.name
        );
        let bootstrap = a.kafka.bootstrap().unwrap();
        assert!(
            collect.sources.iter().any(|s| {
                s.kafka.bootstrap().as_deref() == Some(bootstrap.as_str())
                    && s.topics.contains(&a.audit.audit_topic)
            }),
            "{id}: no collector source reads {} from {bootstrap}",
            a.audit.audit_topic
        );
        // The collector takes replication evidence from a source's
        // evidence_topics alone; evidence published elsewhere would be rejected.
        assert!(
            a.audit.replicators.is_empty()
                || collect.sources.iter().any(|s| {
                    s.kafka.bootstrap().as_deref() == Some(bootstrap.as_str())
                        && s.evidence_topics.contains(&a.audit.evidence_topic)
                }),
            "{id}: has replicators, but no collector source reads its evidence topic {} \
             from {bootstrap} as one of its evidence_topics",
            a.audit.evidence_topic
        );
        assert_eq!(
            audits
                .iter()
                .filter(|b| b.audit.instance_id == a.audit.instance_id)
                .count(),
            1,
            "{id}: instance id twice (it is the transactional.id)"
        );
    }
}

/// Sample names the three services expose, derived from the real registries: a
/// counter `x` is exposed as `x_total`, a histogram as `x_bucket`, `x_sum`, `x_count`.
/// Also the label values the code gives the collector's `outcome` label.
pub fn exposed_sample_names() -> BTreeSet<String> {
    use prometheus_client::registry::Registry;
    let mut text = String::new();
    let mut registry = Registry::default();
    audit_service::metrics::Metrics::new(&mut registry);
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let mut registry = Registry::default();
    collector::metrics::Metrics::register(&mut registry);
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    text.push_str(&web::metrics::Metrics::new().encode());
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').unwrap();
        match kind {
            "counter" => {
                names.insert(format!("{name}_total"));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                names.insert(name.to_string());
            }
        }
    }
    assert!(names.len() > 30, "too few metrics found: {names:?}");
    names
}

/// Values the code gives a label, for the labels the rules filter on.
pub fn label_values(metric: &str, label: &str) -> Option<BTreeSet<String>> {
    match (metric, label) {
        // The evaluator sets one series per anomalous verdict (web/src/eval.rs).
        ("kafka_audit_anomalies" | "kafka_audit_anomalies_detected_total", "kind") => Some(
            web::engine::Verdict::ALL
                .into_iter()
                .filter(|v| v.is_anomaly())
                .map(|v| v.as_str().to_string())
                .collect(),
        ),
        // The auditor's error kinds: its typed `ServiceError`, the only way to count one.
        ("kafka_audit_errors_total", "kind") => {
            use audit_service::metrics::ServiceError;
            let kinds: BTreeSet<String> = ServiceError::ALL
                .into_iter()
                .map(|k| k.as_str().to_string())
                .collect();
            assert!(kinds.contains("publish"), "{kinds:?}");
            Some(kinds)
        }
        // The collector's outcome label as its encoder writes it.
        ("kafka_audit_collector_messages_total", "outcome") => {
            use collector::metrics::{Metrics, Outcome};
            let mut registry = prometheus_client::registry::Registry::default();
            let m = Metrics::register(&mut registry);
            for o in [Outcome::Accepted, Outcome::Duplicate, Outcome::Rejected] {
                m.count("x", o, 1);
            }
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
            let re = regex::Regex::new(r#"outcome="([^"]+)""#).unwrap();
            Some(re.captures_iter(&text).map(|c| c[1].to_string()).collect())
        }
        _ => None,
    }
}

/// Checks every `kafka_audit_*` name of a PromQL expression, and the values of the
/// labels it filters on where the code fixes them. Returns the names found.
pub fn check_promql(expr: &str, exposed: &BTreeSet<String>, context: &str) -> Vec<String> {
    let name_re = regex::Regex::new(r"\bkafka_audit_[a-z0-9_]+").unwrap();
    let selector_re = regex::Regex::new(r"\b(kafka_audit_[a-z0-9_]+)\{([^}]*)\}").unwrap();
    let matcher_re = regex::Regex::new(r#"([a-z_]+)\s*(=~|=|!=|!~)\s*"([^"]*)""#).unwrap();
    let names: Vec<String> = name_re
        .find_iter(expr)
        .map(|m| m.as_str().to_string())
        .collect();
    for n in &names {
        assert!(
            exposed.contains(n),
            "{context}: metric {n} is not exposed by any service (exposed: {exposed:?})"
        );
    }
    for s in selector_re.captures_iter(expr) {
        for m in matcher_re.captures_iter(&s[2]) {
            let Some(known) = label_values(&s[1], &m[1]) else {
                continue;
            };
            let values: Vec<&str> = if &m[2] == "=~" || &m[2] == "!~" {
                m[3].split('|').collect()
            } else {
                vec![&m[3]]
            };
            for v in values {
                assert!(
                    known.contains(v),
                    "{context}: {}{{{}=\"{v}\"}}: the code never sets that value ({known:?})",
                    &s[1],
                    &m[1]
                );
            }
        }
    }
    names
}

pub fn dashboard() -> Json {
    let path = repo().join("deploy/grafana/kafka-audit.json");
    serde_json::from_str(&read(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The config text as the subcommand sees it when `env` is set: `KAFKA_AUDIT__A__B=v`
/// sets `a.b`, lower-cased, as figment's `Env::prefixed("KAFKA_AUDIT__").split("__")`
/// in `common::load_config` does. A variable of a section the
/// subcommand does not read would be silently ignored there, so it fails here.
pub fn with_env(toml_text: &str, env: &BTreeMap<String, String>, sub: Subcommand) -> String {
    let sections = match sub {
        Subcommand::Audit => audit_service::config::ENV_SECTIONS,
        Subcommand::Collect => collector::config::ENV_SECTIONS,
        Subcommand::Serve => web::config::ENV_SECTIONS,
    };
    let mut doc: toml::Table = toml::from_str(toml_text).unwrap();
    for (key, value) in env {
        let Some(path) = key.strip_prefix(common::config::ENV_PREFIX) else {
            continue;
        };
        let parts: Vec<String> = path.split("__").map(|p| p.to_ascii_lowercase()).collect();
        assert!(
            sections.contains(&parts[0].as_str()),
            "{key}: {sub:?} does not read section {:?}: the variable would be ignored",
            parts[0]
        );
        let (last, tables) = parts.split_last().unwrap();
        let mut table = &mut doc;
        for p in tables {
            table = table
                .entry(p.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()))
                .as_table_mut()
                .unwrap_or_else(|| panic!("{key}: {p} is not a table"));
        }
        table.insert(last.clone(), toml::Value::String(value.clone()));
    }
    toml::to_string(&doc).unwrap()
}

/// Loads config text named `file_name` with `env` applied.
pub fn load_text(file_name: &str, text: &str, env: &BTreeMap<String, String>) -> Loaded {
    let sub = Subcommand::of(file_name);
    let dir = std::env::temp_dir().join(format!(
        "example-configs-{}-{}",
        std::process::id(),
        testkit::unique("c")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(file_name);
    std::fs::write(&path, with_env(text, env, sub)).unwrap();
    let loaded = load(&path).unwrap_or_else(|e| panic!("{file_name} with {env:?}: {e:#}"));
    let _ = std::fs::remove_dir_all(&dir);
    loaded
}

/// Where a loaded service listens, and the HTTP paths it serves there (read from the
/// routers: common's ops server for audit and collect, web's app for serve).
pub fn listen_port_and_paths(loaded: &Loaded) -> (u16, BTreeSet<String>) {
    let routes = |file: &str| -> BTreeSet<String> {
        let re = regex::Regex::new(r#"\.route\(\s*"(/[a-z]+)""#).unwrap();
        re.captures_iter(&read(&repo().join(file)))
            .map(|c| c[1].to_string())
            .collect()
    };
    match loaded {
        Loaded::Audit(c) => {
            assert!(c.ops.enabled);
            (c.ops.listen.port(), routes("common/src/ops.rs"))
        }
        Loaded::Collect(c) => {
            assert!(c.http.enabled);
            (c.http.listen.port(), routes("common/src/ops.rs"))
        }
        Loaded::Serve(c) => {
            // Probes carry no token.
            assert!(c.auth.open_health && c.auth.open_metrics);
            (c.serve.listen.port(), routes("web/src/lib.rs"))
        }
    }
}

pub fn help(subcommand: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kafka-audit"))
        .args([subcommand, "--help"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kafka-audit {subcommand} --help failed"
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Checks a kafka-audit command line (subcommand and flags exist in the binary) and
/// returns the subcommand and the `--config` argument.
pub fn check_command(args: &[String], context: &str) -> (String, Option<String>) {
    let sub = args
        .first()
        .unwrap_or_else(|| panic!("{context}: no subcommand"));
    assert!(
        ["audit", "collect", "serve", "migrate"].contains(&sub.as_str()),
        "{context}: unknown subcommand {sub}"
    );
    let help = help(sub);
    for a in &args[1..] {
        if let Some(flag) = a.strip_prefix("--") {
            let flag = flag.split('=').next().unwrap();
            let re = regex::Regex::new(&format!(r"--{}\b", regex::escape(flag))).unwrap();
            assert!(
                re.is_match(&help),
                "{context}: kafka-audit {sub} has no --{flag}"
            );
        }
    }
    let config = args
        .iter()
        .position(|a| a == "--config")
        .map(|i| args[i + 1].clone());
    if sub != "migrate" {
        assert!(config.is_some(), "{context}: {sub} without --config");
    }
    (sub.clone(), config)
}

pub fn yaml_str(v: &Yaml) -> String {
    match v {
        Yaml::String(s) => s.clone(),
        Yaml::Number(n) => n.to_string(),
        Yaml::Bool(b) => b.to_string(),
        other => panic!("not a scalar: {other:?}"),
    }
}

pub fn yaml_env_map(env: &Yaml) -> BTreeMap<String, String> {
    env.as_mapping()
        .into_iter()
        .flatten()
        .map(|(k, v)| (yaml_str(k), yaml_str(v)))
        .collect()
}

pub fn k8s_documents() -> Vec<Yaml> {
    use serde::Deserialize;
    let dir = repo().join("deploy/k8s");
    let kustomization: Yaml =
        serde_norway::from_str(&read(&dir.join("kustomization.yaml"))).unwrap();
    let mut docs = Vec::new();
    for file in kustomization["resources"].as_sequence().unwrap() {
        let path = dir.join(yaml_str(file));
        for doc in serde_norway::Deserializer::from_str(&read(&path)) {
            let doc = Yaml::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            if !doc.is_null() {
                docs.push(doc);
            }
        }
    }
    docs
}
