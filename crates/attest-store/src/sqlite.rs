//! SQLite implementation of [`Store`]: WAL mode, one transaction per append.

use crate::chain::{self, ChainVerdict, RunHeader, StoredEntry};
use crate::records::{Artifact, NewRun, RunRecord, SessionRecord};
use crate::{Store, StoreError, SCHEMA_VERSION};
use attest_protocol::{EventBody, LogEntry, MemoryItem, MemoryStatus, TraceRecord, TranscriptItem};
use chrono::{DateTime, Utc};
use rusqlite::{params, Connection, OptionalExtension};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/0001_init.sql"),
    include_str!("../migrations/0002_archive.sql"),
    include_str!("../migrations/0003_memory.sql"),
    include_str!("../migrations/0004_hash_chain.sql"),
    include_str!("../migrations/0005_server.sql"),
    include_str!("../migrations/0006_approvals.sql"),
    include_str!("../migrations/0007_webhooks.sql"),
    PLAIN_ROWIDS,
];

/// Schema 8: rebuilds `entries` and `artifacts` without AUTOINCREMENT. A
/// store created since gets them plain from 0001 and skips the rebuild,
/// whose schema changes cost a new store's process about 0.6 MB of peak
/// memory.
const PLAIN_ROWIDS: &str = include_str!("../migrations/0008_plain_rowids.sql");

/// Whether `entries` or `artifacts` still numbers its rows with
/// AUTOINCREMENT (created before schema 8).
fn has_autoincrement(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type = 'table'
            AND name IN ('entries', 'artifacts') AND sql LIKE '%AUTOINCREMENT%')",
        [],
        |r| r.get(0),
    )
}

/// Where a run's chain stands, as this process last saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Head {
    /// No entries yet: the next one links from the run's genesis hash.
    Fresh(String),
    /// The hash of the last entry, as `runs.chain_head` holds it.
    Stored(String),
    /// Recorded before the chain: appended to unchained.
    Legacy,
}

impl Head {
    /// What the next entry links from.
    pub(crate) fn prev(&self) -> Option<&str> {
        match self {
            Head::Fresh(h) | Head::Stored(h) => Some(h),
            Head::Legacy => None,
        }
    }

    /// What `runs.chain_head` must hold for this view to be current.
    pub(crate) fn stored(&self) -> Option<&str> {
        match self {
            Head::Stored(h) => Some(h),
            Head::Fresh(_) | Head::Legacy => None,
        }
    }
}

/// The embedded default store, `<workspace>/.attest/attest.db`.
pub struct SqliteStore {
    pub(crate) conn: Connection,
    /// Where the chain of each run appended to by this process stands.
    heads: HashMap<String, Head>,
    /// Runs whose appends are fenced by a lease: run id → (owner, epoch).
    fences: HashMap<String, (String, i64)>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

/// A write transaction that takes the write lock when it begins
/// (`BEGIN IMMEDIATE`), so waiting for another writer goes through the
/// busy timeout. A deferred one that reads first and writes later fails
/// at once with `database is locked` when another connection wrote in
/// between (the server's queue and log are two connections).
pub(crate) fn write_tx(conn: &Connection) -> rusqlite::Result<WriteTx<'_>> {
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    Ok(WriteTx { conn })
}

/// An open write transaction ([`write_tx`]): rolled back when dropped
/// uncommitted. Unlike `rusqlite::Transaction`, it begins and commits
/// with cached statements: a run commits two or three times a step, and
/// parsing `BEGIN` and `COMMIT` anew each time ran SQLite's whole parser
/// on every step (`scripts/bench-footprint.sh` counts the code a step runs).
pub(crate) struct WriteTx<'c> {
    conn: &'c Connection,
}

impl WriteTx<'_> {
    pub(crate) fn commit(self) -> rusqlite::Result<()> {
        // On failure the transaction stays open, and dropping `self` rolls
        // it back.
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(())
    }
}

impl std::ops::Deref for WriteTx<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for WriteTx<'_> {
    fn drop(&mut self) {
        // SQLite may have ended the transaction itself (some errors roll
        // back at once); then there is nothing left to roll back.
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}

pub(crate) fn now() -> String {
    stamp(chrono::Utc::now())
}

/// The store's form of a time (RFC 3339, microseconds, `Z`): such strings
/// sort as the times do.
pub(crate) fn stamp(at: chrono::DateTime<chrono::Utc>) -> String {
    attest_protocol::timestamp::rfc3339(&at, chrono::SecondsFormat::Micros)
}

