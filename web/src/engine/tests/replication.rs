//! Rule 0 (docs/web.md, Replication evidence): what a replicator's evidence proves
//! before the window is final. regional/dc1 → aggregate/agg through a consumer-group
//! replicator, window W open (five minutes in), the upstream having counted 100 records
//! of W on partitions 0 and 1 up to offset 49 in each.

use super::*;

const NOW: i64 = W + 5 * MIN;
const SEC: i64 = 1_000;
const EVIDENCE: &str = "replicator:group/mirror";

fn replicated(objective: &str) -> Topology {
    topology(&format!(
        r#"
        tiers = [{{ name = "regional" }}, {{ name = "aggregate" }}]
        [[edges]]
        upstream = "regional"
        downstream = "aggregate"
        datacenters = {{ dc1 = "agg" }}
        replicator = {{ consumer_group = "mirror" }}
        {objective}
        "#
    ))
}

/// regional/dc1's row of W: 100 records up to offset 49 in partitions 0 and 1, the
/// last counted 30 s ago; the aggregate's, `observed` records.
fn counted(observed: u64) -> Vec<WindowRow> {
    vec![
        WindowRow {
            max_offsets: vec![(0, 49), (1, 49)],
            max_observed_at_ms: Some(NOW - 30 * SEC),
            ..row("regional", "dc1", 100, 1)
        },
        row("aggregate", "agg", observed, 2),
    ]
}

fn part(tier: &str, dc: &str, p: i32, next_offset: i64, lag: Option<i64>, at: i64) -> ProgressRow {
    ProgressRow {
        partition: p,
        next_offset,
        lag,
        record_time_ms: Some(at - SEC),
        ..progress(tier, dc, at - SEC, at)
    }
}

/// The replicator's committed offsets on dc1, read at `at`; where it is behind, the
/// first record it has not copied was read upstream 30 s before now.
fn copied(p0: i64, p1: i64, at: i64) -> Vec<ProgressRow> {
    [(0, p0), (1, p1)]
        .into_iter()
        .map(|(p, next)| ProgressRow {
            record_time_ms: (next <= 49).then_some(NOW - 30 * SEC),
            ..part(EVIDENCE, "dc1", p, next, Some(0), at)
        })
        .collect()
}

/// The upstream auditor regional/dc1 at lag 0 on partitions 0 and 1, read up to
/// `l0` and `l1` (its measured log ends), measured at `at`.
fn measured(l0: i64, l1: i64, at: i64) -> Vec<ProgressRow> {
    vec![
        part("regional", "dc1", 0, l0, Some(0), at),
        part("regional", "dc1", 1, l1, Some(0), at),
    ]
}

/// `rows` as received by the collector at `at`.
fn received_late(rows: Vec<ProgressRow>, at: i64) -> Vec<ProgressRow> {
    rows.into_iter()
        .map(|p| ProgressRow {
            received_at_ms: at,
            ..p
        })
        .collect()
}

/// The aggregate's auditor at lag `lag` on partitions 0 and 1, measured at `at`.
fn read(lag: Option<i64>, at: i64) -> Vec<ProgressRow> {
    vec![
        part("aggregate", "agg", 0, 40, lag, at),
        part("aggregate", "agg", 1, 40, lag, at),
    ]
}

struct Case {
    what: &'static str,
    rows: Vec<WindowRow>,
    progress: Vec<Vec<ProgressRow>>,
    objective: &'static str,
    staged: bool,
    expect: (Verdict, Option<SoFar>),
}

fn case(what: &'static str) -> Case {
    Case {
        what,
        rows: counted(63),
        progress: vec![
            copied(50, 50, NOW - 10 * SEC),
            read(Some(0), NOW - 5 * SEC),
            measured(50, 50, NOW - 5 * SEC),
        ],
        objective: "",
        staged: false,
        expect: (Verdict::Loss, Some(SoFar::Loss)),
    }
}

