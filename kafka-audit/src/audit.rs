//! `kafka-audit audit --config audit.toml`: runs one audit-service instance beside one
//! cluster (docs/design.md §2). Exits 0 after a clean shutdown on SIGTERM / ctrl-c.

use std::path::PathBuf;

use clap::Args;

#[derive(Args, Debug)]
pub struct AuditArgs {
    /// TOML configuration file; `KAFKA_AUDIT__<SECTION>__<KEY>` variables override it.
    #[arg(long, short, env = "KAFKA_AUDIT_CONFIG")]
    pub config: Option<PathBuf>,
}

pub fn run(args: AuditArgs) -> anyhow::Result<()> {
    let config = audit_service::Config::load(args.config.as_deref())?;
    crate::run_until_signal(&config.log.clone(), |shutdown| {
        audit_service::run(config, shutdown)
    })
}