impl SqliteStore {
    /// Open (creating if needed) and migrate the store at `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let shown = path.display().to_string();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Open {
                path: shown.clone(),
                reason: e.to_string(),
            })?;
        }
        let conn = Connection::open(path).map_err(|e| StoreError::Open {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        Self::init(conn, &shown)
    }

    /// An in-memory store (tests, benchmarks).
    pub fn open_in_memory() -> Result<Self, StoreError> {
        Self::init(Connection::open_in_memory()?, ":memory:")
    }

    fn init(conn: Connection, shown: &str) -> Result<Self, StoreError> {
        let corrupt = |e: rusqlite::Error| match e {
            rusqlite::Error::SqliteFailure(f, msg)
                if matches!(
                    f.code,
                    rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt
                ) =>
            {
                StoreError::Corrupt(format!("{shown}: {}", msg.unwrap_or_else(|| f.to_string())))
            }
            other => StoreError::Sql(other),
        };
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(corrupt)?;
        // WAL: readers (attest trace) never block the writer. NORMAL sync in
        // WAL mode keeps every committed append across a process crash.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(corrupt)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(corrupt)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(corrupt)?;
        // A run appends at the ends of its tables' trees, which a small page
        // cache holds; SQLite's default (2 MiB) was the largest single item
        // of a long run's heap, and pages it drops are still in the
        // kernel's page cache.
        conn.pragma_update(None, "cache_size", -1024)
            .map_err(corrupt)?;
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(corrupt)?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                path: shown.to_string(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        // Every pending migration in one transaction: a new store is made
        // with one commit instead of one per migration (each commit wrote
        // the schema again and made SQLite re-read it), and a store is
        // never left between two versions.
        if (version as usize) < MIGRATIONS.len() {
            let tx = write_tx(&conn)?;
            for sql in &MIGRATIONS[version as usize..] {
                if *sql != PLAIN_ROWIDS || has_autoincrement(&tx)? {
                    tx.execute_batch(sql)?;
                }
            }
            tx.pragma_update(None, "user_version", MIGRATIONS.len() as i64)?;
            tx.commit()?;
        }
        Ok(SqliteStore {
            conn,
            heads: HashMap::new(),
            fences: HashMap::new(),
        })
    }

    /// The stored record of a run, as hashed into its chain's start.
    fn run_header(&self, run_id: &str) -> Result<Option<StoredRun>, StoreError> {
        let row = self
            .conn
            .query_row(
                "SELECT id, session_id, trace_id, prompt, settings, loop_version, prompt_version, chain_head
                 FROM runs WHERE id = ?1",
                [run_id],
                |r| {
                    let fields: Vec<String> = (0..7)
                        .map(|i| r.get::<_, String>(i))
                        .collect::<Result<_, _>>()?;
                    Ok(StoredRun {
                        fields,
                        head: r.get(7)?,
                    })
                },
            )
            .optional()?;
        Ok(row)
    }

    /// Where the chain of `run_id` stands: cached, else read from the run
    /// row (its head; its genesis when it has no entries yet; legacy when
    /// it has entries but no head).
    fn chain_head(&mut self, run_id: &str) -> Result<Head, StoreError> {
        if let Some(head) = self.heads.get(run_id) {
            return Ok(head.clone());
        }
        let Some(run) = self.run_header(run_id)? else {
            // The insert fails on the foreign key; there is no chain.
            return Ok(Head::Legacy);
        };
        let head = match run.head.clone() {
            Some(h) => Head::Stored(h),
            None => {
                let has_entries: bool = self.conn.query_row(
                    "SELECT EXISTS(SELECT 1 FROM entries WHERE run_id = ?1)",
                    [run_id],
                    |r| r.get(0),
                )?;
                if has_entries {
                    Head::Legacy
                } else {
                    Head::Fresh(chain::genesis(&run.header()))
                }
            }
        };
        self.heads.insert(run_id.to_string(), head.clone());
        Ok(head)
    }

    /// Inserts one entry within `tx` with its chain hash after `head`;
    /// returns the new head. The caller moves the run's head once per
    /// transaction ([`SqliteStore::move_head`]).
    fn insert_entry(
        tx: &Connection,
        run_id: &str,
        head: &Head,
        stored: &LogEntry,
        kind: &str,
        name: &str,
        body: &str,
    ) -> Result<Head, StoreError> {
        let hash = head
            .prev()
            .map(|prev| chain::link(prev, run_id, kind, name, body));
        const INSERT: &str = "INSERT INTO entries (run_id, kind, type, body, created_at, hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
        let insert = params![run_id, kind, name, body, now(), hash];
        if body.len() >= LARGE_ENTRY {
            // A statement keeps its bound copy of the body and the row it
            // built until it runs again; a cached one would hold those of a
            // run's largest entry (`done`, with every receipt) from then on.
            tx.prepare(INSERT)?.execute(insert)?;
        } else {
            tx.prepare_cached(INSERT)?.execute(insert)?;
        }
        match stored {
            LogEntry::Item {
                item:
                    TranscriptItem::ToolResult {
                        receipt: Some(r), ..
                    },
            } => {
                tx.prepare_cached("INSERT OR IGNORE INTO receipts (run_id, call_id, tool_name, status, body) VALUES (?1, ?2, ?3, ?4, ?5)")?
                    .execute(params![run_id, r.call_id, r.tool_name, r.status.as_str(), r.to_json()?])?;
            }
            LogEntry::Event { event } => {
                if let EventBody::Done {
                    state,
                    reason,
                    answer,
                    steps,
                    ..
                } = &event.body
                {
                    tx.prepare_cached("UPDATE runs SET status = ?2, reason = ?3, answer = ?4, steps = ?5, finished_at = ?6 WHERE id = ?1")?
                        .execute(params![run_id, state.as_str(), reason.as_str(), answer, steps, now()])?;
                }
            }
            _ => {}
        }
        Ok(match hash {
            Some(h) => Head::Stored(h),
            None => Head::Legacy,
        })
    }

    /// Moves the run's head from `from` to `to` within `tx`, only if it
    /// still is where this process saw it (so a second writer cannot fork
    /// the chain unnoticed). Once per transaction, not per entry: the
    /// transaction holds the write lock, so no writer moves the head
    /// between its entries. Returns whether it moved; the caller rolls
    /// back when it did not.
    fn move_head(
        tx: &Connection,
        run_id: &str,
        from: &Head,
        to: &Head,
    ) -> Result<bool, StoreError> {
        // No entry linked (none written, or a run from before the chain).
        let Some(new) = to.stored().filter(|&new| from.stored() != Some(new)) else {
            return Ok(true);
        };
        let moved = tx
            .prepare_cached("UPDATE runs SET chain_head = ?2 WHERE id = ?1 AND chain_head IS ?3")?
            .execute(params![run_id, new, from.stored()])?;
        Ok(moved > 0)
    }

    fn run_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunRecord> {
        let settings: String = row.get("settings")?;
        Ok(RunRecord {
            id: row.get("id")?,
            session_id: row.get("session_id")?,
            trace_id: row.get("trace_id")?,
            prompt: row.get("prompt")?,
            status: row.get("status")?,
            reason: row.get("reason")?,
            answer: row.get("answer")?,
            steps: row.get("steps")?,
            settings: serde_json::from_str(&settings).unwrap_or(serde_json::Value::Null),
            loop_version: row.get("loop_version")?,
            prompt_version: row.get("prompt_version")?,
            pid: row.get("pid")?,
            started_at: row.get("started_at")?,
            finished_at: row.get("finished_at")?,
        })
    }

    /// The first column of each row, JSON, parsed as it is read: a long
    /// run's log is megabytes, and holding its text and its values at once
    /// doubled what reading it cost in memory.
    fn json_rows<T: serde::de::DeserializeOwned>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<Vec<T>, StoreError> {
        let mut stmt = self.conn.prepare(sql)?;
        let mut rows = stmt.query(params)?;
        let mut values = Vec::new();
        while let Some(row) = rows.next()? {
            let body = row
                .get_ref(0)?
                .as_str()
                .map_err(|e| StoreError::Corrupt(format!("a JSON column: {e}")))?;
            values.push(serde_json::from_str(body)?);
        }
        Ok(values)
    }
}

/// Store a raw output in the artifact table, within the entries'
/// transaction; returns the reference the log keeps.
fn store_artifact(
    tx: &Connection,
    run_id: &str,
    step: u32,
    kind: &str,
    body: &str,
) -> Result<String, StoreError> {
    tx.prepare_cached(
        "INSERT INTO artifacts (run_id, step, kind, body, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![run_id, step, kind, body, now()])?;
    Ok(format!("artifact:{}", tx.last_insert_rowid()))
}

/// A run's record as stored: the fields its chain starts from (id,
/// session, trace id, prompt, settings, loop and prompt versions) and its
/// chain head.
struct StoredRun {
    fields: Vec<String>,
    head: Option<String>,
}

impl StoredRun {
    fn header(&self) -> RunHeader<'_> {
        let get = |i: usize| self.fields.get(i).map_or("", String::as_str);
        RunHeader {
            id: get(0),
            session_id: get(1),
            trace_id: get(2),
            prompt: get(3),
            settings: get(4),
            loop_version: get(5),
            prompt_version: get(6),
        }
    }
}

/// Bytes of an entry's JSON from which it is written without the
/// statement cache (see [`SqliteStore::insert_entry`]).
const LARGE_ENTRY: usize = 64 * 1024;

/// The form an entry is stored in: raw outputs move to the artifact
/// table (`put` stores one and names it) and the log keeps a reference.
/// Every other entry is stored as it is, not copied: a run's `done` holds
/// all its receipts.
pub(crate) fn stored_form<'a>(
    entry: &'a LogEntry,
    mut put: impl FnMut(u32, &str, &str) -> Result<String, StoreError>,
) -> Result<Cow<'a, LogEntry>, StoreError> {
    Ok(Cow::Owned(match entry {
        LogEntry::Trace {
            trace: TraceRecord::RawOutput { step, raw },
        } => LogEntry::Trace {
            trace: TraceRecord::RawOutput {
                step: *step,
                raw: put(*step, "raw_output", raw)?,
            },
        },
        LogEntry::Trace {
            trace: TraceRecord::ProtocolViolation { step, kind, raw },
        } => LogEntry::Trace {
            trace: TraceRecord::ProtocolViolation {
                step: *step,
                kind: *kind,
                raw: put(*step, "protocol_violation", raw)?,
            },
        },
        other => return Ok(Cow::Borrowed(other)),
    }))
}

