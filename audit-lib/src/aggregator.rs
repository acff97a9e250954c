//! Records messages into per-(topic, window) statistics and drains them as audit
//! message increments.
//!
//! The caller owns time: `record` uses the observation's `observed_at_ms`, `drain`
//! takes `now_ms` for `emitted_at`. State is bounded: when more than
//! `max_open_windows` windows are open, the oldest are moved to a pending list that
//! the next `drain` emits (never dropped).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::config::{CompiledConfig, CompiledRule, ConfigError, EventTimeConfig};
use crate::extract::{classify, Classification};
use crate::message::{AuditMessage, Identity};
use crate::observation::Observation;
use crate::stats::WindowStats;
use crate::window::WindowSize;

/// Bounds and options of an aggregator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Open (topic, window) pairs kept in memory before the oldest are set aside for
    /// the next drain. At least 1.
    pub max_open_windows: usize,
    /// Track per-partition min/max offsets in each window.
    pub track_offsets: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_open_windows: 10_000,
            track_offsets: true,
        }
    }
}

struct TopicState {
    name: Box<str>,
    rule: Arc<CompiledRule>,
    /// Keyed by window index (`floor(t / size)`); ordered so the oldest is first.
    windows: BTreeMap<i64, WindowStats>,
}

pub struct Aggregator {
    identity: Identity,
    config: CompiledConfig,
    window_size: WindowSize,
    limits: Limits,
    topics: Vec<TopicState>,
    topic_index: HashMap<Box<str>, usize>,
    /// Most consumers see long runs of one topic: compare before hashing.
    last_topic: usize,
    open: usize,
    /// Windows evicted by the open-window limit, emitted by the next drain.
    pending: Vec<(usize, i64, WindowStats)>,
}

impl Aggregator {
    pub fn new(
        identity: Identity,
        config: EventTimeConfig,
        limits: Limits,
    ) -> Result<Self, ConfigError> {
        Ok(Self::with_compiled(identity, config.compile()?, limits))
    }

    pub fn with_compiled(identity: Identity, config: CompiledConfig, limits: Limits) -> Self {
        Aggregator {
            identity,
            window_size: config.window_size,
            config,
            limits: Limits {
                max_open_windows: limits.max_open_windows.max(1),
                ..limits
            },
            topics: Vec::new(),
            topic_index: HashMap::new(),
            last_topic: usize::MAX,
            open: 0,
            pending: Vec::new(),
        }
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    pub fn window_size(&self) -> WindowSize {
        self.window_size
    }

    pub fn config(&self) -> &CompiledConfig {
        &self.config
    }

    #[inline]
    fn topic_slot(&mut self, topic: &str) -> usize {
        if let Some(t) = self.topics.get(self.last_topic) {
            if &*t.name == topic {
                return self.last_topic;
            }
        }
        let slot = match self.topic_index.get(topic) {
            Some(&i) => i,
            None => {
                let i = self.topics.len();
                self.topics.push(TopicState {
                    name: topic.into(),
                    rule: self.config.rule_for(topic).clone(),
                    windows: BTreeMap::new(),
                });
                self.topic_index.insert(topic.into(), i);
                i
            }
        };
        self.last_topic = slot;
        slot
    }

    /// Counts one message and returns how it was classified.
    #[inline]
    pub fn record(&mut self, obs: &Observation<'_>) -> Classification {
        let slot = self.topic_slot(obs.topic);
        let window_size = self.window_size;
        let track_offsets = self.limits.track_offsets;
        let topic = &mut self.topics[slot];
        let class = classify(&topic.rule, obs);
        let index = window_size.index_of(class.counted_at(obs.observed_at_ms));
        let mut opened = false;
        let stats = topic.windows.entry(index).or_insert_with(|| {
            opened = true;
            WindowStats::default()
        });
        stats.record(obs, &class, track_offsets);
        if opened {
            self.open += 1;
            while self.open > self.limits.max_open_windows {
                self.evict_oldest();
            }
        }
        class
    }

    /// Moves the oldest open window (smallest window start over all topics) to the
    /// pending list.
    fn evict_oldest(&mut self) {
        let oldest = self
            .topics
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.windows.keys().next().map(|k| (*k, i)))
            .min();
        if let Some((index, slot)) = oldest {
            if let Some(stats) = self.topics[slot].windows.remove(&index) {
                self.pending.push((slot, index, stats));
                self.open -= 1;
            }
        }
    }

    /// Number of open windows held in memory (pending ones not included).
    pub fn open_windows(&self) -> usize {
        self.open
    }

    /// Windows set aside by the limit, waiting for the next drain.
    pub fn pending_windows(&self) -> usize {
        self.pending.len()
    }

    /// True when nothing has been recorded since the last drain.
    pub fn is_empty(&self) -> bool {
        self.open == 0 && self.pending.is_empty()
    }

    /// Emits everything recorded since the last drain as increments with fresh UUIDs
    /// and `emitted_at = now_ms`, one per (topic, window), ordered by topic then window.
    /// Afterwards the aggregator is empty.
    pub fn drain(&mut self, now_ms: i64) -> Vec<AuditMessage> {
        let mut all: BTreeMap<(usize, i64), WindowStats> = BTreeMap::new();
        for (slot, index, stats) in self.pending.drain(..) {
            match all.entry((slot, index)) {
                std::collections::btree_map::Entry::Occupied(mut e) => e.get_mut().merge(&stats),
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(stats);
                }
            }
        }
        for (slot, topic) in self.topics.iter_mut().enumerate() {
            for (index, stats) in std::mem::take(&mut topic.windows) {
                match all.entry((slot, index)) {
                    std::collections::btree_map::Entry::Occupied(mut e) => {
                        e.get_mut().merge(&stats)
                    }
                    std::collections::btree_map::Entry::Vacant(e) => {
                        e.insert(stats);
                    }
                }
            }
        }
        self.open = 0;
        let mut topic_order: Vec<usize> = (0..self.topics.len()).collect();
        topic_order.sort_by(|a, b| self.topics[*a].name.cmp(&self.topics[*b].name));
        let mut rank = vec![0usize; self.topics.len()];
        for (r, slot) in topic_order.iter().enumerate() {
            rank[*slot] = r;
        }
        let mut out: Vec<(usize, i64, WindowStats)> =
            all.into_iter().map(|((s, i), st)| (s, i, st)).collect();
        out.sort_by_key(|(s, i, _)| (rank[*s], *i));
        out.into_iter()
            .map(|(slot, index, mut stats)| {
                stats.offsets.sort_by_key(|r| r.partition);
                AuditMessage::increment(
                    &self.identity,
                    &*self.topics[slot].name,
                    self.window_size.window_at(index),
                    stats,
                    now_ms,
                )
            })
            .collect()
    }
}
