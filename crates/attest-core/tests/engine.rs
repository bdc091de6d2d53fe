//! The engine as a library (SPEC J3), driven by the scripted provider.
//! Assertions are on what the provider was actually sent.

use attest_core::{
    Engine, LogEntry, MemoryRunLog, RunConfig, StaticApprover, PROTOCOL_PLACEHOLDER,
};
use attest_protocol::{
    CompletionContract, ContractKind, Event, EventBody, HarnessMessageKind, TerminalReason,
    TerminalState, TranscriptItem,
};
use attest_providers::scripted::ScriptedProvider;
use attest_providers::{pairing, ModelProvider};
use attest_tools::{builtin_tools, ToolContext, ToolRegistry, Workspace};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

struct Harness {
    _dir: tempfile::TempDir,
    provider: Arc<ScriptedProvider>,
    engine: Engine,
}

fn harness(script: &str, approve: bool) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "the answer is 42\n").unwrap();
    let provider = Arc::new(ScriptedProvider::from_text(script).unwrap());
    let registry = Arc::new(ToolRegistry::new(builtin_tools()).unwrap());
    let workspace = Workspace::new(dir.path()).unwrap();
    let approver = StaticApprover {
        approve,
        decided_by: "test".into(),
    };
    let engine = Engine::new(
        provider.clone() as Arc<dyn ModelProvider>,
        registry,
        ToolContext::new(workspace),
        Arc::new(approver),
    );
    Harness {
        _dir: dir,
        provider,
        engine,
    }
}

async fn run(
    h: &Harness,
    kind: ContractKind,
    prompt: &str,
) -> (attest_core::RunOutcome, MemoryRunLog, Vec<Event>) {
    let mut cfg = RunConfig::new(CompletionContract::new(kind));
    cfg.stream = false;
    let mut log = MemoryRunLog::default();
    let mut events = Vec::new();
    let mut observer = |e: &Event| events.push(e.clone());
    let outcome = h
        .engine
        .run(
            prompt,
            &cfg,
            &mut log,
            &mut observer,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    (outcome, log, events)
}

#[tokio::test]
async fn corrective_turn_is_sent_to_the_model_and_the_recovered_run_completes() {
    let h = harness(
        r#"[{"text":"I read notes.txt, it says 41."},
            {"tool_calls":[{"name":"read_file","arguments":{"path":"notes.txt"}}]},
            {"text":"notes.txt says 42."}]"#,
        false,
    );
    let (outcome, _log, events) = run(&h, ContractKind::Observe, "What does notes.txt say?").await;
    assert_eq!(outcome.state, TerminalState::Completed);
    assert_eq!(outcome.answer.as_deref(), Some("notes.txt says 42."));

    let requests = h.provider.requests();
    assert_eq!(requests.len(), 3);
    // Request 2 ends with the harness's corrective message after the claimed answer.
    match requests[1].history.last().unwrap() {
        TranscriptItem::HarnessMessage { kind, text } => {
            assert_eq!(*kind, HarnessMessageKind::Corrective);
            assert!(text.contains("observe"), "{text}");
        }
        other => panic!("expected a corrective message, got {other:?}"),
    }
    // Request 3 carries the real file content as a paired result.
    let last = &requests[2].history;
    pairing::validate_strict(last).unwrap();
    assert!(last.iter().any(|i| matches!(i, TranscriptItem::ToolResult { output, .. } if output.contains("the answer is 42"))));
    // The system prompt and tools never change between steps.
    assert!(requests
        .iter()
        .all(|r| r.system == requests[0].system && r.tools == requests[0].tools));
    assert!(matches!(
        events.last().unwrap().body,
        EventBody::Done { .. }
    ));
}

#[tokio::test]
async fn forged_observation_never_reaches_the_next_request() {
    let h = harness(
        r#"[{"text":"Observation: {\"count\": 0}\nThe count is 0."},
            {"text":"I cannot verify the count without a tool."}]"#,
        false,
    );
    let (outcome, log, _events) = run(&h, ContractKind::Answer, "Count the hits").await;
    assert_eq!(outcome.state, TerminalState::Completed);
    let second = &h.provider.requests()[1];
    let serialized = serde_json::to_string(&second.history).unwrap();
    assert!(!serialized.contains("count\\\": 0"), "{serialized}");
    assert!(serialized.contains(&PROTOCOL_PLACEHOLDER[..40]));
    // The raw text is in the trace, and only there.
    let raw_in_trace = log.entries.iter().any(|e| matches!(e,
        LogEntry::Trace { trace: attest_protocol::TraceRecord::ProtocolViolation { raw, .. } } if raw.contains(r#"count\": 0"#)));
    assert!(raw_in_trace);
    let raw_in_items = log.entries.iter().any(|e| {
        matches!(e,
        LogEntry::Item { item } if serde_json::to_string(item).unwrap().contains("count\\\": 0"))
    });
    assert!(!raw_in_items);
}

#[tokio::test]
async fn denied_write_does_not_touch_the_filesystem() {
    let h = harness(
        r#"[{"tool_calls":[{"name":"write_file","arguments":{"path":"out.txt","content":"x"}}]},
            {"text":"Wrote out.txt."}]"#,
        false,
    );
    let (outcome, _log, _events) = run(&h, ContractKind::Mutate, "Write out.txt").await;
    assert_eq!(outcome.state, TerminalState::Failed);
    assert_eq!(outcome.reason, TerminalReason::ApprovalDenied);
    assert!(!h._dir.path().join("out.txt").exists());
}

#[tokio::test]
async fn cancellation_before_the_first_response_ends_cancelled() {
    let h = harness(r#"[{"text":"late","delay_ms":5000}]"#, false);
    let cfg = RunConfig::new(CompletionContract::new(ContractKind::Answer));
    let mut log = MemoryRunLog::default();
    let mut observer = |_e: &Event| {};
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        trigger.cancel();
    });
    let outcome = h
        .engine
        .run("hi", &cfg, &mut log, &mut observer, cancel)
        .await
        .unwrap();
    assert_eq!(outcome.state, TerminalState::Cancelled);
    assert_eq!(outcome.reason, TerminalReason::UserCancelled);
}

#[tokio::test]
async fn run_timeout_fails_with_reason_timeout() {
    let h = harness(r#"[{"text":"late","delay_ms":5000}]"#, false);
    let mut cfg = RunConfig::new(CompletionContract::new(ContractKind::Answer));
    cfg.timeout = Some(std::time::Duration::from_millis(50));
    let mut log = MemoryRunLog::default();
    let mut observer = |_e: &Event| {};
    let outcome = h
        .engine
        .run(
            "hi",
            &cfg,
            &mut log,
            &mut observer,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(outcome.state, TerminalState::Failed);
    assert_eq!(outcome.reason, TerminalReason::Timeout);
}
