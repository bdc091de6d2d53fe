//! The run store as the engine's [`RunLog`]: one store shared by the runs
//! of an engine, each run appending its own entries.

use crate::error::Error;
use attest_core::{LogError, ResumeState, RunLog};
use attest_protocol::{LogEntry, TraceRecord};
use attest_store::{ChainVerdict, SqliteStore, Store, StoreError};
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

    /// A store chosen at run time (SQLite or PostgreSQL).
    pub fn from_box(store: Box<dyn Store>) -> Self {
        SharedStore(Arc::new(Mutex::new(store)))
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

/// Appends one run's entries to the shared store. Entries are held until
/// the engine flushes (before every model request, tool execution and
/// approval) and then written in one transaction: one per step boundary,
/// not one per entry (SPEC P1). Dropping the log writes what it holds.
pub struct StoreLog {
    store: SharedStore,
    run_id: String,
    /// Shown each entry once it is stored; it never fails the append.
    tap: Option<crate::telemetry::LogTap>,
    pending: Vec<LogEntry>,
}

impl StoreLog {
    pub fn new(store: SharedStore, run_id: &str, tap: Option<crate::telemetry::LogTap>) -> Self {
        StoreLog {
            store,
            run_id: run_id.to_string(),
            tap,
            pending: Vec::new(),
        }
    }

    /// Writes what is held in one transaction and hands it back. On failure
    /// the entries stay held: nothing is half-written, and the run ends
    /// with the error.
    fn write_held(&mut self) -> Result<Vec<LogEntry>, LogError> {
        self.store
            .lock()
            .append_all(&self.run_id, &self.pending)
            .map_err(|e| LogError::Store(e.to_string()))?;
        Ok(std::mem::take(&mut self.pending))
    }

    /// Shows stored entries to the tap, if there is one.
    fn show(&self, entries: &[LogEntry]) {
        if let Some(tap) = &self.tap {
            for entry in entries {
                tap(&self.run_id, entry);
            }
        }
    }
}

impl RunLog for StoreLog {
    fn append(&mut self, entry: &LogEntry) -> Result<(), LogError> {
        self.pending.push(entry.clone());
        Ok(())
    }

    fn append_all(&mut self, entries: Vec<LogEntry>) -> Result<Vec<LogEntry>, LogError> {
        // Moved in behind what is held, written with it in one
        // transaction, then split off again: never copied.
        let held = self.pending.len();
        self.pending.extend(entries);
        let mut written = self.write_held()?;
        let given = written.split_off(held);
        self.show(&written);
        self.show(&given);
        Ok(given)
    }

    fn flush(&mut self) -> Result<(), LogError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let written = self.write_held()?;
        self.show(&written);
        Ok(())
    }
}

