//! One conformance suite for both store backends: every test runs against
//! SQLite (a file in a temporary directory) and PostgreSQL (a fresh
//! database on the server at `ATTEST_TEST_POSTGRES`, default
//! `postgres://postgres@127.0.0.1:5432/postgres`, dropped afterwards).

mod pg;

use attest_protocol::{
    AssistantPhase, Event, EventBody, LogEntry, MemoryItem, MemoryStatus, TerminalReason,
    TerminalState, TraceRecord, TranscriptItem, Usage,
};
use attest_store::{
    ApprovalRecord, ChainVerdict, NewRun, NewToken, PgStore, QueuedRun, ServerStore, SqliteStore,
    StoreError, DELIVERY_KEYS_KEPT,
};
use serde_json::json;
use std::time::Duration;

/// Where a backend keeps its data; each `open` is a handle of its own
/// (its own connection), as two workers or two servers would have.
trait Backend {
    fn open(&self) -> Box<dyn ServerStore>;
}

struct Sqlite(tempfile::TempDir);

impl Backend for Sqlite {
    fn open(&self) -> Box<dyn ServerStore> {
        Box::new(SqliteStore::open(&self.0.path().join("store.db")).unwrap())
    }
}

impl Backend for pg::TestDb {
    fn open(&self) -> Box<dyn ServerStore> {
        Box::new(PgStore::connect(&self.url).unwrap())
    }
}

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[test] fn $name() { super::$name(&super::Sqlite(tempfile::tempdir().unwrap())); })*
        }
        mod postgres {
            $(#[test] fn $name() { super::$name(&super::pg::TestDb::new()); })*
        }
    };
}

conformance!(
    a_run_log_round_trips_with_raw_outputs_kept_apart_and_its_chain_intact,
    runs_sessions_and_prefixes,
    queue_leases_one_run_per_session_and_takes_expired_leases_over,
    an_idempotency_key_returns_the_first_run,
    a_fenced_append_is_refused_once_another_worker_took_the_lease,
    approvals_are_decided_once_and_a_session_grant_is_kept,
    events_are_read_back_by_sequence_and_by_session_position,
    tokens_are_listed_and_revoked,
    memory_items_round_trip,
    a_resumed_handle_continues_the_chain_another_handle_started,
    a_stale_handles_batch_is_linked_after_the_other_handles_entries,
    a_delivery_key_is_first_only_once,
    trace_records_are_read_back_by_name_in_order,
);

fn run(id: &str, session: &str) -> NewRun {
    NewRun {
        id: id.into(),
        session_id: session.into(),
        trace_id: format!("trace-{id}"),
        prompt: "Which port?".into(),
        settings: json!({"max_steps": 4}),
        loop_version: "test".into(),
        prompt_version: "test".into(),
    }
}

fn begin(store: &mut dyn ServerStore, id: &str, session: &str) {
    store.ensure_session(session).unwrap();
    store.begin_run(&run(id, session)).unwrap();
}

fn event(run_id: &str, seq: u64, body: EventBody) -> LogEntry {
    LogEntry::Event {
        event: Event {
            run_id: run_id.into(),
            seq,
            ts: chrono::Utc::now(),
            body,
        },
    }
}

fn progress(text: &str) -> EventBody {
    EventBody::Progress {
        step: 1,
        text: text.into(),
        delta: false,
    }
}

fn done(answer: &str) -> EventBody {
    EventBody::Done {
        trace_id: "t".into(),
        state: TerminalState::Completed,
        reason: TerminalReason::ContractSatisfied,
        answer: Some(answer.into()),
        basis: "b".into(),
        receipts: vec![],
        grounding: None,
        steps: 2,
        usage: Usage::default(),
        loop_version: "l".into(),
        prompt_version: "p".into(),
    }
}

fn user(text: &str) -> LogEntry {
    LogEntry::Item {
        item: TranscriptItem::UserInput { text: text.into() },
    }
}

