//! HttpProvider against a mock server: paths, auth, errors, streaming.

use attest_protocol::TranscriptItem;
use attest_providers::http::{HttpProvider, HttpProviderConfig, WireFormat};
use attest_providers::{FinishKind, ModelProvider, ModelRequest, ProviderError};
use serde_json::json;
use std::time::Duration;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const KEY: &str = "sk-test-SECRET-1234";

fn provider(wire: WireFormat, base_url: String, key: Option<&str>) -> HttpProvider {
    HttpProvider::new(HttpProviderConfig {
        name: "test".into(),
        wire,
        base_url,
        model: "m".into(),
        api_key: key.map(str::to_string),
        request_timeout: Duration::from_secs(10),
        extra_headers: vec![("x-extra".into(), "1".into())],
        content_tool_calls: Default::default(),
        encrypted_reasoning: false,
        prompt_cache: true,
    })
    .unwrap()
}

fn request(stream: bool) -> ModelRequest {
    ModelRequest {
        system: "sys".into(),
        tools: vec![].into(),
        history: attest_providers::shared_history([TranscriptItem::UserInput {
            text: "hi".into(),
        }]),
        stream,
        max_tokens: 100,
        temperature: None,
        seed: None,
        stop: vec![],
        cache_key: None,
    }
}

fn openai_ok() -> serde_json::Value {
    json!({"choices": [{"message": {"content": "hello"}, "finish_reason": "stop"}],
           "usage": {"prompt_tokens": 3, "completion_tokens": 1}})
}

fn sse(payloads: &[String]) -> String {
    payloads.iter().map(|p| format!("data: {p}\n\n")).collect()
}

fn assert_no_key(e: &ProviderError) {
    assert!(!e.to_string().contains(KEY), "{e}");
    assert!(!format!("{e:?}").contains(KEY), "{e:?}");
}

#[tokio::test]
async fn openai_path_and_bearer_auth() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .and(header("x-extra", "1"))
        .respond_with(ResponseTemplate::new(200).set_body_json(openai_ok()))
        .expect(1)
        .mount(&server)
        .await;
    let p = provider(
        WireFormat::OpenAiChat,
        format!("{}/v1/", server.uri()),
        Some(KEY),
    );
    assert_eq!(
        p.endpoint(),
        format!("{}/v1/chat/completions", server.uri())
    );
    assert_eq!(p.api_family(), "openai_chat");
    let r = p.complete(&request(false)).await.unwrap();
    assert_eq!((r.text.as_str(), r.finish), ("hello", FinishKind::Stop));
    let sent: serde_json::Value = server.received_requests().await.unwrap()[0]
        .body_json()
        .unwrap();
    assert_eq!(sent["model"], "m");
    assert!(!format!("{p:?}").contains(KEY));
}

#[tokio::test]
async fn openai_without_key_sends_no_authorization() {
    let server = MockServer::start().await;
    Mock::given(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(openai_ok()))
        .mount(&server)
        .await;
    let p = provider(WireFormat::OpenAiChat, format!("{}/v1", server.uri()), None);
    p.complete(&request(false)).await.unwrap();
    let reqs = server.received_requests().await.unwrap();
    assert!(!reqs[0].headers.contains_key("authorization"));
}

#[tokio::test]
async fn anthropic_path_and_headers() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(header("x-api-key", KEY))
        .and(header("anthropic-version", "2023-06-01"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "type": "message", "content": [{"type": "text", "text": "hello"}],
            "stop_reason": "end_turn", "usage": {"input_tokens": 3, "output_tokens": 1}})))
        .expect(1)
        .mount(&server)
        .await;
    let p = provider(WireFormat::AnthropicMessages, server.uri(), Some(KEY));
    assert_eq!(p.api_family(), "anthropic_messages");
    let r = p.complete(&request(false)).await.unwrap();
    assert_eq!((r.text.as_str(), r.finish), ("hello", FinishKind::Stop));
}

