//! The systemd units (deploy/systemd) start the services with the example configs and
//! environment files, and with the hardening settings.

use std::collections::{BTreeMap, BTreeSet};

use super::support::*;

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