/// Whether the queue row read within an append's transaction (owner,
/// epoch, state) is still the lease `owner` holds at `epoch`.
pub(crate) fn lease_holds(
    held: Option<(Option<String>, i64, String)>,
    owner: &str,
    epoch: i64,
) -> bool {
    matches!(held, Some((Some(o), e, state)) if o == owner && e == epoch && state == "leased")
}

/// Entries read back by their `kind` column (`"item"`, `"trace"`),
/// unwrapped by `unwrap`; an entry of another kind is corruption.
pub(crate) fn of_kind<T>(
    run_id: &str,
    kind: &str,
    entries: Vec<LogEntry>,
    unwrap: impl Fn(LogEntry) -> Option<T>,
) -> Result<Vec<T>, StoreError> {
    entries
        .into_iter()
        .map(|entry| {
            unwrap(entry).ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "entry of run {run_id} marked as {kind} is of another kind"
                ))
            })
        })
        .collect()
}

pub(crate) fn item(entry: LogEntry) -> Option<TranscriptItem> {
    match entry {
        LogEntry::Item { item } => Some(item),
        _ => None,
    }
}

pub(crate) fn trace(entry: LogEntry) -> Option<TraceRecord> {
    match entry {
        LogEntry::Trace { trace } => Some(trace),
        _ => None,
    }
}

