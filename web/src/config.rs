//! `serve.toml`: listen address, store URL, topology, evaluation, API limits, auth and
//! alert channels. Layered: defaults, the TOML file, then `KAFKA_AUDIT__SECTION__KEY`
//! environment variables (e.g. `KAFKA_AUDIT__SERVE__LISTEN=0.0.0.0:8080`). Every
//! struct denies unknown fields, so a typo is an error rather than a silent default.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::engine::TopologyConfig;

/// `[log]`: read by the binary, which initialises tracing (`common::init_tracing`).
pub use common::LogConfig;

/// Top-level sections the environment may set (see `common::load_config`): variables
/// meant for other subcommands in the same environment must not trip
/// `deny_unknown_fields`.
pub const ENV_SECTIONS: &[&str] = &["serve", "topology", "auth", "alerting", "log"];

/// The whole file. Other subcommands' sections may live in the same file; `serve`
/// reads only these.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub serve: ServeConfig,
    #[serde(default)]
    pub topology: TopologyConfig,
    #[serde(default)]
    pub auth: AuthConfig,
    #[serde(default)]
    pub alerting: AlertingConfig,
    #[serde(default)]
    pub log: LogConfig,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    /// `postgres://...` or `sqlite:PATH` (a plain path is SQLite too). Serve only reads
    /// from it (windows, progress) unless `alert_database_url` is unset: it may be a
    /// read replica.
    pub database_url: String,
    /// The writer for serve's own state, the open alerts (kept across restarts), when
    /// `database_url` is a read replica: the primary of that replica, or any database
    /// of the same schema. Unset: `database_url`. With `migrate`, the migrations run here.
    pub alert_database_url: Option<String>,
    /// Apply pending migrations at start.
    pub migrate: bool,
    /// How often windows are evaluated (verdicts, metrics, alerts).
    #[serde(with = "humantime_serde")]
    pub evaluate_every: Duration,
    /// How far back verdicts are kept in memory; `/anomalies` and `/topics` answer
    /// within it.
    #[serde(with = "humantime_serde")]
    pub horizon: Duration,
    /// Longest `from`..`to` range a request may ask for.
    #[serde(with = "humantime_serde")]
    pub max_range: Duration,
    /// Largest `page_size`.
    pub max_page_size: u32,
    /// Requests taking longer are answered 503.
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// API requests (`/api/...`) served at once; more wait for a slot within
    /// `request_timeout`. Below the store's pool (8), so that slow reads leave the
    /// evaluator connections.
    pub max_concurrent_requests: usize,
    /// A connection that has not sent a whole request head (or finished its TLS
    /// handshake) within this is closed; idle keep-alive connections too.
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// Connections served at once; more wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// Serve HTTPS with this PEM certificate chain (leaf first); needs `tls_key`.
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of `tls_cert` (PKCS#8, PKCS#1 or SEC1).
    pub tls_key: Option<PathBuf>,
    /// With no `[auth] tokens`, the host names (the `Host` header, port left out)
    /// requests may be addressed to, besides IP addresses and `localhost`: a page
    /// elsewhere whose name is rebound to this server's address (DNS rebinding) must
    /// not read the API or evaluate through a visitor's browser. Unused with tokens.
    pub allowed_hosts: Vec<String>,
    /// Verdicts other than `ok` kept in memory at most (the verdict index): a flood
    /// of forged topics cannot grow serve without bound. Past it, new verdicts are
    /// not kept, `/anomalies` and `/topics` answer 503 for the windows concerned and
    /// `/readyz` says so, until those windows leave the horizon.
    pub max_verdicts: usize,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".parse().expect("static address"),
            database_url: "sqlite:kafka-audit.db".into(),
            alert_database_url: None,
            migrate: true,
            evaluate_every: Duration::from_secs(60),
            horizon: Duration::from_secs(7 * 24 * 3600),
            max_range: Duration::from_secs(7 * 24 * 3600),
            max_page_size: 1000,
            request_timeout: Duration::from_secs(10),
            max_concurrent_requests: 4,
            header_read_timeout: common::server::DEFAULT_HEADER_READ_TIMEOUT,
            max_connections: common::server::DEFAULT_MAX_CONNECTIONS,
            tls_cert: None,
            tls_key: None,
            allowed_hosts: Vec::new(),
            max_verdicts: 500_000,
        }
    }
}

