//! The deployment's topology (tiers, edges, datacenter mapping) and the detection
//! policy (thresholds, grace period, stall timeout, latency objectives), as read from
//! the `[topology]` section of `serve.toml`, validated into [`Topology`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use audit_lib::{TopicGlob, WindowSize};
use serde::{Deserialize, Serialize};

/// `[topology]` as written in the configuration file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyConfig {
    /// Window size; all tiers of one deployment use the same size. Best left unset:
    /// then the auditors' `audit.event_time.window_size` is the one source of truth and
    /// serve learns it from the stored windows at its first evaluation (not ready until
    /// the store holds one). When set, stored windows of another size are reported.
    #[serde(with = "humantime_serde", default)]
    pub window: Option<Duration>,
    /// How long after a window's end late data is still waited for before judging it.
    #[serde(with = "humantime_serde", default = "default_grace")]
    pub grace: Duration,
    /// An auditor whose last progress report is older than this is stalled.
    #[serde(with = "humantime_serde", default = "default_stall_after")]
    pub stall_after: Duration,
    /// Progress of a partition not reported for longer than this is forgotten: its
    /// topic was deleted or is no longer audited, so it is no longer expected and its
    /// auditor is no longer alerted as stalled. Longer than `stall_after`, so a stuck
    /// auditor is alerted first; an auditor down for longer than this stops being
    /// alerted on for that topic.
    #[serde(with = "humantime_serde", default = "default_forget_after")]
    pub forget_after: Duration,
    #[serde(default)]
    pub thresholds: Thresholds,
    /// Default threshold of the completeness gate
    /// (`/api/v1/topics/{topic}/completeness`, `kafka-audit wait`): a final window is
    /// complete when its tier has at least this fraction of its reference count.
    #[serde(default = "default_completeness")]
    pub completeness: f64,
    #[serde(default)]
    pub tiers: Vec<TierConfig>,
    #[serde(default)]
    pub edges: Vec<EdgeConfig>,
    /// Per topic pattern overrides; the first matching pattern wins.
    #[serde(default)]
    pub overrides: Vec<OverrideConfig>,
}

impl Default for TopologyConfig {
    fn default() -> Self {
        Self {
            window: None,
            grace: default_grace(),
            stall_after: default_stall_after(),
            forget_after: default_forget_after(),
            thresholds: Thresholds::default(),
            completeness: default_completeness(),
            tiers: Vec::new(),
            edges: Vec::new(),
            overrides: Vec::new(),
        }
    }
}

fn default_grace() -> Duration {
    Duration::from_secs(1200)
}
fn default_stall_after() -> Duration {
    Duration::from_secs(1800)
}
fn default_forget_after() -> Duration {
    Duration::from_secs(24 * 3600)
}
fn default_completeness() -> f64 {
    0.999
}

