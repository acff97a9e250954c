//! The git revision in `kafka-audit --version`. Used by `build.rs` (not by the binary
//! at run time) and tested by `tests/it/version.rs`.

use std::path::Path;
use std::process::Command;

/// The abbreviated commit of HEAD of the repository containing `dir`, or `None` when
/// there is no git or no repository (a build from a source tarball).
pub fn git_revision(dir: &Path) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()?;
    let rev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !rev.is_empty() && rev.bytes().all(|b| b.is_ascii_hexdigit()))
        .then_some(rev)
}

/// `0.1.0 (git 0123456789ab)`, or `0.1.0 (git revision unknown)`.
pub fn version_string(package_version: &str, revision: Option<&str>) -> String {
    match revision {
        Some(rev) => format!("{package_version} (git {rev})"),
        None => format!("{package_version} (git revision unknown)"),
    }
}