/// Bearer tokens, shared with the collector (`common::auth`): `name`, `token` or
/// `token_file`, `scopes` (`read`, `admin`).
pub use common::auth::{Scope, TokenConfig};

/// The scopes of `serve`'s API.
pub const SCOPES: &[Scope] = &[Scope::Read, Scope::Admin];

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// When empty, the API is open. When not, every `/api` route needs a token.
    pub tokens: Vec<TokenConfig>,
    /// `/healthz` and `/readyz` without a token.
    pub open_health: bool,
    /// `/metrics` without a token.
    pub open_metrics: bool,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            tokens: Vec::new(),
            open_health: true,
            open_metrics: true,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlertingConfig {
    pub enabled: bool,
    pub channels: Vec<ChannelConfig>,
    /// Verdicts that alert.
    pub kinds: Vec<crate::engine::Verdict>,
    /// Windows that ended longer ago than this do not alert (after a restart, old
    /// anomalies are already known).
    #[serde(with = "humantime_serde")]
    pub max_window_age: Duration,
    /// At most `rate_limit` notifications per channel per `rate_period`; the rest
    /// wait for the next period.
    pub rate_limit: u32,
    #[serde(with = "humantime_serde")]
    pub rate_period: Duration,
    /// Delivery attempts per notification before it counts as failed (and is retried
    /// at the next evaluation).
    pub attempts: u32,
    #[serde(with = "humantime_serde")]
    pub initial_backoff: Duration,
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
    #[serde(with = "humantime_serde")]
    pub send_timeout: Duration,
    /// Base URL of the API for links in notifications.
    pub public_url: Option<String>,
}

impl Default for AlertingConfig {
    fn default() -> Self {
        use crate::engine::Verdict::*;
        Self {
            enabled: true,
            channels: Vec::new(),
            kinds: vec![Loss, Duplication, Mismatch, Delayed, Stalled],
            max_window_age: Duration::from_secs(24 * 3600),
            rate_limit: 30,
            rate_period: Duration::from_secs(60),
            attempts: 5,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            send_timeout: Duration::from_secs(10),
            public_url: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChannelKind {
    /// POST of the alert as JSON.
    Webhook,
    /// Slack incoming webhook (`{"text": ...}`), also Mattermost, Rocket.Chat...
    Slack,
    /// PagerDuty Events API v2.
    Pagerduty,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelConfig {
    pub name: String,
    pub kind: ChannelKind,
    /// For PagerDuty defaults to `https://events.pagerduty.com/v2/enqueue`.
    #[serde(default)]
    pub url: Option<String>,
    /// PagerDuty integration (routing) key.
    #[serde(default)]
    pub routing_key: Option<String>,
}

// Hand-written: the database password, a Slack or webhook URL (the URL is the
// credential) and a routing key must not reach a log through `{config:?}`.
impl std::fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeConfig")
            .field("listen", &self.listen)
            .field("database_url", &store::redact_url(&self.database_url))
            .field(
                "alert_database_url",
                &self.alert_database_url.as_deref().map(store::redact_url),
            )
            .field("migrate", &self.migrate)
            .field("evaluate_every", &self.evaluate_every)
            .field("horizon", &self.horizon)
            .field("max_range", &self.max_range)
            .field("max_page_size", &self.max_page_size)
            .field("request_timeout", &self.request_timeout)
            .field("max_concurrent_requests", &self.max_concurrent_requests)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("max_connections", &self.max_connections)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("max_verdicts", &self.max_verdicts)
            .finish()
    }
}

impl std::fmt::Debug for ChannelConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Scheme and host only.
        let url = self.url.as_deref().map(|u| match u.find("://") {
            Some(s) => {
                let rest = &u[s + 3..];
                let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
                let host = host.rsplit('@').next().unwrap_or_default();
                format!("{}{host}/***", &u[..s + 3])
            }
            None => "***".to_string(),
        });
        f.debug_struct("ChannelConfig")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("url", &url)
            .field("routing_key", &self.routing_key.as_ref().map(|_| "***"))
            .finish()
    }
}

pub const PAGERDUTY_URL: &str = "https://events.pagerduty.com/v2/enqueue";

impl Config {
    /// Loads defaults ← TOML file ← environment.
    pub fn load(file: Option<&Path>) -> anyhow::Result<Config> {
        let config: Config = common::load_config(file, ENV_SECTIONS)?;
        config.validate()?;
        Ok(config)
    }

