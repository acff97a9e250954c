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
use crate::stats::{Counted, WindowStats};
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
    windows: Windows,
}

/// A topic's open windows, keyed by window index (`floor(t / size)`) and ordered so
/// the oldest is first. The statistics sit in a slab (never moved; slots of evicted
/// windows are reused) and the last window used is remembered: consecutive messages
/// mostly fall in one window, and then finding it is one comparison instead of a tree
/// search. Worst case (every message in another window) stays a tree search.
#[derive(Default)]
struct Windows {
    order: BTreeMap<i64, usize>,
    slab: Vec<WindowStats>,
    free: Vec<usize>,
    last: Option<(i64, usize)>,
}

impl Windows {
    /// The window's statistics, and whether it was opened by this call.
    #[inline]
    fn get_or_open(&mut self, index: i64) -> (&mut WindowStats, bool) {
        match self.last {
            Some((i, slot)) if i == index => (&mut self.slab[slot], false),
            _ => self.find_or_open(index),
        }
    }

    fn find_or_open(&mut self, index: i64) -> (&mut WindowStats, bool) {
        let (slot, opened) = match self.order.get(&index) {
            Some(&slot) => (slot, false),
            None => {
                let slot = self.free.pop().unwrap_or_else(|| {
                    self.slab.push(WindowStats::default());
                    self.slab.len() - 1
                });
                self.order.insert(index, slot);
                (slot, true)
            }
        };
        self.last = Some((index, slot));
        (&mut self.slab[slot], opened)
    }

    fn oldest(&self) -> Option<i64> {
        self.order.keys().next().copied()
    }

    fn remove(&mut self, index: i64) -> Option<WindowStats> {
        let slot = self.order.remove(&index)?;
        if self.last.is_some_and(|(_, s)| s == slot) {
            self.last = None;
        }
        self.free.push(slot);
        Some(std::mem::take(&mut self.slab[slot]))
    }

    /// Every window, oldest first; afterwards there are none (and no memory kept).
    fn take_all(&mut self) -> Vec<(i64, WindowStats)> {
        let mut slab = std::mem::take(&mut self.slab);
        let out = std::mem::take(&mut self.order)
            .into_iter()
            .map(|(index, slot)| (index, std::mem::take(&mut slab[slot])))
            .collect();
        self.free = Vec::new();
        self.last = None;
        out
    }
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
    /// An aggregator counting as `identity`: what an application embedding audit-lib
    /// configures. Refuses an event-time config that does not compile and a tier
    /// reserved for a replicator's evidence ([`ConfigError::ReservedTier`];
    /// docs/design.md §10).
    pub fn new(
        identity: Identity,
        config: EventTimeConfig,
        limits: Limits,
    ) -> Result<Self, ConfigError> {
        identity.check_counting_tier()?;
        Ok(Self::with_compiled(identity, config.compile()?, limits))
    }

    /// An aggregator of a config compiled already, for a caller that has checked the
    /// identity with [`Identity::check_counting_tier`] when it was configured (the
    /// librdkafka plugin refuses a reserved `kafka_audit.tier` when it is set); checked
    /// again in debug builds only.
    pub fn with_compiled(identity: Identity, config: CompiledConfig, limits: Limits) -> Self {
        debug_assert!(
            identity.check_counting_tier().is_ok(),
            "Aggregator::with_compiled: tier {:?} is reserved for replication evidence",
            identity.tier
        );
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
                    windows: Windows::default(),
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
        self.record_with(obs, None)
    }

    /// [`Self::record`] with the message's checksum hash already computed: `hash` must be
    /// [`crate::message_hash`] of `obs.key` and `obs.value` (checked in debug builds).
    /// For a caller that holds the key and value contiguous behind their length prefix,
    /// where one `xxh3_64` over them is several times cheaper than hashing the parts.
    #[inline]
    pub fn record_hashed(&mut self, obs: &Observation<'_>, hash: u64) -> Classification {
        debug_assert_eq!(
            hash,
            crate::message_hash(obs.key, obs.value.unwrap_or_default()),
            "record_hashed: hash is not the message's"
        );
        self.record_with(obs, Some(hash))
    }

    #[inline]
    fn record_with(&mut self, obs: &Observation<'_>, hash: Option<u64>) -> Classification {
        let slot = self.topic_slot(obs.topic);
        let class = classify(&self.topics[slot].rule, obs);
        let index = self
            .window_size
            .index_of(class.counted_at(obs.observed_at_ms));
        let track_offsets = self.limits.track_offsets;
        self.window(slot, index, |stats| match hash {
            Some(h) => stats.record_hashed(obs, &class, track_offsets, h),
            None => stats.record(obs, &class, track_offsets),
        });
        class
    }

    /// Classifies `obs` without counting it: its window index and contribution, for
    /// [`Self::add_counted`] once it is known to count (a consumer tier counts a message
    /// when its group commits it, long after the message is gone).
    #[inline]
    pub fn observe(&mut self, obs: &Observation<'_>) -> (i64, Counted) {
        let slot = self.topic_slot(obs.topic);
        let class = classify(&self.topics[slot].rule, obs);
        let index = self
            .window_size
            .index_of(class.counted_at(obs.observed_at_ms));
        let hash = crate::message_hash(obs.key, obs.value.unwrap_or_default());
        (index, Counted::of(obs, &class, hash))
    }

    /// Counts a contribution [`Self::observe`]d earlier into window `index` of `topic`.
    #[inline]
    pub fn add_counted(&mut self, topic: &str, index: i64, counted: &Counted) {
        let slot = self.topic_slot(topic);
        let track_offsets = self.limits.track_offsets;
        self.window(slot, index, |stats| stats.add(counted, track_offsets));
    }

    /// Counts a message its producer was told it could not deliver: classified and
    /// windowed like [`Self::record`], but only in `delivery_failed_count` (it is in no
    /// downstream tier's count, and no offset was assigned).
    pub fn record_delivery_failure(&mut self, obs: &Observation<'_>) -> Classification {
        let slot = self.topic_slot(obs.topic);
        let class = classify(&self.topics[slot].rule, obs);
        let index = self
            .window_size
            .index_of(class.counted_at(obs.observed_at_ms));
        self.window(slot, index, |stats| stats.delivery_failed_count += 1);
        class
    }

    /// Applies `f` to window `index` of topic `slot`, opening it (and evicting the
    /// oldest beyond the limit) when needed.
    #[inline]
    fn window(&mut self, slot: usize, index: i64, f: impl FnOnce(&mut WindowStats)) {
        let (stats, opened) = self.topics[slot].windows.get_or_open(index);
        f(stats);
        if opened {
            self.open += 1;
            while self.open > self.limits.max_open_windows {
                self.evict_oldest();
            }
        }
    }

    /// Moves the oldest open window (smallest window start over all topics) to the
    /// pending list.
    fn evict_oldest(&mut self) {
        let oldest = self
            .topics
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.windows.oldest().map(|k| (k, i)))
            .min();
        if let Some((index, slot)) = oldest {
            if let Some(stats) = self.topics[slot].windows.remove(index) {
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
            for (index, stats) in topic.windows.take_all() {
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
