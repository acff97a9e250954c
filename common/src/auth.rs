//! Bearer tokens, shared by `serve` (the API: scopes `read`, `admin`) and `collect`
//! (HTTP ingest: scope `ingest`), configured the same way in both:
//!
//! ```toml
//! [[auth.tokens]]
//! name = "producers-dc1"                      # who holds it, for logs and answers
//! token_file = "/run/secrets/ingest-dc1"      # or token = "..." (prefer the file)
//! scopes = ["ingest"]
//! tiers = ["producer"]                        # optional: what it may report (ingest;
//!                                             # evidence tiers only when named)
//! datacenters = ["dc1"]
//! ```
//!
//! Tokens are read once at start ([`Tokens::load`]); a file's trailing newline is
//! ignored (Kubernetes Secrets mounted as files, systemd credentials). A token shorter
//! than [`MIN_TOKEN_LEN`] bytes, or one that looks like a placeholder from an example
//! config (`replace-me`, `change-me`, …), is refused at start. Presented tokens are
//! compared as SHA-256 digests, against every configured token, in constant time:
//! timing reveals neither the length of a token nor which one matched.

use std::path::PathBuf;

use axum::http::{header, HeaderMap};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Shortest token accepted (24 bytes, e.g. `openssl rand -hex 16` gives 32).
pub const MIN_TOKEN_LEN: usize = 24;

/// Substrings of example-config placeholders; a token containing one is refused.
const PLACEHOLDERS: &[&str] = &[
    "replace-me",
    "replace_me",
    "replaceme",
    "change-me",
    "change_me",
    "changeme",
    "placeholder",
    "example",
    "your-token",
    "secret-token",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Read the API (serve).
    Read,
    /// Read plus `POST /api/v1/evaluate` (serve).
    Admin,
    /// `POST /api/v1/audit` (collect).
    Ingest,
}

#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// Who holds it, for logs and error answers; never the token itself.
    pub name: String,
    /// The token. Prefer `token_file`, which keeps it out of the config file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// A file holding the token (trailing whitespace ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    pub scopes: Vec<Scope>,
    /// Ingest only: the tiers it may report; empty = any counting tier. Replication
    /// evidence (`replicator:…` tiers) only when named here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<String>,
    /// Ingest only: the datacenters it may report; empty = any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub datacenters: Vec<String>,
}

// Hand-written: the token must not reach a log through `{:?}`.
impl std::fmt::Debug for TokenConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenConfig")
            .field("name", &self.name)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("token_file", &self.token_file)
            .field("scopes", &self.scopes)
            .field("tiers", &self.tiers)
            .field("datacenters", &self.datacenters)
            .finish()
    }
}

impl TokenConfig {
    /// What can be checked without reading `token_file` (config validation): a name,
    /// exactly one of `token` and `token_file`, at least one scope out of `allowed`,
    /// and an inline token's length and placeholder check. [`Tokens::load`] checks a
    /// file's token the same way.
    pub fn check(&self, allowed: &[Scope]) -> anyhow::Result<()> {
        anyhow::ensure!(!self.name.trim().is_empty(), "an auth token has no name");
        match (&self.token, &self.token_file) {
            (Some(t), None) => check_token(&self.name, t)?,
            (None, Some(_)) => {}
            _ => anyhow::bail!(
                "auth token {:?}: set exactly one of token and token_file",
                self.name
            ),
        }
        anyhow::ensure!(
            !self.scopes.is_empty(),
            "auth token {:?} has no scopes",
            self.name
        );
        if let Some(s) = self.scopes.iter().find(|s| !allowed.contains(s)) {
            anyhow::bail!(
                "auth token {:?}: scope {s:?} does not exist here (allowed: {allowed:?})",
                self.name
            );
        }
        Ok(())
    }
}

fn check_token(name: &str, token: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        token.len() >= MIN_TOKEN_LEN,
        "auth token {name:?} is shorter than {MIN_TOKEN_LEN} bytes (generate one with `openssl rand -hex 32`)"
    );
    let lower = token.to_ascii_lowercase();
    anyhow::ensure!(
        !PLACEHOLDERS.iter().any(|p| lower.contains(p)),
        "auth token {name:?} looks like a placeholder from an example config; generate a real one (`openssl rand -hex 32`)"
    );
    anyhow::ensure!(
        !token.chars().any(char::is_whitespace),
        "auth token {name:?} contains whitespace"
    );
    Ok(())
}

/// A configured token, ready to match.
#[derive(Clone)]
pub struct Holder {
    pub name: String,
    pub scopes: Vec<Scope>,
    pub tiers: Vec<String>,
    pub datacenters: Vec<String>,
    digest: [u8; 32],
}

impl std::fmt::Debug for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Holder")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

