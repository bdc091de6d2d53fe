//! Native protocol, calls left in the content (issue 20): a response whose
//! whole content is a well-formed call runs it like a native one, on both
//! wire formats, streaming and not, and the trace says `call_source:
//! content`; JSON inside prose never runs; `content_tool_calls = "off"`
//! keeps content as text.

mod common;

use common::*;
use serde_json::Value;

const FENCED_CALL: &str =
    "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"config.toml\"}}\n```";

fn response_traces(ws: &TestWorkspace) -> Vec<Value> {
    ws.log_entries()
        .into_iter()
        .filter(|e| e["trace"]["record"] == "response")
        .map(|e| e["trace"].clone())
        .collect()
}

#[tokio::test]
async fn a_fenced_json_call_in_the_content_runs_and_completes() {
    for v in VARIANTS {
        let ws = TestWorkspace::new();
        let model = MockModel::start(
            v,
            vec![
                Turn::text(FENCED_CALL),
                Turn::text("config.toml sets port 8080."),
            ],
        )
        .await;
        let r = run_attest(&model, &ws, &["--expect", "observe", "Which port?"]).await;
        model.assert_valid();
        assert_eq!(r.state(), "completed", "{v:?} {}", r.describe());
        assert_eq!(r.done()["receipts"][0]["tool_name"], "read_file");
        assert_eq!(r.done()["receipts"][0]["status"], "ok");

        // The next request carries the call as a native call and its result.
        let results = model.tool_results(1);
        assert_eq!(results.len(), 1, "{v:?}: {results:?}");
        assert!(results[0].1.contains("port = 8080"), "{v:?}: {results:?}");
        let next = model.request_text(1);
        assert!(
            !next.contains("```json"),
            "{v:?}: the fenced text was replayed: {next}"
        );
        assert!(
            next.contains(&results[0].0),
            "{v:?}: the call id is not in the request"
        );

        let traces = response_traces(&ws);
        assert_eq!(traces[0]["call_source"], "content", "{v:?}: {traces:?}");
        assert!(traces[0]["parsed_calls"][0]
            .as_str()
            .unwrap()
            .ends_with(" read_file"));
        assert!(traces[1].get("call_source").is_none(), "{traces:?}");

        // `attest trace` says where the calls came from.
        let run_id = r.done()["run_id"].as_str().unwrap().to_string();
        let out = run_binary(
            vec![
                "trace".into(),
                run_id,
                "-C".into(),
                ws.path().display().to_string(),
            ],
            &[],
        )
        .await;
        assert_eq!(out.code, 0, "{}", out.describe());
        assert!(
            out.stdout.contains(" read_file] from content"),
            "{}",
            out.stdout
        );
    }
}

#[tokio::test]
async fn calls_in_tool_call_tags_run_and_native_calls_are_traced_native() {
    for v in [VARIANTS[0], VARIANTS[3]] {
        let ws = TestWorkspace::new();
        let model = MockModel::start(
            v,
            vec![
                Turn::text("<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"config.toml\"}}\n</tool_call>"),
                Turn::tool("grep", serde_json::json!({"pattern": "port"})),
                Turn::text("Port 8080, in config.toml."),
            ],
        )
        .await;
        let r = run_attest(&model, &ws, &["--expect", "observe", "Which port?"]).await;
        model.assert_valid();
        assert_eq!(r.state(), "completed", "{v:?} {}", r.describe());
        let tools: Vec<&Value> = r.done()["receipts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| &r["tool_name"])
            .collect();
        assert_eq!(tools, ["read_file", "grep"]);
        let traces = response_traces(&ws);
        assert_eq!(traces[0]["call_source"], "content");
        assert_eq!(traces[1]["call_source"], "native");
    }
}

#[tokio::test]
async fn json_inside_prose_never_runs() {
    for v in [VARIANTS[0], VARIANTS[2]] {
        let ws = TestWorkspace::new();
        let model = MockModel::start(
            v,
            vec![
                Turn::text("I would call {\"name\": \"read_file\", \"arguments\": {\"path\": \"config.toml\"}} to check."),
                Turn::text("I cannot check it."),
            ],
        )
        .await;
        let r = run_attest(&model, &ws, &["--expect", "observe", "Which port?"]).await;
        model.assert_valid();
        assert_eq!(r.state(), "unverified", "{v:?} {}", r.describe());
        assert_eq!(r.done()["receipts"].as_array().map_or(0, Vec::len), 0);
        assert!(model.tool_results(1).is_empty());
        assert!(response_traces(&ws)
            .iter()
            .all(|t| t.get("call_source").is_none()));
        // The corrective turn names the call syntax of the native protocol.
        let next = model.request_text(1);
        assert!(
            next.contains("written as a native tool call of `read_file`"),
            "{v:?}: {next}"
        );
    }
}

#[tokio::test]
async fn content_tool_calls_off_keeps_the_content_as_text() {
    for v in [VARIANTS[0], VARIANTS[2]] {
        let ws = TestWorkspace::new();
        ws.append_config("[provider]\ncontent_tool_calls = \"off\"\n");
        let model = MockModel::start(
            v,
            vec![Turn::text(FENCED_CALL), Turn::text("I cannot check it.")],
        )
        .await;
        let r = run_attest(&model, &ws, &["--expect", "observe", "Which port?"]).await;
        model.assert_valid();
        assert_eq!(r.state(), "unverified", "{v:?} {}", r.describe());
        assert!(model.tool_results(1).is_empty());
        assert!(model.request_text(1).contains("read_file"));
    }
}

#[tokio::test]
async fn a_content_call_to_a_tool_that_is_not_offered_is_a_protocol_error() {
    let v = VARIANTS[0];
    let ws = TestWorkspace::new();
    let model = MockModel::start(
        v,
        vec![
            Turn::text("{\"name\": \"delete_everything\", \"arguments\": {}}"),
            Turn::text(FENCED_CALL),
            Turn::text("config.toml sets port 8080."),
        ],
    )
    .await;
    let r = run_attest(&model, &ws, &["--expect", "observe", "Which port?"]).await;
    model.assert_valid();
    assert_eq!(r.state(), "completed", "{}", r.describe());
    let pe = r.of_type("protocol_error");
    assert_eq!(pe.len(), 1);
    assert_eq!(pe[0]["kind"], "unparsable_action");
    assert!(pe[0]["detail"]
        .as_str()
        .unwrap()
        .contains("not an offered tool"));
    let next = model.request_text(1);
    assert!(!next.contains("delete_everything"), "{next}");
    assert!(
        next.contains("broke the protocol and was omitted"),
        "{next}"
    );
    assert_eq!(r.done()["receipts"].as_array().unwrap().len(), 1);
}
