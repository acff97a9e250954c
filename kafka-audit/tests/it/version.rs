//! `kafka-audit --version` names the package version and the git revision it was built
//! from; a build without git (a source tarball) says the revision is unknown instead of
//! failing.

use std::path::Path;
use std::process::Command;

use crate::revision;

#[test]
fn version_names_the_package_version_and_the_git_revision_of_head() {
    let out = Command::new(env!("CARGO_BIN_EXE_kafka-audit"))
        .arg("--version")
        .output()
        .expect("run kafka-audit --version");
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    // What build.rs computes now: cargo reruns it (and rebuilds the binary) when HEAD
    // moves, so a test of an older binary against a newer HEAD cannot happen.
    let rev = match std::env::var("KAFKA_AUDIT_GIT_REV") {
        Ok(r) if !r.trim().is_empty() => Some(r.trim().to_string()),
        _ => revision::git_revision(Path::new(env!("CARGO_MANIFEST_DIR"))),
    };
    let expected = format!(
        "kafka-audit {}\n",
        revision::version_string(env!("CARGO_PKG_VERSION"), rev.as_deref())
    );
    assert_eq!(stdout, expected);
    assert!(stdout.starts_with(&format!("kafka-audit {} (git ", env!("CARGO_PKG_VERSION"))));
    if Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../.git")
        .exists()
    {
        let rev = rev.expect("a checkout with .git has a revision");
        assert_eq!(rev.len(), 12, "{rev}");
        assert!(stdout.contains(&rev), "{stdout}");
    }
}

#[test]
fn a_tree_without_git_gets_an_unknown_revision() {
    let dir = tempfile::tempdir().expect("temp dir");
    assert_eq!(revision::git_revision(dir.path()), None);
    assert_eq!(
        revision::version_string("1.2.3", None),
        "1.2.3 (git revision unknown)"
    );
    assert_eq!(
        revision::version_string("1.2.3", Some("0123456789ab")),
        "1.2.3 (git 0123456789ab)"
    );
}
