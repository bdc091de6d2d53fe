//! Request bodies (snapshots) and response parsing for both wire formats.

use attest_protocol::{
    AssistantPhase, EffectClass, HarnessMessageKind, ReceiptStatus, ToolSpec, TranscriptItem,
};
use attest_providers::{
    anthropic, openai, shared_history, FinishKind, ModelRequest, ProviderError,
};
use serde_json::json;
use std::sync::Arc;

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec {
            name: "read_file".into(),
            description: "Read a UTF-8 text file.".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
            effect: EffectClass::Observe,
        },
        ToolSpec {
            name: "search".into(),
            description: "Search the workspace.".into(),
            parameters: json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),
            effect: EffectClass::Observe,
        },
    ]
}

fn history() -> Vec<TranscriptItem> {
    vec![
        TranscriptItem::UserInput {
            text: "What port does the server use?".into(),
        },
        TranscriptItem::AssistantOutput {
            text: "Let me look at the config and search for the port.".into(),
            reasoning: Some("The config is probably in config.toml.".into()),
            encrypted_reasoning: Vec::new(),
            phase: AssistantPhase::Commentary,
        },
        TranscriptItem::ToolCall {
            call_id: "call_1".into(),
            name: "read_file".into(),
            arguments: r#"{"path":"config.toml"}"#.into(),
        },
        TranscriptItem::ToolCall {
            call_id: "call_2".into(),
            name: "search".into(),
            arguments: r#"{"query": "port"}"#.into(),
        },
        // Results arrive out of call order; Anthropic puts them back in order.
        TranscriptItem::ToolResult {
            call_id: "call_2".into(),
            name: "search".into(),
            status: ReceiptStatus::Error,
            output: "search index unavailable".into(),
            receipt: None,
        },
        TranscriptItem::ToolResult {
            call_id: "call_1".into(),
            name: "read_file".into(),
            status: ReceiptStatus::Ok,
            output: "[server]\nport = 8080\n".into(),
            receipt: None,
        },
        TranscriptItem::HarnessMessage {
            kind: HarnessMessageKind::Reminder,
            text: "Answer from the receipts you have.".into(),
        },
        TranscriptItem::AssistantOutput {
            text: "The server listens on port 8080.".into(),
            reasoning: None,
            encrypted_reasoning: Vec::new(),
            phase: AssistantPhase::Answer,
        },
    ]
}

fn request(stream: bool) -> ModelRequest {
    ModelRequest {
        system: "You are attest.".into(),
        tools: tools().into(),
        history: shared_history(history()),
        stream,
        max_tokens: 1024,
        temperature: Some(0.2),
        seed: None,
        stop: vec![],
        cache_key: None,
    }
}

#[test]
fn openai_body_snapshots() {
    insta::assert_json_snapshot!(
        "openai_body",
        openai::build_body(&request(false), "gpt-test")
    );
    insta::assert_json_snapshot!(
        "openai_body_stream",
        openai::build_body(&request(true), "gpt-test")
    );
}

#[test]
fn the_openai_body_as_sent_is_the_sorted_json_of_its_value_form() {
    // `body_json` writes borrowed structs whose fields must follow
    // `serde_json::Map`'s sorted key order; any drift changes the bytes
    // (and so the providers' cached prefix) and fails here.
    let mut variants = vec![request(false), request(true)];
    let mut full = request(true);
    full.seed = Some(7);
    full.stop = vec!["Observation:".into()];
    full.cache_key = Some("attest-session-1".into());
    full.temperature = None;
    full.history.push(Arc::new(TranscriptItem::ToolCall {
        call_id: "call_3".into(),
        name: "read_file".into(),
        arguments: "{\"path\":\"a \\\"quoted\\\" name\"}".into(),
    }));
    variants.push(full);
    let mut bare = request(false);
    bare.tools = Arc::default();
    bare.history.truncate(1);
    variants.push(bare);
    for req in &variants {
        let sent = openai::body_json(req, "gpt-test");
        assert_eq!(sent, openai::build_body(req, "gpt-test").to_string());
        let value: serde_json::Value = serde_json::from_str(&sent).unwrap();
        assert_eq!(value, openai::build_body(req, "gpt-test"));
    }
}

