//! Table tests of the detection engine: every rule of `mod.rs` on hand-made rows.

use super::*;

mod evidence;
mod replication;
mod rules;

const MIN: i64 = 60_000;
const W: i64 = 1_764_410_400_000; // a window start, multiple of 10 min
const END: i64 = W + 10 * MIN;
const SETTLED: i64 = END + 20 * MIN; // default grace 20 min
const CAUGHT_UP: i64 = SETTLED + MIN; // record time past end + grace

/// The topology of `cfg` judging in 10-minute windows: `[topology] window` when set,
/// otherwise as if 10 minutes had been learned from the store.
fn ten_minutes(cfg: TopologyConfig) -> Result<Topology, TopologyError> {
    Topology::learned(cfg, audit_lib::WindowSize::DEFAULT)
}

/// `[topology] window`, when set, rules; unset, `Topology::new` refuses (serve learns
/// it from the store) and `Topology::learned` takes the learned size.
#[test]
fn explicit_window_rules_and_an_unset_one_is_learned() {
    let five = audit_lib::WindowSize::from_millis(5 * MIN).unwrap();
    let unset = TopologyConfig::default();
    assert!(unset.window.is_none());
    let err = Topology::new(unset.clone()).unwrap_err().to_string();
    assert!(err.contains("window is not set"), "{err}");
    let learned = Topology::learned(unset.clone(), five).unwrap();
    assert_eq!((learned.window, learned.window_learned), (five, true));
    assert!(Topology::check(&unset).is_ok());
    let set = TopologyConfig {
        window: Some(std::time::Duration::from_secs(600)),
        ..unset
    };
    let explicit = Topology::learned(set.clone(), five).unwrap();
    assert_eq!(explicit.window.as_millis(), 10 * MIN);
    assert!(!explicit.window_learned);
    assert_eq!(Topology::new(set).unwrap().window.as_millis(), 10 * MIN);
}

