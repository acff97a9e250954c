//! The aggregator against ground truth computed independently of it.

use std::collections::{BTreeMap, HashSet};

use audit_lib::{
    message_hash, Aggregator, AuditMessage, Checksum, Classification, EventTimeConfig, Fallback,
    Identity, Limits, Observation, RecordTimestamp, TimestampType,
};
use proptest::prelude::*;

const MIN: i64 = 60_000;
const T0: i64 = 1_764_410_400_000; // a 10-minute boundary

fn id() -> Identity {
    Identity::new("regional", "dc1", "auditor-0")
}

fn config(window: &str) -> EventTimeConfig {
    let mut c: EventTimeConfig = toml::from_str(&format!("window_size = \"{window}\"")).unwrap();
    c.default.max_past = None;
    c.default.max_future = None;
    c
}

#[derive(Clone, Debug)]
struct Msg {
    topic: usize,
    partition: i32,
    offset: i64,
    key: Option<Vec<u8>>,
    value: Vec<u8>,
    /// CreateTime, when the record has one.
    record_ts: Option<i64>,
    observed_at: i64,
}

/// Everything the ground truth needs per (topic, window start).
#[derive(Default, Debug, PartialEq, Eq, Clone)]
struct Truth {
    count: u64,
    bytes: u64,
    no_time: u64,
    malformed: u64,
    observed: u64,
    checksum: u64,
    latencies: Vec<i64>,
    offsets: BTreeMap<i32, (i64, i64)>,
    /// Per partition: the latest record time, capped at the observation time.
    record_times: BTreeMap<i32, i64>,
    /// The latest observation time of the window's messages.
    observed_at: Option<i64>,
}

const TOPICS: [&str; 3] = ["orders", "payments", "clicks"];

fn truth_of(msgs: &[Msg], window_ms: i64) -> BTreeMap<(String, i64), Truth> {
    let mut t: BTreeMap<(String, i64), Truth> = BTreeMap::new();
    for m in msgs {
        // Independent parse with serde_json: the oracle for what the event time is.
        let event: Option<i64> = serde_json::from_slice::<serde_json::Value>(&m.value)
            .ok()
            .map(|v| v.get("ts").and_then(|x| x.as_i64()))
            .unwrap_or(None);
        let parsed = serde_json::from_slice::<serde_json::Value>(&m.value).is_ok();
        // Without an event time: the record timestamp (tier-invariant), else only the
        // observation time, which is counted apart and not compared.
        let invariant = event.or(m.record_ts);
        let at = invariant.unwrap_or(m.observed_at);
        let start = at.div_euclid(window_ms) * window_ms;
        let e = t.entry((TOPICS[m.topic].to_owned(), start)).or_default();
        let o = e.offsets.entry(m.partition).or_insert((m.offset, m.offset));
        o.0 = o.0.min(m.offset);
        o.1 = o.1.max(m.offset);
        if let Some(ts) = m
            .record_ts
            .map(|ts| ts.min(m.observed_at + audit_lib::RECORD_TIME_SLACK_MS))
            .filter(|&t| t >= 0)
        {
            let r = e.record_times.entry(m.partition).or_insert(ts);
            *r = (*r).max(ts);
        }
        e.observed_at = e.observed_at.max(Some(m.observed_at));
        if invariant.is_none() {
            e.observed += 1;
            continue;
        }
        e.count += 1;
        e.bytes += (m.key.as_ref().map_or(0, Vec::len) + m.value.len()) as u64;
        if !parsed {
            e.malformed += 1;
        } else if event.is_none() {
            e.no_time += 1;
        }
        e.latencies.push(m.observed_at - at);
        e.checksum = e
            .checksum
            .wrapping_add(message_hash(m.key.as_deref(), &m.value));
    }
    t
}

fn record_all(agg: &mut Aggregator, msgs: &[Msg]) {
    for m in msgs {
        let obs = Observation {
            topic: TOPICS[m.topic],
            partition: m.partition,
            offset: m.offset,
            key: m.key.as_deref(),
            value: Some(&m.value),
            headers: &audit_lib::NoHeaders,
            record_timestamp: m.record_ts.map(|ms| RecordTimestamp {
                ms,
                kind: TimestampType::CreateTime,
            }),
            observed_at_ms: m.observed_at,
        };
        agg.record(&obs);
    }
}

