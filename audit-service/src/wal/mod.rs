//! Write-ahead log of report entries (docs/design.md §5 step 2).
//!
//! Every report becomes one entry: its audit messages plus the offset range of each
//! partition it covers. The entry is written and fsynced *before* anything is sent to
//! Kafka, then marked published (or discarded) once its transaction committed (or the
//! restart rule decided it must not be sent).
//!
//! On disk: segment files `wal-<seq>.log` in the instance's directory, each a sequence
//! of records framed as `len: u32 LE | crc32: u32 LE | body` where `crc32` covers the
//! body and the body is `kind: u8 | payload`. Recovery reads every segment, stops at
//! the first record that is short, too long or fails its checksum, and truncates the
//! segment there (a torn write at a crash, or a corrupted byte): everything after a
//! bad record is untrustworthy.
//!
//! Losing an entry or a mark is safe for counting: an entry whose offsets were not
//! committed is recounted by whoever owns the partition, and a mark that was lost is
//! re-derived from the committed offsets (the restart rule). The WAL exists so that
//! reports survive while the audit topic cannot be written, and so that a restarted
//! instance resends instead of recounting.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

/// Upper bound of one record, so that a corrupted length cannot make recovery
/// allocate gigabytes.
const MAX_RECORD_BYTES: u32 = 256 * 1024 * 1024;
const HEADER_BYTES: u64 = 8;
const KIND_ENTRY: u8 = 1;
const KIND_PUBLISHED: u8 = 2;
const KIND_DISCARDED: u8 = 3;

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

struct Segment {
    path: PathBuf,
    size: u64,
    /// Entries in this segment that are neither published nor discarded.
    pending: BTreeSet<u64>,
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
    active: File,
    /// Pending entries by id (ids grow, so this is publication order) with their
    /// segment and size on disk.
    pending: BTreeMap<u64, Pending>,
    pending_bytes: u64,
    next_id: u64,
    #[cfg(test)]
    faults: Faults,
}

/// Faults the unit tests inject into the next write or fsync.
#[cfg(test)]
#[derive(Default)]
struct Faults {
    /// Write only this many bytes of the next record, then fail.
    partial_write: Option<usize>,
    fail_sync: bool,
}

