//! One table per engine rule of docs/web.md, Verdicts, rules 3 and 5, labelled as its
//! test is named: B2, a region-specific topic on a many-to-one edge; B3, staged
//! increments keep a window pending (rule 5); B4, lag 0 dated by when it was measured;
//! B6, progress forgotten after `forget_after`; B7, stall judged per partition and
//! instance; and the lagging auditor. Each row is (what, inputs, expected verdict and
//! lifecycle). Each table was run with its rule reverted in `mod.rs`; the rows that
//! failed then are marked `// reverted: …`, so a table that stops discriminating shows
//! here. The rules that live in audit-service have their tables there: empty partitions
//! at lag 0, the lag from the position (past transaction markers) and the
//! unread-partition report in `report.rs`, the minimum watermark
//! (docs/audit-message-v1.md, Progress) in `counting.rs`.

use super::*;

const HOUR: i64 = 60 * MIN;

/// One row of a rule table: the topic "orders" judged in window `W` on the edge from
/// `edge.0` at downstream datacenter `edge.1`.
struct Row {
    what: &'static str,
    rows: Vec<WindowRow>,
    progress: Vec<ProgressRow>,
    staged: Staged,
    now: i64,
    edge: (&'static str, &'static str),
    expect: (Verdict, Lifecycle),
}

/// A row on the one-to-one edge producer → regional at dc1, judged at `NOW`, nothing
/// staged; each row names its rows, progress and expectation.
fn one(what: &'static str) -> Row {
    Row {
        what,
        rows: vec![],
        progress: vec![],
        staged: Staged::new(),
        now: NOW,
        edge: ("producer", "dc1"),
        expect: (Verdict::Ok, Lifecycle::Final),
    }
}

/// Like `one`, on the many-to-one edge regional (dc1 + dc2) → aggregate at agg.
fn many(what: &'static str) -> Row {
    Row {
        edge: ("regional", "agg"),
        ..one(what)
    }
}

/// Judges every row; fails with every row that did not get its expectation.
fn check(rule: &str, table: Vec<Row>) {
    let failures = judge(table);
    assert!(failures.is_empty(), "{rule}:\n{}", failures.join("\n"));
}

/// Every row that did not get its expectation, with what it got.
fn judge(table: Vec<Row>) -> Vec<String> {
    let topo = pipeline();
    let mut failures = Vec::new();
    for r in &table {
        let out =
            topo.evaluate_topic_staged("orders", &[W], &r.rows, &r.progress, &r.staged, r.now);
        let Some(e) = out
            .iter()
            .find(|e| e.upstream == r.edge.0 && e.datacenter == r.edge.1)
        else {
            failures.push(format!("{}: no verdict in {out:#?}", r.what));
            continue;
        };
        if (e.verdict, e.lifecycle) != r.expect {
            failures.push(format!(
                "{}: expected {:?}, got {:?} ({})",
                r.what,
                r.expect,
                (e.verdict, e.lifecycle),
                e.reason
            ));
        }
    }
    failures
}

/// Progress of `tier`/`dc` partition `partition` by `host`.
fn part(tier: &str, dc: &str, partition: i32, host: &str) -> ProgressRow {
    ProgressRow {
        partition,
        host: host.into(),
        ..progress(tier, dc, CAUGHT_UP, NOW)
    }
}

/// Lag 0 of regional/dc1 (last record in the window, so only the lag can settle it),
/// measured by the auditor at `emitted` and received by the collector at `received`.
fn lag_zero(emitted: i64, received: i64) -> ProgressRow {
    ProgressRow {
        lag: Some(0),
        record_time_ms: Some(W),
        emitted_at_ms: emitted,
        received_at_ms: received,
        ..progress("regional", "dc1", W, received)
    }
}

