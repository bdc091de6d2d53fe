//! The run store as the engine's [`RunLog`]: one store shared by the runs
//! of an engine, each run appending its own entries.

use attest_core::{LogError, ResumeState, RunLog};
use attest_protocol::{LogEntry, TraceRecord};
use attest_store::{SqliteStore, Store, StoreError};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// `<workspace>/.attest/attest.db`.
pub fn store_path(workspace: &Path) -> PathBuf {
    workspace.join(".attest").join("attest.db")
}

/// The workspace's store, created when missing.
pub fn open_store(workspace: &Path) -> Result<SqliteStore, StoreError> {
    SqliteStore::open(&store_path(workspace))
}

/// A store several runs share. Each append locks it briefly; nothing holds
/// the lock across an `.await`.
#[derive(Clone)]
pub struct SharedStore(Arc<Mutex<Box<dyn Store>>>);

impl std::fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedStore")
    }
}

impl SharedStore {
    pub fn new(store: impl Store + 'static) -> Self {
        SharedStore(Arc::new(Mutex::new(Box::new(store))))
    }

    /// The store, for a few synchronous calls. A thread that panicked while
    /// holding it cannot have left a half-written entry (every append is one
    /// transaction), so a poisoned lock is taken over.
    pub fn lock(&self) -> MutexGuard<'_, Box<dyn Store>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Appends one run's entries to the shared store, each committed before it
/// returns.
pub struct StoreLog {
    pub store: SharedStore,
    pub run_id: String,
}

impl RunLog for StoreLog {
    fn append(&mut self, entry: &LogEntry) -> Result<(), LogError> {
        self.store
            .lock()
            .append(&self.run_id, entry)
            .map_err(|e| LogError::Store(e.to_string()))
    }
}

/// What the log of a run says so far, for resuming or closing it.
pub fn resume_state(store: &dyn Store, run_id: &str) -> Result<ResumeState, StoreError> {
    let entries = store.entries(run_id)?;
    let mut state = ResumeState {
        items: Vec::new(),
        last_seq: 0,
        steps: 0,
    };
    for entry in entries {
        match entry {
            LogEntry::Item { item } => state.items.push(item),
            LogEntry::Event { event } => state.last_seq = state.last_seq.max(event.seq),
            LogEntry::Trace {
                trace: TraceRecord::Request { step, .. },
            } => state.steps = state.steps.max(step),
            LogEntry::Trace { .. } | LogEntry::Archive { .. } => {}
        }
    }
    Ok(state)
}
