//! Table tests of the alert policy: a channel's open alerts and a publication in, the
//! work out; no webhook receiver, no store, no clock.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::*;
use crate::alert::model::auditor_key;
use crate::engine::Verdict;

const MIN: i64 = 60_000;
const NOW: i64 = 1_800_000_000_000;
const MAX_AGE: i64 = 24 * 60 * MIN;
/// A window that ended an hour ago.
const W: i64 = NOW - 70 * MIN;

fn window(topic: &str, start: i64, verdict: Verdict) -> Alert {
    Alert {
        dedup_key: format!("{topic}@{start}"),
        verdict,
        topic: topic.into(),
        subject: Subject::Window {
            upstream: "producer".into(),
            downstream: "regional".into(),
            datacenter: "dc1".into(),
            window_start: start,
            window_end: start + 10 * MIN,
            expected: 100,
            observed: 90,
            difference: -10,
            completeness: Some(0.9),
        },
        reason: "test".into(),
    }
}

fn auditor(topic: &str) -> Alert {
    Alert {
        dedup_key: auditor_key(topic, "regional", "dc1"),
        verdict: Verdict::Stalled,
        topic: topic.into(),
        subject: Subject::Auditor {
            tier: "regional".into(),
            datacenter: "dc1".into(),
            last_report: NOW - 60 * MIN,
        },
        reason: "test".into(),
    }
}

fn by_key(alerts: &[&Alert]) -> BTreeMap<String, Alert> {
    alerts
        .iter()
        .map(|a| (a.dedup_key.clone(), (*a).clone()))
        .collect()
}

/// A publication of the whole horizon wanting `alerts`.
fn wanting(alerts: &[&Alert]) -> Published {
    Published {
        alerts: by_key(alerts),
        ..Published::default()
    }
}

/// The work as (what, key, verdict) for short tables.
fn outline(work: &[Work]) -> Vec<(&'static str, String, Option<Verdict>)> {
    work.iter()
        .map(|w| match w {
            Work::Expire(k) => ("expire", k.clone(), None),
            Work::Send(Action::Trigger, a) => ("trigger", a.dedup_key.clone(), Some(a.verdict)),
            Work::Send(Action::Resolve, a) => ("resolve", a.dedup_key.clone(), None),
        })
        .collect()
}

struct Row<'a> {
    rule: &'static str,
    open: Vec<&'a Alert>,
    judged: Published,
    want: Vec<(&'static str, String, Option<Verdict>)>,
}

fn trigger(a: &Alert) -> (&'static str, String, Option<Verdict>) {
    ("trigger", a.dedup_key.clone(), Some(a.verdict))
}

fn resolve(a: &Alert) -> (&'static str, String, Option<Verdict>) {
    ("resolve", a.dedup_key.clone(), None)
}

fn expire(a: &Alert) -> (&'static str, String, Option<Verdict>) {
    ("expire", a.dedup_key.clone(), None)
}