#[test]
fn b2_an_upstream_datacenter_without_the_topic_contributes_zero() {
    let region_only = || vec![row("regional", "dc1", 100, 7)];
    let dc1_and_agg = |now| {
        vec![
            progress("regional", "dc1", CAUGHT_UP, now),
            progress("aggregate", "agg", CAUGHT_UP, now),
        ]
    };
    check(
        "B2",
        vec![
            Row {
                rows: [region_only(), vec![row("aggregate", "agg", 95, 6)]].concat(),
                progress: dc1_and_agg(NOW),
                // reverted: (Pending, Settling) "no progress from auditor regional/dc2 yet"
                expect: (Verdict::Loss, Lifecycle::Final),
                ..many("topic in dc1 only, 5 % lost on the way to agg: loss")
            },
            Row {
                rows: [region_only(), vec![row("aggregate", "agg", 100, 7)]].concat(),
                progress: dc1_and_agg(NOW),
                // reverted: (Pending, Settling)
                expect: (Verdict::Ok, Lifecycle::Final),
                ..many("topic in dc1 only, complete: ok")
            },
            Row {
                rows: [region_only(), vec![row("aggregate", "agg", 95, 6)]].concat(),
                progress: dc1_and_agg(SETTLED + 31 * MIN),
                now: SETTLED + 31 * MIN,
                // reverted: (Stalled, Settling) "auditor regional/dc2 never reported progress"
                expect: (Verdict::Loss, Lifecycle::Final),
                ..many("topic in dc1 only, past stall_after: loss, not stalled")
            },
            Row {
                rows: vec![],
                progress: dc1_and_agg(NOW),
                // reverted: (Pending, Settling)
                expect: (Verdict::Ok, Lifecycle::Final),
                ..many("topic in dc1 only, idle window: ok")
            },
            Row {
                rows: vec![
                    row("regional", "dc1", 100, 7),
                    row("regional", "dc2", 50, 3),
                    row("aggregate", "agg", 150, 10),
                ],
                progress: all_caught_up(NOW),
                ..many("topic in both datacenters, complete: ok")
            },
            Row {
                rows: vec![
                    row("regional", "dc1", 100, 7),
                    row("regional", "dc2", 50, 3),
                    row("aggregate", "agg", 100, 7),
                ],
                progress: dc1_and_agg(NOW),
                expect: (Verdict::Pending, Lifecycle::Settling),
                ..many("dc2 has rows but no progress: it carries the topic, wait")
            },
            Row {
                rows: [region_only(), vec![row("aggregate", "agg", 100, 7)]].concat(),
                progress: dc2_lagging(NOW),
                expect: (Verdict::Pending, Lifecycle::Settling),
                ..many("dc2 has progress behind the window and no rows: wait")
            },
            Row {
                rows: [region_only(), vec![row("aggregate", "agg", 100, 7)]].concat(),
                progress: vec![progress("regional", "dc1", CAUGHT_UP, NOW)],
                expect: (Verdict::Pending, Lifecycle::Settling),
                ..many("the downstream datacenter without progress still blocks")
            },
            Row {
                rows: one_to_one((100, 7), (100, 7)),
                progress: vec![progress("aggregate", "agg", CAUGHT_UP, NOW)],
                expect: (Verdict::Pending, Lifecycle::Settling),
                ..one("one-to-one edge: its downstream datacenter without progress blocks")
            },
        ],
    );
}

