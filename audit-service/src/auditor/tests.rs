//! The auditor's rules without a broker, a WAL or a producer.

use super::progress::measured_at;
use super::*;

use audit_lib::AuditMessage;

/// An auditor of topic "t" as the shell builds one, started at `started_at`, whose
/// consumer's fetch responses are at most [`FETCH_AGE`] older than its statistics.
fn auditor(started_at: i64) -> Auditor {
    Auditor::new(
        Identity::new("tier", "dc", "instance"),
        true,
        Dating::new(started_at, FETCH_AGE),
        false,
    )
}

/// `fetch.wait.max.ms` (500, the client's default) + 1 s of slack.
const FETCH_AGE: i64 = 1500;

fn tp(p: i32) -> TopicPartition {
    TopicPartition::new("t", p)
}

fn snapshot(at: i64, ends: &[(i32, i64)]) -> EndsSnapshot {
    EndsSnapshot {
        at: Some(at),
        ends: ends
            .iter()
            .map(|&(p, end)| (tp(p), LogEnds { low: 0, end }))
            .collect(),
    }
}

fn read(p: i32, next: i64) -> Position {
    Position {
        topic: "t".into(),
        partition: p,
        next,
        watermark: None,
        latest: None,
        log_append_time: false,
    }
}

/// Assigns `partitions` of "t" (each with its committed offset) at `now`.
fn assign(a: &mut Auditor, partitions: &[(i32, i64)], now: i64) {
    let tps: Vec<TopicPartition> = partitions.iter().map(|&(p, _)| tp(p)).collect();
    a.assign(&tps);
    let committed = partitions
        .iter()
        .map(|&(p, o)| (tp(p), Committed::At(o)))
        .collect();
    a.start_reading(&tps, &committed, now);
}

/// An interval report at `now` of what was read (`positions`), as written: its
/// progress message (one topic).
fn report(a: &mut Auditor, positions: Positions, now: i64) -> AuditMessage {
    let draft = a.draft(Vec::new(), positions, now, Reason::Interval, false);
    assert!(draft.write, "an interval report with progress is written");
    a.written(&draft);
    draft
        .messages
        .into_iter()
        .find(|m| m.as_progress().is_some())
        .expect("a progress message")
}