/// The `kind` and `type` columns: the entry kind, and the item type, event
/// type or trace record name, read back from `body` (the entry's JSON):
/// the serde tags are the one source of these names. Read off the front of
/// the body where it has the shape serde writes, else parsed whole.
pub(crate) fn entry_type(entry: &LogEntry, body: &str) -> Result<(String, String), StoreError> {
    let (kind, field, tag) = match entry {
        LogEntry::Item { .. } => ("item", "item", "type"),
        LogEntry::Event { .. } => ("event", "event", "type"),
        LogEntry::Trace { .. } => ("trace", "trace", "record"),
        LogEntry::Archive { .. } => ("archive", "item", "type"),
    };
    match leading_tag(body, kind, field, tag) {
        Some(name) => Ok((kind.to_string(), name.to_string())),
        None => parsed_entry_type(entry, body),
    }
}

/// The tag of `{"entry":KIND,FIELD:{…}}` when it comes before any field
/// that is not a plain string or scalar: serde writes an internally tagged
/// object's tag first, so an item or trace starts with it and an event has
/// only its `run_id`, `seq` and `ts` before it. Saves parsing the whole
/// body (a few percent of a step). `None` for any other shape, and for
/// strings with escapes.
fn leading_tag<'a>(body: &'a str, kind: &str, field: &str, tag: &str) -> Option<&'a str> {
    let mut rest = body.strip_prefix("{\"entry\":")?;
    if plain_string(&mut rest)? != kind {
        return None;
    }
    rest = rest.strip_prefix(',')?;
    if plain_string(&mut rest)? != field {
        return None;
    }
    rest = rest.strip_prefix(":{")?;
    for _ in 0..4 {
        let key = plain_string(&mut rest)?;
        rest = rest.strip_prefix(':')?;
        if key == tag {
            return plain_string(&mut rest);
        }
        if rest.starts_with('"') {
            plain_string(&mut rest)?;
        } else {
            // A number, `true`, `false` or `null`: nothing nested.
            let end = rest.find([',', '}'])?;
            let scalar = &rest[..end];
            if scalar.is_empty() || scalar.contains(['{', '[', '"']) {
                return None;
            }
            rest = &rest[end..];
        }
        rest = rest.strip_prefix(',')?;
    }
    None
}

