//! The store through its public API: append-only, raw outputs kept out of
//! the transcript, and crash-at-any-point recovery that always yields a
//! transcript whose serialization passes the pairing validator.

use attest_protocol::{
    Event, EventBody, LogEntry, ReceiptStatus, TerminalReason, TerminalState, TraceRecord,
    TranscriptItem, Usage,
};
use attest_providers::pairing;
use attest_store::{NewRun, SqliteStore, Store};
use proptest::prelude::*;

fn new_run(id: &str) -> NewRun {
    NewRun {
        id: id.into(),
        session_id: "s".into(),
        trace_id: "t".into(),
        prompt: "p".into(),
        settings: serde_json::json!({}),
        loop_version: "l".into(),
        prompt_version: "p".into(),
    }
}

fn open(dir: &std::path::Path) -> SqliteStore {
    let mut store = SqliteStore::open(&dir.join("attest.db")).unwrap();
    store.ensure_session("s").unwrap();
    store
}

fn item(item: TranscriptItem) -> LogEntry {
    LogEntry::Item { item }
}

#[test]
fn raw_outputs_go_to_artifacts_never_to_items() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    store.begin_run(&new_run("r1")).unwrap();
    store
        .append("r1", &item(TranscriptItem::UserInput { text: "q".into() }))
        .unwrap();
    store
        .append(
            "r1",
            &LogEntry::Trace {
                trace: TraceRecord::RawOutput {
                    step: 1,
                    raw: "RAW-SECRET-TEXT Observation: forged".into(),
                },
            },
        )
        .unwrap();
    let items = serde_json::to_string(&store.items("r1").unwrap()).unwrap();
    assert!(!items.contains("RAW-SECRET-TEXT"));
    let entries = serde_json::to_string(&store.entries("r1").unwrap()).unwrap();
    assert!(
        !entries.contains("RAW-SECRET-TEXT"),
        "the log keeps a reference only"
    );
    assert!(entries.contains("artifact:1"));
    let artifacts = store.artifacts("r1").unwrap();
    assert_eq!(artifacts.len(), 1);
    assert!(artifacts[0].body.contains("RAW-SECRET-TEXT"));
}

#[test]
fn done_event_records_the_terminal_state_and_runs_resolve_by_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    store.begin_run(&new_run("abc123")).unwrap();
    assert!(store.run("abc").unwrap().is_running());
    let done = Event {
        run_id: "abc123".into(),
        seq: 1,
        ts: chrono::Utc::now(),
        body: EventBody::Done {
            trace_id: "t".into(),
            state: TerminalState::Unverified,
            reason: TerminalReason::MissingReceipt,
            answer: Some("a".into()),
            basis: "b".into(),
            receipts: vec![],
            grounding: None,
            steps: 2,
            usage: Usage::default(),
            loop_version: "l".into(),
            prompt_version: "p".into(),
        },
    };
    store
        .append("abc123", &LogEntry::Event { event: done })
        .unwrap();
    let run = store.run("abc").unwrap();
    assert_eq!(run.status, "unverified");
    assert_eq!(run.reason.as_deref(), Some("missing_receipt"));
    assert_eq!(run.steps, 2);
    assert!(store.run("zzz").is_err());
    assert_eq!(store.sessions().unwrap()[0].runs, 1);
}

#[test]
fn the_log_is_append_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    store.begin_run(&new_run("r1")).unwrap();
    store
        .append("r1", &item(TranscriptItem::UserInput { text: "q".into() }))
        .unwrap();
    drop(store);
    let conn = rusqlite_conn(dir.path());
    let update = conn.execute("UPDATE entries SET body = 'x'", []);
    assert!(update.unwrap_err().to_string().contains("append-only"));
    let delete = conn.execute("DELETE FROM entries", []);
    assert!(delete.unwrap_err().to_string().contains("append-only"));
}

fn rusqlite_conn(dir: &std::path::Path) -> rusqlite::Connection {
    rusqlite::Connection::open(dir.join("attest.db")).unwrap()
}

/// A random transcript-shaped sequence: calls, results (possibly missing,
/// duplicated or orphaned), text.
fn arb_items() -> impl Strategy<Value = Vec<TranscriptItem>> {
    let one = prop_oneof![
        Just(TranscriptItem::UserInput { text: "u".into() }),
        (0u8..6).prop_map(|n| TranscriptItem::ToolCall {
            call_id: format!("c{n}"),
            name: "read_file".into(),
            arguments: "{}".into(),
        }),
        (0u8..8).prop_map(|n| TranscriptItem::ToolResult {
            call_id: format!("c{n}"),
            name: "read_file".into(),
            status: ReceiptStatus::Ok,
            output: "o".into(),
            receipt: None,
        }),
        Just(TranscriptItem::AssistantOutput {
            text: "a".into(),
            reasoning: None,
            encrypted_reasoning: Vec::new(),
            phase: attest_protocol::AssistantPhase::Commentary,
        }),
    ];
    prop::collection::vec(one, 0..40)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Appends, a crash after any number of them (the connection dropped
    /// mid-run), a reopen: every committed entry is there, in order, and the
    /// transcript rebuilt from it always serializes to a valid pairing.
    #[test]
    fn crash_at_any_point_then_reopen_yields_a_valid_transcript(items in arb_items(), cut in 0usize..40) {
        let dir = tempfile::tempdir().unwrap();
        let cut = cut.min(items.len());
        {
            let mut store = open(dir.path());
            store.begin_run(&new_run("r")).unwrap();
            for it in &items[..cut] {
                store.append("r", &item(it.clone())).unwrap();
            }
            // Dropped without finishing the run: the crash.
        }
        let store = open(dir.path());
        let reloaded = store.items("r").unwrap();
        prop_assert_eq!(&reloaded[..], &items[..cut]);
        prop_assert!(store.run("r").unwrap().is_running());
        let normalized = pairing::normalize(&reloaded);
        prop_assert!(pairing::validate_strict(&normalized.items).is_ok());
    }
}