#[test]
fn b3_staged_increments_of_an_involved_tier_keep_the_window_pending() {
    let rows = || {
        vec![
            row("regional", "dc1", 100, 7),
            row("regional", "dc2", 50, 3),
            row("aggregate", "agg", 60, 4),
        ]
    };
    let staged = |tier: &str, dc: &str, w: i64| -> Staged { [(tier.into(), dc.into(), w)].into() };
    check(
        "B3",
        vec![
            Row {
                rows: rows(),
                progress: all_caught_up(NOW),
                staged: staged("aggregate", "agg", W),
                // reverted: (Loss, Final) "90 of 150 messages missing"
                expect: (Verdict::Pending, Lifecycle::Settling),
                ..many("downstream increments of the window staged: pending, not loss")
            },
            Row {
                rows: vec![
                    row("regional", "dc1", 100, 7),
                    row("aggregate", "agg", 150, 10),
                ],
                progress: all_caught_up(NOW),
                staged: staged("regional", "dc2", W),
                // reverted: (Duplication, Final)
                expect: (Verdict::Pending, Lifecycle::Settling),
                ..many("upstream dc2's increments staged: pending, not duplication")
            },
            Row {
                rows: rows(),
                progress: all_caught_up(NOW),
                staged: staged("aggregate", "agg", W + 10 * MIN),
                expect: (Verdict::Loss, Lifecycle::Final),
                ..many("staged increments of the next window do not hold this one")
            },
            Row {
                rows: rows(),
                progress: all_caught_up(NOW),
                staged: staged("producer", "dc1", W),
                expect: (Verdict::Loss, Lifecycle::Final),
                ..many("staged increments of a tier not on the edge do not hold it")
            },
            Row {
                rows: one_to_one((100, 7), (100, 7)),
                progress: all_caught_up(NOW),
                staged: staged("regional", "dc2", W),
                ..one("staged increments of another datacenter do not hold it")
            },
            Row {
                rows: one_to_one((100, 7), (100, 7)),
                progress: all_caught_up(NOW),
                staged: staged("regional", "dc1", W),
                // reverted: (Ok, Final)
                expect: (Verdict::Pending, Lifecycle::Settling),
                ..one("one-to-one edge, downstream increments staged: pending")
            },
            Row {
                rows: rows(),
                progress: dc2_lagging(NOW),
                staged: staged("aggregate", "agg", W),
                expect: (Verdict::Pending, Lifecycle::Settling),
                ..many("staged and a lagging auditor: pending")
            },
        ],
    );
}

#[test]
fn b4_lag_zero_is_dated_by_emitted_at_and_never_after_received() {
    let short = || one_to_one((100, 7), (90, 6));
    check(
        "B4",
        vec![
            Row {
                rows: one_to_one((100, 7), (100, 7)),
                progress: vec![lag_zero(SETTLED + MIN, SETTLED + MIN)],
                ..one("lag 0 measured and received after settle time: final")
            },
            Row {
                rows: one_to_one((100, 7), (100, 7)),
                progress: vec![lag_zero(SETTLED, SETTLED + 1)],
                ..one("lag 0 measured exactly at settle time: final")
            },
            Row {
                rows: short(),
                progress: vec![lag_zero(END, SETTLED + MIN)],
                // reverted to received_at: (Loss, Final) "10 of 100 messages missing"
                expect: (Verdict::Pending, Lifecycle::Settling),
                ..one("measured before settle time, received after a backlog: pending")
            },
            Row {
                rows: short(),
                progress: vec![lag_zero(SETTLED - 1, NOW)],
                // reverted to received_at: (Loss, Final)
                expect: (Verdict::Pending, Lifecycle::Settling),
                ..one("measured 1 ms before settle time: pending")
            },
            Row {
                rows: short(),
                progress: vec![lag_zero(SETTLED + HOUR, END)],
                // reverted to emitted_at without the received bound: (Loss, Final)
                expect: (Verdict::Pending, Lifecycle::Settling),
                ..one("auditor clock an hour ahead, received before settle time: pending")
            },
            Row {
                rows: short(),
                progress: vec![lag_zero(END, END)],
                expect: (Verdict::Pending, Lifecycle::Settling),
                ..one("measured and received before settle time: pending")
            },
            Row {
                rows: short(),
                progress: vec![ProgressRow {
                    lag: Some(1),
                    ..lag_zero(SETTLED + MIN, SETTLED + MIN)
                }],
                expect: (Verdict::Pending, Lifecycle::Settling),
                ..one("lag 1 after settle time is not lag 0: pending")
            },
            Row {
                rows: short(),
                progress: vec![lag_zero(SETTLED + MIN, SETTLED + 40 * MIN)],
                now: SETTLED + 41 * MIN,
                expect: (Verdict::Loss, Lifecycle::Final),
                ..one("measured after settle time, delivered late: final loss")
            },
        ],
    );
}

