//! The entries' hash chain through the public API: intact runs verify,
//! edits made directly in the SQLite file (triggers dropped, as an attacker
//! with file access would) are found at their first entry, and runs from
//! before the chain are reported as unchained, never as verified.

use attest_protocol::{LogEntry, TranscriptItem};
use attest_store::{ChainBreak, ChainVerdict, NewRun, SqliteStore, Store};
use proptest::prelude::*;
use std::path::Path;

fn new_run(id: &str) -> NewRun {
    NewRun {
        id: id.into(),
        session_id: "s".into(),
        trace_id: "t".into(),
        prompt: "the task".into(),
        settings: serde_json::json!({"base_url": "http://127.0.0.1:1/v1"}),
        loop_version: "l".into(),
        prompt_version: "p".into(),
    }
}

fn input(text: &str) -> LogEntry {
    LogEntry::Item {
        item: TranscriptItem::UserInput { text: text.into() },
    }
}

fn store_with(dir: &Path, run: &str, n: usize) -> SqliteStore {
    let mut store = SqliteStore::open(&dir.join("attest.db")).unwrap();
    store.ensure_session("s").unwrap();
    store.begin_run(&new_run(run)).unwrap();
    for i in 0..n {
        store.append(run, &input(&format!("entry {i}"))).unwrap();
    }
    store
}

/// A connection that can change anything, as an attacker's would.
fn attacker(dir: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(dir.join("attest.db")).unwrap();
    conn.execute_batch(
        "DROP TRIGGER IF EXISTS entries_no_update; DROP TRIGGER IF EXISTS entries_no_delete;",
    )
    .unwrap();
    conn
}

fn broken(verdict: ChainVerdict) -> ChainBreak {
    match verdict {
        ChainVerdict::Broken(b) => b,
        other => panic!("expected a broken chain, got {other:?}"),
    }
}

fn nth_id(conn: &rusqlite::Connection, run: &str, seq: usize) -> i64 {
    conn.query_row(
        "SELECT id FROM entries WHERE run_id = ?1 ORDER BY id LIMIT 1 OFFSET ?2",
        rusqlite::params![run, seq as i64 - 1],
        |r| r.get(0),
    )
    .unwrap()
}

#[test]
fn an_untouched_run_verifies_across_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), "r1", 3);
    assert_eq!(
        store.verify_chain("r1").unwrap(),
        ChainVerdict::Intact { entries: 3 }
    );
    drop(store);
    // A new process (resume) continues the chain from the stored head.
    let mut store = SqliteStore::open(&dir.path().join("attest.db")).unwrap();
    store.append("r1", &input("after resume")).unwrap();
    assert_eq!(
        store.verify_chain("r1").unwrap(),
        ChainVerdict::Intact { entries: 4 }
    );
    // Two writers on one run do not fork the chain unnoticed.
    let mut other = SqliteStore::open(&dir.path().join("attest.db")).unwrap();
    other.append("r1", &input("from the other")).unwrap();
    store.append("r1", &input("from the first again")).unwrap();
    assert_eq!(
        store.verify_chain("r1").unwrap(),
        ChainVerdict::Intact { entries: 6 }
    );
    // An empty run is intact too.
    store.begin_run(&new_run("r2")).unwrap();
    assert_eq!(
        store.verify_chain("r2").unwrap(),
        ChainVerdict::Intact { entries: 0 }
    );
    assert!(store.verify_chain("nope").is_err());
}

/// Entries of 64 KiB and more (a long run's `done`, with every receipt)
/// are written without the statement cache; they are stored whole, in
/// order with the small ones around them, and chained like them.
#[test]
fn large_entries_are_stored_whole_and_chained() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = store_with(dir.path(), "r1", 1);
    let large = |i: usize| format!("{i}:{}", "é\"\\x".repeat(20_000 + i));
    let written = vec![input(&large(0)), input("small between"), input(&large(1))];
    store.append_all("r1", &written).unwrap();
    store.append("r1", &input(&large(2))).unwrap();
    let texts: Vec<String> = store
        .entries("r1")
        .unwrap()
        .into_iter()
        .map(|e| match e {
            LogEntry::Item {
                item: TranscriptItem::UserInput { text },
            } => text,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        texts,
        [
            "entry 0".to_string(),
            large(0),
            "small between".into(),
            large(1),
            large(2)
        ]
    );
    assert_eq!(
        store.verify_chain("r1").unwrap(),
        ChainVerdict::Intact { entries: 5 }
    );
}