/// The texts of a run's items, each a user input.
fn user_texts(store: &dyn ServerStore, run: &str) -> Vec<String> {
    store
        .items(run)
        .unwrap()
        .into_iter()
        .map(|i| match i {
            TranscriptItem::UserInput { text } => text,
            other => panic!("{other:?}"),
        })
        .collect()
}

fn queued(id: &str, session: &str, key: Option<&str>) -> QueuedRun {
    QueuedRun {
        run_id: id.into(),
        session_id: session.into(),
        request: json!({"prompt": id}),
        idempotency_key: key.map(str::to_string),
    }
}

fn a_run_log_round_trips_with_raw_outputs_kept_apart_and_its_chain_intact(b: &dyn Backend) {
    let mut store = b.open();
    begin(store.as_mut(), "r1", "s1");
    store.append("r1", &user("Which port?")).unwrap();
    store
        .append(
            "r1",
            &LogEntry::Trace {
                trace: TraceRecord::RawOutput {
                    step: 1,
                    raw: "{\"secret\": \"raw model text\"}".into(),
                },
            },
        )
        .unwrap();
    store
        .append_all(
            "r1",
            &[
                LogEntry::Item {
                    item: TranscriptItem::AssistantOutput {
                        text: "The port is 8080.".into(),
                        reasoning: None,
                        encrypted_reasoning: vec![],
                        phase: AssistantPhase::Answer,
                    },
                },
                event("r1", 1, done("The port is 8080.")),
            ],
        )
        .unwrap();
    let entries = store.entries("r1").unwrap();
    assert_eq!(entries.len(), 4);
    let LogEntry::Trace {
        trace: TraceRecord::RawOutput { raw, .. },
    } = &entries[1]
    else {
        panic!("{:?}", entries[1])
    };
    assert!(raw.starts_with("artifact:"), "{raw}");
    let artifacts = store.artifacts("r1").unwrap();
    assert_eq!(artifacts.len(), 1);
    assert_eq!(artifacts[0].body, "{\"secret\": \"raw model text\"}");
    assert_eq!(format!("artifact:{}", artifacts[0].id), *raw);
    // Items only, in order.
    assert_eq!(store.items("r1").unwrap().len(), 2);
    // The done event ended the run.
    let record = store.run("r1").unwrap();
    assert_eq!(record.status, "completed");
    assert_eq!(record.answer.as_deref(), Some("The port is 8080."));
    assert_eq!(
        store.verify_chain("r1").unwrap(),
        ChainVerdict::Intact { entries: 4 }
    );
    // Archived items are kept apart from the log.
    store
        .append(
            "r1",
            &LogEntry::Archive {
                item: TranscriptItem::UserInput { text: "old".into() },
            },
        )
        .unwrap();
    assert_eq!(store.archived("r1").unwrap().len(), 1);
    assert_eq!(store.entries("r1").unwrap().len(), 4);
    // A second handle reads the same.
    let other = b.open();
    assert_eq!(other.entries("r1").unwrap(), store.entries("r1").unwrap());
    assert!(matches!(
        other.verify_chain("nope"),
        Err(StoreError::UnknownRun(_))
    ));
}

fn runs_sessions_and_prefixes(b: &dyn Backend) {
    let mut store = b.open();
    begin(store.as_mut(), "abc-1", "s1");
    begin(store.as_mut(), "abd-2", "s1");
    begin(store.as_mut(), "xyz-3", "s2");
    assert_eq!(store.run("abc").unwrap().id, "abc-1");
    assert!(matches!(store.run("ab"), Err(StoreError::AmbiguousRun(_))));
    assert!(matches!(store.run("zzz"), Err(StoreError::UnknownRun(_))));
    // `%` is not a wildcard here.
    assert!(matches!(store.run("%"), Err(StoreError::AmbiguousRun(_))));
    let s1: Vec<String> = store
        .runs(Some("s1"))
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(s1, ["abd-2", "abc-1"], "newest first");
    assert_eq!(store.runs(None).unwrap().len(), 3);
    let sessions = store.sessions().unwrap();
    assert_eq!(sessions.len(), 2);
    let s1 = sessions.iter().find(|s| s.id == "s1").unwrap();
    assert_eq!(s1.runs, 2);
    assert_eq!(s1.last_status.as_deref(), Some("running"));
    // A running run can be claimed again (resume).
    store.claim_run("abc-1", None).unwrap_or_else(|e| match e {
        StoreError::AlreadyClaimed { .. } => {}
        other => panic!("{other}"),
    });
}