#[test]
fn the_anthropic_body_as_sent_is_the_sorted_json_of_its_value_form() {
    let mut variants = vec![request(false), request(true)];
    let mut cached = request(true);
    cached.cache_key = Some("attest-session-1".into());
    cached.stop = vec!["Observation:".into()];
    cached
        .history
        .push(Arc::new(TranscriptItem::HarnessMessage {
            kind: HarnessMessageKind::StateSnapshot,
            text: "[attest] state".into(),
        }));
    variants.push(cached.clone());
    // No system prompt: the breakpoint moves to the last tool.
    let mut no_system = cached;
    no_system.system.clear();
    variants.push(no_system);
    for req in &variants {
        let sent = anthropic::body_json(req, "claude-test");
        assert_eq!(sent, anthropic::build_body(req, "claude-test").to_string());
    }
    assert!(anthropic::body_json(&variants[3], "c").contains("\"cache_control\""));
}

/// Requests with every optional field set, to snapshot the fields the
/// plain snapshots leave out (cache hints, seed, stop, no temperature).
fn full_request(system: &str) -> ModelRequest {
    let mut req = request(true);
    req.system = system.into();
    req.seed = Some(7);
    req.stop = vec!["Observation:".into()];
    req.cache_key = Some("attest-session-1".into());
    req.temperature = None;
    req.history.push(Arc::new(TranscriptItem::HarnessMessage {
        kind: HarnessMessageKind::StateSnapshot,
        text: "[attest] state".into(),
    }));
    req
}

#[test]
fn full_body_snapshots() {
    insta::assert_snapshot!(
        "openai_body_full",
        openai::body_json(&full_request("You are attest."), "gpt-test")
    );
    insta::assert_snapshot!(
        "anthropic_body_full",
        anthropic::body_json(&full_request("You are attest."), "claude-test")
    );
    insta::assert_snapshot!(
        "anthropic_body_full_no_system",
        anthropic::body_json(&full_request(""), "claude-test")
    );
}

#[test]
fn anthropic_body_snapshots() {
    insta::assert_json_snapshot!(
        "anthropic_body",
        anthropic::build_body(&request(false), "claude-test")
    );
    insta::assert_json_snapshot!(
        "anthropic_body_stream",
        anthropic::build_body(&request(true), "claude-test")
    );
}

#[test]
fn bodies_are_byte_identical_and_prefix_stable() {
    let short = ModelRequest {
        history: shared_history(history()[..1].to_vec()),
        ..request(false)
    };
    for build in [
        openai::build_body as fn(&ModelRequest, &str) -> serde_json::Value,
        anthropic::build_body,
    ] {
        let a = build(&request(false), "m").to_string();
        let b = build(&request(false), "m").to_string();
        assert_eq!(a, b);
        let full = build(&request(false), "m");
        let small = build(&short, "m");
        assert_eq!(full["tools"].to_string(), small["tools"].to_string());
        assert_eq!(full["system"].to_string(), small["system"].to_string());
        assert_eq!(
            full["messages"][0].to_string(),
            small["messages"][0].to_string()
        );
    }
}

#[test]
fn openai_body_without_tools_omits_tool_choice() {
    let req = ModelRequest {
        tools: vec![].into(),
        stop: vec!["END".into()],
        temperature: None,
        seed: None,
        ..request(false)
    };
    let body = openai::build_body(&req, "m");
    assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
    assert!(body.get("temperature").is_none());
    assert!(body.get("seed").is_none());
    assert_eq!(body["stop"], json!(["END"]));
    // A seed, when the run has one, goes with every request.
    let seeded = ModelRequest {
        seed: Some(7),
        ..request(false)
    };
    assert_eq!(openai::build_body(&seeded, "m")["seed"], json!(7));
}

#[test]
fn openai_calls_without_commentary_get_null_content() {
    let req = ModelRequest {
        history: shared_history(history()[2..6].to_vec()),
        ..request(false)
    };
    let body = openai::build_body(&req, "m");
    let msg = &body["messages"][1];
    assert_eq!(msg["role"], "assistant");
    assert_eq!(msg["content"], serde_json::Value::Null);
    assert_eq!(
        msg["tool_calls"][1]["function"]["arguments"],
        r#"{"query": "port"}"#
    );
}

#[test]
fn anthropic_alternates_roles_and_defaults_bad_arguments() {
    let mut h = history();
    h[3] = TranscriptItem::ToolCall {
        call_id: "call_2".into(),
        name: "search".into(),
        arguments: "{not json".into(),
    };
    h.insert(
        0,
        TranscriptItem::UserInput {
            text: "first".into(),
        },
    );
    let req = ModelRequest {
        history: shared_history(h),
        stop: vec!["END".into()],
        ..request(false)
    };
    let body = anthropic::build_body(&req, "m");
    let messages = body["messages"].as_array().unwrap();
    for pair in messages.windows(2) {
        assert_ne!(pair[0]["role"], pair[1]["role"]);
    }
    assert_eq!(messages[0]["content"].as_array().unwrap().len(), 2);
    assert_eq!(messages[1]["content"][2]["input"], json!({}));
    assert_eq!(body["stop_sequences"], json!(["END"]));
}

