//! Topic selection: the configured names plus existing topics matching the regexes,
//! minus exclusions, internal topics and the audit topic itself.

use std::time::Duration;

use anyhow::Context;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};

use crate::config::Config;

/// Topic names to subscribe to: the configured names, plus existing topics matching
/// the regexes, minus exclusions, internal topics and the audit topic itself.
pub(crate) fn resolve_topics<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    cfg: &Config,
) -> anyhow::Result<Vec<String>> {
    let a = &cfg.audit;
    let include: Vec<regex::Regex> = a
        .topic_regex
        .iter()
        .map(|r| regex::Regex::new(r))
        .collect::<Result<_, _>>()?;
    let exclude: Vec<regex::Regex> = a
        .exclude_regex
        .iter()
        .map(|r| regex::Regex::new(r))
        .collect::<Result<_, _>>()?;
    let mut topics: Vec<String> = a.topics.clone();
    if !include.is_empty() {
        let md = consumer
            .fetch_metadata(None, Duration::from_secs(30))
            .context("cannot list topics")?;
        for t in md.topics() {
            let name = t.name();
            if include.iter().any(|r| r.is_match(name)) {
                topics.push(name.to_string());
            }
        }
    }
    topics.retain(|t| {
        !t.starts_with("__")
            && *t != a.audit_topic
            && *t != a.evidence_topic
            && !exclude.iter().any(|r| r.is_match(t))
    });
    topics.sort();
    topics.dedup();
    Ok(topics)
}
