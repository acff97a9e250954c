//! Table tests of the detection engine: every rule of `mod.rs` on hand-made rows.

use super::*;

const MIN: i64 = 60_000;
const W: i64 = 1_764_410_400_000; // a window start, multiple of 10 min
const END: i64 = W + 10 * MIN;
const SETTLED: i64 = END + 20 * MIN; // default grace 20 min
const CAUGHT_UP: i64 = SETTLED + MIN; // record time past end + grace

fn topology(toml_src: &str) -> Topology {
    let cfg: TopologyConfig = toml::from_str(toml_src).expect("topology parses");
    Topology::new(cfg).expect("topology is valid")
}

/// producer → regional one-to-one; regional dc1+dc2 → aggregate "agg".
fn pipeline() -> Topology {
    topology(
        r#"
        tiers = [
          { name = "producer", progress = false },
          { name = "regional" },
          { name = "aggregate", latency_p99_objective = "1m" },
        ]
        [[edges]]
        upstream = "producer"
        downstream = "regional"
        [[edges]]
        upstream = "regional"
        downstream = "aggregate"
        datacenters = { dc1 = "agg", dc2 = "agg" }
        [[overrides]]
        topics = "noisy.*"
        absolute = 10
        ratio = 0.05
        "#,
    )
}

fn row(tier: &str, dc: &str, count: u64, checksum: u64) -> WindowRow {
    WindowRow {
        topic: "orders".into(),
        tier: tier.into(),
        datacenter: dc.into(),
        window_start: W,
        count,
        checksum,
        latency: Histogram::from_values(&[100, 200, 300]),
    }
}

fn progress(tier: &str, dc: &str, record_time: i64, reported_at: i64) -> PartitionProgress {
    PartitionProgress {
        tier: tier.into(),
        datacenter: dc.into(),
        partition: 0,
        record_time: Some(record_time),
        lag: Some(5),
        reported_at,
        emitted_at: reported_at,
        host: format!("{tier}-{dc}-0"),
    }
}

/// Every auditor of the pipeline has read past the window's settle time.
fn all_caught_up(now: i64) -> Vec<PartitionProgress> {
    ["dc1", "dc2"]
        .iter()
        .map(|dc| progress("regional", dc, CAUGHT_UP, now))
        .chain([progress("aggregate", "agg", CAUGHT_UP, now)])
        .collect()
}

fn find<'a>(out: &'a [EdgeWindow], up: &str, dc: &str) -> &'a EdgeWindow {
    out.iter()
        .find(|e| e.upstream == up && e.datacenter == dc)
        .unwrap_or_else(|| panic!("no verdict for edge from {up} at {dc} in {out:#?}"))
}

struct Case {
    name: &'static str,
    topic: &'static str,
    rows: Vec<WindowRow>,
    progress: Vec<PartitionProgress>,
    now: i64,
    edge_upstream: &'static str,
    datacenter: &'static str,
    expect: (Verdict, Lifecycle, u64, u64),
}

