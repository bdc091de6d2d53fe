//! Schema version 8 rebuilds `entries` and `artifacts` without
//! AUTOINCREMENT: a store written before it keeps every row, id and hash,
//! its runs still verify, new rows go on from the largest id, and the log
//! stays append-only. A new store has them plain from the start.

use attest_protocol::{LogEntry, TraceRecord, TranscriptItem};
use attest_store::{ChainVerdict, NewRun, SqliteStore, Store, SCHEMA_VERSION};
use std::path::Path;

fn new_run(id: &str) -> NewRun {
    NewRun {
        id: id.into(),
        session_id: "s".into(),
        trace_id: "t".into(),
        prompt: "the task".into(),
        settings: serde_json::json!({}),
        loop_version: "l".into(),
        prompt_version: "p".into(),
    }
}

fn input(text: &str) -> LogEntry {
    LogEntry::Item {
        item: TranscriptItem::UserInput { text: text.into() },
    }
}

fn raw_output(step: u32) -> LogEntry {
    LogEntry::Trace {
        trace: TraceRecord::RawOutput {
            step,
            raw: format!("raw output of step {step}"),
        },
    }
}

/// The file as a version 7 store left it: both tables AUTOINCREMENT, with
/// `sqlite_sequence` keeping their largest ids.
fn as_version_7(db: &Path) {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.execute_batch(
        "PRAGMA foreign_keys = OFF;
        BEGIN;
        CREATE TABLE entries_old (
            id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL REFERENCES runs(id),
            kind TEXT NOT NULL, type TEXT NOT NULL, body TEXT NOT NULL,
            created_at TEXT NOT NULL, hash TEXT);
        INSERT INTO entries_old SELECT id, run_id, kind, type, body, created_at, hash FROM entries;
        DROP TABLE entries;
        ALTER TABLE entries_old RENAME TO entries;
        CREATE INDEX entries_by_run ON entries(run_id, id);
        CREATE TRIGGER entries_no_update BEFORE UPDATE ON entries
        BEGIN SELECT RAISE(ABORT, 'entries are append-only'); END;
        CREATE TRIGGER entries_no_delete BEFORE DELETE ON entries
        BEGIN SELECT RAISE(ABORT, 'entries are append-only'); END;
        CREATE TABLE artifacts_old (
            id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL REFERENCES runs(id),
            step INTEGER, kind TEXT NOT NULL, body TEXT NOT NULL, created_at TEXT NOT NULL);
        INSERT INTO artifacts_old SELECT id, run_id, step, kind, body, created_at FROM artifacts;
        DROP TABLE artifacts;
        ALTER TABLE artifacts_old RENAME TO artifacts;
        CREATE INDEX artifacts_by_run ON artifacts(run_id, id);
        PRAGMA user_version = 7;
        COMMIT;",
    )
    .unwrap();
    assert_eq!(
        sequences(&conn),
        2,
        "the old tables keep sqlite_sequence rows"
    );
}

fn sequences(conn: &rusqlite::Connection) -> i64 {
    conn.query_row(
        "SELECT count(*) FROM sqlite_sequence WHERE name IN ('entries', 'artifacts')",
        [],
        |r| r.get(0),
    )
    .unwrap()
}

fn ids(conn: &rusqlite::Connection, table: &str) -> Vec<i64> {
    let mut stmt = conn
        .prepare(&format!("SELECT id FROM {table} ORDER BY id"))
        .unwrap();
    let rows = stmt.query_map([], |r| r.get(0)).unwrap();
    rows.map(Result::unwrap).collect()
}

fn autoincrement_tables(conn: &rusqlite::Connection) -> i64 {
    conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND sql LIKE '%AUTOINCREMENT%' AND name IN ('entries', 'artifacts')",
        [],
        |r| r.get(0),
    )
    .unwrap()
}