#[test]
fn b6_progress_not_reported_for_forget_after_is_forgotten() {
    assert_eq!(pipeline().forget_after_ms, 24 * HOUR);
    let dc2_last = |ago| progress("regional", "dc2", END, NOW - ago);
    let rows = || {
        vec![
            row("regional", "dc1", 10, 1),
            row("aggregate", "agg", 10, 1),
        ]
    };
    let fresh = || {
        vec![
            progress("regional", "dc1", CAUGHT_UP, NOW),
            progress("aggregate", "agg", CAUGHT_UP, NOW),
        ]
    };
    let mut failures = judge(vec![
        Row {
            rows: rows(),
            progress: [fresh(), vec![dc2_last(24 * HOUR + 1)]].concat(),
            // reverted: (Stalled, Settling) "auditor regional/dc2 stopped reporting"
            ..many("dc2's topic deleted a day ago: forgotten, the window is judged")
        },
        Row {
            rows: rows(),
            progress: [fresh(), vec![dc2_last(23 * HOUR)]].concat(),
            expect: (Verdict::Stalled, Lifecycle::Settling),
            ..many("dc2 silent for 23 h, behind: stalled until forget_after")
        },
        Row {
            rows: one_to_one((100, 7), (100, 7)),
            progress: vec![
                progress("regional", "dc1", CAUGHT_UP, NOW),
                ProgressRow {
                    partition: 1,
                    ..progress("regional", "dc1", END, NOW - 25 * HOUR)
                },
            ],
            // reverted: (Stalled, Settling) "…partition 1…"
            ..one("a partition gone a day ago (topic recreated smaller): forgotten")
        },
    ]);

    // Auditor status (what alerts "stalled"): (what, last report ago, expected stalled).
    let topo = pipeline();
    let status_table: &[(&str, i64, Option<bool>)] = &[
        ("reported a minute ago", MIN, Some(false)),
        ("silent past stall_after", 31 * MIN, Some(true)),
        ("silent 1 ms short of forget_after", 24 * HOUR, Some(true)),
        // reverted: Some(true)
        ("silent past forget_after: forgotten", 24 * HOUR + 1, None),
        // reverted: Some(true)
        ("silent a week: forgotten", 7 * 24 * HOUR, None),
    ];
    for &(what, ago, want) in status_table {
        let got = auditor_status(&topo, &[dc2_last(ago)], NOW)
            .first()
            .map(|s| s.stalled);
        if got != want {
            failures.push(format!("{what}: expected {want:?}, got {got:?}"));
        }
    }
    assert!(failures.is_empty(), "B6:\n{}", failures.join("\n"));
}

