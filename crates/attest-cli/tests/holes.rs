//! Issue 12, "holes to close": paths that reached `completed` without the
//! contract's evidence, each closed and proved through the real binary
//! against the scripted model server.

mod common;

use common::*;
use serde_json::{json, Value};

const CARGO_TOML: &str = "[package]\nname = \"demo\"\nversion = \"0.1.0\"\n";

fn receipt_of<'a>(r: &'a RunResult, tool: &str) -> &'a Value {
    r.done()["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|rc| rc["tool_name"] == tool)
        .unwrap_or_else(|| panic!("no {tool} receipt: {}", r.describe()))
}

/// Hole 1: `cat Cargo.toml` is a read, so "Bumped" after it is unverified.
#[tokio::test]
async fn hole1_a_read_only_shell_call_is_an_observation_not_a_mutation() {
    let v = VARIANTS[1];
    let ws = TestWorkspace::new();
    ws.write("Cargo.toml", CARGO_TOML);
    let model = MockModel::start(
        v,
        vec![
            Turn::tool("shell", json!({"command": "cat Cargo.toml"})),
            Turn::text("Bumped the version to 0.2.0."),
            Turn::text("Bumped."),
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
            "--max-corrections",
            "1",
            "Bump the version in Cargo.toml",
        ],
    )
    .await;
    model.assert_valid();
    assert_eq!(r.state(), "unverified", "{}", r.describe());
    assert_eq!(r.reason(), "missing_receipt");
    let receipt = receipt_of(&r, "shell");
    assert_eq!(receipt["effect"], "observe", "{receipt}");
    assert_eq!(receipt["verification_status"], "verified");
    assert!(receipt["evidence"].get("changes").is_none(), "{receipt}");
    // The model was told what is missing, and the file is untouched.
    assert_eq!(r.of_type("corrective_injected").len(), 1);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("Cargo.toml")).unwrap(),
        CARGO_TOML
    );
}

/// Hole 1: a mutating command that changed nothing is `no_effect`; one that
/// changed a file lists it, with its content hash after.
#[tokio::test]
async fn hole1_a_mutating_command_is_credited_only_with_what_it_changed() {
    let v = VARIANTS[0];
    let ws = TestWorkspace::new();
    ws.write("Cargo.toml", CARGO_TOML);
    ws.write("src/lib.rs", "");
    let model = MockModel::start(
        v,
        vec![
            Turn::tool("shell", json!({"command": "mkdir -p src"})),
            Turn::text("Bumped."),
        ],
    )
    .await;
    let mutate = [
        "--expect",
        "mutate",
        "--approval",
        "allow",
        "--max-corrections",
        "0",
        "Bump the version in Cargo.toml",
    ];
    let r = run_attest(&model, &ws, &mutate).await;
    model.assert_valid();
    assert_eq!(r.state(), "unverified", "{}", r.describe());
    let receipt = receipt_of(&r, "shell");
    assert_eq!(receipt["effect"], "mutate", "{receipt}");
    assert_eq!(receipt["verification_status"], "no_effect", "{receipt}");
    assert_eq!(receipt["evidence"]["changes"], json!([]), "{receipt}");
    assert!(
        r.done()["basis"].as_str().unwrap().contains("no_effect"),
        "{}",
        r.done()
    );

    let model = MockModel::start(
        v,
        vec![
            Turn::tool(
                "shell",
                json!({"command": "sed -i 's/0.1.0/0.2.0/' Cargo.toml && touch NOTES"}),
            ),
            Turn::text("Bumped to 0.2.0."),
        ],
    )
    .await;
    let r = run_attest(&model, &ws, &mutate).await;
    model.assert_valid();
    assert_eq!(r.state(), "completed", "{}", r.describe());
    let receipt = receipt_of(&r, "shell");
    assert_eq!(receipt["verification_status"], "verified", "{receipt}");
    let after = std::fs::read(ws.path().join("Cargo.toml")).unwrap();
    let changes = receipt["evidence"]["changes"].as_array().unwrap();
    assert_eq!(
        changes
            .iter()
            .map(|c| (c["path"].as_str().unwrap(), c["change"].as_str().unwrap()))
            .collect::<Vec<_>>(),
        [("Cargo.toml", "modified"), ("NOTES", "created")],
        "{receipt}"
    );
    assert_eq!(changes[0]["sha256"], attest_core::text::sha256_hex(&after));
}

