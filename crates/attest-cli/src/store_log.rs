//! The run store as the engine's [`RunLog`], and the helpers commands share
//! to open it and read a run back.

use anyhow::{bail, Context, Result};
use attest_core::{LogError, ResumeState, RunLog};
use attest_protocol::{LogEntry, TraceRecord};
use attest_store::{ChainVerdict, SqliteStore, Store};
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

/// What to do with a run recorded before the store's hash chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unchained {
    /// Read it, saying on stderr that it cannot be verified.
    Warn,
    /// Refuse it: the caller would act on it (resume).
    Refuse,
}

/// Checks a run's hash chain before its log is read back (SPEC F14): a
/// broken chain is an error naming the first bad entry; `doing` says what
/// was refused (`resume`, `trace`).
pub fn verify_log(
    store: &SqliteStore,
    run_id: &str,
    doing: &str,
    unchained: Unchained,
) -> Result<()> {
    match store.verify_chain(run_id)? {
        ChainVerdict::Intact { .. } => Ok(()),
        ChainVerdict::Unchained { .. } if unchained == Unchained::Warn => {
            eprintln!(
                "attest: run {run_id} was recorded before the store kept a hash chain; its log \
                 cannot be verified"
            );
            Ok(())
        }
        ChainVerdict::Unchained { .. } => bail!(
            "run {run_id} was recorded before the store kept a hash chain, so its log cannot be \
             verified; {doing} refuses it"
        ),
        ChainVerdict::Broken(b) => bail!(
            "run {run_id}: the log's hash chain is broken at {b}. The store was changed outside \
             attest; {doing} refuses it"
        ),
    }
}
