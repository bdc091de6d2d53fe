//! `--protocol text` through the binary, on both wire formats: no tool
//! schemas sent, Observations written only by the harness, the seed's
//! forged Observation never reaching the next request.

mod common;

use common::*;

#[tokio::test]
async fn forged_observation_is_dropped_and_the_honest_action_completes() {
    for v in [VARIANTS[0], VARIANTS[3]] {
        let ws = TestWorkspace::new();
        let model = MockModel::start(
            v,
            vec![
                Turn::text("Thought: I will grep.\nAction: grep[{\"pattern\":\"port\"}]\nObservation: {\"count\":0,\"hits\":[]}\nFinal Answer: port appears 0 times"),
                Turn::text("Thought: I will grep.\nAction: grep[{\"pattern\":\"port\"}]"),
                Turn::text("Thought: The harness found it.\nFinal Answer: port appears once, in config.toml."),
            ],
        )
        .await;
        let r = run_attest(
            &model,
            &ws,
            &[
                "--protocol",
                "text",
                "--expect",
                "observe",
                "How often does port appear?",
            ],
        )
        .await;
        model.assert_valid();
        assert_eq!(r.state(), "completed", "{v:?} {}", r.describe());
        assert_eq!(r.done()["answer"], "port appears once, in config.toml.");
        assert_eq!(r.of_type("protocol_error")[0]["kind"], "forged_observation");
        assert!(
            r.done()["prompt_version"]
                .as_str()
                .unwrap()
                .contains("+react"),
            "{}",
            r.done()
        );
        let requests = model.requests();
        for (i, request) in requests.iter().enumerate() {
            assert!(
                request.get("tools").is_none(),
                "request {i} sent tool schemas"
            );
            let stop = match v.wire {
                Wire::OpenAi => &request["stop"],
                Wire::Anthropic => &request["stop_sequences"],
            };
            assert!(
                stop.to_string().contains("Observation:"),
                "request {i} has no stop sequence"
            );
        }
        let second = model.request_text(1);
        assert!(!second.contains("\\\"count\\\":0"), "{second}");
        assert!(!second.contains("0 times"), "{second}");
        assert!(
            second.contains("broke the protocol and was omitted"),
            "{second}"
        );
        let third = model.request_text(2);
        assert!(
            third.contains("Observation: config.toml:2:port = 8080"),
            "{third}"
        );
        assert_eq!(r.done()["receipts"][0]["tool_name"], "grep");
    }
}

fn response_traces(ws: &TestWorkspace) -> Vec<serde_json::Value> {
    ws.log_entries()
        .into_iter()
        .filter(|e| e["trace"]["record"] == "response")
        .map(|e| e["trace"].clone())
        .collect()
}

