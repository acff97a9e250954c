//! `kafka-audit collect --config collect.toml`: the collector (docs/design.md §2, §8). Audit
//! messages from Kafka audit topics and HTTP into the store, exactly once. Exits 0
//! after a clean shutdown on SIGTERM / ctrl-c.

use std::path::PathBuf;

use clap::Args;

#[derive(Args, Debug)]
pub struct CollectArgs {
    /// TOML configuration file; `KAFKA_AUDIT__<SECTION>__<KEY>` variables override it.
    #[arg(long, short, env = "KAFKA_AUDIT_CONFIG")]
    pub config: Option<PathBuf>,
}

pub fn run(args: CollectArgs) -> anyhow::Result<()> {
    let config = collector::CollectConfig::load(args.config.as_deref())?;
    crate::run_until_signal(&config.log.clone(), |shutdown| {
        collector::run(config, shutdown)
    })
}
