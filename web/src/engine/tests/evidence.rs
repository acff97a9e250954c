//! The evidence rule, rule 4 of `mod.rs` (docs/web.md, Verdicts): a window is final on
//! an edge only when the downstream auditor has read what the upstream counted in it.
//! One table; every row names what it shows, and the rows that failed with a piece of
//! the rule reverted say so (`// reverted (piece): …`), so a row that stops
//! discriminating shows here. The pieces:
//! - *rule*: `evidence_blocks` returns `None` (the clock rule, rule 3, alone);
//! - *tie*: a record read *at* the upstream's time (not past it) is taken as enough;
//! - *max*: the upstream's time per partition is the first datacenter's, not the max;
//! - *comparable*: LogAppendTime, and auditors without a latest record time, compared
//!   by record time anyway;
//! - *overdue-lag*: `delayed` without the auditor at lag 0;
//! - *overdue-when*: `delayed` as soon as now is past the upstream's time + grace, not
//!   only once the auditor's lag 0 was measured then;
//! - *partitions*: `preserves_partitions = false` ignored;
//! - *anywhere*: an upstream row without partitions (a producer) gives no evidence.
//!
//! The rows that show the rule is not stricter than it must be fail with a piece made
//! too strict:
//! - *past-needs-lag-0*: a partition read past the upstream's time counts only at lag 0;
//! - *tie-never*: a record at the upstream's time never settles, not even at lag 0
//!   measured past it + grace;
//! - *lag-known* (rule 3): a record time counts without a known lag;
//! - *timeless-rows*: an upstream row without record times (an older emitter) asks for
//!   its window end + grace, by the clock.
//!
//! The replay (docs/web.md, Verdicts, rule 4): the records of window `W` (an hour old
//! by event time) are appended at `R` (CreateTime), long after `W`'s end + grace; the
//! downstream's clock-rule evidence (record times past end + grace, lag 0) holds at
//! once.

use super::*;

/// When the replayed records of W were written (CreateTime): W's end + 70 minutes.
const R: i64 = END + 70 * MIN;
/// The default grace.
const GRACE: i64 = 20 * MIN;

/// An upstream row of W at `tier`/`dc` whose increments counted records up to `times`
/// (partition, latest record time).
fn counted(tier: &str, dc: &str, count: u64, times: &[(i32, i64)]) -> WindowRow {
    WindowRow {
        record_times: times.to_vec(),
        max_observed_at_ms: times.iter().map(|t| t.1 + 5).max(),
        // Received when counted.
        last_received_at_ms: times.iter().map(|t| t.1 + 5).max().unwrap_or_default(),
        ..row(tier, dc, count, count)
    }
}

/// Progress of the aggregate/agg auditor on partition `p`: read up to record time
/// `latest` (its watermark a little behind), `lag`, measured and received at `at`.
fn read(p: i32, latest: i64, lag: Option<i64>, at: i64) -> ProgressRow {
    ProgressRow {
        partition: p,
        record_time_ms: Some(latest - 1_000),
        max_record_time_ms: Some(latest),
        lag,
        ..progress("aggregate", "agg", latest, at)
    }
}

/// The upstream auditors of the many-to-one edge, caught up by the clock rule.
fn regionals(now: i64) -> Vec<ProgressRow> {
    ["dc1", "dc2"]
        .iter()
        .map(|dc| progress("regional", dc, R + MIN, now))
        .collect()
}

struct Row {
    what: &'static str,
    rows: Vec<WindowRow>,
    /// The downstream auditor's progress (the upstream's is `regionals`).
    down: Vec<ProgressRow>,
    now: i64,
    /// The edge regional → aggregate: whether it preserves partitions.
    preserves_partitions: bool,
    edge: (&'static str, &'static str),
    expect: (Verdict, Lifecycle, Evidence),
}

/// A row on regional (dc1 + dc2) → aggregate at agg, judged a minute after the replay.
fn row_at(what: &'static str) -> Row {
    Row {
        what,
        rows: vec![],
        down: vec![],
        now: R + MIN,
        preserves_partitions: true,
        edge: ("regional", "agg"),
        expect: (Verdict::Ok, Lifecycle::Final, Evidence::RecordTime),
    }
}

fn topology_with(preserves_partitions: bool) -> Topology {
    let mut t = pipeline();
    for e in &mut t.edges {
        e.preserves_partitions = preserves_partitions || e.upstream != "regional";
    }
    t
}