impl Holder {
    /// Has `scope` (admin implies read).
    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
            || (scope == Scope::Read && self.scopes.contains(&Scope::Admin))
    }

    /// `None` when this holder may report for (`tier`, `datacenter`), otherwise why not.
    ///
    /// Replication evidence (a tier of [`crate::replication::is_evidence_tier`]) proves
    /// losses on its own (docs/design.md §10): only a token that names its tier in
    /// `tiers` may send it; "any tier" (`tiers` omitted) means any counting tier, never
    /// evidence.
    pub fn binding_refuses(&self, tier: &str, datacenter: &str) -> Option<String> {
        if self.tiers.is_empty() && crate::replication::is_evidence_tier(tier) {
            return Some(format!(
                "token {:?} may not report tier {tier:?}: replication evidence is accepted only \
                 from a token that names its tier in `tiers` (this one may report any counting tier)",
                self.name
            ));
        }
        if !self.tiers.is_empty() && !self.tiers.iter().any(|t| t == tier) {
            return Some(format!(
                "token {:?} may not report tier {tier:?} (allowed: {:?})",
                self.name, self.tiers
            ));
        }
        if !self.datacenters.is_empty() && !self.datacenters.iter().any(|d| d == datacenter) {
            return Some(format!(
                "token {:?} may not report datacenter {datacenter:?} (allowed: {:?})",
                self.name, self.datacenters
            ));
        }
        None
    }
}

/// Why a request carries no usable token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("missing bearer token (Authorization: Bearer <token>)")]
    Missing,
    #[error("unknown bearer token")]
    Unknown,
}

/// The configured tokens of one service.
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    holders: Vec<Holder>,
}

impl Tokens {
    /// Reads and checks every token: each needs a name, exactly one of `token` and
    /// `token_file`, at least one scope out of `allowed`, at least [`MIN_TOKEN_LEN`]
    /// bytes, no placeholder text, and no two tokens may be equal.
    pub fn load(configs: &[TokenConfig], allowed: &[Scope]) -> anyhow::Result<Tokens> {
        let mut holders: Vec<Holder> = Vec::with_capacity(configs.len());
        for c in configs {
            c.check(allowed)?;
            let token = match (&c.token, &c.token_file) {
                (Some(t), _) => t.clone(),
                (None, Some(path)) => std::fs::read_to_string(path)
                    .map_err(|e| {
                        anyhow::anyhow!(
                            "auth token {:?}: cannot read token_file {}: {e}",
                            c.name,
                            path.display()
                        )
                    })?
                    .trim_end()
                    .to_string(),
                (None, None) => anyhow::bail!("auth token {:?} has no token", c.name),
            };
            check_token(&c.name, &token)?;
            let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
            anyhow::ensure!(
                !holders.iter().any(|h| h.digest == digest),
                "auth token {:?} is the same as another token",
                c.name
            );
            holders.push(Holder {
                name: c.name.clone(),
                scopes: c.scopes.clone(),
                tiers: c.tiers.clone(),
                datacenters: c.datacenters.clone(),
                digest,
            });
        }
        Ok(Tokens { holders })
    }

    pub fn is_empty(&self) -> bool {
        self.holders.is_empty()
    }

