//! The WAL's files: segments `wal-<seq>.log` in the instance's directory, their
//! listing, reading and truncation, and the active segment's file, where the unit
//! tests inject write and fsync faults.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::record::{decode_prefix, Decoded};

pub(super) struct Segment {
    pub(super) path: PathBuf,
    pub(super) size: u64,
    /// Entries in this segment that are neither published nor discarded.
    pub(super) pending: BTreeSet<u64>,
}

impl Segment {
    pub(super) fn empty(dir: &Path, seq: u64) -> Segment {
        Segment {
            path: segment_path(dir, seq),
            size: 0,
            pending: BTreeSet::new(),
        }
    }
}

pub(super) fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("wal-{seq:020}.log"))
}

/// The sequence numbers of the segments in `dir` (created if missing), in order.
pub(super) fn list_segments(dir: &Path) -> anyhow::Result<Vec<u64>> {
    fs::create_dir_all(dir)
        .with_context(|| format!("cannot create WAL directory {}", dir.display()))?;
    let mut seqs = Vec::new();
    for e in
        fs::read_dir(dir).with_context(|| format!("cannot list WAL directory {}", dir.display()))?
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
    Ok(seqs)
}

pub(super) fn create_segment(dir: &Path, seq: u64) -> anyhow::Result<Active> {
    let path = segment_path(dir, seq);
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("cannot create WAL segment {}", path.display()))?;
    sync_dir(dir)?;
    Ok(Active {
        file: f,
        #[cfg(test)]
        faults: Faults::default(),
    })
}

pub(super) fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("cannot fsync WAL directory {}", dir.display()))
}

/// Reads the valid prefix of a segment: its records, the length of the valid prefix
/// and the file length.
pub(super) fn read_segment(path: &Path) -> anyhow::Result<(Vec<Decoded>, u64, u64)> {
    let mut f =
        File::open(path).with_context(|| format!("cannot open WAL segment {}", path.display()))?;
    let file_len = f.seek(SeekFrom::End(0))?;
    f.seek(SeekFrom::Start(0))?;
    let mut data = Vec::with_capacity(file_len as usize);
    f.read_to_end(&mut data)
        .with_context(|| format!("cannot read WAL segment {}", path.display()))?;
    let (records, good_len) = decode_prefix(&data);
    Ok((records, good_len, file_len))
}

/// Cuts a segment's torn or corrupt tail off at `len`, durably.
pub(super) fn truncate(path: &Path, len: u64) -> anyhow::Result<()> {
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .with_context(|| format!("cannot open {} to truncate it", path.display()))?;
    f.set_len(len)
        .with_context(|| format!("cannot truncate {}", path.display()))?;
    f.sync_all()
        .with_context(|| format!("cannot fsync {}", path.display()))
}

/// Reads `len` bytes at `offset` of a segment.
pub(super) fn read_at(path: &Path, offset: u64, len: u64) -> anyhow::Result<Vec<u8>> {
    let mut f =
        File::open(path).with_context(|| format!("cannot open WAL segment {}", path.display()))?;
    f.seek(SeekFrom::Start(offset))?;
    let mut buf = vec![0u8; len as usize];
    f.read_exact(&mut buf)?;
    Ok(buf)
}

/// The active segment's file, appended to.
pub(super) struct Active {
    file: File,
    #[cfg(test)]
    pub(super) faults: Faults,
}

/// Faults the unit tests inject into the next write or fsync.
#[cfg(test)]
#[derive(Default)]
pub(super) struct Faults {
    /// Write only this many bytes of the next record, then fail.
    pub(super) partial_write: Option<usize>,
    pub(super) fail_sync: bool,
}

impl Active {
    pub(super) fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        #[cfg(test)]
        if let Some(n) = self.faults.partial_write.take() {
            self.file.write_all(&buf[..n.min(buf.len())])?;
            return Err(std::io::Error::other("injected: partial write"));
        }
        self.file.write_all(buf)
    }

    pub(super) fn sync_data(&mut self) -> std::io::Result<()> {
        #[cfg(test)]
        if std::mem::take(&mut self.faults.fail_sync) {
            return Err(std::io::Error::other("injected: fsync failed"));
        }
        self.file.sync_data()
    }

    /// Cuts the file back to `size`, durably.
    pub(super) fn cut(&mut self, size: u64) -> std::io::Result<()> {
        self.file.set_len(size).and_then(|()| self.file.sync_data())
    }

    /// The file's length on disk.
    pub(super) fn len_on_disk(&self) -> Option<u64> {
        self.file.metadata().map(|m| m.len()).ok()
    }
}
