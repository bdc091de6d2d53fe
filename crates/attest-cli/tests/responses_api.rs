//! `--provider openai-responses` through the real binary against a scripted
//! Responses server that rejects what the real service rejects.

mod common;

use common::responses::{run_and_kill, run_responses, validate, RTurn, ResponsesModel};
use common::*;
use serde_json::{json, Value};
use std::collections::HashSet;

/// Trace records of one kind (`request`, `response`, …) in the workspace's store.
fn traces(ws: &TestWorkspace, record: &str) -> Vec<Value> {
    ws.log_entries()
        .into_iter()
        .filter(|e| e["entry"] == "trace" && e["trace"]["record"] == record)
        .map(|e| e["trace"].clone())
        .collect()
}

fn of_type<'a>(items: &'a [Value], kind: &str) -> Vec<&'a Value> {
    items.iter().filter(|i| i["type"] == kind).collect()
}

#[tokio::test]
async fn an_observe_run_with_one_tool_call_completes() {
    for stream in [false, true] {
        let ws = TestWorkspace::new();
        let read = call("read_file", json!({"path": "config.toml"}));
        let id = read.id.clone();
        let model = ResponsesModel::start(
            stream,
            vec![
                RTurn::calls("Let me read the config.", vec![read]),
                RTurn::text("config.toml configures port 8080."),
            ],
        )
        .await;
        let r = run_responses(
            &model,
            &ws,
            &[
                "--expect",
                "observe",
                "Which port does config.toml configure?",
            ],
        )
        .await;
        model.assert_valid();
        model.assert_stable_prefix();
        assert_eq!(r.code, 0, "stream={stream} {}", r.describe());
        assert_eq!(r.state(), "completed");
        assert_eq!(r.reason(), "contract_satisfied");
        assert_eq!(r.done()["answer"], "config.toml configures port 8080.");
        assert_eq!(r.done()["receipts"][0]["tool_name"], "read_file");
        assert_eq!(model.paths(), ["/v1/responses", "/v1/responses"]);

        let requests = model.requests();
        for req in &requests {
            assert_eq!(req["store"], false);
            assert_eq!(req["model"], "gpt-test");
            assert!(req["instructions"].as_str().is_some_and(|s| !s.is_empty()));
            assert!(
                req.get("include").is_none(),
                "reasoning is stripped by default"
            );
            let read_tool = req["tools"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["name"] == "read_file")
                .expect("read_file offered");
            assert_eq!(read_tool["type"], "function");
            assert_eq!(read_tool["strict"], false);
        }
        // The second request carries the call and its real result, paired by call_id.
        let input = model.input(1);
        let calls = of_type(&input, "function_call");
        let outputs = of_type(&input, "function_call_output");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0]["call_id"], id.as_str());
        assert_eq!(calls[0]["name"], "read_file");
        assert_eq!(outputs.len(), 1);
        assert_eq!(outputs[0]["call_id"], id.as_str());
        assert!(
            outputs[0]["output"]
                .as_str()
                .unwrap()
                .contains("port = 8080"),
            "{input:?}"
        );
        let assistant = of_type(&input, "message")
            .into_iter()
            .find(|m| m["role"] == "assistant")
            .expect("the commentary goes back as an assistant message");
        assert_eq!(assistant["content"][0]["text"], "Let me read the config.");

        // The trace names the wire format and the usage, cached tokens included.
        let reqs = traces(&ws, "request");
        assert!(reqs.iter().all(|t| t["api_family"] == "openai_responses"));
        let resp = traces(&ws, "response");
        assert_eq!(resp[0]["raw_finish_reason"], "completed");
        assert_eq!(resp[0]["input_tokens"], 11);
        assert_eq!(resp[0]["cached_input_tokens"], 5);
        assert_eq!(resp[1]["raw_finish_reason"], "completed");
        let run_id = r.done()["run_id"].as_str().unwrap().to_string();
        let ws_arg = ws.path().display().to_string();
        let trace = run_binary(
            ["trace", run_id.as_str(), "-C", ws_arg.as_str()]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            &[],
        )
        .await;
        assert!(
            trace.stdout.contains("tokens in 11 (cached 5) out 7"),
            "{}",
            trace.stdout
        );
    }
}

