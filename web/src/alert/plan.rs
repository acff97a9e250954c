//! Alert policy as plain data: what a channel does with a publication, given the
//! alerts it has open and the time. No HTTP, no store, no clock: the worker
//! ([`super::worker`]) carries it out.

use std::cmp::Reverse;
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use super::model::{Action, Alert, Published, Subject};
use crate::engine::Urgency;

/// One thing a channel does for a publication.
#[derive(Debug, Clone, PartialEq)]
pub enum Work {
    /// Forget the open alert of this key without a notification: what it is about is
    /// no longer judged at all (window out of the horizon, auditor forgotten), so it
    /// was never fixed and a resolve would say it was.
    Expire(String),
    /// Deliver a trigger or a resolve.
    Send(Action, Alert),
}

/// What a channel holding `open` alerts does for the publication `judged` at `now_ms`
/// (epoch ms), in order: the expiries; triggers of what is wanted and not open (or
/// whose verdict changed) on windows that ended within `max_window_age_ms`; then
/// resolves of what is open, judged (from `judged_from` on, final) and no longer
/// wanted. Triggers and resolves each the most urgent first ([`prioritise`]).
pub fn plan(
    open: &BTreeMap<String, Alert>,
    judged: &Published,
    now_ms: i64,
    max_window_age_ms: i64,
) -> Vec<Work> {
    let desired = &judged.alerts;
    let expired = open
        .iter()
        .filter(|(k, a)| !desired.contains_key(*k) && a.expired(judged))
        .map(|(k, _)| Work::Expire(k.clone()));
    // A window not final yet is never paged again for a less urgent verdict than the
    // one open on it: a loss proven early stays the page while the replicator falls
    // behind on the window's newer records (`delayed`) until the window is final.
    let triggers: Vec<Alert> = desired
        .iter()
        .filter(|(k, a)| {
            open.get(*k).is_none_or(|o| {
                o.verdict != a.verdict
                    && !(judged.unsettled.contains(*k) && a.verdict.urgency() < o.verdict.urgency())
            }) && a.recent_enough(now_ms - max_window_age_ms)
        })
        .map(|(_, a)| a.clone())
        .collect();
    let resolves: Vec<Alert> = open
        .iter()
        .filter(|(k, _)| !desired.contains_key(*k) && !judged.unsettled.contains(*k))
        .filter(|(_, a)| judged.judged_from.is_none_or(|from| a.judged_from(from)))
        .filter(|(_, a)| !a.expired(judged) && !a.left_out(judged))
        .map(|(k, a)| {
            let mut a = a.clone();
            // Resolved because its proof was withdrawn: say who withdrew it and why.
            if let Some(note) = judged.withdrawn.get(k) {
                a.reason = note.clone();
            }
            a
        })
        .collect();
    // New pages before resolves: a resolve that waits costs a stale open alert,
    // a page that waits costs the on-call's time.
    expired
        .chain(
            prioritise(triggers)
                .into_iter()
                .map(|a| Work::Send(Action::Trigger, a)),
        )
        .chain(
            prioritise(resolves)
                .into_iter()
                .map(|a| Work::Send(Action::Resolve, a)),
        )
        .collect()
}

/// Delivery order under the rate limit: the most severe first; within a severity,
/// each topic's newest alert before any topic's second, and so on (round robin over
/// topics, newest window first within one). So however many anomalies one topic
/// has, real or forged, another topic's page waits for at most one per topic.
fn prioritise(alerts: Vec<Alert>) -> Vec<Alert> {
    // An auditor alert is about now: newest.
    let time = |a: &Alert| match &a.subject {
        Subject::Window { window_start, .. } => *window_start,
        Subject::Auditor { .. } | Subject::Evidence { .. } => i64::MAX,
    };
    let mut by_topic: BTreeMap<(Reverse<Urgency>, &str), Vec<&Alert>> = BTreeMap::new();
    for a in &alerts {
        by_topic
            .entry((Reverse(a.verdict.urgency()), a.topic.as_str()))
            .or_default()
            .push(a);
    }
    // (most urgent, rank within its topic, newest first, topic, key) orders them all.
    type Key<'a> = (Reverse<Urgency>, usize, Reverse<i64>, &'a str, &'a str);
    let mut ranked: Vec<(Key, &Alert)> = Vec::new();
    for ((sev, topic), mut list) in by_topic {
        list.sort_by_key(|a| (Reverse(time(a)), a.dedup_key.as_str()));
        for (rank, a) in list.into_iter().enumerate() {
            ranked.push((
                (sev, rank, Reverse(time(a)), topic, a.dedup_key.as_str()),
                a,
            ));
        }
    }
    ranked.sort_by(|x, y| x.0.cmp(&y.0));
    ranked.into_iter().map(|(_, a)| a.clone()).collect()
}

/// At most `limit` deliveries per `period` (a sliding window over the times of the
/// last deliveries); the rest waits for the next pass.
#[derive(Debug)]
pub struct RateLimit {
    limit: usize,
    period: Duration,
    sent: VecDeque<Instant>,
}

impl RateLimit {
    pub fn new(limit: u32, period: Duration) -> Self {
        Self {
            limit: limit as usize,
            period,
            sent: VecDeque::new(),
        }
    }

    /// Takes a token for a delivery at `now` if one is left in the period before it.
    pub fn take(&mut self, now: Instant) -> bool {
        while self
            .sent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= self.period)
        {
            self.sent.pop_front();
        }
        if self.sent.len() < self.limit {
            self.sent.push_back(now);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests;
