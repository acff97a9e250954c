//! Event-time configuration: per topic pattern, where a message's event time is found.
//!
//! ```toml
//! window_size = "10m"
//!
//! [[rules]]
//! topic = "orders.*"              # glob; or topic_regex = "^orders\\."
//! fields = ["meta.event_time"]    # dotted paths, tried in order (or field = "...")
//! unit = "ms"                     # s | ms | us | ns | auto (by magnitude)
//! header = "event-time"           # tried when no field yields a time
//! record_timestamp = true         # else window by the Kafka record timestamp
//! max_future = "1h"               # skew bounds (docs/event-time.md)
//! max_past = "30d"
//!
//! [default]                       # topics no rule matches
//! fields = ["ts", "timestamp"]
//! ```
//! The first matching rule wins. Unknown keys are errors (a typo must not silently
//! fall back to a default).

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::topic::TopicGlob;
use crate::window::WindowSize;

/// Unit of a numeric event time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum Unit {
    /// Detected from the magnitude: |v| < 1e11 → s, < 1e14 → ms, < 1e17 → µs, else ns
    /// (each threshold is ~year 5138 in the smaller unit).
    #[default]
    #[serde(rename = "auto")]
    Auto,
    #[serde(rename = "s")]
    Seconds,
    #[serde(rename = "ms")]
    Millis,
    #[serde(rename = "us", alias = "µs")]
    Micros,
    #[serde(rename = "ns")]
    Nanos,
}

fn default_fields() -> Vec<String> {
    vec!["ts".to_owned(), "timestamp".to_owned()]
}
fn default_true() -> bool {
    true
}
fn default_max_future() -> Option<Duration> {
    Some(Duration::from_secs(3600))
}
fn default_max_past() -> Option<Duration> {
    Some(Duration::from_secs(30 * 86_400))
}

/// How to find the event time of a message (shared by rules and the default).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimeRule {
    /// JSON fields by dotted path, in order of preference.
    #[serde(default = "default_fields")]
    pub fields: Vec<String>,
    /// Shorthand for a single entry of `fields` (tried first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    #[serde(default)]
    pub unit: Unit,
    /// A Kafka header holding the event time (decimal number in `header_unit`, or
    /// RFC 3339 text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    #[serde(default)]
    pub header_unit: Unit,
    /// Window a message without a field or header time by the Kafka record timestamp
    /// (CreateTime or LogAppendTime) when it is within the skew bounds; without it
    /// such a message has only observation time and is not compared across tiers.
    #[serde(default = "default_true")]
    pub record_timestamp: bool,
    /// Field or header times further than this ahead of the record timestamp (of
    /// observation time when the record has no usable one) are out of bounds; so is a
    /// record timestamp this far ahead of observation time.
    /// `null`/absent in JSON means unbounded only when written explicitly as null.
    #[serde(default = "default_max_future", with = "humantime_serde")]
    pub max_future: Option<Duration>,
    /// The same, behind.
    #[serde(default = "default_max_past", with = "humantime_serde")]
    pub max_past: Option<Duration>,
}

impl Default for TimeRule {
    fn default() -> Self {
        TimeRule {
            fields: default_fields(),
            field: None,
            unit: Unit::Auto,
            header: None,
            header_unit: Unit::Auto,
            record_timestamp: true,
            max_future: default_max_future(),
            max_past: default_max_past(),
        }
    }
}

/// A rule for the topics matching `topic` (glob) or `topic_regex`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicRule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_regex: Option<String>,
    #[serde(default = "default_fields")]
    pub fields: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    #[serde(default)]
    pub unit: Unit,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    #[serde(default)]
    pub header_unit: Unit,
    #[serde(default = "default_true")]
    pub record_timestamp: bool,
    #[serde(default = "default_max_future", with = "humantime_serde")]
    pub max_future: Option<Duration>,
    #[serde(default = "default_max_past", with = "humantime_serde")]
    pub max_past: Option<Duration>,
}