impl Wal {
    /// Opens (or creates) the WAL in `dir`, recovering its pending entries.
    pub fn open(dir: &Path, opts: WalOptions) -> anyhow::Result<(Wal, Recovery)> {
        fs::create_dir_all(dir)
            .with_context(|| format!("cannot create WAL directory {}", dir.display()))?;
        let mut seqs = Vec::new();
        for e in fs::read_dir(dir)
            .with_context(|| format!("cannot list WAL directory {}", dir.display()))?
        {
            let e = e?;
            let name = e.file_name();
            let name = name.to_string_lossy();
            if let Some(seq) = name
                .strip_prefix("wal-")
                .and_then(|s| s.strip_suffix(".log"))
            {
                if let Ok(seq) = seq.parse::<u64>() {
                    seqs.push(seq);
                }
            }
        }
        seqs.sort_unstable();
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
            let (records, good_len, file_len) = read_segment(&path)?;
            if good_len < file_len {
                tracing::warn!(
                    file = %path.display(),
                    offset = good_len,
                    dropped_bytes = file_len - good_len,
                    "WAL segment has a torn or corrupt tail; truncating it"
                );
                let f = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .with_context(|| format!("cannot open {} to truncate it", path.display()))?;
                f.set_len(good_len)
                    .with_context(|| format!("cannot truncate {}", path.display()))?;
                f.sync_all()
                    .with_context(|| format!("cannot fsync {}", path.display()))?;
                recovery
                    .truncated
                    .push((path.clone(), good_len, file_len - good_len));
            }
            let mut seg = Segment {
                path,
                size: good_len,
                pending: BTreeSet::new(),
            };
            for (kind, body, len, offset) in records {
                recovery.records += 1;
                match kind {
                    KIND_ENTRY => {
                        let entry: WalEntry = serde_json::from_slice(&body).with_context(|| {
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
                        let id = u64::from_le_bytes(
                            body[..8]
                                .try_into()
                                .expect("length checked in read_segment"),
                        );
                        next_id = next_id.max(id + 1);
                        resolved.insert(id);
                    }
                    _ => unreachable!("read_segment only returns known kinds"),
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
        segments.insert(
            active_seq,
            Segment {
                path: segment_path(dir, active_seq),
                size: 0,
                pending: BTreeSet::new(),
            },
        );
        let mut wal = Wal {
            dir: dir.to_path_buf(),
            opts,
            segments,
            active_seq,
            active,
            pending,
            pending_bytes,
            next_id,
            #[cfg(test)]
            faults: Faults::default(),
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
        let mut f = File::open(&path)
            .with_context(|| format!("cannot open WAL segment {}", path.display()))?;
        f.seek(SeekFrom::Start(p.offset))?;
        let mut buf = vec![0u8; p.len as usize];
        f.read_exact(&mut buf).with_context(|| {
            format!(
                "cannot read WAL entry {id} at {}:{}",
                path.display(),
                p.offset
            )
        })?;
        let crc = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
        anyhow::ensure!(
            crc32fast::hash(&buf[8..]) == crc && buf[8] == KIND_ENTRY,
            "WAL entry {id} at {}:{} is corrupt",
            path.display(),
            p.offset
        );
        serde_json::from_slice(&buf[9..])
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
        let mut buf = Vec::with_capacity(payload.len() + 9);
        let body_len = payload.len() as u32 + 1;
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&[kind]);
        hasher.update(payload);
        buf.extend_from_slice(&body_len.to_le_bytes());
        buf.extend_from_slice(&hasher.finalize().to_le_bytes());
        buf.push(kind);
        buf.extend_from_slice(payload);
        let before = self.segments[&self.active_seq].size;
        if let Err(e) = self.write_all_active(&buf) {
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

    fn write_all_active(&mut self, buf: &[u8]) -> std::io::Result<()> {
        #[cfg(test)]
        if let Some(n) = self.faults.partial_write.take() {
            self.active.write_all(&buf[..n.min(buf.len())])?;
            return Err(std::io::Error::other("injected: partial write"));
        }
        self.active.write_all(buf)
    }

    fn sync_active(&mut self) -> anyhow::Result<()> {
        #[cfg(test)]
        if std::mem::take(&mut self.faults.fail_sync) {
            anyhow::bail!("injected: fsync failed");
        }
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
        let cut = self
            .active
            .set_len(size)
            .and_then(|()| self.active.sync_data());
        if cut.is_ok() {
            if let Some(seg) = self.segments.get_mut(&self.active_seq) {
                seg.size = size;
            }
            return;
        }
        let on_disk = self.active.metadata().map(|m| m.len()).ok();
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
        self.segments.insert(
            seq,
            Segment {
                path: segment_path(&self.dir, seq),
                size: 0,
                pending: BTreeSet::new(),
            },
        );
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

fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("wal-{seq:020}.log"))
}

fn create_segment(dir: &Path, seq: u64) -> anyhow::Result<File> {
    let path = segment_path(dir, seq);
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("cannot create WAL segment {}", path.display()))?;
    sync_dir(dir)?;
    Ok(f)
}

fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot fsync WAL directory {}", dir.display()))
}

type Records = Vec<(u8, Vec<u8>, u64, u64)>;

/// Reads the valid prefix of a segment: its records (kind, payload, bytes on disk,
/// offset in the file),
/// the length of the valid prefix and the file length.
fn read_segment(path: &Path) -> anyhow::Result<(Records, u64, u64)> {
    let mut f =
        File::open(path).with_context(|| format!("cannot open WAL segment {}", path.display()))?;
    let file_len = f.seek(SeekFrom::End(0))?;
    f.seek(SeekFrom::Start(0))?;
    let mut data = Vec::with_capacity(file_len as usize);
    f.read_to_end(&mut data)
        .with_context(|| format!("cannot read WAL segment {}", path.display()))?;
    let mut records = Vec::new();
    let mut pos = 0usize;
    loop {
        let rest = &data[pos..];
        if rest.len() < HEADER_BYTES as usize {
            break;
        }
        let len = u32::from_le_bytes(rest[0..4].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
        if len == 0 || len > MAX_RECORD_BYTES || rest.len() < HEADER_BYTES as usize + len as usize {
            break;
        }
        let body = &rest[8..8 + len as usize];
        if crc32fast::hash(body) != crc {
            break;
        }
        let kind = body[0];
        let payload = &body[1..];
        let valid = match kind {
            KIND_ENTRY => true,
            KIND_PUBLISHED | KIND_DISCARDED => payload.len() == 8,
            _ => false,
        };
        if !valid {
            break;
        }
        let total = HEADER_BYTES + len as u64;
        records.push((kind, payload.to_vec(), total, pos as u64));
        pos += total as usize;
    }
    Ok((records, pos as u64, file_len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(p: i32, start: i64, end: i64) -> CommittedRange {
        CommittedRange {
            topic: "t".into(),
            partition: p,
            start: Some(start),
            end,
        }
    }

    fn msg(s: &str) -> WalMessage {
        WalMessage {
            key: "t".into(),
            payload: s.into(),
        }
    }

    fn opts() -> WalOptions {
        WalOptions {
            segment_bytes: 1 << 20,
            ..Default::default()
        }
    }

    fn only_segment(dir: &Path) -> PathBuf {
        let mut segs: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| fs::metadata(p).unwrap().len() > 0)
            .collect();
        assert_eq!(segs.len(), 1, "{segs:?}");
        segs.pop().unwrap()
    }

    #[test]
    fn pending_entries_survive_reopen_and_published_ones_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), opts()).unwrap();
        let a = wal.append(vec![range(0, 0, 10)], vec![msg("a")]).unwrap();
        let b = wal.append(vec![range(0, 10, 20)], vec![msg("b")]).unwrap();
        let c = wal.append(vec![range(1, 0, 5)], vec![msg("c")]).unwrap();
        wal.mark_published(a).unwrap();
        wal.discard(c).unwrap();
        drop(wal);
        let (wal, rec) = Wal::open(dir.path(), opts()).unwrap();
        assert!(rec.truncated.is_empty());
        let pending = wal.pending_entries().unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].id, b);
        assert_eq!(pending[0].ranges, vec![range(0, 10, 20)]);
        assert_eq!(pending[0].messages, vec![msg("b")]);
        // ids keep growing across restarts, so order is publication order
        drop(wal);
        let (mut wal, _) = Wal::open(dir.path(), opts()).unwrap();
        assert!(wal.append(vec![], vec![]).unwrap() > c);
    }

    #[test]
    fn torn_last_record_is_truncated_and_earlier_entries_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), opts()).unwrap();
        let a = wal.append(vec![range(0, 0, 10)], vec![msg("a")]).unwrap();
        wal.append(vec![range(0, 10, 20)], vec![msg("b")]).unwrap();
        drop(wal);
        let seg = only_segment(dir.path());
        let len = fs::metadata(&seg).unwrap().len();
        // a crash in the middle of the second write
        OpenOptions::new()
            .write(true)
            .open(&seg)
            .unwrap()
            .set_len(len - 7)
            .unwrap();
        let (wal, rec) = Wal::open(dir.path(), opts()).unwrap();
        assert_eq!(rec.truncated.len(), 1);
        assert_eq!(rec.truncated[0].0, seg);
        let ids = wal.pending_ids();
        assert_eq!(ids, vec![a]);
        assert_eq!(
            fs::metadata(&seg).unwrap().len(),
            rec.truncated[0].1,
            "file truncated on disk"
        );
    }

    #[test]
    fn flipped_byte_is_detected_and_the_tail_from_there_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), opts()).unwrap();
        let a = wal.append(vec![range(0, 0, 10)], vec![msg("a")]).unwrap();
        let b = wal
            .append(vec![range(0, 10, 20)], vec![msg("bbbbbbbbbbbbbbbb")])
            .unwrap();
        let c = wal.append(vec![range(0, 20, 30)], vec![msg("c")]).unwrap();
        let sizes: Vec<u64> = wal.pending.values().map(|p| p.len).collect();
        drop(wal);
        let seg = only_segment(dir.path());
        let mut data = fs::read(&seg).unwrap();
        let in_b = (sizes[0] + sizes[1] / 2) as usize;
        data[in_b] ^= 0x20;
        fs::write(&seg, &data).unwrap();
        let (wal, rec) = Wal::open(dir.path(), opts()).unwrap();
        assert_eq!(
            rec.truncated,
            vec![(seg.clone(), sizes[0], sizes[1] + sizes[2])]
        );
        let ids = wal.pending_ids();
        assert_eq!(
            ids,
            vec![a],
            "b is corrupt, c follows it: both dropped ({b}, {c})"
        );
    }

    #[test]
    fn corrupt_length_does_not_allocate_or_panic() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), opts()).unwrap();
        wal.append(vec![range(0, 0, 10)], vec![msg("a")]).unwrap();
        drop(wal);
        let seg = only_segment(dir.path());
        let mut data = fs::read(&seg).unwrap();
        data[3] = 0xff;
        fs::write(&seg, &data).unwrap();
        let (wal, rec) = Wal::open(dir.path(), opts()).unwrap();
        assert_eq!(wal.pending_count(), 0);
        assert_eq!(rec.truncated[0].1, 0);
    }

    #[test]
    fn published_segments_are_removed_and_limit_tracks_pending_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let o = WalOptions {
            segment_bytes: 200,
            max_pending_bytes: 1000,
            fsync: FsyncPolicy::Never,
        };
        let (mut wal, _) = Wal::open(dir.path(), o.clone()).unwrap();
        let mut ids = Vec::new();
        for i in 0..20 {
            ids.push(
                wal.append(
                    vec![range(0, i * 10, i * 10 + 10)],
                    vec![msg(&"x".repeat(100))],
                )
                .unwrap(),
            );
        }
        assert!(wal.over_limit(), "{} pending bytes", wal.pending_bytes());
        let segs = fs::read_dir(dir.path()).unwrap().count();
        assert!(segs > 5, "{segs} segments");
        for id in &ids {
            wal.mark_published(*id).unwrap();
        }
        assert!(!wal.over_limit());
        assert_eq!(wal.pending_bytes(), 0);
        let left = fs::read_dir(dir.path()).unwrap().count();
        assert!(
            left <= 2,
            "{left} segments left after everything was published"
        );
        drop(wal);
        let (wal, _) = Wal::open(dir.path(), o).unwrap();
        assert_eq!(wal.pending_count(), 0);
    }

    #[test]
    fn marks_in_a_later_segment_keep_resolving_after_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let o = WalOptions {
            segment_bytes: 150,
            max_pending_bytes: 1 << 20,
            fsync: FsyncPolicy::Always,
        };
        let (mut wal, _) = Wal::open(dir.path(), o.clone()).unwrap();
        let a = wal
            .append(vec![range(0, 0, 1)], vec![msg(&"a".repeat(200))])
            .unwrap();
        let b = wal
            .append(vec![range(0, 1, 2)], vec![msg(&"b".repeat(200))])
            .unwrap();
        wal.mark_published(b).unwrap();
        drop(wal);
        let (wal, _) = Wal::open(dir.path(), o.clone()).unwrap();
        assert_eq!(wal.pending_ids(), vec![a]);
        drop(wal);
        let (mut wal, _) = Wal::open(dir.path(), o.clone()).unwrap();
        wal.mark_published(a).unwrap();
        drop(wal);
        let (wal, _) = Wal::open(dir.path(), o).unwrap();
        assert_eq!(wal.pending_count(), 0);
    }

    #[test]
    fn a_failed_or_partial_write_leaves_the_wal_usable_and_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), opts()).unwrap();
        let a = wal.append(vec![range(0, 0, 10)], vec![msg("a")]).unwrap();
        // Disk full half-way through the next record.
        wal.faults.partial_write = Some(13);
        wal.append(vec![range(0, 10, 20)], vec![msg("lost")])
            .unwrap_err();
        // fsync fails after a complete write: not durable, so not an entry either.
        wal.faults.fail_sync = true;
        wal.append(vec![range(0, 10, 20)], vec![msg("unsynced")])
            .unwrap_err();
        let c = wal.append(vec![range(0, 10, 30)], vec![msg("c")]).unwrap();
        assert_eq!(wal.read(a).unwrap().messages, vec![msg("a")]);
        assert_eq!(
            wal.read(c).unwrap().messages,
            vec![msg("c")],
            "an entry after a failed write reads back"
        );
        assert_eq!(wal.pending_ids(), vec![a, c]);
        drop(wal);
        let (wal, rec) = Wal::open(dir.path(), opts()).unwrap();
        assert!(rec.truncated.is_empty(), "{rec:?}");
        assert_eq!(wal.pending_ids(), vec![a, c], "no failed record came back");
    }
}