fn queue_leases_one_run_per_session_and_takes_expired_leases_over(b: &dyn Backend) {
    let mut store = b.open();
    let mut other = b.open();
    store.enqueue(&queued("a1", "s", None)).unwrap();
    store.enqueue(&queued("a2", "s", None)).unwrap();
    store.enqueue(&queued("b1", "t", None)).unwrap();
    let long = Duration::from_secs(60);
    let first = store.lease_next("w1", long).unwrap().unwrap();
    assert_eq!((first.run_id.as_str(), first.epoch), ("a1", 1));
    assert!(!first.takeover);
    assert_eq!(first.request, json!({"prompt": "a1"}));
    // a2 waits for a1: its session has a leased run, on any handle.
    let second = other.lease_next("w2", long).unwrap().unwrap();
    assert_eq!(second.run_id, "b1");
    assert!(store.lease_next("w1", long).unwrap().is_none());
    assert!(other.lease_next("w2", long).unwrap().is_none());
    assert!(store.renew_lease("a1", "w1", 1, long).unwrap());
    assert!(!store.renew_lease("a1", "w2", 1, long).unwrap());
    assert!(!store.renew_lease("a1", "w1", 2, long).unwrap());

    // w1 is gone: its lease expires, a1 is taken over with epoch 2.
    assert_eq!(other.expire_leases(&|o| o == "w1").unwrap(), 1);
    let taken = other.lease_next("w2", long).unwrap().unwrap();
    assert_eq!((taken.run_id.as_str(), taken.epoch), ("a1", 2));
    assert!(taken.takeover);
    assert!(!store.renew_lease("a1", "w1", 1, long).unwrap());
    // The old epoch is fenced off the queue row too.
    assert!(!store.settle("a1", 1, "finished", None).unwrap());
    assert!(other.settle("a1", 2, "finished", None).unwrap());
    assert!(store.queued_run("a1").unwrap().unwrap().is_settled());
    let next = store.lease_next("w1", long).unwrap().unwrap();
    assert_eq!(next.run_id, "a2");

    // A lease that simply runs out is taken over too.
    store.enqueue(&queued("c1", "u", None)).unwrap();
    let short = store
        .lease_next("w1", Duration::from_millis(200))
        .unwrap()
        .unwrap();
    assert_eq!(short.run_id, "c1");
    std::thread::sleep(Duration::from_millis(400));
    // Never by its own owner, whose drive of it is still running however
    // late its renewal is: two drives of one run would run its calls twice.
    assert!(store.lease_next("w1", long).unwrap().is_none());
    let over = other.lease_next("w2", long).unwrap().unwrap();
    assert_eq!((over.run_id.as_str(), over.epoch), ("c1", 2));

    // Cancel only before a worker has it.
    store.enqueue(&queued("d1", "v", None)).unwrap();
    assert!(store.cancel_queued("d1").unwrap());
    assert!(!store.cancel_queued("a2").unwrap());
    let queue = store.queue(None).unwrap();
    assert_eq!(queue.len(), 5);
    assert_eq!(queue[0].run_id, "d1", "newest first");
    assert_eq!(queue[0].state, "cancelled");
    assert_eq!(store.queue(Some("s")).unwrap().len(), 2);
}

