//! Tool runtime safety through the binary (SPEC F1–F3, F6–F10): policy
//! rules on parsed shell words, compound commands, structured failures vs
//! observed emptiness, retry budgets, the doom-loop guard, and redaction.

mod common;

use common::*;
use serde_json::{json, Value};

const FAILING_FETCH: &str = r#"
[[tools]]
name = "fetch_prices"
description = "Fetch current prices"
effect = "observe"
command = ["sh", "-c", "cat >/dev/null; echo x >> fetch-attempts.log; echo 'upstream returned 503 token=sk-live-canary-abc123def456' >&2; exit 1"]
parameters = { type = "object", properties = { symbol = { type = "string" } }, required = ["symbol"] }
"#;

fn attempts(ws: &TestWorkspace) -> usize {
    std::fs::read_to_string(ws.path().join("fetch-attempts.log")).map_or(0, |t| t.lines().count())
}

#[tokio::test]
async fn pattern_rules_judge_parsed_words_and_compound_commands_by_their_worst_part() {
    let v = VARIANTS[1];
    let ws = TestWorkspace::new();
    std::fs::create_dir_all(ws.path().join("build")).unwrap();
    ws.append_config(
        "[permissions]\nshell = { default = \"ask\", rules = [ { match = \"git status*\", decision = \"allow\" }, { match = \"rm -rf *\", decision = \"deny\" }, { match = \"touch ok*\", decision = \"allow\" } ] }\n",
    );
    let model = MockModel::start(
        v,
        vec![
            Turn::calls(
                "",
                vec![
                    call("shell", json!({"command": "touch ok-file"})),
                    call("shell", json!({"command": "rm -rf build"})),
                    call("shell", json!({"command": "touch ok-2 && rm -rf build"})),
                    call("shell", json!({"command": "bash -c \"rm -rf build\""})),
                    call("shell", json!({"command": "echo \"rm -rf build\""})),
                    call("shell", json!({"command": "touch other-file"})),
                ],
            ),
            Turn::text("done"),
        ],
    )
    .await;
    let r = run_attest(&model, &ws, &["Clean up"]).await;
    model.assert_valid();
    assert_eq!(r.state(), "completed", "{}", r.describe());
    let statuses: Vec<String> = r
        .of_type("tool_result")
        .iter()
        .map(|e| e["status"].as_str().unwrap().to_string())
        .collect();
    // allow; deny; compound with a denied part; deny inside bash -c; a quoted
    // string is an argument, not a command (ask → denied non-interactively);
    // no rule → ask → denied.
    assert_eq!(
        statuses,
        ["ok", "denied", "denied", "denied", "denied", "denied"],
        "{}",
        r.describe()
    );
    assert!(ws.path().join("ok-file").exists());
    assert!(ws.path().join("build").exists(), "rm -rf ran");
    assert!(
        !ws.path().join("ok-2").exists(),
        "a compound command with a denied part ran"
    );
    assert!(!ws.path().join("other-file").exists());
    // Only the ask-by-default calls were put to the approver.
    assert_eq!(r.of_type("approval_requested").len(), 2);
    let results = model.tool_results(1);
    assert!(results[1].1.contains("NOT EXECUTED"), "{results:?}");
}