#[test]
fn a_loss_is_proven_while_the_window_is_open_and_only_on_full_evidence() {
    let table = vec![
        case("copied past every counted offset, read downstream after: 37 missing is a loss"),
        Case {
            rows: counted(100),
            expect: (Verdict::Pending, Some(SoFar::Ok)),
            ..case("copied and read, nothing missing: ok so far")
        },
        Case {
            rows: counted(130),
            expect: (Verdict::Pending, Some(SoFar::Ok)),
            ..case("more downstream than counted upstream so far (upstream auditor behind): not judged early")
        },
        Case {
            progress: vec![copied(50, 40, NOW - 10 * SEC), read(Some(0), NOW - 5 * SEC)],
            rows: counted(90),
            expect: (Verdict::Pending, Some(SoFar::InFlight)),
            ..case("partition 1 copied up to offset 40 of 49: in flight, not a loss")
        },
        Case {
            progress: vec![copied(50, 49, NOW - 10 * SEC), read(Some(0), NOW - 5 * SEC)],
            rows: counted(99),
            expect: (Verdict::Pending, Some(SoFar::InFlight)),
            ..case("next offset to copy 49 = the highest counted: record 49 may be in flight")
        },
        Case {
            progress: vec![copied(50, 40, NOW - 10 * SEC), read(Some(0), NOW - 5 * SEC)],
            ..case("37 missing, at most 10 in flight: at least 27 proven lost")
        },
        Case {
            progress: vec![copied(50, 40, NOW - 10 * SEC), read(Some(0), NOW - 5 * SEC)],
            objective: r#"replication_lag_objective = "20s""#,
            ..case("proven beyond what is in flight: loss, whatever the lag objective")
        },
        Case {
            progress: vec![copied(50, 40, NOW - 10 * SEC), read(Some(0), NOW - 5 * SEC)],
            rows: counted(90),
            objective: r#"replication_lag_objective = "20s""#,
            expect: (Verdict::Delayed, Some(SoFar::InFlight)),
            ..case("in flight for 30 s or more, objective 20 s: delayed")
        },
        Case {
            progress: vec![copied(50, 40, NOW - 10 * SEC), read(Some(0), NOW - 5 * SEC)],
            objective: r#"replication_lag_objective = "1m""#,
            rows: counted(90),
            expect: (Verdict::Pending, Some(SoFar::InFlight)),
            ..case("in flight for 30 s or more, objective 1 min: pending")
        },
        Case {
            progress: vec![copied(50, 50, NOW - 10 * SEC), read(Some(0), NOW - 11 * SEC)],
            expect: (Verdict::Pending, None),
            ..case("downstream's lag 0 measured before the copies were known: nothing proven")
        },
        Case {
            progress: vec![
                received_late(copied(50, 50, NOW - 10 * SEC), NOW - 8 * SEC),
                read(Some(0), NOW - 10 * SEC + 500),
            ],
            expect: (Verdict::Pending, None),
            ..case("lag 0 measured within the evidence clock's allowance after it: nothing proven")
        },
        Case {
            progress: vec![
                received_late(copied(50, 50, NOW - 10 * SEC), NOW - 8 * SEC),
                read(Some(0), NOW - 10 * SEC + 1500),
            ],
            ..case("lag 0 measured past the evidence clock's allowance: proven")
        },
        Case {
            progress: vec![copied(50, 50, NOW - 10 * SEC), read(Some(3), NOW - 5 * SEC)],
            expect: (Verdict::Pending, None),
            ..case("downstream still reading (lag 3): nothing proven")
        },
        Case {
            progress: vec![copied(50, 50, NOW - 10 * SEC), read(None, NOW - 5 * SEC)],
            expect: (Verdict::Pending, None),
            ..case("downstream's lag unknown: nothing proven")
        },
        Case {
            progress: vec![
                copied(50, 50, NOW - 10 * SEC),
                vec![part("aggregate", "agg", 0, 40, Some(0), NOW - 5 * SEC)],
            ],
            expect: (Verdict::Pending, None),
            ..case("downstream reports no partition 1: nothing proven")
        },
        Case {
            progress: vec![read(Some(0), NOW - 5 * SEC)],
            expect: (Verdict::Pending, None),
            ..case("no replication evidence at all: today's rules")
        },
        Case {
            progress: vec![
                vec![part(EVIDENCE, "dc1", 0, 50, Some(0), NOW - 10 * SEC)],
                read(Some(0), NOW - 5 * SEC),
            ],
            expect: (Verdict::Pending, None),
            ..case("evidence for partition 0 only: nothing proven")
        },
        Case {
            rows: vec![
                WindowRow {
                    max_offsets: vec![],
                    ..counted(63)[0].clone()
                },
                counted(63)[1].clone(),
            ],
            expect: (Verdict::Pending, None),
            ..case("upstream increments without offset ranges: nothing proven")
        },
        Case {
            staged: true,
            expect: (Verdict::Pending, None),
            ..case("downstream increments stored but not added up: nothing proven")
        },
        // Plausibility (docs/web.md, Replication evidence): evidence is checked before
        // it is used.
        Case {
            progress: vec![
                copied(1 << 62, 1 << 62, NOW - 10 * SEC),
                read(Some(0), NOW - 5 * SEC),
            ],
            expect: (Verdict::Pending, None),
            ..case("evidence past the upstream auditor's measured log end (2^62): not used")
        },
        Case {
            progress: vec![
                copied(50, 51, NOW - 10 * SEC),
                read(Some(0), NOW - 5 * SEC),
            ],
            expect: (Verdict::Pending, None),
            ..case("evidence one past the upstream's log end on partition 1: not used")
        },
        Case {
            progress: vec![
                copied(50, 40, NOW - 10 * SEC),
                read(Some(0), NOW - 5 * SEC),
                vec![
                    part("regional", "dc1", 0, 45, Some(5), NOW - 5 * SEC),
                    part("regional", "dc1", 1, 50, Some(0), NOW - 5 * SEC),
                ],
            ],
            ..case("the log end is the upstream's position + its lag: 27 proven lost")
        },
        Case {
            progress: vec![
                copied(50, 50, NOW - 10 * SEC),
                read(Some(0), NOW - 5 * SEC),
                vec![part("regional", "dc1", 0, 50, Some(0), NOW - 5 * SEC)],
            ],
            expect: (Verdict::Pending, None),
            ..case("no upstream progress for partition 1 to check the evidence against: not used")
        },
        Case {
            progress: vec![
                copied(50, 50, NOW - 10 * SEC)
                    .into_iter()
                    .map(|p| ProgressRow {
                        emitted_at_ms: NOW + 59 * MIN + 50 * SEC,
                        ..p
                    })
                    .collect(),
                read(Some(0), NOW - 5 * SEC),
            ],
            expect: (Verdict::Pending, None),
            ..case("evidence emitted an hour ahead of its receipt: not used")
        },
    ];
    let mut failures = Vec::new();
    for c in table {
        let t = replicated(c.objective);
        let mut progress: Vec<ProgressRow> = c.progress.into_iter().flatten().collect();
        // The upstream auditor's own progress, unless the case sets it.
        if !progress.iter().any(|p| p.tier == "regional") {
            progress.extend(measured(50, 50, NOW - 5 * SEC));
        }
        let mut staged = Staged::new();
        if c.staged {
            staged.insert(("aggregate".into(), "agg".into(), W));
        }
        let v = t.evaluate_topic_staged("orders", &[W], &c.rows, &progress, &staged, NOW);
        assert_eq!(v.len(), 1, "{}", c.what);
        let v = &v[0];
        assert_eq!(v.lifecycle, Lifecycle::Open, "{}", c.what);
        if (v.verdict, v.so_far) != c.expect {
            failures.push(format!(
                "{}: got ({:?}, {:?}) \"{}\", want {:?}",
                c.what, v.verdict, v.so_far, v.reason, c.expect
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// Offsets up to i64::MAX pass validation: the arithmetic on them saturates (L2 of
/// reviews/security-3.md; a debug build panicked on `counted_to - copied_to + 1`).
#[test]
fn offsets_at_i64_max_are_in_flight_not_an_overflow() {
    let t = replicated("");
    let rows = vec![
        WindowRow {
            max_offsets: vec![(0, i64::MAX), (1, i64::MAX)],
            max_observed_at_ms: Some(NOW - 30 * SEC),
            ..row("regional", "dc1", 100, 1)
        },
        row("aggregate", "agg", 63, 2),
    ];
    let progress = [
        copied(0, 0, NOW - 10 * SEC),
        read(Some(0), NOW - 5 * SEC),
        measured(i64::MAX, i64::MAX, NOW - 5 * SEC),
    ]
    .concat();
    let v = &t.evaluate_topic("orders", &[W], &rows, &progress, NOW)[0];
    assert_eq!(
        (v.verdict, v.so_far),
        (Verdict::Pending, Some(SoFar::InFlight)),
        "{}",
        v.reason
    );
}

/// The reason on-call reads for a proven loss and for data in flight.
#[test]
fn proven_and_in_flight_say_what_they_rest_on() {
    let t = replicated(r#"replication_lag_objective = "20s""#);
    let progress: Vec<ProgressRow> = [
        copied(50, 50, NOW - 10 * SEC),
        read(Some(0), NOW - 5 * SEC),
        measured(50, 50, NOW - 5 * SEC),
    ]
    .concat();
    let v = &t.evaluate_topic("orders", &[W], &counted(63), &progress, NOW)[0];
    assert!(
        v.reason.starts_with("proven before the window is final: at least 37 of the 100 messages counted upstream so far are missing downstream;"),
        "{}",
        v.reason
    );
    let progress: Vec<ProgressRow> = [
        copied(50, 40, NOW - 10 * SEC),
        read(Some(0), NOW - 5 * SEC),
        measured(50, 50, NOW - 5 * SEC),
    ]
    .concat();
    let v = &t.evaluate_topic("orders", &[W], &counted(63), &progress, NOW)[0];
    assert!(
        v.reason.starts_with("proven before the window is final: at least 27 of the 100 messages counted upstream so far are missing downstream (and up to 10 more may still be in flight)"),
        "{}",
        v.reason
    );
    let v = &t.evaluate_topic("orders", &[W], &counted(95), &progress, NOW)[0];
    assert_eq!(
        v.reason,
        "in flight: up to 10 counted records not copied yet; the replicator has copied dc1 partition 1 up to offset 40, 0 records behind its log end, the upstream counted this window there up to offset 49; the first record not copied was read upstream 30 s ago or more"
    );
}

/// Evidence and both auditors' progress at `now`, past W's end + grace.
fn settled(now: i64) -> Vec<ProgressRow> {
    [
        copied(50, 50, now),
        vec![
            progress("regional", "dc1", CAUGHT_UP, now),
            ProgressRow {
                partition: 1,
                ..progress("regional", "dc1", CAUGHT_UP, now)
            },
        ],
        vec![
            progress("aggregate", "agg", CAUGHT_UP, now),
            ProgressRow {
                partition: 1,
                ..progress("aggregate", "agg", CAUGHT_UP, now)
            },
        ],
    ]
    .concat()
}

/// Once final, the window is judged by today's rules, whatever the evidence said.
#[test]
fn a_final_window_is_judged_by_the_counts_alone() {
    let t = replicated("");
    let now = CAUGHT_UP + MIN;
    let v = &t.evaluate_topic("orders", &[W], &counted(63), &settled(now), now)[0];
    assert_eq!(
        (v.lifecycle, v.verdict, v.so_far),
        (Lifecycle::Final, Verdict::Loss, None),
        "{}",
        v.reason
    );
}

/// A loss proven while the window was open stays its verdict through the cycles that
/// follow, in flight and final, even when the downstream's count has caught up since
/// (records copied again cannot undo a proof); a window never proven lost is judged by
/// its counts.
#[test]
fn a_proven_loss_stays_a_loss_whatever_arrives_later() {
    use crate::eval::hold_proven_loss;
    use std::collections::HashMap;
    let t = replicated("");
    let mut proven = HashMap::new();
    let judge = |proven: &mut HashMap<_, _>, observed, progress: &[ProgressRow], now| {
        let mut v = t
            .evaluate_topic("orders", &[W], &counted(observed), progress, now)
            .remove(0);
        let before = (v.verdict, v.so_far, v.reason.clone());
        if let Some((key, proof)) = hold_proven_loss(proven, &mut v) {
            proven.insert(key, proof);
        }
        (before, v)
    };
    let evidence = [
        copied(50, 50, NOW - 10 * SEC),
        read(Some(0), NOW - 5 * SEC),
        measured(50, 50, NOW - 5 * SEC),
    ]
    .concat();
    // Judged in flight before any proof: untouched.
    let behind = [
        copied(10, 50, NOW - 10 * SEC),
        read(Some(0), NOW - 5 * SEC),
        measured(50, 50, NOW - 5 * SEC),
    ]
    .concat();
    let (_, v) = judge(&mut proven, 63, &behind, NOW);
    assert_eq!(
        (v.verdict, v.so_far),
        (Verdict::Pending, Some(SoFar::InFlight))
    );
    // Proven: 37 missing.
    let (_, v) = judge(&mut proven, 63, &evidence, NOW);
    assert_eq!((v.verdict, v.so_far), (Verdict::Loss, Some(SoFar::Loss)));
    let proof = v.reason.clone();
    assert!(proof.contains("at least 37 "), "{proof}");
    // The replicator falls behind on newer records: still the loss.
    let (before, v) = judge(&mut proven, 63, &behind, NOW);
    assert_eq!(
        (before.0, before.1),
        (Verdict::Pending, Some(SoFar::InFlight))
    );
    assert_eq!((v.verdict, v.so_far), (Verdict::Loss, Some(SoFar::Loss)));
    // Final with the count caught up (37 records came since): the counts alone say
    // mismatch (their checksums differ), the verdict stays the proven loss and says
    // both.
    let now = CAUGHT_UP + MIN;
    let (before, v) = judge(&mut proven, 100, &settled(now), now);
    assert_eq!((before.0, before.1), (Verdict::Mismatch, None));
    assert_eq!(
        (v.lifecycle, v.verdict, v.so_far),
        (Lifecycle::Final, Verdict::Loss, Some(SoFar::Loss))
    );
    assert_eq!(
        v.reason,
        format!(
            "a loss was proven while the window was open ({proof}); now mismatch: {}",
            before.2
        )
    );
    // The next window, never proven: judged by its counts alone.
    let next = W + 10 * MIN;
    let rows: Vec<WindowRow> = counted(100)
        .into_iter()
        .map(|r| WindowRow {
            window_start_ms: next,
            ..r
        })
        .collect();
    let judged = t.evaluate_topic("orders", &[next], &rows, &settled(now), now);
    let mut held = judged[0].clone();
    assert_eq!(hold_proven_loss(&proven, &mut held), None);
    assert_eq!(held, judged[0]);
}

/// Evidence tiers are not auditors: they are never reported stalled on their own.
#[test]
fn replication_evidence_is_not_an_auditor() {
    let t = replicated("");
    let progress = copied(50, 50, NOW - 10 * SEC);
    assert!(auditor_status(&t, &progress, NOW + 365 * 24 * 60 * MIN).is_empty());
}

#[test]
fn an_objective_without_a_replicator_or_a_bad_name_is_refused() {
    let cfg: TopologyConfig = toml::from_str(
        r#"
        tiers = [{ name = "regional" }, { name = "aggregate" }]
        [[edges]]
        upstream = "regional"
        downstream = "aggregate"
        replication_lag_objective = "1m"
        "#,
    )
    .unwrap();
    let err = ten_minutes(cfg).unwrap_err().to_string();
    assert!(err.contains("needs a replicator"), "{err}");
    let cfg: TopologyConfig = toml::from_str(
        r#"
        tiers = [{ name = "regional" }, { name = "aggregate" }]
        [[edges]]
        upstream = "regional"
        downstream = "aggregate"
        replicator = { consumer_group = "has space" }
        "#,
    )
    .unwrap();
    let err = ten_minutes(cfg).unwrap_err().to_string();
    assert!(err.contains("must be 1-200 characters"), "{err}");
}

/// `same_cluster` (a producer tier counting what the cluster acknowledged, through the
/// librdkafka plugin or the Java interceptor): its counted offsets are in the log as
/// soon as counted, as of its latest observation; nothing is in flight.
#[test]
fn a_producer_tiers_acknowledged_offsets_are_their_own_evidence() {
    let t = topology(
        r#"
        tiers = [{ name = "producer", progress = false }, { name = "regional" }]
        [[edges]]
        upstream = "producer"
        downstream = "regional"
        replicator = "same_cluster"
        "#,
    );
    let produced = |observed_at: Option<i64>| {
        vec![
            WindowRow {
                max_offsets: vec![(0, 49), (1, 49)],
                max_observed_at_ms: observed_at,
                last_received_at_ms: NOW - 15 * SEC,
                ..row("producer", "dc1", 100, 1)
            },
            row("regional", "dc1", 80, 2),
        ]
    };
    let regional = |at: i64| {
        vec![
            part("regional", "dc1", 0, 30, Some(0), at),
            part("regional", "dc1", 1, 50, Some(0), at),
        ]
    };
    let judge = |rows: &[WindowRow], progress: &[ProgressRow]| {
        let v = &t.evaluate_topic("orders", &[W], rows, progress, NOW)[0];
        (v.lifecycle, v.verdict, v.so_far)
    };
    assert_eq!(
        judge(&produced(Some(NOW - 20 * SEC)), &regional(NOW - 10 * SEC)),
        (Lifecycle::Open, Verdict::Loss, Some(SoFar::Loss)),
        "read after the producer's acknowledgements: 20 missing"
    );
    assert_eq!(
        judge(
            &produced(Some(NOW - 20 * SEC)),
            &regional(NOW - 19 * SEC - 500)
        ),
        (Lifecycle::Open, Verdict::Pending, None),
        "read within the clock allowance of them: nothing proven"
    );
    assert_eq!(
        judge(&produced(None), &regional(NOW - 10 * SEC)),
        (Lifecycle::Open, Verdict::Pending, None),
        "a producer row without observation time: nothing proven"
    );
}