impl Drop for StoreLog {
    fn drop(&mut self) {
        // A run dropped between two waits (its task aborted) keeps what it
        // logged; an error here has nobody left to report to.
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attest_protocol::TranscriptItem;

    fn item(text: &str) -> LogEntry {
        LogEntry::Item {
            item: TranscriptItem::UserInput {
                text: text.to_string(),
            },
        }
    }

    fn stored(store: &SharedStore) -> usize {
        store.lock().entries("r1").map(|e| e.len()).unwrap_or(0)
    }

    /// Run `r1` of session `s1`, begun in `store`.
    fn begin_run(store: &SharedStore) {
        store.lock().ensure_session("s1").unwrap();
        let run = attest_store::NewRun {
            id: "r1".into(),
            session_id: "s1".into(),
            trace_id: "t1".into(),
            prompt: "p".into(),
            settings: serde_json::json!({}),
            loop_version: "l".into(),
            prompt_version: "p".into(),
        };
        store.lock().begin_run(&run).unwrap();
    }

    #[test]
    fn entries_are_held_until_a_flush_and_written_on_drop() {
        let store = SharedStore::new(SqliteStore::open_in_memory().unwrap());
        begin_run(&store);
        let mut log = StoreLog::new(store.clone(), "r1", None);
        log.append(&item("one")).unwrap();
        log.append(&item("two")).unwrap();
        assert_eq!(stored(&store), 0, "held until the flush");
        log.flush().unwrap();
        assert_eq!(stored(&store), 2);
        log.append(&item("three")).unwrap();
        let given = log.append_all(vec![item("four")]).unwrap();
        assert_eq!(given, [item("four")], "given back as they were");
        assert_eq!(stored(&store), 4, "append_all writes what was held too");
        log.append(&item("five")).unwrap();
        drop(log);
        assert_eq!(stored(&store), 5, "dropping the log writes what it held");
    }

    #[test]
    fn entries_the_store_refuses_are_held_and_written_by_the_next_flush() {
        let store = SharedStore::new(SqliteStore::open_in_memory().unwrap());
        let shown = Arc::new(Mutex::new(Vec::new()));
        let tap: crate::telemetry::LogTap = {
            let shown = Arc::clone(&shown);
            Arc::new(move |run: &str, entry: &LogEntry| {
                shown.lock().unwrap().push((run.to_string(), entry.clone()))
            })
        };
        let mut log = StoreLog::new(store.clone(), "r1", Some(tap));
        // Nothing held, and the run is not in the store yet: refused.
        assert!(log.append_all(vec![item("one"), item("two")]).is_err());
        assert!(
            shown.lock().unwrap().is_empty(),
            "nothing stored, nothing shown"
        );
        begin_run(&store);
        log.flush().unwrap();
        assert_eq!(stored(&store), 2, "the refused entries were held");
        log.append_all(vec![item("three")]).unwrap();
        assert_eq!(stored(&store), 3);
        let shown: Vec<LogEntry> = shown
            .lock()
            .unwrap()
            .iter()
            .map(|(_, e)| e.clone())
            .collect();
        assert_eq!(shown, vec![item("one"), item("two"), item("three")]);
    }
}

/// What the log of a run says so far, for resuming or closing it.
pub fn resume_state(store: &dyn Store, run_id: &str) -> Result<ResumeState, StoreError> {
    let entries = store.entries(run_id)?;
    let mut state = ResumeState {
        items: Vec::new(),
        last_seq: 0,
        steps: 0,
        done: false,
    };
    for entry in entries {
        match entry {
            LogEntry::Item { item } => state.items.push(item),
            LogEntry::Event { event } => {
                state.last_seq = state.last_seq.max(event.seq);
                state.done |= matches!(event.body, attest_protocol::EventBody::Done { .. });
            }
            LogEntry::Trace {
                trace: TraceRecord::Request { step, .. },
            } => state.steps = state.steps.max(step),
            LogEntry::Trace { .. } | LogEntry::Archive { .. } => {}
        }
    }
    Ok(state)
}

/// What to do with a run recorded before the store kept a hash chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unchained {
    /// Read it, with a warning that it cannot be verified.
    Warn,
    /// Refuse it: the caller would act on it (resume).
    Refuse,
}

/// Checks a run's hash chain before its log is read back (SPEC F14): a
/// broken chain is an error naming the first bad entry; `doing` says what
/// was refused (`resume`, `trace`). `Ok(Some(warning))` for an unchained
/// run under [`Unchained::Warn`].
pub fn verify_log(
    store: &dyn Store,
    run_id: &str,
    doing: &str,
    unchained: Unchained,
) -> Result<Option<String>, Error> {
    match store.verify_chain(run_id)? {
        ChainVerdict::Intact { .. } => Ok(None),
        ChainVerdict::Unchained { .. } if unchained == Unchained::Warn => Ok(Some(format!(
            "run {run_id} was recorded before the store kept a hash chain; its log cannot be verified"
        ))),
        ChainVerdict::Unchained { .. } => Err(Error::Run(format!(
            "run {run_id} was recorded before the store kept a hash chain, so its log cannot be \
             verified; {doing} refuses it"
        ))),
        ChainVerdict::Broken(b) => Err(Error::Run(format!(
            "run {run_id}: the log's hash chain is broken at {b}. The store was changed outside \
             attest; {doing} refuses it"
        ))),
    }
}
