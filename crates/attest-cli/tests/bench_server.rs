//! The benchmark's lean model server (`examples/scripted_server.rs`) with
//! its checks moved after the run: it still answers by the script, and it
//! still reports what a request broke, once the run is over.

mod common;

use common::*;
use serde_json::json;

const OPENAI: Variant = Variant {
    wire: Wire::OpenAi,
    stream: false,
};

/// POSTs a body that is not JSON to the chat endpoint; the reply's status.
async fn post_not_json(model: &MockModel) -> u16 {
    let url = format!("{}/chat/completions", model.base_url());
    let reply = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    reply.status().as_u16()
}

#[tokio::test]
async fn a_run_against_the_after_run_server_is_served_and_found_valid() {
    for v in VARIANTS {
        let ws = TestWorkspace::new();
        ws.write("data/a.txt", "port = 8000\n");
        let turns = vec![
            Turn::tool("read_file", json!({"path": "data/a.txt"})),
            Turn::text("The port is 8000."),
        ];
        let model = MockModel::start_lean(v, turns, Checks::AfterRun).await;
        let r = run_attest(&model, &ws, &["--expect", "observe", "Which port?"]).await;
        assert_eq!(r.state(), "completed", "{v:?} {}", r.describe());
        assert_eq!(model.times().len(), 2, "{v:?}");
        model.check_after_run();
        assert_eq!(model.violations(), Vec::<String>::new(), "{v:?}");
    }
}

#[tokio::test]
async fn a_broken_request_is_answered_then_reported_after_the_run() {
    let model = MockModel::start_lean(OPENAI, vec![Turn::text("hello")], Checks::AfterRun).await;
    // Answered from the script: nothing was checked yet.
    assert_eq!(post_not_json(&model).await, 200);
    assert_eq!(model.violations(), Vec::<String>::new());

    model.check_after_run();
    let violations = model.violations();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(
        violations[0].starts_with("request 1: request body is not JSON"),
        "{violations:?}"
    );
}

#[tokio::test]
async fn an_inline_server_refuses_the_same_request_at_once() {
    let model = MockModel::start_lean(OPENAI, vec![Turn::text("hello")], Checks::Inline).await;
    assert_eq!(post_not_json(&model).await, 400);
    assert_eq!(model.violations().len(), 1);
}
