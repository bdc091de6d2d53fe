//! PostgreSQL implementation of [`Store`](crate::Store) and
//! [`ServerStore`](crate::ServerStore): several `attest serve` processes
//! share one database (SPEC J2).
//!
//! Invariants beyond the SQLite store's:
//! - Every append of a fenced run ([`crate::Store::fence`]) reads the
//!   run's queue row `FOR SHARE` inside its own transaction and commits
//!   only while the lease is still the fencing worker's at its epoch. A
//!   takeover (`FOR UPDATE`) waits for an append in flight, and every later
//!   append of the old worker is refused ([`StoreError::Fenced`]).
//! - A run's owner is its lease, not a process: `runs.pid` stays NULL, so
//!   a run left `running` is resumed by whichever worker leases it.
//! - Changes other servers must see are announced with `NOTIFY` inside the
//!   transaction that makes them (delivered on commit): a queued or
//!   settled run on [`QUEUE_CHANNEL`], an appended event on
//!   [`EVENTS_CHANNEL`], a decided approval on [`APPROVALS_CHANNEL`]. A
//!   notification only wakes a reader; what it reads is in the tables.

mod conn;
mod listen;
mod runs;
mod server;

pub use listen::PgListener;

use crate::sqlite::Head;
use crate::StoreError;
use conn::Conn;
use std::collections::HashMap;

/// `NOTIFY` channel of queued and settled runs; payload: the run id.
pub const QUEUE_CHANNEL: &str = "attest_queue";
/// `NOTIFY` channel of appended events; payload: `run_id session_id`.
pub const EVENTS_CHANNEL: &str = "attest_events";
/// `NOTIFY` channel of decided approvals; payload: `run_id call_id`.
pub const APPROVALS_CHANNEL: &str = "attest_approvals";

/// A database URL without its password, for messages and logs.
pub fn shown_url(url: &str) -> String {
    conn::shown(url)
}

/// Schema version this build reads and writes on PostgreSQL.
pub const PG_SCHEMA_VERSION: i64 = 3;

const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/postgres/0001_init.sql"),
    include_str!("../../migrations/postgres/0002_webhooks.sql"),
    include_str!("../../migrations/postgres/0003_append_fn.sql"),
];

/// Key of the advisory lock that serializes migrations of one database
/// (servers starting at once).
const MIGRATION_LOCK: i64 = 0x6174_7465_7374;

/// A store in a PostgreSQL database (`postgres://…`).
pub struct PgStore {
    conn: Conn,
    /// Where the chain of each run appended to by this handle stands, and
    /// the run's session (for its event notifications).
    heads: HashMap<String, (Head, String)>,
    /// Runs whose appends are fenced by a lease: run id → (owner, epoch).
    fences: HashMap<String, (String, i64)>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connect and migrate. Errors name the database without its password.
    pub fn connect(url: &str) -> Result<PgStore, StoreError> {
        let conn = Conn::open(url)?;
        let shown = conn::shown(url);
        conn.call(move |c| migrate(c, &shown))?;
        Ok(PgStore {
            conn,
            heads: HashMap::new(),
            fences: HashMap::new(),
        })
    }
}

fn migrate(c: &mut postgres::Client, shown: &str) -> Result<(), StoreError> {
    c.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])?;
    let result = (|| {
        c.batch_execute("CREATE TABLE IF NOT EXISTS attest_schema (version BIGINT NOT NULL)")?;
        let version: i64 = c
            .query_opt("SELECT max(version) FROM attest_schema", &[])?
            .and_then(|r| r.get::<_, Option<i64>>(0))
            .unwrap_or(0);
        if version > PG_SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                path: shown.to_string(),
                found: version,
                supported: PG_SCHEMA_VERSION,
            });
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            let mut tx = c.transaction()?;
            tx.batch_execute(sql)?;
            tx.execute(
                "INSERT INTO attest_schema (version) VALUES ($1)",
                &[&((i + 1) as i64)],
            )?;
            tx.commit()?;
        }
        Ok(())
    })();
    c.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])?;
    result
}