#[tokio::test]
async fn failures_are_structured_budgeted_and_a_doom_loop_ends_the_run() {
    let v = VARIANTS[1];
    let ws = TestWorkspace::new();
    ws.append_config(FAILING_FETCH);
    let same = || Turn::tool("fetch_prices", json!({"symbol": "ACME"}));
    let model = MockModel::start(
        v,
        vec![
            same(),
            same(),
            same(),
            same(),
            same(),
            Turn::text("never reached"),
        ],
    )
    .await;
    let r = run_attest(&model, &ws, &["--expect", "observe", "Price of ACME?"]).await;
    model.assert_valid();
    assert_eq!(r.code, 4, "{}", r.describe());
    assert_eq!(r.state(), "incomplete");
    assert_eq!(r.reason(), "doom_loop");
    // The retry budget (2 retries) stopped the tool from running a 4th time.
    assert_eq!(attempts(&ws), 3);
    let reminders = r.of_type("reminder_injected");
    assert_eq!(reminders.len(), 1, "{}", r.describe());
    assert_eq!(reminders[0]["count"], 3);
    // The reminder is the latest user-role message of the 4th request.
    let fourth = &model.requests()[3];
    let last = fourth["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["role"], "user");
    assert!(last["content"].as_str().unwrap().contains("3"), "{last}");
    // Failures reach the model as failures, structured, repeats aggregated, key redacted.
    let first = &model.tool_results(1)[0].1;
    assert!(
        first.contains("TOOL FAILED") && first.contains("not an empty result"),
        "{first}"
    );
    assert!(first.contains("upstream returned 503"), "{first}");
    let third = &model.tool_results(3)[2].1;
    assert!(third.contains("TOOL FAILED AGAIN"), "{third}");
    for i in 0..model.requests().len() {
        assert!(
            !model.request_text(i).contains("sk-live-canary"),
            "canary in request {i}"
        );
    }
    assert!(!r.stdout.contains("sk-live-canary"));
    let log: String = ws.log_entries().iter().map(|e| e.to_string()).collect();
    assert!(!log.contains("sk-live-canary"), "canary in the log");
}

#[tokio::test]
async fn an_empty_result_is_an_observation_and_a_failure_is_not() {
    let v = VARIANTS[3];
    let ws = TestWorkspace::new();
    let model = MockModel::start(
        v,
        vec![
            Turn::calls(
                "",
                vec![
                    call("grep", json!({"pattern": "no-such-text-anywhere"})),
                    call("grep", json!({"pattern": "("})),
                ],
            ),
            Turn::text("Nothing matches."),
        ],
    )
    .await;
    let r = run_attest(&model, &ws, &["--expect", "observe", "Is it there?"]).await;
    assert_eq!(r.state(), "completed", "{}", r.describe());
    let results = model.tool_results(1);
    assert!(
        results[0].1.contains("no matches") && !results[0].2,
        "{results:?}"
    );
    assert!(
        results[1].1.contains("TOOL FAILED") && results[1].2,
        "{results:?}"
    );
    assert_eq!(r.done()["receipts"][0]["evidence"]["match_count"], 0);
}

#[tokio::test]
async fn argument_secrets_never_reach_events_or_the_log() {
    let v = VARIANTS[1];
    let ws = TestWorkspace::new();
    let model = MockModel::start(
        v,
        vec![
            Turn::tool(
                "shell",
                json!({"command": "echo Authorization: Bearer sk-live-canary-zz9988776655"}),
            ),
            Turn::text("ok"),
        ],
    )
    .await;
    let r = run_attest(&model, &ws, &["--approval", "allow", "Echo it"]).await;
    assert_eq!(r.state(), "completed", "{}", r.describe());
    assert!(!r.stdout.contains("sk-live-canary"), "canary in events");
    let log: String = ws.log_entries().iter().map(|e| e.to_string()).collect();
    assert!(!log.contains("sk-live-canary"), "canary in the log");
    assert!(
        !model.request_text(1).contains("sk-live-canary"),
        "canary sent back to the model"
    );
}

#[tokio::test]
async fn a_repeated_read_is_skipped_and_reminded_at_once_in_events_and_on_the_terminal() {
    let v = VARIANTS[0];
    let ws = TestWorkspace::new();
    std::fs::write(ws.path().join("notes.txt"), "the answer is 42\n").unwrap();
    let read = || Turn::tool("read_file", json!({"path": "notes.txt"}));
    let turns = || vec![read(), read(), Turn::text("The notes say 42.")];

    let model = MockModel::start(v, turns()).await;
    let r = run_attest(
        &model,
        &ws,
        &["--expect", "observe", "What do the notes say?"],
    )
    .await;
    model.assert_valid();
    assert_eq!(r.state(), "completed", "{}", r.describe());
    let statuses: Vec<&Value> = r.done()["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| &x["status"])
        .collect();
    assert_eq!(statuses, [&json!("ok"), &json!("skipped")]);
    let reminders = r.of_type("reminder_injected");
    assert_eq!(reminders.len(), 1, "{}", r.describe());
    assert_eq!(reminders[0]["count"], 1);
    // The third request ends with the reminder, after the skipped call's note.
    let third = model.request_text(2);
    assert!(third.contains("ALREADY DONE"), "{third}");
    assert!(third.contains("called `read_file` again"), "{third}");

    // Human output says what happened, not that a call failed.
    let model = MockModel::start(v, turns()).await;
    let r = run_attest_human(
        &model,
        &ws,
        &["--expect", "observe", "What do the notes say?"],
    )
    .await;
    assert_eq!(r.code, 0, "{}", r.describe());
    assert!(
        r.stderr
            .contains("↻ reminder: You called `read_file` again with the same arguments"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("failed 1 times"), "{}", r.stderr);
}
