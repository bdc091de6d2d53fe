//! `attest mcp-serve` driven by rmcp's client over the binary's stdio: the
//! one tool is listed, a delegated run comes back with its terminal state,
//! reason, receipts and answer, and bad calls are errors, not crashes.

mod common;

use common::*;
use rmcp::model::CallToolRequestParams;
use rmcp::ServiceExt;
use serde_json::json;
use std::process::Stdio;

const OPENAI: Variant = Variant {
    wire: Wire::OpenAi,
    stream: false,
};

async fn serve(
    model: &MockModel,
    ws: &TestWorkspace,
) -> (
    rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tokio::process::Child,
) {
    trust_workspace(ws.path());
    let mut child = tokio::process::Command::new(assert_cmd::cargo::cargo_bin("attest"))
        .args(["mcp-serve", "--provider", "openai", "--base-url"])
        .arg(model.base_url())
        .args(["--model", "test-model", "--no-stream", "-C"])
        .arg(ws.path())
        .env("XDG_CONFIG_HOME", test_config_home())
        .env("ATTEST_CACHE_DIR", ws.path().join(".cache"))
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("attest mcp-serve starts");
    let stdout = child.stdout.take().unwrap();
    let stdin = child.stdin.take().unwrap();
    let client = ().serve((stdout, stdin)).await.expect("MCP handshake");
    (client, child)
}

fn args(value: serde_json::Value) -> rmcp::model::JsonObject {
    value.as_object().unwrap().clone()
}

#[tokio::test]
async fn a_delegated_run_returns_state_reason_receipts_and_answer() {
    let ws = TestWorkspace::new();
    let model = MockModel::start(
        OPENAI,
        vec![
            Turn::tool("read_file", json!({"path": "config.toml"})),
            Turn::text("The port is 8080."),
        ],
    )
    .await;
    let (client, _child) = serve(&model, &ws).await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["attest_run"]);
    let schema = serde_json::Value::Object((*tools[0].input_schema).clone());
    assert_eq!(schema["required"], json!(["prompt"]));

    let result = client
        .call_tool(
            CallToolRequestParams::new("attest_run").with_arguments(args(json!({
                "prompt": "Which port does config.toml set?",
                "expect": "observe",
                "required_tools": ["read_file"]
            }))),
        )
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let out = result.structured_content.expect("structured result");
    assert_eq!(out["state"], "completed", "{out}");
    assert_eq!(out["answer"], "The port is 8080.");
    assert!(out["reason"].is_string(), "{out}");
    assert_eq!(out["receipts"][0]["tool_name"], "read_file");
    assert_eq!(out["receipts"][0]["status"], "ok");
    // The run really happened, with the delegated prompt and contract.
    let first = model.request_text(0);
    assert!(
        first.contains("Which port does config.toml set?"),
        "{first}"
    );
    let run_id = out["run_id"].as_str().unwrap();
    use attest_store::Store;
    let record = ws.store().run(run_id).unwrap();
    assert_eq!(record.status.to_string(), "completed");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn bad_calls_are_errors_and_the_server_keeps_serving() {
    let ws = TestWorkspace::new();
    let model = MockModel::start(OPENAI, vec![Turn::text("Hi.")]).await;
    let (client, _child) = serve(&model, &ws).await;
    let unknown = client
        .call_tool(CallToolRequestParams::new("nope").with_arguments(args(json!({}))))
        .await;
    assert!(unknown.is_err(), "{unknown:?}");
    let bad_expect = client
        .call_tool(
            CallToolRequestParams::new("attest_run").with_arguments(args(json!({
                "prompt": "x", "expect": "vibes"
            }))),
        )
        .await
        .unwrap();
    assert_eq!(bad_expect.is_error, Some(true), "{bad_expect:?}");
    let missing_tool = client
        .call_tool(
            CallToolRequestParams::new("attest_run").with_arguments(args(json!({
                "prompt": "x", "required_tools": ["no_such_tool"]
            }))),
        )
        .await
        .unwrap();
    assert_eq!(missing_tool.is_error, Some(true), "{missing_tool:?}");
    assert!(model.requests().is_empty(), "no run was started");
    let ok = client
        .call_tool(
            CallToolRequestParams::new("attest_run").with_arguments(args(json!({
                "prompt": "Say hi"
            }))),
        )
        .await
        .unwrap();
    assert_eq!(ok.structured_content.unwrap()["answer"], "Hi.");
    client.cancel().await.unwrap();
}
