//! Write-ahead log of report entries (docs/design.md §5 step 2).
//!
//! Every report becomes one entry: its audit messages plus the offset range of each
//! partition it covers. The entry is written and fsynced *before* anything is sent to
//! Kafka, then marked published (or discarded) once its transaction committed (or the
//! restart rule decided it must not be sent).
//!
//! On disk: segment files `wal-<seq>.log` in the instance's directory (`segment`),
//! each a sequence of framed, checksummed records (`record`). Recovery reads every
//! segment, stops at
//! the first record that is short, too long or fails its checksum, and truncates the
//! segment there (a torn write at a crash, or a corrupted byte): everything after a
//! bad record is untrustworthy.
//!
//! Losing an entry or a mark is safe for counting: an entry whose offsets were not
//! committed is recounted by whoever owns the partition, and a mark that was lost is
//! re-derived from the committed offsets (the restart rule). The WAL exists so that
//! reports survive while the audit topic cannot be written, and so that a restarted
//! instance resends instead of recounting.

mod record;
mod segment;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use record::{KIND_DISCARDED, KIND_ENTRY, KIND_PUBLISHED, MAX_RECORD_BYTES};
use segment::{create_segment, segment_path, sync_dir, Active, Segment};

/// When to fsync.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FsyncPolicy {
    /// fsync every entry before it is published (the exactly-once default).
    #[default]
    Always,
    /// Leave it to the OS: an entry lost in a machine crash is recounted from the
    /// committed offsets, so counts stay exact; only the resend is lost.
    Never,
}

/// The offsets one entry covers in one partition: `start` is the committed offset
/// when the range began (`None`: the group had no committed offset), `end` the next
/// offset to read after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedRange {
    pub topic: String,
    pub partition: i32,
    pub start: Option<i64>,
    pub end: i64,
}

impl CommittedRange {
    pub fn topic_partition(&self) -> audit_lib::TopicPartition {
        audit_lib::TopicPartition::new(self.topic.as_str(), self.partition)
    }
}

/// One audit message as it will be produced: key (the audited topic) and JSON payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalMessage {
    pub key: String,
    pub payload: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalEntry {
    pub id: u64,
    pub ranges: Vec<CommittedRange>,
    pub messages: Vec<WalMessage>,
}

#[derive(Debug, Clone)]
pub struct WalOptions {
    pub fsync: FsyncPolicy,
    /// Pending bytes above which the service pauses consumption.
    pub max_pending_bytes: u64,
    /// A segment is rotated when it grows past this size.
    pub segment_bytes: u64,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            fsync: FsyncPolicy::Always,
            max_pending_bytes: 1 << 30,
            segment_bytes: 8 << 20,
        }
    }
}

/// What recovery found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovery {
    pub segments: usize,
    pub records: usize,
    pub pending_entries: usize,
    /// (file, offset at which it was truncated, bytes dropped) per damaged segment.
    pub truncated: Vec<(PathBuf, u64, u64)>,
}

/// What stays in memory of a pending entry: where it is and the offsets it covers.
/// Its messages are read back from disk when it is published, so memory does not
/// grow with the backlog while the audit topic is unwritable.
struct Pending {
    seq: u64,
    offset: u64,
    len: u64,
    ranges: Vec<CommittedRange>,
}

pub struct Wal {
    dir: PathBuf,
    opts: WalOptions,
    segments: BTreeMap<u64, Segment>,
    active_seq: u64,
    active: Active,
    /// Pending entries by id (ids grow, so this is publication order) with their
    /// segment and size on disk.
    pending: BTreeMap<u64, Pending>,
    pending_bytes: u64,
    next_id: u64,
}

