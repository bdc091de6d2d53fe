//! `attest chat` under a pseudo-terminal, driven like a person would: type a
//! request, answer the approval prompt, see the tool run (or not), use the
//! slash commands.

mod common;

use common::*;
use rexpect::session::PtySession;
use serde_json::json;

fn spawn_chat(model: &MockModel, ws: &TestWorkspace) -> PtySession {
    trust_workspace(ws.path());
    spawn_untrusted_chat(model, ws)
}

/// The chat without trusting the workspace's `attest.toml` first.
fn spawn_untrusted_chat(model: &MockModel, ws: &TestWorkspace) -> PtySession {
    let bin = assert_cmd::cargo::cargo_bin("attest");
    let cmd = format!(
        "env XDG_CONFIG_HOME={} ATTEST_CACHE_DIR={} {} chat --provider openai --base-url {} --model m --stream -C {}",
        test_config_home().display(),
        ws.path().join(".test-cache").display(),
        bin.display(),
        model.base_url(),
        ws.path().display()
    );
    rexpect::spawn(&cmd, Some(20_000)).expect("spawn attest chat")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_asked_in_the_terminal_decides_whether_the_tool_runs() {
    let ws = TestWorkspace::new();
    let model = MockModel::start(
        VARIANTS[1],
        vec![
            Turn::tool("shell", json!({"command": "sleep 0.5; touch approved.txt"})),
            Turn::text("Created approved.txt."),
            Turn::tool("shell", json!({"command": "touch refused.txt"})),
            Turn::text("I could not create it."),
        ],
    )
    .await;
    let ws_path = ws.path().to_path_buf();
    let mut chat = spawn_chat(&model, &ws);
    let transcript = tokio::task::block_in_place(|| {
        chat.exp_string("you> ").unwrap();
        chat.send_line("create approved.txt").unwrap();
        chat.exp_string("Allow shell").unwrap();
        chat.send_line("y").unwrap();
        let progress = chat.exp_string("Created approved.txt.").unwrap();
        // Live progress on a terminal: a spinner with the tool and its time.
        // (rexpect reads bytes one by one, so only the ASCII part is compared.)
        // The spinner redraws every 100 ms; a loaded machine may skip a
        // tenth, so what counts is a first frame and one that moved on.
        let frames = progress.matches(" shell 0.").count();
        assert!(
            progress.contains(" shell 0.0s") && frames >= 2,
            "{progress:?}"
        );
        chat.exp_string("[completed]").unwrap();
        chat.exp_string("you> ").unwrap();
        chat.send_line("create refused.txt").unwrap();
        chat.exp_string("Allow shell").unwrap();
        chat.send_line("n not today").unwrap();
        chat.exp_string("I could not create it.").unwrap();
        chat.exp_string("you> ").unwrap();
        chat.send_line("/approvals").unwrap();
        let listed = chat.exp_string("you> ").unwrap();
        chat.send_line("/trace").unwrap();
        let trace = chat.exp_string("you> ").unwrap();
        chat.send_line("/exit").unwrap();
        chat.exp_eof().unwrap();
        (listed, trace)
    });
    model.assert_valid();
    assert!(
        ws_path.join("approved.txt").exists(),
        "the approved call did not run"
    );
    assert!(
        !ws_path.join("refused.txt").exists(),
        "the refused call ran"
    );
    // The denial and its message reached the model.
    let refusal = &model.tool_results(3)[1].1;
    assert!(
        refusal.contains("NOT EXECUTED") && refusal.contains("not today"),
        "{refusal}"
    );
    let (listed, trace) = transcript;
    assert!(
        listed.contains("allowed (user)") && listed.contains("denied (user)"),
        "{listed}"
    );
    assert!(trace.contains("terminal: completed"), "{trace}");
    // Both turns belong to one session: the second request carried the first turn.
    assert!(model.request_text(2).contains("create approved.txt"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chat_offers_once_to_trust_a_workspace_whose_config_sets_security_keys() {
    let ws = TestWorkspace::new();
    let model = MockModel::start(VARIANTS[1], vec![Turn::text("hello")]).await;
    let mut chat = spawn_untrusted_chat(&model, &ws);
    tokio::task::block_in_place(|| {
        chat.exp_string("Trust this workspace and use them? [y/N]")
            .unwrap();
        chat.send_line("y").unwrap();
        chat.exp_string("trusted").unwrap();
        chat.exp_string("you> ").unwrap();
        chat.send_line("hi").unwrap();
        chat.exp_string("[completed]").unwrap();
        chat.send_line("/exit").unwrap();
        chat.exp_eof().unwrap();
    });
    let listed = run_binary(vec!["trust".into(), "--list".into()], &[]).await;
    let canonical = ws.path().canonicalize().unwrap().display().to_string();
    assert!(listed.stdout.contains(&canonical), "{}", listed.stdout);
}