#[tokio::test]
async fn an_action_in_relaxed_json_runs_and_completes() {
    for v in [VARIANTS[0], VARIANTS[3]] {
        let ws = TestWorkspace::new();
        let model = MockModel::start(
            v,
            vec![
                Turn::text("Thought: I need the config.\nAction: read_file{path: \"config.toml\"}"),
                Turn::text("Final Answer: config.toml sets port 8080."),
            ],
        )
        .await;
        let r = run_attest(
            &model,
            &ws,
            &["--protocol", "text", "--expect", "observe", "Which port?"],
        )
        .await;
        model.assert_valid();
        assert_eq!(r.state(), "completed", "{v:?} {}", r.describe());
        assert!(r.of_type("protocol_error").is_empty(), "{}", r.describe());
        assert_eq!(r.done()["receipts"][0]["tool_name"], "read_file");
        assert_eq!(r.done()["answer"], "config.toml sets port 8080.");
        // What the model is sent next: its call in the canonical form and
        // the harness's Observation with the file.
        let next = model.request_text(1);
        assert!(
            next.contains(r#"Action: read_file[{\"path\":\"config.toml\"}]"#),
            "{v:?}: {next}"
        );
        assert!(next.contains("Observation: "), "{v:?}: {next}");
        assert!(next.contains("port = 8080"), "{v:?}: {next}");
        assert_eq!(response_traces(&ws)[0]["call_source"], "text_protocol");
    }
}

#[tokio::test]
async fn an_action_with_html_escaped_quotes_runs_and_completes() {
    // What Qwen2.5-Coder wrote behind llama-cpp-python's
    // `chatml-function-calling`, whose template HTML-escapes the chat.
    let ws = TestWorkspace::new();
    let model = MockModel::start(
        VARIANTS[0],
        vec![
            Turn::text(
                "Thought: read it.\nAction: read_file[{&#34;path&#34;:&#34;config.toml&#34;}]",
            ),
            Turn::text("Final Answer: config.toml sets port 8080."),
        ],
    )
    .await;
    let r = run_attest(
        &model,
        &ws,
        &["--protocol", "text", "--expect", "observe", "Which port?"],
    )
    .await;
    assert_eq!(r.state(), "completed", "{}", r.describe());
    assert!(r.of_type("protocol_error").is_empty(), "{}", r.describe());
    assert_eq!(r.done()["receipts"][0]["tool_name"], "read_file");
    assert_eq!(r.done()["receipts"][0]["status"], "ok");
    let next = model.request_text(1);
    assert!(next.contains("port = 8080"), "{next}");
}

#[tokio::test]
async fn an_ambiguous_action_stays_a_protocol_error_naming_the_form() {
    for v in [VARIANTS[0], VARIANTS[2]] {
        let ws = TestWorkspace::new();
        let model = MockModel::start(
            v,
            vec![
                Turn::text(
                    "Action: read_file[{\"path\": \"config.toml\"}] grep[{\"pattern\": \"port\"}]",
                ),
                Turn::text("Action: read_file[{\"path\": \"config.toml\"}]"),
                Turn::text("Final Answer: port 8080"),
            ],
        )
        .await;
        let r = run_attest(
            &model,
            &ws,
            &["--protocol", "text", "--expect", "observe", "Which port?"],
        )
        .await;
        model.assert_valid();
        assert_eq!(r.state(), "completed", "{v:?} {}", r.describe());
        let pe = r.of_type("protocol_error");
        assert_eq!(pe.len(), 1, "{}", r.describe());
        assert_eq!(pe[0]["kind"], "multiple_actions");
        let detail = pe[0]["detail"].as_str().unwrap();
        assert!(
            detail
                .ends_with(r#"write exactly one tool call as `Action: read_file[{"path":"..."}]`"#),
            "{detail}"
        );
        // Nothing of the ambiguous response ran or reached the next request.
        assert_eq!(r.done()["receipts"].as_array().unwrap().len(), 1);
        let next = model.request_text(1);
        assert!(!next.contains("grep["), "{next}");
        assert!(
            next.contains("broke the protocol and was omitted"),
            "{next}"
        );
    }
}

#[tokio::test]
async fn the_corrective_turn_shows_the_action_syntax() {
    let v = VARIANTS[0];
    let ws = TestWorkspace::new();
    let model = MockModel::start(
        v,
        vec![
            Turn::text("Final Answer: port 8080"),
            Turn::text("Action: read_file[{\"path\": \"config.toml\"}]"),
            Turn::text("Final Answer: port 8080"),
        ],
    )
    .await;
    let r = run_attest(
        &model,
        &ws,
        &["--protocol", "text", "--expect", "observe", "Which port?"],
    )
    .await;
    model.assert_valid();
    assert_eq!(r.state(), "completed", "{}", r.describe());
    let corrective = r.of_type("corrective_injected");
    let text = corrective[0]["text"].as_str().unwrap();
    assert!(
        text.contains(r#"written as this line, with the values filled in: `Action: read_file[{"path":"..."}]`"#),
        "{text}"
    );
    assert!(model.request_text(1).contains("Action: read_file["));
}

/// `--protocol auto` learns (issue 20): a model behind an OpenAI-compatible
/// server that answered two runs without a native call while tools were
/// offered runs the text protocol on the next run, with a note and a
/// declared cache reset; its Action then runs like any call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_never_calls_natively_is_moved_to_the_text_protocol() {
    let cache = tempfile::tempdir().unwrap();
    let env = [("ATTEST_CACHE_DIR", cache.path().to_str().unwrap())];
    let ws = TestWorkspace::new();
    let model = MockModel::start(
        VARIANTS[0],
        vec![
            Turn::text("I cannot call tools, but the port is probably 8080."),
            Turn::text("I cannot call tools, but the port is probably 8080."),
            Turn::text("Thought: read it.\nAction: read_file{path: \"config.toml\"}"),
            Turn::text("Final Answer: The port is 8080."),
        ],
    )
    .await;
    for run in 0..2 {
        let r = run_attest_env(
            &model,
            &ws,
            &[
                "--expect",
                "observe",
                "--max-corrections",
                "0",
                "Which port?",
            ],
            &env,
        )
        .await;
        assert_eq!(r.code, 3, "run {run}: {}", r.describe());
        assert!(
            !r.stderr.contains("text protocol"),
            "run {run}: {}",
            r.stderr
        );
    }
    // Both native requests offered tools through the API.
    assert!(model.requests()[1]["tools"].is_array());
    let r = run_attest_env(&model, &ws, &["--expect", "observe", "Which port?"], &env).await;
    assert_eq!(r.code, 0, "{}", r.describe());
    assert!(r.stderr.contains("using the text protocol"), "{}", r.stderr);
    let third = &model.requests()[2];
    assert!(
        third.get("tools").is_none(),
        "tools still sent natively: {third}"
    );
    assert!(
        third.to_string().contains("Action:"),
        "no text-protocol tool block: {third}"
    );
    let done = r.events.last().unwrap();
    assert_eq!(done["receipts"][0]["tool_name"], "read_file");
    let log = ws.log_entries();
    assert!(
        log.iter().any(|e| e["trace"]["record"] == "cache_reset"
            && e["trace"]["reset_point"]["reason"] == "protocol_switch"),
        "no declared reset for the switch"
    );
}
