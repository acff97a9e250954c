//! Names of what is audited: a partition of a topic, and topic patterns.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One partition of one topic.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// A glob over topic names, as the auditor's rules (`topic = "orders.*"`) and web's
/// topology overrides (`topics = "orders.{eu,us}"`) write it: `*` and `?` match any
/// characters (`.` and `/` included), `[...]` a class, `{a,b}` alternatives.
#[derive(Clone, Debug)]
pub struct TopicGlob {
    pattern: String,
    matcher: globset::GlobMatcher,
}

impl TopicGlob {
    pub fn new(pattern: &str) -> Result<Self, globset::Error> {
        let matcher = globset::GlobBuilder::new(pattern)
            .literal_separator(false)
            .build()?
            .compile_matcher();
        Ok(TopicGlob {
            pattern: pattern.to_string(),
            matcher,
        })
    }

    pub fn is_match(&self, topic: &str) -> bool {
        self.matcher.is_match(topic)
    }

    pub fn as_str(&self) -> &str {
        &self.pattern
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_alternatives_classes_and_wildcards() {
        let cases = [
            ("orders.{eu,us}", "orders.eu", true),
            ("orders.{eu,us}", "orders.us", true),
            ("orders.{eu,us}", "orders.{eu,us}", false),
            ("orders.{eu,us}", "orders.asia", false),
            ("orders.*", "orders.eu.v2", true),
            ("orders.*", "orders", false),
            ("*", "", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("logs-[0-9]", "logs-7", true),
            ("logs-[0-9]", "logs-x", false),
            ("*/x", "a/b/x", true),
        ];
        for (p, t, m) in cases {
            assert_eq!(TopicGlob::new(p).unwrap().is_match(t), m, "{p} vs {t}");
        }
        assert!(TopicGlob::new("orders.{eu").is_err());
    }
}
