//! The `kafka-audit` binary: one thin dispatcher over the service crates.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "kafka-audit", version, about = "Audit Kafka pipelines for loss, delay and duplication")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {}
}
