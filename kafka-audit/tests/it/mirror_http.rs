//! What the HTTP-fed tests of a replicated edge share (`evidence_stale.rs`,
//! `forgery.rs`): the collector's ingest tokens (the regional auditors' token also
//! names the replicator's evidence tier), serve judging regional/dc1 → aggregate/agg
//! through the consumer group `mirror`, and progress reports of any tier.

use audit_lib::{AuditMessage, Identity, PartitionProgress};

use crate::e2e;

/// The evidence tier of the consumer group `mirror`.
pub const EVIDENCE: &str = "replicator:group/mirror";
pub const REGIONAL_TOKEN: &str = "regional-dc1-4d2a9e7c1b0f3865a2d7";
pub const AGGREGATE_TOKEN: &str = "aggregate-agg-0c8e2b6f4a1d9735e3b0";

/// The collector into `store_url` with HTTP ingest and the two tokens, then `more`
/// (TOML: sources, other tokens).
pub fn collect_toml(store_url: &str, more: &str) -> String {
    format!(
        r#"
[store]
url = "{store_url}"
[http]
listen = "127.0.0.1:0"
[batch]
max_wait = "50ms"
[[auth.tokens]]
name = "regional-dc1"
token = "{REGIONAL_TOKEN}"
scopes = ["ingest"]
tiers = ["regional", "{EVIDENCE}"]
datacenters = ["dc1"]
[[auth.tokens]]
name = "aggregate-agg"
token = "{AGGREGATE_TOKEN}"
scopes = ["ingest"]
tiers = ["aggregate"]
datacenters = ["agg"]
{more}"#
    )
}

/// serve on `store_url`, 10-minute windows, `grace` and `stall_after` (humantime),
/// alerts to the webhook at `hook`.
pub fn serve_config(store_url: &str, grace: &str, stall_after: &str, hook: &str) -> web::Config {
    let mut config = e2e::serve_config_of(
        "10m",
        grace,
        r#"tiers = [{ name = "regional" }, { name = "aggregate" }]
[[topology.edges]]
upstream = "regional"
downstream = "aggregate"
datacenters = { dc1 = "agg" }
replicator = { consumer_group = "mirror" }"#,
        stall_after,
        hook,
    );
    config.serve.database_url = store_url.to_string();
    config
}

/// A progress report of `topic` by `tier`/`dc` (host `{dc}-0`) emitted at `emitted_at`.
pub fn progress(
    topic: &str,
    tier: &str,
    dc: &str,
    partitions: Vec<PartitionProgress>,
    emitted_at: i64,
) -> AuditMessage {
    let mut m = AuditMessage::progress(
        &Identity::new("regional", dc, format!("{dc}-0")),
        topic,
        partitions,
        emitted_at,
    );
    // (Built apart: a library identity refuses reserved tiers.)
    m.tier = tier.to_string();
    m
}

/// The collector (HTTP ingest at `addr`) and serve with its jobs on one database,
/// alerting to a local webhook receiver (`pages`).
pub struct Services {
    pub addr: std::net::SocketAddr,
    pub pages: e2e::Pages,
    pub state: web::AppState,
    stop: tokio_util::sync::CancellationToken,
    jobs: Vec<tokio::task::JoinHandle<()>>,
    collector: collector::Collector,
}

impl Services {
    /// The collector of `collect` (TOML) and serve of `serve(hook)` on `store_url`.
    pub async fn start(
        store_url: &str,
        collect: &str,
        serve: impl FnOnce(&str) -> web::Config,
    ) -> Services {
        let config: collector::CollectConfig = toml::from_str(collect).expect("collect.toml");
        let stop = tokio_util::sync::CancellationToken::new();
        let collector = collector::start(config, stop.clone())
            .await
            .expect("collector starts");
        let addr = collector.http_addr.unwrap();
        let (pages, hook) = e2e::start_receiver().await;
        let store = store::Store::connect(store_url).await.unwrap();
        let state = web::AppState::new(serve(&hook), store).unwrap();
        let jobs = state.spawn_jobs(&stop);
        Services {
            addr,
            pages,
            state,
            stop,
            jobs,
            collector,
        }
    }

    /// Stops serve's jobs and the collector and waits for them (a failure fails the
    /// test); call it before asserting, so a failed assertion leaves nothing running.
    pub async fn stop(self) {
        self.stop.cancel();
        for job in self.jobs {
            job.await.unwrap();
        }
        tokio::time::timeout(std::time::Duration::from_secs(30), self.collector.wait())
            .await
            .expect("collector stops")
            .unwrap();
    }
}
