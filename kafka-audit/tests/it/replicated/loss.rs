//! A real Kafka data loss, caught: one partition on nodes 1 (leader) and 2 (follower)
//! of R; the follower is SIGKILLed, the leader takes writes alone, then the leader is
//! SIGKILLed and the follower, started again, becomes leader. With `acks=1` and
//! `unclean.leader.election.enable=true` Kafka elects the stale follower and drops every
//! record only the old leader had, although it acknowledged them; the producer tier
//! counted what was acknowledged, the regional auditor counts what the log holds, and
//! serve pages the loss at producer → regional with the number ground truth gives
//! (acknowledged offsets against the log read back afterwards). With `acks=all`,
//! `min.insync.replicas=2` and unclean elections off, the same failures lose nothing
//! and page nothing.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::*;

const LEADER: i32 = 1;
const FOLLOWER: i32 = 2;
const RATE: u64 = 200;

/// What one run of the scenario measured.
struct Outcome {
    acked: Vec<Record>,
    held: Vec<Record>,
    lost: Vec<Record>,
    pages: Vec<(String, String, Option<i64>)>,
    loss_pages: Vec<serde_json::Value>,
}

async fn failover(name: &str, unclean: bool) -> Outcome {
    let cluster = Cluster::take().await;
    let topic_config: &[(&str, &str)] = if unclean {
        &[
            ("unclean.leader.election.enable", "true"),
            ("min.insync.replicas", "1"),
        ]
    } else {
        &[
            ("unclean.leader.election.enable", "false"),
            ("min.insync.replicas", "2"),
        ]
    };
    let mut rig = Rig::start(
        cluster,
        name,
        1,
        Some(&[&[LEADER, FOLLOWER]]),
        topic_config,
        "10m",
        // The auditor starts after the producer tier's last increments: no race.
        "5s",
    )
    .await;
    let producer = rig.producer_tier(if unclean {
        &[
            ("acks", "1"),
            ("enable.idempotence", "false"),
            ("message.timeout.ms", "60000"),
        ]
    } else {
        &[
            ("acks", "all"),
            ("enable.idempotence", "true"),
            ("message.timeout.ms", "300000"),
        ]
    });
    let topic = rig.topic.clone();
    let c = &rig.cluster;
    // A topic just created may not be in every node's metadata yet, so a second read
    // can answer from a node that does not know it: the check reads once per try and
    // reports what it read (asking again after the wait failed a run with "-1, []").
    let mut seen = Vec::new();
    let led = testkit::wait_until(Duration::from_secs(30), || {
        seen = c.partitions(&topic);
        seen.first().is_some_and(|p| p.leader == LEADER)
    });
    assert!(led, "{topic} not led by node {LEADER}: {seen:?}");
    tokio::task::block_in_place(|| {
        // Both replicas in sync.
        producer.send_batch(300, RATE);
        c.kill(FOLLOWER);
        // The controller fences the follower (broker session 4 s) and shrinks the ISR:
        // the leader is now alone.
        let alone = testkit::wait_until(Duration::from_secs(30), || {
            c.partitions(&topic)
                .first()
                .is_some_and(|p| p.isr == [LEADER])
        });
        assert!(alone, "ISR did not shrink: {:?}", c.partitions(&topic));
        let t = Instant::now();
        // acks=all: these wait in the producer for a second in-sync replica.
        let p = producer.clone();
        let alone_writes = std::thread::spawn(move || p.send_batch(400, RATE));
        std::thread::sleep(Duration::from_millis(400 * 1000 / RATE + 500));
        eprintln!(
            "{name}: {} acknowledged with the leader alone ({:?})",
            producer.acked_count(),
            t.elapsed()
        );
        c.kill(LEADER);
        c.start(FOLLOWER);
        if unclean {
            // The stale follower is elected (unclean.leader.election.interval.ms 1 s).
            let elected =
                testkit::wait_until(Duration::from_secs(60), || c.leader(&topic, 0) == FOLLOWER);
            assert!(elected, "no unclean election: {:?}", c.partitions(&topic));
        }
        c.start(LEADER);
        assert!(
            c.wait_in_sync(&[&topic], Duration::from_secs(120)),
            "{:?}",
            c.partitions(&topic)
        );
        alone_writes.join().expect("writes while alone");
        // Traffic goes on after the failover (on reused offsets after an unclean one).
        producer.send_batch(200, RATE);
    });
    producer.finish();
    // The regional auditor reads the log as Kafka holds it after the failover (see the
    // module documentation for an auditor that read the records before they were
    // dropped).
    rig.start_auditor();
    let c = &rig.cluster;
    let acked = producer.acked();
    let held = tokio::task::block_in_place(|| read_log(&c.bootstrap, &topic, 1));
    // Ground truth: an acknowledged record is lost when the log no longer holds it
    // (its key is unique; after an unclean election its offset may hold another record).
    let held_keys: BTreeSet<&str> = held.iter().map(|r| r.key.as_str()).collect();
    let lost: Vec<Record> = acked
        .iter()
        .filter(|r| !held_keys.contains(r.key.as_str()))
        .cloned()
        .collect();
    eprintln!(
        "{name}: sent {}, acknowledged {}, failed {}, log holds {}, lost {}",
        producer.sent(),
        acked.len(),
        producer.failed(),
        held.len(),
        lost.len()
    );
    let (want_producer, want_regional) = (per_window(&acked), per_window(&held));
    let final_ok = rig
        .wait_final(&want_producer, &want_regional, Duration::from_secs(180))
        .await;
    let stored_regional = rig.stored("regional").await;
    let stored_producer = rig.stored("producer").await;
    // Each faulty window is paged once its verdict is final: let the last ones in.
    let lossy_windows = per_window(&lost).len();
    rig.pages
        .wait_for(&topic, lossy_windows, Duration::from_secs(20))
        .await;
    rig.shutdown().await;
    assert!(
        final_ok,
        "windows not final with the expected counts; producer {:?}; regional {:?}",
        window_diff(&want_producer, &stored_producer),
        window_diff(&want_regional, &stored_regional)
    );
    let loss_pages = rig
        .pages
        .all()
        .into_iter()
        .filter(|p| p["topic"] == topic.as_str())
        .collect();
    Outcome {
        pages: rig.pages.of(&topic),
        acked,
        held,
        lost,
        loss_pages,
    }
}

