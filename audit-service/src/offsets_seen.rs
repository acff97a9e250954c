//! Partitions this instance has seen a committed offset for, kept in a small file
//! beside its WAL. An assigned partition without a committed offset although it had
//! one before means the group's offsets expired (`offsets.retention.minutes` after the
//! group emptied) or were deleted: the auditor then starts at `auto.offset.reset`
//! and recounts whatever the log retains. That must not pass silently.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Context;

const FILE: &str = "committed-partitions.json";

pub(crate) struct OffsetsSeen {
    path: PathBuf,
    seen: BTreeSet<(String, i32)>,
}

impl OffsetsSeen {
    /// Loads the set from `dir` (an unreadable or missing file is an empty set).
    pub(crate) fn load(dir: &Path) -> OffsetsSeen {
        let path = dir.join(FILE);
        let seen = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(file = %path.display(), error = %e, "ignoring an unreadable file of committed partitions");
                BTreeSet::new()
            }),
            Err(_) => BTreeSet::new(),
        };
        OffsetsSeen { path, seen }
    }

    pub(crate) fn contains(&self, topic: &str, partition: i32) -> bool {
        self.seen.contains(&(topic.to_string(), partition))
    }

    /// Adds partitions; writes the file only when one is new.
    pub(crate) fn insert_all<'a>(&mut self, partitions: impl IntoIterator<Item = (&'a str, i32)>) {
        let mut changed = false;
        for (topic, partition) in partitions {
            if !self.contains(topic, partition) {
                self.seen.insert((topic.to_string(), partition));
                changed = true;
            }
        }
        if changed {
            if let Err(e) = self.save() {
                tracing::warn!(error = %format!("{e:#}"), "cannot record committed partitions");
            }
        }
    }

    fn save(&self) -> anyhow::Result<()> {
        let tmp = self.path.with_extension("tmp");
        let bytes = serde_json::to_vec(&self.seen)?;
        std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, &self.path)
            .with_context(|| format!("cannot rename {} to {}", tmp.display(), self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survives_a_reopen_and_ignores_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = OffsetsSeen::load(dir.path());
        assert!(!s.contains("t", 0));
        s.insert_all([("t", 0), ("t", 3)]);
        let s = OffsetsSeen::load(dir.path());
        assert!(s.contains("t", 0) && s.contains("t", 3) && !s.contains("t", 1));
        std::fs::write(dir.path().join(FILE), b"{not json").unwrap();
        assert!(!OffsetsSeen::load(dir.path()).contains("t", 0));
    }
}