fn an_idempotency_key_returns_the_first_run(b: &dyn Backend) {
    let mut store = b.open();
    let first = store.enqueue(&queued("r1", "s1", Some("k"))).unwrap();
    let again = b.open().enqueue(&queued("r2", "s2", Some("k"))).unwrap();
    assert!(first.created && !again.created);
    assert_eq!(
        (again.run_id.as_str(), again.session_id.as_str()),
        ("r1", "s1")
    );
    assert!(store.queued_run("r2").unwrap().is_none());
    // No key: always a new run.
    assert!(store.enqueue(&queued("r3", "s3", None)).unwrap().created);
    assert!(store.enqueue(&queued("r4", "s4", None)).unwrap().created);
}

fn a_fenced_append_is_refused_once_another_worker_took_the_lease(b: &dyn Backend) {
    let mut queue = b.open();
    queue.enqueue(&queued("r1", "s1", None)).unwrap();
    let lease = queue
        .lease_next("w1", Duration::from_secs(60))
        .unwrap()
        .unwrap();
    let mut old = b.open();
    begin(old.as_mut(), "r1", "s1");
    old.fence("r1", "w1", lease.epoch);
    old.append("r1", &user("one")).unwrap();

    // w1 stalls; w2 takes the run over.
    queue.expire_leases(&|o| o == "w1").unwrap();
    let taken = queue
        .lease_next("w2", Duration::from_secs(60))
        .unwrap()
        .unwrap();
    assert_eq!(taken.epoch, lease.epoch + 1);
    let mut new = b.open();
    new.fence("r1", "w2", taken.epoch);
    new.append("r1", &user("two")).unwrap();

    // The stalled worker wakes up: every write is refused, nothing lands.
    let refused = old.append("r1", &user("stale"));
    assert!(
        matches!(refused, Err(StoreError::Fenced { ref run, epoch }) if run == "r1" && epoch == lease.epoch),
        "{refused:?}"
    );
    assert!(old
        .append_all("r1", &[user("stale 2"), user("stale 3")])
        .is_err());
    // Archive rows are part of the append: refused with it, none left over.
    let compacted = LogEntry::Archive {
        item: TranscriptItem::UserInput {
            text: "stale archive".into(),
        },
    };
    assert!(matches!(
        old.append_all("r1", &[compacted.clone(), user("stale 4")]),
        Err(StoreError::Fenced { .. })
    ));
    assert!(matches!(
        old.append_all("r1", &[compacted]),
        Err(StoreError::Fenced { .. })
    ));
    assert!(new.archived("r1").unwrap().is_empty());
    // So are raw outputs, which the log keeps in the artifact table.
    let raw = LogEntry::Trace {
        trace: TraceRecord::RawOutput {
            step: 1,
            raw: "stale raw output".into(),
        },
    };
    assert!(matches!(
        old.append_all("r1", &[raw]),
        Err(StoreError::Fenced { .. })
    ));
    assert!(new.artifacts("r1").unwrap().is_empty());
    assert_eq!(user_texts(new.as_ref(), "r1"), ["one", "two"]);
    assert_eq!(
        new.verify_chain("r1").unwrap(),
        ChainVerdict::Intact { entries: 2 }
    );
    // Once the new worker settles, its own fence refuses too.
    assert!(queue.settle("r1", taken.epoch, "finished", None).unwrap());
    assert!(matches!(
        new.append("r1", &user("after")),
        Err(StoreError::Fenced { .. })
    ));
    new.unfence("r1");
    new.append("r1", &user("unfenced")).unwrap();
}

fn approval(call_id: &str, session: &str) -> ApprovalRecord {
    ApprovalRecord {
        call_id: call_id.into(),
        run_id: format!("run-{call_id}"),
        session_id: session.into(),
        tool_name: "shell".into(),
        request: json!({"call_id": call_id, "arguments": {"command": "rm -rf build"}}),
        owner: "w1".into(),
        requested_at: chrono::Utc::now().to_rfc3339(),
        decision: None,
        for_session: false,
        decided_at: None,
    }
}