/// Hole 1: writing a file's own content back is `no_effect`.
#[tokio::test]
async fn hole1_rewriting_a_file_unchanged_satisfies_no_mutate_contract() {
    let v = VARIANTS[2];
    let ws = TestWorkspace::new();
    ws.write("Cargo.toml", CARGO_TOML);
    let model = MockModel::start(
        v,
        vec![
            Turn::tool(
                "write_file",
                json!({"path": "Cargo.toml", "content": CARGO_TOML}),
            ),
            Turn::text("Bumped."),
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
            "--max-corrections",
            "0",
            "Bump the version in Cargo.toml",
        ],
    )
    .await;
    model.assert_valid();
    assert_eq!(r.state(), "unverified", "{}", r.describe());
    let receipt = receipt_of(&r, "write_file");
    assert_eq!(receipt["verification_status"], "no_effect", "{receipt}");
    assert_eq!(
        receipt["evidence"]["sha256"],
        attest_core::text::sha256_hex(CARGO_TOML.as_bytes())
    );
}

/// Hole 2: loading a skill is the harness's own bookkeeping, not evidence.
#[tokio::test]
async fn hole2_the_harness_tools_satisfy_no_contract() {
    let v = VARIANTS[3];
    let ws = TestWorkspace::new();
    ws.write(
        "skills/deploy/SKILL.md",
        "---\nname: deploy\ndescription: How to deploy this service\n---\nDeploy with `make ship`.\n",
    );
    let model = MockModel::start(
        v,
        vec![
            Turn::tool("skill", json!({"name": "deploy"})),
            Turn::text("Run make ship."),
        ],
    )
    .await;
    let r = run_attest(
        &model,
        &ws,
        &[
            "--expect",
            "observe",
            "--require-tool",
            "skill",
            "--max-corrections",
            "0",
            "How do I deploy?",
        ],
    )
    .await;
    model.assert_valid();
    assert_eq!(r.state(), "unverified", "{}", r.describe());
    assert_eq!(r.reason(), "missing_receipt");
    let receipt = receipt_of(&r, "skill");
    assert_eq!(receipt["effect"], "internal", "{receipt}");
    assert_eq!(receipt["status"], "ok");
}

/// Hole 4: a deliver tool without an evidence pointer is a config error.
#[tokio::test]
async fn hole4_a_deliver_tool_without_evidence_is_a_config_error() {
    let ws = TestWorkspace::new();
    ws.append_config(
        "[[tools]]\nname = \"send_report\"\ndescription = \"Send\"\neffect = \"deliver\"\ncommand = [\"true\"]\n",
    );
    let model = MockModel::start(VARIANTS[0], vec![]).await;
    let r = run_attest(&model, &ws, &["--expect", "deliver", "Send the report"]).await;
    assert_eq!(r.code, 2, "{}", r.describe());
    assert!(r.stderr.contains("send_report"), "{}", r.describe());
    assert!(r.stderr.contains("evidence"), "{}", r.describe());
    assert!(model.requests().is_empty(), "the model was called");
}

/// Hole 5: a cut-off answer gets one continuation, then ends `incomplete`.
#[tokio::test]
async fn hole5_a_cut_off_answer_is_continued_once_then_incomplete() {
    for (v, length) in [(VARIANTS[1], "length"), (VARIANTS[2], "max_tokens")] {
        let ws = TestWorkspace::new();
        let cut = |text: &str| Turn::Reply {
            text: text.into(),
            calls: vec![],
            finish: Some(length),
        };
        let model = MockModel::start(v, vec![cut("The port is 80"), cut("80 and the host")]).await;
        let r = run_attest(&model, &ws, &["Which port does config.toml set?"]).await;
        model.assert_valid();
        assert_eq!(r.state(), "incomplete", "{v:?} {}", r.describe());
        assert_eq!(r.reason(), "truncated");
        let asked = r.of_type("continuation_requested");
        assert_eq!(asked.len(), 1, "{v:?}");
        assert_eq!(asked[0]["finish_reason"], length);
        assert_eq!(model.requests().len(), 2);
        assert!(
            model
                .request_text(1)
                .contains("cut off by the output token limit"),
            "{}",
            model.request_text(1)
        );
        assert!(r.of_type("final").is_empty());

        // A continuation that ends normally completes the answer.
        let model = MockModel::start(v, vec![cut("The port is 80"), Turn::text("80.")]).await;
        let r = run_attest(&model, &ws, &["Which port does config.toml set?"]).await;
        assert_eq!(r.state(), "completed", "{v:?} {}", r.describe());
        assert_eq!(r.done()["answer"], "The port is 8080.");
    }
}

