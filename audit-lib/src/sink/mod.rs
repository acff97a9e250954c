//! Sinks deliver audit messages somewhere: a trait, a memory sink for tests, a
//! spooling wrapper for outages, and behind features a Kafka sink (`kafka`) and an
//! HTTP sink (`http`).
//!
//! Delivery is at-least-once: a batch whose delivery failed may still have been partly
//! delivered, so a retry can duplicate messages. The collector deduplicates by UUID,
//! which makes that harmless.

mod memory;
mod spool;

#[cfg(feature = "http")]
mod http;
#[cfg(feature = "kafka")]
mod kafka;

pub use memory::MemorySink;
pub use spool::{SpoolStats, SpoolingSink};

#[cfg(feature = "http")]
pub use http::HttpSink;
#[cfg(feature = "kafka")]
pub use kafka::KafkaSink;

use crate::message::AuditMessage;

/// Why a batch was not delivered.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The destination cannot be reached or did not confirm in time; retrying later
    /// may succeed (the spooling wrapper keeps such batches).
    #[error("sink unavailable: {0}")]
    Unavailable(String),
    /// The destination refused the batch; retrying the same batch will not help.
    #[error("sink rejected the batch: {0}")]
    Rejected(String),
    /// The spool directory is at its size bound; the batch was not stored and the
    /// caller still owns it.
    #[error("spool {dir} is full ({used} of {limit} bytes used, batch needs {needed})")]
    SpoolFull {
        dir: String,
        used: u64,
        limit: u64,
        needed: u64,
    },
    #[error("spool I/O on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl SinkError {
    /// Worth retrying later (spooling makes sense).
    pub fn is_retriable(&self) -> bool {
        matches!(self, SinkError::Unavailable(_))
    }
}

/// Somewhere audit messages go.
pub trait Sink {
    /// Delivers the whole batch, or returns an error (the batch may then be partly
    /// delivered; see the module docs).
    fn send(&mut self, batch: &[AuditMessage]) -> Result<(), SinkError>;
}

impl<S: Sink + ?Sized> Sink for Box<S> {
    fn send(&mut self, batch: &[AuditMessage]) -> Result<(), SinkError> {
        (**self).send(batch)
    }
}

impl<S: Sink + ?Sized> Sink for &mut S {
    fn send(&mut self, batch: &[AuditMessage]) -> Result<(), SinkError> {
        (**self).send(batch)
    }
}
