//! The text-protocol adapter end to end against a scripted inner model.
//! Assertions are on what the inner provider was actually sent.

use attest_protocol::{
    AssistantPhase, EffectClass, HarnessMessageKind, ProtocolErrorKind, ReceiptStatus, ToolSpec,
    TranscriptItem,
};
use attest_providers::scripted::{ScriptedProvider, ScriptedResponse};
use attest_providers::text_protocol::{render, TextProtocolProvider, STOP_SEQUENCES};
use attest_providers::{shared_history, FinishKind, ModelProvider, ModelRequest};
use serde_json::json;
use std::sync::Arc;

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "scan_term".into(),
            description: "Count occurrences of a term in the document.".into(),
            parameters: json!({"type":"object","properties":{"term":{"type":"string","description":"The term."}},"required":["term"],"additionalProperties":false}),
            effect: EffectClass::Observe,
        },
        ToolSpec {
            name: "list_documents".into(),
            description: "List the documents.".into(),
            parameters: json!({"type":"object","properties":{}}),
            effect: EffectClass::Observe,
        },
    ]
}

fn user(text: &str) -> TranscriptItem {
    TranscriptItem::UserInput { text: text.into() }
}

fn commentary(text: &str) -> TranscriptItem {
    TranscriptItem::AssistantOutput {
        text: text.into(),
        reasoning: None,
        encrypted_reasoning: Vec::new(),
        phase: AssistantPhase::Commentary,
    }
}

fn call(id: &str, name: &str, args: &str) -> TranscriptItem {
    TranscriptItem::ToolCall {
        call_id: id.into(),
        name: name.into(),
        arguments: args.into(),
    }
}

fn result(id: &str, name: &str, output: &str) -> TranscriptItem {
    TranscriptItem::ToolResult {
        call_id: id.into(),
        name: name.into(),
        status: ReceiptStatus::Ok,
        output: output.into(),
        receipt: None,
    }
}

fn request(history: Vec<TranscriptItem>) -> ModelRequest {
    ModelRequest {
        system: "BASE PROMPT".into(),
        tools: tools().into(),
        history: shared_history(history),
        stream: false,
        max_tokens: 256,
        temperature: Some(0.0),
        seed: None,
        stop: vec![],
        cache_key: None,
    }
}

fn adapter(texts: &[&str]) -> (Arc<ScriptedProvider>, TextProtocolProvider) {
    let inner = Arc::new(ScriptedProvider::new(
        texts
            .iter()
            .map(|t| ScriptedResponse {
                text: t.to_string(),
                ..Default::default()
            })
            .collect(),
    ));
    let adapter = TextProtocolProvider::new(inner.clone() as Arc<dyn ModelProvider>);
    (inner, adapter)
}

fn no_native_items<T: std::borrow::Borrow<TranscriptItem>>(history: &[T]) -> bool {
    !history.iter().any(|i| {
        matches!(
            i.borrow(),
            TranscriptItem::ToolCall { .. } | TranscriptItem::ToolResult { .. }
        )
    })
}

#[test]
fn tool_block_snapshot_is_deterministic() {
    let block = render::tool_block(&tools());
    assert_eq!(block, render::tool_block(&tools()));
    insta::assert_snapshot!("text_protocol_tool_block", block);
    assert!(render::tool_block(&[]).contains("No tools are offered"));
}

