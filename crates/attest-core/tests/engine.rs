//! The engine as a library (SPEC J3), driven by the scripted provider.
//! Assertions are on what the provider was actually sent.

use attest_core::tool::{ToolContext, ToolRegistry, Workspace};
use attest_core::{
    Engine, LogEntry, MemoryRunLog, RunConfig, StaticApprover, PROTOCOL_PLACEHOLDER,
};
use attest_protocol::{
    CompletionContract, ContractKind, Event, EventBody, HarnessMessageKind, TerminalReason,
    TerminalState, TranscriptItem,
};
use attest_providers::scripted::ScriptedProvider;
use attest_providers::{pairing, ModelProvider};
use attest_tools::builtin_tools;
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
    let registry = Arc::new(ToolRegistry::new(builtin_tools(None)).unwrap());
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
    run_cfg(h, &cfg, prompt).await
}

/// Run `prompt` with `cfg`; returns the outcome, the log and the events.
async fn run_cfg(
    h: &Harness,
    cfg: &RunConfig,
    prompt: &str,
) -> (attest_core::RunOutcome, MemoryRunLog, Vec<Event>) {
    let mut log = MemoryRunLog::default();
    let mut events = Vec::new();
    let mut observer = |e: &Event| events.push(e.clone());
    let outcome = h
        .engine
        .run(
            prompt,
            cfg,
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
    let (outcome, log, events) = run(&h, ContractKind::Observe, "What does notes.txt say?").await;
    assert_eq!(outcome.state, TerminalState::Completed);
    assert_eq!(outcome.answer.as_deref(), Some("notes.txt says 42."));
    // `done` (logged and shown) and the outcome carry the same receipts.
    let done_receipts = |event: &Event| match &event.body {
        EventBody::Done { receipts, .. } => Some(receipts.clone()),
        _ => None,
    };
    let logged = log.entries.iter().find_map(|e| match e {
        LogEntry::Event { event } => done_receipts(event),
        _ => None,
    });
    assert_eq!(outcome.receipts.len(), 1);
    assert_eq!(logged.as_ref(), Some(&outcome.receipts));
    assert_eq!(events.iter().find_map(done_receipts), logged);

    let requests = h.provider.requests();
    assert_eq!(requests.len(), 3);
    // Request 2 ends with the harness's corrective message after the claimed answer.
    // (The run-state snapshot follows it, last of all.)
    let before_tail = &requests[1].history[requests[1].history.len() - 2];
    match &**before_tail {
        TranscriptItem::HarnessMessage { kind, text } => {
            assert_eq!(*kind, HarnessMessageKind::Corrective);
            assert!(text.contains("observe"), "{text}");
        }
        other => panic!("expected a corrective message, got {other:?}"),
    }
    // Request 3 carries the real file content as a paired result.
    let last = &requests[2].history;
    pairing::validate_strict(last).unwrap();
    assert!(last.iter().any(|i| matches!(&**i, TranscriptItem::ToolResult { output, .. } if output.contains("the answer is 42"))));
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
    let (outcome, _log, _events) = run_cfg(&h, &cfg, "hi").await;
    assert_eq!(outcome.state, TerminalState::Failed);
    assert_eq!(outcome.reason, TerminalReason::Timeout);
}

#[tokio::test]
async fn tail_state_is_last_in_every_request_never_logged_and_never_accumulates() {
    let mut responses: Vec<serde_json::Value> = (0..30)
        .map(|i| {
            serde_json::json!({
                "text": format!("Step {i}: the answer is surely 41."),
                "tool_calls": [{"name": "grep", "arguments": {"pattern": format!("answer|{i}")}}]
            })
        })
        .collect();
    responses.push(serde_json::json!({"text": "notes.txt says 42."}));
    let h = harness(&serde_json::Value::Array(responses).to_string(), false);
    let mut cfg = RunConfig::new(CompletionContract::new(ContractKind::Observe));
    cfg.max_steps = 40;
    let (outcome, log, _events) = run_cfg(&h, &cfg, "What does notes.txt say?").await;
    assert_eq!(outcome.state, TerminalState::Completed);
    let requests = h.provider.requests();
    assert_eq!(requests.len(), 31);
    for (i, request) in requests.iter().enumerate().skip(1) {
        let snapshots: Vec<&String> = request
            .history
            .iter()
            .filter_map(|item| match &**item {
                TranscriptItem::HarnessMessage {
                    kind: HarnessMessageKind::StateSnapshot,
                    text,
                } => Some(text),
                _ => None,
            })
            .collect();
        assert_eq!(
            snapshots.len(),
            1,
            "request {i} carries {} snapshots",
            snapshots.len()
        );
        assert!(matches!(
            request.history.last().map(|i| &**i),
            Some(TranscriptItem::HarnessMessage {
                kind: HarnessMessageKind::StateSnapshot,
                ..
            })
        ));
        let tail = snapshots[0];
        assert!(tail.contains("Goal: What does notes.txt say?"), "{tail}");
        // The model's claim is a next step at most, never a confirmed fact.
        let facts = tail.split("Confirmed facts").nth(1).unwrap_or("");
        let facts = facts.split("Next step").next().unwrap_or("");
        assert!(!facts.contains("surely 41"), "request {i}: {tail}");
        assert!(tail.contains("grep"), "{tail}");
        assert!(attest_core::state::count_tokens(tail) <= 800);
    }
    let logged = serde_json::to_string(&log.entries).unwrap();
    assert!(
        !logged.contains("state_snapshot"),
        "a snapshot was written to the log"
    );
}

#[tokio::test]
async fn compaction_is_declared_keeps_pairs_whole_and_archived_evidence_is_retrievable() {
    // 48 reads of a ~2 KB file, then a history lookup of the very first call, then an answer.
    let mut responses: Vec<serde_json::Value> = (0..48)
        .map(|i| {
            serde_json::json!({
                "text": format!("Reading part {i}."),
                "tool_calls": [{"id": format!("read_{i}"), "name": "grep", "arguments": {"pattern": format!("line|{i}x"), "path": "big.txt"}}]
            })
        })
        .collect();
    responses.push(serde_json::json!({
        "tool_calls": [{"id": "lookup", "name": "history", "arguments": {"call_id": "read_0"}}]
    }));
    responses.push(serde_json::json!({"text": "big.txt holds the numbered lines."}));
    let h = harness(&serde_json::Value::Array(responses).to_string(), false);
    let big: String = (0..120)
        .map(|i| format!("line {i:04} of the big file\n"))
        .collect();
    std::fs::write(h._dir.path().join("big.txt"), &big).unwrap();

    let mut cfg = RunConfig::new(CompletionContract::new(ContractKind::Observe));
    cfg.max_steps = 60;
    cfg.compaction = attest_core::CompactionPolicy {
        history_budget_tokens: 12_000,
        keep_recent_tokens: 4_000,
    };
    let (outcome, log, events) = run_cfg(&h, &cfg, "Read big.txt repeatedly").await;
    assert_eq!(outcome.state, TerminalState::Completed, "{}", outcome.basis);
    assert_eq!(outcome.steps, 50);

    let compactions: Vec<u32> = events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::Compacted {
                step, reset_point, ..
            } => {
                assert_ne!(
                    reset_point.prefix_hash_before,
                    reset_point.prefix_hash_after
                );
                assert!(!reset_point.source_refs.is_empty());
                Some(*step)
            }
            _ => None,
        })
        .collect();
    assert!(
        compactions.len() >= 2,
        "expected repeated compaction, got {compactions:?}"
    );

    // The prefix hash changes exactly at the declared reset points.
    let hashes: Vec<(u32, String)> = log
        .entries
        .iter()
        .filter_map(|e| match e {
            LogEntry::Trace {
                trace:
                    attest_protocol::TraceRecord::Request {
                        step, prefix_hash, ..
                    },
            } => Some((*step, prefix_hash.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(hashes.len(), 50);
    for pair in hashes.windows(2) {
        let changed = pair[0].1 != pair[1].1;
        assert_eq!(
            changed,
            compactions.contains(&pair[1].0),
            "prefix hash at step {} changed={changed} without/with a declared reset point",
            pair[1].0
        );
    }

    // Every request kept its pairs whole and stayed within budget after compaction.
    for (i, request) in h.provider.requests().iter().enumerate() {
        pairing::validate_strict(&request.history).unwrap_or_else(|e| panic!("request {i}: {e}"));
    }
    // Originals were archived, and the history tool returned the first read in full.
    let archived = log
        .entries
        .iter()
        .filter(|e| matches!(e, LogEntry::Archive { .. }))
        .count();
    assert!(archived > 40, "{archived} archived");
    let requests = h.provider.requests();
    let last = &requests[requests.len() - 1];
    assert!(last.tools.iter().any(|t| t.name == "history"));
    let lookup = last
        .history
        .iter()
        .find_map(|i| match &**i {
            TranscriptItem::ToolResult {
                call_id, output, ..
            } if call_id == "lookup" => Some(output.clone()),
            _ => None,
        })
        .expect("history result in the last request");
    assert!(lookup.contains("line 0119 of the big file"), "{lookup}");
    assert!(lookup.contains("call read_0: grep"), "{lookup}");
}

#[tokio::test]
async fn reasoning_is_kept_only_as_the_policy_says_and_never_sent_as_text() {
    for (policy, expect_kept) in [
        (attest_core::ReasoningPolicy::Strip, false),
        (attest_core::ReasoningPolicy::Keep, true),
    ] {
        let h = harness(
            r#"[{"text":"Reading.","reasoning":"I should read notes.txt first.","tool_calls":[{"name":"read_file","arguments":{"path":"notes.txt"}}]},
                {"text":"42.","reasoning":"The file says 42."}]"#,
            false,
        );
        let mut cfg = RunConfig::new(CompletionContract::new(ContractKind::Observe));
        cfg.reasoning = policy;
        let mut log = MemoryRunLog::default();
        let mut observer = |_e: &Event| {};
        let outcome = h
            .engine
            .run(
                "What does notes.txt say?",
                &cfg,
                &mut log,
                &mut observer,
                CancellationToken::new(),
            )
            .await
            .unwrap();
        assert_eq!(outcome.state, TerminalState::Completed);
        let kept = log.entries.iter().any(|e| matches!(e,
            LogEntry::Item { item: TranscriptItem::AssistantOutput { reasoning: Some(r), .. } } if r.contains("read notes.txt first")));
        assert_eq!(kept, expect_kept, "{policy:?}");
    }
}

#[tokio::test]
async fn manual_compaction_summarizes_earlier_turns_before_the_first_request() {
    let h = harness(
        r#"[{"text":"You asked about notes.txt; it said 42."}]"#,
        false,
    );
    let earlier = vec![
        TranscriptItem::UserInput {
            text: "What does notes.txt say?".into(),
        },
        TranscriptItem::ToolCall {
            call_id: "old_1".into(),
            name: "read_file".into(),
            arguments: r#"{"path":"notes.txt"}"#.into(),
        },
        TranscriptItem::ToolResult {
            call_id: "old_1".into(),
            name: "read_file".into(),
            status: attest_protocol::ReceiptStatus::Ok,
            output: "the answer is 42".into(),
            receipt: None,
        },
        TranscriptItem::AssistantOutput {
            text: "It says 42.".into(),
            reasoning: None,
            encrypted_reasoning: Vec::new(),
            phase: attest_protocol::AssistantPhase::Answer,
        },
    ];
    let mut cfg = RunConfig::new(CompletionContract::new(ContractKind::Answer));
    cfg.prior_history = earlier;
    cfg.force_compaction = true;
    let (outcome, _log, events) = run_cfg(&h, &cfg, "What did I ask?").await;
    assert_eq!(outcome.state, TerminalState::Completed);
    let compacted = events.iter().find_map(|e| match &e.body {
        EventBody::Compacted { reset_point, .. } => Some(reset_point.clone()),
        _ => None,
    });
    let reset = compacted.expect("a compaction event");
    assert_eq!(
        reset.reason,
        attest_protocol::CacheResetReason::ManualCompaction
    );
    assert_eq!(reset.source_refs, vec!["old_1".to_string()]);
    let first = &h.provider.requests()[0];
    let summary = match &*first.history[0] {
        TranscriptItem::HarnessMessage {
            kind: HarnessMessageKind::CompactionSummary,
            text,
        } => text.clone(),
        other => panic!("expected the summary first, got {other:?}"),
    };
    assert!(
        summary.contains("[old_1] read_file")
            && summary.contains("user asked: What does notes.txt say?"),
        "{summary}"
    );
    assert!(first.tools.iter().any(|t| t.name == "history"));
    pairing::validate_strict(&first.history).unwrap();
}

/// A do-nothing observe tool, to make a large tool set.
struct NamedTool(attest_protocol::ToolSpec);

#[async_trait::async_trait]
impl attest_tools::Tool for NamedTool {
    fn spec(&self) -> &attest_protocol::ToolSpec {
        &self.0
    }
    fn default_permission(&self) -> attest_protocol::Permission {
        attest_protocol::Permission::Allow
    }
    async fn execute(
        &self,
        _args: serde_json::Value,
        _ctx: &ToolContext,
    ) -> attest_tools::ToolOutput {
        attest_tools::ToolOutput::ok(
            format!("{} ran", self.0.name),
            attest_protocol::Evidence::default(),
        )
    }
}

#[tokio::test]
async fn large_tool_sets_are_discovered_with_tool_search_and_the_change_is_declared() {
    let dir = tempfile::tempdir().unwrap();
    let mut tools = builtin_tools(None);
    for i in 0..30 {
        let (name, description) = if i == 17 {
            (
                "fetch_weather".to_string(),
                "Fetch the weather forecast for a city".to_string(),
            )
        } else {
            (format!("tool_{i}"), format!("Does task number {i}"))
        };
        tools.push(Arc::new(NamedTool(attest_protocol::ToolSpec {
            name,
            description,
            parameters: serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false}),
            effect: attest_protocol::EffectClass::Observe,
        })));
    }
    let provider = Arc::new(
        ScriptedProvider::from_text(
            r#"[{"tool_calls":[{"name":"fetch_weather","arguments":{}}]},
                {"tool_calls":[{"name":"tool_search","arguments":{"query":"weather forecast"}}]},
                {"tool_calls":[{"name":"fetch_weather","arguments":{}}]},
                {"text":"Sunny."}]"#,
        )
        .unwrap(),
    );
    let engine = Engine::new(
        provider.clone() as Arc<dyn ModelProvider>,
        Arc::new(ToolRegistry::new(tools).unwrap()),
        ToolContext::new(Workspace::new(dir.path()).unwrap()),
        Arc::new(StaticApprover::deny()),
    );
    let mut cfg = RunConfig::new(CompletionContract::new(ContractKind::Observe));
    cfg.defer_tools_after = Some(6);
    let mut log = MemoryRunLog::default();
    let mut observer = |_e: &Event| {};
    let outcome = engine
        .run(
            "Weather in Paris?",
            &cfg,
            &mut log,
            &mut observer,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(outcome.state, TerminalState::Completed, "{}", outcome.basis);
    let statuses: Vec<&str> = outcome.receipts.iter().map(|r| r.status.as_str()).collect();
    assert_eq!(statuses, ["unknown_tool", "ok", "ok"]);
    let requests = provider.requests();
    let names = |i: usize| {
        requests[i]
            .tools
            .iter()
            .map(|t| t.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(0).len(), 7, "{:?}", names(0));
    assert_eq!(names(0).last().unwrap(), "tool_search");
    assert!(!names(1).contains(&"fetch_weather".to_string()));
    assert!(
        names(2).contains(&"fetch_weather".to_string()),
        "{:?}",
        names(2)
    );
    // One list per set of tools, shared by the requests that offer it
    // (providers keep its JSON by that identity), a new one when it changes.
    let shared = |a: usize, b: usize| Arc::ptr_eq(&requests[a].tools, &requests[b].tools);
    assert!(shared(0, 1) && shared(2, 3), "an unchanged set is one list");
    assert!(!shared(1, 2), "the found tool made a new list");
    let resets = log
        .entries
        .iter()
        .filter(|e| {
            matches!(
                e,
                LogEntry::Trace {
                    trace: attest_protocol::TraceRecord::CacheReset { .. }
                }
            )
        })
        .count();
    assert_eq!(
        resets, 1,
        "exactly one declared reset: when fetch_weather joined"
    );
}

#[tokio::test]
async fn the_compaction_summary_stays_within_its_budget_over_a_long_run() {
    let mut responses: Vec<serde_json::Value> = (0..200)
        .map(|i| serde_json::json!({"tool_calls": [{"name": "grep", "arguments": {"pattern": format!("answer|{i}")}}]}))
        .collect();
    responses.push(serde_json::json!({"text": "done"}));
    let h = harness(&serde_json::Value::Array(responses).to_string(), false);
    let mut cfg = RunConfig::new(CompletionContract::new(ContractKind::Observe));
    cfg.max_steps = 250;
    cfg.compaction = attest_core::CompactionPolicy {
        history_budget_tokens: 3_000,
        keep_recent_tokens: 1_000,
    };
    let (outcome, log, _events) = run_cfg(&h, &cfg, "List").await;
    assert_eq!(outcome.state, TerminalState::Completed);
    let summaries: Vec<&String> = log
        .entries
        .iter()
        .filter_map(|e| match e {
            LogEntry::Item {
                item: TranscriptItem::Compaction { summary, .. },
            } => Some(summary),
            _ => None,
        })
        .collect();
    assert!(!summaries.is_empty());
    // Compaction is occasional, not every step, because the summary is bounded.
    assert!(
        summaries.len() < 40,
        "{} compactions in 201 steps",
        summaries.len()
    );
    for s in &summaries {
        assert!(
            attest_core::state::count_tokens(s) <= 800,
            "summary of {} tokens",
            attest_core::state::count_tokens(s)
        );
    }
    assert!(
        summaries
            .last()
            .unwrap()
            .contains("older entries are archived"),
        "{}",
        summaries.last().unwrap()
    );
}

#[tokio::test]
async fn an_identical_observe_call_is_not_executed_twice() {
    let h = harness(
        r#"[{"tool_calls":[{"id":"first","name":"read_file","arguments":{"path":"notes.txt"}}]},
            {"tool_calls":[{"id":"again","name":"read_file","arguments":{"path":"notes.txt"}}]},
            {"text":"42."}]"#,
        false,
    );
    let (outcome, _log, _events) = run(&h, ContractKind::Observe, "What does notes.txt say?").await;
    assert_eq!(outcome.state, TerminalState::Completed);
    let statuses: Vec<&str> = outcome.receipts.iter().map(|r| r.status.as_str()).collect();
    assert_eq!(statuses, ["ok", "skipped"]);
    let last = &h.provider.requests()[2];
    let note = last
        .history
        .iter()
        .find_map(|i| match &**i {
            TranscriptItem::ToolResult {
                call_id, output, ..
            } if call_id == "again" => Some(output.clone()),
            _ => None,
        })
        .unwrap();
    assert!(
        note.contains("ALREADY DONE") && note.contains("call first"),
        "{note}"
    );
}

