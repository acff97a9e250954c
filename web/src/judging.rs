//! One judging path: what a window of a topic gets, for the evaluator, `/compare` and
//! the completeness gate alike.
//!
//! - The inputs are read in one order: the auditors' progress, then the staged
//!   increments, then the window rows. Increments that came with the progress read
//!   first are then either still staged (seen by the second read) or already added up
//!   (seen by the third): see `AuditStore::staged_windows`. [`TopicRead::read`] reads
//!   one topic so; the evaluator reads in bulk in the same order (every topic's
//!   progress, then the horizon's staged increments, then pages of window rows). Every
//!   read is capped ([`crate::reads`]).
//! - [`judge`] is pure: from those inputs, the proofs held and `now`, the verdicts
//!   users see. The engine's rules (rule 0 included); what the capped reads could not
//!   support held `pending`, windows the read may not have reached answered `pending`
//!   too; and a loss proven while its window was open held `loss`
//!   ([`hold_proven_loss`]).

use std::collections::HashMap;
use std::fmt::Display;

use store::{Store, StoreError, TimeRange, VerdictReads};

use crate::engine::{
    self, Edge, EdgeWindow, ProgressRow, Staged, TopicInputs, Topology, Verdict, WindowRow,
};
use crate::eval::index::{key_of, VerdictKey};
use crate::reads::{self, TopicProgress, Unread};

/// One topic's inputs, read in the order that keeps its verdicts consistent.
#[derive(Debug)]
pub struct TopicRead {
    pub topic: String,
    /// Within the forget horizon, capped.
    pub progress: TopicProgress,
    /// Staged increments of windows from the range's start on.
    pub staged: Staged,
    /// The window rows of the range, ordered by window start, capped.
    pub rows: Vec<WindowRow>,
    pub range: TimeRange,
}

impl TopicRead {
    /// Reads `topic`'s progress, then its staged increments, then its window rows of
    /// `range`.
    pub async fn read(
        store: &Store,
        topo: &Topology,
        topic: &str,
        range: TimeRange,
        now: i64,
    ) -> Result<TopicRead, StoreError> {
        let progress = reads::progress(store, Some(topic), topo, now).await?;
        let staged: Staged = store
            .staged_windows(Some(topic), range.start_ms)
            .await?
            .into_iter()
            .map(|(_, tier, dc, w)| (tier, dc, w))
            .collect();
        let rows = store.topic_windows(topic, range).await?;
        Ok(TopicRead {
            topic: topic.to_string(),
            progress,
            staged,
            rows,
            range,
        })
    }

    /// The start of every window of the range (the range starts on a window's start).
    pub fn window_starts(&self, topo: &Topology) -> Vec<i64> {
        topo.window
            .windows_between(self.range.start_ms, self.range.end_ms)
            .map(|w| w.start_ms)
            .collect()
    }

    /// What [`judge`] judges from, at `now`.
    pub fn inputs(&self, now: i64) -> Inputs<'_> {
        Inputs {
            topic: &self.topic,
            rows: &self.rows,
            cut: reads::rows_cut(&self.rows),
            range_end: self.range.end_ms,
            progress: &self.progress.rows,
            progress_capped: self.progress.capped,
            staged: &self.staged,
            now,
        }
    }
}

/// Every topic's staged increments whose window starts in `[from, to)`, by topic: the
/// evaluator's bulk read, between the progress and the window rows.
pub async fn staged_by_topic(
    store: &Store,
    from: i64,
    to: i64,
) -> Result<HashMap<String, Staged>, StoreError> {
    let mut staged: HashMap<String, Staged> = HashMap::new();
    for (topic, tier, dc, w) in store.staged_windows(None, from).await? {
        if w < to {
            staged.entry(topic).or_default().insert((tier, dc, w));
        }
    }
    Ok(staged)
}