#[test]
fn verdicts_table() {
    let now = SETTLED + 5 * MIN;
    let cases = vec![
        Case {
            name: "complete one-to-one edge is ok",
            topic: "orders",
            rows: vec![
                row("producer", "dc1", 100, 7),
                row("regional", "dc1", 100, 7),
            ],
            progress: all_caught_up(now),
            now,
            edge_upstream: "producer",
            datacenter: "dc1",
            expect: (Verdict::Ok, Lifecycle::Final, 100, 100),
        },
        Case {
            name: "loss: fewer downstream after settling",
            topic: "orders",
            rows: vec![
                row("producer", "dc1", 100, 7),
                row("regional", "dc1", 90, 6),
            ],
            progress: all_caught_up(now),
            now,
            edge_upstream: "producer",
            datacenter: "dc1",
            expect: (Verdict::Loss, Lifecycle::Final, 100, 90),
        },
        Case {
            name: "loss: traffic upstream and no row downstream",
            topic: "orders",
            rows: vec![row("producer", "dc1", 100, 7)],
            progress: all_caught_up(now),
            now,
            edge_upstream: "producer",
            datacenter: "dc1",
            expect: (Verdict::Loss, Lifecycle::Final, 100, 0),
        },
        Case {
            name: "duplication: more downstream",
            topic: "orders",
            rows: vec![
                row("producer", "dc1", 100, 7),
                row("regional", "dc1", 130, 9),
            ],
            progress: all_caught_up(now),
            now,
            edge_upstream: "producer",
            datacenter: "dc1",
            expect: (Verdict::Duplication, Lifecycle::Final, 100, 130),
        },
        Case {
            name: "loss masked by equal duplication: equal counts, different checksums",
            topic: "orders",
            rows: vec![
                row("producer", "dc1", 100, 0xdead),
                row("regional", "dc1", 100, 0xbeef),
            ],
            progress: all_caught_up(now),
            now,
            edge_upstream: "producer",
            datacenter: "dc1",
            expect: (Verdict::Mismatch, Lifecycle::Final, 100, 100),
        },
        Case {
            name: "lagging auditor: pending, not loss",
            topic: "orders",
            rows: vec![
                row("producer", "dc1", 100, 7),
                row("regional", "dc1", 40, 3),
            ],
            // regional/dc1 reports recently but has only read up to the window end.
            progress: vec![progress("regional", "dc1", END, now - MIN)],
            now,
            edge_upstream: "producer",
            datacenter: "dc1",
            expect: (Verdict::Pending, Lifecycle::Settling, 100, 40),
        },
        Case {
            name: "stalled auditor: last report older than stall_after",
            topic: "orders",
            rows: vec![
                row("producer", "dc1", 100, 7),
                row("regional", "dc1", 40, 3),
            ],
            progress: vec![progress("regional", "dc1", END, now - 31 * MIN)],
            now,
            edge_upstream: "producer",
            datacenter: "dc1",
            expect: (Verdict::Stalled, Lifecycle::Settling, 100, 40),
        },
        Case {
            name: "stalled after catching up: the window can still be judged",
            topic: "orders",
            rows: vec![
                row("producer", "dc1", 100, 7),
                row("regional", "dc1", 100, 7),
            ],
            progress: vec![progress("regional", "dc1", CAUGHT_UP, now - 300 * MIN)],
            now: now + 300 * MIN,
            edge_upstream: "producer",
            datacenter: "dc1",
            expect: (Verdict::Ok, Lifecycle::Final, 100, 100),
        },
        Case {
            name: "lag 0 reported after settle time counts as caught up",
            topic: "orders",
            rows: vec![
                row("producer", "dc1", 100, 7),
                row("regional", "dc1", 100, 7),
            ],
            progress: vec![PartitionProgress {
                lag: Some(0),
                record_time: Some(W),
                ..progress("regional", "dc1", W, SETTLED + MIN)
            }],
            now,
            edge_upstream: "producer",
            datacenter: "dc1",
            expect: (Verdict::Ok, Lifecycle::Final, 100, 100),
        },
        Case {
            // A lagging auditor's first report comes before librdkafka knows the high
            // watermark (lag null): its partition is mid-backlog, and the CreateTime
            // of the last record read says nothing about records not read yet.
            name: "record time past settle with an unknown lag does not count",
            topic: "orders",
            rows: vec![
                row("producer", "dc1", 100, 7),
                row("regional", "dc1", 60, 4),
            ],
            progress: vec![PartitionProgress {
                lag: None,
                ..progress("regional", "dc1", CAUGHT_UP, now)
            }],
            now,
            edge_upstream: "producer",
            datacenter: "dc1",
            expect: (Verdict::Pending, Lifecycle::Settling, 100, 60),
        },
        Case {
            // B4: measured before the settle time, delivered after it (an audit-topic
            // or database backlog): says nothing about data written in between.
            name: "lag 0 emitted before settle time but received after does not count",
            topic: "orders",
            rows: vec![
                row("producer", "dc1", 100, 7),
                row("regional", "dc1", 90, 7),
            ],
            progress: vec![PartitionProgress {
                lag: Some(0),
                record_time: Some(W),
                emitted_at: END,
                ..progress("regional", "dc1", W, SETTLED + MIN)
            }],
            now,
            edge_upstream: "producer",
            datacenter: "dc1",
            expect: (Verdict::Pending, Lifecycle::Settling, 100, 90),
        },
        Case {
            // B4: an auditor clock running ahead cannot date its lag 0 past the time
            // the collector received it.
            name: "lag 0 emitted in the future does not count before it is received",
            topic: "orders",
            rows: vec![
                row("producer", "dc1", 100, 7),
                row("regional", "dc1", 90, 7),
            ],
            progress: vec![PartitionProgress {
                lag: Some(0),
                record_time: Some(W),
                emitted_at: SETTLED + 60 * MIN,
                ..progress("regional", "dc1", W, END)
            }],
            now,
            edge_upstream: "producer",
            datacenter: "dc1",
            expect: (Verdict::Pending, Lifecycle::Settling, 100, 90),
        },
        Case {
            // B2: a region-specific topic, produced in dc1 only. dc2 has neither rows
            // nor progress for it: it contributes 0 and does not hold the verdict.
            name: "many-to-one: topic in one upstream datacenter only, loss reported",
            topic: "orders",
            rows: vec![
                row("regional", "dc1", 100, 7),
                row("aggregate", "agg", 95, 6),
            ],
            progress: vec![
                progress("regional", "dc1", CAUGHT_UP, now),
                progress("aggregate", "agg", CAUGHT_UP, now),
            ],
            now: SETTLED + 31 * MIN,
            edge_upstream: "regional",
            datacenter: "agg",
            expect: (Verdict::Loss, Lifecycle::Final, 100, 95),
        },
        Case {
            name: "many-to-one: topic in both upstream datacenters, complete is ok",
            topic: "orders",
            rows: vec![
                row("regional", "dc1", 100, 7),
                row("regional", "dc2", 50, 3),
                row("aggregate", "agg", 150, 10),
            ],
            progress: all_caught_up(now),
            now,
            edge_upstream: "regional",
            datacenter: "agg",
            expect: (Verdict::Ok, Lifecycle::Final, 150, 150),
        },
        Case {
            // Rows but no progress: dc2 does carry the topic, and its auditor has not
            // said how far it read: wait.
            name: "many-to-one: upstream datacenter with rows but no progress blocks",
            topic: "orders",
            rows: vec![
                row("regional", "dc1", 100, 7),
                row("regional", "dc2", 50, 3),
                row("aggregate", "agg", 150, 10),
            ],
            progress: vec![
                progress("regional", "dc1", CAUGHT_UP, now),
                progress("aggregate", "agg", CAUGHT_UP, now),
            ],
            now,
            edge_upstream: "regional",
            datacenter: "agg",
            expect: (Verdict::Pending, Lifecycle::Settling, 150, 150),
        },
        Case {
            // Progress but no rows in this window: dc2 carries the topic (idle in
            // this window) and must still be read past it.
            name: "many-to-one: upstream datacenter with lagging progress blocks",
            topic: "orders",
            rows: vec![
                row("regional", "dc1", 100, 7),
                row("aggregate", "agg", 100, 7),
            ],
            progress: vec![
                progress("regional", "dc1", CAUGHT_UP, now),
                progress("regional", "dc2", END, now),
                progress("aggregate", "agg", CAUGHT_UP, now),
            ],
            now,
            edge_upstream: "regional",
            datacenter: "agg",
            expect: (Verdict::Pending, Lifecycle::Settling, 100, 100),
        },
        Case {
            // B7: partition 1 is stuck (its instance stopped publishing while still in
            // the group); partition 0 of the other instance reports fresh progress.
            name: "one stuck partition of one instance: stalled despite fresh others",
            topic: "orders",
            rows: vec![
                row("producer", "dc1", 100, 7),
                row("regional", "dc1", 90, 7),
            ],
            progress: vec![
                PartitionProgress {
                    record_time: Some(CAUGHT_UP),
                    host: "regional-a".into(),
                    ..progress("regional", "dc1", CAUGHT_UP, now)
                },
                PartitionProgress {
                    partition: 1,
                    host: "regional-b".into(),
                    ..progress("regional", "dc1", END, now - 120 * MIN)
                },
            ],
            now,
            edge_upstream: "producer",
            datacenter: "dc1",
            expect: (Verdict::Stalled, Lifecycle::Settling, 100, 90),
        },
        Case {
            // B7: a partition that is read past the window does not hold it, however
            // old its report (an idle partition reported lag 0 after the window).
            name: "an old report of a partition read past the window does not stall",
            topic: "orders",
            rows: vec![
                row("producer", "dc1", 100, 7),
                row("regional", "dc1", 100, 7),
            ],
            progress: vec![
                progress("regional", "dc1", CAUGHT_UP, now),
                PartitionProgress {
                    partition: 1,
                    ..progress("regional", "dc1", CAUGHT_UP, now - 120 * MIN)
                },
            ],
            now,
            edge_upstream: "producer",
            datacenter: "dc1",
            expect: (Verdict::Ok, Lifecycle::Final, 100, 100),
        },
        Case {
            name: "lag 0 reported before settle time does not count",
            topic: "orders",
            rows: vec![
                row("producer", "dc1", 100, 7),
                row("regional", "dc1", 100, 7),
            ],
            progress: vec![PartitionProgress {
                lag: Some(0),
                ..progress("regional", "dc1", W, END)
            }],
            now: END + 25 * MIN,
            edge_upstream: "producer",
            datacenter: "dc1",
            expect: (Verdict::Pending, Lifecycle::Settling, 100, 100),
        },
        Case {
            name: "never reported progress, long after settling: stalled",
            topic: "orders",
            rows: vec![
                row("producer", "dc1", 100, 7),
                row("regional", "dc1", 100, 7),
            ],
            progress: vec![],
            now: SETTLED + 31 * MIN,
            edge_upstream: "producer",
            datacenter: "dc1",
            expect: (Verdict::Stalled, Lifecycle::Settling, 100, 100),
        },
        Case {
            name: "open window is pending",
            topic: "orders",
            rows: vec![row("producer", "dc1", 100, 7)],
            progress: all_caught_up(now),
            now: END - 1,
            edge_upstream: "producer",
            datacenter: "dc1",
            expect: (Verdict::Pending, Lifecycle::Open, 100, 0),
        },
        Case {
            name: "window within its grace period is settling and pending",
            topic: "orders",
            rows: vec![row("producer", "dc1", 100, 7)],
            progress: all_caught_up(now),
            now: SETTLED - 1,
            edge_upstream: "producer",
            datacenter: "dc1",
            expect: (Verdict::Pending, Lifecycle::Settling, 100, 0),
        },
        Case {
            name: "many-to-one: two regions summed into the aggregate, checksums add",
            topic: "orders",
            rows: vec![
                row("regional", "dc1", 60, u64::MAX),
                row("regional", "dc2", 40, 5),
                // u64::MAX + 5 wraps to 4
                row("aggregate", "agg", 100, 4),
            ],
            progress: all_caught_up(now),
            now,
            edge_upstream: "regional",
            datacenter: "agg",
            expect: (Verdict::Ok, Lifecycle::Final, 100, 100),
        },
        Case {
            name: "many-to-one: loss in the aggregate is judged against the sum",
            topic: "orders",
            rows: vec![
                row("regional", "dc1", 60, 1),
                row("regional", "dc2", 40, 5),
                row("aggregate", "agg", 95, 4),
            ],
            progress: all_caught_up(now),
            now,
            edge_upstream: "regional",
            datacenter: "agg",
            expect: (Verdict::Loss, Lifecycle::Final, 100, 95),
        },
        Case {
            name: "many-to-one: a lagging region keeps the aggregate pending",
            topic: "orders",
            rows: vec![
                row("regional", "dc1", 60, 1),
                row("aggregate", "agg", 60, 1),
            ],
            progress: vec![
                progress("regional", "dc1", CAUGHT_UP, now),
                progress("regional", "dc2", END, now),
                progress("aggregate", "agg", CAUGHT_UP, now),
            ],
            now,
            edge_upstream: "regional",
            datacenter: "agg",
            expect: (Verdict::Pending, Lifecycle::Settling, 60, 60),
        },
        Case {
            name: "empty window on both ends is ok",
            topic: "orders",
            rows: vec![],
            progress: all_caught_up(now),
            now,
            edge_upstream: "regional",
            datacenter: "agg",
            expect: (Verdict::Ok, Lifecycle::Final, 0, 0),
        },
        Case {
            name: "empty one-to-one window with caught-up auditor is ok",
            topic: "orders",
            rows: vec![],
            progress: all_caught_up(now),
            now,
            edge_upstream: "producer",
            datacenter: "dc2",
            expect: (Verdict::Ok, Lifecycle::Final, 0, 0),
        },
        Case {
            name: "override thresholds tolerate a small difference on noisy.* topics",
            topic: "noisy.clicks",
            rows: vec![
                WindowRow {
                    topic: "noisy.clicks".into(),
                    ..row("producer", "dc1", 1000, 7)
                },
                WindowRow {
                    topic: "noisy.clicks".into(),
                    ..row("regional", "dc1", 960, 6)
                },
            ],
            progress: all_caught_up(now),
            now,
            edge_upstream: "producer",
            datacenter: "dc1",
            expect: (Verdict::Ok, Lifecycle::Final, 1000, 960),
        },
        Case {
            name: "override thresholds still flag a difference beyond both",
            topic: "noisy.clicks",
            rows: vec![
                WindowRow {
                    topic: "noisy.clicks".into(),
                    ..row("producer", "dc1", 1000, 7)
                },
                WindowRow {
                    topic: "noisy.clicks".into(),
                    ..row("regional", "dc1", 900, 6)
                },
            ],
            progress: all_caught_up(now),
            now,
            edge_upstream: "producer",
            datacenter: "dc1",
            expect: (Verdict::Loss, Lifecycle::Final, 1000, 900),
        },
        Case {
            name: "delayed: complete but aggregate p99 above its 1 min objective",
            topic: "orders",
            rows: vec![
                row("regional", "dc1", 3, 1),
                WindowRow {
                    latency: Histogram::from_values(&[1_000, 90_000, 120_000]),
                    ..row("aggregate", "agg", 3, 1)
                },
            ],
            progress: all_caught_up(now),
            now,
            edge_upstream: "regional",
            datacenter: "agg",
            expect: (Verdict::Delayed, Lifecycle::Final, 3, 3),
        },
    ];
    let topo = pipeline();
    let mut failures = Vec::new();
    for c in &cases {
        let out = topo.evaluate_topic(c.topic, &[W], &c.rows, &c.progress, c.now);
        let Some(e) = out
            .iter()
            .find(|e| e.upstream == c.edge_upstream && e.datacenter == c.datacenter)
        else {
            failures.push(format!("{}: no verdict in {out:#?}", c.name));
            continue;
        };
        let got = (e.verdict, e.lifecycle, e.expected, e.observed);
        if got != c.expect {
            failures.push(format!(
                "{}: expected {:?}, got {:?} ({})",
                c.name, c.expect, got, e.reason
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn late_data_resolves_a_loss() {
    let topo = pipeline();
    let now = SETTLED + 5 * MIN;
    let mut rows = vec![
        row("producer", "dc1", 100, 10),
        row("regional", "dc1", 70, 7),
    ];
    let out = topo.evaluate_topic("orders", &[W], &rows, &all_caught_up(now), now);
    let e = find(&out, "producer", "dc1");
    assert_eq!(e.verdict, Verdict::Loss);
    assert_eq!(e.completeness, Some(0.7));
    assert_eq!(e.difference, -30);

    // The missing 30 messages arrive an hour later as a further increment of the
    // same window (the collector stores increments; the engine sums them).
    rows.push(row("regional", "dc1", 30, 3));
    let later = now + 60 * MIN;
    let out = topo.evaluate_topic("orders", &[W], &rows, &all_caught_up(later), later);
    let e = find(&out, "producer", "dc1");
    assert_eq!(e.verdict, Verdict::Ok, "{}", e.reason);
    assert_eq!(e.completeness, Some(1.0));
    assert!(e.checksums_match);
}

#[test]
fn completeness_is_null_when_only_downstream_saw_data() {
    let topo = pipeline();
    let now = SETTLED + 5 * MIN;
    let rows = vec![row("regional", "dc1", 5, 1)];
    let out = topo.evaluate_topic("orders", &[W], &rows, &all_caught_up(now), now);
    let e = find(&out, "producer", "dc1");
    assert_eq!(e.completeness, None);
    assert_eq!(e.verdict, Verdict::Duplication);
}

#[test]
fn many_to_one_lists_its_upstream_datacenters() {
    let topo = pipeline();
    let now = SETTLED + 5 * MIN;
    let out = topo.evaluate_topic("orders", &[W], &[], &all_caught_up(now), now);
    let e = find(&out, "regional", "agg");
    assert_eq!(e.upstream_datacenters, vec!["dc1", "dc2"]);
}

#[test]
fn rows_of_other_topics_and_windows_are_ignored() {
    let topo = pipeline();
    let now = SETTLED + 5 * MIN;
    let rows = vec![
        row("producer", "dc1", 100, 7),
        row("regional", "dc1", 100, 7),
        WindowRow {
            topic: "other".into(),
            ..row("regional", "dc1", 50, 7)
        },
        WindowRow {
            window_start: W + 10 * MIN,
            ..row("regional", "dc1", 50, 7)
        },
    ];
    let out = topo.evaluate_topic("orders", &[W], &rows, &all_caught_up(now), now);
    assert_eq!(find(&out, "producer", "dc1").verdict, Verdict::Ok);
}

#[test]
fn latency_percentiles_come_from_merged_histograms() {
    // Two datacenters with different distributions: merging histograms gives the true
    // p99 of the union, where max-of-p99s or mean-of-p99s would not.
    let a = Histogram::from_values(&(1..=990).collect::<Vec<_>>());
    let b = Histogram::from_values(&(1..=10).map(|i| 10_000 + i).collect::<Vec<_>>());
    let rows = vec![
        WindowRow {
            latency: a,
            ..row("regional", "dc1", 990, 0)
        },
        WindowRow {
            latency: b,
            ..row("regional", "dc2", 10, 0)
        },
    ];
    let p = &tier_latency(&rows)["regional"];
    assert_eq!(p.count, 1000);
    assert!((p.p50_ms - 500.0).abs() / 500.0 <= 0.01, "p50 {}", p.p50_ms);
    assert!((p.p95_ms - 950.0).abs() / 950.0 <= 0.01, "p95 {}", p.p95_ms);
    assert!((p.p99_ms - 990.0).abs() / 990.0 <= 0.01, "p99 {}", p.p99_ms);
    assert_eq!(p.max_ms, 10_010);
}

#[test]
fn auditor_status_flags_stalled_auditors() {
    let topo = pipeline();
    let now = SETTLED;
    let progress = vec![
        progress("regional", "dc1", END, now - MIN),
        progress("regional", "dc2", END, now - 31 * MIN),
    ];
    let status = auditor_status(&topo, &progress, now);
    let stalled: Vec<_> = status
        .iter()
        .map(|s| (s.datacenter.as_str(), s.stalled))
        .collect();
    assert_eq!(stalled, vec![("dc1", false), ("dc2", true)]);
}

#[test]
fn auditor_status_flags_a_stuck_instance_next_to_a_fresh_one() {
    // B7: instance b's partition 1 has not been reported for 2 h, instance a reports
    // partition 0 now: the auditor is stalled, and b is named.
    let topo = pipeline();
    let now = SETTLED;
    let progress = vec![
        PartitionProgress {
            host: "regional-a".into(),
            ..progress("regional", "dc1", END, now - MIN)
        },
        PartitionProgress {
            partition: 1,
            host: "regional-b".into(),
            ..progress("regional", "dc1", END, now - 120 * MIN)
        },
    ];
    let status = auditor_status(&topo, &progress, now);
    assert_eq!(status.len(), 1, "{status:#?}");
    assert!(status[0].stalled, "{status:#?}");
    assert_eq!(status[0].stalled_instances, vec!["regional-b"]);
    assert_eq!(status[0].stalled_partitions, vec![1]);
    assert_eq!(status[0].last_report, now - MIN);
}

#[test]
fn progress_not_reported_for_forget_after_is_forgotten() {
    // B6: a deleted topic's auditor is stalled after stall_after, then forgotten
    // after forget_after (default 24 h): no auditor status, so no stalled alert.
    let topo = pipeline();
    assert_eq!(topo.forget_after_ms, 24 * 60 * MIN);
    let last = SETTLED;
    let deleted = vec![progress("regional", "dc1", END, last)];
    let status = auditor_status(&topo, &deleted, last + 31 * MIN);
    assert!(status[0].stalled);
    let status = auditor_status(&topo, &deleted, last + 24 * 60 * MIN + 1);
    assert!(status.is_empty(), "{status:#?}");

    // A window of it with nothing left to wait for is not held by the forgotten
    // auditor of a many-to-one upstream datacenter either.
    let now = last + 25 * 60 * MIN;
    let fresh = |tier, dc| progress(tier, dc, now, now);
    let out = topo.evaluate_topic(
        "orders",
        &[W],
        &[
            row("regional", "dc1", 10, 1),
            row("aggregate", "agg", 10, 1),
        ],
        &[
            fresh("regional", "dc1"),
            fresh("aggregate", "agg"),
            progress("regional", "dc2", END, last),
        ],
        now,
    );
    let e = find(&out, "regional", "agg");
    assert_eq!(
        (e.verdict, e.lifecycle),
        (Verdict::Ok, Lifecycle::Final),
        "{}",
        e.reason
    );
}

#[test]
fn staged_increments_keep_a_window_pending() {
    // B3: the aggregate's increments of W are stored but not yet rolled up: the
    // counts are not the answer, whatever the progress says.
    let topo = pipeline();
    let now = SETTLED + 5 * MIN;
    let rows = vec![
        row("regional", "dc1", 100, 7),
        row("regional", "dc2", 50, 3),
        row("aggregate", "agg", 60, 4),
    ];
    let staged: Staged = [("aggregate".to_string(), "agg".to_string(), W)].into();
    let out = topo.evaluate_topic_staged("orders", &[W], &rows, &all_caught_up(now), &staged, now);
    let e = find(&out, "regional", "agg");
    assert_eq!(
        (e.verdict, e.lifecycle),
        (Verdict::Pending, Lifecycle::Settling),
        "{}",
        e.reason
    );
    assert!(e.reason.contains("roll-up"), "{}", e.reason);

    // Staged increments of another window, tier or datacenter do not hold it.
    let other: Staged = [
        ("aggregate".to_string(), "agg".to_string(), W + 10 * MIN),
        ("producer".to_string(), "dc1".to_string(), W),
    ]
    .into();
    let out = topo.evaluate_topic_staged("orders", &[W], &rows, &all_caught_up(now), &other, now);
    let e = find(&out, "regional", "agg");
    assert_eq!(
        (e.verdict, e.lifecycle),
        (Verdict::Loss, Lifecycle::Final),
        "{}",
        e.reason
    );
}

#[test]
fn config_errors_are_clear() {
    let cases: &[(&str, &str)] = &[
        ("tiers = []\nwindw = \"10m\"", "unknown field `windw`"),
        (
            "tiers = [{ name = \"a\" }]\n[[edges]]\nupstream = \"a\"\ndownstream = \"b\"",
            "tier \"b\" is not in tiers",
        ),
        (
            "tiers = [{ name = \"a\" }, { name = \"a\" }]",
            "tier \"a\" is listed twice",
        ),
        ("window = \"0s\"", "window must be longer than 0"),
        ("[thresholds]\nratio = 2.0", "ratio 2 is not within [0, 1]"),
        ("grace = \"soon\"", "grace"),
        (
            "tiers = [{ name = \"a\" }]\n[[edges]]\nupstream = \"a\"\ndownstream = \"a\"",
            "same tier",
        ),
        (
            "stall_after = \"2h\"\nforget_after = \"1h\"",
            "forget_after (3600 s) must be longer than stall_after (7200 s)",
        ),
    ];
    for (src, want) in cases {
        let err = match toml::from_str::<TopologyConfig>(src) {
            Err(e) => e.to_string(),
            Ok(cfg) => match Topology::new(cfg) {
                Err(e) => e.to_string(),
                Ok(_) => panic!("accepted invalid topology {src:?}"),
            },
        };
        assert!(err.contains(want), "{src:?}: error {err:?} lacks {want:?}");
    }
}

#[test]
fn glob_patterns() {
    use topology::glob_match;
    for (p, t, m) in [
        ("noisy.*", "noisy.clicks", true),
        ("noisy.*", "noisy", false),
        ("*", "", true),
        ("a?c", "abc", true),
        ("a?c", "ac", false),
        ("*.logs.*", "eu.logs.web", true),
        ("orders", "orders2", false),
    ] {
        assert_eq!(glob_match(p, t), m, "{p} vs {t}");
    }
}

#[test]
fn policy_overrides_first_match_wins() {
    let topo = pipeline();
    assert_eq!(topo.policy_for("noisy.x").thresholds.absolute, 10);
    assert_eq!(topo.policy_for("orders").thresholds.absolute, 0);
    assert_eq!(topo.policy_for("orders").grace_ms, 20 * MIN);
}

#[test]
fn extreme_counts_do_not_overflow() {
    let topo = pipeline();
    let now = SETTLED + 5 * MIN;
    let big = i64::MAX as u64;
    let rows = vec![
        row("regional", "dc1", big, 1),
        row("regional", "dc2", big, 2),
        row("aggregate", "agg", 0, 0),
    ];
    let out = topo.evaluate_topic("orders", &[W], &rows, &all_caught_up(now), now);
    let e = find(&out, "regional", "agg");
    assert_eq!(e.expected, big * 2);
    assert_eq!(e.difference, i64::MIN);
    assert_eq!(e.verdict, Verdict::Loss);
}

#[test]
fn one_named_datacenter_is_judged_like_evaluate_topic_and_even_without_data() {
    let t = pipeline();
    let now = SETTLED + 5 * MIN;
    let rows = vec![
        row("regional", "dc1", 60, 1),
        row("regional", "dc2", 40, 2),
        row("aggregate", "agg", 100, 3),
    ];
    let progress = all_caught_up(now);
    let all = t.evaluate_topic("orders", &[W], &rows, &progress, now);
    let edge = t
        .edges
        .iter()
        .find(|e| e.downstream == "aggregate")
        .unwrap();
    let one = t.evaluate_edge_datacenter(
        "orders",
        edge,
        "agg",
        &[W],
        &rows,
        &progress,
        &Staged::new(),
        now,
    );
    assert_eq!(one, vec![find(&all, "regional", "agg").clone()]);
    assert_eq!((one[0].expected, one[0].observed), (100, 100));

    // dc3 has neither rows nor progress: evaluate_topic leaves it out, a named
    // datacenter still gets an answer (its auditor has not reported: pending).
    let edge = t.edges.iter().find(|e| e.downstream == "regional").unwrap();
    assert!(all.iter().all(|e| e.datacenter != "dc3"));
    let one = t.evaluate_edge_datacenter(
        "orders",
        edge,
        "dc3",
        &[W],
        &rows,
        &progress,
        &Staged::new(),
        now,
    );
    assert_eq!(one.len(), 1);
    assert_eq!(
        (
            one[0].lifecycle,
            one[0].verdict,
            one[0].expected,
            one[0].observed
        ),
        (Lifecycle::Settling, Verdict::Pending, 0, 0)
    );
    assert!(one[0].reason.contains("regional/dc3"), "{}", one[0].reason);
}

#[test]
fn completeness_threshold_must_be_a_ratio() {
    for bad in [
        "completeness = 1.5",
        "completeness = -0.1",
        "completeness = nan",
    ] {
        let cfg: TopologyConfig = toml::from_str(bad).expect("parses");
        let err = Topology::new(cfg).unwrap_err().to_string();
        assert!(err.contains("completeness"), "{bad}: {err}");
    }
    assert_eq!(TopologyConfig::default().completeness, 0.999);
}