/// dc1 counted 100 records of W in partitions 0 and 1, up to R and R + 5 s; the
/// aggregate counted `observed` of them.
fn replayed(observed: u64) -> Vec<WindowRow> {
    vec![
        counted("regional", "dc1", 100, &[(0, R), (1, R + 5_000)]),
        row("aggregate", "agg", observed, observed),
    ]
}

#[test]
fn the_downstream_must_have_read_what_the_upstream_counted() {
    let table = vec![
        Row {
            rows: replayed(0),
            down: vec![read(0, W, Some(0), R + MIN), read(1, W, Some(0), R + MIN)],
            // reverted (rule): (Loss, Final) "100 of 100 messages missing"
            expect: (Verdict::Pending, Lifecycle::Settling, Evidence::RecordTime),
            ..row_at("replay: downstream at lag 0 on partitions without the copies yet: in flight")
        },
        Row {
            rows: replayed(60),
            down: vec![
                read(0, R + 2, Some(7), R + MIN),
                read(1, R + 10, Some(0), R + MIN),
            ],
            // reverted (rule): (Loss, Final)
            expect: (Verdict::Pending, Lifecycle::Settling, Evidence::RecordTime),
            ..row_at("replay: partition 1 read to R + 10 ms of R + 5 s: in flight")
        },
        Row {
            rows: replayed(100),
            down: vec![
                read(0, R + 2, Some(7), R + MIN),
                read(1, R + 5_001, Some(3), R + MIN),
            ],
            // reverted (past-needs-lag-0): (Pending, Settling)
            ..row_at("replay: both partitions read past the upstream's times: final, ok")
        },
        Row {
            rows: replayed(63),
            down: vec![
                read(0, R + 2, Some(7), R + MIN),
                read(1, R + 5_001, Some(3), R + MIN),
            ],
            // reverted (past-needs-lag-0): (Pending, Settling)
            expect: (Verdict::Loss, Lifecycle::Final, Evidence::RecordTime),
            ..row_at("replay with 37 lost: read past, so a real loss")
        },
        Row {
            rows: replayed(98),
            down: vec![
                read(0, R, Some(0), R + MIN),
                read(1, R + 5_000, Some(0), R + MIN),
            ],
            // reverted (tie): (Loss, Final) "2 of 100 messages missing"
            expect: (Verdict::Pending, Lifecycle::Settling, Evidence::RecordTime),
            ..row_at("read up to records at the upstream's times, lag 0 (of stale statistics): the same millisecond may follow")
        },
        Row {
            rows: replayed(100),
            down: vec![
                read(0, R, Some(0), R + 5_000 + GRACE),
                read(1, R + 5_000, Some(0), R + 5_000 + GRACE),
            ],
            now: R + 5_000 + GRACE + MIN,
            // reverted (tie-never): (Pending, Settling)
            ..row_at("the last records at the upstream's times, lag 0 past them + grace: final, not delayed")
        },
        Row {
            rows: replayed(98),
            down: vec![
                read(0, R + 2, Some(0), R + MIN),
                read(1, R + 5_000, Some(4), R + MIN),
            ],
            // reverted (tie): (Loss, Final)
            expect: (Verdict::Pending, Lifecycle::Settling, Evidence::RecordTime),
            ..row_at("a record at the upstream's time, more to read: wait")
        },
        Row {
            rows: replayed(98),
            down: vec![
                read(0, R + 2, Some(3), R + MIN),
                read(1, R + 6_000, None, R + MIN),
            ],
            // reverted (lag-known): (Loss, Final) "2 of 100 messages missing"
            expect: (Verdict::Pending, Lifecycle::Settling, Evidence::RecordTime),
            ..row_at("past the upstream's time with the lag unknown (first report): wait")
        },
        Row {
            rows: vec![
                counted("regional", "dc1", 100, &[(0, R)]),
                counted("regional", "dc2", 50, &[(0, R + 30_000)]),
                row("aggregate", "agg", 100, 100),
            ],
            down: vec![read(0, R + 10_000, Some(2), R + MIN)],
            // reverted (max): (Loss, Final) "50 of 150 messages missing"
            expect: (Verdict::Pending, Lifecycle::Settling, Evidence::RecordTime),
            ..row_at("many-to-one: past dc1's time, not dc2's: wait for the later one")
        },
        Row {
            rows: replayed(0),
            down: vec![
                read(0, W, Some(0), R + GRACE),
                read(1, W, Some(0), R + GRACE),
            ],
            now: R + GRACE + MIN,
            // reverted (rule): (Loss, Final)
            expect: (Verdict::Delayed, Lifecycle::Settling, Evidence::RecordTime),
            ..row_at("replicator paused past grace: everything read, the copies not there: delayed")
        },
        Row {
            rows: replayed(0),
            down: vec![
                read(0, W, Some(0), R + GRACE - 1),
                read(1, W, Some(0), R + GRACE - 1),
            ],
            now: R + GRACE + MIN,
            // reverted (overdue-when): (Delayed, Settling)
            expect: (Verdict::Pending, Lifecycle::Settling, Evidence::RecordTime),
            ..row_at("lag 0 measured before the upstream's time + grace: not overdue yet")
        },
        Row {
            rows: replayed(0),
            down: vec![
                read(0, R - 10 * MIN, Some(9_000), R + GRACE),
                read(1, W, Some(0), R + 1),
            ],
            now: R + GRACE + MIN,
            // reverted (overdue-lag), (overdue-when): (Delayed, Settling)
            expect: (Verdict::Pending, Lifecycle::Settling, Evidence::RecordTime),
            ..row_at("a late downstream auditor still reading (lag 9000): pending, not delayed")
        },
        Row {
            rows: replayed(0),
            down: vec![read(0, W, Some(0), R + MIN), read(1, W, Some(0), R + MIN)],
            now: R + MIN + 31 * MIN,
            // reverted (rule): (Loss, Final); (overdue-when): (Delayed, Settling)
            expect: (Verdict::Stalled, Lifecycle::Settling, Evidence::RecordTime),
            ..row_at("the downstream auditor silent since before the copies: stalled")
        },
        Row {
            rows: replayed(100),
            down: vec![read(0, R + 2, Some(7), R + MIN)],
            // reverted (rule): (Ok, Final)
            expect: (Verdict::Pending, Lifecycle::Settling, Evidence::RecordTime),
            ..row_at("the downstream reports no partition 1 (yet): wait")
        },
        Row {
            rows: replayed(60),
            down: vec![read(0, R + 2, Some(7), R + GRACE)],
            now: R + GRACE + MIN,
            // reverted (rule): (Loss, Final)
            expect: (Verdict::Delayed, Lifecycle::Settling, Evidence::RecordTime),
            ..row_at("no partition 1 downstream past grace: delayed (fewer partitions?)")
        },
        Row {
            rows: replayed(100),
            down: vec![
                ProgressRow {
                    log_append_time: true,
                    ..read(0, R + 2, Some(7), R + MIN)
                },
                read(1, R + 5_001, Some(3), R + MIN),
            ],
            // reverted (comparable): (Ok, Final, RecordTime)
            expect: (Verdict::Pending, Lifecycle::Settling, Evidence::Clock),
            ..row_at("LogAppendTime downstream, read past the time: no evidence before + grace")
        },
        Row {
            rows: replayed(100),
            down: vec![
                ProgressRow {
                    log_append_time: true,
                    ..read(0, R + GRACE, Some(0), R + GRACE)
                },
                read(1, R + 5_001, Some(3), R + GRACE),
            ],
            now: R + GRACE + MIN,
            // reverted (comparable): (Ok, Final, RecordTime)
            expect: (Verdict::Ok, Lifecycle::Final, Evidence::Clock),
            ..row_at("LogAppendTime downstream, read past the upstream's time + grace: final")
        },
        Row {
            rows: replayed(100),
            down: vec![
                ProgressRow {
                    record_time_ms: Some(R + 10_000),
                    max_record_time_ms: None,
                    ..read(0, R + 10_000, Some(7), R + MIN)
                },
                read(1, R + 5_001, Some(3), R + MIN),
            ],
            // reverted (comparable): (Ok, Final, RecordTime)
            expect: (Verdict::Pending, Lifecycle::Settling, Evidence::Clock),
            ..row_at("downstream auditor older than the field (watermark only): by the clock")
        },
        Row {
            // dc1 counted only in partition 0; the replicator wrote them to partition 1
            // (not read yet), and partition 0 was read past R.
            rows: vec![
                counted("regional", "dc1", 100, &[(0, R)]),
                row("aggregate", "agg", 40, 40),
            ],
            down: vec![
                read(0, R + 2, Some(0), R + MIN),
                read(1, W, Some(0), R + MIN),
            ],
            preserves_partitions: false,
            // reverted (partitions): (Loss, Final, RecordTime)
            expect: (Verdict::Pending, Lifecycle::Settling, Evidence::Clock),
            ..row_at("repartitioning replicator: every partition past the latest time + grace")
        },
        Row {
            rows: replayed(100),
            down: vec![
                read(0, R + 2, Some(0), R + 5_000 + GRACE),
                read(1, W, Some(0), R + 5_000 + GRACE),
            ],
            now: R + 5_000 + GRACE + MIN,
            preserves_partitions: false,
            // reverted (partitions): (Delayed, Settling, RecordTime)
            expect: (Verdict::Ok, Lifecycle::Final, Evidence::Clock),
            ..row_at("repartitioning replicator, lag 0 measured past the time + grace: final")
        },
        Row {
            rows: vec![
                counted("regional", "dc1", 100, &[(0, R), (1, R + 5_000)]),
                row("regional", "dc2", 50, 50),
                row("aggregate", "agg", 150, 150),
            ],
            down: vec![
                read(0, R + 2, Some(7), R + MIN),
                read(1, R + 5_001, Some(3), R + MIN),
            ],
            // reverted (timeless-rows): (Ok, Final, Clock); (past-needs-lag-0): pending
            ..row_at("an older emitter's row (dc2, no times) is no evidence: dc1's decide")
        },
        Row {
            rows: vec![
                row("regional", "dc1", 100, 7),
                row("aggregate", "agg", 0, 0),
            ],
            down: vec![read(0, W, Some(0), R + MIN), read(1, W, Some(0), R + MIN)],
            // reverted (timeless-rows): (Loss, Final, Clock)
            expect: (Verdict::Loss, Lifecycle::Final, Evidence::WindowEnd),
            ..row_at("no upstream evidence (emitters before issue 24): the clock rule alone")
        },
        Row {
            rows: vec![
                WindowRow {
                    max_observed_at_ms: Some(R),
                    last_received_at_ms: R + 5,
                    ..row("producer", "dc1", 100, 7)
                },
                row("regional", "dc1", 0, 0),
            ],
            down: vec![ProgressRow {
                lag: Some(0),
                ..progress("regional", "dc1", R - 1, R + MIN)
            }],
            edge: ("producer", "dc1"),
            // reverted (anywhere): (Loss, Final, WindowEnd)
            expect: (Verdict::Pending, Lifecycle::Settling, Evidence::Clock),
            ..row_at("a spooling producer's counts (no partitions): regional past them + grace")
        },
        Row {
            rows: vec![
                WindowRow {
                    max_observed_at_ms: Some(R),
                    ..row("producer", "dc1", 100, 7)
                },
                row("regional", "dc1", 100, 7),
            ],
            down: vec![ProgressRow {
                lag: Some(0),
                ..progress("regional", "dc1", R + 2 * MIN, R + GRACE + MIN)
            }],
            now: R + GRACE + 2 * MIN,
            edge: ("producer", "dc1"),
            // reverted (anywhere): (Ok, Final, WindowEnd)
            expect: (Verdict::Ok, Lifecycle::Final, Evidence::Clock),
            ..row_at("the spooled data arrived, lag 0 past the producer's time + grace: final")
        },
    ];
    let mut failures = Vec::new();
    for r in &table {
        let topo = topology_with(r.preserves_partitions);
        // The row's own progress replaces the caught-up one of the same partition.
        let key = |p: &ProgressRow| (p.tier.clone(), p.datacenter.clone(), p.partition);
        let own: Vec<_> = r.down.iter().map(key).collect();
        let mut progress: Vec<ProgressRow> = regionals(r.now)
            .into_iter()
            .filter(|p| !own.contains(&key(p)))
            .collect();
        progress.extend(r.down.iter().cloned());
        let out = topo.evaluate_topic("orders", &[W], &r.rows, &progress, r.now);
        let Some(e) = out
            .iter()
            .find(|e| e.upstream == r.edge.0 && e.datacenter == r.edge.1)
        else {
            failures.push(format!("{}: no verdict in {out:#?}", r.what));
            continue;
        };
        if (e.verdict, e.lifecycle, e.evidence) != r.expect {
            failures.push(format!(
                "{}: expected {:?}, got {:?} ({})",
                r.what,
                r.expect,
                (e.verdict, e.lifecycle, e.evidence),
                e.reason
            ));
        }
    }
    assert!(failures.is_empty(), "rule 4:\n{}", failures.join("\n"));
}