/// Sums drained increments per (topic, window) as the collector would.
fn sum_increments(msgs: &[AuditMessage]) -> BTreeMap<(String, i64), audit_lib::WindowStats> {
    let mut out: BTreeMap<(String, i64), audit_lib::WindowStats> = BTreeMap::new();
    for m in msgs {
        // Through the wire format, as a real consumer receives them.
        let m = AuditMessage::from_json(m.to_json().as_bytes()).unwrap();
        let inc = m.as_increment().unwrap();
        out.entry((m.topic.clone(), inc.window_start))
            .or_default()
            .merge(&inc.stats);
    }
    out
}

fn check_against_truth(
    truth: &BTreeMap<(String, i64), Truth>,
    got: &BTreeMap<(String, i64), audit_lib::WindowStats>,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(truth.len(), got.len(), "windows differ");
    for (k, t) in truth {
        let g = got
            .get(k)
            .ok_or_else(|| TestCaseError::fail(format!("missing {k:?}")))?;
        prop_assert_eq!(g.count, t.count);
        prop_assert_eq!(g.bytes, t.bytes);
        prop_assert_eq!(g.no_time_count, t.no_time);
        prop_assert_eq!(g.malformed_count, t.malformed);
        prop_assert_eq!(g.observation_time_count, t.observed);
        prop_assert_eq!(g.checksum, Checksum(t.checksum));
        let mut h = audit_lib::LatencyHistogram::new();
        for l in &t.latencies {
            h.record(*l);
        }
        prop_assert_eq!(&g.latency, &h);
        let offs: BTreeMap<i32, (i64, i64)> = g
            .offsets
            .iter()
            .map(|r| (r.partition, (r.min, r.max)))
            .collect();
        prop_assert_eq!(&offs, &t.offsets);
        let record_times: BTreeMap<i32, i64> = g
            .offsets
            .iter()
            .filter_map(|r| Some((r.partition, r.max_record_time?)))
            .collect();
        prop_assert_eq!(&record_times, &t.record_times);
        prop_assert_eq!(g.max_observed_at, t.observed_at);
    }
    Ok(())
}

