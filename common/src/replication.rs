//! How a replicator's progress is named (issue 28): the auditor of the upstream cluster
//! reads how far a replicator has copied each partition and publishes it as a progress
//! report of a tier of its own, [`Replicator::evidence_tier`]; serve's topology names the
//! same replicator on an edge and finds the evidence by that tier. Both sides parse the
//! same configuration shape, so the names cannot drift apart.

use serde::{Deserialize, Serialize};

/// Prefix of the tiers that carry replication evidence, not counts
/// (docs/audit-message-v1.md, Replication evidence).
pub const EVIDENCE_TIER_PREFIX: &str = "replicator:";

/// A replicator whose progress proves what it has copied.
///
/// In TOML: `{ consumer_group = "mirror" }` — a replicator that consumes the upstream
/// cluster in a consumer group and commits an offset only once everything before it
/// is written downstream (MirrorMaker 1, uReplicator, most custom replicators and
/// stream jobs); its committed offsets are read on the upstream cluster.
/// `{ mirror_maker2 = { target = "agg" } }` — MirrorMaker 2 replicating the upstream
/// cluster to the cluster it calls `target`; its offset syncs are read from
/// `mm2-offset-syncs.<target>.internal` on the upstream cluster (MirrorMaker 2's
/// default `offset-syncs.topic.location = source`). `source`, MirrorMaker 2's alias of
/// the upstream cluster, may be given for documentation; it names nothing read.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Replicator {
    ConsumerGroup(String),
    MirrorMaker2(MirrorMaker2),
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorMaker2 {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    pub target: String,
}

impl Replicator {
    /// The tier its evidence is published under: `replicator:group/<group>` or
    /// `replicator:mm2/<target>`.
    pub fn evidence_tier(&self) -> String {
        match self {
            Replicator::ConsumerGroup(g) => format!("{EVIDENCE_TIER_PREFIX}group/{g}"),
            Replicator::MirrorMaker2(m) => format!("{EVIDENCE_TIER_PREFIX}mm2/{}", m.target),
        }
    }

    /// The name is one the collector accepts in a tier: 1–200 characters of
    /// `[A-Za-z0-9._-]` (a consumer group or cluster alias outside that set cannot be
    /// named here).
    pub fn validate(&self) -> Result<(), String> {
        let (what, name) = match self {
            Replicator::ConsumerGroup(g) => ("consumer_group", g.as_str()),
            Replicator::MirrorMaker2(m) => ("mirror_maker2.target", m.target.as_str()),
        };
        if name.is_empty()
            || name.len() > 200
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            return Err(format!(
                "replicator {what} {name:?} must be 1-200 characters of [A-Za-z0-9._-]"
            ));
        }
        Ok(())
    }

    /// The topic MirrorMaker 2 writes its offset syncs to on the source cluster.
    pub fn offset_syncs_topic(&self) -> Option<String> {
        match self {
            Replicator::MirrorMaker2(m) => Some(format!("mm2-offset-syncs.{}.internal", m.target)),
            Replicator::ConsumerGroup(_) => None,
        }
    }
}

/// Whether `tier` carries replication evidence rather than an auditor's counts.
pub fn is_evidence_tier(tier: &str) -> bool {
    tier.starts_with(EVIDENCE_TIER_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Edge {
        replicator: Replicator,
    }

    #[test]
    fn both_shapes_parse_from_toml_and_name_their_evidence() {
        let e: Edge = serde_json::from_value(serde_json::json!({
            "replicator": { "consumer_group": "mirror-1" }
        }))
        .unwrap();
        assert_eq!(e.replicator.evidence_tier(), "replicator:group/mirror-1");
        let e: Edge = serde_json::from_value(serde_json::json!({
            "replicator": { "mirror_maker2": { "source": "dc1", "target": "agg" } }
        }))
        .unwrap();
        assert_eq!(e.replicator.evidence_tier(), "replicator:mm2/agg");
        assert_eq!(
            e.replicator.offset_syncs_topic().as_deref(),
            Some("mm2-offset-syncs.agg.internal")
        );
        assert!(is_evidence_tier(&e.replicator.evidence_tier()));
        assert!(!is_evidence_tier("regional"));
    }

    #[test]
    fn names_the_collector_would_reject_are_refused() {
        for bad in ["", "a b", "grp$", &"x".repeat(201)] {
            let r = Replicator::ConsumerGroup(bad.to_string());
            assert!(r.validate().is_err(), "{bad:?}");
        }
        assert!(Replicator::ConsumerGroup("mm1.dc1-agg_0".into())
            .validate()
            .is_ok());
    }
}