/// What on-call reads: the paused replicator's `delayed` says how far behind the
/// downstream is; the in-flight one says what it waits for.
#[test]
fn reasons_say_how_far_behind_the_downstream_is() {
    let topo = pipeline();
    let judge = |down: Vec<ProgressRow>, now| {
        let mut progress = regionals(now);
        progress.extend(down);
        let out = topo.evaluate_topic("orders", &[W], &replayed(0), &progress, now);
        out.into_iter()
            .find(|e| e.upstream == "regional")
            .expect("a verdict")
            .reason
    };
    let late = R + GRACE + MIN;
    let delayed = judge(
        vec![
            read(0, R - 60_000, Some(0), late),
            read(1, W, Some(0), late),
        ],
        late,
    );
    assert_eq!(
        delayed,
        format!(
            "aggregate/agg has read all of partition 0, up to record time {}; the upstream's records of this window there reach {}, 60 s later, and the grace period after them has passed (1 more partition likewise): they are not in the downstream cluster yet (a replicator paused or behind?)",
            at(R - 60_000),
            at(R)
        )
    );
    let in_flight = judge(
        vec![
            read(0, R - 2_000, Some(0), R + MIN),
            read(1, R + 9_000, Some(0), R + MIN),
        ],
        R + MIN,
    );
    assert!(
        in_flight.starts_with("auditor aggregate/agg: in flight: partition 0 is read to its end")
            && in_flight.ends_with("(2 s more)"),
        "{in_flight}"
    );
}

