//! How a replicator's progress is named (docs/design.md §6, rule 0): the auditor of the
//! upstream cluster reads how far a replicator has copied each partition and publishes it
//! as a progress report of a tier of its own, [`Replicator::evidence_tier`]; serve's
//! topology names the same replicator on an edge and finds the evidence by that tier.
//! Both sides parse the same configuration shape, so the names cannot drift apart.

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
///
/// `"same_cluster"` — no replicator: both tiers see one cluster's log (a producer
/// tier counting what the cluster acknowledged, through the librdkafka plugin or the
/// Java interceptor, and the regional auditor; or an auditor and a consumer tier). The
/// upstream's counted offsets are then in the log the downstream reads as soon as
/// they are counted: the upstream's own rows are the evidence, dated by its latest
/// observation; no auditor reads anything for it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Replicator {
    ConsumerGroup(String),
    MirrorMaker2(MirrorMaker2),
    SameCluster,
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
    /// `replicator:mm2/<target>`; none for `same_cluster` (the upstream's rows are).
    pub fn evidence_tier(&self) -> Option<String> {
        match self {
            Replicator::ConsumerGroup(g) => Some(format!("{EVIDENCE_TIER_PREFIX}group/{g}")),
            Replicator::MirrorMaker2(m) => Some(format!("{EVIDENCE_TIER_PREFIX}mm2/{}", m.target)),
            Replicator::SameCluster => None,
        }
    }

    /// The name is one the collector accepts in a tier: 1–200 characters of
    /// `[A-Za-z0-9._-]` (a consumer group or cluster alias outside that set cannot be
    /// named here).
    pub fn validate(&self) -> Result<(), String> {
        let (what, name) = match self {
            Replicator::ConsumerGroup(g) => ("consumer_group", g.as_str()),
            Replicator::MirrorMaker2(m) => ("mirror_maker2.target", m.target.as_str()),
            Replicator::SameCluster => return Ok(()),
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
            Replicator::ConsumerGroup(_) | Replicator::SameCluster => None,
        }
    }
}

/// An offset sync as MirrorMaker 2 writes it to its offset-syncs topic
/// (`OffsetSync.java`; deploy/dev/mm2-NOTES.md): key = topic (int16 length + UTF-8)
/// and partition (int32), value = upstream offset and downstream offset (int64 each),
/// all big-endian. `(topic, partition, upstream offset)`; `None` for anything else (a
/// record of that topic is input from outside: it is refused whole, never guessed).
pub fn parse_offset_sync<'a>(key: &'a [u8], value: &[u8]) -> Option<(&'a str, i32, i64)> {
    let len = usize::from(u16::from_be_bytes(key.get(..2)?.try_into().ok()?));
    let topic = std::str::from_utf8(key.get(2..2usize.checked_add(len)?)?).ok()?;
    let partition = i32::from_be_bytes(key.get(2 + len..)?.try_into().ok()?);
    let value: &[u8; 16] = value.try_into().ok()?;
    let upstream = i64::from_be_bytes(value[..8].try_into().ok()?);
    if topic.is_empty() || partition < 0 || upstream < 0 {
        return None;
    }
    Some((topic, partition, upstream))
}

/// The key and value of an offset sync ([`parse_offset_sync`]'s inverse).
pub fn offset_sync(
    topic: &str,
    partition: i32,
    upstream: i64,
    downstream: i64,
) -> (Vec<u8>, Vec<u8>) {
    let mut key = (topic.len() as u16).to_be_bytes().to_vec();
    key.extend_from_slice(topic.as_bytes());
    key.extend_from_slice(&partition.to_be_bytes());
    (
        key,
        [upstream.to_be_bytes(), downstream.to_be_bytes()].concat(),
    )
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
        assert_eq!(
            e.replicator.evidence_tier().as_deref(),
            Some("replicator:group/mirror-1")
        );
        let e: Edge = serde_json::from_value(serde_json::json!({
            "replicator": { "mirror_maker2": { "source": "dc1", "target": "agg" } }
        }))
        .unwrap();
        assert_eq!(
            e.replicator.evidence_tier().as_deref(),
            Some("replicator:mm2/agg")
        );
        assert_eq!(
            e.replicator.offset_syncs_topic().as_deref(),
            Some("mm2-offset-syncs.agg.internal")
        );
        assert!(is_evidence_tier(&e.replicator.evidence_tier().unwrap()));
        let e: Edge =
            serde_json::from_value(serde_json::json!({ "replicator": "same_cluster" })).unwrap();
        assert_eq!(e.replicator, Replicator::SameCluster);
        assert_eq!(e.replicator.evidence_tier(), None);
        assert!(!is_evidence_tier("regional"));
    }

    #[test]
    fn an_offset_sync_parses_and_anything_else_is_refused() {
        let (k, v) = offset_sync("orders", 3, 41, 7);
        assert_eq!(parse_offset_sync(&k, &v), Some(("orders", 3, 41)));
        // As MirrorMaker 2 4.1.1 wrote one (deploy/dev/mm2-NOTES.md).
        let k = [&[0u8, 12][..], b"mm2e2e-probe", &[0, 0, 0, 1]].concat();
        let v = [445i64.to_be_bytes(), 491i64.to_be_bytes()].concat();
        assert_eq!(parse_offset_sync(&k, &v), Some(("mm2e2e-probe", 1, 445)));
        let (k, v) = offset_sync("orders", 3, 1, 1);
        let bad: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (vec![], v.clone()),
            (k[..5].to_vec(), v.clone()),
            ([k.clone(), vec![0]].concat(), v.clone()),
            (offset_sync("orders", -1, 1, 1).0, v.clone()),
            (offset_sync("", 0, 1, 1).0, v.clone()),
            (k.clone(), v[..15].to_vec()),
            (k.clone(), [v.clone(), vec![0]].concat()),
            (k.clone(), offset_sync("orders", 0, -5, 1).1),
            (vec![0, 2, 0xff, 0xfe, 0, 0, 0, 0], v.clone()),
            (vec![0xff, 0xff], v.clone()),
        ];
        for (k, v) in bad {
            assert_eq!(parse_offset_sync(&k, &v), None, "{k:?} {v:?}");
        }
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
