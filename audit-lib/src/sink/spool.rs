//! A sink wrapper that keeps undeliverable batches in a local directory and replays
//! them, oldest first, when the inner sink accepts again: what a producer-tier user
//! needs when Kafka or the collector is down.
//!
//! Each batch is one file `spool-<seq>.json` (a JSON array of audit messages), written
//! to a temporary name, fsynced and renamed, so a crash leaves either the whole batch
//! or nothing. The directory is bounded by `max_bytes`: a batch that does not fit is
//! refused with [`SinkError::SpoolFull`] and stays with the caller; nothing is dropped.
//! A file that cannot be parsed on replay is renamed to `*.corrupt`, a batch the inner
//! sink refuses for good to `*.rejected`; both are counted, neither is deleted.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{Sink, SinkError};
use crate::message::AuditMessage;

const PREFIX: &str = "spool-";
const SUFFIX: &str = ".json";

/// What the spool holds and has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpoolStats {
    /// Batches waiting in the directory.
    pub pending_batches: usize,
    /// Their size on disk.
    pub pending_bytes: u64,
    /// Batches written to the spool since start.
    pub spooled_total: u64,
    /// Spooled batches delivered by replay since start.
    pub replayed_total: u64,
    /// Files set aside as `*.corrupt` (unparsable) since start.
    pub corrupt_total: u64,
    /// Spooled batches the inner sink refused for good, set aside as `*.rejected`.
    pub rejected_total: u64,
}

pub struct SpoolingSink<S> {
    inner: S,
    dir: PathBuf,
    max_bytes: u64,
    next_seq: u64,
    stats: SpoolStats,
}

fn io_err(path: &Path, source: std::io::Error) -> SinkError {
    SinkError::Io {
        path: path.display().to_string(),
        source,
    }
}

impl<S: Sink> SpoolingSink<S> {
    /// Opens (creating) the spool directory; batches left by a previous run are
    /// replayed by the next `send` or `replay`.
    pub fn new(inner: S, dir: impl Into<PathBuf>, max_bytes: u64) -> Result<Self, SinkError> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
        let mut s = SpoolingSink {
            inner,
            dir,
            max_bytes,
            next_seq: 0,
            stats: SpoolStats::default(),
        };
        let files = s.files()?;
        s.next_seq = files.last().map_or(0, |(seq, _, _)| seq + 1);
        s.stats.pending_batches = files.len();
        s.stats.pending_bytes = files.iter().map(|(_, _, len)| len).sum();
        Ok(s)
    }

    pub fn stats(&self) -> SpoolStats {
        self.stats
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Spool files sorted by sequence: (seq, path, size).
    fn files(&self) -> Result<Vec<(u64, PathBuf, u64)>, SinkError> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(|e| io_err(&self.dir, e))? {
            let entry = entry.map_err(|e| io_err(&self.dir, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(seq) = name
                .strip_prefix(PREFIX)
                .and_then(|r| r.strip_suffix(SUFFIX))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            let len = entry
                .metadata()
                .map_err(|e| io_err(&entry.path(), e))?
                .len();
            out.push((seq, entry.path(), len));
        }
        out.sort_by_key(|(seq, _, _)| *seq);
        Ok(out)
    }

    fn spool(&mut self, batch: &[AuditMessage]) -> Result<(), SinkError> {
        let body = serde_json::to_vec(batch).expect("audit messages always serialise");
        let needed = body.len() as u64;
        if self.stats.pending_bytes + needed > self.max_bytes {
            return Err(SinkError::SpoolFull {
                dir: self.dir.display().to_string(),
                used: self.stats.pending_bytes,
                limit: self.max_bytes,
                needed,
            });
        }
        let seq = self.next_seq;
        let path = self.dir.join(format!("{PREFIX}{seq:020}{SUFFIX}"));
        let tmp = self.dir.join(format!(".{PREFIX}{seq:020}.tmp"));
        let mut f = fs::File::create(&tmp).map_err(|e| io_err(&tmp, e))?;
        f.write_all(&body).map_err(|e| io_err(&tmp, e))?;
        f.sync_all().map_err(|e| io_err(&tmp, e))?;
        drop(f);
        fs::rename(&tmp, &path).map_err(|e| io_err(&path, e))?;
        // The rename is durable only once the directory entry is.
        fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_err(&self.dir, e))?;
        self.next_seq += 1;
        self.stats.pending_batches += 1;
        self.stats.pending_bytes += needed;
        self.stats.spooled_total += 1;
        Ok(())
    }

    /// Sends spooled batches oldest first until the spool is empty (returns how many
    /// were delivered) or the inner sink fails (returns its error; the failed batch
    /// stays spooled).
    pub fn replay(&mut self) -> Result<usize, SinkError> {
        let mut delivered = 0;
        for (_, path, len) in self.files()? {
            let bytes = fs::read(&path).map_err(|e| io_err(&path, e))?;
            match serde_json::from_slice::<Vec<AuditMessage>>(&bytes) {
                Ok(batch) => match self.inner.send(&batch) {
                    Ok(()) => {
                        fs::remove_file(&path).map_err(|e| io_err(&path, e))?;
                        delivered += 1;
                        self.stats.replayed_total += 1;
                    }
                    Err(e) if e.is_retriable() => return Err(e),
                    Err(_) => {
                        // Refused for good: set aside, or it would block the spool forever.
                        let bad = path.with_extension("rejected");
                        fs::rename(&path, &bad).map_err(|e| io_err(&path, e))?;
                        self.stats.rejected_total += 1;
                    }
                },
                Err(_) => {
                    let bad = path.with_extension("corrupt");
                    fs::rename(&path, &bad).map_err(|e| io_err(&path, e))?;
                    self.stats.corrupt_total += 1;
                }
            }
            self.stats.pending_batches -= 1;
            self.stats.pending_bytes -= len;
        }
        Ok(delivered)
    }
}

impl<S: Sink> Sink for SpoolingSink<S> {
    /// Replays the spool first (so order is kept), then sends `batch`; if the inner
    /// sink is unavailable the batch is spooled and `Ok` returned. Rejections and a
    /// full spool are returned as errors.
    fn send(&mut self, batch: &[AuditMessage]) -> Result<(), SinkError> {
        if batch.is_empty() {
            return Ok(());
        }
        let replayed = if self.stats.pending_batches > 0 {
            self.replay()
        } else {
            Ok(0)
        };
        match replayed {
            Ok(_) => match self.inner.send(batch) {
                Ok(()) => Ok(()),
                Err(e) if e.is_retriable() => self.spool(batch),
                Err(e) => Err(e),
            },
            Err(e) if e.is_retriable() => self.spool(batch),
            Err(e) => Err(e),
        }
    }
}
