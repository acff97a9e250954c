//! Two of R's three nodes down at once, for longer than `stall_after`: the audit
//! topic's in-sync replicas are below its `min.insync.replicas` (2) and the controller
//! quorum is gone with them, so no transaction of the auditor can commit. The auditor
//! must stop publishing without losing or double-counting anything, serve must page
//! `stalled` (the auditor's progress stops) and resolve it once the nodes are back,
//! and in the end every window's stored count equals the log's.

use std::time::{Duration, Instant};

use super::*;

const PARTITIONS: i32 = 3;
const RATE: u64 = 100;
const STALL_AFTER: &str = "15s";
/// Longer than the outage (20 s and more) plus the nodes' return: the producer tier's
/// acknowledgements of the records sent meanwhile come only then, and a shorter grace
/// paged them as duplication at the regional tier until they did (see serve_config).
/// Requests in flight through the outage time out, and the idempotent producer then
/// asks for a new producer id, which a restarted node has handed out only after
/// ~90 s (a fresh-clone run): grace covers that too.
const GRACE: &str = "180s";

pub async fn two_nodes_down_stall_the_auditor_which_is_paged_resolved_and_exact() {
    let mut steady = Steady::start("twodown", PARTITIONS, RATE, STALL_AFTER, GRACE).await;
    let rig = &steady.rig;
    // As in kills: bounded generously for a loaded machine.
    rig.wait_counting_started(&steady.producer, Duration::from_secs(240))
        .await;
    let topic = rig.topic.clone();
    // The survivor is not the audit topic's leader: its partition loses its leader too.
    let audit_leader = rig.cluster.leader(&rig.audit_topic, 0);
    let down: Vec<i32> = (1..=3).filter(|&n| n != audit_leader % 3 + 1).collect();
    tokio::task::block_in_place(|| {
        let c = &rig.cluster;
        c.kill(down[0]);
        // Fenced and out of every ISR while the quorum still has a majority.
        assert!(
            testkit::wait_until(Duration::from_secs(30), || c
                .partitions(&rig.audit_topic)
                .iter()
                .all(|p| !p.isr.contains(&down[0]))),
            "{:?}",
            c.partitions(&rig.audit_topic)
        );
    });
    // A single kill may already have stalled the auditor past stall_after on a loaded
    // machine: the second node dies only once every page so far is resolved, and the
    // page of this outage is one that comes after.
    let settled = testkit::wait_until_async(Duration::from_secs(180), || async {
        let pages = rig.pages.all();
        page_keys(&pages, "stalled", "trigger") == page_keys(&pages, "stalled", "resolve")
    })
    .await;
    assert!(
        settled,
        "pages before the outage unresolved: {:#?}",
        rig.pages.all()
    );
    let before = rig.pages.all().len();
    let outage = tokio::task::block_in_place(|| {
        rig.cluster.kill(down[1]);
        Instant::now()
    });
    // Nothing published while they are down: the stored count stands still, and the
    // auditor is paged stalled once its last progress is older than stall_after.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let frozen = rig.stored_total("regional").await;
    let paged = testkit::wait_until_async(Duration::from_secs(90), || async {
        rig.pages.all()[before..].iter().any(|p| {
            p["action"] == "trigger" && p["verdict"] == "stalled" && p["window_start"].is_null()
        })
    })
    .await;
    // Down for longer than stall_after in any case (the auditor's last progress may be
    // older than the second kill: the first one already held it up).
    crate::e2e::sleep_until_ms(common::now_ms() + 20_000 - outage.elapsed().as_millis() as i64)
        .await;
    let still_frozen = rig.stored_total("regional").await;
    let down_for = outage.elapsed();
    tokio::task::block_in_place(|| {
        let c = &rig.cluster;
        c.start(down[0]);
        c.start(down[1]);
        assert!(
            c.wait_in_sync(
                &[
                    &topic,
                    &rig.audit_topic,
                    "__consumer_offsets",
                    "__transaction_state"
                ],
                Duration::from_secs(180)
            ),
            "replicas not back in sync"
        );
    });
    let back = Instant::now();
    let resumed = testkit::wait_until_async(Duration::from_secs(180), || async {
        rig.stored_total("regional").await > still_frozen
    })
    .await;
    let resumed_after = back.elapsed();
    // Traffic a while longer, then ground truth.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (acked, log) = tokio::task::block_in_place(|| steady.stop_traffic());
    let rig = &mut steady.rig;
    let (want_producer, want_regional) = (per_window(&acked), per_window(&log));
    // Past the last window's end + GRACE.
    let final_ok = rig
        .wait_final(&want_producer, &want_regional, Duration::from_secs(360))
        .await;
    // Every stalled page resolves: the auditor reports again and its windows are final.
    let all_resolved = testkit::wait_until_async(Duration::from_secs(60), || async {
        let pages = rig.pages.all();
        page_keys(&pages, "stalled", "trigger") == page_keys(&pages, "stalled", "resolve")
    })
    .await;
    let (stored_producer, stored_regional) =
        (rig.stored("producer").await, rig.stored("regional").await);
    let beyond = written_beyond_acks(&acked, &log);

    let pages = rig.pages.all();
    eprintln!(
        "two down: {} acknowledged; down {down_for:?}; counting resumed {resumed_after:?} after the \
         nodes were back; pages {:?}",
        acked.len(),
        rig.pages.of(&topic)
    );
    assert!(paged, "stalled not paged: {pages:#?}");
    assert_eq!(
        frozen, still_frozen,
        "counts published while two nodes were down"
    );
    assert!(resumed, "counting did not resume");
    assert!(all_resolved, "unresolved stalled pages: {pages:#?}");
    assert_exact_and_final(
        final_ok,
        (&want_producer, &stored_producer),
        (&want_regional, &stored_regional),
    );
    // Stalled, resolved; and a record the idempotent producer wrote twice, if any.
    assert_pages_are_the_logs_duplicates(&rig.pages, &topic, &beyond, &["stalled"]).await;
    rig.shutdown().await;
}
