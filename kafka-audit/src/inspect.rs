//! `kafka-audit inspect`: how given messages are classified under an event-time config
//! (the logic is `audit_lib::inspect`).

use std::fs::File;
use std::io::{self, BufReader};
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// File of messages, one JSON value per line; `-` or absent reads stdin.
    pub input: Option<PathBuf>,
    /// Topic the messages come from (selects the config rule).
    #[arg(long, default_value = "", env = "KAFKA_AUDIT_INSPECT_TOPIC")]
    pub topic: String,
    /// Event-time config (TOML): a bare event-time config or a service config with
    /// `[audit.event_time]`. Without it: top-level `ts` or `timestamp`, unit by magnitude.
    #[arg(long, env = "KAFKA_AUDIT_INSPECT_CONFIG")]
    pub config: Option<PathBuf>,
    /// One JSON object per input line (classification, event_time_ms, source, unit,
    /// window_start_ms, ...).
    #[arg(long)]
    pub json: bool,
    /// Only counts per classification.
    #[arg(long)]
    pub summary: bool,
    /// Observation time for skew bounds and fallback windows: epoch ms or RFC 3339
    /// (default: now).
    #[arg(long)]
    pub observed_at: Option<String>,
    /// A record timestamp (CreateTime) given to every message, epoch ms or RFC 3339:
    /// shows which window a message without a field time gets at every tier (without
    /// it, such a message is windowed by observation time and not compared).
    #[arg(long)]
    pub record_timestamp: Option<String>,
}

pub fn run(args: InspectArgs) -> anyhow::Result<()> {
    let config = match &args.config {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading config {}", p.display()))?;
            audit_lib::inspect::load_config(&text)
                .with_context(|| format!("config {}", p.display()))?
        }
        None => audit_lib::EventTimeConfig::default(),
    };
    let config = config.compile().context("event-time config")?;
    let observed_at_ms = match &args.observed_at {
        Some(t) => audit_lib::timeparse::text_to_ms(t, audit_lib::Unit::Millis)
            .map(|(ms, _)| ms)
            .map_err(|e| anyhow::anyhow!("--observed-at {t:?}: {e}"))?,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .context("system clock before 1970")?
            .as_millis() as i64,
    };
    let record_timestamp_ms = match &args.record_timestamp {
        Some(t) => Some(
            audit_lib::timeparse::text_to_ms(t, audit_lib::Unit::Millis)
                .map(|(ms, _)| ms)
                .map_err(|e| anyhow::anyhow!("--record-timestamp {t:?}: {e}"))?,
        ),
        None => None,
    };
    let opts = audit_lib::inspect::InspectOptions {
        topic: args.topic,
        json: args.json,
        summary: args.summary,
        observed_at_ms,
        record_timestamp_ms,
    };
    let stdout = io::stdout().lock();
    match args.input.as_deref() {
        None => audit_lib::inspect::run(&config, &opts, io::stdin().lock(), stdout),
        Some(p) if p.as_os_str() == "-" => {
            audit_lib::inspect::run(&config, &opts, io::stdin().lock(), stdout)
        }
        Some(p) => {
            let f = File::open(p).with_context(|| format!("opening {}", p.display()))?;
            audit_lib::inspect::run(&config, &opts, BufReader::new(f), stdout)
        }
    }
    .context("inspect")?;
    Ok(())
}
