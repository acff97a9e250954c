//! The Kubernetes manifests (deploy/k8s) start the services with the configs of their
//! ConfigMaps and the environment of their Secrets, probe the ports and paths the
//! services serve, keep the WAL on a claim template and form one deployment.

use std::collections::{BTreeMap, BTreeSet};

use serde_norway::Value as Yaml;

use super::support::*;

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