impl TopicRule {
    fn time_rule(&self) -> TimeRule {
        TimeRule {
            fields: self.fields.clone(),
            field: self.field.clone(),
            unit: self.unit,
            header: self.header.clone(),
            header_unit: self.header_unit,
            record_timestamp: self.record_timestamp,
            max_future: self.max_future,
            max_past: self.max_past,
        }
    }
}

/// The whole event-time configuration (a section of a process's TOML file, or the
/// file given to `kafka-audit inspect --config`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct EventTimeConfig {
    /// Tumbling window size; every tier of a deployment must use the same.
    #[serde(default)]
    pub window_size: WindowSize,
    #[serde(default)]
    pub rules: Vec<TopicRule>,
    /// For topics no rule matches.
    #[serde(default)]
    pub default: TimeRule,
}

/// Tiers under this prefix carry a replicator's evidence (docs/audit-message-v1.md,
/// Replication evidence; common's `EVIDENCE_TIER_PREFIX`, spelled here because
/// audit-lib knows nothing of common), which only the auditors of a replicated edge
/// publish. An application counting what it sends or reads never may: see
/// `Identity::check_counting_tier`.
pub const RESERVED_TIER_PREFIX: &str = "replicator:";

/// Whether `tier` starts with [`RESERVED_TIER_PREFIX`], in any case (`Replicator:` is
/// as reserved as `replicator:`).
pub fn is_reserved_tier(tier: &str) -> bool {
    tier.get(..RESERVED_TIER_PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(RESERVED_TIER_PREFIX))
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("event-time rule {index}: give exactly one of `topic` (glob) or `topic_regex`")]
    TopicPattern { index: usize },
    #[error("event-time rule {index}: invalid topic glob {pattern:?}: {source}")]
    Glob {
        index: usize,
        pattern: String,
        source: globset::Error,
    },
    #[error("event-time rule {index}: invalid topic regex {pattern:?}: {source}")]
    Regex {
        index: usize,
        pattern: String,
        source: regex::Error,
    },
    #[error("event-time {rule}: invalid field path {path:?} (empty segment)")]
    FieldPath { rule: String, path: String },
    #[error("event-time {rule}: skew bound {what} is too large")]
    Bound { rule: String, what: &'static str },
    #[error("event-time config is not valid TOML: {0}")]
    Parse(String),
    /// An identity that counts under a replicator's evidence tier (the check of
    /// `Identity::check_counting_tier`, which `Aggregator::new` makes).
    #[error(
        "tier {tier:?}: tiers starting with {prefix:?} are reserved: replication evidence comes only from the replicator's auditors, never from an application's counts",
        prefix = RESERVED_TIER_PREFIX
    )]
    ReservedTier { tier: String },
}

/// A rule ready for the hot path: paths split, bounds in ms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompiledRule {
    /// Dotted paths split into segments, in order of preference.
    pub paths: Vec<Vec<String>>,
    /// The original path strings, for display.
    pub path_names: Vec<String>,
    pub unit: Unit,
    pub header: Option<String>,
    pub header_unit: Unit,
    pub record_timestamp: bool,
    pub max_future_ms: Option<i64>,
    pub max_past_ms: Option<i64>,
    /// The fast path for the first path when it is one top-level name.
    pub compact: Option<crate::scan::CompactPrefix>,
}

impl CompiledRule {
    /// Whether time `t` lies within the rule's skew bounds (`max_future`, `max_past`)
    /// around `reference`. Used by classification and by the auditor's watermark.
    #[inline]
    pub fn within_skew_bounds(&self, t: i64, reference: i64) -> bool {
        let ahead = t as i128 - reference as i128;
        let too_new = self.max_future_ms.is_some_and(|m| ahead > m as i128);
        let too_old = self.max_past_ms.is_some_and(|m| -ahead > m as i128);
        !(too_new || too_old)
    }