/// One event of a table row, at a time in ms after the auditor started.
#[derive(Clone, Copy)]
enum Step {
    /// Partitions of "t" assigned, with their committed offsets.
    Assign(&'static [(i32, i64)]),
    /// Statistics emitted at `emitted_s` (the client's whole seconds since the
    /// start) seen by the callback at the step's time, taken at the next report.
    Stats {
        emitted_s: i64,
        ends: &'static [(i32, i64)],
    },
    /// The consumer read partition `.0` up to offset `.1` (exclusive).
    Read(i32, i64),
    Pause,
    Resume,
    Revoke {
        lost: bool,
    },
    /// The consumer failed fatally and was recreated.
    NewConsumer,
}

/// A row: what happens, then an interval report at `report_at`, and the date and
/// lags (partition, lag) of its progress.
struct Row {
    rule: &'static str,
    steps: &'static [(i64, Step)],
    report_at: i64,
    dated: i64,
    lags: &'static [(i32, Option<i64>)],
}

/// Epoch ms at which every row's auditor starts (a whole second, as the client's
/// statistics time is).
const T0: i64 = 1_700_000_000_000;

fn run(row: &Row) -> (i64, Vec<(i32, Option<i64>)>) {
    let mut a = auditor(T0);
    let mut positions = Vec::new();
    for &(at, step) in row.steps {
        let now = T0 + at;
        match step {
            Step::Assign(parts) => assign(&mut a, parts, now),
            Step::Stats { emitted_s, ends } => {
                let at = measured_at(now, T0 / 1000 + emitted_s, FETCH_AGE);
                a.take_ends(&snapshot(at, ends));
            }
            Step::Read(p, next) => positions.push(read(p, next)),
            Step::Pause => a.set_paused(true, now),
            Step::Resume => a.set_paused(false, now),
            Step::Revoke { lost } => {
                a.revoke(lost);
            }
            Step::NewConsumer => {
                a.consumer_lost(false);
            }
        }
    }
    let m = report(&mut a, positions, T0 + row.report_at);
    let lags = m
        .as_progress()
        .unwrap()
        .iter()
        .map(|p| (p.partition, p.lag))
        .collect();
    (m.emitted_at - T0, lags)
}

use Step::*;

/// The rules that date progress (commits 7347d2c, aaa97e1, ec5913a, 12650b3,
/// cb64470, d7f31e6): each row says which piece it needs; with that piece reverted
/// the row fails (checked by hand, see the `reverted:` notes).
#[test]
fn progress_is_dated_by_when_the_log_ends_were_measured() {
    let table = [
        Row {
            // 7347d2c. reverted (dated by the report): dated 60 000
            rule: "lag 0 is dated by the statistics' measurement, not by the report",
            steps: &[
                (0, Assign(&[(0, 0)])),
                (
                    10_000,
                    Stats {
                        emitted_s: 10,
                        ends: &[(0, 20)],
                    },
                ),
                (10_000, Read(0, 20)),
            ],
            report_at: 60_000,
            dated: 10_000 - FETCH_AGE,
            lags: &[(0, Some(0))],
        },
        Row {
            // aaa97e1. reverted (no fetch age): dated 10 000
            rule: "the high watermark is the last fetch response's: fetch.wait.max.ms + 1 s older",
            steps: &[
                (0, Assign(&[(0, 0)])),
                (
                    10_400,
                    Stats {
                        emitted_s: 10,
                        ends: &[(0, 20)],
                    },
                ),
            ],
            report_at: 60_000,
            dated: 10_000 - FETCH_AGE,
            lags: &[(0, Some(20))],
        },
        Row {
            // ec5913a. reverted (the callback's clock alone): dated 48 500
            rule: "statistics seen late by a busy loop are dated by their own emission time",
            steps: &[
                (0, Assign(&[(0, 0)])),
                (
                    50_000,
                    Stats {
                        emitted_s: 10,
                        ends: &[(0, 20)],
                    },
                ),
                (50_000, Read(0, 20)),
            ],
            report_at: 60_000,
            dated: 10_000 - FETCH_AGE,
            lags: &[(0, Some(0))],
        },
        Row {
            // 7347d2c. reverted (snapshots merged): partition 1 keeps lag Some(0)
            rule: "a snapshot replaces the ends wholesale: a partition it lacks has no end",
            steps: &[
                (0, Assign(&[(0, 0), (1, 0)])),
                (
                    10_000,
                    Stats {
                        emitted_s: 10,
                        ends: &[(0, 20), (1, 5)],
                    },
                ),
                (
                    20_000,
                    Stats {
                        emitted_s: 20,
                        ends: &[(0, 30)],
                    },
                ),
                (20_000, Read(0, 30)),
                (20_000, Read(1, 5)),
            ],
            report_at: 60_000,
            dated: 20_000 - FETCH_AGE,
            lags: &[(0, Some(0)), (1, None)],
        },
        Row {
            // 7347d2c. reverted (taken while paused): dated 28 500
            rule: "statistics taken while paused carry the ends of before the pause: not used",
            steps: &[
                (0, Assign(&[(0, 0)])),
                (
                    10_000,
                    Stats {
                        emitted_s: 10,
                        ends: &[(0, 20)],
                    },
                ),
                (15_000, Pause),
                (
                    30_000,
                    Stats {
                        emitted_s: 30,
                        ends: &[(0, 20)],
                    },
                ),
                (30_000, Read(0, 20)),
            ],
            report_at: 60_000,
            dated: 10_000 - FETCH_AGE,
            lags: &[(0, Some(0))],
        },
        Row {
            // 7347d2c. reverted (a resume does not move ends_from): dated 39 500
            rule: "after a resume only statistics measured after it",
            steps: &[
                (0, Assign(&[(0, 0)])),
                (
                    10_000,
                    Stats {
                        emitted_s: 10,
                        ends: &[(0, 20)],
                    },
                ),
                (15_000, Pause),
                (40_000, Resume),
                (
                    41_000,
                    Stats {
                        emitted_s: 41,
                        ends: &[(0, 20)],
                    },
                ),
                (41_000, Read(0, 20)),
            ],
            report_at: 60_000,
            dated: 10_000 - FETCH_AGE,
            lags: &[(0, Some(0))],
        },
        Row {
            // 7347d2c. reverted (an assignment does not move ends_from): dated 29 500, lag Some(0)
            rule: "after a consumer's second assignment only statistics measured after it",
            steps: &[
                (0, Assign(&[(0, 0)])),
                (
                    10_000,
                    Stats {
                        emitted_s: 10,
                        ends: &[(0, 20)],
                    },
                ),
                (20_000, Revoke { lost: true }),
                (30_000, Assign(&[(0, 0)])),
                (
                    31_000,
                    Stats {
                        emitted_s: 31,
                        ends: &[(0, 20)],
                    },
                ),
                (31_000, Read(0, 20)),
            ],
            report_at: 60_000,
            dated: 10_000 - FETCH_AGE,
            lags: &[(0, None)],
        },
        Row {
            // cb64470. reverted (every assignment moves ends_from): dated -2 500, lag None
            rule: "a consumer's first assignment takes statistics from before it",
            steps: &[
                (30_000, Assign(&[(0, 0)])),
                (
                    31_000,
                    Stats {
                        emitted_s: 31,
                        ends: &[(0, 20)],
                    },
                ),
                (31_000, Read(0, 20)),
            ],
            report_at: 60_000,
            dated: 31_000 - FETCH_AGE,
            lags: &[(0, Some(0))],
        },
        Row {
            // cb64470. reverted (a lost consumer keeps assigned_before): dated 8 500, lag None
            rule: "a recreated consumer's first assignment too",
            steps: &[
                (0, Assign(&[(0, 0)])),
                (
                    10_000,
                    Stats {
                        emitted_s: 10,
                        ends: &[(0, 20)],
                    },
                ),
                (20_000, NewConsumer),
                (30_000, Assign(&[(0, 0)])),
                (
                    31_000,
                    Stats {
                        emitted_s: 31,
                        ends: &[(0, 20)],
                    },
                ),
                (31_000, Read(0, 20)),
            ],
            report_at: 60_000,
            dated: 31_000 - FETCH_AGE,
            lags: &[(0, Some(0))],
        },
        Row {
            // 12650b3. reverted (no ends given back): dated 23 500, lag None
            rule: "a partition assigned again after a revoke keeps its ends, dated as then",
            steps: &[
                (0, Assign(&[(0, 0), (1, 0)])),
                (
                    10_000,
                    Stats {
                        emitted_s: 10,
                        ends: &[(0, 20), (1, 5)],
                    },
                ),
                (20_000, Revoke { lost: false }),
                // Taken by a report between the revoke and the assignment.
                (
                    25_000,
                    Stats {
                        emitted_s: 25,
                        ends: &[(0, 20), (1, 5)],
                    },
                ),
                (30_000, Assign(&[(0, 20)])),
            ],
            report_at: 60_000,
            dated: 10_000 - FETCH_AGE,
            lags: &[(0, Some(0))],
        },
        Row {
            // 12650b3. reverted (a lost assignment keeps its ends): lag Some(0), dated 8 500
            rule: "a lost assignment gives no ends back",
            steps: &[
                (0, Assign(&[(0, 0)])),
                (
                    10_000,
                    Stats {
                        emitted_s: 10,
                        ends: &[(0, 20)],
                    },
                ),
                (20_000, Revoke { lost: true }),
                (
                    25_000,
                    Stats {
                        emitted_s: 25,
                        ends: &[(0, 20)],
                    },
                ),
                (30_000, Assign(&[(0, 20)])),
            ],
            report_at: 60_000,
            dated: 25_000 - FETCH_AGE,
            lags: &[(0, None)],
        },
        Row {
            // d7f31e6. reverted (dated when made): dated 1 000
            rule: "before any statistics: dated no later than the first statistics can be",
            steps: &[(0, Assign(&[(0, 0)])), (500, Read(0, 5))],
            report_at: 1_000,
            dated: -FETCH_AGE - 1000,
            lags: &[(0, None)],
        },
        Row {
            // 7347d2c. reverted (no .min(now)): dated 68 500
            rule: "never dated after the report (a wall clock stepped back)",
            steps: &[
                (0, Assign(&[(0, 0)])),
                (
                    70_000,
                    Stats {
                        emitted_s: 70,
                        ends: &[(0, 20)],
                    },
                ),
                (70_000, Read(0, 20)),
            ],
            report_at: 60_000,
            dated: 60_000,
            lags: &[(0, Some(0))],
        },
    ];
    let failures: Vec<String> = table
        .iter()
        .filter_map(|row| {
            let got = run(row);
            let want = (row.dated, row.lags.to_vec());
            (got != want).then(|| format!("{}: expected {want:?}, got {got:?}", row.rule))
        })
        .collect();
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// Lag 0 holds as of when the consumer's statistics measured the high watermark,
/// not as of the report: a burst written after the statistics, of which the
/// consumer has read part (position past the stale end, lag clamped to 0) or
/// nothing (position at the stale end), is unread at the report. Progress is
/// dated by the measurement, so the engine's "read past emitted_at" never covers
/// the burst. Before, the report was dated when it was made (a false "final").
#[test]
fn lag_zero_is_dated_by_when_the_log_ends_were_measured() {
    let now = T0 + 120_000;
    let mut core = auditor(T0);
    assign(&mut core, &[(0, 0), (1, 0)], T0);
    let measured = now - 60_000;
    core.take_ends(&snapshot(measured, &[(0, 20), (1, 5)]));
    // Since then: partition 0 got a burst, the consumer read 5 of its records
    // (position 25 past the stale end 20); partition 1 got records not read yet
    // (position 5 = the stale end).
    let mut written = vec![report(&mut core, vec![read(0, 25), read(1, 5)], now)];
    let reports = written.clone();
    assert_eq!(reports.len(), 1);
    let lags: Vec<_> = reports[0]
        .as_progress()
        .unwrap()
        .iter()
        .map(|p| (p.partition, p.next_offset, p.lag))
        .collect();
    assert_eq!(lags, vec![(0, 25, Some(0)), (1, 5, Some(0))]);
    // reverted (dated when the report was made): emitted_at = now > measured
    assert!(
        reports[0].emitted_at <= measured,
        "lag 0 dated {} ms after the ends were measured",
        reports[0].emitted_at - measured
    );

    // While paused, fetching stops: a newer snapshot still carries the ends of
    // before the pause, with a new time. It is not taken.
    core.set_paused(true, now);
    core.take_ends(&snapshot(now, &[(0, 25), (1, 5)]));
    assert_eq!(core.dating().ends_at(), Some(measured));
    // After the resume (or an assignment), only statistics measured after it.
    let ends_from = now + 1;
    core.set_paused(false, ends_from);
    core.take_ends(&snapshot(ends_from - 1, &[(0, 25), (1, 5)]));
    assert_eq!(core.dating().ends_at(), Some(measured));
    // A partition the new snapshot lacks has no known end: lag null, never the
    // old end with the new date.
    let fresh = ends_from;
    core.take_ends(&snapshot(fresh, &[(0, 30)]));
    assert_eq!(core.dating().ends_at(), Some(fresh));
    written.push(report(&mut core, vec![read(0, 30)], fresh + 10));
    let reports = written.clone();
    let last = reports.last().unwrap();
    let lags: Vec<_> = last
        .as_progress()
        .unwrap()
        .iter()
        .map(|p| (p.partition, p.lag))
        .collect();
    assert_eq!(lags, vec![(0, Some(0)), (1, None)]);
    assert_eq!(last.emitted_at, fresh);
}

/// An eager rebalance revokes every partition and assigns them again: the ends
/// measured while they were fetched before the revoke are given back (dated as
/// then), so lag stays known and 0 for a partition read to its end instead of
/// null (its windows back to pending) until statistics measured after the
/// assignment. Ends of partitions not assigned again are not handed out.
#[test]
fn a_partition_assigned_again_keeps_the_ends_measured_before_the_revoke() {
    let now = T0 + 120_000;
    let mut core = auditor(T0);
    assign(&mut core, &[(0, 0), (1, 0)], T0);
    let measured = now - 60_000;
    core.take_ends(&snapshot(measured, &[(0, 20), (1, 5)]));
    core.revoke(false);
    // Statistics between the revoke and the assignment (no parts to apply to).
    core.take_ends(&snapshot(now, &[(0, 20), (1, 5)]));
    assign(&mut core, &[(0, 20)], now);
    let reports = [report(&mut core, Vec::new(), now + 10)];
    let last = reports.last().unwrap();
    let lags: Vec<_> = last
        .as_progress()
        .unwrap()
        .iter()
        .map(|p| (p.partition, p.next_offset, p.lag))
        .collect();
    // without the restored ends: [(0, 20, None)]
    assert_eq!(lags, vec![(0, 20, Some(0))]);
    assert_eq!(last.emitted_at, measured);
}

/// Before its first statistics an auditor reports lag null; those reports must
/// not be dated later than the first one with statistics, or the store (which
/// keeps the progress of the latest `emitted_at`) drops the known lags as older
/// and keeps the nulls: windows pending until the dating catches up (seen in the
/// e2e region_only test).
#[test]
fn reports_before_the_statistics_are_not_dated_after_the_first_statistics() {
    // Started at some millisecond within a second, as a real auditor is.
    let started = T0 + 999;
    let mut core = auditor(started);
    assign(&mut core, &[(0, 0)], started);
    let mut reports = vec![report(&mut core, vec![read(0, 5)], started + 1)];
    // The first statistics, emitted and seen right after that report.
    let now = started + 2;
    let at = measured_at(now, now / 1000, FETCH_AGE);
    core.take_ends(&snapshot(at, &[(0, 6)]));
    reports.push(report(&mut core, vec![read(0, 6)], now));
    let dates: Vec<_> = reports
        .iter()
        .map(|m| (m.emitted_at, m.as_progress().unwrap()[0].lag))
        .collect();
    assert_eq!(dates[1].1, Some(0));
    // reverted (dated when made before the statistics): the first is the later
    assert!(dates[0].0 <= dates[1].0, "{dates:?}");
}

/// The report rules of the shell's `write_report`: which drafts are worth a WAL
/// entry, and that only a written one advances the ranges.
#[test]
fn drafts_worth_writing_and_ranges_advanced_only_when_written() {
    let mut a = auditor(T0);
    assign(&mut a, &[(0, 10)], T0);
    // Progress only: written at an interval, not at a revoke or shutdown, nor while
    // entries are stuck.
    assert!(
        a.draft(Vec::new(), Vec::new(), T0, Reason::Interval, false)
            .write
    );
    assert!(
        !a.draft(Vec::new(), Vec::new(), T0, Reason::Revoke, false)
            .write
    );
    assert!(
        !a.draft(Vec::new(), Vec::new(), T0, Reason::Shutdown, false)
            .write
    );
    assert!(
        !a.draft(Vec::new(), Vec::new(), T0, Reason::Interval, true)
            .write
    );
    // A range is always written; not written, it is covered again by the next draft.
    let d = a.draft(Vec::new(), vec![read(0, 20)], T0, Reason::Revoke, true);
    assert!(d.write);
    assert_eq!(d.ranges[0].start, Some(10));
    assert_eq!(
        a.rewind(),
        Some(vec![Rewind {
            topic: "t".into(),
            partition: 0,
            to: Some(10)
        }])
    );
    let d = a.draft(Vec::new(), vec![read(0, 25)], T0, Reason::Interval, false);
    assert_eq!((d.ranges[0].start, d.ranges[0].end), (Some(10), 25));
    a.written(&d);
    let d = a.draft(Vec::new(), vec![read(0, 30)], T0, Reason::Interval, false);
    assert_eq!((d.ranges[0].start, d.ranges[0].end), (Some(25), 30));
}

/// Rule 0's input (docs/design.md §6): the replication evidence of the partitions this instance owns, with by
/// when it had read the replicator's position (its lag in time) and its lag in
/// offsets; partitions it does not own are left out.
#[test]
fn replication_evidence_says_by_when_the_first_record_not_copied_was_read() {
    let mut a = auditor(0);
    assign(&mut a, &[(0, 0), (1, 0)], 0);
    a.take_ends(&snapshot(500, &[(0, 100), (1, 100)]));
    report(&mut a, vec![read(0, 10), read(1, 10)], 1_000);
    report(&mut a, vec![read(0, 50), read(1, 20)], 2_000);
    report(&mut a, vec![read(0, 100), read(1, 30)], 3_000);
    let msgs = a.evidence(
        "replicator:group/mirror",
        vec![
            (tp(0), 10, 3_500),
            (tp(1), 30, 3_400),
            (TopicPartition::new("other", 0), 5, 3_600),
        ],
    );
    assert_eq!(msgs.len(), 1, "one message for topic t");
    let m = &msgs[0];
    assert_eq!(m.tier, "replicator:group/mirror");
    assert_eq!(m.datacenter, "dc");
    assert_eq!(m.emitted_at, 3_500, "dated by the latest reading");
    let parts: Vec<(i32, i64, Option<i64>, Option<i64>)> = m
        .as_progress()
        .unwrap()
        .iter()
        .map(|p| (p.partition, p.next_offset, p.record_time, p.lag))
        .collect();
    assert_eq!(
        parts,
        [
            // Offset 10 was read by the report at 2 000 (the first past it).
            (0, 10, Some(2_000), Some(90)),
            // Offset 30 not read yet: nothing held back that this auditor has read.
            (1, 30, None, Some(70)),
        ]
    );
}
