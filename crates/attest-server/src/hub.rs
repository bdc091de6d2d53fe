//! Wakes event-stream readers when a run appends an event. The store is
//! the source of truth: a reader woken here reads the new events from the
//! store, so nothing is ever delivered that is not durable, and a reader
//! that missed a wake-up finds the events on its next read (streams also
//! re-read on a short poll).

use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::watch;

#[derive(Default)]
pub struct Hub {
    runs: Mutex<HashMap<String, watch::Sender<u64>>>,
    sessions: Mutex<HashMap<String, watch::Sender<u64>>>,
}

fn subscribe(map: &Mutex<HashMap<String, watch::Sender<u64>>>, key: &str) -> watch::Receiver<u64> {
    let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
    map.entry(key.to_string())
        .or_insert_with(|| watch::channel(0).0)
        .subscribe()
}

fn bump(map: &Mutex<HashMap<String, watch::Sender<u64>>>, key: &str) {
    let map = map.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(tx) = map.get(key) {
        tx.send_modify(|n| *n += 1);
    }
}

impl Hub {
    pub fn subscribe_run(&self, run_id: &str) -> watch::Receiver<u64> {
        subscribe(&self.runs, run_id)
    }

    pub fn subscribe_session(&self, session_id: &str) -> watch::Receiver<u64> {
        subscribe(&self.sessions, session_id)
    }

    /// A run appended an event (it is in the store already).
    pub fn appended(&self, run_id: &str, session_id: &str) {
        bump(&self.runs, run_id);
        bump(&self.sessions, session_id);
    }

    /// A run ended: wake its readers one last time and forget it.
    pub fn ended(&self, run_id: &str) {
        let tx = self
            .runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(run_id);
        if let Some(tx) = tx {
            tx.send_modify(|n| *n += 1);
        }
    }
}
