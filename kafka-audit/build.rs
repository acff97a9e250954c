//! Puts the git revision into `kafka-audit --version` (`KAFKA_AUDIT_VERSION`).
//!
//! The revision comes from `KAFKA_AUDIT_GIT_REV` when set (a build from a tarball or a
//! Docker context without `.git` can pass it), else from `git`; without either the
//! version says `unknown` rather than failing the build. Cargo reruns this script when
//! HEAD moves (a commit, a checkout): it watches HEAD and the branch it points to.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "src/revision.rs"]
mod revision;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=KAFKA_AUDIT_GIT_REV");
    let manifest_dir =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let rev = match std::env::var("KAFKA_AUDIT_GIT_REV") {
        Ok(rev) if !rev.trim().is_empty() => Some(rev.trim().to_string()),
        _ => {
            for file in watched_git_files(&manifest_dir) {
                println!("cargo:rerun-if-changed={}", file.display());
            }
            revision::git_revision(&manifest_dir)
        }
    };
    let version = revision::version_string(
        &std::env::var("CARGO_PKG_VERSION").expect("cargo sets it"),
        rev.as_deref(),
    );
    println!("cargo:rustc-env=KAFKA_AUDIT_VERSION={version}");
}

/// HEAD of the (work)tree, the ref it points to and packed-refs: any of them changes
/// when HEAD moves. Only files that exist (cargo would otherwise rerun every build).
fn watched_git_files(dir: &Path) -> Vec<PathBuf> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let mut paths = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        paths.push(branch);
    }
    paths
        .iter()
        .filter_map(|p| git(&["rev-parse", "--path-format=absolute", "--git-path", p]))
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .collect()
}
