//! How a cycle reads and judges windows: bulk reads of pages of topics, the topics
//! with late or waiting windows, and the verdicts of one topic planned into the
//! index's [`IndexPlan`]. (Methods of [`Evaluator`], whose cycle is in `mod.rs`.)

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use store::{StoreError, TimeRange, VerdictReads};

use crate::engine::{self, EdgeWindow, ProgressRow, Topology, Verdict, WindowRow};
use crate::judging;
use crate::metrics::{KindLabels, ReasonLabels};

use super::index::{key_of, note_window_mismatches, IndexPlan, WindowMismatch};
use super::{CycleStats, Evaluator, KEY_LIMIT, LATE_MARGIN_MS, PAGE_ROWS};

/// One cycle's (or load step's) judging: what every topic is judged with (the
/// topology, the staged increments read before the window rows, `now`), and what it
/// adds up (the window-size mismatches found, the counts).
pub(super) struct Pass<'a> {
    pub topo: &'a Topology,
    pub staged: &'a HashMap<String, engine::Staged>,
    pub now: i64,
    pub mismatches: BTreeMap<(String, String), WindowMismatch>,
    pub stats: CycleStats,
}

impl Evaluator {
    /// A pass judging with `topo`, `staged` and `now`, starting from the window-size
    /// mismatches the index holds.
    pub(super) fn pass<'a>(
        &self,
        topo: &'a Topology,
        staged: &'a HashMap<String, engine::Staged>,
        now: i64,
    ) -> Pass<'a> {
        let mismatches = self
            .index
            .read()
            .expect("verdict index lock")
            .window_mismatches
            .clone();
        Pass {
            topo,
            staged,
            now,
            mismatches,
            stats: CycleStats::default(),
        }
    }

    /// Topic → windows older than `span_from` (and from `from_window` on) a cycle after
    /// the first re-judges: those with late increments and those waiting for an auditor;
    /// `None` when the read of late windows reached its cap.
    pub(super) async fn incremental_work(
        &self,
        last: i64,
        from_window: i64,
        span_from: i64,
    ) -> Result<Option<BTreeMap<String, BTreeSet<i64>>>, StoreError> {
        // Windows that received late increments. A read cut at its cap returned some
        // in no order: judging only those would leave a late loss out for good (its
        // key is not read again), so the caller judges every older window instead.
        let mut keys = self
            .store
            .changed_windows(last - LATE_MARGIN_MS, from_window, KEY_LIMIT)
            .await?;
        if keys.len() >= KEY_LIMIT as usize {
            tracing::warn!(
                limit = KEY_LIMIT,
                "more windows with late increments than one read holds (a flood of new topics?): every older window of the horizon is judged again"
            );
            return Ok(None);
        }
        // Windows waiting for an auditor, or for the downstream's evidence (pending,
        // stalled, or delayed while settling: docs/web.md, Verdicts, rules 3 and 4), and
        // those whose proof was withdrawn.
        {
            let index = self.index.read().expect("verdict index lock");
            keys.extend(index.rejudge.iter().cloned());
            keys.extend(
                index
                    .entries
                    .values()
                    .filter(|e| e.lifecycle != engine::Lifecycle::Final)
                    .map(|e| (e.topic.clone(), e.window_start)),
            );
        }
        let mut work: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
        for (t, w) in keys {
            // Windows not loaded yet are judged by the load step that reaches them;
            // those from `span_from` on were just judged.
            if w >= from_window && w < span_from {
                work.entry(t).or_default().insert(w);
            }
        }
        Ok(Some(work))
    }

    /// Judges every window with rows in `range`, all topics, reading them in pages of
    /// topics (a few bulk reads instead of two queries per topic).
    pub(super) async fn load_range(
        &mut self,
        pass: &mut Pass<'_>,
        range: TimeRange,
        plan: &mut IndexPlan,
    ) -> Result<(), StoreError> {
        let (topo, now) = (pass.topo, pass.now);
        let store = self.store.clone();
        let fetch = move |after: Option<String>, limit: u32| {
            let store = store.clone();
            tokio::spawn(
                async move { store.windows_in_range(range, after.as_deref(), limit).await },
            )
        };
        // `requested`: the `after_topic` of the page in flight.
        let mut requested: Option<String> = None;
        let mut next = Some(fetch(None, self.page_topics));
        while let Some(read) = next.take() {
            let page = read.await.expect("a page read does not panic")?;
            // A capped page may have cut a topic short: read fewer topics at a time.
            if page.rows.len() >= store::MAX_READ_ROWS && self.page_topics > 1 {
                self.page_topics = (self.page_topics / 2).max(1);
                next = Some(fetch(requested.clone(), self.page_topics));
                continue;
            }
            // One topic alone fills a read: its windows from the last row's start on
            // may be cut short, and are not judged (see `reads`).
            let cut =
                crate::reads::rows_cut(&page.rows).zip(page.rows.last().map(|r| r.topic.clone()));
            let rows_read = page.rows.len();
            let topics = page
                .rows
                .windows(2)
                .filter(|p| p[0].topic != p[1].topic)
                .count()
                + usize::from(!page.rows.is_empty());
            if let Some(per_topic) = rows_read.checked_div(topics) {
                self.page_topics = (PAGE_ROWS / per_topic.max(1)).clamp(1, 10_000) as u32;
            }
            // The next page is read while this one is judged.
            requested = page.next_after_topic;
            if let Some(after) = &requested {
                next = Some(fetch(Some(after.clone()), self.page_topics));
            }
            // The read of every topic's progress was capped: read this page's topics'
            // progress in one read (a read per topic was one query per topic judged).
            self.page_progress = None;
            if let (true, Some(first), Some(last)) =
                (self.progress_capped, page.rows.first(), page.rows.last())
            {
                self.page_progress = Some(Arc::new(
                    crate::reads::PageProgress::read(
                        &self.store,
                        &first.topic,
                        &last.topic,
                        topo,
                        now,
                    )
                    .await?,
                ));
            }
            // Rows come by topic: each topic's run is judged in place (no copy).
            let mut rest = page.rows.as_slice();
            while let Some(first) = rest.first() {
                let n = rest.partition_point(|r| r.topic == first.topic);
                let (group, next) = rest.split_at(n);
                rest = next;
                let topic_cut = cut
                    .as_ref()
                    .filter(|(_, t)| *t == first.topic)
                    .map(|(w, _)| *w);
                self.judge_topic(
                    pass,
                    &first.topic,
                    None,
                    group,
                    (topic_cut, range.end_ms),
                    plan,
                )
                .await?;
            }
        }
        // Only for the page it was read for.
        self.page_progress = None;
        Ok(())
    }

    /// Judges `windows` of `topic` (`None`: every window `rows` has that is aligned on
    /// the topology's window) from its `rows` and puts the verdicts into the index.
    /// `read`: where the read of `rows` was cut (see `reads::rows_cut`) and the end of
    /// its range: windows from the cut on are answered `pending`, never judged from a
    /// part of their rows.
    pub(super) async fn judge_topic(
        &mut self,
        pass: &mut Pass<'_>,
        topic: &str,
        windows: Option<Vec<i64>>,
        rows: &[WindowRow],
        read: (Option<i64>, i64),
        plan: &mut IndexPlan,
    ) -> Result<(), StoreError> {
        let (topo, now) = (pass.topo, pass.now);
        let (cut, range_end) = read;
        note_window_mismatches(&mut pass.mismatches, topic, rows, topo.window.as_millis());
        let aligned = |w: &i64| topo.window.window_of(*w).start_ms == *w;
        let windows: Vec<i64> = match windows {
            Some(mut ws) => {
                ws.retain(aligned);
                ws
            }
            None => {
                // Rows come by window start: sorting them is one pass.
                let mut ws: Vec<i64> = rows
                    .iter()
                    .map(|r| r.window_start_ms)
                    .filter(aligned)
                    .collect();
                ws.sort_unstable();
                ws.dedup();
                ws
            }
        };
        let fetched;
        let progress = self.progress.clone();
        let page = self.page_progress.clone();
        let (p, progress_capped): (&[ProgressRow], bool) = match progress.get(topic) {
            Some(p) if !self.progress_capped => (p, false),
            // The read of every topic's progress was capped: this page's read, when
            // it holds the topic whole (a topic of no rows there has none)...
            _ if self.progress_capped => match page.as_deref().filter(|pg| pg.holds(topic)) {
                Some(page) => (page.rows_of(topic), false),
                // ... else this topic's own (a missing auditor would look stalled),
                // itself bounded.
                None => {
                    fetched = crate::reads::progress(&self.store, Some(topic), topo, now).await?;
                    (&fetched.rows, fetched.capped)
                }
            },
            _ => (&[], false),
        };
        self.count_refused_evidence(topo, p, now);
        let no_staged = engine::Staged::new();
        let inputs = judging::Inputs {
            topic,
            rows,
            cut,
            range_end,
            progress: p,
            progress_capped,
            staged: pass.staged.get(topic).unwrap_or(&no_staged),
            now,
        };
        pass.stats.windows += self.apply(topo, &inputs, windows, plan);
        pass.stats.topics += 1;
        Ok(())
    }

    /// Counts the replication evidence among `progress` (one topic's) that rule 0 does
    /// not use, each piece once (`replication_evidence_refused`).
    fn count_refused_evidence(&mut self, topo: &Topology, progress: &[ProgressRow], now: i64) {
        for (r, why) in topo.refused_evidence(progress, now) {
            let key = (
                r.topic.clone(),
                r.tier.clone(),
                r.datacenter.clone(),
                r.partition,
                r.next_offset,
                r.emitted_at_ms,
                r.received_at_ms,
            );
            if self
                .refused_evidence
                .insert(key, r.received_at_ms)
                .is_none()
            {
                self.metrics
                    .replication_evidence_refused
                    .get_or_create(&ReasonLabels {
                        reason: why.as_str().into(),
                    })
                    .inc();
            }
        }
    }

    /// Judges the windows of `windows` of one topic (see [`judging::judge`]) and plans
    /// their verdicts into `plan`, with the losses they prove first.
    fn apply(
        &mut self,
        topo: &Topology,
        inputs: &judging::Inputs,
        windows: Vec<i64>,
        plan: &mut IndexPlan,
    ) -> usize {
        // Only this evaluator writes the index: it holds the previous verdicts.
        let lock = Arc::clone(&self.index);
        let index = lock.read().expect("verdict index lock");
        let judged = judging::judge(topo, inputs, windows, judging::Scope::Edges, &index.proven);
        let newest = self
            .newest_window
            .entry(inputs.topic.to_string())
            .or_insert(i64::MIN);
        *newest = (*newest).max(judged.windows.iter().copied().max().unwrap_or(i64::MIN));
        let mut by_window: BTreeMap<i64, Vec<EdgeWindow>> =
            judged.windows.iter().map(|w| (*w, Vec::new())).collect();
        for v in &judged.verdicts {
            if v.lifecycle == engine::Lifecycle::Final {
                self.update_completeness(v);
            }
        }
        // A full index keeps no more proofs (nor records them: forged evidence would
        // write them again at every cycle); what this cycle planned already takes its
        // room too, so one cycle records no more than the index can hold.
        for proof in judged.proofs {
            if index.max_entries == 0
                || index.proven.len().saturating_add(plan.proven.len()) < index.max_entries
            {
                plan.proven.push(proof);
            } else {
                self.metrics.proofs_refused.inc();
            }
        }
        for v in judged.verdicts {
            if v.verdict.is_anomaly() {
                let known = index
                    .entries
                    .get(&key_of(&v))
                    .is_some_and(|old| old.verdict == v.verdict);
                if !known {
                    self.metrics
                        .anomalies_detected
                        .get_or_create(&KindLabels {
                            kind: v.verdict.as_str().into(),
                        })
                        .inc();
                }
            }
            // A window's entry is kept even when all `ok`: it clears the old verdicts.
            let judged = by_window.entry(v.window_start).or_default();
            if v.verdict != Verdict::Ok {
                judged.push(v);
            }
        }
        drop(index);
        plan.windows.push((inputs.topic.to_string(), by_window));
        judged.windows.len()
    }
}