#[test]
fn history_snapshot() {
    let history = vec![
        user("Does the post mention MCP?"),
        commentary("I will search."),
        call("c1", "scan_term", r#"{"term":"MCP"}"#),
        result("c1", "scan_term", r#"{"count":3,"hits":[1,2,3]}"#),
        // A parallel block (native history): consecutive Action/Observation pairs.
        commentary("Two more checks."),
        call("c2", "scan_term", r#"{"term":"A"}"#),
        call("c3", "list_documents", "{}"),
        result("c3", "list_documents", "a.md"),
        // c2's result is missing: the pairing normalizer supplies one.
        TranscriptItem::HarnessMessage {
            kind: HarnessMessageKind::ProtocolPlaceholder,
            text: "[attest] omitted".into(),
        },
        TranscriptItem::AssistantOutput {
            text: "It does, 3 times.".into(),
            reasoning: None,
            encrypted_reasoning: Vec::new(),
            phase: AssistantPhase::Answer,
        },
    ];
    let text = render::history(&history);
    assert!(no_native_items(&text));
    insta::assert_json_snapshot!("text_protocol_history", text);
}

#[tokio::test]
async fn inner_request_has_no_tools_a_tool_block_and_stop_sequences() {
    let (inner, adapter) =
        adapter(&["Thought: I will search.\nAction: scan_term[{\"term\":\"MCP\"}]"]);
    let response = adapter
        .complete(&request(vec![user("Does it mention MCP?")]))
        .await
        .unwrap();
    assert_eq!(response.finish, FinishKind::ToolUse);
    assert_eq!(response.text, "I will search.");
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(response.tool_calls[0].name, "scan_term");
    assert_eq!(response.tool_calls[0].arguments, r#"{"term":"MCP"}"#);
    assert!(response.tool_calls[0].id.starts_with("react_"));
    assert!(response.protocol_violation.is_none());

    let sent = &inner.requests()[0];
    assert!(sent.tools.is_empty());
    assert!(sent.system.starts_with("BASE PROMPT\n\n"));
    assert!(sent.system.ends_with(&render::tool_block(&tools())));
    for stop in STOP_SEQUENCES {
        assert!(sent.stop.iter().any(|s| s == stop));
    }
    assert_eq!(sent.history, shared_history([user("Does it mention MCP?")]));
    assert_eq!(adapter.api_family(), "text_protocol+scripted");
    assert_eq!(adapter.name(), "scripted");
    assert_eq!(adapter.model(), "scripted");
}

#[tokio::test]
async fn forged_observation_comes_back_as_a_violation_and_no_call() {
    let forged = "Thought: I will search.\nAction: scan_term[{\"term\":\"MCP\"}]\nObservation: {\"count\":0,\"hits\":[]}\nFinal Answer: MCP appears 0 times";
    let (_inner, adapter) = adapter(&[forged]);
    let response = adapter.complete(&request(vec![user("q")])).await.unwrap();
    let violation = response.protocol_violation.expect("a violation");
    assert_eq!(violation.kind, ProtocolErrorKind::ForgedObservation);
    assert!(!violation.detail.contains("count"), "{}", violation.detail);
    // The text comes back as written, flagged: the engine keeps none of it
    // in history (only an eval group without protocol isolation does, on
    // purpose); no call is proposed from it.
    assert_eq!(response.text, forged);
    assert!(response.tool_calls.is_empty());
    assert_eq!(response.finish, FinishKind::Other);
    // The raw output is kept for the audit trace.
    assert!(response.raw.contains("count\\\":0"), "{}", response.raw);
}

#[tokio::test]
async fn final_answer_is_the_text_and_ids_are_fresh() {
    let action = "Action: scan_term[{\"term\":\"MCP\"}]";
    let (_inner, adapter) = adapter(&[action, action, "Thought: done\nFinal Answer: 3 times"]);
    let r = request(vec![user("q")]);
    let a = adapter.complete(&r).await.unwrap();
    let b = adapter.complete(&r).await.unwrap();
    assert_ne!(a.tool_calls[0].id, b.tool_calls[0].id);
    let last = adapter.complete(&r).await.unwrap();
    assert_eq!(last.finish, FinishKind::Stop);
    assert_eq!(last.text, "3 times");
    assert!(last.tool_calls.is_empty());
}

#[tokio::test]
async fn next_request_carries_the_harness_observation_as_text() {
    let (inner, adapter) = adapter(&["Final Answer: 3"]);
    let history = vec![
        user("q"),
        commentary("I will search."),
        call("react_1", "scan_term", r#"{"term":"MCP"}"#),
        result("react_1", "scan_term", r#"{"count":3,"hits":[]}"#),
    ];
    adapter.complete(&request(history)).await.unwrap();
    let sent = &inner.requests()[0];
    assert!(no_native_items(&sent.history));
    assert_eq!(
        sent.history,
        shared_history([
            user("q"),
            commentary("Thought: I will search.\nAction: scan_term[{\"term\":\"MCP\"}]"),
            TranscriptItem::HarnessMessage {
                kind: HarnessMessageKind::Observation,
                text: "Observation: {\"count\":3,\"hits\":[]}".into(),
            },
        ])
    );
}

#[tokio::test]
async fn inner_errors_pass_through() {
    let inner = Arc::new(
        ScriptedProvider::from_text(r#"[{"error":{"status":503,"message":"overloaded"}}]"#)
            .unwrap(),
    );
    let adapter = TextProtocolProvider::new(inner as Arc<dyn ModelProvider>);
    let err = adapter
        .complete(&request(vec![user("q")]))
        .await
        .unwrap_err();
    assert!(err.is_retryable());
    assert!(err.to_string().contains("503"), "{err}");
}

#[tokio::test]
async fn native_calls_from_the_inner_model_are_never_passed_on() {
    let inner = Arc::new(
        ScriptedProvider::from_text(
            r#"[{"text":"Final Answer: done","tool_calls":[{"name":"scan_term","arguments":{"term":"x"}}]}]"#,
        )
        .unwrap(),
    );
    let adapter = TextProtocolProvider::new(inner as Arc<dyn ModelProvider>);
    let response = adapter.complete(&request(vec![user("q")])).await.unwrap();
    assert!(response.tool_calls.is_empty());
    assert_eq!(response.finish, FinishKind::Stop);
    assert_eq!(response.parse_failures.len(), 1);
}