    fn compile(rule: &TimeRule, name: &str) -> Result<Self, ConfigError> {
        let mut names: Vec<String> = Vec::new();
        if let Some(f) = &rule.field {
            names.push(f.clone());
        }
        for f in &rule.fields {
            if !names.contains(f) {
                names.push(f.clone());
            }
        }
        let mut paths = Vec::with_capacity(names.len());
        for n in &names {
            let segs: Vec<String> = n.split('.').map(str::to_owned).collect();
            if segs.iter().any(String::is_empty) {
                return Err(ConfigError::FieldPath {
                    rule: name.to_owned(),
                    path: n.clone(),
                });
            }
            paths.push(segs);
        }
        let ms = |d: Option<Duration>, what| -> Result<Option<i64>, ConfigError> {
            d.map(|d| {
                i64::try_from(d.as_millis()).map_err(|_| ConfigError::Bound {
                    rule: name.to_owned(),
                    what,
                })
            })
            .transpose()
        };
        let compact = match paths.first().map(Vec::as_slice) {
            Some([only]) => crate::scan::CompactPrefix::new(only),
            _ => None,
        };
        Ok(CompiledRule {
            compact,
            paths,
            path_names: names,
            unit: rule.unit,
            header: rule.header.clone(),
            header_unit: rule.header_unit,
            record_timestamp: rule.record_timestamp,
            max_future_ms: ms(rule.max_future, "max_future")?,
            max_past_ms: ms(rule.max_past, "max_past")?,
        })
    }
}

#[derive(Clone, Debug)]
enum TopicMatcher {
    Glob(TopicGlob),
    Regex(regex::Regex),
}

impl TopicMatcher {
    fn is_match(&self, topic: &str) -> bool {
        match self {
            TopicMatcher::Glob(g) => g.is_match(topic),
            TopicMatcher::Regex(r) => r.is_match(topic),
        }
    }
}

/// A validated [`EventTimeConfig`]; rule lookup by topic name.
#[derive(Clone, Debug)]
pub struct CompiledConfig {
    pub window_size: WindowSize,
    rules: Vec<(TopicMatcher, Arc<CompiledRule>)>,
    default: Arc<CompiledRule>,
}

impl CompiledConfig {
    /// The rule for `topic`: the first matching rule, else the default. Matching runs
    /// a glob/regex, so callers cache the result per topic (the aggregator does).
    pub fn rule_for(&self, topic: &str) -> &Arc<CompiledRule> {
        self.rules
            .iter()
            .find(|(m, _)| m.is_match(topic))
            .map_or(&self.default, |(_, r)| r)
    }
}

impl EventTimeConfig {
    /// Parses TOML text (unknown keys are errors).
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        toml_parse(text)
    }

    pub fn compile(&self) -> Result<CompiledConfig, ConfigError> {
        let mut rules = Vec::with_capacity(self.rules.len());
        for (index, r) in self.rules.iter().enumerate() {
            let matcher = match (&r.topic, &r.topic_regex) {
                (Some(glob), None) => {
                    TopicMatcher::Glob(TopicGlob::new(glob).map_err(|source| {
                        ConfigError::Glob {
                            index,
                            pattern: glob.clone(),
                            source,
                        }
                    })?)
                }
                (None, Some(re)) => {
                    TopicMatcher::Regex(regex::Regex::new(re).map_err(|source| {
                        ConfigError::Regex {
                            index,
                            pattern: re.clone(),
                            source,
                        }
                    })?)
                }
                _ => return Err(ConfigError::TopicPattern { index }),
            };
            let rule = CompiledRule::compile(&r.time_rule(), &format!("rule {index}"))?;
            rules.push((matcher, Arc::new(rule)));
        }
        Ok(CompiledConfig {
            window_size: self.window_size,
            rules,
            default: Arc::new(CompiledRule::compile(&self.default, "default")?),
        })
    }
}

