//! The request bodies of each kind of channel: generic webhooks, Slack-compatible
//! webhooks, PagerDuty Events v2.

use serde_json::{json, Value};

use super::model::{Action, Alert, Subject};
use crate::config::{ChannelConfig, ChannelKind};
use crate::engine::Urgency;

/// The request body a channel of `kind` receives.
pub fn payload(channel: &ChannelConfig, action: Action, alert: &Alert) -> Value {
    match channel.kind {
        ChannelKind::Webhook => {
            let mut v = serde_json::to_value(alert).unwrap_or(Value::Null);
            if let Value::Object(m) = &mut v {
                m.insert("source".into(), json!("kafka-audit"));
                m.insert("action".into(), json!(action.as_str()));
                m.insert("summary".into(), json!(alert.summary()));
            }
            v
        }
        ChannelKind::Slack => {
            let alert = alert.slack_escaped();
            let text = match action {
                Action::Trigger => format!(":rotating_light: kafka-audit: {}", alert.summary()),
                Action::Resolve => format!(
                    ":white_check_mark: kafka-audit: resolved {} on {}",
                    alert.verdict.as_str(),
                    alert.what()
                ),
            };
            json!({ "text": text })
        }
        ChannelKind::Pagerduty => {
            let key = channel.routing_key.clone().unwrap_or_default();
            if action == Action::Resolve {
                return json!({
                    "routing_key": key,
                    "event_action": "resolve",
                    "dedup_key": alert.dedup_key,
                });
            }
            let mut details = serde_json::to_value(&alert.subject).unwrap_or(Value::Null);
            if let Value::Object(m) = &mut details {
                m.insert("reason".into(), json!(alert.reason));
            }
            let group = match &alert.subject {
                Subject::Window {
                    upstream,
                    downstream,
                    ..
                } => format!("{upstream}->{downstream}"),
                Subject::Auditor { tier, .. } => tier.clone(),
                Subject::Evidence { evidence_tier, .. } => evidence_tier.clone(),
            };
            json!({
                "routing_key": key,
                "event_action": "trigger",
                "dedup_key": alert.dedup_key,
                "payload": {
                    "summary": truncate(alert.summary(), PAGERDUTY_SUMMARY_MAX),
                    "source": "kafka-audit",
                    "severity": if alert.verdict.urgency() == Urgency::Page { "error" } else { "warning" },
                    "component": alert.topic,
                    "group": group,
                    "class": alert.verdict.as_str(),
                    "custom_details": details,
                }
            })
        }
    }
}

/// Slack's escaping for message text: names in alerts are data (topics come from
/// audit messages), and unescaped `<!channel>`, `<@U…>` or `<https://…|label>` would
/// ping everyone or post a disguised link as the trusted bot.
pub fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// PagerDuty Events v2 refuses a longer `payload.summary` with 400, which is not
/// retried: the page would be lost.
const PAGERDUTY_SUMMARY_MAX: usize = 1024;

fn truncate(mut s: String, max_bytes: usize) -> String {
    if s.len() > max_bytes {
        let mut end = max_bytes - '…'.len_utf8();
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

impl Alert {
    /// The alert with every name (and the reason) escaped for Slack text.
    fn slack_escaped(&self) -> Alert {
        let mut a = self.clone();
        for s in [&mut a.topic, &mut a.reason] {
            *s = slack_escape(s);
        }
        match &mut a.subject {
            Subject::Window {
                upstream,
                downstream,
                datacenter,
                ..
            } => {
                for s in [upstream, downstream, datacenter] {
                    *s = slack_escape(s);
                }
            }
            Subject::Auditor {
                tier, datacenter, ..
            }
            | Subject::Evidence {
                evidence_tier: tier,
                datacenter,
                ..
            } => {
                for s in [tier, datacenter] {
                    *s = slack_escape(s);
                }
            }
        }
        a
    }
}
