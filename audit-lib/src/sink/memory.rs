//! An in-memory sink for tests: keeps what it receives, and can be switched to
//! "unavailable" to exercise failure paths.

use std::sync::{Arc, Mutex};

use super::{Sink, SinkError};
use crate::message::AuditMessage;

#[derive(Default)]
struct State {
    messages: Vec<AuditMessage>,
    unavailable: bool,
    batches: usize,
}

/// Cloning gives another handle to the same storage, so a test can keep one while a
/// wrapper owns the other.
#[derive(Clone, Default)]
pub struct MemorySink {
    state: Arc<Mutex<State>>,
}

impl MemorySink {
    pub fn new() -> Self {
        Self::default()
    }

    /// While unavailable, `send` fails with [`SinkError::Unavailable`] and stores nothing.
    pub fn set_available(&self, available: bool) {
        self.lock().unavailable = !available;
    }

    /// Everything delivered so far, in order.
    pub fn messages(&self) -> Vec<AuditMessage> {
        self.lock().messages.clone()
    }

    /// Number of batches delivered.
    pub fn batches(&self) -> usize {
        self.lock().batches
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep using it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Sink for MemorySink {
    fn send(&mut self, batch: &[AuditMessage]) -> Result<(), SinkError> {
        let mut s = self.lock();
        if s.unavailable {
            return Err(SinkError::Unavailable("memory sink switched off".into()));
        }
        s.messages.extend_from_slice(batch);
        s.batches += 1;
        Ok(())
    }
}
