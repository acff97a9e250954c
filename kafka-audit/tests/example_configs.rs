//! The deploy kit (deploy/) checked against the code, so that it cannot drift from it:
//! - every example config (deploy/config, the compose configs, the configs in the
//!   Kubernetes ConfigMaps, with the environment each deployment sets) loads through the
//!   loader of its subcommand, and `deny_unknown_fields` catches a typo in any section;
//! - each deployment fits together (auditors' tiers in the topology, one window size,
//!   every audit topic collected, the many-to-one datacenter mapping);
//! - compose, Kubernetes and systemd files parse, name files that exist, run
//!   subcommands with flags the binary has, and probe the ports and paths the services
//!   serve; the image's entrypoint, user and ports fit them;
//! - every metric and label value in the Prometheus rules, their promtool tests and the
//!   Grafana panels is one the services expose; alert job names are scrape job names;
//! - every SQL query of the Grafana dashboard runs against a PostgreSQL database
//!   migrated with our migrations and seeded through the store's write API, returns
//!   what the seeded pipeline implies, and agrees with web's detection engine
//!   (completeness, anomalies) and percentiles;
//! - the compose stack without Docker: `kafka-audit migrate`, `audit`, `collect` and
//!   `serve` run as processes with the compose configs (addresses swapped for the dev
//!   Kafka and PostgreSQL), answer the health checks, count produced messages into the
//!   store, expose the metrics the rules use, and exit 0 on SIGTERM.
//!
//! What cannot be checked here (no Docker, no cluster, no Grafana): that the images
//! build, the manifests deploy, Grafana renders the panels.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::now_ms;
use serde_json::Value as Json;
use serde_norway::Value as Yaml;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("kafka-audit sits in the workspace")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Which subcommand reads a config file, from its name (`audit*.toml`, `collect*.toml`,
/// `serve*.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subcommand {
    Audit,
    Collect,
    Serve,
}

