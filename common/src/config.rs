//! Layered configuration: the type's `Default`, then a TOML file, then environment
//! variables `KAFKA_AUDIT__SECTION__KEY` (double underscore separates levels).
//!
//! Config structs should carry `#[serde(deny_unknown_fields)]` so that a typo in the
//! file or in an environment variable is an error, not a silently ignored default.

use std::path::Path;

use anyhow::Context;
use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Prefix of environment overrides: `KAFKA_AUDIT__KAFKA__BOOTSTRAP_SERVERS=...` sets
/// `kafka.bootstrap_servers`.
pub const ENV_PREFIX: &str = "KAFKA_AUDIT__";

/// Loads `T` from defaults, the optional TOML file and `KAFKA_AUDIT__*` environment
/// variables, later layers overriding earlier ones.
///
/// `env_sections` restricts which top-level keys the environment may set (e.g.
/// `&["kafka", "audit", "ops", "log"]`), so that variables meant for another
/// subcommand running in the same environment do not trip `deny_unknown_fields`.
/// An empty slice accepts every key.
pub fn load_config<T>(file: Option<&Path>, env_sections: &[&str]) -> anyhow::Result<T>
where
    T: DeserializeOwned + Serialize + Default,
{
    let mut figment = Figment::from(Serialized::defaults(T::default()));
    if let Some(path) = file {
        if !path.exists() {
            anyhow::bail!("config file {} does not exist", path.display());
        }
        figment = figment.merge(Toml::file(path));
    }
    let sections: Vec<String> = env_sections
        .iter()
        .map(|s| s.to_ascii_lowercase())
        .collect();
    let env = Env::prefixed(ENV_PREFIX).split("__").filter(move |key| {
        sections.is_empty() || {
            let key = key.as_str().to_ascii_lowercase();
            let top = key.split('.').next().unwrap_or("");
            sections.iter().any(|s| s == top)
        }
    });
    figment = figment.merge(env);
    figment.extract::<T>().with_context(|| match file {
        Some(p) => format!(
            "invalid configuration (file {}, env {ENV_PREFIX}*)",
            p.display()
        ),
        None => format!("invalid configuration (defaults, env {ENV_PREFIX}*)"),
    })
}

/// Parses `T` from a TOML string layered over defaults (no environment): for tests.
pub fn from_toml_str<T>(toml: &str) -> anyhow::Result<T>
where
    T: DeserializeOwned + Serialize + Default,
{
    Figment::from(Serialized::defaults(T::default()))
        .merge(Toml::string(toml))
        .extract::<T>()
        .context("invalid configuration")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    struct Section {
        name: String,
        port: u16,
    }

    #[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    struct Root {
        section: Section,
    }

    #[test]
    fn unknown_keys_are_errors_not_silent_defaults() {
        let err = from_toml_str::<Root>("[section]\nnmae = \"x\"\n").unwrap_err();
        assert!(format!("{err:#}").contains("nmae"), "{err:#}");
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail API returns its own error type
    fn file_then_env_override() {
        let dir = std::env::temp_dir().join(format!("common-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.toml");
        std::fs::write(&file, "[section]\nname = \"file\"\nport = 1\n").unwrap();
        figment::Jail::expect_with(|jail| {
            jail.set_env("KAFKA_AUDIT__SECTION__PORT", "7");
            jail.set_env("KAFKA_AUDIT__OTHER__X", "ignored: not our section");
            let root: Root = load_config(Some(&file), &["section"]).unwrap();
            assert_eq!(
                root.section,
                Section {
                    name: "file".into(),
                    port: 7
                }
            );
            Ok(())
        });
    }

    #[test]
    fn missing_file_is_an_error() {
        let err = load_config::<Root>(Some(Path::new("/nonexistent/x.toml")), &[]).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/x.toml"));
    }
}
