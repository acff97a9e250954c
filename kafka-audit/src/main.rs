//! The `kafka-audit` binary: one thin dispatcher over the service crates (the demo is
//! the `demo` crate).

use clap::{Parser, Subcommand};

mod audit;
mod collect;
mod inspect;
mod migrate;
mod serve;
mod wait;

#[derive(Parser)]
#[command(
    name = "kafka-audit",
    // package version and git revision, from build.rs
    version = env!("KAFKA_AUDIT_VERSION"),
    about = "Audit Kafka pipelines for loss, delay and duplication"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The whole pipeline in one process on embedded Kafka and SQLite, with injected faults.
    Demo(demo::DemoArgs),
    /// Audit one Kafka cluster as one tier (audit-service).
    Audit(audit::AuditArgs),
    /// Collect audit messages from Kafka and HTTP into the store, exactly once.
    Collect(collect::CollectArgs),
    /// Apply the store's migrations (PostgreSQL or SQLite) and exit.
    Migrate(migrate::MigrateArgs),
    /// REST API, detection, alerting and Prometheus metrics (web).
    Serve(serve::ServeArgs),
    /// Show how messages (JSON lines) are classified: event time, source, unit, window.
    Inspect(inspect::InspectArgs),
    /// Wait until a range of windows is complete at a tier (a gate for downstream jobs):
    /// exit 0 complete, 1 timeout, 2 data missing in a final window, 3 error.
    Wait(wait::WaitArgs),
}

/// What the long-running subcommands (`audit`, `collect`, `serve`) share once their
/// configuration is loaded: tracing as its `[log]` says, a multi-threaded runtime, and
/// `run` until it returns; SIGTERM or ctrl-c cancels its token, and a clean shutdown
/// exits 0.
fn run_until_signal<F, Fut>(log: &common::LogConfig, run: F) -> anyhow::Result<()>
where
    F: FnOnce(tokio_util::sync::CancellationToken) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    common::init_tracing(log);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    // The signal handlers need the runtime.
    rt.block_on(async move { run(common::shutdown_on_signals()).await })
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::try_parse().unwrap_or_else(|e| {
        // `wait` gives 2 its own meaning (data missing): its usage errors exit 3.
        let code = if e.use_stderr() && std::env::args().nth(1).as_deref() == Some("wait") {
            wait::EXIT_ERROR
        } else {
            e.exit_code()
        };
        let _ = e.print();
        std::process::exit(code)
    });
    match cli.command {
        Command::Demo(args) => demo::run(args),
        Command::Audit(args) => audit::run(args),
        Command::Collect(args) => collect::run(args),
        Command::Migrate(args) => migrate::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Wait(args) => wait::run(args),
    }
}
