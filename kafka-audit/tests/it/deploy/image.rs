//! The image (deploy/docker/Dockerfile) fits how compose and Kubernetes run it.

use std::collections::BTreeSet;

use super::support::*;

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