// ---- OpenAI parsing ----

#[test]
fn openai_parses_a_tool_call_response() {
    let body = json!({
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null, "reasoning_content": "think",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}},
                {"type": "function", "function": {"name": "search", "arguments": "{}"}},
                {"id": "c3", "type": "function", "function": {"arguments": "{}"}}
            ]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5}
    })
    .to_string();
    let r = openai::parse_response(&body).unwrap();
    assert_eq!(r.text, "");
    assert_eq!(r.reasoning.as_deref(), Some("think"));
    assert_eq!(r.tool_calls.len(), 2);
    assert_eq!(r.tool_calls[0].arguments, r#"{"path":"a"}"#);
    assert_eq!(r.tool_calls[1].id, "call_1");
    assert_eq!(r.parse_failures.len(), 1);
    assert_eq!(r.finish, FinishKind::ToolUse);
    assert_eq!(r.raw_finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (10, 5));
    assert_eq!(r.raw, body);
}

#[test]
fn openai_finish_reasons() {
    for (raw, kind) in [
        ("stop", FinishKind::Stop),
        ("length", FinishKind::Length),
        ("content_filter", FinishKind::ContentFilter),
    ] {
        let body =
            json!({"choices": [{"message": {"content": "hi"}, "finish_reason": raw}]}).to_string();
        let r = openai::parse_response(&body).unwrap();
        assert_eq!((r.finish, r.text.as_str()), (kind, "hi"));
    }
}

#[test]
fn openai_bad_bodies_are_decode_errors() {
    for body in [
        "not json",
        "{}",
        r#"{"choices": []}"#,
        r#"{"error": {"message": "quota exceeded", "type": "insufficient_quota"}}"#,
    ] {
        let e = openai::parse_response(body).unwrap_err();
        assert!(matches!(e, ProviderError::Decode(_)), "{body}: {e:?}");
    }
    let e = openai::parse_response(r#"{"error": {"message": "quota exceeded"}}"#).unwrap_err();
    assert!(e.to_string().contains("quota exceeded"));
}

fn chunk(delta: serde_json::Value, finish: Option<&str>) -> String {
    json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}).to_string()
}

#[test]
fn openai_stream_aggregates_fragments_by_index() {
    let mut acc = openai::StreamAccumulator::new();
    let chunks = [
        chunk(json!({"role": "assistant", "content": "Let me "}), None),
        chunk(
            json!({"content": "check.", "reasoning_content": "hmm"}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "read_file", "arguments": "{\"pa"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "search", "arguments": ""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"name": "read_file", "arguments": "th\":\"x\"}"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 1, "function": {"arguments": "{\"query\":\"q\"}"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 2, "function": {"arguments": "{}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
        json!({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}).to_string(),
        "[DONE]".to_string(),
    ];
    for c in &chunks {
        acc.push(c).unwrap();
    }
    assert!(acc.is_done());
    let r = acc.finish().unwrap();
    assert_eq!(r.text, "Let me check.");
    assert_eq!(r.reasoning.as_deref(), Some("hmm"));
    assert_eq!(r.tool_calls.len(), 2);
    assert_eq!(
        (r.tool_calls[0].id.as_str(), r.tool_calls[0].name.as_str()),
        ("a", "read_file")
    );
    assert_eq!(r.tool_calls[0].arguments, r#"{"path":"x"}"#);
    assert_eq!(r.tool_calls[1].arguments, r#"{"query":"q"}"#);
    assert_eq!(r.parse_failures.len(), 1, "index 2 has no name");
    assert_eq!(r.finish, FinishKind::ToolUse);
    assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (7, 3));
    assert_eq!(r.raw, chunks.join("\n"));
}

#[test]
fn openai_stream_without_done_is_incomplete() {
    let mut acc = openai::StreamAccumulator::new();
    acc.push(&chunk(json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": "{\"x\":"}}]}), None))
        .unwrap();
    acc.push(&chunk(json!({}), Some("tool_calls"))).unwrap();
    let e = acc.finish().unwrap_err();
    assert!(matches!(e, ProviderError::IncompleteStream(_)), "{e:?}");
    assert!(e.is_retryable());
}

#[test]
fn openai_stream_error_chunk_and_garbage() {
    let mut acc = openai::StreamAccumulator::new();
    let e = acc
        .push(r#"{"error": {"message": "overloaded"}}"#)
        .unwrap_err();
    assert!(matches!(e, ProviderError::IncompleteStream(_)));
    let e = openai::StreamAccumulator::new().push("{oops").unwrap_err();
    assert!(matches!(e, ProviderError::Decode(_)));
}

// ---- Anthropic parsing ----

#[test]
fn anthropic_parses_a_tool_use_response() {
    let body = json!({
        "type": "message", "role": "assistant", "stop_reason": "tool_use",
        "content": [
            {"type": "thinking", "thinking": "plan", "signature": "s"},
            {"type": "text", "text": "Reading "},
            {"type": "text", "text": "it."},
            {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}},
            {"type": "tool_use", "id": "toolu_2", "input": {}}
        ],
        "usage": {"input_tokens": 12, "output_tokens": 4, "cache_read_input_tokens": 3}
    })
    .to_string();
    let r = anthropic::parse_response(&body).unwrap();
    assert_eq!(r.text, "Reading it.");
    assert_eq!(r.reasoning.as_deref(), Some("plan"));
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].arguments, r#"{"path":"a"}"#);
    assert_eq!(r.parse_failures.len(), 1);
    assert_eq!(r.finish, FinishKind::ToolUse);
    assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (15, 4));
}

