//! Prometheus label values that cannot break or forge the exposition.
//!
//! prometheus-client 0.23 writes label values as they are: a `"`, `\` or newline in a
//! topic name (data from audit messages) would end the value early, so a name could
//! add forged series, or make the whole scrape unparsable, which silences every alert
//! rule on the target. [`LabelValue`] escapes them as the text format and OpenMetrics
//! require (`\\`, `\"`, `\n`); every other character is legal in a label value.

use std::fmt::Write;

use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};

/// A label value, escaped when encoded. Compare and hash it like the raw string.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct LabelValue(pub String);

impl LabelValue {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<String> for LabelValue {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl From<&str> for LabelValue {
    fn from(s: &str) -> Self {
        Self(s.to_string())
    }
}

impl From<&String> for LabelValue {
    fn from(s: &String) -> Self {
        Self(s.clone())
    }
}

impl EncodeLabelValue for LabelValue {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        let s = self.0.as_str();
        let mut rest = s;
        while let Some(i) = rest.find(['\\', '"', '\n']) {
            encoder.write_str(&rest[..i])?;
            encoder.write_str(match rest.as_bytes()[i] {
                b'\\' => "\\\\",
                b'"' => "\\\"",
                _ => "\\n",
            })?;
            rest = &rest[i + 1..];
        }
        encoder.write_str(rest)
    }
}