impl Subcommand {
    fn of(file_name: &str) -> Subcommand {
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
enum Loaded {
    Audit(Box<audit_service::Config>),
    Collect(Box<collector::CollectConfig>),
    Serve(Box<web::Config>),
}

/// Loads `path` exactly as `kafka-audit <subcommand> --config path` does, plus the
/// checks the service runs at start (`collector::start` calls `check`).
fn load(path: &Path) -> anyhow::Result<Loaded> {
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

fn config_dir() -> PathBuf {
    repo().join("deploy/config")
}

const EXAMPLES: [&str; 5] = [
    "audit-dc1.toml",
    "audit-dc2.toml",
    "audit-aggregate.toml",
    "collect.toml",
    "serve.toml",
];

struct Examples {
    audits: Vec<audit_service::Config>,
    collect: collector::CollectConfig,
    serve: web::Config,
}

fn load_examples() -> Examples {
    let mut audits = Vec::new();
    let mut collect = None;
    let mut serve = None;
    for name in EXAMPLES {
        let path = config_dir().join(name);
        match load(&path).unwrap_or_else(|e| panic!("{}: {e:#}", path.display())) {
            Loaded::Audit(c) => audits.push(*c),
            Loaded::Collect(c) => collect = Some(*c),
            Loaded::Serve(c) => serve = Some(*c),
        }
    }
    Examples {
        audits,
        collect: collect.expect("collect.toml"),
        serve: serve.expect("serve.toml"),
    }
}

#[test]
fn example_configs_load_with_the_loaders_of_their_subcommands() {
    let ex = load_examples();
    let who: Vec<(String, String, String)> = ex
        .audits
        .iter()
        .map(|c| {
            (
                c.audit.instance_id.clone(),
                c.audit.tier.clone(),
                c.audit.datacenter.clone(),
            )
        })
        .collect();
    assert_eq!(
        who,
        [
            ("audit-dc1-0", "regional", "dc1"),
            ("audit-dc2-0", "regional", "dc2"),
            ("audit-agg-0", "aggregate", "agg"),
        ]
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    );
    for c in &ex.audits {
        assert_eq!(c.audit.mode, audit_service::Mode::ExactlyOnce);
        // The WAL base directory is the volume of the StatefulSet and systemd's
        // StateDirectory (checked against those files below).
        assert_eq!(c.audit.wal_dir, Path::new("/var/lib/kafka-audit/wal"));
        assert_eq!(c.ops.listen.port(), 9464);
    }
    let names: Vec<&str> = ex.collect.sources.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["dc1", "dc2", "agg"]);
    assert!(ex.collect.store.url.starts_with("postgres://"));
    assert_eq!(ex.collect.http.listen.port(), 8091);
    assert!(ex.serve.serve.database_url.starts_with("postgres://"));
    assert_eq!(ex.serve.serve.listen.port(), 8080);
    assert_eq!(ex.serve.alerting.channels.len(), 2);
    assert_eq!(ex.serve.auth.tokens.len(), 2);
}

/// The auditors, the collector and the topology of serve.toml describe one deployment.
#[test]
fn example_topology_is_consistent_with_the_auditors_and_the_collector() {
    let ex = load_examples();
    let topo = web::engine::Topology::learned(
        ex.serve.topology.clone(),
        ex.audits[0].audit.event_time.window_size,
    )
    .unwrap();
    check_one_deployment(&ex.audits, &ex.collect, &ex.serve, "deploy/config");
    // The many-to-one edge sends both regions to the aggregate auditor's datacenter.
    let agg = ex
        .audits
        .iter()
        .find(|a| a.audit.tier == "aggregate")
        .unwrap();
    let edge = topo
        .edges
        .iter()
        .find(|e| e.upstream == "regional" && e.downstream == "aggregate")
        .expect("edge regional -> aggregate");
    let mut regional_dcs: Vec<&str> = ex
        .audits
        .iter()
        .filter(|a| a.audit.tier == "regional")
        .map(|a| a.audit.datacenter.as_str())
        .collect();
    regional_dcs.sort();
    assert_eq!(
        edge.upstream_datacenters(&agg.audit.datacenter),
        regional_dcs
    );
}

/// The auditors, the collector and the web service of one deployment fit together:
/// every auditor's tier is in the topology (with progress watermarks, which auditors
/// publish), the window size has one source of truth (the auditors' `window_size`, all
/// equal; serve's `[topology] window` unset, so serve learns it from the stored
/// windows), every audit topic is collected from the auditor's own cluster, instance
/// ids are unique.
fn check_one_deployment(
    audits: &[audit_service::Config],
    collect: &collector::CollectConfig,
    serve: &web::Config,
    context: &str,
) {
    assert_eq!(
        serve.topology.window, None,
        "{context}: [topology] window repeats the auditors' audit.event_time.window_size; leave it unset so theirs is the one source of truth"
    );
    let sizes: BTreeSet<i64> = audits
        .iter()
        .map(|a| a.audit.event_time.window_size.as_millis())
        .collect();
    assert_eq!(
        sizes.len(),
        1,
        "{context}: auditors' window sizes {sizes:?}"
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

/// `audit`, `collect` and `serve` read `[log]` as common's typed `LogConfig`: a
/// misspelt `log.format` stops each of them at start, naming the value, instead of
/// logging in some default format.
#[test]
fn a_misspelt_log_format_stops_every_subcommand_at_start() {
    for sub in ["audit", "collect", "serve"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kafka-audit"))
            .arg(sub)
            .env_remove("KAFKA_AUDIT_CONFIG")
            .env("KAFKA_AUDIT__LOG__FORMAT", "jsn")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{sub}: {stderr}");
        assert!(
            stderr.contains("jsn") && stderr.to_lowercase().contains("log.format"),
            "{sub}: {stderr}"
        );
    }
}

/// Every section of every example denies unknown keys: a key misspelt anywhere makes
/// loading fail, naming the key. (Sections that are librdkafka passthrough maps, and
/// so accept any key by design, are skipped.)
#[test]
fn a_typo_in_any_section_of_an_example_config_is_an_error() {
    let dir = std::env::temp_dir().join(format!("example-configs-typo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut checked = 0;
    for name in EXAMPLES {
        let text = read(&config_dir().join(name));
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let header = line.trim();
            if !header.starts_with('[') {
                continue;
            }
            let section = header.trim_matches(|c| c == '[' || c == ']');
            if ["properties", "consumer", "producer", "admin"]
                .iter()
                .any(|passthrough| section.ends_with(&format!(".{passthrough}")))
            {
                continue;
            }
            let mut variant: Vec<&str> = lines.clone();
            variant.insert(i + 1, "reprot_intervall = 1");
            let path = dir.join(name);
            std::fs::write(&path, variant.join("\n")).unwrap();
            let err = match load(&path) {
                Ok(_) => panic!("{name}: a typo in [{section}] was accepted"),
                Err(e) => format!("{e:#}"),
            };
            assert!(
                err.contains("reprot_intervall"),
                "{name} [{section}]: error does not name the key: {err}"
            );
            checked += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(checked >= 30, "only {checked} sections checked");
}

// ---------------------------------------------------------------------------------
// Metrics: the names Prometheus rules and Grafana panels may use.

/// Sample names the three services expose, derived from the real registries: a
/// counter `x` is exposed as `x_total`, a histogram as `x_bucket`, `x_sum`, `x_count`.
/// Also the label values the code gives the collector's `outcome` label.
fn exposed_sample_names() -> BTreeSet<String> {
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
fn label_values(metric: &str, label: &str) -> Option<BTreeSet<String>> {
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
fn check_promql(expr: &str, exposed: &BTreeSet<String>, context: &str) -> Vec<String> {
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

#[test]
fn prometheus_rules_use_only_metrics_and_label_values_the_services_expose() {
    let exposed = exposed_sample_names();
    let path = repo().join("deploy/prometheus/alerts.yml");
    let doc: Yaml = serde_norway::from_str(&read(&path)).unwrap();
    let mut used = BTreeSet::new();
    let mut alerts = BTreeSet::new();
    for group in doc["groups"].as_sequence().expect("groups") {
        let rules = group["rules"].as_sequence().expect("rules");
        assert!(!rules.is_empty());
        for rule in rules {
            let name = rule["alert"].as_str().expect("every rule is an alert");
            assert!(alerts.insert(name.to_string()), "alert {name} twice");
            let expr = rule["expr"].as_str().expect("expr");
            let severity = rule["labels"]["severity"].as_str().unwrap_or_default();
            assert!(
                ["warning", "critical"].contains(&severity),
                "{name}: severity {severity:?}"
            );
            assert!(rule["annotations"]["summary"].as_str().is_some(), "{name}");
            if let Some(f) = rule.get("for") {
                let f = f.as_str().unwrap();
                assert!(humantime::parse_duration(f).is_ok(), "{name}: for {f:?}");
            }
            used.extend(check_promql(expr, &exposed, name));
        }
    }
    // The unit tests of the rules (promtool test rules) feed series the services
    // really expose, with label values the code really sets.
    let tests: Yaml =
        serde_norway::from_str(&read(&repo().join("deploy/prometheus/alerts_test.yml"))).unwrap();
    assert_eq!(tests["rule_files"][0].as_str(), Some("alerts.yml"));
    for t in tests["tests"].as_sequence().unwrap() {
        for series in t["input_series"].as_sequence().unwrap() {
            let series = series["series"].as_str().unwrap();
            check_promql(series, &exposed, "alerts_test.yml");
        }
        for a in t["alert_rule_test"].as_sequence().unwrap() {
            let name = a["alertname"].as_str().unwrap();
            assert!(
                alerts.contains(name),
                "alerts_test.yml tests unknown alert {name}"
            );
        }
    }
    // What the issue asks the rules to cover.
    for must in [
        "kafka_audit_auditor_stalled",
        "kafka_audit_partition_lag",
        "kafka_audit_errors_total",
        "kafka_audit_wal_pending_entries",
        "kafka_audit_collector_messages_total",
        "kafka_audit_collector_store_errors_total",
        "kafka_audit_window_completeness",
        "kafka_audit_anomalies",
    ] {
        assert!(used.contains(must), "no rule uses {must}");
    }
}

#[test]
fn a_misspelt_metric_or_label_value_in_a_rule_is_caught() {
    let exposed = exposed_sample_names();
    for bad in [
        "kafka_audit_errors{kind=\"publish\"} > 0",
        "kafka_audit_wal_pending > 1",
        "kafka_audit_anomalies{kind=~\"loss|dupes\"} > 0",
        "kafka_audit_collector_messages_total{outcome=\"rejected\"} > 0",
    ] {
        let caught = std::panic::catch_unwind(|| check_promql(bad, &exposed, "test"));
        assert!(caught.is_err(), "{bad} was accepted");
    }
    check_promql(
        "kafka_audit_errors_total{kind=\"publish\"} > 0",
        &exposed,
        "test",
    );
}

// ---------------------------------------------------------------------------------
// Grafana: the dashboard's SQL against a seeded store, its PromQL against the metrics.

fn dashboard() -> Json {
    let path = repo().join("deploy/grafana/kafka-audit.json");
    serde_json::from_str(&read(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `(where, query, format)` of every PostgreSQL query: panel targets (rows' nested
/// panels included) and query variables.
fn sql_queries(d: &Json) -> Vec<(String, String, String)> {
    fn walk(panels: &Json, out: &mut Vec<(String, String, String)>) {
        for p in panels.as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or_default();
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(sql) = t["rawSql"].as_str() {
                    assert_eq!(t["datasource"]["uid"], "${pg}", "{title}");
                    let format = t["format"].as_str().unwrap_or("table").to_string();
                    out.push((title.to_string(), sql.to_string(), format));
                }
            }
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&d["panels"], &mut out);
    for v in d["templating"]["list"].as_array().unwrap() {
        if v["type"] == "query" && v["datasource"]["uid"] == "${pg}" {
            let name = v["name"].as_str().unwrap();
            out.push((
                format!("variable {name}"),
                v["query"].as_str().unwrap().to_string(),
                "table".to_string(),
            ));
        }
    }
    out
}

fn prom_exprs(d: &Json) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = t["expr"].as_str() {
                assert_eq!(t["datasource"]["uid"], "${prom}");
                out.push((p["title"].as_str().unwrap().to_string(), expr.to_string()));
            }
        }
    }
    out
}

/// What Grafana does before sending a query: its macros and the dashboard's variables
/// replaced by values. Anything left with a `$` would reach PostgreSQL as is.
fn render(sql: &str, vars: &BTreeMap<String, String>, from_ms: i64, to_ms: i64) -> String {
    let mut out = sql
        .replace("$__unixEpochFrom()", &(from_ms / 1000).to_string())
        .replace("$__unixEpochTo()", &(to_ms / 1000).to_string());
    // Longest names first, so `$topic_x` is not read as `$topic` + `_x`.
    let mut names: Vec<&String> = vars.keys().collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for name in names {
        out = out
            .replace(&format!("${{{name}}}"), &vars[name])
            .replace(&format!("${name}"), &vars[name]);
    }
    assert!(
        !out.contains('$'),
        "unreplaced macro or variable in:\n{out}"
    );
    out
}

const TOPIC: &str = "orders.created";
const WINDOW_MS: i64 = 600_000;
const TIERS: [(&str, &str, &str); 6] = [
    // (tier, datacenter, host)
    ("producer", "dc1", "orders-api-dc1"),
    ("producer", "dc2", "orders-api-dc2"),
    ("regional", "dc1", "audit-dc1-0"),
    ("regional", "dc2", "audit-dc2-0"),
    ("aggregate", "agg", "audit-agg-0"),
    ("consumer-hdfs", "agg", "hdfs-loader"),
];
const LOSS_WINDOW: i64 = 2;
const DUPLICATION_WINDOW: i64 = 4;

/// The count a tier saw in window `k` of the seeded pipeline: dc2's regional cluster
/// lost 10 messages in window 2; the aggregate cluster received 5 twice in window 4.
fn seeded_count(tier: &str, dc: &str, k: i64) -> u64 {
    let dc1 = 1000;
    let dc2 = 800;
    let regional_dc2 = if k == LOSS_WINDOW { dc2 - 10 } else { dc2 };
    let aggregate = dc1 + regional_dc2 + if k == DUPLICATION_WINDOW { 5 } else { 0 };
    match (tier, dc) {
        ("producer", "dc1") | ("regional", "dc1") => dc1,
        ("producer", "dc2") => dc2,
        ("regional", "dc2") => regional_dc2,
        ("aggregate", _) | ("consumer-hdfs", _) => aggregate,
        _ => unreachable!(),
    }
}

/// Latencies of one tier: mostly fast, a tenth slow, a few under 1 ms. The last tier
/// (one datacenter, so not merged) puts the boundary between fast and slow between
/// the ranks floor(0.95 (n - 1)) and ceil(0.95 n) - 1, which differ where 0.95 n is
/// not whole: the two usual rank rules then read different p95s, so the dashboard
/// must use the API's.
fn seeded_latency(tier_index: usize, count: u64) -> audit_lib::LatencyHistogram {
    let mut h = audit_lib::LatencyHistogram::new();
    let slow = if tier_index == TIERS.len() - 1 {
        count - ((0.95 * count as f64).ceil() as u64 - 1)
    } else {
        count / 10
    };
    h.record_n(0, 3);
    h.record_n(40 * (tier_index as i64 + 1), count - slow - 3);
    h.record_n(9_000 * (tier_index as i64 + 1), slow);
    h
}

/// Six settled windows starting three hours ago, every tier of the example topology,
/// progress of the auditors, one rejected message. Returns the first window's start.
async fn seed(store: &store::Store, now: i64) -> i64 {
    use store::{AuditBody, AuditStore, Batch, Increment, Message, OffsetSpan, WindowStats};
    let first = (now - 3 * 3_600_000) / WINDOW_MS * WINDOW_MS;
    let mut messages = Vec::new();
    for k in 0..6 {
        let start = first + k * WINDOW_MS;
        for (t, (tier, dc, host)) in TIERS.iter().enumerate() {
            let count = seeded_count(tier, dc, k);
            let h = seeded_latency(t, count);
            messages.push(Message {
                version: audit_lib::AUDIT_MESSAGE_VERSION,
                uuid: uuid::Uuid::new_v4(),
                topic: TOPIC.into(),
                tier: tier.to_string(),
                datacenter: dc.to_string(),
                host: host.to_string(),
                emitted_at: start + WINDOW_MS + 60_000,
                body: AuditBody::Increment(Increment {
                    window_start: start,
                    window_end: start + WINDOW_MS,
                    stats: WindowStats {
                        count,
                        bytes: count * 120,
                        no_time_count: 2,
                        malformed_count: 1,
                        out_of_bounds_count: 0,
                        checksum: audit_lib::Checksum(count.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                        latency: h,
                        offsets: vec![OffsetSpan {
                            partition: 0,
                            min: k * 1000,
                            max: k * 1000 + count as i64 - 1,
                        }],
                    },
                }),
            });
        }
    }
    for (tier, dc, host) in &TIERS[2..5] {
        messages.push(Message {
            version: audit_lib::AUDIT_MESSAGE_VERSION,
            uuid: uuid::Uuid::new_v4(),
            topic: TOPIC.into(),
            tier: tier.to_string(),
            datacenter: dc.to_string(),
            host: host.to_string(),
            emitted_at: now - 5_000,
            body: AuditBody::Progress(
                (0..2)
                    .map(|p| store::PartitionProgress {
                        partition: p,
                        next_offset: 6_000,
                        record_time: Some(now - 6_000),
                        lag: Some(5 + i64::from(p)),
                    })
                    .collect(),
            ),
        });
    }
    let batch = Batch {
        messages,
        rejects: vec![store::Reject {
            source: "http[0]".into(),
            reason: "missing field `uuid`".into(),
            payload: "{}".into(),
        }],
        received_at_ms: now,
    };
    let outcome = store.write_batch(&batch).await.unwrap();
    assert_eq!(outcome.accepted(), batch.messages.len());
    first
}

#[tokio::test]
async fn grafana_queries_run_against_the_migrated_schema_and_show_the_seeded_pipeline() {
    use sqlx::{Column, Row};
    let db = testkit::fresh_database("grafana").await;
    let store = store::Store::connect(db.url()).await.unwrap();
    {
        use store::AuditStore;
        store.migrate().await.unwrap();
    }
    let now = now_ms();
    let first = seed(&store, now).await;
    let store::Store::Postgres(pg) = &store else {
        unreachable!("a postgres:// URL")
    };
    let pool = pg.pool();

    let d = dashboard();
    let mut vars = BTreeMap::new();
    for v in d["templating"]["list"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap().to_string();
        match v["type"].as_str().unwrap() {
            "constant" | "custom" => {
                vars.insert(name, v["query"].as_str().unwrap().to_string());
            }
            "query" => {
                vars.insert(name, TOPIC.to_string());
            }
            // Data source pickers appear only in `datasource.uid`, never in SQL.
            _ => {}
        }
    }
    let (from, to) = (now - 6 * 3_600_000, now + 60_000);
    let queries = sql_queries(&d);
    assert!(queries.len() >= 8, "{} SQL queries", queries.len());
    let mut by_title = BTreeMap::new();
    for (title, sql, format) in &queries {
        let sql = render(sql, &vars, from, to);
        let rows = sqlx::query(&sql)
            .fetch_all(pool)
            .await
            .unwrap_or_else(|e| panic!("{title}: {e}\n{sql}"));
        assert!(!rows.is_empty(), "{title}: no rows\n{sql}");
        if format == "time_series" {
            let columns: Vec<&str> = rows[0].columns().iter().map(|c| c.name()).collect();
            assert_eq!(
                columns[0], "time",
                "{title}: a time series needs `time` first"
            );
        }
        by_title.insert(title.clone(), sql);
    }

    // Series of a time-series query: (metric, window index) -> value.
    let series = |title: &str| {
        let sql = format!(
            "SELECT metric, value, (extract(epoch FROM \"time\") * 1000)::int8 AS t FROM (\n{}\n) q",
            by_title[title]
        );
        async move {
            let rows = sqlx::query(&sql).fetch_all(pool).await.unwrap();
            rows.iter()
                .map(|r| {
                    let t: i64 = r.get("t");
                    let metric: String = r.get("metric");
                    ((metric, (t - first) / WINDOW_MS), r.get::<f64, _>("value"))
                })
                .collect::<BTreeMap<(String, i64), f64>>()
        }
    };

    let quality = series("Messages without event time, malformed, out of bounds").await;
    assert_eq!(
        quality[&("producer no_time".into(), 0)],
        4.0,
        "2 per datacenter"
    );
    assert_eq!(quality[&("regional malformed".into(), 5)], 2.0);
    assert_eq!(quality[&("aggregate out_of_bounds".into(), 3)], 0.0);

    let rejects = sqlx::query(&by_title["Rejected audit messages"])
        .fetch_all(pool)
        .await
        .unwrap();
    let rejected: f64 = rejects.iter().map(|r| r.get::<f64, _>("rejected")).sum();
    assert_eq!(rejected, 1.0);

    let counts = series("Messages per tier").await;
    assert_eq!(counts[&("regional".into(), LOSS_WINDOW)], 1790.0);
    assert_eq!(counts[&("producer".into(), LOSS_WINDOW)], 1800.0);
    assert_eq!(counts[&("aggregate".into(), DUPLICATION_WINDOW)], 1805.0);

    let completeness = series("Completeness per edge").await;
    assert_eq!(
        completeness[&("producer -> regional (dc2)".into(), LOSS_WINDOW)],
        790.0 / 800.0
    );
    assert_eq!(
        completeness[&("regional -> aggregate (agg)".into(), DUPLICATION_WINDOW)],
        1805.0 / 1800.0
    );
    assert_eq!(
        completeness[&("aggregate -> consumer-hdfs (agg)".into(), 0)],
        1.0
    );
    assert_eq!(
        completeness.len(),
        4 * 6,
        "4 downstream (edge, datacenter) x 6 windows"
    );

    let rows = sqlx::query(&by_title["Settled windows with a difference"])
        .fetch_all(pool)
        .await
        .unwrap();
    let found: BTreeSet<(String, String, i64, i64, String)> = rows
        .iter()
        .map(|r| {
            (
                r.get("edge"),
                r.get("datacenter"),
                r.get("expected"),
                r.get("observed"),
                r.get("kind"),
            )
        })
        .collect();
    let expected: BTreeSet<(String, String, i64, i64, String)> = [
        ("producer -> regional", "dc2", 800, 790, "loss"),
        ("regional -> aggregate", "agg", 1800, 1805, "duplication"),
    ]
    .into_iter()
    .map(|(e, d, x, o, k)| (e.into(), d.into(), x, o, k.into()))
    .collect();
    assert_eq!(found, expected);

    // The dashboard's edge arithmetic is the engine's: web's detection engine, given
    // what the store gives the evaluator and the example topology (thresholds at zero,
    // as the SQL has none), finds the same completeness for every settled window of
    // every edge and the same anomalies.
    let mut serve = web::Config::load(Some(&config_dir().join("serve.toml"))).unwrap();
    serve.topology.thresholds = Default::default();
    let window = audit_lib::WindowSize::from_millis(WINDOW_MS).unwrap();
    let topology = web::engine::Topology::learned(serve.topology, window).unwrap();
    let (rows, progress) = {
        use store::AuditStore;
        let range = store::TimeRange::new(first, first + 6 * WINDOW_MS);
        let rows = store.topic_windows(TOPIC, range).await.unwrap();
        (rows, store.progress(Some(TOPIC)).await.unwrap())
    };
    let windows: Vec<i64> = (0..6).map(|k| first + k * WINDOW_MS).collect();
    let mut judged = 0;
    let mut engine_anomalies = BTreeSet::new();
    for ew in topology.evaluate_topic(TOPIC, &windows, &rows, &progress, now) {
        assert_eq!(ew.lifecycle, web::engine::Lifecycle::Final, "{ew:?}");
        let key = (
            format!("{} -> {} ({})", ew.upstream, ew.downstream, ew.datacenter),
            (ew.window_start - first) / WINDOW_MS,
        );
        assert_eq!(Some(completeness[&key]), ew.completeness, "{key:?}");
        judged += 1;
        if ew.verdict.is_anomaly() {
            engine_anomalies.insert((
                format!("{} -> {}", ew.upstream, ew.downstream),
                ew.datacenter.clone(),
                ew.expected as i64,
                ew.observed as i64,
                ew.verdict.as_str().to_string(),
            ));
        }
    }
    assert_eq!(
        judged,
        completeness.len(),
        "every window of every edge is final"
    );
    assert_eq!(engine_anomalies, expected, "the engine's anomalies");

    // The SQL percentiles are the API's: web's engine merges the histograms of a
    // tier's datacenters and reads p50 / p95 / p99 from them.
    let latency = series("Latency per tier").await;
    let mut merged: BTreeMap<(String, i64), audit_lib::LatencyHistogram> = BTreeMap::new();
    for r in &rows {
        merged
            .entry((r.tier.clone(), (r.window_start_ms - first) / WINDOW_MS))
            .or_default()
            .merge(&r.latency);
    }
    assert_eq!(merged.len(), 4 * 6, "4 tiers x 6 windows");
    for ((tier, k), h) in &merged {
        let p = web::engine::percentiles(h).unwrap();
        for (want, name) in [(p.p50_ms, "p50"), (p.p95_ms, "p95"), (p.p99_ms, "p99")] {
            let got = latency[&(format!("{tier} {name}"), *k)];
            assert!(
                (got - want).abs() <= want * 1e-9,
                "{tier} {name} window {k}: SQL {got}, API {want}"
            );
        }
    }

    let rows = sqlx::query(&by_title["Emitters"])
        .fetch_all(pool)
        .await
        .unwrap();
    let lag: BTreeMap<String, Option<i64>> = rows
        .iter()
        .map(|r| (r.get("host"), r.get("max_lag")))
        .collect();
    assert_eq!(lag["audit-dc1-0"], Some(6));
    assert_eq!(lag["orders-api-dc1"], None, "producers report no progress");
}

#[test]
fn grafana_edges_mirror_the_example_topology() {
    let d = dashboard();
    let serve = web::Config::load(Some(&config_dir().join("serve.toml"))).unwrap();
    let window = audit_lib::WindowSize::from_millis(WINDOW_MS).unwrap();
    let topo = web::engine::Topology::learned(serve.topology, window).unwrap();
    let row = regex::Regex::new(r"\('([^']+)', '([^']+)', '([^']+)', '([^']+)'\)").unwrap();
    let mut checked = 0;
    for (title, sql, _) in sql_queries(&d) {
        if !sql.contains("edge(upstream, upstream_dc, downstream, downstream_dc)") {
            continue;
        }
        let mut covered = BTreeSet::new();
        for r in row.captures_iter(&sql) {
            let (up, up_dc, down, down_dc) = (&r[1], &r[2], &r[3], &r[4]);
            let edge = topo
                .edges
                .iter()
                .find(|e| e.upstream == up && e.downstream == down)
                .unwrap_or_else(|| panic!("{title}: edge {up} -> {down} not in serve.toml"));
            assert!(
                edge.upstream_datacenters(down_dc)
                    .iter()
                    .any(|d| d == up_dc),
                "{title}: {up}/{up_dc} -> {down}/{down_dc} contradicts the datacenter mapping"
            );
            covered.insert((up.to_string(), down.to_string()));
        }
        let all: BTreeSet<(String, String)> = topo
            .edges
            .iter()
            .map(|e| (e.upstream.clone(), e.downstream.clone()))
            .collect();
        assert_eq!(covered, all, "{title}: edges of serve.toml missing");
        checked += 1;
    }
    assert_eq!(checked, 2, "completeness and differences panels");
}

#[test]
fn grafana_prometheus_panels_use_exposed_metrics() {
    let exposed = exposed_sample_names();
    let exprs = prom_exprs(&dashboard());
    assert!(exprs.len() >= 5);
    for (title, expr) in exprs {
        assert!(
            !check_promql(&expr, &exposed, &title).is_empty(),
            "{title}: {expr}"
        );
    }
}

// ---------------------------------------------------------------------------------
// Compose, Kubernetes, systemd: how the services are started.

/// The config text as the subcommand sees it when `env` is set: `KAFKA_AUDIT__A__B=v`
/// sets `a.b`, lower-cased, as figment's `Env::prefixed("KAFKA_AUDIT__").split("__")`
/// in `common::load_config` does. A variable of a section the
/// subcommand does not read would be silently ignored there, so it fails here.
fn with_env(toml_text: &str, env: &BTreeMap<String, String>, sub: Subcommand) -> String {
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
fn load_text(file_name: &str, text: &str, env: &BTreeMap<String, String>) -> Loaded {
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
fn listen_port_and_paths(loaded: &Loaded) -> (u16, BTreeSet<String>) {
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

fn help(subcommand: &str) -> String {
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
fn check_command(args: &[String], context: &str) -> (String, Option<String>) {
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

fn yaml_str(v: &Yaml) -> String {
    match v {
        Yaml::String(s) => s.clone(),
        Yaml::Number(n) => n.to_string(),
        Yaml::Bool(b) => b.to_string(),
        other => panic!("not a scalar: {other:?}"),
    }
}

fn yaml_env_map(env: &Yaml) -> BTreeMap<String, String> {
    env.as_mapping()
        .into_iter()
        .flatten()
        .map(|(k, v)| (yaml_str(k), yaml_str(v)))
        .collect()
}

#[test]
fn compose_services_reference_existing_files_and_match_their_configs() {
    let dir = repo().join("deploy/compose");
    let text = read(&dir.join("docker-compose.yml"));
    // Compose interpolation with defaults, as `docker compose` does with nothing set.
    let text = regex::Regex::new(r"\$\{[A-Z_]+:-([^}]*)\}")
        .unwrap()
        .replace_all(&text, "$1")
        .into_owned();
    assert!(!text.contains("${"), "interpolation without default");
    let mut doc: Yaml = serde_norway::from_str(&text).unwrap();
    doc.apply_merge().unwrap();
    let services = doc["services"].as_mapping().unwrap();
    let named_volumes: BTreeSet<String> = doc["volumes"]
        .as_mapping()
        .unwrap()
        .keys()
        .map(yaml_str)
        .collect();
    let service = |name: &str| -> &Yaml {
        services
            .get(name)
            .unwrap_or_else(|| panic!("no service {name}"))
    };

    let kafka = service("kafka");
    assert!(yaml_str(&kafka["image"]).starts_with("apache/kafka:"));
    let kafka_env = yaml_env_map(&kafka["environment"]);
    assert!(
        kafka_env["KAFKA_PROCESS_ROLES"].contains("controller"),
        "KRaft"
    );
    let advertised = kafka_env["KAFKA_ADVERTISED_LISTENERS"].clone();
    let postgres = service("postgres");
    assert!(yaml_str(&postgres["image"]).starts_with("postgres:"));
    let pg_env = yaml_env_map(&postgres["environment"]);

    let health_url = regex::Regex::new(r"http://127\.0\.0\.1:(\d+)(/[a-z]+)").unwrap();
    let mut started = BTreeSet::new();
    let mut listen_ports = BTreeMap::new();
    let mut bind_mounts: BTreeMap<String, BTreeMap<String, PathBuf>> = BTreeMap::new();
    let mut deployment = (Vec::new(), None, None);
    for (name, svc) in services {
        let name = yaml_str(name);
        let ctx = format!("compose service {name}");
        if let Some(build) = svc.get("build") {
            let context = dir.join(yaml_str(&build["context"]));
            assert!(
                context.is_dir(),
                "{ctx}: build context {}",
                context.display()
            );
            let dockerfile = context.join(yaml_str(&build["dockerfile"]));
            assert!(dockerfile.is_file(), "{ctx}: {}", dockerfile.display());
        }
        let one_shot = svc.get("restart").map(yaml_str).as_deref() == Some("no");
        assert!(
            one_shot || svc["healthcheck"]["test"].is_sequence(),
            "{ctx}: no healthcheck"
        );
        for (dep, cond) in svc
            .get("depends_on")
            .and_then(Yaml::as_mapping)
            .into_iter()
            .flatten()
        {
            let dep_svc = service(&yaml_str(dep));
            match yaml_str(&cond["condition"]).as_str() {
                "service_healthy" => assert!(dep_svc["healthcheck"].is_mapping(), "{ctx}"),
                "service_completed_successfully" => {
                    assert_eq!(yaml_str(&dep_svc["restart"]), "no", "{ctx}")
                }
                other => panic!("{ctx}: condition {other}"),
            }
        }
        // Bind mounts name files that exist; named volumes are declared.
        let mut mounts = BTreeMap::new();
        for v in svc
            .get("volumes")
            .and_then(Yaml::as_sequence)
            .into_iter()
            .flatten()
        {
            let v = yaml_str(v);
            let parts: Vec<&str> = v.split(':').collect();
            let (src, dst) = (parts[0], parts[1]);
            if src.starts_with('.') || src.starts_with('/') {
                let path = dir.join(src);
                assert!(path.exists(), "{ctx}: {}", path.display());
            } else {
                assert!(
                    named_volumes.contains(src),
                    "{ctx}: volume {src} not declared"
                );
            }
            mounts.insert(dst.to_string(), src.to_string());
            bind_mounts
                .entry(name.clone())
                .or_default()
                .insert(dst.to_string(), dir.join(src));
        }
        if !yaml_str(&svc["image"]).starts_with("kafka-audit") {
            continue;
        }
        let args: Vec<String> = svc["command"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(yaml_str)
            .collect();
        let (sub, config) = check_command(&args, &ctx);
        let env = svc.get("environment").map(yaml_env_map).unwrap_or_default();
        for url in env.values().filter(|v| v.starts_with("postgres://")) {
            let want = format!(
                "postgres://{}:{}@postgres:5432/{}",
                pg_env["POSTGRES_USER"], pg_env["POSTGRES_PASSWORD"], pg_env["POSTGRES_DB"]
            );
            assert_eq!(url, &want, "{ctx}");
        }
        started.insert(sub.clone());
        let Some(config) = config else {
            // `migrate` takes its --store from KAFKA_AUDIT__STORE__URL.
            assert!(help(&sub).contains("KAFKA_AUDIT__STORE__URL"));
            assert!(env.contains_key("KAFKA_AUDIT__STORE__URL"), "{ctx}");
            continue;
        };
        let src = mounts
            .get(&config)
            .unwrap_or_else(|| panic!("{ctx}: {config} is not mounted"));
        let file = dir.join(src);
        let file_name = Path::new(&config).file_name().unwrap().to_str().unwrap();
        assert_eq!(Subcommand::of(file_name), Subcommand::of(&sub), "{ctx}");
        let loaded = load_text(file_name, &read(&file), &env);
        let (port, paths) = listen_port_and_paths(&loaded);
        listen_ports.insert(name.clone(), port);
        let check = svc["healthcheck"]["test"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(yaml_str)
            .collect::<Vec<_>>()
            .join(" ");
        let url = health_url
            .captures(&check)
            .unwrap_or_else(|| panic!("{ctx}: healthcheck {check}"));
        assert_eq!(
            url[1].parse::<u16>().unwrap(),
            port,
            "{ctx}: healthcheck port"
        );
        assert!(paths.contains(&url[2]), "{ctx}: {} is not served", &url[2]);
        let published: Vec<String> = svc["ports"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(yaml_str)
            .collect();
        assert!(
            published.iter().any(|p| p.ends_with(&format!(":{port}"))),
            "{ctx}: port {port} not published"
        );
        match &loaded {
            Loaded::Audit(c) => {
                deployment.0.push((**c).clone());
                assert!(advertised.contains(&format!("://{}", c.kafka.bootstrap_servers)));
                // The WAL sits on a named volume.
                let (target, volume) = mounts
                    .iter()
                    .find(|(target, _)| c.audit.wal_dir.starts_with(target))
                    .unwrap_or_else(|| panic!("{ctx}: no volume holds the WAL"));
                assert!(named_volumes.contains(volume), "{ctx}: {target}");
            }
            Loaded::Collect(c) => {
                deployment.1 = Some((**c).clone());
                for s in &c.sources {
                    assert!(advertised.contains(&format!("://{}", s.kafka.bootstrap_servers)));
                }
                assert!(c.store.url.starts_with("postgres://"));
            }
            Loaded::Serve(c) => {
                deployment.2 = Some((**c).clone());
                assert!(c.serve.database_url.starts_with("postgres://"));
            }
        }
    }
    assert_eq!(
        started,
        ["audit", "collect", "migrate", "serve"]
            .map(String::from)
            .into_iter()
            .collect()
    );
    check_one_deployment(
        &deployment.0,
        deployment.1.as_ref().unwrap(),
        deployment.2.as_ref().unwrap(),
        "compose",
    );

    // The monitoring profile: Prometheus scrapes each service on the port its config
    // listens on; Grafana's provisioned data sources fit the dashboard and PostgreSQL.
    let prometheus = service("prometheus");
    let config_file = prometheus["command"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(yaml_str)
        .find_map(|a| a.strip_prefix("--config.file=").map(String::from))
        .expect("--config.file");
    let (config_dir, file) = config_file.rsplit_once('/').unwrap();
    let prom_config: Yaml =
        serde_norway::from_str(&read(&bind_mounts["prometheus"][config_dir].join(file))).unwrap();
    let mut scraped = BTreeSet::new();
    for job in prom_config["scrape_configs"].as_sequence().unwrap() {
        for target in job["static_configs"][0]["targets"].as_sequence().unwrap() {
            let target = yaml_str(target);
            let (host, port) = target.split_once(':').unwrap();
            assert_eq!(
                listen_ports.get(host),
                Some(&port.parse::<u16>().unwrap()),
                "prometheus.yml: target {target}"
            );
            scraped.insert(host.to_string());
        }
    }
    assert_eq!(
        scraped,
        listen_ports.keys().cloned().collect(),
        "every kafka-audit service is scraped"
    );
    for rules in prom_config["rule_files"].as_sequence().unwrap() {
        let path = bind_mounts["prometheus"][config_dir].join(yaml_str(rules));
        assert!(path.is_file(), "{}", path.display());
    }

    let grafana_mounts = &bind_mounts["grafana"];
    let provisioning = &grafana_mounts["/etc/grafana/provisioning"];
    let datasources: Yaml =
        serde_norway::from_str(&read(&provisioning.join("datasources/kafka-audit.yml"))).unwrap();
    let types: BTreeSet<String> = datasources["datasources"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|d| yaml_str(&d["type"]))
        .collect();
    let wanted: BTreeSet<String> = dashboard()["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["type"] == "datasource")
        .map(|v| v["query"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        types, wanted,
        "data source types of the dashboard's variables"
    );
    let pg = datasources["datasources"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|d| d["type"] == "grafana-postgresql-datasource")
        .unwrap();
    assert_eq!(yaml_str(&pg["user"]), pg_env["POSTGRES_USER"]);
    assert_eq!(yaml_str(&pg["jsonData"]["database"]), pg_env["POSTGRES_DB"]);
    let providers: Yaml =
        serde_norway::from_str(&read(&provisioning.join("dashboards/kafka-audit.yml"))).unwrap();
    let path = yaml_str(&providers["providers"][0]["options"]["path"]);
    let mounted = &grafana_mounts[&format!("{path}/kafka-audit.json")];
    assert_eq!(
        mounted.canonicalize().unwrap(),
        repo().join("deploy/grafana/kafka-audit.json")
    );
}

/// The job names alerts.yml filters on are the jobs Prometheus scrapes, in compose
/// (prometheus.yml) and on Kubernetes (scrape-kubernetes.yml, by component label).
#[test]
fn alert_rule_jobs_are_the_scrape_jobs_of_compose_and_kubernetes() {
    let dir = repo().join("deploy/prometheus");
    let jobs_in_rules: BTreeSet<String> = regex::Regex::new(r#"job="([^"]+)""#)
        .unwrap()
        .captures_iter(&read(&dir.join("alerts.yml")))
        .map(|c| c[1].to_string())
        .collect();
    assert!(!jobs_in_rules.is_empty());
    let compose: Yaml = serde_norway::from_str(&read(&dir.join("prometheus.yml"))).unwrap();
    let compose_jobs: BTreeSet<String> = compose["scrape_configs"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|j| yaml_str(&j["job_name"]))
        .collect();
    let k8s: Yaml = serde_norway::from_str(&read(&dir.join("scrape-kubernetes.yml"))).unwrap();
    let components: BTreeSet<String> = k8s_documents()
        .iter()
        .filter_map(|d| {
            d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"].as_str()
        })
        .map(String::from)
        .collect();
    let mut k8s_jobs = BTreeSet::new();
    for relabel in k8s["scrape_configs"][0]["relabel_configs"]
        .as_sequence()
        .unwrap()
    {
        if relabel["target_label"] == "job" {
            let component = yaml_str(&relabel["regex"]);
            assert!(components.contains(&component), "no workload {component}");
            k8s_jobs.insert(yaml_str(&relabel["replacement"]));
        }
    }
    for job in &jobs_in_rules {
        assert!(
            compose_jobs.contains(job),
            "prometheus.yml has no job {job}"
        );
        assert!(
            k8s_jobs.contains(job),
            "scrape-kubernetes.yml sets no job {job}"
        );
    }
    assert_eq!(compose_jobs, k8s_jobs);
}

fn k8s_documents() -> Vec<Yaml> {
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

fn labels_match(selector: &Yaml, labels: &Yaml) -> bool {
    selector
        .as_mapping()
        .unwrap()
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v))
}

#[test]
fn kubernetes_manifests_start_the_services_with_their_configs_probes_and_volumes() {
    let docs = k8s_documents();
    let of_kind = |kind: &str| -> Vec<&Yaml> {
        docs.iter()
            .filter(|d| d["kind"].as_str() == Some(kind))
            .collect()
    };
    let named = |kind: &str, name: &str| -> &Yaml {
        of_kind(kind)
            .into_iter()
            .find(|d| d["metadata"]["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    let mut components = BTreeSet::new();
    let mut deployment = (Vec::new(), None, None);
    let workloads: Vec<&Yaml> = of_kind("StatefulSet")
        .into_iter()
        .chain(of_kind("Deployment"))
        .collect();
    for w in &workloads {
        let kind = w["kind"].as_str().unwrap();
        let name = w["metadata"]["name"].as_str().unwrap();
        let ctx = format!("{kind} {name}");
        let pod = &w["spec"]["template"];
        assert!(
            labels_match(
                &w["spec"]["selector"]["matchLabels"],
                &pod["metadata"]["labels"]
            ),
            "{ctx}"
        );
        let containers = pod["spec"]["containers"].as_sequence().unwrap();
        assert_eq!(containers.len(), 1, "{ctx}");
        let c = &containers[0];
        let args: Vec<String> = c["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(yaml_str)
            .collect();
        let (sub, config) = check_command(&args, &ctx);
        let config = config.unwrap();
        // The config file: a key of the ConfigMap mounted at its directory.
        let (config_dir, file_name) = config.rsplit_once('/').unwrap();
        let mount = c["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|m| m["mountPath"].as_str() == Some(config_dir))
            .unwrap_or_else(|| panic!("{ctx}: nothing mounted at {config_dir}"));
        let volume = pod["spec"]["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap();
        let configmap = named("ConfigMap", volume["configMap"]["name"].as_str().unwrap());
        let text = configmap["data"][file_name]
            .as_str()
            .unwrap_or_else(|| panic!("{ctx}: ConfigMap has no {file_name}"));
        // The environment as the pod gets it.
        let mut env = BTreeMap::new();
        let mut instance_id_from_pod_name = false;
        for e in c["env"].as_sequence().into_iter().flatten() {
            let key = yaml_str(&e["name"]);
            let value = if let Some(v) = e.get("value") {
                yaml_str(v)
            } else if let Some(f) = e["valueFrom"].get("fieldRef") {
                assert_eq!(f["fieldPath"].as_str(), Some("metadata.name"), "{ctx}");
                instance_id_from_pod_name |= key == "KAFKA_AUDIT__AUDIT__INSTANCE_ID";
                format!("{name}-0")
            } else {
                let s = &e["valueFrom"]["secretKeyRef"];
                let secret = named("Secret", s["name"].as_str().unwrap());
                yaml_str(&secret["stringData"][s["key"].as_str().unwrap()])
            };
            env.insert(key, value);
        }
        assert_eq!(Subcommand::of(file_name), Subcommand::of(&sub), "{ctx}");
        let loaded = load_text(file_name, text, &env);
        // Probes on the port the service listens on, at paths it serves.
        let (port, paths) = listen_port_and_paths(&loaded);
        let ports = c["ports"].as_sequence().unwrap();
        let port_name = ports
            .iter()
            .find(|p| p["containerPort"].as_u64() == Some(u64::from(port)))
            .unwrap_or_else(|| panic!("{ctx}: containerPort {port} not declared"))["name"]
            .clone();
        for probe in ["livenessProbe", "readinessProbe"] {
            let http = &c[probe]["httpGet"];
            assert_eq!(http["port"], port_name, "{ctx} {probe}");
            let path = http["path"].as_str().unwrap();
            assert!(paths.contains(path), "{ctx} {probe}: {path} is not served");
        }
        for kind in ["requests", "limits"] {
            for r in ["cpu", "memory"] {
                assert!(!c["resources"][kind][r].is_null(), "{ctx}: no {kind}.{r}");
            }
        }
        match &loaded {
            Loaded::Audit(cfg) => {
                deployment.0.push((**cfg).clone());
                assert_eq!(
                    kind, "StatefulSet",
                    "{ctx}: the auditor needs a stable identity"
                );
                assert!(
                    instance_id_from_pod_name,
                    "{ctx}: instance_id is not the pod name"
                );
                assert_eq!(cfg.audit.instance_id, format!("{name}-0"));
                // The WAL on the claim template's volume.
                let wal = c["volumeMounts"]
                    .as_sequence()
                    .unwrap()
                    .iter()
                    .find(|m| {
                        cfg.audit
                            .wal_dir
                            .starts_with(m["mountPath"].as_str().unwrap())
                    })
                    .unwrap_or_else(|| panic!("{ctx}: no volume holds the WAL"));
                assert!(
                    w["spec"]["volumeClaimTemplates"]
                        .as_sequence()
                        .unwrap()
                        .iter()
                        .any(|t| t["metadata"]["name"] == wal["name"]),
                    "{ctx}: the WAL is not on a volumeClaimTemplate"
                );
                let grace = pod["spec"]["terminationGracePeriodSeconds"]
                    .as_u64()
                    .unwrap();
                assert!(grace > cfg.audit.publish_timeout.as_secs(), "{ctx}");
                let headless = named("Service", w["spec"]["serviceName"].as_str().unwrap());
                assert_eq!(headless["spec"]["clusterIP"].as_str(), Some("None"));
                assert!(
                    of_kind("PodDisruptionBudget").iter().any(|p| labels_match(
                        &p["spec"]["selector"]["matchLabels"],
                        &pod["metadata"]["labels"]
                    )),
                    "{ctx}: no PodDisruptionBudget"
                );
            }
            Loaded::Collect(cfg) => {
                deployment.1 = Some((**cfg).clone());
                assert_eq!(kind, "Deployment");
                assert!(cfg.store.url.starts_with("postgres://"));
            }
            Loaded::Serve(cfg) => {
                deployment.2 = Some((**cfg).clone());
                assert_eq!(kind, "Deployment");
                // Every replica evaluates and alerts.
                assert_eq!(w["spec"]["replicas"].as_u64(), Some(1), "{ctx}");
                assert!(cfg.serve.database_url.starts_with("postgres://"));
            }
        }
        components.insert(sub);
    }
    assert_eq!(
        components,
        ["audit", "collect", "serve"]
            .map(String::from)
            .into_iter()
            .collect()
    );
    check_one_deployment(
        &deployment.0,
        deployment.1.as_ref().unwrap(),
        deployment.2.as_ref().unwrap(),
        "deploy/k8s",
    );
    // Every Service selects a workload and targets one of its named ports.
    for s in of_kind("Service") {
        let name = s["metadata"]["name"].as_str().unwrap();
        let w = workloads
            .iter()
            .find(|w| {
                labels_match(
                    &s["spec"]["selector"],
                    &w["spec"]["template"]["metadata"]["labels"],
                )
            })
            .unwrap_or_else(|| panic!("Service {name} selects no workload"));
        let ports = &w["spec"]["template"]["spec"]["containers"][0]["ports"];
        for p in s["spec"]["ports"].as_sequence().unwrap() {
            assert!(
                ports
                    .as_sequence()
                    .unwrap()
                    .iter()
                    .any(|cp| cp["name"] == p["targetPort"]),
                "Service {name}: targetPort {:?}",
                p["targetPort"]
            );
        }
    }
}

/// `[Service]` settings of a unit file (repeated keys keep every value).
fn unit_service_section(text: &str) -> Vec<(String, String)> {
    let mut section = "";
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            section = line;
        } else if section == "[Service]" && !line.starts_with('#') {
            if let Some((k, v)) = line.split_once('=') {
                out.push((k.to_string(), v.to_string()));
            }
        }
    }
    out
}

#[test]
fn systemd_units_start_the_services_with_example_configs_and_hardening() {
    let dir = repo().join("deploy/systemd");
    let mut subs = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let unit = path.file_name().unwrap().to_str().unwrap().to_string();
        if !unit.ends_with(".service") {
            continue;
        }
        // A template is checked as its example instance (kafka-audit-audit@dc1).
        let text = read(&path)
            .replace("%i", "dc1")
            .replace("%H", "host1.example.net");
        let settings = unit_service_section(&text);
        let get = |key: &str| -> Vec<&str> {
            settings
                .iter()
                .filter(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
                .collect()
        };
        for (key, want) in [
            ("Restart", "on-failure"),
            ("User", "kafka-audit"),
            ("NoNewPrivileges", "yes"),
            ("ProtectSystem", "strict"),
            ("ProtectHome", "yes"),
            ("PrivateTmp", "yes"),
            ("StateDirectory", "kafka-audit"),
        ] {
            assert_eq!(get(key), [want], "{unit}: {key}");
        }
        let exec = get("ExecStart");
        let args: Vec<String> = exec[0].split_whitespace().map(String::from).collect();
        assert_eq!(args[0], "/usr/local/bin/kafka-audit", "{unit}");
        let (sub, config) = check_command(&args[1..], &unit);
        // /etc/kafka-audit/X.toml is deploy/config/X.toml; /etc/kafka-audit/X.env is
        // deploy/systemd/X.env.example.
        let config = config.unwrap();
        let file_name = config.strip_prefix("/etc/kafka-audit/").unwrap();
        let mut env = BTreeMap::new();
        for e in get("Environment") {
            let (k, v) = e.split_once('=').unwrap();
            env.insert(k.to_string(), v.to_string());
        }
        for f in get("EnvironmentFile") {
            let name = f
                .trim_start_matches('-')
                .strip_prefix("/etc/kafka-audit/")
                .unwrap();
            let example = dir.join(format!("{name}.example"));
            for line in read(&example)
                .lines()
                .filter(|l| !l.starts_with('#') && !l.is_empty())
            {
                let (k, v) = line.split_once('=').unwrap();
                env.insert(k.to_string(), v.to_string());
            }
        }
        assert_eq!(Subcommand::of(file_name), Subcommand::of(&sub), "{unit}");
        let loaded = load_text(file_name, &read(&config_dir().join(file_name)), &env);
        match loaded {
            Loaded::Audit(c) => {
                assert_eq!(c.audit.instance_id, "host1.example.net-dc1");
                // StateDirectory=kafka-audit is /var/lib/kafka-audit, the only
                // writable place under ProtectSystem=strict.
                assert!(
                    c.audit.wal_dir.starts_with("/var/lib/kafka-audit"),
                    "{unit}"
                );
                let secrets = c.kafka.properties_for(common::KafkaRole::Consumer);
                assert_eq!(secrets["sasl.password"], "CHANGE-ME", "{unit}");
            }
            Loaded::Collect(c) => assert!(c.store.url.contains(":CHANGE-ME@")),
            Loaded::Serve(c) => assert!(c.serve.database_url.contains(":CHANGE-ME@")),
        }
        subs.insert(sub);
    }
    assert_eq!(
        subs,
        ["audit", "collect", "serve"]
            .map(String::from)
            .into_iter()
            .collect()
    );
}

// ---------------------------------------------------------------------------------
// The compose stack without Docker: the real binary, the compose configs.

/// A `kafka-audit` child process; killed if the test ends without stopping it.
struct Process {
    name: &'static str,
    child: std::process::Child,
    log: PathBuf,
}

impl Process {
    fn start(name: &'static str, args: &[&str], env: &[(&str, &str)], dir: &Path) -> Process {
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

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, as `docker stop`, Kubernetes and systemd send, then waits: a clean
    /// shutdown exits 0 (which systemd's Restart=on-failure does not restart).
    fn stop(mut self) {
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

    fn assert_running(&mut self) {
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

fn free_port() -> u16 {
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
    use store::AuditStore;
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

    // No [topology] window in the compose config: before the first audit window is
    // stored, serve is not ready and says what it waits for.
    let readyz = format!("http://127.0.0.1:{api}/readyz");
    eventually(
        60,
        "/readyz waiting for a window",
        &mut [&mut serve],
        || async {
            http_get(&readyz)
                .await
                .filter(|(s, body)| *s == 503 && body.contains("\"waiting_for\""))
        },
    )
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
    // serve has learned the window size from a stored window.
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

/// The image the compose file and the manifests run: its entrypoint is the binary (they
/// pass only the subcommand), its user is the one the pods run as, and it builds the
/// package that has the binary.
#[test]
fn the_image_fits_how_compose_and_kubernetes_run_it() {
    let dockerfile = read(&repo().join("deploy/docker/Dockerfile"));
    let last = |instruction: &str| -> String {
        dockerfile
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix(&format!("{instruction} ")))
            .unwrap_or_else(|| panic!("Dockerfile has no {instruction}"))
            .to_string()
    };
    assert_eq!(last("ENTRYPOINT"), r#"["/usr/local/bin/kafka-audit"]"#);
    assert!(dockerfile.contains("cargo build --release --locked -p kafka-audit"));
    assert_eq!(env!("CARGO_PKG_NAME"), "kafka-audit");
    let (uid, gid) = last("USER")
        .split_once(':')
        .map(|(u, g)| (u.parse::<u64>().unwrap(), g.parse::<u64>().unwrap()))
        .expect("USER uid:gid, numeric");
    let exposed: BTreeSet<u16> = last("EXPOSE")
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let mut workloads = 0;
    for d in k8s_documents() {
        let pod = &d["spec"]["template"]["spec"];
        if pod.is_null() {
            continue;
        }
        let security = &pod["securityContext"];
        assert_eq!(security["runAsUser"].as_u64(), Some(uid));
        assert_eq!(security["runAsGroup"].as_u64(), Some(gid));
        assert_eq!(security["runAsNonRoot"].as_bool(), Some(true));
        for c in pod["containers"].as_sequence().unwrap() {
            for p in c["ports"].as_sequence().unwrap() {
                let port = p["containerPort"].as_u64().unwrap() as u16;
                assert!(exposed.contains(&port), "EXPOSE lacks {port}");
            }
        }
        workloads += 1;
    }
    assert_eq!(workloads, 3);
}

#[test]
fn grafana_panels_have_unique_ids_and_use_the_dashboard_data_sources() {
    let d = dashboard();
    let variables: BTreeSet<String> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["type"] == "datasource")
        .map(|v| format!("${{{}}}", v["name"].as_str().unwrap()))
        .collect();
    let mut ids = BTreeSet::new();
    for p in d["panels"].as_array().unwrap() {
        let id = p["id"].as_u64().unwrap();
        assert!(ids.insert(id), "panel id {id} twice");
        if p["type"] == "row" {
            continue;
        }
        let uid = p["datasource"]["uid"].as_str().unwrap();
        assert!(variables.contains(uid), "panel {id}: data source {uid}");
        for t in p["targets"].as_array().unwrap() {
            assert_eq!(t["datasource"], p["datasource"], "panel {id}");
        }
    }
}