#[tokio::test]
async fn rate_limit_surfaces_retry_after_and_redacts_the_key() {
    let server = MockServer::start().await;
    Mock::given(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "2.5")
                .set_body_string(format!("rate limited for key {KEY} {}", "x".repeat(5000))),
        )
        .mount(&server)
        .await;
    let p = provider(
        WireFormat::OpenAiChat,
        format!("{}/v1", server.uri()),
        Some(KEY),
    );
    let e = p.complete(&request(false)).await.unwrap_err();
    assert!(e.is_retryable());
    assert_eq!(e.retry_after(), Some(Duration::from_millis(2500)));
    match &e {
        ProviderError::Http { status, body, .. } => {
            assert_eq!(*status, 429);
            assert!(body.len() <= 2048);
            assert!(body.contains("[REDACTED]"));
        }
        other => panic!("{other:?}"),
    }
    assert_no_key(&e);
}

#[tokio::test]
async fn server_error_is_retryable_and_client_error_is_not() {
    let server = MockServer::start().await;
    Mock::given(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(500).set_body_string("boom"))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(400).set_body_string("bad request"))
        .mount(&server)
        .await;
    let p = provider(WireFormat::AnthropicMessages, server.uri(), Some(KEY));
    let e = p.complete(&request(false)).await.unwrap_err();
    assert!(matches!(e, ProviderError::Http { status: 500, .. }) && e.is_retryable());
    let e = p.complete(&request(false)).await.unwrap_err();
    assert!(matches!(e, ProviderError::Http { status: 400, .. }) && !e.is_retryable());
    assert_eq!(e.retry_after(), None);
}

fn openai_stream(done: bool) -> String {
    let mut p = vec![
        json!({"choices": [{"index": 0, "delta": {"content": "Reading."}}]}).to_string(),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "read_file", "arguments": "{\"path\""}}]}}]}).to_string(),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ":\"a\"}"}}]}}]}).to_string(),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}).to_string(),
        json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}).to_string(),
    ];
    if done {
        p.push("[DONE]".into());
    }
    format!(": keep-alive\n\n{}", sse(&p))
}

#[tokio::test]
async fn openai_stream_is_parsed() {
    let server = MockServer::start().await;
    Mock::given(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(openai_stream(true), "text/event-stream"),
        )
        .mount(&server)
        .await;
    let p = provider(
        WireFormat::OpenAiChat,
        format!("{}/v1", server.uri()),
        Some(KEY),
    );
    let r = p.complete(&request(true)).await.unwrap();
    assert_eq!(r.text, "Reading.");
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].arguments, r#"{"path":"a"}"#);
    assert_eq!(r.finish, FinishKind::ToolUse);
    assert_eq!(r.usage.output_tokens, 2);
    let sent: serde_json::Value = server.received_requests().await.unwrap()[0]
        .body_json()
        .unwrap();
    assert_eq!(sent["stream"], true);
}

#[tokio::test]
async fn openai_stream_without_done_is_incomplete() {
    let server = MockServer::start().await;
    Mock::given(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(openai_stream(false), "text/event-stream"),
        )
        .mount(&server)
        .await;
    let p = provider(
        WireFormat::OpenAiChat,
        format!("{}/v1", server.uri()),
        Some(KEY),
    );
    let e = p.complete(&request(true)).await.unwrap_err();
    assert!(matches!(e, ProviderError::IncompleteStream(_)), "{e:?}");
    assert!(e.is_retryable());
}

#[tokio::test]
async fn anthropic_stream_is_parsed() {
    let events = [
        (
            "message_start",
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 9}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}}),
        ),
        ("ping", json!({"type": "ping"})),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"path\":"}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "\"a\"}"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 7}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    let body: String = events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect();
    let server = MockServer::start().await;
    Mock::given(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(body, "text/event-stream"))
        .mount(&server)
        .await;
    let p = provider(WireFormat::AnthropicMessages, server.uri(), Some(KEY));
    let r = p.complete(&request(true)).await.unwrap();
    assert_eq!(r.tool_calls.len(), 1);
    assert_eq!(r.tool_calls[0].arguments, r#"{"path":"a"}"#);
    assert_eq!((r.usage.input_tokens, r.usage.output_tokens), (9, 7));
}

#[tokio::test]
async fn json_error_body_on_a_streaming_call_is_decoded() {
    let server = MockServer::start().await;
    Mock::given(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"error": {"message": "model not loaded"}})),
        )
        .mount(&server)
        .await;
    let p = provider(
        WireFormat::OpenAiChat,
        format!("{}/v1", server.uri()),
        Some(KEY),
    );
    let e = p.complete(&request(true)).await.unwrap_err();
    assert!(
        matches!(e, ProviderError::Decode(ref m) if m.contains("model not loaded")),
        "{e:?}"
    );
}

