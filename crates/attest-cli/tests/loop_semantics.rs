//! Items 1–14 of the core-engine issue, each through the real binary against
//! a scripted model server, for both wire protocols, streaming and not.

mod common;

use common::*;
use serde_json::json;

/// Command tools used by several tests, in config form.
const DELIVER_TOOL: &str = r#"
[[tools]]
name = "send_message"
description = "Send a chat message to a user"
effect = "deliver"
command = ["sh", "-c", "cat > sent.json; printf '{\"message_id\":\"m-42\"}'"]
parameters = { type = "object", properties = { to = { type = "string" }, text = { type = "string" } }, required = ["to", "text"] }
evidence = "/message_id"
permission = "allow"
"#;

const DELIVER_TOOL_NO_ID: &str = r#"
[[tools]]
name = "send_message"
description = "Send a chat message to a user"
effect = "deliver"
command = ["sh", "-c", "cat > sent.json; printf '{\"status\":\"queued\"}'"]
parameters = { type = "object", properties = { to = { type = "string" }, text = { type = "string" } }, required = ["to", "text"] }
evidence = "/message_id"
permission = "allow"
"#;

const FAILING_OBSERVE_TOOL: &str = r#"
[[tools]]
name = "fetch_prices"
description = "Fetch current prices"
effect = "observe"
command = ["sh", "-c", "cat >/dev/null; echo 'upstream returned 503' >&2; exit 1"]
parameters = { type = "object", properties = { symbol = { type = "string" } }, required = ["symbol"] }
"#;

#[tokio::test]
async fn item01_honest_tool_use_then_answer_completes_with_receipts() {
    for v in VARIANTS {
        let ws = TestWorkspace::new();
        let read = call("read_file", json!({"path": "config.toml"}));
        let id = read.id.clone();
        let model = MockModel::start(
            v,
            vec![
                Turn::calls("Let me read the config.", vec![read]),
                Turn::text("config.toml configures port 8080."),
            ],
        )
        .await;
        let r = run_attest(
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
        assert_eq!(r.code, 0, "{v:?} {}", r.describe());
        assert_eq!(r.state(), "completed");
        assert_eq!(r.reason(), "contract_satisfied");
        let done = r.done();
        assert_eq!(done["answer"], "config.toml configures port 8080.");
        assert_eq!(done["receipts"][0]["tool_name"], "read_file");
        assert_eq!(done["receipts"][0]["verification_status"], "verified");
        assert_eq!(done["receipts"][0]["evidence"]["size_bytes"], 21);
        assert_eq!(r.of_type("final").len(), 1);
        assert_eq!(r.events[0]["type"], "run_started");
        for (i, e) in r.events.iter().enumerate() {
            assert_eq!(e["seq"], (i + 1) as u64);
            assert!(e["run_id"].is_string());
        }
        // The second request carries the call and the real file content as its result.
        let results = model.tool_results(1);
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].0, id);
        assert!(results[0].1.contains("port = 8080"), "{results:?}");
        assert!(done["loop_version"].is_string() && done["prompt_version"].is_string());
    }
}

#[tokio::test]
async fn item02_claimed_observation_gets_one_corrective_turn_then_completes_or_is_unverified() {
    for v in VARIANTS {
        // The model recovers after the corrective turn.
        let ws = TestWorkspace::new();
        let model = MockModel::start(
            v,
            vec![
                Turn::text("I read the file: the port is 8080."),
                Turn::tool("read_file", json!({"path": "config.toml"})),
                Turn::text("The port is 8080."),
            ],
        )
        .await;
        let r = run_attest(&model, &ws, &["--expect", "observe", "Which port?"]).await;
        model.assert_valid();
        assert_eq!(r.state(), "completed", "{v:?} {}", r.describe());
        assert_eq!(r.of_type("corrective_injected").len(), 1);
        let second = model.request_text(1);
        assert!(
            second.contains("[attest] Evidence check:"),
            "corrective turn missing: {second}"
        );

        // The model keeps claiming.
        let ws = TestWorkspace::new();
        let model = MockModel::start(
            v,
            vec![
                Turn::text("I read the file: the port is 8080."),
                Turn::text("I already read it; it is 8080."),
            ],
        )
        .await;
        let r = run_attest(&model, &ws, &["--expect", "observe", "Which port?"]).await;
        model.assert_valid();
        assert_eq!(r.code, 3, "{v:?} {}", r.describe());
        assert_eq!(r.state(), "unverified");
        assert_eq!(r.reason(), "missing_receipt");
        assert!(r.of_type("final").is_empty());
        assert_eq!(model.requests().len(), 2, "exactly one corrective turn");
    }
}