impl Wal {
    /// Opens (or creates) the WAL in `dir`, recovering its pending entries.
    pub fn open(dir: &Path, opts: WalOptions) -> anyhow::Result<(Wal, Recovery)> {
        let seqs = segment::list_segments(dir)?;
        let mut recovery = Recovery {
            segments: seqs.len(),
            ..Default::default()
        };
        let mut segments = BTreeMap::new();
        let mut pending: BTreeMap<u64, Pending> = BTreeMap::new();
        let mut resolved = BTreeSet::new();
        let mut next_id = 1;
        for &seq in &seqs {
            let path = segment_path(dir, seq);
            let (records, good_len, file_len) = segment::read_segment(&path)?;
            if good_len < file_len {
                tracing::warn!(
                    file = %path.display(),
                    offset = good_len,
                    dropped_bytes = file_len - good_len,
                    "WAL segment has a torn or corrupt tail; truncating it"
                );
                segment::truncate(&path, good_len)?;
                recovery
                    .truncated
                    .push((path.clone(), good_len, file_len - good_len));
            }
            let mut seg = Segment {
                path,
                size: good_len,
                pending: BTreeSet::new(),
            };
            for record::Decoded {
                kind,
                payload,
                len,
                offset,
            } in records
            {
                recovery.records += 1;
                match kind {
                    KIND_ENTRY => {
                        let entry: WalEntry =
                            serde_json::from_slice(&payload).with_context(|| {
                                format!("undecodable WAL entry in {}", seg.path.display())
                            })?;
                        next_id = next_id.max(entry.id + 1);
                        seg.pending.insert(entry.id);
                        pending.insert(
                            entry.id,
                            Pending {
                                seq,
                                offset,
                                len,
                                ranges: entry.ranges,
                            },
                        );
                    }
                    KIND_PUBLISHED | KIND_DISCARDED => {
                        let id = record::mark_id(&payload);
                        next_id = next_id.max(id + 1);
                        resolved.insert(id);
                    }
                    _ => unreachable!("decode_prefix only returns known kinds"),
                }
            }
            segments.insert(seq, seg);
        }
        for id in &resolved {
            if let Some(p) = pending.remove(id) {
                if let Some(seg) = segments.get_mut(&p.seq) {
                    seg.pending.remove(id);
                }
            }
        }
        let pending_bytes = pending.values().map(|p| p.len).sum();
        recovery.pending_entries = pending.len();
        let active_seq = seqs.last().map(|s| s + 1).unwrap_or(1);
        let active = create_segment(dir, active_seq)?;
        segments.insert(active_seq, Segment::empty(dir, active_seq));
        let mut wal = Wal {
            dir: dir.to_path_buf(),
            opts,
            segments,
            active_seq,
            active,
            pending,
            pending_bytes,
            next_id,
        };
        wal.remove_resolved_segments()?;
        Ok((wal, recovery))
    }

