//! `kafka-audit migrate --store URL`: applies the store's pending migrations
//! (PostgreSQL or SQLite) and exits. `collect` also migrates at start unless told not to.

use clap::Args;
use store::Deployment;

#[derive(Args, Debug)]
pub struct MigrateArgs {
    /// `postgres://...`, or a SQLite file path.
    #[arg(long, env = "KAFKA_AUDIT__STORE__URL")]
    pub store: String,
}

pub fn run(args: MigrateArgs) -> anyhow::Result<()> {
    common::init_tracing(&common::LogConfig::default());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let store = store::Store::connect(&args.store).await?;
        store.migrate().await?;
        tracing::info!(backend = store.backend(), "migrations applied");
        Ok(())
    })
}
