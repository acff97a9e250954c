//! A lagging auditor never pages a false loss (docs/web.md, Verdicts, rule 3), end to
//! end: traffic now (event time = send time) replicated from cluster A to cluster B
//! with 37 messages dropped in one window and 11 duplicated in another; the downstream
//! auditor is started two windows after the traffic (past the grace of its first
//! windows, as after a deploy) and reads its backlog over several reports.
//! Over the whole run the webhook receiver gets exactly one page per injected fault, in
//! its window, and no page for a window that ends correct — a page that fires and later
//! resolves has still woken someone.
//!
//! What it does not single out: it passes with any of the engine's "record time counts
//! only with a known lag", the auditor's report of unread partitions and the minimum
//! watermark (docs/audit-message-v1.md, Progress) reverted, and with all three reverted
//! at once. The late auditor fetches every partition from its first fetch (one broker),
//! and within a partition the records before a record time are read, and counted in the
//! same report, before it; so no report claims a window its counts miss. The
//! unread-partition report is what a late auditor needs and `transactional.rs`
//! (`a_partition_not_read_yet_holds_its_windows_back`) fails without it; the lag rule
//! has its table in `web/src/engine/tests/rules.rs` and `web/tests/it/edges.rs`
//! (`late_auditor_catching_up_pages_nothing_postgres`).

use crate::e2e;

use e2e::*;

const PARTITIONS: i32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_downstream_auditor_started_late_pages_only_the_real_faults() {
    let _alone = crate::ALONE.lock().await;
    let t = OneTopic::start("late-e2e", PARTITIONS).await;
    let (rig, topic, state) = (&t.rig, t.topic.as_str(), &t.state);
    let traffic = rig.spawn_traffic(topic, Traffic::loss_then_duplication(PARTITIONS));
    // The downstream auditor starts two windows (and a grace) after the traffic and
    // catches up over several reports: each partition is fetched again only 100 ms
    // after its fetched messages were taken, a few KB at a time.
    let (sent, all_final, both_paged) = t.late_downstream(traffic).await;
    let judged = anomalies(state, topic, sent.first(), sent.end());
    t.shutdown([]).await;
    t.assert_loss_then_duplication(&sent, &judged, all_final, both_paged);
}