/// What one topic's verdicts are judged from, as read (see the module's read order).
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    pub topic: &'a str,
    /// Ordered by window start, as read (rows not of the topology's window included:
    /// they are not judged).
    pub rows: &'a [WindowRow],
    /// Where the read of `rows` was cut ([`reads::rows_cut`]): windows from it on may
    /// lack rows.
    pub cut: Option<i64>,
    /// The end of the range `rows` were read for.
    pub range_end: i64,
    pub progress: &'a [ProgressRow],
    /// The read of `progress` was capped.
    pub progress_capped: bool,
    pub staged: &'a Staged,
    pub now: i64,
}

/// Which verdicts of a window are asked for.
#[derive(Debug, Clone, Copy)]
pub enum Scope<'a> {
    /// Every edge, in each downstream datacenter the topic has rows or progress in (a
    /// mapped edge: its mapping's).
    Edges,
    /// One edge in one downstream datacenter named by the caller, every window
    /// answered whether or not it has data or progress there.
    Edge { edge: &'a Edge, datacenter: &'a str },
}

/// The verdicts users see of one topic's windows.
#[derive(Debug)]
pub struct Judged {
    /// The windows judged: those asked for, with the ones the read may have cut short,
    /// sorted.
    pub windows: Vec<i64>,
    pub verdicts: Vec<EdgeWindow>,
    /// The losses these verdicts prove first (no proof of their window is held), with
    /// the proof, in the order of `verdicts`: the evaluator records them.
    pub proofs: Vec<(VerdictKey, String)>,
}

/// Judges `windows` (aligned window starts) of the topic of `inputs` in `scope`, with
/// the proofs held (`proven`, the index's): the engine's verdicts (rules 0 to 6), then
/// what the reads could not return held `pending` (a window from the read's cut on is
/// judged even when not asked for, and answered even when the read returned no row of
/// it), then a loss proven while its window was open held `loss`.
pub fn judge<P: Display>(
    topo: &Topology,
    inputs: &Inputs,
    mut windows: Vec<i64>,
    scope: Scope,
    proven: &HashMap<VerdictKey, P>,
) -> Judged {
    let unread = Unread::of(inputs.rows, inputs.cut, inputs.progress_capped);
    let not_read = unread.windows_not_read(topo, inputs.range_end);
    if !not_read.is_empty() {
        windows.extend(&not_read);
        windows.sort_unstable();
        windows.dedup();
    }
    let rows = reads::of_window(inputs.rows, topo);
    let engine_inputs = TopicInputs {
        topic: inputs.topic,
        rows: &rows,
        progress: inputs.progress,
        staged: inputs.staged,
        now: inputs.now,
    };
    let mut verdicts = match scope {
        Scope::Edges => {
            let mut verdicts = topo.evaluate_windows(&engine_inputs, &windows);
            if !unread.is_empty() {
                unread.add_unjudged(topo, &engine_inputs, &not_read, &mut verdicts);
            }
            verdicts
        }
        // Every window of `windows` has its verdict there.
        Scope::Edge { edge, datacenter } => {
            topo.evaluate_edge_datacenter(&engine_inputs, edge, datacenter, &windows)
        }
    };
    unread.hold(topo, &mut verdicts);
    let proofs = verdicts
        .iter_mut()
        .filter_map(|v| hold_proven_loss(proven, v))
        .collect();
    Judged {
        windows,
        verdicts,
        proofs,
    }
}

