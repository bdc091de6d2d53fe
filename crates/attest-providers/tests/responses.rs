//! The OpenAI Responses wire format: request bodies (snapshots), response
//! and stream parsing, and the HTTP provider speaking it.

use attest_protocol::{
    AssistantPhase, EffectClass, HarnessMessageKind, ReceiptStatus, ToolSpec, TranscriptItem,
};
use attest_providers::http::{HttpProvider, HttpProviderConfig, WireFormat};
use attest_providers::responses::{self, ResponsesOptions, StreamAccumulator};
use attest_providers::{
    shared_history, FinishKind, ModelProvider, ModelRequest, ModelResponse, ProviderError,
};
use serde_json::{json, Value};
use std::time::Duration;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const KEEP: ResponsesOptions = ResponsesOptions {
    encrypted_reasoning: true,
};
const STRIP: ResponsesOptions = ResponsesOptions {
    encrypted_reasoning: false,
};

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "read_file".into(),
        description: "Read a UTF-8 text file.".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        effect: EffectClass::Observe,
    }]
}

fn history() -> Vec<TranscriptItem> {
    vec![
        TranscriptItem::UserInput {
            text: "What port does the server use?".into(),
        },
        TranscriptItem::AssistantOutput {
            text: "Let me read the config.".into(),
            reasoning: Some("The config is probably in config.toml.".into()),
            encrypted_reasoning: vec!["gAAAA-first".into()],
            phase: AssistantPhase::Commentary,
        },
        TranscriptItem::ToolCall {
            call_id: "call_1".into(),
            name: "read_file".into(),
            arguments: r#"{"path":"config.toml"}"#.into(),
        },
        TranscriptItem::ToolResult {
            call_id: "call_1".into(),
            name: "read_file".into(),
            status: ReceiptStatus::Ok,
            output: "[server]\nport = 8080\n".into(),
            receipt: None,
        },
        // Reasoning with no text, right before its call.
        TranscriptItem::AssistantOutput {
            text: String::new(),
            reasoning: None,
            encrypted_reasoning: vec!["gAAAA-second".into()],
            phase: AssistantPhase::Commentary,
        },
        TranscriptItem::ToolCall {
            call_id: "call_2".into(),
            name: "read_file".into(),
            arguments: r#"{"path":"Cargo.toml"}"#.into(),
        },
        TranscriptItem::ToolResult {
            call_id: "call_2".into(),
            name: "read_file".into(),
            status: ReceiptStatus::Error,
            output: "[attest] read_file failed: not found".into(),
            receipt: None,
        },
        TranscriptItem::HarnessMessage {
            kind: HarnessMessageKind::Corrective,
            text: "Answer from the receipts you have.".into(),
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
        stop: vec!["Observation:".into()],
        cache_key: None,
    }
}

fn input_types(body: &Value) -> Vec<String> {
    body["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn body_snapshots() {
    insta::assert_json_snapshot!(
        "responses_body",
        responses::build_body(&request(false), "gpt-test", STRIP)
    );
    insta::assert_json_snapshot!(
        "responses_body_stream_keep_reasoning",
        responses::build_body(&request(true), "gpt-test", KEEP)
    );
}

#[test]
fn calls_and_outputs_are_paired_by_call_id_and_store_is_off() {
    let body = responses::build_body(&request(false), "m", STRIP);
    assert_eq!(body["store"], false);
    assert!(body.get("stream").is_none());
    assert!(body.get("stop").is_none(), "no stop sequences in this API");
    let input = body["input"].as_array().unwrap();
    let calls: Vec<&Value> = input
        .iter()
        .filter(|i| i["type"] == "function_call")
        .collect();
    let outputs: Vec<&Value> = input
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .collect();
    assert_eq!(calls.len(), 2);
    for (c, o) in calls.iter().zip(&outputs) {
        assert_eq!(c["call_id"], o["call_id"]);
        assert!(c.get("id").is_none(), "no item ids with store: false");
    }
    assert_eq!(
        body["tools"][0],
        json!({"type": "function", "name": "read_file", "description": "Read a UTF-8 text file.",
               "parameters": tools()[0].parameters, "strict": false})
    );
    // The corrective message goes in as user input, last.
    assert_eq!(input.last().unwrap()["role"], "user");
    assert_eq!(
        input.last().unwrap()["content"][0]["text"],
        "Answer from the receipts you have."
    );
}

#[test]
fn encrypted_reasoning_goes_back_only_when_kept() {
    let strip = responses::build_body(&request(false), "m", STRIP);
    assert!(strip.get("include").is_none());
    assert!(!input_types(&strip).contains(&"reasoning".to_string()));
    assert!(!strip.to_string().contains("gAAAA"));
    // Reasoning text is never sent back, whatever the policy.
    assert!(!strip.to_string().contains("probably in config.toml"));

    let keep = responses::build_body(&request(false), "m", KEEP);
    assert_eq!(keep["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(
        input_types(&keep),
        [
            "message",
            "reasoning",
            "message",
            "function_call",
            "function_call_output",
            "reasoning",
            "function_call",
            "function_call_output",
            "message"
        ]
    );
    let input = keep["input"].as_array().unwrap();
    assert_eq!(
        input[1],
        json!({"type": "reasoning", "summary": [], "encrypted_content": "gAAAA-first"})
    );
    assert_eq!(input[5]["encrypted_content"], "gAAAA-second");
    assert!(!keep.to_string().contains("probably in config.toml"));
}

#[test]
fn reasoning_without_a_following_output_is_not_sent() {
    let mut req = request(false);
    req.history = shared_history([
        TranscriptItem::UserInput { text: "hi".into() },
        TranscriptItem::AssistantOutput {
            text: String::new(),
            reasoning: None,
            encrypted_reasoning: vec!["gAAAA-dangling".into()],
            phase: AssistantPhase::Commentary,
        },
        TranscriptItem::UserInput {
            text: "again".into(),
        },
    ]);
    let body = responses::build_body(&req, "m", KEEP);
    assert_eq!(input_types(&body), ["message", "message"]);
}

#[test]
fn bodies_are_byte_identical_and_the_prefix_is_stable() {
    let a = responses::build_body(&request(false), "m", KEEP).to_string();
    let b = responses::build_body(&request(false), "m", KEEP).to_string();
    assert_eq!(a, b);
    let short = ModelRequest {
        history: shared_history(history()[..1].to_vec()),
        ..request(false)
    };
    let long = responses::build_body(&request(false), "m", KEEP);
    let short = responses::build_body(&short, "m", KEEP);
    assert_eq!(long["instructions"], short["instructions"]);
    assert_eq!(long["tools"].to_string(), short["tools"].to_string());
}

fn completed_body() -> Value {
    json!({
        "id": "resp_1", "object": "response", "status": "completed", "model": "gpt-test",
        "output": [
            {"type": "reasoning", "id": "rs_1",
             "summary": [{"type": "summary_text", "text": "Read the config first."}],
             "encrypted_content": "gAAAA-blob"},
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Reading config.toml.", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_abc", "name": "read_file",
             "arguments": "{\"path\":\"config.toml\"}", "status": "completed"}
        ],
        "usage": {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 64},
                  "output_tokens": 30, "output_tokens_details": {"reasoning_tokens": 12},
                  "total_tokens": 150}
    })
}

fn assert_completed_call(r: &ModelResponse) {
    assert_eq!(r.text, "Reading config.toml.");
    assert_eq!(r.reasoning.as_deref(), Some("Read the config first."));
    assert_eq!(r.encrypted_reasoning, vec!["gAAAA-blob".to_string()]);
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(
        r.tool_calls[0].id, "call_abc",
        "the call_id, never the item id"
    );
    assert_eq!(r.tool_calls[0].name, "read_file");
    assert_eq!(r.tool_calls[0].arguments, r#"{"path":"config.toml"}"#);
    assert_eq!(r.finish, FinishKind::ToolUse);
    assert_eq!(r.raw_finish_reason.as_deref(), Some("completed"));
    assert_eq!(r.usage.input_tokens, 120);
    assert_eq!(r.usage.output_tokens, 30);
    assert_eq!(r.usage.cached_input_tokens, 64);
    assert!(r.parse_failures.is_empty(), "{:?}", r.parse_failures);
}

#[test]
fn parses_a_completed_response() {
    let body = completed_body().to_string();
    let r = responses::parse_response(&body).unwrap();
    assert_completed_call(&r);
    assert_eq!(r.raw, body);

    let text_only = json!({"status": "completed", "output": [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Port 8080."}]}
    ]});
    let r = responses::parse_response(&text_only.to_string()).unwrap();
    assert_eq!(
        (r.text.as_str(), r.finish),
        ("Port 8080.", FinishKind::Stop)
    );
}

#[test]
fn incomplete_responses_map_to_length_or_other() {
    let body = |reason: &str| {
        json!({"status": "incomplete", "incomplete_details": {"reason": reason}, "output": [
            {"type": "message", "role": "assistant", "status": "incomplete",
             "content": [{"type": "output_text", "text": "The port is"}]},
            {"type": "function_call", "call_id": "call_x", "name": "read_file",
             "arguments": "{\"pa", "status": "incomplete"}
        ]})
        .to_string()
    };
    let r = responses::parse_response(&body("max_output_tokens")).unwrap();
    assert_eq!(r.finish, FinishKind::Length);
    assert_eq!(r.raw_finish_reason.as_deref(), Some("max_output_tokens"));
    assert_eq!(r.text, "The port is");
    assert!(r.tool_calls.is_empty(), "a cut-off call is never a call");
    assert_eq!(r.parse_failures.len(), 1);
    assert!(
        r.parse_failures[0].contains("cut off"),
        "{:?}",
        r.parse_failures
    );

    let r = responses::parse_response(&body("content_filter")).unwrap();
    assert_eq!(r.finish, FinishKind::ContentFilter);
    assert_eq!(r.raw_finish_reason.as_deref(), Some("content_filter"));
}

#[test]
fn failed_and_malformed_responses_are_errors() {
    let failed = |code: &str| {
        json!({"status": "failed", "output": [], "error": {"code": code, "message": "it broke"}})
            .to_string()
    };
    let e = responses::parse_response(&failed("server_error")).unwrap_err();
    assert!(
        matches!(e, ProviderError::Failed { .. }) && e.is_retryable(),
        "{e:?}"
    );
    let e = responses::parse_response(&failed("invalid_prompt")).unwrap_err();
    assert!(
        matches!(e, ProviderError::Failed { .. }) && !e.is_retryable(),
        "{e:?}"
    );
    assert!(e.to_string().contains("it broke"), "{e}");

    let error_body = json!({"error": {"type": "invalid_request_error", "message": "bad input"}});
    let e = responses::parse_response(&error_body.to_string()).unwrap_err();
    assert!(
        !e.is_retryable() && e.to_string().contains("bad input"),
        "{e:?}"
    );

    for body in [
        "not json",
        r#"{"status":"completed"}"#,
        r#"{"status":"in_progress","output":[]}"#,
    ] {
        let e = responses::parse_response(body).unwrap_err();
        assert!(matches!(e, ProviderError::Decode(_)), "{body}: {e:?}");
    }
    let e = responses::parse_response(r#"{"status":"cancelled","output":[]}"#).unwrap_err();
    assert!(!e.is_retryable());
}

#[test]
fn a_call_without_a_name_is_a_parse_failure_and_still_signals_tool_use() {
    let body = json!({"status": "completed", "output": [
        {"type": "function_call", "call_id": "call_1", "arguments": "{}"}
    ]});
    let r = responses::parse_response(&body.to_string()).unwrap();
    assert!(r.tool_calls.is_empty());
    assert_eq!(r.finish, FinishKind::ToolUse);
    assert_eq!(r.parse_failures.len(), 1);
}

/// The events a real stream sends for [`completed_body`], deltas included.
fn stream_events(terminal: &str) -> Vec<Value> {
    let mut done = completed_body();
    let output = done["output"].as_array().unwrap().clone();
    let mut events = vec![
        json!({"type": "response.created", "sequence_number": 0,
               "response": {"id": "resp_1", "status": "in_progress", "output": []}}),
        json!({"type": "response.in_progress", "sequence_number": 1,
               "response": {"id": "resp_1", "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
        json!({"type": "response.reasoning_summary_text.delta", "output_index": 0, "item_id": "rs_1",
               "summary_index": 0, "delta": "Read the config first."}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": output[0]}),
        json!({"type": "response.output_item.added", "output_index": 1,
               "item": {"type": "message", "id": "msg_1", "role": "assistant", "status": "in_progress", "content": []}}),
        json!({"type": "response.content_part.added", "output_index": 1, "content_index": 0,
               "part": {"type": "output_text", "text": ""}}),
        json!({"type": "response.output_text.delta", "output_index": 1, "content_index": 0,
               "item_id": "msg_1", "delta": "Reading "}),
        json!({"type": "response.output_text.delta", "output_index": 1, "content_index": 0,
               "item_id": "msg_1", "delta": "config.toml."}),
        json!({"type": "response.output_text.done", "output_index": 1, "content_index": 0,
               "item_id": "msg_1", "text": "Reading config.toml."}),
        json!({"type": "response.output_item.done", "output_index": 1, "item": output[1]}),
        json!({"type": "response.output_item.added", "output_index": 2,
               "item": {"type": "function_call", "id": "fc_1", "call_id": "call_abc", "name": "read_file",
                        "arguments": "", "status": "in_progress"}}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 2, "item_id": "fc_1",
               "delta": "{\"path\":"}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 2, "item_id": "fc_1",
               "delta": "\"config.toml\"}"}),
        json!({"type": "response.function_call_arguments.done", "output_index": 2, "item_id": "fc_1",
               "arguments": "{\"path\":\"config.toml\"}"}),
        json!({"type": "response.output_item.done", "output_index": 2, "item": output[2]}),
    ];
    if !terminal.is_empty() {
        done["status"] = json!(terminal.trim_start_matches("response."));
        events.push(json!({"type": terminal, "response": done}));
    }
    events
}

fn feed(events: &[Value]) -> Result<StreamAccumulator, ProviderError> {
    let mut acc = StreamAccumulator::new();
    for e in events {
        acc.push(&e.to_string())?;
    }
    Ok(acc)
}

#[test]
fn a_stream_assembles_the_same_response_as_a_body() {
    let acc = feed(&stream_events("response.completed")).unwrap();
    assert!(acc.is_done());
    assert_eq!(acc.text_so_far(), "Reading config.toml.");
    assert_completed_call(&acc.finish().unwrap());
}

#[test]
fn a_stream_without_its_terminator_is_an_incomplete_stream() {
    let acc = feed(&stream_events("")).unwrap();
    assert!(!acc.is_done());
    let e = acc.finish().unwrap_err();
    assert!(
        matches!(e, ProviderError::IncompleteStream(_)) && e.is_retryable(),
        "{e:?}"
    );
}

#[test]
fn an_incomplete_stream_never_yields_the_unfinished_call() {
    // Cut while the call's arguments were streaming: no output_item.done for it.
    let mut events = stream_events("");
    events.truncate(events.len() - 2);
    events.push(json!({"type": "response.incomplete", "response": {
        "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
        "usage": {"input_tokens": 10, "output_tokens": 5}}}));
    let r = feed(&events).unwrap().finish().unwrap();
    assert_eq!(r.finish, FinishKind::Length);
    assert_eq!(r.raw_finish_reason.as_deref(), Some("max_output_tokens"));
    assert!(r.tool_calls.is_empty());
    assert_eq!(r.parse_failures.len(), 1, "{:?}", r.parse_failures);
    assert!(r.parse_failures[0].contains("read_file"));
    assert_eq!(r.text, "Reading config.toml.");
}

#[test]
fn failed_and_error_events_fail_the_call() {
    let mut acc = StreamAccumulator::new();
    acc.push(&stream_events("")[0].to_string()).unwrap();
    let failed = json!({"type": "response.failed", "response": {"status": "failed",
        "error": {"code": "server_error", "message": "The server had an error"}}});
    let e = acc.push(&failed.to_string()).unwrap_err();
    assert!(
        matches!(e, ProviderError::Failed { .. }) && e.is_retryable(),
        "{e:?}"
    );

    let mut acc = StreamAccumulator::new();
    let error = json!({"type": "error", "code": "rate_limit_exceeded", "message": "Slow down", "param": null});
    let e = acc.push(&error.to_string()).unwrap_err();
    assert!(
        e.is_retryable() && e.to_string().contains("Slow down"),
        "{e}"
    );

    let mut acc = StreamAccumulator::new();
    let error = json!({"type": "error", "code": "invalid_prompt", "message": "No", "param": null});
    assert!(!acc.push(&error.to_string()).unwrap_err().is_retryable());

    let mut acc = StreamAccumulator::new();
    assert!(matches!(
        acc.push("{not json"),
        Err(ProviderError::Decode(_))
    ));
}

#[test]
fn a_stream_that_lists_its_output_only_at_the_end_is_read_from_there() {
    let events = vec![json!({"type": "response.completed", "response": completed_body()})];
    assert_completed_call(&feed(&events).unwrap().finish().unwrap());
}

const KEY: &str = "sk-test-SECRET-resp";

fn provider(base_url: String, encrypted_reasoning: bool) -> HttpProvider {
    HttpProvider::new(HttpProviderConfig {
        name: "openai-responses".into(),
        wire: WireFormat::OpenAiResponses,
        base_url,
        model: "gpt-test".into(),
        api_key: Some(KEY.into()),
        request_timeout: Duration::from_secs(10),
        extra_headers: vec![],
        content_tool_calls: Default::default(),
        encrypted_reasoning,
        prompt_cache: true,
    })
    .unwrap()
}

fn sse(events: &[Value]) -> ResponseTemplate {
    let body: String = events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect();
    ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")
}

#[tokio::test]
async fn the_http_provider_posts_to_responses_with_a_bearer_key() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/responses"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(completed_body()))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/responses"))
        .respond_with(sse(&stream_events("response.completed")))
        .mount(&server)
        .await;
    let p = provider(format!("{}/v1/", server.uri()), true);
    assert_eq!(p.api_family(), "openai_responses");
    assert_eq!(p.endpoint(), format!("{}/v1/responses", server.uri()));
    assert_completed_call(&p.complete(&request(false)).await.unwrap());
    assert_completed_call(&p.complete(&request(true)).await.unwrap());

    let sent: Vec<Value> = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    assert_eq!(
        sent[0],
        responses::build_body(&request(false), "gpt-test", KEEP)
    );
    assert_eq!(sent[1]["stream"], true);
}

#[tokio::test]
async fn the_http_provider_reports_a_failed_stream_as_retryable_and_hides_the_key() {
    let server = MockServer::start().await;
    let failed = json!({"type": "response.failed", "response": {"status": "failed",
        "error": {"code": "server_error", "message": "try again"}}});
    Mock::given(method("POST"))
        .respond_with(sse(&[stream_events("")[0].clone(), failed]))
        .mount(&server)
        .await;
    let p = provider(format!("{}/v1", server.uri()), false);
    let e = p.complete(&request(true)).await.unwrap_err();
    assert!(
        matches!(e, ProviderError::Failed { .. }) && e.is_retryable(),
        "{e:?}"
    );
    assert!(!format!("{e} {e:?} {p:?}").contains(KEY));
}