#[tokio::test]
async fn encrypted_reasoning_goes_back_only_when_the_policy_keeps_it() {
    for stream in [false, true] {
        for keep in [true, false] {
            let ws = TestWorkspace::new();
            if keep {
                ws.append_config("[run]\nreasoning = \"keep\"\n");
            }
            let read = call("read_file", json!({"path": "config.toml"}));
            let id = read.id.clone();
            // Under strip the server sends encrypted reasoning unasked, so
            // it is the harness that keeps it from going back.
            let model = ResponsesModel::start_with(
                stream,
                vec![
                    RTurn::Reply {
                        reasoning: Some("Read the config first.".into()),
                        text: String::new(),
                        calls: vec![read],
                    },
                    RTurn::Reply {
                        reasoning: Some("It says 8080.".into()),
                        text: "Port 8080.".into(),
                        calls: vec![],
                    },
                ],
                !keep,
            )
            .await;
            let r = run_responses(&model, &ws, &["--expect", "observe", "Which port?"]).await;
            let case = format!("stream={stream} keep={keep}");
            model.assert_valid();
            assert_eq!(r.state(), "completed", "{case} {}", r.describe());
            let requests = model.requests();
            let input = model.input(1);
            let reasoning = of_type(&input, "reasoning");
            let log = serde_json::to_string(&ws.log_entries()).unwrap();
            if keep {
                for req in &requests {
                    assert_eq!(
                        req["include"],
                        json!(["reasoning.encrypted_content"]),
                        "{case}"
                    );
                }
                assert_eq!(reasoning.len(), 1, "{case}: {input:#?}");
                let blob = reasoning[0]["encrypted_content"].as_str().unwrap();
                assert!(model.issued().contains(blob), "passed back verbatim");
                assert!(reasoning[0].get("id").is_none());
                // Right before the call it led to.
                let at = input.iter().position(|i| i["type"] == "reasoning").unwrap();
                assert_eq!(input[at + 1]["type"], "function_call");
                assert_eq!(input[at + 1]["call_id"], id.as_str());
                assert!(log.contains(blob), "{case}: kept in the transcript");
            } else {
                assert!(
                    requests.iter().all(|r| r.get("include").is_none()),
                    "{case}"
                );
                assert!(reasoning.is_empty(), "{case}: {input:#?}");
                assert!(!log.contains("encrypted_reasoning"), "{case}");
            }
            // Reasoning text never goes back, whatever the policy.
            assert!(
                !requests[1].to_string().contains("Read the config first."),
                "{case}"
            );
        }
    }
}

#[tokio::test]
async fn an_incomplete_response_does_not_complete_the_run_and_its_cut_call_never_runs() {
    for stream in [false, true] {
        let ws = TestWorkspace::new();
        let cut_off = RTurn::Incomplete {
            reason: "max_output_tokens",
            text: String::new(),
            cut: Some(call(
                "write_file",
                json!({"path": "x.txt", "content": "half a file"}),
            )),
        };
        let model = ResponsesModel::start(stream, vec![cut_off.clone(), cut_off]).await;
        let r = run_responses(&model, &ws, &["--approval", "allow", "Write x.txt"]).await;
        model.assert_valid();
        // A cut-off response is asked to continue once; cut off again, the
        // run is incomplete (issue 12 hole 5). The cut call never runs.
        assert_eq!(r.state(), "incomplete", "stream={stream} {}", r.describe());
        assert_eq!(r.reason(), "truncated");
        assert_eq!(r.of_type("continuation_requested").len(), 1);
        assert!(r.of_type("tool_started").is_empty());
        assert!(!ws.path().join("x.txt").exists());
        let resp = traces(&ws, "response");
        assert_eq!(resp.len(), 2);
        assert_eq!(resp[0]["raw_finish_reason"], "max_output_tokens");
        assert!(resp[0]["parsed_calls"].as_array().unwrap().is_empty());
        let failures = resp[0]["parse_failures"].to_string();
        assert!(
            failures.contains("write_file") && failures.contains("cut off"),
            "{failures}"
        );
    }
}