fn approvals_are_decided_once_and_a_session_grant_is_kept(b: &dyn Backend) {
    let mut a = b.open();
    let mut other = b.open();
    a.request_approval(&approval("c1", "s1")).unwrap();
    a.request_approval(&approval("c2", "s1")).unwrap();
    let pending = other.pending_approvals().unwrap();
    assert_eq!(
        pending
            .iter()
            .map(|p| p.call_id.as_str())
            .collect::<Vec<_>>(),
        ["c1", "c2"]
    );
    assert_eq!(pending[0].request["arguments"]["command"], "rm -rf build");
    let allow = json!({"approved": true, "decided_by": "alice"});
    let decided = other
        .decide_approval("run-c1", "c1", &allow, true)
        .unwrap()
        .unwrap();
    assert_eq!(decided.decision.as_ref().unwrap()["decided_by"], "alice");
    assert!(decided.for_session);
    // Once only: a second decision (a replayed button) changes nothing.
    let deny = json!({"approved": false, "decided_by": "mallory"});
    assert!(a
        .decide_approval("run-c1", "c1", &deny, false)
        .unwrap()
        .is_none());
    assert_eq!(
        a.approval("run-c1", "c1")
            .unwrap()
            .unwrap()
            .decision
            .unwrap()["decided_by"],
        "alice"
    );
    assert!(a
        .decide_approval("run-c1", "unknown", &deny, false)
        .unwrap()
        .is_none());
    assert_eq!(a.pending_approvals().unwrap().len(), 1);
    assert!(a.session_grant("s1", "shell").unwrap());
    assert!(!a.session_grant("s2", "shell").unwrap());
    // A denial for the session grants nothing.
    a.decide_approval("run-c2", "c2", &deny, true)
        .unwrap()
        .unwrap();
    a.request_approval(&approval("c3", "s3")).unwrap();
    a.decide_approval("run-c3", "c3", &deny, true)
        .unwrap()
        .unwrap();
    assert!(!a.session_grant("s3", "shell").unwrap());
    assert!(a.pending_approvals().unwrap().is_empty());

    // Call ids are unique within a run only: two runs' `call_0_0` are two
    // approvals, and deciding one leaves the other waiting.
    let mut first = approval("call_0_0", "s4");
    first.run_id = "run-x".into();
    let mut second = approval("call_0_0", "s5");
    second.run_id = "run-y".into();
    a.request_approval(&first).unwrap();
    a.request_approval(&second).unwrap();
    assert_eq!(a.pending_approvals().unwrap().len(), 2);
    a.decide_approval("run-x", "call_0_0", &allow, false)
        .unwrap()
        .unwrap();
    let left = a.pending_approvals().unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].run_id, "run-y");
    assert!(a
        .approval("run-y", "call_0_0")
        .unwrap()
        .unwrap()
        .decision
        .is_none());
}

fn events_are_read_back_by_sequence_and_by_session_position(b: &dyn Backend) {
    let mut store = b.open();
    begin(store.as_mut(), "r1", "s1");
    for seq in 1..=3 {
        store
            .append("r1", &event("r1", seq, progress("working")))
            .unwrap();
        store.append("r1", &user("between")).unwrap();
    }
    begin(store.as_mut(), "r2", "s1");
    store
        .append("r2", &event("r2", 1, progress("working")))
        .unwrap();
    let after = store.events_after("r1", 1).unwrap();
    assert_eq!(
        after.iter().map(|e| e.event.seq).collect::<Vec<_>>(),
        [2, 3]
    );
    let session = store.session_events_after("s1", 0).unwrap();
    assert_eq!(session.len(), 4);
    assert!(session.windows(2).all(|w| w[0].position < w[1].position));
    let rest = store
        .session_events_after("s1", session[1].position)
        .unwrap();
    assert_eq!(rest, session[2..].to_vec());
    assert_eq!(rest.last().unwrap().event.run_id, "r2");
}