/// A JSON string without escapes at the front of `rest`, moving past it.
fn plain_string<'a>(rest: &mut &'a str) -> Option<&'a str> {
    let inner = rest.strip_prefix('"')?;
    let end = inner.find(['"', '\\'])?;
    if inner.as_bytes()[end] != b'"' {
        return None;
    }
    *rest = &inner[end + 1..];
    Some(&inner[..end])
}

/// [`entry_type`] by parsing the whole body: reading two fields skips the
/// rest without building a `Value` of the whole entry.
fn parsed_entry_type(entry: &LogEntry, body: &str) -> Result<(String, String), StoreError> {
    #[derive(serde::Deserialize)]
    struct Tags {
        item: Option<Tag>,
        event: Option<Tag>,
        trace: Option<Tag>,
    }
    #[derive(serde::Deserialize)]
    struct Tag {
        #[serde(rename = "type")]
        kind: Option<serde_json::Value>,
        record: Option<serde_json::Value>,
    }
    let tags: Tags = serde_json::from_str(body)?;
    let (kind, tag) = match entry {
        LogEntry::Item { .. } => ("item", tags.item),
        LogEntry::Event { .. } => ("event", tags.event),
        LogEntry::Trace { .. } => (
            "trace",
            tags.trace.map(|t| Tag {
                kind: t.record,
                record: None,
            }),
        ),
        LogEntry::Archive { .. } => ("archive", tags.item),
    };
    let name = tag
        .and_then(|t| t.kind)
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "unknown".to_string());
    Ok((kind.to_string(), name))
}

impl Store for SqliteStore {
    fn ensure_session(&mut self, session_id: &str) -> Result<(), StoreError> {
        let ts = now();
        self.conn.execute(
            "INSERT INTO sessions (id, created_at, updated_at) VALUES (?1, ?2, ?2)
             ON CONFLICT(id) DO UPDATE SET updated_at = excluded.updated_at",
            params![session_id, ts],
        )?;
        Ok(())
    }

