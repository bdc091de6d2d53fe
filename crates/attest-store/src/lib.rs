//! The durable run store: sessions, runs, each run's append-only log
//! (transcript items, events, trace records), receipts and raw audit
//! artifacts.
//!
//! Invariants:
//! - The log is append-only (enforced by triggers) and each append is its own
//!   committed transaction, so an entry is on disk before the engine acts on
//!   it and a crash loses at most the entry being written.
//! - Raw model outputs go to the `artifacts` table; the log keeps a reference.
//!   Nothing in this crate returns them among transcript items, so they cannot
//!   reach a prompt.
//! - Each run's entries form a hash chain (`chain.rs`): [`Store::verify_chain`]
//!   recomputes it and names the first entry that does not hold.
//! - No business rules: this crate stores and returns what it is given. The
//!   only SQL in attest lives here, behind the [`Store`] trait, so a server
//!   backend can implement the same trait.

mod chain;
mod memory;
mod postgres;
mod records;
mod server;
mod sqlite;

pub use chain::{ChainBreak, ChainVerdict};

pub use postgres::{
    shown_url, PgListener, PgStore, APPROVALS_CHANNEL, EVENTS_CHANNEL, PG_SCHEMA_VERSION,
    QUEUE_CHANNEL,
};
pub use records::{Artifact, NewRun, RunRecord, RunStatus, SessionRecord};
pub use server::{
    ApprovalRecord, Enqueued, Lease, NewToken, QueueRecord, QueuedRun, ServerStore, StoredEvent,
    TokenRecord, DELIVERY_KEYS_KEPT,
};
pub use sqlite::SqliteStore;

use attest_protocol::{LogEntry, MemoryItem, MemoryStatus, TraceRecord, TranscriptItem};
use chrono::{DateTime, Utc};

/// Schema version this build reads and writes.
pub const SCHEMA_VERSION: i64 = 8;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the store at {path}: {reason}")]
    Open { path: String, reason: String },
    #[error("the store at {path} has schema version {found}, newer than this attest understands ({supported}); upgrade attest or move the file aside")]
    NewerSchema {
        path: String,
        found: i64,
        supported: i64,
    },
    #[error("the store is damaged: {0}. Move .attest/attest.db aside to start afresh (runs in it will no longer be listed)")]
    Corrupt(String),
    #[error("store error: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("cannot encode or decode a stored entry: {0}")]
    Json(#[from] serde_json::Error),
    #[error("no run matches `{0}`")]
    UnknownRun(String),
    #[error("`{0}` matches several runs; give more characters")]
    AmbiguousRun(String),
    #[error("no memory item matches `{0}`")]
    UnknownMemory(String),
    #[error("`{0}` matches several memory items; give more characters")]
    AmbiguousMemory(String),
    #[error("run {run} was claimed by another process ({pid}) first")]
    AlreadyClaimed { run: String, pid: u32 },
    #[error(
        "run {run}: this worker's lease (epoch {epoch}) was taken over; its writes are refused"
    )]
    Fenced { run: String, epoch: i64 },
    #[error("PostgreSQL: {0}")]
    Postgres(String),
}

/// What a run store can do. Implemented by [`SqliteStore`] and, for
/// several servers sharing one database, [`PgStore`].
pub trait Store: Send {
    /// Create the session if it does not exist, and touch its `updated_at`.
    fn ensure_session(&mut self, session_id: &str) -> Result<(), StoreError>;
    /// Record a new run as `running`, owned by the calling process.
    fn begin_run(&mut self, run: &NewRun) -> Result<(), StoreError>;
    /// Append one log entry (one committed transaction). A `done` event also
    /// records the run's terminal state.
    fn append(&mut self, run_id: &str, entry: &LogEntry) -> Result<(), StoreError>;
    /// Append several entries in one transaction: all of them or none (a
    /// run's terminal item and its `done` event).
    fn append_all(&mut self, run_id: &str, entries: &[LogEntry]) -> Result<(), StoreError>;
    /// Mark a run as owned by the calling process again (resume), only if
    /// it is still `running` under `seen_pid`, the owner the caller read:
    /// [`StoreError::AlreadyClaimed`] when another process got there first.
    fn claim_run(&mut self, run_id: &str, seen_pid: Option<u32>) -> Result<(), StoreError>;
    /// Fence this handle's appends to `run_id` with a queue lease: from now
    /// on they commit only while the run's lease is still `owner`'s at
    /// `epoch`, and fail with [`StoreError::Fenced`] once another worker
    /// took the run over (it checks within the append's transaction).
    fn fence(&mut self, run_id: &str, owner: &str, epoch: i64);
    /// Forget a run's fence: its worker is done with it.
    fn unfence(&mut self, run_id: &str);
    /// Find a run by id or unique id prefix.
    fn run(&self, id_or_prefix: &str) -> Result<RunRecord, StoreError>;
    /// Runs, newest first, optionally of one session.
    fn runs(&self, session_id: Option<&str>) -> Result<Vec<RunRecord>, StoreError>;
    fn sessions(&self) -> Result<Vec<SessionRecord>, StoreError>;
    /// A run's log in order, raw outputs replaced by artifact references.
    fn entries(&self, run_id: &str) -> Result<Vec<LogEntry>, StoreError>;
    /// Recomputes the run's hash chain: intact, unchained (recorded before
    /// the chain existed), or broken at its first bad entry.
    fn verify_chain(&self, run_id: &str) -> Result<ChainVerdict, StoreError>;
    /// A run's trace records of the kinds named (their `record` tag:
    /// `"request"`, `"response"`, …), in order: what a caller needs from
    /// a long run's log without reading the rest of it.
    fn traces(&self, run_id: &str, records: &[&str]) -> Result<Vec<TraceRecord>, StoreError>;
    /// A run's transcript items only (what requests are rebuilt from).
    fn items(&self, run_id: &str) -> Result<Vec<TranscriptItem>, StoreError>;
    /// Transcript items compacted out of a run's requests (SPEC E4).
    fn archived(&self, run_id: &str) -> Result<Vec<TranscriptItem>, StoreError>;
    /// Raw audit artifacts of a run.
    fn artifacts(&self, run_id: &str) -> Result<Vec<Artifact>, StoreError>;

    /// Insert a memory item, or replace the one with its id.
    fn put_memory(&mut self, item: &MemoryItem) -> Result<(), StoreError>;
    /// Memory items with one of `statuses` (all items when empty), oldest
    /// first.
    fn memory_items(&self, statuses: &[MemoryStatus]) -> Result<Vec<MemoryItem>, StoreError>;
    /// A memory item by id or unique id prefix.
    fn memory_item(&self, id_or_prefix: &str) -> Result<MemoryItem, StoreError>;
    /// Set an item's status (and `updated_at`); returns the updated item.
    fn set_memory_status(
        &mut self,
        id: &str,
        status: MemoryStatus,
    ) -> Result<MemoryItem, StoreError>;
    /// Record a verification of an item against its source: when, and the
    /// status it leaves the item in. The recorded source hash is never
    /// changed here: a changed source makes an item stale, not re-sourced.
    /// Returns the updated item.
    fn update_memory_verification(
        &mut self,
        id: &str,
        verified_at: DateTime<Utc>,
        status: MemoryStatus,
    ) -> Result<MemoryItem, StoreError>;
    /// The last `MEMORY.md` text written from the store, if any.
    fn memory_projection(&self) -> Result<Option<String>, StoreError>;
    fn set_memory_projection(&mut self, text: &str) -> Result<(), StoreError>;
}