    /// Checks what serde cannot.
    pub fn validate(&self) -> anyhow::Result<()> {
        crate::engine::Topology::check(&self.topology)?;
        let s = &self.serve;
        anyhow::ensure!(
            s.max_page_size >= 1,
            "serve.max_page_size must be at least 1"
        );
        anyhow::ensure!(
            s.max_concurrent_requests >= 1,
            "serve.max_concurrent_requests must be at least 1"
        );
        anyhow::ensure!(
            !s.evaluate_every.is_zero(),
            "serve.evaluate_every must be longer than 0"
        );
        for t in &self.auth.tokens {
            t.check(SCOPES)?;
        }
        let a = &self.alerting;
        anyhow::ensure!(a.rate_limit >= 1, "alerting.rate_limit must be at least 1");
        anyhow::ensure!(a.attempts >= 1, "alerting.attempts must be at least 1");
        for c in &a.channels {
            match c.kind {
                ChannelKind::Pagerduty => anyhow::ensure!(
                    c.routing_key.as_deref().is_some_and(|k| !k.is_empty()),
                    "alert channel {:?}: pagerduty needs routing_key",
                    c.name
                ),
                _ => anyhow::ensure!(
                    c.url.is_some(),
                    "alert channel {:?}: url is required",
                    c.name
                ),
            }
            if let Some(url) = &c.url {
                anyhow::ensure!(
                    url.starts_with("http://") || url.starts_with("https://"),
                    "alert channel {:?}: url {url:?} is not http(s)",
                    c.name
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `{config:?}` in a log line must not publish the database password, a Slack or
    /// webhook URL (the URL is the credential) or a PagerDuty routing key.
    #[test]
    fn debug_output_masks_secrets() {
        let config: Config = toml::from_str(
            r#"
[serve]
database_url = "postgres://kafka_audit:Pa55w0rd@db:5432/audit"
[[alerting.channels]]
name = "chat"
kind = "slack"
url = "https://hooks.slack.com/services/T000/B000/XXXXSECRET"
[[alerting.channels]]
name = "pager"
kind = "pagerduty"
routing_key = "R0UT1NGKEYSECRET"
"#,
        )
        .unwrap();
        let text = format!("{config:?} {config:#?}");
        for secret in ["Pa55w0rd", "SECRET", "/services/"] {
            assert!(!text.contains(secret), "{secret:?} in {text}");
        }
        assert!(text.contains("kafka_audit:***@db"), "{text}");
        assert!(text.contains("hooks.slack.com"), "{text}");
    }

    /// `[log] format` is common's typed `LogFormat`: a typo is a config error naming
    /// the value, from the file and from the environment alike.
    #[test]
    #[allow(clippy::result_large_err)]
    fn unknown_log_format_is_a_config_error() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("serve.toml", "[log]\nformat = \"jsn\"\n")?;
            let err = Config::load(Some(Path::new("serve.toml"))).unwrap_err();
            assert!(format!("{err:#}").contains("jsn"), "{err:#}");
            jail.create_file("ok.toml", "[log]\nformat = \"json\"\n")?;
            let config = Config::load(Some(Path::new("ok.toml"))).expect("config loads");
            assert_eq!(config.log.format, common::LogFormat::Json);
            jail.set_env("KAFKA_AUDIT__LOG__FORMAT", "jsn");
            let err = Config::load(Some(Path::new("ok.toml"))).unwrap_err();
            assert!(format!("{err:#}").contains("jsn"), "{err:#}");
            Ok(())
        });
    }

    #[test]
    // figment's Jail API fixes the closure's (large) error type.
    #[allow(clippy::result_large_err)]
    fn environment_overrides_the_file() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("serve.toml", "[serve]\nlisten = \"127.0.0.1:8080\"\n")?;
            jail.set_env("KAFKA_AUDIT__SERVE__LISTEN", "127.0.0.1:18493");
            // Another subcommand's section must not trip deny_unknown_fields.
            jail.set_env("KAFKA_AUDIT__AUDIT__TIER", "regional");
            let config = Config::load(Some(Path::new("serve.toml"))).expect("config loads");
            assert_eq!(config.serve.listen, "127.0.0.1:18493".parse().unwrap());
            Ok(())
        });
    }
}