fn tokens_are_listed_and_revoked(b: &dyn Backend) {
    let mut store = b.open();
    store
        .add_token(&NewToken {
            id: "t1".into(),
            name: "ci".into(),
            hash: "h1".into(),
            scopes: vec!["runs:read".into(), "runs:write".into()],
        })
        .unwrap();
    store
        .add_token(&NewToken {
            id: "t2".into(),
            name: "bot".into(),
            hash: "h2".into(),
            scopes: vec![],
        })
        .unwrap();
    let tokens = b.open().tokens().unwrap();
    assert_eq!(tokens.len(), 2);
    assert_eq!(tokens[0].scopes, ["runs:read", "runs:write"]);
    assert!(tokens[1].scopes.is_empty());
    assert_eq!(store.revoke_token("ci").unwrap(), 1);
    assert_eq!(store.revoke_token("ci").unwrap(), 0);
    assert_eq!(store.revoke_token("t2").unwrap(), 1);
    assert!(store
        .tokens()
        .unwrap()
        .iter()
        .all(|t| t.revoked_at.is_some()));
    // The same hash twice is refused.
    assert!(store
        .add_token(&NewToken {
            id: "t3".into(),
            name: "dup".into(),
            hash: "h1".into(),
            scopes: vec![],
        })
        .is_err());
    store.ping().unwrap();
}

fn memory_items_round_trip(b: &dyn Backend) {
    let mut store = b.open();
    let mut item: MemoryItem = serde_json::from_value(json!({
        "id": "mem-abc",
        "content": "The service listens on 8080",
        "kind": "project_fact",
        "provenance": "tool_receipt",
        "source_ref": {"path": "config.toml"},
        "confidence": "high",
        "conflict_policy": "defer_to_source",
        "status": "candidate",
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z"
    }))
    .unwrap();
    store.put_memory(&item).unwrap();
    item.id = "mem-abd".into();
    item.status = MemoryStatus::Active;
    store.put_memory(&item).unwrap();
    assert_eq!(store.memory_items(&[]).unwrap().len(), 2);
    let active = store.memory_items(&[MemoryStatus::Active]).unwrap();
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].id, "mem-abd");
    assert_eq!(store.memory_item("mem-abc").unwrap().content, item.content);
    assert!(matches!(
        store.memory_item("mem-ab"),
        Err(StoreError::AmbiguousMemory(_))
    ));
    let changed = store
        .set_memory_status("mem-abc", MemoryStatus::Retracted)
        .unwrap();
    assert_eq!(changed.status, MemoryStatus::Retracted);
    assert_eq!(
        b.open().memory_item("mem-abc").unwrap().status,
        MemoryStatus::Retracted
    );
    let verified = store
        .update_memory_verification("mem-abd", chrono::Utc::now(), MemoryStatus::Stale)
        .unwrap();
    assert!(verified.verified_at.is_some());
    assert!(matches!(
        store.set_memory_status("nope", MemoryStatus::Active),
        Err(StoreError::UnknownMemory(_))
    ));
    assert_eq!(store.memory_projection().unwrap(), None);
    store.set_memory_projection("# Memory\n").unwrap();
    store.set_memory_projection("# Memory 2\n").unwrap();
    assert_eq!(
        store.memory_projection().unwrap().as_deref(),
        Some("# Memory 2\n")
    );
}

fn a_resumed_handle_continues_the_chain_another_handle_started(b: &dyn Backend) {
    let mut first = b.open();
    begin(first.as_mut(), "r1", "s1");
    first.append("r1", &user("one")).unwrap();
    // Another process (a takeover) appends next, then the first again:
    // each rereads the head it no longer has.
    let mut second = b.open();
    second.append("r1", &user("two")).unwrap();
    first.append("r1", &user("three")).unwrap();
    assert_eq!(first.items("r1").unwrap().len(), 3);
    assert_eq!(
        second.verify_chain("r1").unwrap(),
        ChainVerdict::Intact { entries: 3 }
    );
}