fn msg_strategy() -> impl Strategy<Value = Msg> {
    (
        0usize..3,
        0i32..4,
        0i64..1_000_000,
        prop::option::of(prop::collection::vec(any::<u8>(), 0..6)),
        prop_oneof![
            // event time within ±2 hours of T0
            (-120i64..120, 0i64..MIN).prop_map(|(m, ms)| format!(
                r#"{{"ts":{},"v":"x"}}"#,
                T0 + m * MIN + ms
            )
            .into_bytes()),
            Just(br#"{"no":"time"}"#.to_vec()),
            prop::collection::vec(any::<u8>(), 0..10).prop_map(|mut v| {
                v.insert(0, 0xff);
                v
            }),
        ],
        -30i64..30,
        prop::option::of(-60i64..60),
    )
        .prop_map(
            |(topic, partition, offset, key, value, obs_min, rec_min)| Msg {
                topic,
                partition,
                offset,
                key,
                value,
                record_ts: rec_min.map(|m| T0 + m * MIN + 5),
                observed_at: T0 + obs_min * MIN + 17,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// However messages are split between drains, and however small the open-window
    /// limit, the drained increments add up exactly to the ground truth.
    #[test]
    fn drained_increments_add_up_to_ground_truth(
        msgs in prop::collection::vec(msg_strategy(), 0..300),
        cuts in prop::collection::vec(0usize..300, 0..4),
        max_open in 1usize..6,
    ) {
        let mut agg = Aggregator::new(id(), config("10m"), Limits { max_open_windows: max_open, track_offsets: true }).unwrap();
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(msgs.len())).collect();
        cuts.sort_unstable();
        cuts.push(msgs.len());
        let mut drained = Vec::new();
        let mut from = 0;
        for (n, cut) in cuts.into_iter().enumerate() {
            record_all(&mut agg, &msgs[from..cut]);
            prop_assert!(agg.open_windows() <= max_open);
            drained.extend(agg.drain(T0 + n as i64));
            prop_assert!(agg.is_empty());
            prop_assert_eq!(agg.open_windows(), 0);
            from = cut;
        }
        let uuids: HashSet<_> = drained.iter().map(|m| m.uuid).collect();
        prop_assert_eq!(uuids.len(), drained.len(), "UUIDs must be unique");
        check_against_truth(&truth_of(&msgs, 600_000), &sum_increments(&drained))?;
    }
}

#[test]
fn open_window_limit_moves_oldest_to_pending_never_drops() {
    let mut agg = Aggregator::new(
        id(),
        config("1m"),
        Limits {
            max_open_windows: 2,
            track_offsets: false,
        },
    )
    .unwrap();
    for i in 0..5i64 {
        let v = format!(r#"{{"ts":{}}}"#, T0 + i * MIN);
        agg.record(&Observation::new("orders", v.as_bytes(), T0 + 10 * MIN));
    }
    assert_eq!(agg.open_windows(), 2);
    assert_eq!(agg.pending_windows(), 3);
    // Late data for an evicted window opens it again; the drain merges both parts.
    let v = format!(r#"{{"ts":{}}}"#, T0);
    agg.record(&Observation::new("orders", v.as_bytes(), T0 + 10 * MIN));
    let out = agg.drain(T0 + 11 * MIN);
    let starts: Vec<(i64, u64)> = out
        .iter()
        .map(|m| {
            let i = m.as_increment().unwrap();
            (i.window_start, i.stats.count)
        })
        .collect();
    assert_eq!(
        starts,
        vec![
            (T0, 2),
            (T0 + MIN, 1),
            (T0 + 2 * MIN, 1),
            (T0 + 3 * MIN, 1),
            (T0 + 4 * MIN, 1)
        ]
    );
    assert!(out
        .iter()
        .all(|m| m.emitted_at == T0 + 11 * MIN && m.tier == "regional"));
    assert!(out
        .iter()
        .all(|m| m.as_increment().unwrap().stats.offsets.is_empty()));
}

#[test]
fn classification_decides_the_window_and_counter() {
    let mut agg = Aggregator::new(id(), config("10m"), Limits::default()).unwrap();
    let now = T0 + 25 * MIN; // observation window starts at T0 + 20m
    let old = format!(r#"{{"ts":{}}}"#, T0 + 3 * MIN);
    let c = agg.record(&Observation::new("t", old.as_bytes(), now));
    assert!(matches!(c, Classification::EventTime { .. }));
    // No record timestamp: only observation time, counted apart.
    agg.record(&Observation::new("t", b"{}", now));
    agg.record(&Observation::new("t", b"\xff\xfe", now));
    // With one: windowed by it, in `count`, reason kept.
    let rt = Some(RecordTimestamp {
        ms: T0 + 11 * MIN,
        kind: TimestampType::CreateTime,
    });
    for v in [&b"{}"[..], b"\xff\xfe"] {
        let mut o = Observation::new("t", v, now);
        o.record_timestamp = rt;
        let c = agg.record(&o);
        assert_eq!(c.counted_at(now), T0 + 11 * MIN);
    }
    let out = agg.drain(now);
    let by_start: BTreeMap<i64, &audit_lib::WindowStats> = out
        .iter()
        .map(|m| {
            (
                m.as_increment().unwrap().window_start,
                &m.as_increment().unwrap().stats,
            )
        })
        .collect();
    assert_eq!(by_start.len(), 3);
    let w0 = by_start[&T0];
    assert_eq!((w0.count, w0.no_time_count, w0.malformed_count), (1, 0, 0));
    assert_eq!(w0.latency.count(), 1);
    assert_eq!(w0.latency.max_ms(), 22 * MIN);
    let w1 = by_start[&(T0 + 10 * MIN)];
    assert_eq!(
        (
            w1.count,
            w1.no_time_count,
            w1.malformed_count,
            w1.observation_time_count
        ),
        (2, 1, 1, 0)
    );
    assert_eq!(w1.latency.count(), 2);
    assert_eq!(w1.latency.max_ms(), 14 * MIN);
    assert_eq!(
        w1.checksum,
        Checksum(message_hash(None, b"{}").wrapping_add(message_hash(None, b"\xff\xfe")))
    );
    let w2 = by_start[&(T0 + 20 * MIN)];
    assert_eq!(
        (
            w2.count,
            w2.bytes,
            w2.no_time_count,
            w2.malformed_count,
            w2.observation_time_count
        ),
        (0, 0, 0, 0, 2)
    );
    assert_eq!(w2.checksum, Checksum(0));
    assert!(w2.latency.is_empty());
    assert!(agg.drain(now).is_empty(), "a second drain has nothing new");
}

/// B1: two tiers that read the same records at different times (one live, one two
/// windows late) produce the same compared statistics in the same windows.
#[test]
fn a_lagging_tier_counts_untimed_messages_in_the_same_windows() {
    let payloads: Vec<Vec<u8>> = (0..60)
        .map(|i| match i % 3 {
            0 => vec![0xff, 0x01, i as u8],
            1 => format!(r#"{{"no":"time","i":{i}}}"#).into_bytes(),
            _ => format!(r#"{{"ts":"bad{i}"}}"#).into_bytes(),
        })
        .collect();
    let run = |lag: i64| {
        let mut agg = Aggregator::new(id(), config("10m"), Limits::default()).unwrap();
        for (i, p) in payloads.iter().enumerate() {
            let created = T0 + i as i64 * MIN / 2;
            let mut o = Observation::new("t", p, created + 50 + lag);
            o.offset = i as i64;
            o.record_timestamp = Some(RecordTimestamp {
                ms: created,
                kind: TimestampType::CreateTime,
            });
            agg.record(&o);
        }
        agg.drain(T0 + 60 * MIN)
            .into_iter()
            .map(|m| {
                let i = m.as_increment().unwrap();
                let s = &i.stats;
                (
                    i.window_start,
                    (s.count, s.checksum, s.no_time_count, s.malformed_count),
                )
            })
            .collect::<BTreeMap<_, _>>()
    };
    let live = run(0);
    assert_eq!(live.len(), 3);
    assert!(live.values().all(|v| v.0 == 20 && v.2 + v.3 == 20));
    assert_eq!(live, run(20 * MIN));
}

#[test]
fn topics_get_their_own_rules() {
    let c: EventTimeConfig = toml::from_str(
        r#"
        [[rules]]
        topic = "metrics.*"
        fields = ["meta.t"]
        unit = "s"
        max_past = "1000d"
        "#,
    )
    .unwrap();
    let mut agg = Aggregator::new(id(), c, Limits::default()).unwrap();
    let now = T0 + 5000;
    let c = agg.record(&Observation::new(
        "metrics.cpu",
        br#"{"meta":{"t":1764410400}}"#,
        now,
    ));
    assert!(matches!(
        c,
        Classification::EventTime {
            event_time_ms: T0,
            ..
        }
    ));
    let c = agg.record(&Observation::new(
        "orders",
        br#"{"meta":{"t":1764410400}}"#,
        now,
    ));
    assert_eq!(c, Classification::NoTime(Fallback::Observed));
    let c = agg.record(&Observation::new(
        "metrics.cpu",
        br#"{"ts":1764410400}"#,
        now,
    ));
    assert_eq!(c, Classification::NoTime(Fallback::Observed));
}

/// An application counting under a replicator's evidence tier is a configuration error,
/// named as such, in any case; the librdkafka plugin and the Java interceptors refuse
/// the same tiers.
#[test]
fn an_application_may_not_count_under_a_replicators_evidence_tier() {
    for tier in ["replicator:group/mirror", "Replicator:MM2/agg"] {
        let e = Aggregator::new(
            Identity::new(tier, "dc1", "app-1"),
            config("10m"),
            Limits::default(),
        )
        .err()
        .expect("a reserved tier is refused");
        assert!(
            matches!(&e, audit_lib::ConfigError::ReservedTier { tier: t } if t == tier),
            "{e:?}"
        );
        let e = e.to_string();
        assert!(
            e.contains(audit_lib::RESERVED_TIER_PREFIX) && e.contains("replicator's auditors"),
            "{e}"
        );
    }
    Aggregator::new(
        Identity::new("replicator-edge", "dc1", "app-1"),
        config("10m"),
        Limits::default(),
    )
    .expect("an ordinary tier");
}