#[test]
fn anthropic_stop_reasons_and_errors() {
    for (raw, kind) in [
        ("end_turn", FinishKind::Stop),
        ("stop_sequence", FinishKind::Stop),
        ("max_tokens", FinishKind::Length),
        ("refusal", FinishKind::ContentFilter),
    ] {
        let body = json!({"content": [], "stop_reason": raw}).to_string();
        assert_eq!(anthropic::parse_response(&body).unwrap().finish, kind);
    }
    let e = anthropic::parse_response(
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    )
    .unwrap_err();
    assert!(
        matches!(e, ProviderError::Decode(ref m) if m.contains("Overloaded")),
        "{e:?}"
    );
    assert!(matches!(
        anthropic::parse_response("[]"),
        Err(ProviderError::Decode(_))
    ));
}

fn anthropic_events(stop: bool) -> Vec<String> {
    let mut ev = vec![
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 20, "output_tokens": 1}}}),
        json!({"type": "ping"}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "plan"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Let me "}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "read."}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}}),
        json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"pa"}}),
        json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "th\":\"x\"}"}}),
        json!({"type": "content_block_stop", "index": 2}),
        json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "t2", "name": "list", "input": {}}}),
        json!({"type": "content_block_stop", "index": 3}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}}),
    ];
    if stop {
        ev.push(json!({"type": "message_stop"}));
    }
    ev.into_iter().map(|v| v.to_string()).collect()
}

#[test]
fn anthropic_stream_assembles_blocks() {
    let mut acc = anthropic::StreamAccumulator::new();
    let events = anthropic_events(true);
    for e in &events {
        acc.push(e).unwrap();
    }
    let r = acc.finish().unwrap();
    assert_eq!(r.text, "Let me read.");
    assert_eq!(r.reasoning.as_deref(), Some("plan"));
    assert_eq!(r.tool_calls.len(), 2);
    assert_eq!(r.tool_calls[0].arguments, r#"{"path":"x"}"#);
    assert_eq!(
        (
            r.tool_calls[1].name.as_str(),
            r.tool_calls[1].arguments.as_str()
        ),
        ("list", "{}")
    );
    assert_eq!(r.finish, FinishKind::ToolUse);
    assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (20, 30));
    assert_eq!(r.raw, events.join("\n"));
}

#[test]
fn anthropic_stream_without_stop_is_incomplete() {
    let mut acc = anthropic::StreamAccumulator::new();
    for e in &anthropic_events(false) {
        acc.push(e).unwrap();
    }
    assert!(matches!(
        acc.finish(),
        Err(ProviderError::IncompleteStream(_))
    ));
}

#[test]
fn anthropic_unfinished_tool_block_is_never_a_call() {
    let mut acc = anthropic::StreamAccumulator::new();
    let events = anthropic_events(true);
    // Drop the content_block_stop of the first tool_use block.
    let stop_of_block_2 = json!({"type": "content_block_stop", "index": 2}).to_string();
    for e in events.iter().filter(|e| **e != stop_of_block_2) {
        acc.push(e).unwrap();
    }
    let r = acc.finish().unwrap();
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].id, "t2");
    assert_eq!(r.parse_failures.len(), 1);
}

#[test]
fn anthropic_stream_error_event() {
    let mut acc = anthropic::StreamAccumulator::new();
    let e = acc
        .push(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#)
        .unwrap_err();
    assert!(matches!(e, ProviderError::IncompleteStream(_)) && e.is_retryable());
    let e = acc
        .push(r#"{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}"#)
        .unwrap_err();
    assert!(matches!(e, ProviderError::Decode(_)));
}