/// The window `W` on regional → aggregate/agg, judged at `at` from `rows`, the regional
/// auditors caught up and the downstream's progress `down`.
fn aggregate_at(t: &Topology, rows: &[WindowRow], down: Vec<ProgressRow>, at: i64) -> EdgeWindow {
    let progress = [regionals(at), down].concat();
    let out = t.evaluate_topic("orders", &[W], rows, &progress, at);
    find(&out, "regional", "agg").clone()
}

/// M2 of reviews/security-3.md: increments of count 0 count nothing, so their record
/// times are nothing the downstream must have read. A datacenter's token posting
/// count-0 increments with a record time an hour ahead (what validation lets through)
/// must not hold a real loss as in flight, then `delayed`, for as long as it posts.
#[test]
fn count_zero_increments_ask_the_downstream_for_nothing() {
    let t = topology_with(true);
    let now = R + MIN;
    let forged = counted(
        "regional",
        "dc2",
        0,
        &[(0, now + 59 * MIN), (1, now + 59 * MIN)],
    );
    let rows = [replayed(90), vec![forged]].concat();
    let down = vec![
        read(0, R + 2, Some(0), now),
        read(1, R + 5_002, Some(0), now),
    ];
    let v = aggregate_at(&t, &rows, down, now);
    assert_eq!(
        (v.verdict, v.lifecycle),
        (Verdict::Loss, Lifecycle::Final),
        "{}",
        v.reason
    );
    // Later, the downstream read all it has an hour past the forged times + grace:
    // still the loss, never `delayed`.
    let later = now + 90 * MIN;
    let down = vec![
        read(0, R + 2, Some(0), later),
        read(1, R + 5_002, Some(0), later),
    ];
    let v = aggregate_at(&t, &rows, down, later);
    assert_eq!(
        (v.verdict, v.lifecycle),
        (Verdict::Loss, Lifecycle::Final),
        "{}",
        v.reason
    );
}

/// The stated bound of rule 4 (docs/web.md, Verdicts): nothing a row counted is later
/// than when the collector received it. A datacenter's token posting an increment of
/// count 1 with a record time an hour ahead holds the window for `grace` after it
/// arrived at most: once the downstream has read past that (its live traffic), the real
/// loss is final. Before the bound it was in flight (pending) until an hour + grace
/// later, and the next such post re-armed it.
#[test]
fn a_record_time_ahead_of_its_receipt_holds_a_loss_for_grace_at_most() {
    let t = topology_with(true);
    let now = R + MIN;
    let forged = WindowRow {
        last_received_at_ms: now,
        ..counted("regional", "dc2", 1, &[(0, now + 59 * MIN)])
    };
    let rows = [replayed(90), vec![forged]].concat();
    let later = now + GRACE + MIN;
    let down = vec![
        read(0, later - 2_000, Some(0), later),
        read(1, later - 2_000, Some(0), later),
    ];
    let v = aggregate_at(&t, &rows, down, later);
    assert_eq!(
        (v.verdict, v.lifecycle),
        (Verdict::Loss, Lifecycle::Final),
        "{}",
        v.reason
    );
    assert_eq!((v.expected, v.observed), (101, 90), "{}", v.reason);
}
