//! Messages windowed by their record timestamp (docs/design.md §5, bad input is
//! counted, not dropped), end to end: messages whose payload holds no event time —
//! binary (an Avro-like framing, not JSON) and JSON without a time field — replicated
//! from cluster A to cluster B with their record timestamps preserved (as MirrorMaker 2
//! does), 37 dropped in one window and 11 duplicated in another; the downstream auditor
//! starts two windows late and reads its backlog over several reports. Both tiers
//! window them by the record timestamp, so the faults are reported exactly in their
//! windows and nothing else pages over the whole run. A few records carry a timestamp
//! outside the skew bounds (40 days old): they have no tier-invariant time, so each
//! tier counts them apart by its own observation time, shown in the API and never
//! judged. (Before that rule every one of these messages was windowed by the auditor's
//! consumption time, so the late tier put them windows away from the upstream ones.)

use crate::e2e;
use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::*;
use support::*;

const PARTITIONS: i32 = 3;
const DAY_MS: i64 = 86_400_000;

/// Message `i` sent at `ts`: payload, record timestamp, tier-invariant.
fn untimed_message(i: u64, ts: i64) -> (Vec<u8>, i64, Option<i64>) {
    if i % 250 == 100 {
        // Beyond the default max_past (30 d): only observation time is left.
        return (
            format!("{{\"id\":{i}}}").into_bytes(),
            ts - 40 * DAY_MS,
            None,
        );
    }
    let payload = if i % 2 == 0 {
        // Confluent wire framing: magic 0, schema id, then binary Avro.
        let mut v = vec![0x00, 0x00, 0x00, 0x00, 0x07];
        v.extend_from_slice(&i.to_le_bytes());
        v.push(0xff);
        v
    } else {
        format!("{{\"id\":{i},\"kind\":\"click\"}}").into_bytes()
    };
    // Windowed by the record timestamp.
    (payload, ts, Some(ts))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn untimed_messages_are_judged_in_their_record_timestamp_windows_with_a_late_auditor() {
    let _alone = crate::ALONE.lock().await;
    let t = OneTopic::start("untimed-e2e", PARTITIONS).await;
    let (rig, topic, state) = (&t.rig, t.topic.as_str(), &t.state);
    let api = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = web::app(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        base
    };

    let traffic = rig.spawn_traffic_with(
        topic,
        Traffic::loss_then_duplication(PARTITIONS),
        untimed_message,
    );
    // The downstream auditor starts two windows (and a grace) after the traffic and
    // catches up over several reports.
    let (sent, all_final, both_paged) = t.late_downstream(traffic).await;
    // Every observation-time message is stored (the late tier's may land after the
    // traffic's windows).
    let to = common::now_ms() + WINDOW_MS;
    let get = |path: String| {
        let url = format!("{api}{path}");
        async move {
            let r = reqwest::get(&url).await.expect("GET");
            assert!(r.status().is_success(), "{url}: {}", r.status());
            r.json::<serde_json::Value>().await.expect("JSON")
        }
    };
    let observation_time_stored = testkit::wait_until_async(Duration::from_secs(60), || {
        let w = get(format!(
            "/api/v1/topics/{topic}/windows?from={}&to={to}",
            sent.first()
        ));
        async move {
            let w = w.await;
            let sum = |tier: &str| -> u64 {
                w["windows"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|v| v["tier"] == tier)
                    .map(|v| v["observation_time_count"].as_u64().unwrap())
                    .sum()
            };
            (sum("regional"), sum("aggregate")) == sent.observation_time
        }
    })
    .await;
    let windows = get(format!(
        "/api/v1/topics/{topic}/windows?from={}&to={}",
        sent.first(),
        sent.end()
    ))
    .await;
    let compare = get(format!(
        "/api/v1/topics/{topic}/compare?from={}&to={}",
        sent.first(),
        sent.end()
    ))
    .await;
    let judged = anomalies(state, topic, sent.first(), sent.end());
    t.shutdown([]).await;

    t.assert_loss_then_duplication(&sent, &judged, all_final, both_paged);

    // The untimed counts per window and tier in the API: every message in `count` of
    // these windows had no payload time (binary: malformed, JSON: no_time), each
    // tier's count is what it was sent in that window.
    let mut seen: BTreeMap<(i64, String), (u64, u64, u64)> = BTreeMap::new();
    for v in windows["windows"].as_array().unwrap() {
        let n = |f: &str| v[f].as_u64().unwrap_or_else(|| panic!("{f} in {v}"));
        assert_eq!(n("no_time_count") + n("malformed_count"), n("count"), "{v}");
        assert_eq!(n("out_of_bounds_count"), 0, "{v}");
        seen.insert(
            (
                v["window_start"].as_i64().unwrap(),
                v["tier"].as_str().unwrap().to_string(),
            ),
            (n("count"), n("no_time_count"), n("malformed_count")),
        );
    }
    for (w, (u, dn)) in &sent.windows {
        for (tier, want) in [("regional", *u), ("aggregate", *dn)] {
            let (count, no_time, malformed) = seen[&(*w, tier.to_string())];
            assert_eq!(count, want, "{tier} window {w}");
            assert!(
                no_time > 0 && malformed > 0,
                "{tier} window {w}: {no_time} no_time, {malformed} malformed"
            );
        }
    }
    assert!(observation_time_stored, "windows: {windows:#}");
    let edges = compare["edges"].as_array().unwrap();
    assert_eq!(edges.len(), sent.windows.len(), "{compare:#}");
    for e in edges {
        assert!(
            e["upstream_observation_time_count"].is_u64()
                && e["downstream_observation_time_count"].is_u64(),
            "{e}"
        );
    }
}
