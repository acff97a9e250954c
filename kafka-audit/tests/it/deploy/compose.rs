//! The compose file (deploy/compose): services name files that exist, run subcommands
//! with flags the binary has, load their configs with the environment compose sets,
//! probe the ports and paths the services serve and form one deployment; Prometheus
//! scrapes every service, and Grafana's provisioned data sources fit the dashboard.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_norway::Value as Yaml;

use super::support::*;

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