#[tokio::test]
async fn a_failed_response_fails_the_run_after_the_configured_retries() {
    for stream in [false, true] {
        // Server errors are retried: 1 try + 2 retries (config max_retries = 2).
        let ws = TestWorkspace::new();
        let model = ResponsesModel::start(
            stream,
            vec![
                RTurn::Failed {
                    code: "server_error"
                };
                3
            ],
        )
        .await;
        let r = run_responses(&model, &ws, &["Say hello"]).await;
        model.assert_valid();
        assert_eq!(r.code, 5, "stream={stream} {}", r.describe());
        assert_eq!(r.state(), "failed");
        assert_eq!(r.reason(), "provider_error");
        assert_eq!(r.of_type("provider_retry").len(), 2);
        assert_eq!(model.requests().len(), 3);
        assert!(r.done()["answer"].is_null());
        let errors = traces(&ws, "provider_error");
        assert!(errors.iter().all(|e| e["retryable"] == true), "{errors:?}");
        assert!(errors[0]["error"]
            .as_str()
            .unwrap()
            .contains("scripted failure server_error"));

        // An invalid prompt is not.
        let ws = TestWorkspace::new();
        let model = ResponsesModel::start(
            stream,
            vec![RTurn::Failed {
                code: "invalid_prompt",
            }],
        )
        .await;
        let r = run_responses(&model, &ws, &["Say hello"]).await;
        assert_eq!(r.state(), "failed", "stream={stream} {}", r.describe());
        assert_eq!(r.reason(), "provider_error");
        assert!(r.of_type("provider_retry").is_empty());
        assert_eq!(model.requests().len(), 1);

        // A rate-limit error (an `error` event, or a 429) is retried and the run goes on.
        let ws = TestWorkspace::new();
        let model = ResponsesModel::start(
            stream,
            vec![
                RTurn::Error {
                    code: "rate_limit_exceeded",
                },
                RTurn::text("Hello."),
            ],
        )
        .await;
        let r = run_responses(&model, &ws, &["Say hello"]).await;
        model.assert_valid();
        assert_eq!(r.state(), "completed", "stream={stream} {}", r.describe());
        assert_eq!(r.of_type("provider_retry").len(), 1);
    }
}

#[tokio::test]
async fn a_stream_without_its_terminator_is_retried_and_its_half_call_never_runs() {
    let ws = TestWorkspace::new();
    let model = ResponsesModel::start(
        true,
        vec![
            RTurn::Broken {
                text: "Writing".into(),
                calls: vec![call("write_file", json!({"path": "x.txt", "content": "x"}))],
            },
            RTurn::text("Done."),
        ],
    )
    .await;
    let r = run_responses(&model, &ws, &["--approval", "allow", "Say done"]).await;
    model.assert_valid();
    assert_eq!(r.state(), "completed", "{}", r.describe());
    assert_eq!(r.of_type("provider_retry").len(), 1);
    assert!(r.of_type("tool_started").is_empty());
    assert!(!ws.path().join("x.txt").exists());
}