#[tokio::test]
async fn item02_human_output_shows_the_unverified_banner() {
    let v = VARIANTS[1];
    let ws = TestWorkspace::new();
    let model =
        MockModel::start(v, vec![Turn::text("I read it: 8080."), Turn::text("8080.")]).await;
    let r = run_attest_human(&model, &ws, &["--expect", "observe", "Which port?"]).await;
    assert_eq!(r.code, 3, "{}", r.describe());
    assert!(r.stdout.starts_with("UNVERIFIED"), "{}", r.stdout);
    assert!(r.stdout.contains("observe"), "{}", r.stdout);
    assert!(r.stderr.contains("corrective turn"), "{}", r.stderr);
}

#[tokio::test]
async fn item03_deliver_claims_without_a_receipt_or_its_evidence_are_unverified() {
    for v in VARIANTS {
        // Claimed "sent" without calling anything.
        let ws = TestWorkspace::new();
        ws.append_config(DELIVER_TOOL);
        let model = MockModel::start(
            v,
            vec![Turn::text("Sent!"), Turn::text("Yes, it was sent.")],
        )
        .await;
        let r = run_attest(&model, &ws, &["--expect", "deliver", "Tell bob hi"]).await;
        model.assert_valid();
        assert_eq!(r.state(), "unverified", "{v:?} {}", r.describe());
        assert!(!ws.path().join("sent.json").exists());

        // Called the tool, but its result lacks the message id.
        let ws = TestWorkspace::new();
        ws.append_config(DELIVER_TOOL_NO_ID);
        let model = MockModel::start(
            v,
            vec![
                Turn::tool("send_message", json!({"to": "bob", "text": "hi"})),
                Turn::text("Sent to bob."),
            ],
        )
        .await;
        let r = run_attest(&model, &ws, &["--expect", "deliver", "Tell bob hi"]).await;
        model.assert_valid();
        assert_eq!(r.state(), "unverified", "{v:?} {}", r.describe());
        assert_eq!(
            r.done()["receipts"][0]["verification_status"],
            "missing_evidence"
        );
        assert_eq!(
            model.requests().len(),
            2,
            "no corrective turn that could repeat a delivery"
        );

        // With the message id, it completes.
        let ws = TestWorkspace::new();
        ws.append_config(DELIVER_TOOL);
        let model = MockModel::start(
            v,
            vec![
                Turn::tool("send_message", json!({"to": "bob", "text": "hi"})),
                Turn::text("Sent to bob."),
            ],
        )
        .await;
        let r = run_attest(&model, &ws, &["--expect", "deliver", "Tell bob hi"]).await;
        assert_eq!(r.state(), "completed", "{v:?} {}", r.describe());
        assert_eq!(r.done()["receipts"][0]["evidence"]["message_id"], "m-42");
        let sent: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(ws.path().join("sent.json")).unwrap())
                .unwrap();
        assert_eq!(sent, json!({"to": "bob", "text": "hi"}));
    }
}

#[tokio::test]
async fn item04_tool_use_finish_without_a_parsable_call_is_a_protocol_error() {
    for v in VARIANTS {
        let ws = TestWorkspace::new();
        let finish = if v.wire == Wire::OpenAi {
            "tool_calls"
        } else {
            "tool_use"
        };
        let model = MockModel::start(
            v,
            vec![Turn::Reply {
                text: "I'll read the file and it says 8080.".into(),
                calls: vec![],
                finish: Some(finish),
            }],
        )
        .await;
        let r = run_attest(&model, &ws, &["Which port?"]).await;
        model.assert_valid();
        assert_eq!(r.code, 5, "{v:?} {}", r.describe());
        assert_eq!(r.state(), "failed");
        assert_eq!(r.reason(), "protocol_error");
        assert_eq!(r.of_type("protocol_error").len(), 1);
        assert!(r.of_type("final").is_empty());
    }
}

