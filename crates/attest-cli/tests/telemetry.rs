//! OTLP export through the real binary: a loopback receiver decodes the
//! protobuf the exporter posts to `/v1/traces` and the spans' names,
//! parentage and attributes are checked against the run's own events.

mod common;

use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const OPENAI: Variant = Variant {
    wire: Wire::OpenAi,
    stream: false,
};

async fn receiver() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/traces"))
        .respond_with(
            ResponseTemplate::new(200).insert_header("content-type", "application/x-protobuf"),
        )
        .mount(&server)
        .await;
    server
}

/// Every span the receiver got, and the raw bodies.
async fn spans(server: &MockServer) -> (Vec<Span>, Vec<u8>) {
    let mut spans = Vec::new();
    let mut raw = Vec::new();
    for request in server.received_requests().await.unwrap_or_default() {
        assert_eq!(
            request
                .headers
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some("application/x-protobuf")
        );
        raw.extend_from_slice(&request.body);
        let decoded = ExportTraceServiceRequest::decode(request.body.as_slice()).unwrap();
        for resource in decoded.resource_spans {
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
    }
    (spans, raw)
}

fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a AnyValue> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn string(span: &Span, key: &str) -> String {
    match attr(span, key) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        other => panic!("{} has no string {key}: {other:?}", span.name),
    }
}

