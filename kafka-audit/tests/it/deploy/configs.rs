//! Every example config of deploy/config loads through the loader of its subcommand,
//! the auditors, the collector and the topology describe one deployment, and a typo in
//! any section (or a misspelt `log.format`) is an error.

use std::path::Path;

use super::support::*;

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
    // Uncommenting the regional auditors' `replicators` needs nothing else:
    // the collector already reads their evidence topic as one of its evidence_topics
    // (evidence anywhere else is rejected).
    let mut with_replicators = ex.audits.clone();
    for a in with_replicators
        .iter_mut()
        .filter(|a| a.audit.tier == "regional")
    {
        a.audit.replicators = vec![common::replication::Replicator::MirrorMaker2(
            common::replication::MirrorMaker2 {
                source: None,
                target: "agg".into(),
            },
        )];
        a.validate().unwrap();
    }
    check_one_deployment(
        &with_replicators,
        &ex.collect,
        &ex.serve,
        "deploy/config with the replicators uncommented",
    );
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