#[test]
fn b7_stall_is_per_partition_and_instance_not_the_freshest() {
    let read_past = |p, host, at| ProgressRow {
        received_at_ms: at,
        emitted_at_ms: at,
        ..part("regional", "dc1", p, host)
    };
    let behind = |p, host, at| ProgressRow {
        record_time_ms: Some(END),
        ..read_past(p, host, at)
    };
    let rows = || one_to_one((100, 7), (90, 6));
    let mut failures = judge(vec![
        Row {
            rows: rows(),
            progress: vec![read_past(0, "a", NOW), behind(1, "b", NOW - 2 * HOUR)],
            // reverted: (Pending, Settling) "has not read past window end + grace yet"
            expect: (Verdict::Stalled, Lifecycle::Settling),
            ..one("instance b stuck on partition 1, a fresh on partition 0: stalled")
        },
        Row {
            rows: rows(),
            progress: vec![behind(0, "a", NOW), behind(1, "a", NOW - 31 * MIN)],
            // reverted: (Pending, Settling)
            expect: (Verdict::Stalled, Lifecycle::Settling),
            ..one("one instance, one partition stale past stall_after: stalled")
        },
        Row {
            rows: rows(),
            progress: vec![behind(0, "a", NOW), behind(1, "b", NOW - 29 * MIN)],
            expect: (Verdict::Pending, Lifecycle::Settling),
            ..one("both behind, both reported within stall_after: pending")
        },
        Row {
            rows: rows(),
            progress: vec![behind(0, "a", NOW), read_past(1, "b", NOW - 2 * HOUR)],
            expect: (Verdict::Pending, Lifecycle::Settling),
            ..one("the stale partition is read past the window; the fresh one holds it")
        },
        Row {
            rows: one_to_one((100, 7), (100, 7)),
            progress: vec![read_past(0, "a", NOW), read_past(1, "b", NOW - 2 * HOUR)],
            ..one("an old report of a partition read past the window: final")
        },
        Row {
            rows: rows(),
            progress: vec![behind(0, "a", NOW - HOUR), behind(1, "b", NOW - 2 * HOUR)],
            expect: (Verdict::Stalled, Lifecycle::Settling),
            ..one("every partition stale: stalled")
        },
    ]);

    // The status names the stuck instance and partition: (what, progress, instances,
    // partitions).
    let topo = pipeline();
    type StatusRow = (&'static str, Vec<ProgressRow>, Vec<&'static str>, Vec<i32>);
    let table: Vec<StatusRow> = vec![
        // reverted (stale = the freshest report is old): ([], [])
        (
            "b stuck next to a fresh a",
            vec![read_past(0, "a", NOW), behind(1, "b", NOW - 2 * HOUR)],
            vec!["b"],
            vec![1],
        ),
        (
            "both fresh",
            vec![read_past(0, "a", NOW), behind(1, "b", NOW - MIN)],
            vec![],
            vec![],
        ),
        // reverted: ([], [])
        (
            "one of a's two partitions stale",
            vec![behind(0, "a", NOW), behind(1, "a", NOW - HOUR)],
            vec!["a"],
            vec![1],
        ),
    ];
    for (what, progress, instances, partitions) in table {
        let s = &auditor_status(&topo, &progress, NOW)[0];
        let got = (s.stalled_instances.clone(), s.stalled_partitions.clone());
        let want: (Vec<String>, Vec<i32>) = (
            instances.iter().map(|s| s.to_string()).collect(),
            partitions,
        );
        if got != want || s.stalled == want.1.is_empty() {
            failures.push(format!("{what}: expected {want:?}, got {got:?} ({s:?})"));
        }
    }
    assert!(failures.is_empty(), "B7:\n{}", failures.join("\n"));
}

#[test]
fn lagging_auditor_record_time_counts_only_with_a_known_lag() {
    let first_report = |record_time: Option<i64>, at| ProgressRow {
        lag: None,
        record_time_ms: record_time,
        ..progress("regional", "dc1", CAUGHT_UP, at)
    };
    check(
        "lagging auditor",
        vec![
            Row {
                rows: one_to_one((100, 7), (60, 4)),
                progress: vec![first_report(Some(CAUGHT_UP), NOW)],
                // reverted: (Loss, Final) "40 of 100 messages missing"
                expect: (Verdict::Pending, Lifecycle::Settling),
                ..one("first report of a late auditor, record time past settle, lag null")
            },
            Row {
                rows: one_to_one((100, 7), (60, 4)),
                progress: vec![first_report(Some(CAUGHT_UP), NOW - 31 * MIN)],
                // reverted: (Loss, Final)
                expect: (Verdict::Stalled, Lifecycle::Settling),
                ..one("lag null and silent past stall_after: stalled, not loss")
            },
            Row {
                rows: one_to_one((100, 7), (100, 7)),
                progress: vec![ProgressRow {
                    lag: Some(0),
                    ..progress("regional", "dc1", CAUGHT_UP, NOW)
                }],
                ..one("the next report, lag known: final")
            },
            Row {
                rows: one_to_one((100, 7), (60, 4)),
                progress: vec![
                    progress("regional", "dc1", CAUGHT_UP, NOW),
                    ProgressRow {
                        partition: 1,
                        ..first_report(None, NOW)
                    },
                ],
                expect: (Verdict::Pending, Lifecycle::Settling),
                ..one("a partition not read yet (reported at log start, no record time)")
            },
            Row {
                rows: one_to_one((100, 7), (60, 4)),
                progress: vec![first_report(Some(END), NOW)],
                expect: (Verdict::Pending, Lifecycle::Settling),
                ..one("lag null, record time before settle: pending")
            },
        ],
    );
}