fn int(span: &Span, key: &str) -> i64 {
    match attr(span, key) {
        Some(AnyValue::IntValue(n)) => *n,
        other => panic!("{} has no int {key}: {other:?}", span.name),
    }
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

#[tokio::test]
async fn a_run_is_exported_as_genai_spans_without_contents() {
    let server = receiver().await;
    let ws = TestWorkspace::new();
    let model = MockModel::start(
        OPENAI,
        vec![
            Turn::tool("read_file", json!({"path": "config.toml"})),
            Turn::text("The port is 8080."),
        ],
    )
    .await;
    let run = run_attest(
        &model,
        &ws,
        &[
            "--otlp-endpoint",
            &server.uri(),
            "--expect",
            "observe",
            "Which port does config.toml set?",
        ],
    )
    .await;
    assert_eq!(run.state(), "completed", "{}", run.describe());
    let started = run.of_type("run_started")[0].clone();
    let (spans, raw) = spans(&server).await;

    let roots = named(&spans, "invoke_agent attest");
    assert_eq!(
        roots.len(),
        1,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let root = roots[0];
    assert!(root.parent_span_id.is_empty(), "the run's span is the root");
    assert_eq!(string(root, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(
        string(root, "gen_ai.provider.name"),
        started["provider"].as_str().unwrap()
    );
    assert_eq!(string(root, "gen_ai.request.model"), "test-model");
    assert_eq!(
        string(root, "gen_ai.conversation.id"),
        started["session_id"].as_str().unwrap()
    );
    assert_eq!(string(root, "attest.terminal.state"), "completed");
    assert_eq!(string(root, "attest.terminal.reason"), run.reason());
    let usage = &run.done()["usage"];
    assert_eq!(
        int(root, "gen_ai.usage.input_tokens"),
        usage["input_tokens"].as_i64().unwrap()
    );
    assert_eq!(int(root, "attest.receipts.ok"), 1);
    assert_eq!(int(root, "attest.receipts.failed"), 0);
    // The answer's grounding, as `done` reports it: `8080` from the read.
    let grounding = &run.done()["grounding"];
    assert_eq!(
        int(root, "attest.grounding.values"),
        grounding["values"].as_array().unwrap().len() as i64
    );
    assert_eq!(int(root, "attest.grounding.values"), 1, "{grounding}");
    assert_eq!(int(root, "attest.grounding.ungrounded"), 0, "{grounding}");
    assert!(
        matches!(
            attr(root, "attest.grounding.evidence_used"),
            Some(AnyValue::BoolValue(true))
        ),
        "{grounding}"
    );

    let chats = named(&spans, "chat test-model");
    assert_eq!(chats.len(), 2, "one per model call");
    for chat in &chats {
        assert_eq!(chat.parent_span_id, root.span_id);
        assert_eq!(chat.trace_id, root.trace_id);
        assert_eq!(string(chat, "gen_ai.operation.name"), "chat");
        match attr(chat, "gen_ai.response.finish_reasons") {
            Some(AnyValue::ArrayValue(a)) => assert_eq!(a.values.len(), 1),
            other => panic!("finish reasons: {other:?}"),
        }
        assert!(int(chat, "gen_ai.usage.output_tokens") >= 0);
    }

    let tools = named(&spans, "execute_tool read_file");
    assert_eq!(tools.len(), 1);
    let tool = tools[0];
    assert_eq!(tool.parent_span_id, root.span_id);
    let call = run.of_type("tool_started")[0];
    assert_eq!(string(tool, "gen_ai.tool.name"), "read_file");
    assert_eq!(
        string(tool, "gen_ai.tool.call.id"),
        call["call_id"].as_str().unwrap()
    );
    assert_eq!(string(tool, "attest.receipt.status"), "ok");
    assert_eq!(string(tool, "attest.effect"), "observe");
    assert!(string(tool, "attest.evidence.kind").contains("sha256"));
    assert_eq!(string(tool, "attest.permission"), "allow");
    assert!(tool.start_time_unix_nano >= root.start_time_unix_nano);
    assert!(tool.end_time_unix_nano <= root.end_time_unix_nano);

    // Contents only when opted in.
    for span in &spans {
        for key in [
            "gen_ai.input.messages",
            "gen_ai.output.messages",
            "gen_ai.tool.call.result",
        ] {
            assert!(attr(span, key).is_none(), "{} carries {key}", span.name);
        }
    }
    let body = String::from_utf8_lossy(&raw);
    assert!(!body.contains("Which port"), "the prompt was exported");
    assert!(
        !body.contains("8080"),
        "file or answer contents were exported"
    );
}

#[tokio::test]
async fn contents_when_opted_in_are_redacted() {
    let server = receiver().await;
    let ws = TestWorkspace::new();
    let canary = "sk-canary-telemetry-6f1d2b";
    let model = MockModel::start(
        OPENAI,
        vec![
            Turn::tool("read_file", json!({"path": "config.toml"})),
            Turn::text("The port is 8080."),
        ],
    )
    .await;
    let prompt = format!("Which port? my key is {canary}");
    let run = run_attest_env(
        &model,
        &ws,
        &[
            "--otlp-endpoint",
            &server.uri(),
            "--api-key-env",
            "TELEMETRY_TEST_KEY",
            &prompt,
        ],
        &[
            ("TELEMETRY_TEST_KEY", canary),
            ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true"),
        ],
    )
    .await;
    assert_eq!(run.state(), "completed", "{}", run.describe());
    let (spans, raw) = spans(&server).await;
    let root = named(&spans, "invoke_agent attest")[0];
    let input = string(root, "gen_ai.input.messages");
    assert!(input.contains("Which port? my key is"), "{input}");
    assert!(string(root, "gen_ai.output.messages").contains("The port is 8080."));
    let tool = named(&spans, "execute_tool read_file")[0];
    assert!(string(tool, "gen_ai.tool.call.result").contains("8080"));
    assert!(string(tool, "gen_ai.tool.call.arguments").contains("config.toml"));
    assert!(
        !String::from_utf8_lossy(&raw).contains(canary),
        "a secret reached the exported spans"
    );
}

#[tokio::test]
async fn an_unreachable_collector_neither_fails_nor_stalls_the_run() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let ws = TestWorkspace::new();
    let model = MockModel::start(OPENAI, vec![Turn::text("Hello.")]).await;
    let started = std::time::Instant::now();
    let run = run_attest(&model, &ws, &["--otlp-endpoint", &endpoint, "Say hello"]).await;
    assert_eq!(run.code, 0, "{}", run.describe());
    assert_eq!(run.state(), "completed");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attest_serve_exports_its_runs_as_the_config_says() {
    use common::server::{submit, wait_for_end, Server, ServerDir};
    let receiver = receiver().await;
    let model = MockModel::start(
        OPENAI,
        vec![
            Turn::tool("read_file", json!({"path": "config.toml"})),
            Turn::text("The port is 8080."),
        ],
    )
    .await;
    let dir = ServerDir::new(
        &model,
        &format!("\n[telemetry]\notlp_endpoint = \"{}\"\n", receiver.uri()),
    );
    let ws = dir.workspace("proj");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("config.toml"), "port = 8080\n").unwrap();
    let server = Server::start(&dir);
    let submitted = submit(
        &server,
        None,
        json!({"prompt": "Which port does config.toml set?", "expect": "observe", "workspace": "proj"}),
    )
    .await;
    let run_id = submitted["run_id"].as_str().unwrap().to_string();
    let run = wait_for_end(&server, None, &run_id).await;
    assert_eq!(run["state"], "completed", "{run}");
    // The batch exporter sends within seconds; the server keeps running.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let root = loop {
        let (spans, _) = spans(&receiver).await;
        if let Some(root) = spans.into_iter().find(|s| s.name == "invoke_agent attest") {
            break root;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no run span reached the collector"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(string(&root, "attest.terminal.state"), "completed");
    assert_eq!(
        string(&root, "gen_ai.conversation.id"),
        run["session_id"].as_str().unwrap()
    );
    assert_eq!(int(&root, "attest.receipts.ok"), 1);
    let (spans, _) = spans(&receiver).await;
    assert_eq!(named(&spans, "execute_tool read_file").len(), 1);
}