pub async fn an_unclean_election_drops_acknowledged_records_and_the_loss_is_paged_exactly() {
    let o = failover("unclean", true).await;
    assert!(
        !o.lost.is_empty(),
        "the unclean election lost nothing (acked {}, held {})",
        o.acked.len(),
        o.held.len()
    );
    // One loss page per window that lost records, with exactly the records ground
    // truth says that window lost; nothing else, and nothing resolved.
    let lost = per_window(&o.lost);
    let mut want: Vec<(String, String, Option<i64>)> = lost
        .keys()
        .map(|&w| ("trigger".to_string(), "loss".to_string(), Some(w)))
        .collect();
    want.sort();
    let mut got = o.pages.clone();
    got.sort();
    assert_eq!(got, want, "pages: {:#?}", o.loss_pages);
    for p in &o.loss_pages {
        let w = p["window_start"].as_i64().unwrap();
        assert_eq!(
            (p["upstream"].as_str(), p["downstream"].as_str()),
            (Some("producer"), Some("regional"))
        );
        let difference = p["expected"].as_i64().unwrap() - p["observed"].as_i64().unwrap();
        assert_eq!(difference as u64, lost[&w], "window {w}: {p:#}");
    }
    eprintln!(
        "unclean: {} acknowledged records lost, paged in {} windows",
        o.lost.len(),
        lost.len()
    );
}

pub async fn acks_all_with_two_in_sync_replicas_loses_nothing_and_pages_nothing() {
    let o = failover("clean", false).await;
    assert!(o.lost.is_empty(), "lost: {:?}", o.lost);
    assert_eq!(o.acked.len(), 900, "every message acknowledged in the end");
    assert_eq!(o.pages, vec![], "pages: {:#?}", o.loss_pages);
}