fn topology(toml_src: &str) -> Topology {
    let cfg: TopologyConfig = toml::from_str(toml_src).expect("topology parses");
    ten_minutes(cfg).expect("topology is valid")
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

/// Histogram of the given latencies in ms.
fn histogram(values: &[i64]) -> audit_lib::LatencyHistogram {
    let mut h = audit_lib::LatencyHistogram::new();
    for v in values {
        h.record(*v);
    }
    h
}

fn row(tier: &str, dc: &str, count: u64, checksum: u64) -> WindowRow {
    WindowRow {
        topic: "orders".into(),
        tier: tier.into(),
        datacenter: dc.into(),
        window_start_ms: W,
        window_end_ms: END,
        count,
        bytes: 0,
        no_time_count: 0,
        malformed_count: 0,
        out_of_bounds_count: 0,
        observation_time_count: 0,
        delivery_failed_count: 0,
        checksum,
        latency: histogram(&[100, 200, 300]),
        increments: 1,
        first_received_at_ms: 0,
        last_received_at_ms: 0,
        latency_unread: false,
        max_observed_at_ms: None,
        record_times: vec![],
        max_offsets: vec![],
    }
}

fn progress(tier: &str, dc: &str, record_time: i64, reported_at: i64) -> ProgressRow {
    ProgressRow {
        topic: "orders".into(),
        tier: tier.into(),
        datacenter: dc.into(),
        partition: 0,
        host: format!("{tier}-{dc}-0"),
        next_offset: 0,
        record_time_ms: Some(record_time),
        lag: Some(5),
        emitted_at_ms: reported_at,
        received_at_ms: reported_at,
        max_record_time_ms: None,
        log_append_time: false,
    }
}

/// Every auditor of the pipeline has read past the window's settle time.
fn all_caught_up(now: i64) -> Vec<ProgressRow> {
    ["dc1", "dc2"]
        .iter()
        .map(|dc| progress("regional", dc, CAUGHT_UP, now))
        .chain([progress("aggregate", "agg", CAUGHT_UP, now)])
        .collect()
}

/// Like `all_caught_up`, but regional/dc2 has read only up to the window's end.
fn dc2_lagging(now: i64) -> Vec<ProgressRow> {
    vec![
        progress("regional", "dc1", CAUGHT_UP, now),
        progress("regional", "dc2", END, now),
        progress("aggregate", "agg", CAUGHT_UP, now),
    ]
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
    progress: Vec<ProgressRow>,
    now: i64,
    edge_upstream: &'static str,
    datacenter: &'static str,
    expect: (Verdict, Lifecycle, u64, u64),
}

/// Rows of W on the edge producer → regional at dc1: (count, checksum) at each end.
fn one_to_one(producer: (u64, u64), regional: (u64, u64)) -> Vec<WindowRow> {
    vec![
        row("producer", "dc1", producer.0, producer.1),
        row("regional", "dc1", regional.0, regional.1),
    ]
}

/// When the table's cases are judged, unless a case says otherwise: settled, 5 min on.
const NOW: i64 = SETTLED + 5 * MIN;

/// A case on the one-to-one edge producer → regional at dc1, topic "orders", every
/// auditor caught up at `NOW`. Each case names its own `rows` and `expect`.
fn base(name: &'static str) -> Case {
    Case {
        name,
        topic: "orders",
        rows: vec![],
        progress: all_caught_up(NOW),
        now: NOW,
        edge_upstream: "producer",
        datacenter: "dc1",
        expect: (Verdict::Ok, Lifecycle::Final, 0, 0),
    }
}

/// Like `base`, on the many-to-one edge regional (dc1 + dc2) → aggregate at agg.
fn many_to_one(name: &'static str) -> Case {
    Case {
        edge_upstream: "regional",
        datacenter: "agg",
        ..base(name)
    }
}

#[test]
fn verdicts_table() {
    let now = NOW;
    let cases = vec![
        Case {
            rows: one_to_one((100, 7), (100, 7)),
            expect: (Verdict::Ok, Lifecycle::Final, 100, 100),
            ..base("complete one-to-one edge is ok")
        },
        Case {
            rows: one_to_one((100, 7), (90, 6)),
            expect: (Verdict::Loss, Lifecycle::Final, 100, 90),
            ..base("loss: fewer downstream after settling")
        },
        Case {
            rows: vec![row("producer", "dc1", 100, 7)],
            expect: (Verdict::Loss, Lifecycle::Final, 100, 0),
            ..base("loss: traffic upstream and no row downstream")
        },
        Case {
            rows: one_to_one((100, 7), (130, 9)),
            expect: (Verdict::Duplication, Lifecycle::Final, 100, 130),
            ..base("duplication: more downstream")
        },
        Case {
            rows: one_to_one((100, 0xdead), (100, 0xbeef)),
            expect: (Verdict::Mismatch, Lifecycle::Final, 100, 100),
            ..base("loss masked by equal duplication: equal counts, different checksums")
        },
        Case {
            rows: one_to_one((100, 7), (40, 3)),
            // regional/dc1 reports recently but has only read up to the window end.
            progress: vec![progress("regional", "dc1", END, now - MIN)],
            expect: (Verdict::Pending, Lifecycle::Settling, 100, 40),
            ..base("lagging auditor: pending, not loss")
        },
        Case {
            rows: one_to_one((100, 7), (40, 3)),
            progress: vec![progress("regional", "dc1", END, now - 31 * MIN)],
            expect: (Verdict::Stalled, Lifecycle::Settling, 100, 40),
            ..base("stalled auditor: last report older than stall_after")
        },
        Case {
            rows: one_to_one((100, 7), (100, 7)),
            progress: vec![progress("regional", "dc1", CAUGHT_UP, now - 300 * MIN)],
            now: now + 300 * MIN,
            expect: (Verdict::Ok, Lifecycle::Final, 100, 100),
            ..base("stalled after catching up: the window can still be judged")
        },
        Case {
            rows: one_to_one((100, 7), (100, 7)),
            progress: vec![ProgressRow {
                lag: Some(0),
                record_time_ms: Some(W),
                ..progress("regional", "dc1", W, SETTLED + MIN)
            }],
            expect: (Verdict::Ok, Lifecycle::Final, 100, 100),
            ..base("lag 0 reported after settle time counts as caught up")
        },
        Case {
            // A lagging auditor's first report comes before librdkafka knows the high
            // watermark (lag null): its partition is mid-backlog, and the CreateTime
            // of the last record read says nothing about records not read yet.
            rows: one_to_one((100, 7), (60, 4)),
            progress: vec![ProgressRow {
                lag: None,
                ..progress("regional", "dc1", CAUGHT_UP, now)
            }],
            expect: (Verdict::Pending, Lifecycle::Settling, 100, 60),
            ..base("record time past settle with an unknown lag does not count")
        },
        Case {
            // Rule 3, lag 0 as of when measured: measured before the settle time,
            // delivered after it (an audit-topic or database backlog): says nothing
            // about data written in between.
            rows: one_to_one((100, 7), (90, 7)),
            progress: vec![ProgressRow {
                lag: Some(0),
                record_time_ms: Some(W),
                emitted_at_ms: END,
                ..progress("regional", "dc1", W, SETTLED + MIN)
            }],
            expect: (Verdict::Pending, Lifecycle::Settling, 100, 90),
            ..base("lag 0 emitted before settle time but received after does not count")
        },
        Case {
            // Rule 3, lag 0 as of when measured: an auditor clock running ahead cannot
            // date its lag 0 past the time the collector received it.
            rows: one_to_one((100, 7), (90, 7)),
            progress: vec![ProgressRow {
                lag: Some(0),
                record_time_ms: Some(W),
                emitted_at_ms: SETTLED + 60 * MIN,
                ..progress("regional", "dc1", W, END)
            }],
            expect: (Verdict::Pending, Lifecycle::Settling, 100, 90),
            ..base("lag 0 emitted in the future does not count before it is received")
        },
        Case {
            // Rule 3, many-to-one edges: a region-specific topic, produced in dc1 only.
            // dc2 has neither rows nor progress for it: it contributes 0 and does not
            // hold the verdict.
            rows: vec![
                row("regional", "dc1", 100, 7),
                row("aggregate", "agg", 95, 6),
            ],
            progress: vec![
                progress("regional", "dc1", CAUGHT_UP, now),
                progress("aggregate", "agg", CAUGHT_UP, now),
            ],
            now: SETTLED + 31 * MIN,
            expect: (Verdict::Loss, Lifecycle::Final, 100, 95),
            ..many_to_one("many-to-one: topic in one upstream datacenter only, loss reported")
        },
        Case {
            rows: vec![
                row("regional", "dc1", 100, 7),
                row("regional", "dc2", 50, 3),
                row("aggregate", "agg", 150, 10),
            ],
            expect: (Verdict::Ok, Lifecycle::Final, 150, 150),
            ..many_to_one("many-to-one: topic in both upstream datacenters, complete is ok")
        },
        Case {
            // Rows but no progress: dc2 does carry the topic, and its auditor has not
            // said how far it read: wait.
            rows: vec![
                row("regional", "dc1", 100, 7),
                row("regional", "dc2", 50, 3),
                row("aggregate", "agg", 150, 10),
            ],
            progress: vec![
                progress("regional", "dc1", CAUGHT_UP, now),
                progress("aggregate", "agg", CAUGHT_UP, now),
            ],
            expect: (Verdict::Pending, Lifecycle::Settling, 150, 150),
            ..many_to_one("many-to-one: upstream datacenter with rows but no progress blocks")
        },
        Case {
            // Progress but no rows in this window: dc2 carries the topic (idle in
            // this window) and must still be read past it.
            rows: vec![
                row("regional", "dc1", 100, 7),
                row("aggregate", "agg", 100, 7),
            ],
            progress: dc2_lagging(now),
            expect: (Verdict::Pending, Lifecycle::Settling, 100, 100),
            ..many_to_one("many-to-one: upstream datacenter with lagging progress blocks")
        },
        Case {
            // Rule 3, stall per partition: partition 1 is stuck (its instance stopped
            // publishing while still in the group); partition 0 of the other instance
            // reports fresh progress.
            rows: one_to_one((100, 7), (90, 7)),
            progress: vec![
                ProgressRow {
                    record_time_ms: Some(CAUGHT_UP),
                    host: "regional-a".into(),
                    ..progress("regional", "dc1", CAUGHT_UP, now)
                },
                ProgressRow {
                    partition: 1,
                    host: "regional-b".into(),
                    ..progress("regional", "dc1", END, now - 120 * MIN)
                },
            ],
            expect: (Verdict::Stalled, Lifecycle::Settling, 100, 90),
            ..base("one stuck partition of one instance: stalled despite fresh others")
        },
        Case {
            // Rule 3, stall per partition: a partition that is read past the window
            // does not hold it, however old its report (an idle partition reported
            // lag 0 after the window).
            rows: one_to_one((100, 7), (100, 7)),
            progress: vec![
                progress("regional", "dc1", CAUGHT_UP, now),
                ProgressRow {
                    partition: 1,
                    ..progress("regional", "dc1", CAUGHT_UP, now - 120 * MIN)
                },
            ],
            expect: (Verdict::Ok, Lifecycle::Final, 100, 100),
            ..base("an old report of a partition read past the window does not stall")
        },
        Case {
            rows: one_to_one((100, 7), (100, 7)),
            progress: vec![ProgressRow {
                lag: Some(0),
                ..progress("regional", "dc1", W, END)
            }],
            now: END + 25 * MIN,
            expect: (Verdict::Pending, Lifecycle::Settling, 100, 100),
            ..base("lag 0 reported before settle time does not count")
        },
        Case {
            rows: one_to_one((100, 7), (100, 7)),
            progress: vec![],
            now: SETTLED + 31 * MIN,
            expect: (Verdict::Stalled, Lifecycle::Settling, 100, 100),
            ..base("never reported progress, long after settling: stalled")
        },
        Case {
            rows: vec![row("producer", "dc1", 100, 7)],
            now: END - 1,
            expect: (Verdict::Pending, Lifecycle::Open, 100, 0),
            ..base("open window is pending")
        },
        Case {
            rows: vec![row("producer", "dc1", 100, 7)],
            now: SETTLED - 1,
            expect: (Verdict::Pending, Lifecycle::Settling, 100, 0),
            ..base("window within its grace period is settling and pending")
        },
        Case {
            rows: vec![
                row("regional", "dc1", 60, u64::MAX),
                row("regional", "dc2", 40, 5),
                // u64::MAX + 5 wraps to 4
                row("aggregate", "agg", 100, 4),
            ],
            expect: (Verdict::Ok, Lifecycle::Final, 100, 100),
            ..many_to_one("many-to-one: two regions summed into the aggregate, checksums add")
        },
        Case {
            rows: vec![
                row("regional", "dc1", 60, 1),
                row("regional", "dc2", 40, 5),
                row("aggregate", "agg", 95, 4),
            ],
            expect: (Verdict::Loss, Lifecycle::Final, 100, 95),
            ..many_to_one("many-to-one: loss in the aggregate is judged against the sum")
        },
        Case {
            rows: vec![
                row("regional", "dc1", 60, 1),
                row("aggregate", "agg", 60, 1),
            ],
            progress: dc2_lagging(now),
            expect: (Verdict::Pending, Lifecycle::Settling, 60, 60),
            ..many_to_one("many-to-one: a lagging region keeps the aggregate pending")
        },
        Case {
            rows: vec![],
            expect: (Verdict::Ok, Lifecycle::Final, 0, 0),
            ..many_to_one("empty window on both ends is ok")
        },
        Case {
            rows: vec![],
            edge_upstream: "producer",
            datacenter: "dc2",
            expect: (Verdict::Ok, Lifecycle::Final, 0, 0),
            ..base("empty one-to-one window with caught-up auditor is ok")
        },
        Case {
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
            expect: (Verdict::Ok, Lifecycle::Final, 1000, 960),
            ..base("override thresholds tolerate a small difference on noisy.* topics")
        },
        Case {
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
            expect: (Verdict::Loss, Lifecycle::Final, 1000, 900),
            ..base("override thresholds still flag a difference beyond both")
        },
        Case {
            rows: vec![
                row("regional", "dc1", 3, 1),
                WindowRow {
                    latency: histogram(&[1_000, 90_000, 120_000]),
                    ..row("aggregate", "agg", 3, 1)
                },
            ],
            expect: (Verdict::Delayed, Lifecycle::Final, 3, 3),
            ..many_to_one("delayed: complete but aggregate p99 above its 1 min objective")
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
            window_start_ms: W + 10 * MIN,
            window_end_ms: W + 20 * MIN,
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
    let a = histogram(&(1..=990).collect::<Vec<_>>());
    let b = histogram(&(1..=10).map(|i| 10_000 + i).collect::<Vec<_>>());
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
    // Rule 3, stall per partition: instance b's partition 1 has not been reported
    // for 2 h, instance a reports partition 0 now: the auditor is stalled, and b is
    // named.
    let topo = pipeline();
    let now = SETTLED;
    let progress = vec![
        ProgressRow {
            host: "regional-a".into(),
            ..progress("regional", "dc1", END, now - MIN)
        },
        ProgressRow {
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
    // Rule 3, `forget_after`: a deleted topic's auditor is stalled after stall_after,
    // then forgotten after forget_after (default 24 h): no auditor status, so no
    // stalled alert.
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
    // Rule 5: the aggregate's increments of W are stored but not yet rolled up: the
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
            Ok(cfg) => match ten_minutes(cfg) {
                Err(e) => e.to_string(),
                Ok(_) => panic!("accepted invalid topology {src:?}"),
            },
        };
        assert!(err.contains(want), "{src:?}: error {err:?} lacks {want:?}");
    }
}

/// A topic pattern means the same in web's overrides as in the auditor's event-time
/// rules: both are audit-lib's `TopicGlob` (web's own glob read `{eu,us}` literally).
#[test]
fn override_patterns_match_like_the_auditors_rules() {
    let patterns = [
        "orders.{eu,us}",
        "noisy.*",
        "a?c",
        "*.logs.*",
        "orders",
        "logs-[0-9]",
    ];
    let topics = [
        "orders.eu",
        "orders.us",
        "orders.asia",
        "orders.{eu,us}",
        "noisy.clicks",
        "noisy",
        "abc",
        "ac",
        "eu.logs.web",
        "orders",
        "orders2",
        "logs-7",
        "",
    ];
    for pattern in patterns {
        let topo = ten_minutes(TopologyConfig {
            overrides: vec![topology::OverrideConfig {
                topics: pattern.into(),
                grace: None,
                absolute: Some(777),
                ratio: None,
            }],
            ..TopologyConfig::default()
        })
        .unwrap();
        let auditor = audit_lib::EventTimeConfig::from_toml(&format!(
            "[[rules]]\ntopic = {pattern:?}\nrecord_timestamp = false\n"
        ))
        .unwrap()
        .compile()
        .unwrap();
        for topic in topics {
            let web = topo.policy_for(topic).thresholds.absolute == 777;
            let auditor = !auditor.rule_for(topic).record_timestamp;
            assert_eq!(web, auditor, "{pattern} vs {topic:?}");
        }
    }
    let topo = |p: &str| {
        ten_minutes(TopologyConfig {
            overrides: vec![topology::OverrideConfig {
                topics: p.into(),
                grace: None,
                absolute: Some(777),
                ratio: None,
            }],
            ..TopologyConfig::default()
        })
    };
    assert!(
        topo("orders.{eu,us}")
            .unwrap()
            .policy_for("orders.us")
            .thresholds
            .absolute
            == 777
    );
    assert!(topo("orders.{eu").is_err());
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
    let inputs = TopicInputs {
        topic: "orders",
        rows: &rows,
        progress: &progress,
        staged: &Staged::new(),
        now,
    };
    let one = t.evaluate_edge_datacenter(&inputs, edge, "agg", &[W]);
    assert_eq!(one, vec![find(&all, "regional", "agg").clone()]);
    assert_eq!((one[0].expected, one[0].observed), (100, 100));

    // dc3 has neither rows nor progress: evaluate_topic leaves it out, a named
    // datacenter still gets an answer (its auditor has not reported: pending).
    let edge = t.edges.iter().find(|e| e.downstream == "regional").unwrap();
    assert!(all.iter().all(|e| e.datacenter != "dc3"));
    let inputs = TopicInputs {
        topic: "orders",
        rows: &rows,
        progress: &progress,
        staged: &Staged::new(),
        now,
    };
    let one = t.evaluate_edge_datacenter(&inputs, edge, "dc3", &[W]);
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
        let err = ten_minutes(cfg).unwrap_err().to_string();
        assert!(err.contains("completeness"), "{bad}: {err}");
    }
    assert_eq!(TopologyConfig::default().completeness, 0.999);
}

/// `percentiles` walks the buckets once for p50, p95 and p99: the same values as
/// `LatencyHistogram::quantile` for each (clamped at the largest latency seen), on
/// histograms with and without sub-millisecond latencies, one bucket or many.
#[test]
fn percentiles_equal_the_histograms_quantiles() {
    let mut cases = vec![LatencyHistogram::new()];
    for (zero, negative, max_ms, buckets) in [
        (0, 0, 5, vec![(10u32, 1u64)]),
        (3, 1, 2100, vec![(230, 1000)]),
        (1000, 0, 0, vec![]),
        (
            50,
            0,
            900,
            vec![(1, 10), (5, 20), (90, 1), (300, 5), (340, 3)],
        ),
        (0, 0, 40, vec![(2, 1), (3, 1), (4, 98)]),
        (98, 0, 40, vec![(2, 1), (200, 1)]),
        (
            1,
            0,
            100_000,
            (0..600).map(|i| (i, u64::from(i % 7))).collect(),
        ),
    ] {
        cases.push(LatencyHistogram::from_buckets(zero, negative, max_ms, buckets).unwrap());
    }
    for h in cases {
        let clamp = |q: f64| h.quantile(q).map(|v| v.min(h.max_ms() as f64));
        let expected = clamp(0.5).map(|p50| Percentiles {
            count: h.count(),
            p50_ms: p50,
            p95_ms: clamp(0.95).unwrap(),
            p99_ms: clamp(0.99).unwrap(),
            max_ms: h.max_ms().max(0) as u64,
        });
        let got = percentiles(&h);
        assert_eq!(
            got.as_ref()
                .map(|p| (p.count, p.p50_ms, p.p95_ms, p.p99_ms, p.max_ms)),
            expected
                .as_ref()
                .map(|p| (p.count, p.p50_ms, p.p95_ms, p.p99_ms, p.max_ms)),
            "{h:?}"
        );
    }
}

/// One severity order: alerting's urgency steps follow `severity` (a worse verdict is
/// never less urgent), and loss, mismatch and a stalled auditor page.
#[test]
fn urgency_follows_the_severity_order() {
    for a in Verdict::ALL {
        for b in Verdict::ALL {
            if a.severity() <= b.severity() {
                assert!(
                    a.urgency() <= b.urgency(),
                    "{b:?} is at least as severe as {a:?} but less urgent"
                );
            }
        }
    }
    let pages: Vec<Verdict> = Verdict::ALL
        .into_iter()
        .filter(|v| v.urgency() == Urgency::Page)
        .collect();
    assert_eq!(pages, [Verdict::Mismatch, Verdict::Stalled, Verdict::Loss]);
    assert_eq!(Verdict::Duplication.urgency(), Urgency::Warning);
    assert_eq!(Verdict::Delayed.urgency(), Urgency::Notice);
}