fn toml_parse(text: &str) -> Result<EventTimeConfig, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<EventTimeConfig, toml::de::Error> {
        toml::from_str(s)
    }

    #[test]
    fn empty_config_is_the_documented_default() {
        let c = parse("").unwrap();
        assert_eq!(c, EventTimeConfig::default());
        let cc = c.compile().unwrap();
        let r = cc.rule_for("anything");
        assert_eq!(r.path_names, vec!["ts", "timestamp"]);
        assert_eq!(r.unit, Unit::Auto);
        assert!(r.record_timestamp);
        assert_eq!(r.max_future_ms, Some(3_600_000));
        assert_eq!(cc.window_size.as_millis(), 600_000);
    }

    #[test]
    fn first_matching_rule_wins_glob_and_regex() {
        let c = parse(
            r#"
            window_size = "5m"
            [[rules]]
            topic = "orders.*"
            field = "meta.event_time"
            fields = []
            unit = "ms"
            [[rules]]
            topic_regex = "^(orders|payments)-v[0-9]+$"
            fields = ["created"]
            unit = "us"
            header = "event-time"
            record_timestamp = false
            max_future = "5m"
            max_past = "2days"
            "#,
        )
        .unwrap();
        let cc = c.compile().unwrap();
        assert_eq!(cc.window_size.as_millis(), 300_000);
        let r = cc.rule_for("orders.eu");
        assert_eq!(
            r.paths,
            vec![vec!["meta".to_owned(), "event_time".to_owned()]]
        );
        assert_eq!(r.unit, Unit::Millis);
        let r = cc.rule_for("payments-v2");
        assert_eq!(r.path_names, vec!["created"]);
        assert_eq!(r.unit, Unit::Micros);
        assert_eq!(r.header.as_deref(), Some("event-time"));
        assert!(!r.record_timestamp);
        assert_eq!(r.max_future_ms, Some(300_000));
        assert_eq!(r.max_past_ms, Some(2 * 86_400_000));
        assert_eq!(
            cc.rule_for("payments-v2x").path_names,
            vec!["ts", "timestamp"]
        );
    }

    #[test]
    fn typos_are_errors() {
        let e = parse("[[rules]]\ntopic = \"a\"\nfeild = \"x\"\n").unwrap_err();
        assert!(e.to_string().contains("feild"), "{e}");
        let e = parse("windowsize = \"1m\"").unwrap_err();
        assert!(e.to_string().contains("windowsize"), "{e}");
        let e = parse("[default]\nunit = \"minutes\"").unwrap_err();
        assert!(e.to_string().contains("minutes"), "{e}");
    }

    #[test]
    fn bad_patterns_and_paths_are_errors_with_context() {
        let c = parse("[[rules]]\ntopic_regex = \"(\"").unwrap();
        let e = c.compile().unwrap_err().to_string();
        assert!(e.contains("rule 0") && e.contains("regex"), "{e}");
        let c = parse("[[rules]]\ntopic = \"a\"\ntopic_regex = \"b\"").unwrap();
        assert!(matches!(
            c.compile(),
            Err(ConfigError::TopicPattern { index: 0 })
        ));
        let c = parse("[[rules]]\n").unwrap();
        assert!(matches!(
            c.compile(),
            Err(ConfigError::TopicPattern { index: 0 })
        ));
        let c = parse("[default]\nfields = [\"a..b\"]").unwrap();
        assert!(c.compile().unwrap_err().to_string().contains("a..b"));
    }

    #[test]
    fn json_config_works_too() {
        let c: EventTimeConfig =
            serde_json::from_str(r#"{"rules":[{"topic":"x*","fields":["t"],"unit":"ns"}]}"#)
                .unwrap();
        assert_eq!(c.compile().unwrap().rule_for("xy").unit, Unit::Nanos);
    }
}