#[tokio::test]
async fn an_unpaired_output_never_reaches_the_server() {
    use attest_store::Store;
    let ws = TestWorkspace::new();
    let sleep = call("shell", json!({"command": "sleep 30"}));
    let id = sleep.id.clone();
    let model = ResponsesModel::start(
        true,
        vec![
            RTurn::calls("", vec![sleep]),
            RTurn::text("The sleep was interrupted before it finished."),
        ],
    )
    .await;
    // Killed while the call runs: the log has the call and no output.
    let printed = run_and_kill(
        &model,
        &ws,
        &["--approval", "allow", "Sleep"],
        "\"type\":\"tool_started\"",
    )
    .await;
    let run_id = serde_json::from_str::<Value>(&printed[0]).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    // And a damaged log adds an output whose call was never made.
    ws.store()
        .append(
            &run_id,
            &attest_protocol::LogEntry::Item {
                item: attest_protocol::TranscriptItem::ToolResult {
                    call_id: "call_ghost".into(),
                    name: "shell".into(),
                    status: attest_protocol::ReceiptStatus::Ok,
                    output: "ghost output".into(),
                    receipt: None,
                },
            },
        )
        .unwrap();

    let r = run_binary(
        [
            "resume",
            &run_id,
            "--json",
            "--base-url",
            &model.base_url(),
            "-C",
            &ws.path().display().to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        &[],
    )
    .await;
    // The server would have answered 400 to an unpaired output or call.
    model.assert_valid();
    assert_eq!(r.state(), "completed", "{}", r.describe());
    let input = model.input(1);
    assert!(!serde_json::to_string(&input)
        .unwrap()
        .contains("call_ghost"));
    let outputs = of_type(&input, "function_call_output");
    assert_eq!(outputs.len(), 1, "{input:#?}");
    assert_eq!(outputs[0]["call_id"], id.as_str());
    assert!(
        outputs[0]["output"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("interrupted"),
        "{outputs:?}"
    );
    let notes = traces(&ws, "request").last().unwrap()["pairing_notes"].to_string();
    assert!(
        notes.contains("orphan result for call `call_ghost`"),
        "{notes}"
    );
}

/// The scripted server itself: what it must refuse, as the real service does.
#[test]
fn the_scripted_server_rejects_what_the_real_service_rejects() {
    let issued: HashSet<String> = ["enc-1".to_string()].into();
    let user = json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]});
    let fc = |id: &str| json!({"type": "function_call", "call_id": id, "name": "read_file", "arguments": "{}"});
    let out = |id: &str| json!({"type": "function_call_output", "call_id": id, "output": "x"});
    let body = |input: Vec<Value>| json!({"model": "m", "input": input, "store": false});
    let ok = |input: Vec<Value>| validate(&body(input), false, &issued);

    assert_eq!(ok(vec![user.clone(), fc("a"), out("a")]), Ok(()));
    let reasoning = json!({"type": "reasoning", "summary": [], "encrypted_content": "enc-1"});
    assert_eq!(
        ok(vec![user.clone(), reasoning.clone(), fc("a"), out("a")]),
        Ok(())
    );

    let rejected = [
        ("output without its call", vec![user.clone(), out("a")]),
        ("call without its output", vec![user.clone(), fc("a")]),
        (
            "call without output before the next message",
            vec![fc("a"), user.clone(), out("a")],
        ),
        (
            "missing call_id",
            vec![
                user.clone(),
                json!({"type": "function_call", "name": "f", "arguments": "{}"}),
            ],
        ),
        (
            "output missing call_id",
            vec![
                fc("a"),
                json!({"type": "function_call_output", "output": "x"}),
            ],
        ),
        (
            "unknown item type",
            vec![user.clone(), json!({"type": "tool_result", "call_id": "a"})],
        ),
        (
            "item id with store false",
            vec![json!({"type": "message", "id": "msg_1", "role": "user", "content": "hi"})],
        ),
        (
            "reasoning not issued",
            vec![
                json!({"type": "reasoning", "summary": [], "encrypted_content": "forged"}),
                fc("a"),
                out("a"),
            ],
        ),
        (
            "reasoning without encrypted content",
            vec![
                json!({"type": "reasoning", "summary": []}),
                fc("a"),
                out("a"),
            ],
        ),
        (
            "reasoning without a following item",
            vec![user.clone(), reasoning],
        ),
        (
            "assistant with input_text",
            vec![
                json!({"type": "message", "role": "assistant", "content": [{"type": "input_text", "text": "x"}]}),
            ],
        ),
        ("duplicate output", vec![fc("a"), out("a"), out("a")]),
    ];
    for (what, input) in rejected {
        assert!(ok(input).is_err(), "{what} was accepted");
    }
    let mut unknown = body(vec![user.clone()]);
    unknown["max_tokens"] = json!(100);
    assert!(
        validate(&unknown, false, &issued).is_err(),
        "unknown parameter"
    );
    let mut low = body(vec![user]);
    low["max_output_tokens"] = json!(8);
    assert!(
        validate(&low, false, &issued).is_err(),
        "max_output_tokens below 16"
    );
}
