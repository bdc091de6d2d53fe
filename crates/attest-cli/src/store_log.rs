//! The run store as the engine's [`RunLog`], and the helpers commands share
//! to open it and read a run back.

use anyhow::{Context, Result};
use attest_core::{LogError, ResumeState, RunLog};
use attest_protocol::{LogEntry, TraceRecord};
use attest_store::{SqliteStore, Store};
use std::path::{Path, PathBuf};

/// `<workspace>/.attest/attest.db`.
pub fn store_path(workspace: &Path) -> PathBuf {
    workspace.join(".attest").join("attest.db")
}

pub fn open_store(workspace: &Path) -> Result<SqliteStore> {
    let path = store_path(workspace);
    SqliteStore::open(&path).with_context(|| format!("run store {}", path.display()))
}

/// Appends one run's entries to the store, each committed before it returns.
pub struct StoreLog<'a> {
    pub store: &'a mut SqliteStore,
    pub run_id: String,
}

impl RunLog for StoreLog<'_> {
    fn append(&mut self, entry: &LogEntry) -> Result<(), LogError> {
        self.store
            .append(&self.run_id, entry)
            .map_err(|e| LogError::Store(e.to_string()))
    }
}

/// What the log of a run says so far, for resuming or closing it.
pub fn resume_state(store: &SqliteStore, run_id: &str) -> Result<ResumeState> {
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