/// A difference between two tiers is an anomaly only when it exceeds *both* the
/// absolute and the ratio threshold: the absolute one keeps small topics from paging
/// for a handful of messages, the ratio one keeps huge topics from paging for noise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Thresholds {
    /// Messages of difference tolerated.
    pub absolute: u64,
    /// Fraction of the expected count tolerated (0.001 = 0.1 %).
    pub ratio: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            absolute: 0,
            ratio: 0.0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierConfig {
    pub name: String,
    /// Whether this tier's auditors publish progress watermarks. Producers that embed
    /// audit-lib read nothing and report none; their windows are judged on time alone.
    #[serde(default = "yes")]
    pub progress: bool,
    /// Objective for the p99 of latency at this tier; above it a window is `delayed`.
    #[serde(with = "humantime_serde", default)]
    pub latency_p99_objective: Option<Duration>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EdgeConfig {
    pub upstream: String,
    pub downstream: String,
    /// Upstream datacenter → downstream datacenter. Empty means one-to-one (each
    /// datacenter compared with the datacenter of the same name); several upstream
    /// datacenters mapped to one downstream datacenter are summed (an aggregate
    /// cluster receiving every region). Upstream datacenters not listed are not part of
    /// this edge.
    #[serde(default)]
    pub datacenters: BTreeMap<String, String>,
    /// Whether the hop keeps every record in the partition of the same number (a
    /// partition-preserving replicator such as MirrorMaker 2, or both tiers reading
    /// one cluster): then the downstream must have read, in each partition, past the
    /// upstream's latest record time of the window *in that partition*. `false` for a
    /// replicator that repartitions: every downstream partition must then have read
    /// past the upstream's latest record time of the window plus the grace period
    /// (slower, and a paused replicator is judged loss after grace; docs/web.md).
    #[serde(default = "yes")]
    pub preserves_partitions: bool,
    /// The replicator of this hop, whose progress the upstream tier's auditors publish
    /// (`[[audit.replicators]]` in their configuration, the same value): with it, a
    /// deficit is proven a loss while the window is still open, as soon as the
    /// replicator has copied past every record the upstream counted in it and the
    /// downstream auditor has read its whole log after that (docs/web.md, Replication
    /// evidence). `{ consumer_group = "…" }` or `{ mirror_maker2 = { target = "…" } }`.
    #[serde(default)]
    pub replicator: Option<common::replication::Replicator>,
    /// With a replicator: an open or settling window whose records the upstream
    /// counted this long ago are not copied yet is `delayed` (paged as a notice), with
    /// the replicator's lag. Unset: in-flight data is `pending` until the grace period.
    #[serde(with = "humantime_serde", default)]
    pub replication_lag_objective: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideConfig {
    /// Glob over topic names, the same as the auditor's `[[audit.event_time.rules]]`
    /// `topic`: `*` any run of characters, `?` one character, `[a-z]` a class,
    /// `{eu,us}` alternatives.
    pub topics: String,
    #[serde(with = "humantime_serde", default)]
    pub grace: Option<Duration>,
    #[serde(default)]
    pub absolute: Option<u64>,
    #[serde(default)]
    pub ratio: Option<f64>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TopologyError {
    #[error("topology: {0}")]
    Invalid(String),
}

fn invalid(msg: impl Into<String>) -> TopologyError {
    TopologyError::Invalid(msg.into())
}

/// An edge after validation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Edge {
    pub upstream: String,
    pub downstream: String,
    pub datacenters: BTreeMap<String, String>,
    /// [`EdgeConfig::preserves_partitions`].
    pub preserves_partitions: bool,
    /// [`EdgeConfig::replicator`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicator: Option<common::replication::Replicator>,
    /// The tier its evidence is published under (`replicator:…`).
    #[serde(skip)]
    pub evidence_tier: Option<String>,
    /// [`EdgeConfig::replication_lag_objective`], in ms.
    #[serde(skip)]
    pub replication_lag_objective_ms: Option<i64>,
}

impl Edge {
    pub fn is_one_to_one(&self) -> bool {
        self.datacenters.is_empty()
    }

    /// Upstream datacenters feeding `downstream_dc` on this edge, given the
    /// datacenters seen (used when the mapping is one-to-one).
    pub fn upstream_datacenters(&self, downstream_dc: &str) -> Vec<String> {
        if self.is_one_to_one() {
            vec![downstream_dc.to_string()]
        } else {
            self.datacenters
                .iter()
                .filter(|(_, d)| d.as_str() == downstream_dc)
                .map(|(u, _)| u.clone())
                .collect()
        }
    }
}

/// The policy that applies to one topic after overrides.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub grace_ms: i64,
    pub thresholds: Thresholds,
}

/// Validated topology: what the engine runs on.
#[derive(Debug, Clone)]
pub struct Topology {
    pub config: TopologyConfig,
    /// The window size of the deployment: every auditor must count in it (a stored
    /// window of another size is reported by the evaluator). `config.window`, or when
    /// that is not set, the size learned from the stored windows.
    pub window: WindowSize,
    /// Whether `window` was learned from the stored windows (`config.window` unset).
    pub window_learned: bool,
    pub stall_after_ms: i64,
    pub forget_after_ms: i64,
    pub edges: Vec<Edge>,
    /// `config.overrides` patterns, in order.
    overrides: Vec<TopicGlob>,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn check_ratio(r: f64, what: &str) -> Result<(), TopologyError> {
    if !(0.0..=1.0).contains(&r) {
        return Err(invalid(format!("{what}: ratio {r} is not within [0, 1]")));
    }
    Ok(())
}

impl Topology {
    /// The topology of a `[topology]` with `window` set; without it, an error (use
    /// [`Topology::learned`] once the window size is known).
    pub fn new(config: TopologyConfig) -> Result<Self, TopologyError> {
        Self::build(config, None)
    }

    /// The topology of a `[topology]` without `window`, judging in `window`: the size
    /// learned from the stored windows (the auditors' `audit.event_time.window_size`).
    /// When `config.window` is set, it is used and `window` is ignored.
    pub fn learned(config: TopologyConfig, window: WindowSize) -> Result<Self, TopologyError> {
        Self::build(config, Some(window))
    }

    /// Checks `config` as [`Topology::new`] does, except that `window` may be unset.
    pub fn check(config: &TopologyConfig) -> Result<(), TopologyError> {
        Self::build(config.clone(), Some(WindowSize::DEFAULT)).map(|_| ())
    }

    fn build(config: TopologyConfig, learned: Option<WindowSize>) -> Result<Self, TopologyError> {
        let (window, window_learned) = match (config.window, learned) {
            (Some(w), _) => {
                if w.is_zero() {
                    return Err(invalid("window must be longer than 0"));
                }
                if w.as_millis() % 1000 != 0 {
                    return Err(invalid("window must be a whole number of seconds"));
                }
                let w =
                    WindowSize::from_duration(w).map_err(|e| invalid(format!("window: {e}")))?;
                (w, false)
            }
            (None, Some(w)) => (w, true),
            (None, None) => {
                return Err(invalid(
                    "window is not set: it is learned from the stored windows at run time",
                ))
            }
        };
        if config.stall_after.is_zero() {
            return Err(invalid("stall_after must be longer than 0"));
        }
        if config.forget_after <= config.stall_after {
            return Err(invalid(format!(
                "forget_after ({} s) must be longer than stall_after ({} s): a stuck auditor is alerted before it is forgotten",
                config.forget_after.as_secs(),
                config.stall_after.as_secs()
            )));
        }
        check_ratio(config.thresholds.ratio, "thresholds")?;
        check_ratio(config.completeness, "completeness")?;
        let mut tiers = BTreeSet::new();
        for t in &config.tiers {
            if t.name.trim().is_empty() {
                return Err(invalid("a tier has an empty name"));
            }
            if !tiers.insert(t.name.as_str()) {
                return Err(invalid(format!("tier {:?} is listed twice", t.name)));
            }
        }
        let mut edges = Vec::new();
        let mut seen = BTreeSet::new();
        for e in &config.edges {
            for end in [&e.upstream, &e.downstream] {
                if !tiers.contains(end.as_str()) {
                    return Err(invalid(format!(
                        "edge {} -> {}: tier {:?} is not in tiers",
                        e.upstream, e.downstream, end
                    )));
                }
            }
            if e.upstream == e.downstream {
                return Err(invalid(format!(
                    "edge {} -> {}: upstream and downstream are the same tier",
                    e.upstream, e.downstream
                )));
            }
            if !seen.insert((e.upstream.as_str(), e.downstream.as_str())) {
                return Err(invalid(format!(
                    "edge {} -> {} is listed twice",
                    e.upstream, e.downstream
                )));
            }
            for (u, d) in &e.datacenters {
                if u.is_empty() || d.is_empty() {
                    return Err(invalid(format!(
                        "edge {} -> {}: empty datacenter name in mapping",
                        e.upstream, e.downstream
                    )));
                }
            }
            if let Some(r) = &e.replicator {
                r.validate().map_err(|why| {
                    invalid(format!("edge {} -> {}: {why}", e.upstream, e.downstream))
                })?;
            }
            if e.replication_lag_objective.is_some() && e.replicator.is_none() {
                return Err(invalid(format!(
                    "edge {} -> {}: replication_lag_objective needs a replicator to measure the lag of",
                    e.upstream, e.downstream
                )));
            }
            edges.push(Edge {
                upstream: e.upstream.clone(),
                downstream: e.downstream.clone(),
                datacenters: e.datacenters.clone(),
                preserves_partitions: e.preserves_partitions,
                replicator: e.replicator.clone(),
                evidence_tier: e.replicator.as_ref().and_then(|r| r.evidence_tier()),
                replication_lag_objective_ms: e.replication_lag_objective.map(ms),
            });
        }
        let mut overrides = Vec::with_capacity(config.overrides.len());
        for o in &config.overrides {
            if o.topics.is_empty() {
                return Err(invalid("an override has an empty topics pattern"));
            }
            overrides.push(TopicGlob::new(&o.topics).map_err(|e| {
                invalid(format!(
                    "override {:?}: invalid topics pattern: {e}",
                    o.topics
                ))
            })?);
            if let Some(r) = o.ratio {
                check_ratio(r, &format!("override {:?}", o.topics))?;
            }
        }
        Ok(Self {
            window,
            window_learned,
            overrides,
            stall_after_ms: ms(config.stall_after),
            forget_after_ms: ms(config.forget_after),
            edges,
            config,
        })
    }

    pub fn tier(&self, name: &str) -> Option<&TierConfig> {
        self.config.tiers.iter().find(|t| t.name == name)
    }

    pub fn policy_for(&self, topic: &str) -> Policy {
        let mut policy = Policy {
            grace_ms: ms(self.config.grace),
            thresholds: self.config.thresholds.clone(),
        };
        if let Some(o) = self
            .overrides
            .iter()
            .position(|g| g.is_match(topic))
            .map(|i| &self.config.overrides[i])
        {
            if let Some(g) = o.grace {
                policy.grace_ms = ms(g);
            }
            if let Some(a) = o.absolute {
                policy.thresholds.absolute = a;
            }
            if let Some(r) = o.ratio {
                policy.thresholds.ratio = r;
            }
        }
        policy
    }
}

/// The topology shared by the handlers and the evaluator: known from the start when
/// `[topology] window` is set, otherwise once the evaluator has learned the window size
/// from the stored windows ([`TopologyCell::learn`], once: a later change of the
/// auditors' size is reported as a mismatch until serve restarts).
#[derive(Debug)]
pub struct TopologyCell {
    config: TopologyConfig,
    known: std::sync::OnceLock<std::sync::Arc<Topology>>,
}

impl TopologyCell {
    pub fn new(config: TopologyConfig) -> Result<Self, TopologyError> {
        let known = std::sync::OnceLock::new();
        if config.window.is_some() {
            let _ = known.set(std::sync::Arc::new(Topology::new(config.clone())?));
        } else {
            Topology::check(&config)?;
        }
        Ok(Self { config, known })
    }

    /// The topology once its window size is known.
    pub fn get(&self) -> Option<std::sync::Arc<Topology>> {
        self.known.get().cloned()
    }

    /// The topology judging in `window` (the length of the newest stored window) when
    /// the size was not known yet; the known one otherwise.
    pub fn learn(&self, window: WindowSize) -> Result<std::sync::Arc<Topology>, TopologyError> {
        if let Some(t) = self.known.get() {
            return Ok(t.clone());
        }
        let t = std::sync::Arc::new(Topology::learned(self.config.clone(), window)?);
        Ok(self.known.get_or_init(|| t).clone())
    }

    /// `[topology]` as configured (`window` may be unset).
    pub fn config(&self) -> &TopologyConfig {
        &self.config
    }
}
