//! The Prometheus rules (deploy/prometheus) and their promtool tests use only metrics
//! and label values the services expose; the job names they filter on are the scrape
//! jobs of compose and Kubernetes.

use std::collections::BTreeSet;

use serde_norway::Value as Yaml;

use super::support::*;

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
    // What the rules must cover.
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

/// The rules pass their unit tests (`promtool test rules`, deploy/prometheus/
/// alerts_test.yml): each alert fires, with its labels and annotations, when its series
/// say so, and not before. promtool comes with Debian's `prometheus` package, which
/// test.sh installs.
#[test]
fn the_rules_pass_their_promtool_unit_tests() {
    let out = std::process::Command::new("promtool")
        .arg("test")
        .arg("rules")
        .arg(repo().join("deploy/prometheus/alerts_test.yml"))
        .output()
        .expect("promtool (apt-get install prometheus; test.sh installs it)");
    assert!(
        out.status.success(),
        "promtool test rules failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
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