    /// The holder of the bearer token in `headers` (`Authorization: Bearer <token>`,
    /// the scheme case-insensitive as RFC 7235 says).
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<&Holder, AuthError> {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, token) = v.trim_start().split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
            })
            .filter(|t| !t.is_empty())
            .ok_or(AuthError::Missing)?;
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        // Look at every token, without branching on the bytes, whatever matches.
        let mut found = usize::MAX;
        for (index, holder) in self.holders.iter().enumerate() {
            let diff = holder
                .digest
                .iter()
                .zip(&digest)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            let is_match = usize::from(diff == 0);
            // index when matching, unchanged otherwise, without a data-dependent branch
            found = (found & is_match.wrapping_sub(1)) | (index & 0usize.wrapping_sub(is_match));
        }
        self.holders.get(found).ok_or(AuthError::Unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const GOOD: &str = "0123456789abcdef0123456789abcdef";

    fn config(name: &str, token: &str, scopes: &[Scope]) -> TokenConfig {
        TokenConfig {
            name: name.into(),
            token: Some(token.into()),
            scopes: scopes.to_vec(),
            ..TokenConfig::default()
        }
    }

    fn bearer(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn refuses_short_placeholder_and_duplicate_tokens() {
        let load = |c: Vec<TokenConfig>| Tokens::load(&c, &[Scope::Ingest]);
        assert!(load(vec![config("a", GOOD, &[Scope::Ingest])]).is_ok());
        let short = load(vec![config(
            "a",
            "0123456789abcdef0123456",
            &[Scope::Ingest],
        )]);
        assert!(short.unwrap_err().to_string().contains("shorter than 24"));
        for placeholder in [
            "replace-me-read-token-0123456789",
            "CHANGE-ME-0123456789abcdef01234",
            "changeme0123456789abcdef0123456",
        ] {
            let e = load(vec![config("a", placeholder, &[Scope::Ingest])]).unwrap_err();
            assert!(e.to_string().contains("placeholder"), "{e}");
        }
        assert!(load(vec![config("a", GOOD, &[])]).is_err(), "no scope");
        assert!(
            load(vec![config("a", GOOD, &[Scope::Admin])]).is_err(),
            "foreign scope"
        );
        assert!(load(vec![
            config("a", GOOD, &[Scope::Ingest]),
            config("b", GOOD, &[Scope::Ingest])
        ])
        .is_err());
        let mut both = config("a", GOOD, &[Scope::Ingest]);
        both.token_file = Some("/dev/null".into());
        assert!(load(vec![both]).is_err());
    }

    #[test]
    fn reads_tokens_from_files_without_the_trailing_newline() {
        let dir = std::env::temp_dir().join(format!("kafka-audit-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, format!("{GOOD}\n")).unwrap();
        let c = TokenConfig {
            name: "from-file".into(),
            token_file: Some(path.clone()),
            scopes: vec![Scope::Ingest],
            ..TokenConfig::default()
        };
        let tokens = Tokens::load(std::slice::from_ref(&c), &[Scope::Ingest]).unwrap();
        assert_eq!(
            tokens
                .authenticate(&bearer(&format!("Bearer {GOOD}")))
                .unwrap()
                .name,
            "from-file"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        let e = Tokens::load(&[c], &[Scope::Ingest]).unwrap_err();
        assert!(e.to_string().contains("cannot read token_file"), "{e}");
        assert!(
            !format!("{:?}", config("x", GOOD, &[])).contains(GOOD),
            "Debug masks"
        );
    }

    #[test]
    fn matches_bearer_case_insensitively_and_only_exact_tokens() {
        let other = "fedcba9876543210fedcba9876543210";
        let tokens = Tokens::load(
            &[
                config("a", GOOD, &[Scope::Read]),
                config("b", other, &[Scope::Admin]),
            ],
            &[Scope::Read, Scope::Admin],
        )
        .unwrap();
        for scheme in ["Bearer", "bearer", "BEARER"] {
            let h = tokens
                .authenticate(&bearer(&format!("{scheme} {other}")))
                .unwrap();
            assert_eq!(h.name, "b");
            assert!(h.has(Scope::Read) && h.has(Scope::Admin) && !h.has(Scope::Ingest));
        }
        assert_eq!(
            tokens.authenticate(&HeaderMap::new()).unwrap_err(),
            AuthError::Missing
        );
        assert_eq!(
            tokens
                .authenticate(&bearer(&format!("Basic {GOOD}")))
                .unwrap_err(),
            AuthError::Missing
        );
        for wrong in [&GOOD[1..], &format!("{GOOD}0"), "x"] {
            assert_eq!(
                tokens
                    .authenticate(&bearer(&format!("Bearer {wrong}")))
                    .unwrap_err(),
                AuthError::Unknown
            );
        }
    }

    #[test]
    fn bindings_limit_tiers_and_datacenters() {
        let mut c = config("dc1-producers", GOOD, &[Scope::Ingest]);
        c.tiers = vec!["producer".into()];
        c.datacenters = vec!["dc1".into()];
        let tokens = Tokens::load(&[c], &[Scope::Ingest]).unwrap();
        let h = tokens
            .authenticate(&bearer(&format!("Bearer {GOOD}")))
            .unwrap();
        assert_eq!(h.binding_refuses("producer", "dc1"), None);
        assert!(h
            .binding_refuses("regional", "dc1")
            .unwrap()
            .contains("tier"));
        assert!(h
            .binding_refuses("producer", "dc2")
            .unwrap()
            .contains("datacenter"));
    }

    /// Replication evidence (a `replicator:` tier) is sent only by a token that names
    /// its tier; "any tier" (tiers omitted) is every counting tier only.
    #[test]
    fn evidence_tiers_need_a_token_that_names_them() {
        let any = config("any-tier", GOOD, &[Scope::Ingest]);
        let mut auditor = config(
            "auditor",
            "fedcba9876543210fedcba9876543210",
            &[Scope::Ingest],
        );
        auditor.tiers = vec!["regional".into(), "replicator:group/mirror".into()];
        let tokens = Tokens::load(&[any, auditor], &[Scope::Ingest]).unwrap();
        let any = tokens
            .authenticate(&bearer(&format!("Bearer {GOOD}")))
            .unwrap();
        assert_eq!(any.binding_refuses("regional", "dc1"), None);
        let why = any
            .binding_refuses("replicator:group/mirror", "dc1")
            .expect("evidence refused to an any-tier token");
        assert!(
            why.contains("any-tier") && why.contains("evidence"),
            "{why}"
        );
        let auditor = tokens
            .authenticate(&bearer("Bearer fedcba9876543210fedcba9876543210"))
            .unwrap();
        assert_eq!(
            auditor.binding_refuses("replicator:group/mirror", "dc1"),
            None
        );
        assert!(auditor
            .binding_refuses("replicator:mm2/agg", "dc1")
            .is_some());
    }
}
