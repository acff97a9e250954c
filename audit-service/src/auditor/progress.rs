//! The dating of progress: as of when a report's lags hold.
//!
//! Lag 0 says the auditor has read everything written *before the log ends were
//! measured* — records appended since may be unread — so progress is dated by that
//! measurement, never by the report (the engine trusts lag 0 as of `emitted_at`,
//! docs/audit-message-v1.md). The ends come from the consumer's statistics: the high
//! watermark of each partition's last fetch response. This module decides which
//! statistics may be taken (not while paused, not from before the last assignment
//! or resume unless the consumer never fetched before), what a report is dated by,
//! and which ends survive a revoke. Pure: every time is passed in.

use std::collections::{HashMap, HashSet};

use audit_lib::TopicPartition;

use super::partitions::{EndsSnapshot, LogEnds, Parts};

/// As of when the high watermarks of statistics emitted at `time_s` (the client's
/// whole seconds) and seen by the callback at `callback_ms` hold: the earlier of the
/// two (a busy loop polls the callback late), minus how much older than the
/// statistics a fetch response can be (`fetch_age_ms`).
pub(crate) fn measured_at(callback_ms: i64, time_s: i64, fetch_age_ms: i64) -> i64 {
    callback_ms
        .min(time_s.saturating_mul(1000))
        .saturating_sub(fetch_age_ms)
}

/// What dates progress, and which statistics may be taken.
#[derive(Debug, Clone)]
pub(crate) struct Dating {
    /// When the log ends in the parts were measured (`EndsSnapshot::at`): what their
    /// progress is dated by.
    ends_at: Option<i64>,
    /// Statistics measured before this (the last assignment or resume) are not used:
    /// their ends may be from a fetch before it.
    ends_from: i64,
    /// The ends of the partitions revoked last (not lost) and when they were measured:
    /// given back to those of them assigned again, so their lag stays known (and 0
    /// when read) across a rebalance instead of null until the next statistics.
    revoked_ends: Option<(i64, HashMap<TopicPartition, LogEnds>)>,
    /// Whether the current consumer has had an assignment before: only then can its
    /// statistics carry high watermarks of fetches before the current assignment.
    assigned_before: bool,
    /// What progress is dated by before any statistics (every lag null): no later
    /// than the first statistics can be dated (`EndsSnapshot::at`), so the store,
    /// which keeps a partition's progress of the latest `emitted_at`, does not drop
    /// the first reports with a known lag as older than these.
    undated: i64,
}

impl Dating {
    /// For an auditor started at `started_at` whose consumer's fetch responses are at
    /// most `fetch_age_ms` older than its statistics. Statistics are emitted after
    /// that, and dated by their whole second minus the fetch age.
    pub(crate) fn new(started_at: i64, fetch_age_ms: i64) -> Dating {
        Dating {
            ends_at: None,
            ends_from: i64::MIN,
            revoked_ends: None,
            assigned_before: false,
            undated: started_at - fetch_age_ms - 1000,
        }
    }

    /// When the ends in use were measured (None: no statistics taken yet): for each
    /// partition's ends, a time by which its high watermark was at most its end.
    pub(crate) fn ends_at(&self) -> Option<i64> {
        self.ends_at
    }

    /// What a report made at `now` dates its progress by. Before any statistics, no
    /// lag is known and the date only orders reports: an early one, so the first
    /// dated by statistics is not older.
    pub(crate) fn date(&self, now: i64) -> i64 {
        self.ends_at.unwrap_or(self.undated).min(now)
    }

    /// Takes the log ends of a statistics snapshot for every partition (a partition
    /// the snapshot lacks has no known end: lag null), and the time they were
    /// measured at, which dates the next reports' progress.
    ///
    /// A snapshot is not taken while consumption is paused (fetching stopped, so the
    /// ends it carries are from before the pause while its time is new), nor when it
    /// was measured before the last assignment or resume (`ends_from`): its ends may
    /// come from a fetch before it. The ends taken before stay, with their own time.
    pub(crate) fn take(&mut self, parts: &mut Parts, snap: &EndsSnapshot, paused: bool) {
        let Some(at) = snap.at else { return };
        if paused || at < self.ends_from {
            return;
        }
        for (topic, parts) in parts.iter_mut() {
            for (&partition, st) in parts.iter_mut() {
                st.ends = snap
                    .ends
                    .get(&TopicPartition::new(topic.as_str(), partition))
                    .copied();
            }
        }
        self.ends_at = Some(at);
    }

    /// Partitions were assigned at `now`. Statistics taken before now may carry ends
    /// of an earlier fetch (a partition owned before) — not those of a consumer's
    /// first assignment: it fetched nothing before, so its statistics have ends only
    /// from its own fetches, and lag is known from the first statistics on (not one
    /// statistics interval and fetch.wait.max.ms + 1 s later).
    pub(crate) fn assigned(&mut self, now: i64) {
        if self.assigned_before {
            self.ends_from = now;
        }
        self.assigned_before = true;
    }

    /// Consumption resumed at `now` after a pause: the ends of statistics from before
    /// the first fetch after the resume are those of before the pause.
    pub(crate) fn resumed(&mut self, now: i64) {
        self.ends_from = now;
    }

    /// At a revoke, before the parts are forgotten: a lost assignment keeps nothing;
    /// otherwise the ends of the `assigned` parts (all from the snapshot measured at
    /// `ends_at`, taken while they were assigned) are kept for an assignment again.
    pub(crate) fn revoked(
        &mut self,
        parts: &Parts,
        assigned: &HashSet<TopicPartition>,
        lost: bool,
    ) {
        if lost {
            self.revoked_ends = None;
            return;
        }
        let Some(at) = self.ends_at else { return };
        let ends = parts
            .iter()
            .flat_map(|(topic, parts)| {
                parts.iter().filter_map(move |(&partition, st)| {
                    st.ends
                        .map(|e| (TopicPartition::new(topic.as_str(), partition), e))
                })
            })
            .filter(|(tp, _)| assigned.contains(tp))
            .collect();
        self.revoked_ends = Some((at, ends));
    }

    /// After an assignment: a partition assigned again gets the ends it had at the
    /// revoke, and progress is dated by their measurement again (never later: the
    /// statistics since may be from before the assignment's first fetch). The ends
    /// were measured while the partition was fetched and the high watermark only
    /// grows, so lag 0 against them (read up to the committed offset) holds as of then.
    pub(crate) fn restore(&mut self, parts: &mut Parts) {
        let Some((at, ends)) = self.revoked_ends.take() else {
            return;
        };
        let mut restored = false;
        for (tp, e) in ends {
            if let Some(st) = parts
                .get_mut(tp.topic.as_str())
                .and_then(|t| t.get_mut(&tp.partition))
            {
                st.ends = Some(e);
                restored = true;
            }
        }
        if restored {
            self.ends_at = Some(self.ends_at.map_or(at, |now_at| now_at.min(at)));
        }
    }

    /// The consumer was lost (recreated): nothing of its ends carries over, and the
    /// next consumer is a new client that has fetched nothing yet.
    pub(crate) fn consumer_lost(&mut self) {
        self.revoked_ends = None;
        self.assigned_before = false;
    }
}