/// A loss proven while the window was open stays its verdict: `proven` holds the first
/// proof of each window (the index's, [`crate::eval::VerdictIndex::proven`]), and a
/// later verdict that is not a proven loss (the replicator fell behind on newer
/// records: in flight; or the final verdict after more records arrived) is answered
/// `loss`, its reason the proof's followed by what the counts say now. Records that
/// arrive after a proof cannot undo it: they are copies made again, or the proof's
/// evidence was wrong (docs/web.md, "Replication evidence"). Returns the proof `v`
/// makes, when it is a window's first.
pub fn hold_proven_loss<P: Display>(
    proven: &HashMap<VerdictKey, P>,
    v: &mut EdgeWindow,
) -> Option<(VerdictKey, String)> {
    let proof_now = v.so_far == Some(engine::SoFar::Loss);
    // Every verdict of every cycle comes here: no key is built when nothing can match.
    if !proof_now && proven.is_empty() {
        return None;
    }
    let key = key_of(v);
    if proof_now {
        return (!proven.contains_key(&key)).then(|| (key, v.reason.clone()));
    }
    let proof = proven.get(&key)?;
    v.reason = format!(
        "a loss was proven while the window was open ({proof}); now {}: {}",
        v.verdict.as_str(),
        v.reason
    );
    v.verdict = Verdict::Loss;
    v.so_far = Some(engine::SoFar::Loss);
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Lifecycle, TopologyConfig};

    use crate::reads::tests::{caught_up, row, MIN, NOW, W};

    /// producer → regional, 10-minute windows.
    fn topology() -> Topology {
        let cfg: TopologyConfig = toml::from_str(
            r#"
            window = "10m"
            tiers = [{ name = "producer", progress = false }, { name = "regional" }]
            [[edges]]
            upstream = "producer"
            downstream = "regional"
            "#,
        )
        .unwrap();
        Topology::new(cfg).unwrap()
    }

    /// What a read of `rows` and [`caught_up`] progress gives, cut at `cut`.
    fn inputs<'a>(
        rows: &'a [WindowRow],
        progress: &'a [ProgressRow],
        staged: &'a Staged,
        cut: Option<i64>,
        range_end: i64,
    ) -> Inputs<'a> {
        Inputs {
            topic: "orders",
            rows,
            cut,
            range_end,
            progress,
            progress_capped: false,
            staged,
            now: NOW,
        }
    }

    /// The verdicts of `windows` in both scopes (every edge; the one edge in dc1).
    fn both_scopes(
        inputs: &Inputs,
        windows: &[i64],
        proven: &HashMap<VerdictKey, String>,
    ) -> [Judged; 2] {
        let topo = topology();
        let edge = &topo.edges[0];
        let scopes = [
            Scope::Edges,
            Scope::Edge {
                edge,
                datacenter: "dc1",
            },
        ];
        scopes.map(|scope| judge(&topo, inputs, windows.to_vec(), scope, proven))
    }

    #[test]
    fn a_proof_held_keeps_a_complete_window_lost_in_every_scope() {
        let rows = vec![row("producer", 1_000, false), row("regional", 1_000, false)];
        let (progress, staged) = (caught_up(), Staged::new());
        let inputs = inputs(&rows, &progress, &staged, None, W + 10 * MIN);
        let mut proven = HashMap::new();
        for judged in both_scopes(&inputs, &[W], &proven) {
            assert_eq!(judged.verdicts.len(), 1, "{judged:?}");
            assert_eq!(judged.verdicts[0].verdict, Verdict::Ok);
        }
        proven.insert(
            key_of(&both_scopes(&inputs, &[W], &proven)[0].verdicts[0]),
            "shown".to_string(),
        );
        for judged in both_scopes(&inputs, &[W], &proven) {
            let v = &judged.verdicts[0];
            assert_eq!((v.verdict, v.lifecycle), (Verdict::Loss, Lifecycle::Final));
            assert!(
                v.reason
                    .starts_with("a loss was proven while the window was open (shown)"),
                "{}",
                v.reason
            );
            assert!(judged.proofs.is_empty(), "a held proof is not made again");
        }
    }

    #[test]
    fn a_window_past_the_reads_cut_is_judged_and_pending_in_every_scope() {
        let rows = vec![row("producer", 1_000, false), row("regional", 1_000, false)];
        let (progress, staged) = (caught_up(), Staged::new());
        // The read was cut at the next window, which it returned no row of.
        let inputs = inputs(&rows, &progress, &staged, Some(W + 10 * MIN), W + 20 * MIN);
        for judged in both_scopes(&inputs, &[W], &HashMap::new()) {
            assert_eq!(judged.windows, vec![W, W + 10 * MIN]);
            let next: Vec<_> = judged
                .verdicts
                .iter()
                .filter(|v| v.window_start == W + 10 * MIN)
                .collect();
            assert_eq!(next.len(), 1, "{judged:?}");
            assert_eq!(next[0].verdict, Verdict::Pending);
            assert!(
                next[0].reason.starts_with("not judged"),
                "{}",
                next[0].reason
            );
        }
    }
}