#[tokio::test]
async fn item05_malformed_arguments_become_an_error_result_and_the_run_can_recover() {
    for v in VARIANTS {
        let ws = TestWorkspace::new();
        // Anthropic's non-streamed tool input is always an object; a schema violation stands in.
        let bad = if v.wire == Wire::Anthropic && !v.stream {
            raw_call("read_file", r#"{"file": "config.toml"}"#)
        } else {
            raw_call("read_file", r#"{"path": "config.toml""#)
        };
        let bad_id = bad.id.clone();
        let model = MockModel::start(
            v,
            vec![
                Turn::calls("", vec![bad]),
                Turn::tool("read_file", json!({"path": "config.toml"})),
                Turn::text("Port 8080."),
            ],
        )
        .await;
        let r = run_attest(&model, &ws, &["--expect", "observe", "Which port?"]).await;
        model.assert_valid();
        assert_eq!(r.state(), "completed", "{v:?} {}", r.describe());
        let results = model.tool_results(1);
        assert_eq!(results[0].0, bad_id);
        assert!(results[0].1.contains("invalid arguments"), "{results:?}");
        assert_eq!(r.done()["receipts"][0]["status"], "invalid_arguments");
    }
}

#[tokio::test]
async fn item06_max_steps_is_incomplete_and_narration_is_not_an_answer() {
    for v in VARIANTS {
        let ws = TestWorkspace::new();
        let model = MockModel::start(
            v,
            vec![
                Turn::calls(
                    "Let me look around first.",
                    vec![call("list_dir", json!({"path": "."}))],
                ),
                Turn::calls(
                    "Now I will read the config, then answer.",
                    vec![call("read_file", json!({"path": "config.toml"}))],
                ),
            ],
        )
        .await;
        let r = run_attest(
            &model,
            &ws,
            &["--max-steps", "2", "--expect", "observe", "Which port?"],
        )
        .await;
        model.assert_valid();
        assert_eq!(r.code, 4, "{v:?} {}", r.describe());
        assert_eq!(r.state(), "incomplete");
        assert_eq!(r.reason(), "max_steps");
        assert!(
            r.done()["answer"].is_null(),
            "narration promoted: {}",
            r.done()
        );
        assert!(r.of_type("final").is_empty());
        assert_eq!(r.of_type("progress").len(), 2);
    }
}

#[tokio::test]
async fn item07_provider_errors_are_retried_with_backoff_then_fail() {
    for v in VARIANTS {
        let ws = TestWorkspace::new();
        let model = MockModel::start(
            v,
            vec![
                Turn::Status {
                    code: 429,
                    retry_after: Some("0"),
                },
                Turn::Status {
                    code: 503,
                    retry_after: None,
                },
                Turn::text("Hello."),
            ],
        )
        .await;
        let r = run_attest(&model, &ws, &["Say hello"]).await;
        model.assert_valid();
        assert_eq!(r.state(), "completed", "{v:?} {}", r.describe());
        let retries = r.of_type("provider_retry");
        assert_eq!(retries.len(), 2);
        assert_eq!(retries[0]["delay_ms"], 0, "retry-after: 0 honoured");
        assert_eq!(
            retries[1]["delay_ms"], 20,
            "exponential backoff: 10 ms, then 20 ms"
        );

        // Exhausted: 1 try + 2 retries (config max_retries = 2).
        let ws = TestWorkspace::new();
        let model = MockModel::start(
            v,
            vec![
                Turn::Status {
                    code: 500,
                    retry_after: None
                };
                3
            ],
        )
        .await;
        let r = run_attest(&model, &ws, &["Say hello"]).await;
        assert_eq!(r.code, 5, "{v:?} {}", r.describe());
        assert_eq!(r.state(), "failed");
        assert_eq!(r.reason(), "provider_error");
        assert_eq!(model.requests().len(), 3);

        // A 400 is not retried.
        let ws = TestWorkspace::new();
        let model = MockModel::start(
            v,
            vec![Turn::Status {
                code: 400,
                retry_after: None,
            }],
        )
        .await;
        let r = run_attest(&model, &ws, &["Say hello"]).await;
        assert_eq!(r.reason(), "provider_error");
        assert_eq!(model.requests().len(), 1);
    }
}

#[tokio::test]
async fn item08_a_stream_without_its_terminator_is_an_error_and_no_half_call_runs() {
    for v in STREAM_VARIANTS {
        // Broken once, then a proper answer: retried and completed; the half call never ran.
        let ws = TestWorkspace::new();
        let model = MockModel::start(
            v,
            vec![
                Turn::BrokenStream {
                    text: "Writing".into(),
                    calls: vec![call("write_file", json!({"path": "x.txt", "content": "x"}))],
                },
                Turn::text("Done."),
            ],
        )
        .await;
        let r = run_attest(&model, &ws, &["--approval", "allow", "Say done"]).await;
        model.assert_valid();
        assert_eq!(r.state(), "completed", "{v:?} {}", r.describe());
        assert_eq!(r.of_type("provider_retry").len(), 1);
        assert!(r.of_type("tool_started").is_empty());
        assert!(!ws.path().join("x.txt").exists());

        // Broken every time: failed, provider_error, never completed.
        let ws = TestWorkspace::new();
        let model = MockModel::start(
            v,
            vec![
                Turn::BrokenStream {
                    text: "The answer is".into(),
                    calls: vec![]
                };
                3
            ],
        )
        .await;
        let r = run_attest(&model, &ws, &["Say done"]).await;
        assert_eq!(r.state(), "failed", "{v:?} {}", r.describe());
        assert_eq!(r.reason(), "provider_error");
        assert!(r.done()["answer"].is_null());
    }
}

#[tokio::test]
async fn item09_plain_questions_under_the_answer_contract_complete_without_tools() {
    for v in VARIANTS {
        let ws = TestWorkspace::new();
        let model = MockModel::start(v, vec![Turn::text("Paris is the capital of France.")]).await;
        let r = run_attest(&model, &ws, &["What is the capital of France?"]).await;
        model.assert_valid();
        assert_eq!(r.code, 0, "{v:?} {}", r.describe());
        assert_eq!(r.state(), "completed");
        assert!(r.of_type("corrective_injected").is_empty());
        assert_eq!(
            r.of_type("final")[0]["answer"],
            "Paris is the capital of France."
        );
    }
}

#[tokio::test]
async fn item10_parallel_calls_are_all_executed_and_paired() {
    for v in VARIANTS {
        let ws = TestWorkspace::new();
        ws.write("a.txt", "alpha");
        ws.write("b.txt", "beta");
        let a = call("read_file", json!({"path": "a.txt"}));
        let b = call("read_file", json!({"path": "b.txt"}));
        let c = call("grep", json!({"pattern": "port"}));
        let ids = [a.id.clone(), b.id.clone(), c.id.clone()];
        let model = MockModel::start(
            v,
            vec![
                Turn::calls("Reading all.", vec![a, b, c]),
                Turn::text("alpha, beta, port."),
            ],
        )
        .await;
        let r = run_attest(&model, &ws, &["--expect", "observe", "Read both"]).await;
        model.assert_valid();
        assert_eq!(r.state(), "completed", "{v:?} {}", r.describe());
        assert_eq!(r.of_type("tool_result").len(), 3);
        let results = model.tool_results(1);
        let got: Vec<&str> = results.iter().map(|(id, _, _)| id.as_str()).collect();
        assert_eq!(got, ids.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(results[0].1.contains("alpha") && results[1].1.contains("beta"));
        assert!(
            results[2].1.contains("config.toml:2:port = 8080"),
            "{results:?}"
        );
    }
}

#[tokio::test]
async fn item11_ask_tools_are_denied_non_interactively_and_the_run_fails_approval_denied() {
    for v in VARIANTS {
        let ws = TestWorkspace::new();
        let model = MockModel::start(
            v,
            vec![
                Turn::tool("shell", json!({"command": "touch made-by-shell"})),
                Turn::text("I created the file."),
            ],
        )
        .await;
        let r = run_attest(&model, &ws, &["--expect", "mutate", "Create made-by-shell"]).await;
        model.assert_valid();
        assert_eq!(r.code, 5, "{v:?} {}", r.describe());
        assert_eq!(r.state(), "failed");
        assert_eq!(r.reason(), "approval_denied");
        assert!(
            !ws.path().join("made-by-shell").exists(),
            "a denied tool ran"
        );
        assert!(r.of_type("tool_started").is_empty());
        assert_eq!(r.of_type("approval_requested").len(), 1);
        assert_eq!(r.of_type("approval_resolved")[0]["approved"], false);
        let results = model.tool_results(1);
        assert!(results[0].1.contains("NOT EXECUTED"), "{results:?}");
        let log = ws.log_entries();
        assert!(log
            .iter()
            .any(|e| e["trace"]["record"] == "permission_decision"
                && e["trace"]["approved"] == false));

        // With --approval allow the same call runs and completes.
        let ws = TestWorkspace::new();
        let model = MockModel::start(
            v,
            vec![
                Turn::tool("shell", json!({"command": "touch made-by-shell"})),
                Turn::text("I created the file."),
            ],
        )
        .await;
        let r = run_attest(
            &model,
            &ws,
            &[
                "--expect",
                "mutate",
                "--approval",
                "allow",
                "Create made-by-shell",
            ],
        )
        .await;
        assert_eq!(r.state(), "completed", "{v:?} {}", r.describe());
        assert!(ws.path().join("made-by-shell").exists());
        assert_eq!(r.done()["receipts"][0]["evidence"]["exit_code"], 0);
    }
}

#[tokio::test]
async fn item12_imitated_tool_results_are_flagged_and_never_replayed() {
    for v in VARIANTS {
        let ws = TestWorkspace::new();
        let model = MockModel::start(
            v,
            vec![
                Turn::text("Action: read_file\nObservation: {\"count\": 0, \"port\": 9999}\nThe port is 9999."),
                Turn::tool("read_file", json!({"path": "config.toml"})),
                Turn::text("The port is 8080."),
            ],
        )
        .await;
        let r = run_attest(&model, &ws, &["--expect", "observe", "Which port?"]).await;
        model.assert_valid();
        assert_eq!(r.state(), "completed", "{v:?} {}", r.describe());
        assert_eq!(r.done()["answer"], "The port is 8080.");
        let pe = r.of_type("protocol_error");
        assert_eq!(pe.len(), 1);
        assert_eq!(pe[0]["kind"], "forged_observation");
        for i in 1..model.requests().len() {
            let text = model.request_text(i);
            assert!(
                !text.contains("9999"),
                "forged value replayed in request {i}: {text}"
            );
            assert!(
                !text.contains("\\\"count\\\": 0"),
                "forged value replayed: {text}"
            );
        }
        assert!(model
            .request_text(1)
            .contains("broke the protocol and was omitted"));
        let log = ws.log_entries();
        assert!(
            log.iter()
                .any(|e| e["trace"]["record"] == "protocol_violation"
                    && e["trace"]["kind"] == "forged_observation"),
            "violation recorded in the trace"
        );
        assert!(
            ws.artifacts()
                .iter()
                .any(|a| a.kind == "protocol_violation" && a.body.contains("9999")),
            "raw text kept as an audit artifact"
        );
        assert!(
            !log.iter()
                .any(|e| e["entry"] == "item" && e.to_string().contains("9999")),
            "forged text in the transcript"
        );
    }
}

#[tokio::test]
async fn item13_ctrl_c_cancels_and_interrupts_the_in_flight_call() {
    for v in [VARIANTS[0], VARIANTS[3]] {
        let ws = TestWorkspace::new();
        let model = MockModel::start(
            v,
            vec![
                Turn::tool("shell", json!({"command": "sleep 30"})),
                Turn::text("never"),
            ],
        )
        .await;
        let (code, lines) = run_and_signal(
            &model,
            &ws,
            &["--approval", "allow", "Sleep"],
            "-INT",
            "\"type\":\"tool_started\"",
        )
        .await;
        assert_eq!(code, Some(130), "{v:?} {lines:#?}");
        let done: serde_json::Value = serde_json::from_str(lines.last().unwrap()).unwrap();
        assert_eq!(done["state"], "cancelled");
        assert_eq!(done["reason"], "user_cancelled");
        assert_eq!(done["receipts"][0]["status"], "interrupted");
        let log = ws.log_entries();
        assert!(log
            .iter()
            .any(|e| e["item"]["type"] == "tool_result" && e["item"]["status"] == "interrupted"));
    }
}

#[tokio::test]
async fn item14_every_needed_attempt_failed_so_the_run_fails_whatever_the_answer_says() {
    for v in VARIANTS {
        let ws = TestWorkspace::new();
        ws.append_config(FAILING_OBSERVE_TOOL);
        let model = MockModel::start(
            v,
            vec![
                Turn::tool("fetch_prices", json!({"symbol": "ACME"})),
                Turn::text("ACME trades at 42."),
            ],
        )
        .await;
        let r = run_attest(&model, &ws, &["--expect", "observe", "Price of ACME?"]).await;
        model.assert_valid();
        assert_eq!(r.code, 5, "{v:?} {}", r.describe());
        assert_eq!(r.state(), "failed");
        assert_eq!(r.reason(), "tool_failure");
        let results = model.tool_results(1);
        assert!(results[0].1.contains("TOOL FAILED"), "{results:?}");
        assert!(
            results[0].1.contains("upstream returned 503"),
            "{results:?}"
        );
        assert!(results[0].1.contains("not an empty result"), "{results:?}");
        if v.wire == Wire::Anthropic {
            assert!(results[0].2, "Anthropic tool_result must carry is_error");
        }

        // An observed absence is a receipt, not a failure.
        let ws = TestWorkspace::new();
        let model = MockModel::start(
            v,
            vec![
                Turn::tool("read_file", json!({"path": "missing.toml"})),
                Turn::text("There is no missing.toml."),
            ],
        )
        .await;
        let r = run_attest(
            &model,
            &ws,
            &["--expect", "observe", "Does missing.toml exist?"],
        )
        .await;
        assert_eq!(r.state(), "completed", "{v:?} {}", r.describe());
        assert_eq!(r.done()["receipts"][0]["evidence"]["absent"], true);
    }
}