#[tokio::test]
async fn repeating_a_call_whose_result_is_in_context_gets_a_repeat_reminder_then_stops() {
    let again = r#"{"tool_calls":[{"name":"read_file","arguments":{"path":"notes.txt"}}]}"#;
    let script = format!(
        "[{first}, {again}, {again}, {again}, {{\"text\":\"never\"}}]",
        first = r#"{"tool_calls":[{"id":"first","name":"read_file","arguments":{"path":"notes.txt"}}]}"#,
    );
    let h = harness(&script, false);
    let (outcome, _log, events) = run(&h, ContractKind::Observe, "What does notes.txt say?").await;
    // One real read; three repeats skipped; the first repeat brings the
    // reminder, the third ends the run.
    let statuses: Vec<&str> = outcome.receipts.iter().map(|r| r.status.as_str()).collect();
    assert_eq!(statuses, ["ok", "skipped", "skipped", "skipped"]);
    assert_eq!(outcome.state, TerminalState::Incomplete);
    assert_eq!(outcome.reason, TerminalReason::DoomLoop);
    let reminder = events
        .iter()
        .find_map(|e| match &e.body {
            EventBody::ReminderInjected { text, count, .. } => Some((text.clone(), *count)),
            _ => None,
        })
        .expect("a reminder");
    assert_eq!(reminder.1, 1);
    assert!(
        reminder
            .0
            .contains("called `read_file` again with the same arguments")
            && reminder.0.contains("already in the conversation above")
            && !reminder.0.contains("failed"),
        "{}",
        reminder.0
    );
    // The model saw it as the latest user-role message of the next request.
    let next = &h.provider.requests()[2];
    match next.history.last().map(|i| &**i) {
        Some(TranscriptItem::HarnessMessage { text, .. }) => assert_eq!(text, &reminder.0),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn repeats_within_one_response_do_not_end_the_run_before_the_reminder_is_seen() {
    let call = |id: &str| {
        format!(r#"{{"id":"{id}","name":"read_file","arguments":{{"path":"notes.txt"}}}}"#)
    };
    let script = format!(
        r#"[{{"tool_calls":[{}]}}, {{"tool_calls":[{}, {}, {}, {}]}}, {{"text":"notes.txt says 42."}}]"#,
        call("first"),
        call("a"),
        call("b"),
        call("c"),
        call("d"),
    );
    let h = harness(&script, false);
    let (outcome, _log, events) = run(&h, ContractKind::Observe, "What does notes.txt say?").await;
    assert_eq!(outcome.state, TerminalState::Completed, "{}", outcome.basis);
    let statuses: Vec<&str> = outcome.receipts.iter().map(|r| r.status.as_str()).collect();
    assert_eq!(statuses, ["ok", "skipped", "skipped", "skipped", "skipped"]);
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e.body, EventBody::ReminderInjected { .. }))
            .count(),
        1
    );
}

