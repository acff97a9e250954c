//! `kafka-audit serve --config serve.toml`: the REST API, evaluation, alerting and
//! Prometheus metrics (the `web` crate). `--alerts-only` runs evaluation and alerting
//! without HTTP.

use std::path::PathBuf;

use clap::Args;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// TOML file with [serve], [topology], [auth], [alerting], [log]; environment
    /// variables KAFKA_AUDIT__SECTION__KEY override it.
    #[arg(long, env = "KAFKA_AUDIT_CONFIG")]
    pub config: Option<PathBuf>,
    /// Evaluate and alert only; no HTTP server.
    #[arg(long)]
    pub alerts_only: bool,
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config = web::Config::load(args.config.as_deref())?;
    let mode = if args.alerts_only {
        web::Mode::AlertsOnly
    } else {
        web::Mode::All
    };
    crate::run_until_signal(&config.log.clone(), |shutdown| {
        web::run(config, mode, shutdown)
    })
}