    /// Appends an entry (fsynced per policy) and returns its id.
    pub fn append(
        &mut self,
        ranges: Vec<CommittedRange>,
        messages: Vec<WalMessage>,
    ) -> anyhow::Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let entry = WalEntry {
            id,
            ranges,
            messages,
        };
        let body = serde_json::to_vec(&entry).context("cannot encode WAL entry")?;
        if body.len() as u64 + 1 > MAX_RECORD_BYTES as u64 {
            bail!(
                "WAL entry {id} is {} bytes, above the record limit {MAX_RECORD_BYTES}",
                body.len()
            );
        }
        if self.segments[&self.active_seq].size >= self.opts.segment_bytes {
            self.rotate()?;
        }
        let offset = self.segments[&self.active_seq].size;
        let len = self.write_record(KIND_ENTRY, &body)?;
        if self.opts.fsync == FsyncPolicy::Always {
            if let Err(e) = self.sync_active() {
                // Not durable, so not an entry: take the record back out, or it
                // would come back at restart although the caller recounts it.
                self.roll_back_to(offset);
                return Err(e);
            }
        }
        let seg = self
            .segments
            .get_mut(&self.active_seq)
            .expect("active segment");
        seg.pending.insert(id);
        self.pending.insert(
            id,
            Pending {
                seq: self.active_seq,
                offset,
                len,
                ranges: entry.ranges,
            },
        );
        self.pending_bytes += len;
        Ok(id)
    }

    /// Records that entry `id` was published. Not fsynced: a lost mark is re-derived
    /// from the committed offsets at restart.
    pub fn mark_published(&mut self, id: u64) -> anyhow::Result<()> {
        self.resolve(id, KIND_PUBLISHED)
    }

    /// Records that entry `id` must never be sent (the restart rule said so).
    pub fn discard(&mut self, id: u64) -> anyhow::Result<()> {
        self.resolve(id, KIND_DISCARDED)
    }

    fn resolve(&mut self, id: u64, kind: u8) -> anyhow::Result<()> {
        let Some(Pending { seq, len, .. }) = self.pending.remove(&id) else {
            return Ok(());
        };
        self.pending_bytes -= len;
        if let Some(seg) = self.segments.get_mut(&seq) {
            seg.pending.remove(&id);
        }
        self.write_record(kind, &id.to_le_bytes())?;
        if kind == KIND_DISCARDED && self.opts.fsync == FsyncPolicy::Always {
            // A discarded entry must not come back after a crash: its partitions may
            // already be recounted by their new owner.
            self.sync_active()?;
        }
        let active = &self.segments[&self.active_seq];
        if active.pending.is_empty() && active.size >= self.opts.segment_bytes {
            self.rotate()?;
        }
        self.remove_resolved_segments()
    }

    /// Ids of pending entries in the order they must be published.
    pub fn pending_ids(&self) -> Vec<u64> {
        self.pending.keys().copied().collect()
    }

    /// The offset ranges of a pending entry (kept in memory).
    pub fn ranges(&self, id: u64) -> Option<&[CommittedRange]> {
        self.pending.get(&id).map(|p| p.ranges.as_slice())
    }

    /// Reads a pending entry back from disk, checksum verified.
    pub fn read(&self, id: u64) -> anyhow::Result<WalEntry> {
        let p = self
            .pending
            .get(&id)
            .with_context(|| format!("WAL entry {id} is not pending"))?;
        let path = segment_path(&self.dir, p.seq);
        let buf = segment::read_at(&path, p.offset, p.len).with_context(|| {
            format!(
                "cannot read WAL entry {id} at {}:{}",
                path.display(),
                p.offset
            )
        })?;
        let payload = record::entry_payload(&buf).with_context(|| {
            format!(
                "WAL entry {id} at {}:{} is corrupt",
                path.display(),
                p.offset
            )
        })?;
        serde_json::from_slice(payload)
            .with_context(|| format!("undecodable WAL entry {id} in {}", path.display()))
    }

    /// Every pending entry, read from disk, in publication order.
    pub fn pending_entries(&self) -> anyhow::Result<Vec<WalEntry>> {
        self.pending_ids()
            .into_iter()
            .map(|id| self.read(id))
            .collect()
    }

    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// Bytes of pending entries on disk.
    pub fn pending_bytes(&self) -> u64 {
        self.pending_bytes
    }

    /// True when pending entries exceed the disk limit: consumption must pause.
    pub fn over_limit(&self) -> bool {
        self.pending_bytes > self.opts.max_pending_bytes
    }

    /// Bytes of all segment files.
    pub fn disk_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.size).sum()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn write_record(&mut self, kind: u8, payload: &[u8]) -> anyhow::Result<u64> {
        let buf = record::encode(kind, payload);
        let before = self.segments[&self.active_seq].size;
        if let Err(e) = self.active.write_all(&buf) {
            // A failed write may have written part of the record (disk full mid-way):
            // cut it off, so that the next record starts where `size` says.
            self.roll_back_to(before);
            return Err(e).with_context(|| {
                format!(
                    "cannot write WAL segment {}",
                    self.segments[&self.active_seq].path.display()
                )
            });
        }
        self.segments
            .get_mut(&self.active_seq)
            .expect("active segment")
            .size += buf.len() as u64;
        Ok(buf.len() as u64)
    }

    fn sync_active(&mut self) -> anyhow::Result<()> {
        self.active.sync_data().with_context(|| {
            format!(
                "cannot fsync {}",
                self.segments[&self.active_seq].path.display()
            )
        })
    }

    /// Cuts the active segment back to `size` after a failed write. If that fails
    /// too, the segment's real length is unknown: it is closed at its length on disk
    /// and a new segment takes the next records (recovery truncates a torn tail).
    fn roll_back_to(&mut self, size: u64) {
        let cut = self.active.cut(size);
        if cut.is_ok() {
            if let Some(seg) = self.segments.get_mut(&self.active_seq) {
                seg.size = size;
            }
            return;
        }
        let on_disk = self.active.len_on_disk();
        if let Some(seg) = self.segments.get_mut(&self.active_seq) {
            seg.size = on_disk.unwrap_or(seg.size).max(size);
            tracing::warn!(
                file = %seg.path.display(),
                error = %cut.err().map(|e| e.to_string()).unwrap_or_default(),
                "cannot cut a failed WAL write off; closing the segment"
            );
        }
        if let Err(e) = self.rotate() {
            tracing::warn!(error = %format!("{e:#}"), "cannot start a new WAL segment");
        }
    }

    fn rotate(&mut self) -> anyhow::Result<()> {
        let seq = self.active_seq + 1;
        self.active = create_segment(&self.dir, seq)?;
        self.active_seq = seq;
        self.segments.insert(seq, Segment::empty(&self.dir, seq));
        self.remove_resolved_segments()
    }

    /// Deletes inactive segments none of whose entries is pending. Marks in a deleted
    /// segment may refer to entries of older segments; those are gone too, because
    /// segments are deleted only when resolved and a mark follows its entry.
    fn remove_resolved_segments(&mut self) -> anyhow::Result<()> {
        // Only a prefix may go: a mark for an entry of segment N lives in a segment
        // >= N, so deleting a later segment first could resurrect the entry.
        let removable: Vec<u64> = self
            .segments
            .iter()
            .take_while(|(seq, seg)| **seq != self.active_seq && seg.pending.is_empty())
            .map(|(seq, _)| *seq)
            .collect();
        if removable.is_empty() {
            return Ok(());
        }
        for seq in removable {
            let seg = self.segments.remove(&seq).expect("listed");
            fs::remove_file(&seg.path)
                .with_context(|| format!("cannot remove WAL segment {}", seg.path.display()))?;
        }
        sync_dir(&self.dir)
    }
}

#[cfg(test)]
mod tests;
