//! Alerting: turns the verdict index into notifications on generic webhooks, Slack
//! compatible webhooks and PagerDuty Events v2.
//!
//! Each channel has its own worker holding the alerts it has delivered (`open`).
//! After every evaluation the set of current anomalies is published; a worker then
//! triggers what is anomalous and not yet open (or whose verdict changed), and resolves
//! what is open and no longer anomalous — which is how late data completing a window
//! resolves its alert. An auditor that stops reporting is one alert of its own (per
//! topic, tier and datacenter), not one per window it blocks. Every notification
//! carries a dedup key (per topic, edge, datacenter and window for windows), so a
//! repeated trigger updates rather than duplicates (and PagerDuty merges them). A
//! failing channel is retried with exponential backoff; one that still fails is
//! counted, and the notification is retried on a later pass. A rate limit per channel
//! defers notifications beyond it to the next period.
//!
//! An open alert whose subject is no longer judged at all — its window left the
//! horizon (`serve.horizon`), or its auditor's progress was forgotten (`forget_after`:
//! the topic was deleted or is no longer audited) — was never fixed: it is not
//! resolved. It expires: forgotten without a notification (counted in
//! `alerts_expired_total`, logged), so the receiver keeps it open until someone
//! closes it, as PagerDuty keeps an incident open until someone resolves it.

//!
//! The pieces: [`model`] (an alert, a publication, the set wanted from the index),
//! [`plan`] (the policy: what a channel does with a publication, as plain data),
//! [`payload`] (the bodies each kind of channel receives) and [`worker`] (the
//! channel's loop: HTTP, retries, the rate limit's clock, the stored open alerts).

pub mod model;
pub mod payload;
pub mod plan;
pub mod worker;

pub use model::{
    auditor_key, dedup_key, desired, evidence_key, known_auditors, unsettled, window_key,
    withdrawn, Action, Alert, Desired, Published, Subject,
};
pub use payload::{payload, slack_escape};
pub use plan::{plan, RateLimit, Work};
pub use worker::ChannelWorker;