#[tokio::test]
async fn connection_error_is_transport_without_the_key() {
    // Nothing listens on port 9 of localhost; the key is also in the URL, to
    // prove error messages are scrubbed.
    let p = provider(
        WireFormat::OpenAiChat,
        format!("http://127.0.0.1:9/{KEY}/v1"),
        Some(KEY),
    );
    let e = p.complete(&request(false)).await.unwrap_err();
    assert!(matches!(e, ProviderError::Transport(_)), "{e:?}");
    assert!(e.is_retryable());
    assert_no_key(&e);
}

#[test]
fn bad_header_is_a_configuration_error() {
    let e = HttpProvider::new(HttpProviderConfig {
        name: "t".into(),
        wire: WireFormat::OpenAiChat,
        base_url: "http://localhost/v1".into(),
        model: "m".into(),
        api_key: Some(format!("{KEY}\n")),
        request_timeout: Duration::from_secs(1),
        extra_headers: vec![],
        content_tool_calls: Default::default(),
        encrypted_reasoning: false,
        prompt_cache: true,
    })
    .unwrap_err();
    assert_no_key(&e);
}

/// A run's later requests carry their kept messages as shared pieces; on
/// the wire each is still one body of a declared length, byte for byte the
/// body written whole.
#[tokio::test]
async fn a_request_built_from_kept_pieces_goes_out_whole_with_its_length() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(openai_ok()))
        .mount(&server)
        .await;
    let p = provider(
        WireFormat::OpenAiChat,
        format!("{}/v1/", server.uri()),
        None,
    );
    let mut items = vec![TranscriptItem::UserInput {
        text: "read them".into(),
    }];
    let mut history = attest_providers::shared_history(items.clone());
    for i in 0..40 {
        items = vec![
            TranscriptItem::ToolCall {
                call_id: format!("c{i}"),
                name: "read_file".into(),
                arguments: format!(r#"{{"path":"f{i}"}}"#),
            },
            TranscriptItem::ToolResult {
                call_id: format!("c{i}"),
                name: "read_file".into(),
                status: attest_protocol::ReceiptStatus::Ok,
                output: format!("port = {i}"),
                receipt: None,
            },
        ];
        history.extend(attest_providers::shared_history(items.clone()));
        let req = ModelRequest {
            history: history.clone(),
            ..request(false)
        };
        p.complete(&req).await.unwrap();
        let received = server.received_requests().await.unwrap();
        let last = received.last().unwrap();
        let whole = attest_providers::openai::body_json(&req, "m");
        assert_eq!(String::from_utf8_lossy(&last.body), whole, "request {i}");
        assert_eq!(
            last.headers
                .get("content-length")
                .and_then(|v| v.to_str().ok()),
            Some(whole.len().to_string().as_str()),
            "request {i}"
        );
        assert!(last.headers.get("transfer-encoding").is_none());
    }
}

/// An endpoint that moved (307/308) is followed with the same body, also
/// when the body was sent in pieces.
#[tokio::test]
async fn a_moved_endpoint_is_followed_with_the_whole_body() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(308).insert_header(
            "location",
            format!("{}/moved/chat/completions", server.uri()),
        ))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/moved/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(openai_ok()))
        .mount(&server)
        .await;
    let p = provider(
        WireFormat::OpenAiChat,
        format!("{}/v1/", server.uri()),
        None,
    );
    let history = attest_providers::shared_history((0..30).map(|i| TranscriptItem::UserInput {
        text: format!("message {i}"),
    }));
    for _ in 0..2 {
        // The second request of the run carries kept messages as pieces.
        let req = ModelRequest {
            history: history.clone(),
            ..request(false)
        };
        let r = p.complete(&req).await.unwrap();
        assert_eq!(r.text, "hello");
        let received = server.received_requests().await.unwrap();
        let moved = received.last().unwrap();
        assert_eq!(moved.url.path(), "/moved/chat/completions");
        assert_eq!(
            String::from_utf8_lossy(&moved.body),
            attest_providers::openai::body_json(&req, "m")
        );
    }
}