/// A provider that streams each response in scripted pieces. After the
/// first piece of a streamed call it waits until the observer has seen a
/// delta event, so the test knows deltas are shown while the call runs.
struct PieceProvider {
    turns: std::sync::Mutex<
        std::collections::VecDeque<(Vec<&'static str>, attest_providers::ModelResponse)>,
    >,
    seen_delta: Arc<std::sync::atomic::AtomicBool>,
    streamed_calls: std::sync::atomic::AtomicUsize,
}

fn response(
    text: &str,
    calls: Vec<attest_providers::ParsedCall>,
) -> attest_providers::ModelResponse {
    use attest_providers::FinishKind;
    attest_providers::ModelResponse {
        text: text.to_string(),
        reasoning: None,
        encrypted_reasoning: Vec::new(),
        finish: if calls.is_empty() {
            FinishKind::Stop
        } else {
            FinishKind::ToolUse
        },
        tool_calls: calls,
        raw_finish_reason: None,
        usage: Default::default(),
        raw: String::new(),
        parse_failures: Vec::new(),
        protocol_violation: None,
        call_source: attest_protocol::CallSource::Native,
    }
}

#[async_trait::async_trait]
impl ModelProvider for PieceProvider {
    fn name(&self) -> &str {
        "pieces"
    }
    fn api_family(&self) -> &str {
        "test"
    }
    fn model(&self) -> &str {
        "pieces"
    }
    async fn complete(
        &self,
        _request: &attest_providers::ModelRequest,
    ) -> Result<attest_providers::ModelResponse, attest_providers::ProviderError> {
        let (_, response) = self.turns.lock().unwrap().pop_front().expect("a turn");
        Ok(response)
    }
    async fn complete_streaming(
        &self,
        _request: &attest_providers::ModelRequest,
        sink: &attest_providers::TextSink,
    ) -> Result<attest_providers::ModelResponse, attest_providers::ProviderError> {
        use std::sync::atomic::Ordering;
        let (pieces, response) = self.turns.lock().unwrap().pop_front().expect("a turn");
        let first_call = self.streamed_calls.fetch_add(1, Ordering::SeqCst) == 0;
        for (i, piece) in pieces.iter().enumerate() {
            (sink.0)(piece);
            if i == 0 && first_call {
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                while !self.seen_delta.load(Ordering::SeqCst) {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "no delta event was shown while the call ran"
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
            }
            tokio::task::yield_now().await;
        }
        Ok(response)
    }
}

fn piece_engine(
    dir: &std::path::Path,
    seen_delta: Arc<std::sync::atomic::AtomicBool>,
) -> (Arc<PieceProvider>, Engine) {
    std::fs::write(dir.join("notes.txt"), "the answer is 42\n").unwrap();
    let call = attest_providers::ParsedCall {
        id: "c1".into(),
        name: "read_file".into(),
        arguments: r#"{"path":"notes.txt"}"#.into(),
    };
    let turns = vec![
        (
            vec![
                "Reading the ",
                "notes. Key: hunter2-",
                "streamed-secret ok\n<tool_call>\n{\"name\": \"read_file\", ",
                "\"arguments\": {\"path\": \"notes.txt\"}}\n</tool_call>",
            ],
            response("Reading the notes.", vec![call]),
        ),
        (
            vec!["notes.txt ", "says ", "42", "."],
            response("notes.txt says 42.", vec![]),
        ),
    ];
    let provider = Arc::new(PieceProvider {
        turns: std::sync::Mutex::new(turns.into()),
        seen_delta,
        streamed_calls: Default::default(),
    });
    let engine = Engine::new(
        provider.clone() as Arc<dyn ModelProvider>,
        Arc::new(ToolRegistry::new(builtin_tools(None)).unwrap()),
        ToolContext::new(Workspace::new(dir).unwrap()),
        Arc::new(StaticApprover {
            approve: false,
            decided_by: "test".into(),
        }),
    );
    (provider, engine)
}

fn delta_text(e: &Event) -> Option<(u32, &str)> {
    match &e.body {
        EventBody::Progress {
            step,
            text,
            delta: true,
        } => Some((*step, text.as_str())),
        _ => None,
    }
}

#[tokio::test]
async fn token_deltas_are_live_redacted_in_order_before_the_response_events_and_not_logged() {
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let seen_delta = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (_provider, engine) = piece_engine(dir.path(), Arc::clone(&seen_delta));
    let mut cfg = RunConfig::new(CompletionContract::new(ContractKind::Observe));
    cfg.stream_progress = true;
    cfg.redactor = attest_core::Redactor::new().with_secrets(["hunter2-streamed-secret"]);
    // A chat's text sink gets the same redacted text as the delta events
    // (SPEC F8: nothing the run shows carries a secret).
    let shown = Arc::new(std::sync::Mutex::new(String::new()));
    let into = Arc::clone(&shown);
    cfg.text_sink = Some(attest_providers::TextSink(Arc::new(move |t: &str| {
        into.lock().unwrap().push_str(t)
    })));
    let mut log = MemoryRunLog::default();
    let mut events = Vec::new();
    let seen = Arc::clone(&seen_delta);
    let mut observer = |e: &Event| {
        if delta_text(e).is_some() {
            seen.store(true, Ordering::SeqCst);
        }
        events.push(e.clone());
    };
    let outcome = engine
        .run(
            "What does notes.txt say?",
            &cfg,
            &mut log,
            &mut observer,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(outcome.state, TerminalState::Completed, "{}", outcome.basis);

    let kinds: Vec<String> = events
        .iter()
        .map(|e| match delta_text(e) {
            Some((step, _)) => format!("delta{step}"),
            None => e.body.type_name().to_string(),
        })
        .collect();
    let mut collapsed = kinds.clone();
    collapsed.dedup();
    assert_eq!(
        collapsed,
        [
            "run_started",
            "delta1",
            "progress",
            "tool_started",
            "tool_result",
            "delta2",
            "final",
            "done"
        ],
        "{kinds:?}"
    );
    let step_text = |step: u32| -> String {
        events
            .iter()
            .filter_map(delta_text)
            .filter(|(s, _)| *s == step)
            .map(|(_, t)| t)
            .collect()
    };
    let first = step_text(1);
    assert!(!first.contains("hunter2"), "{first}");
    assert_eq!(
        first,
        "Reading the notes. Key: [REDACTED] ok\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"notes.txt\"}}\n</tool_call>"
    );
    assert_eq!(step_text(2), "notes.txt says 42.");
    assert_eq!(
        shown.lock().unwrap().as_str(),
        "Reading the notes. Key: [REDACTED] ok\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"notes.txt\"}}\n</tool_call>notes.txt says 42."
    );

    // Deltas are live only: the log holds the other events, numbered
    // without gaps; a delta carries the seq of the event before it.
    let logged: Vec<&Event> = log
        .entries
        .iter()
        .filter_map(|e| match e {
            LogEntry::Event { event } => Some(event),
            _ => None,
        })
        .collect();
    assert!(logged.iter().all(|e| !e.body.is_delta()));
    assert_eq!(
        logged.len(),
        events.iter().filter(|e| !e.body.is_delta()).count()
    );
    for (i, e) in logged.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1);
    }
    let mut last_seq = 0;
    for e in &events {
        if e.body.is_delta() {
            assert_eq!(e.seq, last_seq, "{e:?}");
        } else {
            assert_eq!(e.seq, last_seq + 1, "{e:?}");
            last_seq = e.seq;
        }
    }
}

#[tokio::test]
async fn without_stream_progress_no_delta_events_are_emitted() {
    let dir = tempfile::tempdir().unwrap();
    let seen_delta = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (_provider, engine) = piece_engine(dir.path(), seen_delta);
    let mut cfg = RunConfig::new(CompletionContract::new(ContractKind::Observe));
    let shown = Arc::new(std::sync::Mutex::new(String::new()));
    let into = Arc::clone(&shown);
    cfg.text_sink = Some(attest_providers::TextSink(Arc::new(move |t: &str| {
        into.lock().unwrap().push_str(t)
    })));
    let mut log = MemoryRunLog::default();
    let mut events = Vec::new();
    let mut observer = |e: &Event| events.push(e.clone());
    let outcome = engine
        .run(
            "What does notes.txt say?",
            &cfg,
            &mut log,
            &mut observer,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(outcome.state, TerminalState::Completed);
    assert!(events.iter().all(|e| !e.body.is_delta()));
    assert!(shown.lock().unwrap().ends_with("notes.txt says 42."));
}

/// A request costs a reference per item, not a copy: the items a request
/// carried are the very allocations the next request carries (which is what
/// lets providers keep each item's wire form from one step to the next).
#[tokio::test]
async fn each_request_carries_the_same_item_allocations_as_the_one_before() {
    let responses: Vec<serde_json::Value> = (0..4)
        .map(|i| {
            serde_json::json!({
                "text": format!("Step {i}."),
                "tool_calls": [{"name": "grep", "arguments": {"pattern": format!("answer|{i}")}}]
            })
        })
        .chain([serde_json::json!({"text": "notes.txt says 42."})])
        .collect();
    let h = harness(&serde_json::Value::Array(responses).to_string(), false);
    let (outcome, _log, _events) = run(&h, ContractKind::Observe, "What does notes.txt say?").await;
    assert_eq!(outcome.state, TerminalState::Completed, "{outcome:?}");
    let requests = h.provider.requests();
    assert_eq!(requests.len(), 5);
    for pair in requests.windows(2) {
        let (before, after) = (&pair[0].history, &pair[1].history);
        // All but the state snapshot, which is written for each request.
        let logged = before.len()
            - usize::from(matches!(
                before.last().map(|i| &**i),
                Some(TranscriptItem::HarnessMessage {
                    kind: HarnessMessageKind::StateSnapshot,
                    ..
                })
            ));
        assert!(logged >= 1 && after.len() > logged);
        for (i, item) in before[..logged].iter().enumerate() {
            assert!(
                Arc::ptr_eq(item, &after[i]),
                "item {i} was copied: {item:?}"
            );
        }
        // Results travel without receipts.
        assert!(after.iter().all(|i| !matches!(
            &**i,
            TranscriptItem::ToolResult {
                receipt: Some(_),
                ..
            }
        )));
    }
}

/// Each request's trace says what its context is made of in bytes; the
/// figures come from sums kept as the run grows, so check them against the
/// request actually sent and the items logged before it.
#[tokio::test]
async fn request_traces_size_their_context_sources_exactly() {
    let mut responses: Vec<serde_json::Value> = (0..6)
        .map(|i| {
            serde_json::json!({
                "tool_calls": [{"name": "grep", "arguments": {"pattern": format!("answer|{i}")}}]
            })
        })
        .collect();
    responses.push(serde_json::json!({"text": "notes.txt says 42."}));
    let h = harness(&serde_json::Value::Array(responses).to_string(), false);
    let (outcome, log, _) = run(&h, ContractKind::Observe, "What does notes.txt say?").await;
    assert_eq!(outcome.state, TerminalState::Completed);
    let requests = h.provider.requests();
    let mut items: Vec<TranscriptItem> = Vec::new();
    let mut checked = 0;
    for entry in &log.entries {
        match entry {
            LogEntry::Item { item } => items.push(item.clone()),
            LogEntry::Trace {
                trace:
                    attest_protocol::TraceRecord::Request {
                        context_sources, ..
                    },
            } => {
                let bytes = |name: &str| {
                    let s = context_sources.iter().find(|s| s.name == name).unwrap();
                    (s.items, s.bytes)
                };
                let sent = &requests[checked];
                let tools_json = serde_json::to_vec(&sent.tools).unwrap();
                assert_eq!(bytes("tools"), (sent.tools.len(), tools_json.len()));
                let run_json = serde_json::to_string(&items).unwrap();
                assert_eq!(bytes("run_transcript"), (items.len(), run_json.len()));
                assert_eq!(bytes("session_history"), (0, 2));
                checked += 1;
            }
            _ => {}
        }
    }
    assert_eq!(checked, requests.len());
    assert_eq!(checked, 7);
}

/// A long request: while the request carries the user's message whole, the
/// state tail repeats only its start (and stays within its 800-token
/// budget); once a compaction has summarized the message away, the tail
/// shows it whole again.
#[tokio::test]
async fn the_tail_cuts_a_long_goal_only_while_the_request_carries_it() {
    let prompt = format!(
        "What does notes.txt say? {}",
        "Keep the answer short, cite the file, and do not guess. ".repeat(80)
    );
    let script = r#"[{"tool_calls":[{"name":"read_file","arguments":{"path":"notes.txt"}}]},
                     {"text":"notes.txt says the answer is 42."}]"#;
    let tail_of = |request: &attest_providers::ModelRequest| -> String {
        request
            .history
            .iter()
            .find_map(|item| match &**item {
                TranscriptItem::HarnessMessage {
                    kind: HarnessMessageKind::StateSnapshot,
                    text,
                } => Some(text.clone()),
                _ => None,
            })
            .expect("a state tail")
    };

    let h = harness(script, false);
    let (outcome, _, _) = run(&h, ContractKind::Observe, &prompt).await;
    assert_eq!(outcome.state, TerminalState::Completed);
    let sent = &h.provider.requests()[1];
    let first_user = sent.history.iter().find_map(|item| match &**item {
        TranscriptItem::UserInput { text } => Some(text.clone()),
        _ => None,
    });
    assert_eq!(first_user.as_deref(), Some(prompt.as_str()));
    let tail = tail_of(sent);
    assert!(tail.contains(attest_core::state::GOAL_CUT_NOTE), "{tail}");
    assert!(tail.contains("Goal: What does notes.txt say? Keep the answer short"));
    assert!(attest_core::state::count_tokens(&tail) <= 800);

    let h = harness(script, false);
    let mut cfg = RunConfig::new(CompletionContract::new(ContractKind::Observe));
    cfg.stream = false;
    cfg.prior_history = vec![
        TranscriptItem::UserInput {
            text: "Hello.".into(),
        },
        TranscriptItem::AssistantOutput {
            text: "Hello! What can I do?".into(),
            reasoning: None,
            encrypted_reasoning: Vec::new(),
            phase: attest_protocol::AssistantPhase::Answer,
        },
    ];
    cfg.force_compaction = true;
    let (outcome, _, events) = run_cfg(&h, &cfg, &prompt).await;
    assert_eq!(outcome.state, TerminalState::Completed);
    assert!(events
        .iter()
        .any(|e| matches!(e.body, EventBody::Compacted { .. })));
    let tail = tail_of(&h.provider.requests()[1]);
    assert!(!tail.contains(attest_core::state::GOAL_CUT_NOTE), "{tail}");
    assert!(tail.contains(&format!("Goal: {}", prompt.trim())));
}