#[test]
fn an_edited_entry_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), "r1", 5);
    let conn = attacker(dir.path());
    let id = nth_id(&conn, "r1", 3);
    conn.execute(
        "UPDATE entries SET body = replace(body, 'entry 2', 'forged') WHERE id = ?1",
        [id],
    )
    .unwrap();
    let b = broken(store.verify_chain("r1").unwrap());
    assert_eq!((b.seq, b.entry_id), (3, Some(id)), "{b}");
    assert!(b.to_string().starts_with("entry 3 (row "), "{b}");
}

#[test]
fn a_changed_column_or_hash_is_found_at_its_entry() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), "r1", 4);
    let conn = attacker(dir.path());
    let id = nth_id(&conn, "r1", 2);
    conn.execute(
        "UPDATE entries SET kind = 'trace', hash = 'deadbeef' WHERE id = ?1",
        [id],
    )
    .unwrap();
    assert_eq!(broken(store.verify_chain("r1").unwrap()).seq, 2);
}

#[test]
fn missing_entries_at_the_end_and_a_changed_run_record_are_noticed() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), "r1", 4);
    let conn = attacker(dir.path());
    let last = nth_id(&conn, "r1", 4);
    conn.execute("DELETE FROM entries WHERE id = ?1", [last])
        .unwrap();
    let b = broken(store.verify_chain("r1").unwrap());
    assert_eq!((b.seq, b.entry_id), (4, None), "{b}");
    assert!(b.reason.contains("missing"), "{b}");

    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), "r1", 2);
    let conn = attacker(dir.path());
    conn.execute(
        "UPDATE runs SET settings = '{\"base_url\": \"http://evil.example/v1\"}'",
        [],
    )
    .unwrap();
    let b = broken(store.verify_chain("r1").unwrap());
    assert_eq!(b.seq, 1, "{b}");
    assert!(b.reason.contains("run's record"), "{b}");

    // Clearing the head while entries keep their hashes is a break, not
    // an unchained run.
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), "r1", 2);
    attacker(dir.path())
        .execute("UPDATE runs SET chain_head = NULL", [])
        .unwrap();
    assert_eq!(broken(store.verify_chain("r1").unwrap()).seq, 1);
}

#[test]
fn runs_from_before_the_chain_are_unchained_and_stay_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("attest.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        for sql in [
            include_str!("../migrations/0001_init.sql"),
            include_str!("../migrations/0002_archive.sql"),
            include_str!("../migrations/0003_memory.sql"),
        ] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 3).unwrap();
        conn.execute_batch(
            "INSERT INTO sessions VALUES ('s', 'a', 'a');
             INSERT INTO runs (id, session_id, trace_id, prompt, status, settings, loop_version, prompt_version, started_at)
               VALUES ('old', 's', 't', 'p', 'running', '{}', 'l', 'p', 'a');
             INSERT INTO entries (run_id, kind, type, body, created_at)
               VALUES ('old', 'item', 'user_input', '{\"item\":{\"type\":\"user_input\",\"text\":\"q\"}}', 'a');",
        )
        .unwrap();
    }
    let mut store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.verify_chain("old").unwrap(),
        ChainVerdict::Unchained { entries: 1 }
    );
    store.append("old", &input("later")).unwrap();
    assert_eq!(
        store.verify_chain("old").unwrap(),
        ChainVerdict::Unchained { entries: 2 }
    );
    // New runs in the same file are chained.
    store.begin_run(&new_run("new")).unwrap();
    store.append("new", &input("q")).unwrap();
    assert_eq!(
        store.verify_chain("new").unwrap(),
        ChainVerdict::Intact { entries: 1 }
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Any change to any one entry's body is found at that entry.
    #[test]
    fn any_single_edit_is_found_where_it_was_made(n in 1usize..8, pick in 0usize..8, byte in 0u8..26) {
        let target = pick % n + 1;
        let dir = tempfile::tempdir().unwrap();
        let store = store_with(dir.path(), "r", n);
        let conn = attacker(dir.path());
        let id = nth_id(&conn, "r", target);
        let body: String = conn
            .query_row("SELECT body FROM entries WHERE id = ?1", [id], |r| r.get(0))
            .unwrap();
        let letter = char::from(b'a' + byte);
        let edited = body.replacen("entry", &format!("entr{letter}"), 1);
        prop_assume!(edited != body);
        conn.execute("UPDATE entries SET body = ?2 WHERE id = ?1", rusqlite::params![id, edited])
            .unwrap();
        let b = broken(store.verify_chain("r").unwrap());
        prop_assert_eq!(b.seq, target);
        prop_assert_eq!(b.entry_id, Some(id));
    }
}