fn a_stale_handles_batch_is_linked_after_the_other_handles_entries(b: &dyn Backend) {
    let mut first = b.open();
    begin(first.as_mut(), "r1", "s1");
    first.append_all("r1", &[user("one"), user("two")]).unwrap();
    let mut second = b.open();
    second
        .append_all("r1", &[user("three"), user("four")])
        .unwrap();
    // `first` still holds the head it left after "two": its batch must
    // not link from there (a fork), but after "four", whole.
    first
        .append_all("r1", &[user("five"), user("six"), user("seven")])
        .unwrap();
    assert_eq!(
        user_texts(second.as_ref(), "r1"),
        ["one", "two", "three", "four", "five", "six", "seven"]
    );
    assert_eq!(
        second.verify_chain("r1").unwrap(),
        ChainVerdict::Intact { entries: 7 }
    );
}

fn a_delivery_key_is_first_only_once(b: &dyn Backend) {
    let mut store = b.open();
    let t0 = chrono::Utc::now();
    assert!(store.first_delivery("generic:msg_1", t0).unwrap());
    assert!(!store.first_delivery("generic:msg_1", t0).unwrap());
    assert!(store.first_delivery("slack:msg_1", t0).unwrap());
    // Another handle on the same store (another server) sees it too.
    let mut other = b.open();
    assert!(!other.first_delivery("generic:msg_1", t0).unwrap());
    // Kept for as long as a replay's timestamp could still pass...
    let later = t0 + DELIVERY_KEYS_KEPT - chrono::Duration::minutes(1);
    assert!(!other.first_delivery("generic:msg_1", later).unwrap());
    // ...then dropped by the next delivery, so the table stays small.
    let much_later = t0 + DELIVERY_KEYS_KEPT + chrono::Duration::minutes(1);
    assert!(other.first_delivery("generic:msg_2", much_later).unwrap());
    assert!(store.first_delivery("slack:msg_1", much_later).unwrap());
    assert!(!store.first_delivery("generic:msg_2", much_later).unwrap());
}

fn trace_records_are_read_back_by_name_in_order(b: &dyn Backend) {
    let mut store = b.open();
    begin(store.as_mut(), "r1", "s1");
    begin(store.as_mut(), "r2", "s1");
    let trace = |v: serde_json::Value| LogEntry::Trace {
        trace: serde_json::from_value(v).unwrap(),
    };
    let request = |step: u32| {
        trace(
            json!({"record": "request", "step": step, "attempt": 1, "provider": "openai",
            "api_family": "openai_chat", "model": "m", "stream": false, "prefix_hash": "",
            "tool_names": ["read_file"], "message_count": 1, "max_tokens": 1}),
        )
    };
    let response = |step: u32| {
        trace(
            json!({"record": "response", "step": step, "raw_finish_reason": null,
            "text": "", "parsed_calls": [], "call_source": "native",
            "input_tokens": 0, "output_tokens": 0}),
        )
    };
    let raw = trace(json!({"record": "raw_output", "step": 1, "raw": "{}"}));
    store
        .append_all(
            "r1",
            &[
                user("Which port?"),
                request(1),
                raw,
                response(1),
                request(2),
            ],
        )
        .unwrap();
    store.append("r2", &request(7)).unwrap();
    store.append("r1", &response(2)).unwrap();
    let named = |records: &[TraceRecord]| -> Vec<(String, u32)> {
        records
            .iter()
            .map(|t| {
                let v = serde_json::to_value(t).unwrap();
                (
                    v["record"].as_str().unwrap().to_string(),
                    v["step"].as_u64().unwrap() as u32,
                )
            })
            .collect()
    };
    let both = store.traces("r1", &["request", "response"]).unwrap();
    let want = [
        ("request", 1),
        ("response", 1),
        ("request", 2),
        ("response", 2),
    ];
    assert_eq!(named(&both), want.map(|(r, s)| (r.to_string(), s)).to_vec());
    let responses = store.traces("r1", &["response"]).unwrap();
    assert_eq!(
        named(&responses),
        vec![("response".to_string(), 1), ("response".to_string(), 2)]
    );
    assert!(store.traces("r1", &[]).unwrap().is_empty());
    assert_eq!(
        named(&store.traces("r2", &["request"]).unwrap()),
        vec![("request".to_string(), 7)]
    );
}