#[test]
fn a_version_7_store_keeps_its_rows_ids_and_chain() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("attest.db");
    let mut store = SqliteStore::open(&db).unwrap();
    store.ensure_session("s").unwrap();
    for run in ["r1", "r2"] {
        store.begin_run(&new_run(run)).unwrap();
        store
            .append_all(run, &[input("q"), raw_output(1), input("a")])
            .unwrap();
    }
    let entries_before = store.entries("r1").unwrap();
    let artifacts_before = store.artifacts("r2").unwrap();
    drop(store);
    as_version_7(&db);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let (entry_ids, artifact_ids) = (ids(&conn, "entries"), ids(&conn, "artifacts"));
    assert_eq!(autoincrement_tables(&conn), 2);
    drop(conn);

    let mut store = SqliteStore::open(&db).unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!((version, SCHEMA_VERSION), (8, 8));
    assert_eq!(autoincrement_tables(&conn), 0);
    assert_eq!(sequences(&conn), 0);
    assert_eq!(ids(&conn, "entries"), entry_ids);
    assert_eq!(ids(&conn, "artifacts"), artifact_ids);
    assert_eq!(store.entries("r1").unwrap(), entries_before);
    assert_eq!(store.artifacts("r2").unwrap(), artifacts_before);
    for run in ["r1", "r2"] {
        assert_eq!(
            store.verify_chain(run).unwrap(),
            ChainVerdict::Intact { entries: 3 }
        );
    }

    // New rows follow the largest id, and the chain goes on.
    store
        .append_all("r1", &[raw_output(2), input("more")])
        .unwrap();
    assert_eq!(
        store.verify_chain("r1").unwrap(),
        ChainVerdict::Intact { entries: 5 }
    );
    let new_entries = ids(&conn, "entries");
    assert_eq!(new_entries.len(), entry_ids.len() + 2);
    assert!(new_entries[entry_ids.len()] > *entry_ids.last().unwrap());
    let new_artifacts = ids(&conn, "artifacts");
    assert_eq!(new_artifacts.len(), artifact_ids.len() + 1);
    assert!(new_artifacts.last() > artifact_ids.last());
    assert_eq!(sequences(&conn), 0, "nothing writes sqlite_sequence now");

    // The rebuilt log is still append-only.
    let update = conn.execute("UPDATE entries SET body = 'x'", []);
    assert!(update.unwrap_err().to_string().contains("append-only"));
    let delete = conn.execute("DELETE FROM entries", []);
    assert!(delete.unwrap_err().to_string().contains("append-only"));
}

#[test]
fn a_new_store_has_plain_rowids_from_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("attest.db");
    let mut store = SqliteStore::open(&db).unwrap();
    store.ensure_session("s").unwrap();
    store.begin_run(&new_run("r1")).unwrap();
    store
        .append_all("r1", &[input("q"), raw_output(1), input("a")])
        .unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    assert_eq!(autoincrement_tables(&conn), 0);
    // As 0001 wrote them: the rebuild's RENAME would have stored
    // `CREATE TABLE "entries"`, so a new store did not run it.
    for table in ["entries", "artifacts"] {
        let sql: String = conn
            .query_row(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [table],
                |r| r.get(0),
            )
            .unwrap();
        assert!(sql.starts_with(&format!("CREATE TABLE {table} (")), "{sql}");
    }
    assert_eq!(sequences(&conn), 0);
    assert_eq!(ids(&conn, "entries"), vec![1, 2, 3]);
    assert_eq!(ids(&conn, "artifacts"), vec![1]);
    assert_eq!(
        store.verify_chain("r1").unwrap(),
        ChainVerdict::Intact { entries: 3 }
    );
    let delete = conn.execute("DELETE FROM entries", []);
    assert!(delete.unwrap_err().to_string().contains("append-only"));
}

#[test]
fn an_upgrade_that_fails_part_way_leaves_the_store_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("attest.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        for sql in [
            include_str!("../migrations/0001_init.sql"),
            include_str!("../migrations/0002_archive.sql"),
            include_str!("../migrations/0003_memory.sql"),
        ] {
            conn.execute_batch(sql).unwrap();
        }
        // A table in the way of 0005's `CREATE TABLE server_runs`: the
        // upgrade fails after 0004 has run.
        conn.execute_batch("CREATE TABLE server_runs (x); PRAGMA user_version = 3;")
            .unwrap();
    }
    assert!(SqliteStore::open(&db).is_err());
    let conn = rusqlite::Connection::open(&db).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, 3, "no migration of the failed upgrade stays");
    // 0004's column would be there had 0004 been committed on its own.
    let hashed: bool = conn
        .query_row(
            "SELECT EXISTS(SELECT 1 FROM pragma_table_info('entries') WHERE name = 'hash')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(!hashed);
}