#[test]
fn the_policy_of_a_publication() {
    let loss = window("orders", W, Verdict::Loss);
    let duplication = window("orders", W, Verdict::Duplication);
    let stalled = auditor("orders");
    let old = window("orders", NOW - MAX_AGE - 20 * MIN, Verdict::Loss);
    let rows = vec![
        Row {
            rule: "an anomaly not open fires",
            open: vec![],
            judged: wanting(&[&loss]),
            want: vec![trigger(&loss)],
        },
        Row {
            rule: "an open alert still wanted is not paged again",
            open: vec![&loss],
            judged: wanting(&[&loss]),
            want: vec![],
        },
        Row {
            rule: "an open alert whose verdict changed fires again",
            open: vec![&duplication],
            judged: wanting(&[&loss]),
            want: vec![trigger(&loss)],
        },
        Row {
            rule: "an open alert judged and no longer wanted resolves",
            open: vec![&loss],
            judged: wanting(&[]),
            want: vec![resolve(&loss)],
        },
        Row {
            rule: "an open alert on a window settling again stays open",
            open: vec![&loss],
            judged: Published {
                unsettled: BTreeSet::from([loss.dedup_key.clone()]),
                ..wanting(&[])
            },
            want: vec![],
        },
        Row {
            rule: "an open alert on a window not judged yet (cold start) stays open",
            open: vec![&loss],
            judged: Published {
                judged_from: Some(W + 10 * MIN),
                ..wanting(&[])
            },
            want: vec![],
        },
        Row {
            rule: "an open alert on a window judged by the load so far resolves",
            open: vec![&loss],
            judged: Published {
                judged_from: Some(W),
                ..wanting(&[])
            },
            want: vec![resolve(&loss)],
        },
        Row {
            rule: "an open alert whose window left the horizon expires",
            open: vec![&loss],
            judged: Published {
                horizon_start: W + 1,
                ..wanting(&[])
            },
            want: vec![expire(&loss)],
        },
        Row {
            rule: "an auditor alert whose auditor is forgotten expires",
            open: vec![&stalled],
            judged: Published {
                auditors: Some(BTreeSet::new()),
                ..wanting(&[])
            },
            want: vec![expire(&stalled)],
        },
        Row {
            rule: "an auditor alert of an auditor reporting again resolves",
            open: vec![&stalled],
            judged: Published {
                auditors: Some(BTreeSet::from([stalled.dedup_key.clone()])),
                ..wanting(&[])
            },
            want: vec![resolve(&stalled)],
        },
        Row {
            rule: "an auditor alert left out of a capped read neither resolves nor expires",
            open: vec![&stalled],
            judged: Published {
                auditors: Some(BTreeSet::new()),
                auditors_capped: true,
                ..wanting(&[])
            },
            want: vec![],
        },
        Row {
            rule: "a window older than max_window_age does not page",
            open: vec![],
            judged: wanting(&[&old]),
            want: vec![],
        },
    ];
    let wrong: Vec<String> = rows
        .iter()
        .filter_map(|row| {
            let got = outline(&plan(&by_key(&row.open), &row.judged, NOW, MAX_AGE));
            (got != row.want).then(|| format!("{}: got {got:?}, want {:?}", row.rule, row.want))
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Pages before resolves; the most urgent first; within an urgency each topic's
/// newest before any topic's second (one topic's flood delays another's page by one).
#[test]
fn work_is_ordered_most_urgent_first_round_robin_over_topics() {
    let stale = window("gone", W - 60 * MIN, Verdict::Loss);
    let newest = window("flood", W, Verdict::Loss);
    let older = window("flood", W - 10 * MIN, Verdict::Loss);
    let oldest = window("flood", W - 20 * MIN, Verdict::Loss);
    let other = window("quiet", W - 30 * MIN, Verdict::Mismatch);
    let warning = window("quiet", W, Verdict::Duplication);
    let stalled = auditor("quiet");
    let judged = Published {
        auditors: Some(BTreeSet::from([stalled.dedup_key.clone()])),
        ..wanting(&[&warning, &older, &oldest, &newest, &other, &stalled])
    };
    let work = plan(&by_key(&[&stale]), &judged, NOW, MAX_AGE);
    assert_eq!(
        outline(&work),
        vec![
            trigger(&stalled),
            trigger(&newest),
            trigger(&older),
            trigger(&other),
            trigger(&oldest),
            trigger(&warning),
            resolve(&stale),
        ]
    );
}

/// `rate_limit` deliveries per `rate_period`, a sliding window: a token comes back
/// a period after the delivery that took it.
#[test]
fn the_rate_limit_is_a_sliding_window() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut rate = RateLimit::new(2, Duration::from_secs(60));
    let taken: Vec<bool> = [
        t0,
        t0 + 10 * s,
        t0 + 20 * s,
        t0 + 60 * s,
        t0 + 61 * s,
        t0 + 70 * s,
    ]
    .into_iter()
    .map(|t| rate.take(t))
    .collect();
    assert_eq!(taken, [true, true, false, true, false, true]);
}

/// Rule 0 (docs/web.md, Replication evidence): a loss proven while its window is open
/// stays the page until the window is final, however its verdict moves meanwhile
/// (`delayed` when the replicator falls behind on the window's newer records); a final
/// window pages every change.
#[test]
fn an_unsettled_window_is_not_paged_again_for_a_less_urgent_verdict() {
    let loss = window("t", W, Verdict::Loss);
    let delayed = window("t", W, Verdict::Delayed);
    let open = by_key(&[&loss]);
    let mut judged = wanting(&[&delayed]);
    judged.unsettled.insert(loss.dedup_key.clone());
    assert_eq!(outline(&plan(&open, &judged, NOW, MAX_AGE)), vec![]);
    // More urgent while unsettled: paged.
    let open = by_key(&[&delayed]);
    let judged_loss = {
        let mut j = wanting(&[&loss]);
        j.unsettled.insert(loss.dedup_key.clone());
        j
    };
    assert_eq!(
        outline(&plan(&open, &judged_loss, NOW, MAX_AGE)),
        vec![trigger(&loss)]
    );
    // Final: any change of verdict is paged, as before.
    let open = by_key(&[&loss]);
    assert_eq!(
        outline(&plan(&open, &wanting(&[&delayed]), NOW, MAX_AGE)),
        vec![trigger(&delayed)]
    );
}