/// Hole 5: a withheld answer fails with `content_filter`.
#[tokio::test]
async fn hole5_a_filtered_or_refused_answer_fails_content_filter() {
    for (v, reason) in [(VARIANTS[0], "content_filter"), (VARIANTS[3], "refusal")] {
        let ws = TestWorkspace::new();
        let model = MockModel::start(
            v,
            vec![Turn::Reply {
                text: "I can".into(),
                calls: vec![],
                finish: Some(reason),
            }],
        )
        .await;
        let r = run_attest(&model, &ws, &["Which port does config.toml set?"]).await;
        model.assert_valid();
        assert_eq!(r.state(), "failed", "{v:?} {}", r.describe());
        assert_eq!(r.reason(), "content_filter");
        assert!(r.done()["basis"].as_str().unwrap().contains(reason));
    }
}

fn run_id_of(printed: &[String]) -> String {
    serde_json::from_str::<Value>(&printed[0]).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn resume_args(ws: &TestWorkspace, model: &MockModel, run_id: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "resume",
        run_id,
        "--json",
        "--base-url",
        &model.base_url(),
        "-C",
        &ws.path().display().to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// A run killed while it waits for the model: orphaned, resumable.
async fn crashed_run(model: &MockModel, ws: &TestWorkspace, extra: &[&str]) -> String {
    let (code, printed) =
        run_and_signal(model, ws, extra, "-KILL", "\"type\":\"run_started\"").await;
    assert_eq!(code, None, "the process was killed by a signal");
    run_id_of(&printed)
}

fn too_late() -> Turn {
    Turn::Delayed {
        delay: std::time::Duration::from_secs(6),
        turn: Box::new(Turn::text("too late")),
    }
}

/// Hole 3: resume keeps the stored contract, approval mode and limits; a
/// flag that would weaken them is refused, naming it.
#[tokio::test]
async fn hole3_resume_keeps_its_contract_and_refuses_weakening_flags() {
    let v = VARIANTS[1];
    let ws = TestWorkspace::new();
    let model = MockModel::start(
        v,
        vec![
            too_late(),
            Turn::text("The port is 8080."),
            Turn::text("It is 8080."),
        ],
    )
    .await;
    let run_id = crashed_run(
        &model,
        &ws,
        &[
            "--expect",
            "observe",
            "--max-steps",
            "6",
            "--max-corrections",
            "1",
            "--timeout",
            "300",
            "Which port does config.toml set?",
        ],
    )
    .await;
    for (flags, named) in [
        (&["--expect", "answer"][..], "--expect"),
        (&["--approval", "allow"][..], "--approval"),
        (&["--max-steps", "50"][..], "--max-steps"),
        (&["--max-corrections", "3"][..], "--max-corrections"),
        (&["--timeout", "9000"][..], "--timeout"),
    ] {
        let r = run_binary(resume_args(&ws, &model, &run_id, flags), &[]).await;
        assert_eq!(r.code, 2, "{flags:?}: {}", r.describe());
        assert!(r.stderr.contains(named), "{flags:?}: {}", r.stderr);
        assert!(r.events.is_empty(), "{flags:?}: the run went on");
    }
    // Repeating the stored contract is fine; the run goes on under it.
    let r = run_binary(
        resume_args(&ws, &model, &run_id, &["--expect", "observe"]),
        &[],
    )
    .await;
    model.assert_valid();
    let resumed = &r.of_type("run_resumed")[0]["resumed_with"];
    assert_eq!(resumed["contract"]["kind"], "observe", "{}", r.describe());
    assert_eq!(resumed["max_steps"], 6);
    assert_eq!(resumed["max_corrections"], 1);
    assert_eq!(resumed["timeout_secs"], 300);
    assert_eq!(resumed["approval"], "deny");
    // An answer without an observation is not accepted after the resume either.
    assert_eq!(r.state(), "unverified", "{}", r.describe());
    assert_eq!(r.of_type("corrective_injected").len(), 1);
}

/// Hole 8: of two concurrent resumes of one run, exactly one proceeds.
#[tokio::test]
async fn hole8_two_concurrent_resumes_one_proceeds_the_other_exits_2() {
    let v = VARIANTS[1];
    let ws = TestWorkspace::new();
    let slow_answer = || Turn::Delayed {
        delay: std::time::Duration::from_millis(1500),
        turn: Box::new(Turn::text("The port is 8080.")),
    };
    let model = MockModel::start(v, vec![too_late(), slow_answer(), slow_answer()]).await;
    let run_id = crashed_run(&model, &ws, &["Which port does config.toml set?"]).await;
    let (a, b) = tokio::join!(
        run_binary(resume_args(&ws, &model, &run_id, &[]), &[]),
        run_binary(resume_args(&ws, &model, &run_id, &[]), &[]),
    );
    let mut codes = [a.code, b.code];
    codes.sort();
    assert_eq!(codes, [0, 2], "{}\n---\n{}", a.describe(), b.describe());
    let loser = if a.code == 2 { &a } else { &b };
    assert!(loser.events.is_empty(), "{}", loser.describe());
    let done: Vec<Value> = ws
        .log_entries()
        .into_iter()
        .filter(|e| e["event"]["type"] == "done")
        .collect();
    assert_eq!(done.len(), 1, "{done:?}");
}

/// Hole 8: a run whose verdict was logged without its `done` (a crash in
/// between) is closed with that verdict on the next open, and its session
/// goes on.
#[tokio::test]
async fn hole8_a_verdict_without_done_is_closed_on_the_next_open() {
    use attest_protocol::{
        AssistantPhase, LogEntry, TerminalReason, TerminalState, TranscriptItem,
    };
    use attest_store::Store;
    let v = VARIANTS[1];
    for reopen in ["session", "resume"] {
        let ws = TestWorkspace::new();
        let model =
            MockModel::start(v, vec![too_late(), Turn::text("You asked about the port.")]).await;
        let run_id = crashed_run(&model, &ws, &["--session", "s8", "Which port?"]).await;
        {
            let mut store = ws.store();
            let answer = "The port is 8080.".to_string();
            for item in [
                TranscriptItem::AssistantOutput {
                    text: answer.clone(),
                    reasoning: None,
                    encrypted_reasoning: Vec::new(),
                    phase: AssistantPhase::Answer,
                },
                TranscriptItem::Terminal {
                    state: TerminalState::Completed,
                    reason: TerminalReason::ContractSatisfied,
                    answer: Some(answer),
                },
            ] {
                store.append(&run_id, &LogEntry::Item { item }).unwrap();
            }
        }
        let r = match reopen {
            "session" => run_attest(&model, &ws, &["--session", "s8", "What did I ask?"]).await,
            _ => run_binary(resume_args(&ws, &model, &run_id, &[]), &[]).await,
        };
        assert_eq!(r.code, 0, "{reopen}: {}", r.describe());
        assert_eq!(r.state(), "completed", "{reopen}");
        let old = ws.store().run(&run_id).unwrap();
        assert_eq!(old.status, "completed", "{reopen}");
        assert_eq!(old.answer.as_deref(), Some("The port is 8080."));
        let entries = ws.store().entries(&run_id).unwrap();
        let dones = entries
            .iter()
            .filter(|e| matches!(e, LogEntry::Event { event } if event.body.type_name() == "done"))
            .count();
        let terminals = entries
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    LogEntry::Item {
                        item: TranscriptItem::Terminal { .. }
                    }
                )
            })
            .count();
        assert_eq!((dones, terminals), (1, 1), "{reopen}");
        if reopen == "session" {
            let last = model.requests().len() - 1;
            assert!(model.request_text(last).contains("The port is 8080."));
        }
    }
}