    fn begin_run(&mut self, run: &NewRun) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO runs (id, session_id, trace_id, prompt, status, settings, loop_version, prompt_version, pid, started_at)
             VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6, ?7, ?8, ?9)",
            params![
                run.id,
                run.session_id,
                run.trace_id,
                run.prompt,
                run.settings.to_string(),
                run.loop_version,
                run.prompt_version,
                std::process::id(),
                now()
            ],
        )?;
        Ok(())
    }

    fn fence(&mut self, run_id: &str, owner: &str, epoch: i64) {
        self.fences
            .insert(run_id.to_string(), (owner.to_string(), epoch));
    }

    fn unfence(&mut self, run_id: &str) {
        self.fences.remove(run_id);
    }

    fn claim_run(&mut self, run_id: &str, seen_pid: Option<u32>) -> Result<(), StoreError> {
        // Compare-and-swap on the owner: of two processes that saw the same
        // dead owner, only the first moves it.
        let claimed = self.conn.execute(
            "UPDATE runs SET pid = ?2, status = 'running', finished_at = NULL
             WHERE id = ?1 AND status = 'running' AND pid IS ?3",
            params![run_id, std::process::id(), seen_pid],
        )?;
        if claimed == 0 {
            let owner: Option<Option<u32>> = self
                .conn
                .query_row("SELECT pid FROM runs WHERE id = ?1", [run_id], |r| r.get(0))
                .optional()?;
            return match owner {
                None => Err(StoreError::UnknownRun(run_id.to_string())),
                Some(pid) => Err(StoreError::AlreadyClaimed {
                    run: run_id.to_string(),
                    pid: pid.unwrap_or(0),
                }),
            };
        }
        Ok(())
    }

    fn append(&mut self, run_id: &str, entry: &LogEntry) -> Result<(), StoreError> {
        self.append_all(run_id, std::slice::from_ref(entry))
    }

    fn append_all(&mut self, run_id: &str, entries: &[LogEntry]) -> Result<(), StoreError> {
        // Archive and artifact rows go in the entries' transaction (one
        // per step boundary): a fenced, failed or retried append then leaves
        // none behind (and never two).
        if entries.is_empty() {
            return Ok(());
        }
        // Twice at most: when another writer moved the head, reread it.
        for _ in 0..2 {
            let mut head = self.chain_head(run_id)?;
            let tx = write_tx(&self.conn)?;
            if let Some((owner, epoch)) = self.fences.get(run_id) {
                let held: Option<(Option<String>, i64, String)> = tx
                    .prepare_cached(
                        "SELECT lease_owner, lease_epoch, state FROM server_runs WHERE run_id = ?1",
                    )?
                    .query_row([run_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .optional()?;
                if !lease_holds(held, owner, *epoch) {
                    return Err(StoreError::Fenced {
                        run: run_id.to_string(),
                        epoch: *epoch,
                    });
                }
            }
            let start = head.clone();
            for entry in entries {
                if let LogEntry::Archive { item } = entry {
                    tx.prepare_cached(
                        "INSERT INTO archive (run_id, call_id, item, created_at) VALUES (?1, ?2, ?3, ?4)",
                    )?
                    .execute(params![run_id, item.call_id(), serde_json::to_string(item)?, now()])?;
                    continue;
                }
                let stored = stored_form(entry, |step, kind, raw| {
                    store_artifact(&tx, run_id, step, kind, raw)
                })?;
                let mut body = stored.to_json()?;
                if body.len() >= LARGE_ENTRY {
                    // Up to half of a doubled buffer is slack, held while
                    // SQLite makes its own copies.
                    body.shrink_to_fit();
                }
                let (kind, name) = entry_type(&stored, &body)?;
                head = Self::insert_entry(&tx, run_id, &head, &stored, &kind, &name, &body)?;
            }
            if Self::move_head(&tx, run_id, &start, &head)? {
                tx.commit()?;
                self.heads.insert(run_id.to_string(), head);
                return Ok(());
            }
            drop(tx);
            self.heads.remove(run_id);
        }
        Err(StoreError::Corrupt(format!(
            "run {run_id}: its log keeps changing under this process"
        )))
    }

    fn verify_chain(&self, run_id: &str) -> Result<ChainVerdict, StoreError> {
        let Some(run) = self.run_header(run_id)? else {
            return Err(StoreError::UnknownRun(run_id.to_string()));
        };
        let mut stmt = self.conn.prepare(
            "SELECT id, kind, type, body, hash FROM entries WHERE run_id = ?1 ORDER BY id",
        )?;
        let entries: Vec<StoredEntry> = stmt
            .query_map([run_id], |r| {
                Ok(StoredEntry {
                    id: r.get(0)?,
                    kind: r.get(1)?,
                    name: r.get(2)?,
                    body: r.get(3)?,
                    hash: r.get(4)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        Ok(chain::verify(&run.header(), run.head.as_deref(), &entries))
    }

    fn run(&self, id_or_prefix: &str) -> Result<RunRecord, StoreError> {
        let exact = self
            .conn
            .query_row(
                "SELECT * FROM runs WHERE id = ?1",
                [id_or_prefix],
                Self::run_from_row,
            )
            .optional()?;
        if let Some(run) = exact {
            return Ok(run);
        }
        let pattern = format!("{}%", id_or_prefix.replace(['%', '_'], ""));
        let mut stmt = self
            .conn
            .prepare("SELECT * FROM runs WHERE id LIKE ?1 LIMIT 2")?;
        let found: Vec<RunRecord> = stmt
            .query_map([pattern], Self::run_from_row)?
            .collect::<Result<_, _>>()?;
        match found.len() {
            0 => Err(StoreError::UnknownRun(id_or_prefix.to_string())),
            1 => Ok(found.into_iter().next().expect("one element")),
            _ => Err(StoreError::AmbiguousRun(id_or_prefix.to_string())),
        }
    }

    fn runs(&self, session_id: Option<&str>) -> Result<Vec<RunRecord>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT * FROM runs WHERE (?1 IS NULL OR session_id = ?1) ORDER BY started_at DESC, rowid DESC",
        )?;
        let runs = stmt
            .query_map([session_id], Self::run_from_row)?
            .collect::<Result<_, _>>()?;
        Ok(runs)
    }

    fn sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT s.id, s.created_at, s.updated_at,
                    (SELECT COUNT(*) FROM runs r WHERE r.session_id = s.id),
                    (SELECT r.status FROM runs r WHERE r.session_id = s.id ORDER BY r.started_at DESC, r.rowid DESC LIMIT 1)
             FROM sessions s ORDER BY s.updated_at DESC",
        )?;
        let sessions = stmt
            .query_map([], |row| {
                Ok(SessionRecord {
                    id: row.get(0)?,
                    created_at: row.get(1)?,
                    updated_at: row.get(2)?,
                    runs: row.get(3)?,
                    last_status: row.get(4)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        Ok(sessions)
    }

    fn entries(&self, run_id: &str) -> Result<Vec<LogEntry>, StoreError> {
        self.json_rows(
            "SELECT body FROM entries WHERE run_id = ?1 ORDER BY id",
            [run_id],
        )
    }

    fn traces(&self, run_id: &str, records: &[&str]) -> Result<Vec<TraceRecord>, StoreError> {
        let marks = vec!["?"; records.len()].join(", ");
        let entries: Vec<LogEntry> = self.json_rows(
            &format!(
                "SELECT body FROM entries WHERE run_id = ? AND kind = 'trace' AND type IN ({marks}) ORDER BY id"
            ),
            rusqlite::params_from_iter(std::iter::once(run_id).chain(records.iter().copied())),
        )?;
        of_kind(run_id, "trace", entries, trace)
    }

    fn items(&self, run_id: &str) -> Result<Vec<TranscriptItem>, StoreError> {
        let entries: Vec<LogEntry> = self.json_rows(
            "SELECT body FROM entries WHERE run_id = ?1 AND kind = 'item' ORDER BY id",
            [run_id],
        )?;
        of_kind(run_id, "item", entries, item)
    }

    fn archived(&self, run_id: &str) -> Result<Vec<TranscriptItem>, StoreError> {
        self.json_rows(
            "SELECT item FROM archive WHERE run_id = ?1 ORDER BY id",
            [run_id],
        )
    }

    fn artifacts(&self, run_id: &str) -> Result<Vec<Artifact>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT id, step, kind, body, created_at FROM artifacts WHERE run_id = ?1 ORDER BY id",
        )?;
        let artifacts = stmt
            .query_map([run_id], |row| {
                Ok(Artifact {
                    id: row.get(0)?,
                    step: row.get(1)?,
                    kind: row.get(2)?,
                    body: row.get(3)?,
                    created_at: row.get(4)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        Ok(artifacts)
    }

    fn put_memory(&mut self, item: &MemoryItem) -> Result<(), StoreError> {
        crate::memory::put(&self.conn, item)
    }

    fn memory_items(&self, statuses: &[MemoryStatus]) -> Result<Vec<MemoryItem>, StoreError> {
        crate::memory::list(&self.conn, statuses)
    }

    fn memory_item(&self, id_or_prefix: &str) -> Result<MemoryItem, StoreError> {
        crate::memory::get(&self.conn, id_or_prefix)
    }

    fn set_memory_status(
        &mut self,
        id: &str,
        status: MemoryStatus,
    ) -> Result<MemoryItem, StoreError> {
        crate::memory::modify(&self.conn, id, |item| item.status = status)
    }

    fn update_memory_verification(
        &mut self,
        id: &str,
        verified_at: DateTime<Utc>,
        status: MemoryStatus,
    ) -> Result<MemoryItem, StoreError> {
        crate::memory::modify(&self.conn, id, |item| {
            item.verified_at = Some(verified_at);
            item.status = status;
        })
    }

    fn memory_projection(&self) -> Result<Option<String>, StoreError> {
        crate::memory::projection(&self.conn)
    }

    fn set_memory_projection(&mut self, text: &str) -> Result<(), StoreError> {
        crate::memory::set_projection(&self.conn, text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attest_protocol::{Event, EventBody};

    #[test]
    fn a_write_transaction_commits_or_rolls_back_when_dropped() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (x INTEGER)").unwrap();
        let count = |conn: &Connection| -> i64 {
            conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                .unwrap()
        };
        for round in 0..2 {
            let tx = write_tx(&conn).unwrap();
            tx.execute("INSERT INTO t VALUES (1)", []).unwrap();
            assert!(!tx.is_autocommit(), "round {round}: not in a transaction");
            drop(tx);
            assert!(conn.is_autocommit());
            assert_eq!(count(&conn), 0, "round {round}: kept what was dropped");
        }
        // The cached statements begin and commit again and again.
        for n in 1..=3 {
            let tx = write_tx(&conn).unwrap();
            tx.execute("INSERT INTO t VALUES (1)", []).unwrap();
            tx.commit().unwrap();
            assert!(conn.is_autocommit());
            assert_eq!(count(&conn), n);
        }
    }

    /// The entry's columns, checking that reading them off the front of the
    /// body gives what parsing it whole does.
    fn typed(entry: &LogEntry) -> (String, String) {
        let body = serde_json::to_string(entry).unwrap();
        let read = entry_type(entry, &body).unwrap();
        assert_eq!(read, parsed_entry_type(entry, &body).unwrap(), "{body}");
        read
    }

    #[test]
    fn the_tag_is_read_off_the_front_of_a_body_serde_wrote() {
        let event = |run_id: &str| LogEntry::Event {
            event: Event {
                run_id: run_id.into(),
                seq: 7,
                ts: chrono::Utc::now(),
                body: EventBody::ToolStarted {
                    step: 2,
                    call_id: "c\"1".into(),
                    tool_name: "read_file".into(),
                    effect: Some(attest_protocol::EffectClass::Observe),
                    arguments: serde_json::json!({"type": "x", "record": "y"}),
                },
            },
        };
        let plain = serde_json::to_string(&event("r1")).unwrap();
        assert_eq!(
            leading_tag(&plain, "event", "event", "type"),
            Some("tool_started")
        );
        assert_eq!(typed(&event("r1")), ("event".into(), "tool_started".into()));
        // An escape before the tag: parsed whole, with the same result.
        let escaped = serde_json::to_string(&event("r\"1")).unwrap();
        assert_eq!(leading_tag(&escaped, "event", "event", "type"), None);
        assert_eq!(
            typed(&event("r\"1")),
            ("event".into(), "tool_started".into())
        );
        // Other shapes are never misread.
        for body in [
            r#"{"entry":"event","event":{"run_id":"r","nested":{"type":"no"},"type":"x"}}"#,
            r#"{"entry":"item","event":{"type":"x"}}"#,
            r#"{"entry":"event","event":{"run_id":"r","seq":1}}"#,
            r#"{"entry":"event","event":{"type":"x\u0041"}}"#,
        ] {
            assert_eq!(leading_tag(body, "event", "event", "type"), None, "{body}");
        }
    }

    #[test]
    fn entry_types_come_from_the_serde_tags() {
        let item = TranscriptItem::UserInput { text: "hi".into() };
        assert_eq!(
            typed(&LogEntry::Item { item: item.clone() }),
            ("item".into(), "user_input".into())
        );
        assert_eq!(
            typed(&LogEntry::Archive { item }),
            ("archive".into(), "user_input".into())
        );
        let event = Event {
            run_id: "r".into(),
            seq: 1,
            ts: chrono::Utc::now(),
            body: EventBody::Progress {
                step: 1,
                text: "x".into(),
                delta: false,
            },
        };
        assert_eq!(
            typed(&LogEntry::Event { event }),
            ("event".into(), "progress".into())
        );
        let trace = TraceRecord::RawOutput {
            step: 1,
            raw: "{\"type\":\"not this\",\"record\":\"nor this\"}".into(),
        };
        assert_eq!(
            typed(&LogEntry::Trace { trace }),
            ("trace".into(), "raw_output".into())
        );
    }
}
