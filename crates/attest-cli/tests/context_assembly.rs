//! SPEC D1–D3 through the binary: layer order in the system prompt, skills
//! loaded on demand, the state tail last, snapshotted for both wire formats.

mod common;

use common::*;
use serde_json::json;

fn workspace_with_everything() -> TestWorkspace {
    let ws = TestWorkspace::new();
    ws.write("AGENTS.md", "Project rule: answer in one sentence.\n");
    ws.write("SOUL.md", "Be terse.\n");
    ws.write("USER.md", "The user is called Ada.\n");
    ws.write(
        "skills/deploy/SKILL.md",
        "---\nname: deploy\ndescription: How to deploy this service\n---\nDeploy with `make ship` to deploy.example.internal.\n",
    );
    ws
}

fn system_text(v: Variant, request: &serde_json::Value) -> String {
    match v.wire {
        Wire::OpenAi => request["messages"][0]["content"]
            .as_str()
            .unwrap()
            .to_string(),
        // Blocks, the last marked as a prompt-cache breakpoint.
        Wire::Anthropic => request["system"][0]["text"].as_str().unwrap().to_string(),
    }
}

#[tokio::test]
async fn layers_follow_spec_order_and_skill_bodies_load_only_on_demand() {
    for v in [VARIANTS[0], VARIANTS[3]] {
        let ws = workspace_with_everything();
        let skill = Call {
            id: "call_skill".into(),
            name: "skill".into(),
            arguments: json!({"name": "deploy"}).to_string(),
        };
        let model = MockModel::start(
            v,
            vec![Turn::calls("", vec![skill]), Turn::text("Run make ship.")],
        )
        .await;
        let r = run_attest(&model, &ws, &["How do I deploy?"]).await;
        model.assert_valid();
        model.assert_stable_prefix();
        assert_eq!(r.state(), "completed", "{}", r.describe());
        let requests = model.requests();
        let system = system_text(v, &requests[0]);
        let order: Vec<usize> = [
            "Evidence rules:",
            "Project rule",
            "Be terse",
            "called Ada",
            "# Skills",
            "- deploy: How to deploy",
        ]
        .iter()
        .map(|needle| {
            system
                .find(needle)
                .unwrap_or_else(|| panic!("`{needle}` missing from:\n{system}"))
        })
        .collect();
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "layers out of order: {order:?}\n{system}"
        );
        // The body is not in the prompt until the skill tool returns it.
        assert!(!requests[0].to_string().contains("make ship"));
        assert!(model.tool_results(1)[0]
            .1
            .contains("Deploy with `make ship`"));
        let tools: Vec<String> = match v.wire {
            Wire::OpenAi => requests[0]["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect(),
            Wire::Anthropic => requests[0]["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_string())
                .collect(),
        };
        assert!(tools.contains(&"skill".to_string()));
    }
}

#[tokio::test]
async fn no_skills_means_no_skill_tool_and_no_catalog() {
    let v = VARIANTS[1];
    let ws = TestWorkspace::new();
    let model = MockModel::start(v, vec![Turn::text("hi")]).await;
    let r = run_attest(&model, &ws, &["hello"]).await;
    assert_eq!(r.state(), "completed");
    let request = &model.requests()[0];
    assert!(!request.to_string().contains("\"skill\""));
    assert!(!system_text(v, request).contains("# Skills"));
}

/// The whole assembled second request: system layers, tools, history with a
/// call/result pair, and the state tail last.
#[tokio::test]
async fn assembled_request_snapshots() {
    for (v, name) in [
        (VARIANTS[0], "openai_request"),
        (VARIANTS[2], "anthropic_request"),
    ] {
        let ws = workspace_with_everything();
        let read = Call {
            id: "call_read".into(),
            name: "read_file".into(),
            arguments: json!({"path": "config.toml"}).to_string(),
        };
        let model = MockModel::start(
            v,
            vec![
                Turn::calls("Reading the config.", vec![read]),
                Turn::text("Port 8080."),
            ],
        )
        .await;
        // A fixed session: the prompt-cache key is derived from it.
        let r = run_attest(
            &model,
            &ws,
            &[
                "--session",
                "snapshot",
                "--expect",
                "observe",
                "Which port?",
            ],
        )
        .await;
        assert_eq!(r.state(), "completed", "{}", r.describe());
        let mut request = model.requests()[1].clone();
        request["model"] = json!("test-model");
        insta::assert_json_snapshot!(name, request);
    }
}

#[tokio::test]
async fn a_profile_narrows_the_tool_surface() {
    let v = VARIANTS[1];
    let ws = TestWorkspace::new();
    ws.append_config("[profiles.reader]\ntools = [\"read_file\", \"grep\"]\n");
    let model = MockModel::start(
        v,
        vec![
            Turn::tool("shell", json!({"command": "ls"})),
            Turn::text("done"),
        ],
    )
    .await;
    let r = run_attest(&model, &ws, &["--profile", "reader", "List files"]).await;
    model.assert_valid();
    let tools: Vec<String> = model.requests()[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(tools, ["read_file", "grep"]);
    // A tool outside the profile is unknown to the run, whatever the model asks.
    assert_eq!(
        r.done()["receipts"][0]["status"],
        "unknown_tool",
        "{}",
        r.describe()
    );

    let bad = run_attest(&model, &ws, &["--profile", "nope", "x"]).await;
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("no profile `nope`"), "{}", bad.stderr);
}

#[tokio::test]
async fn a_handoff_carries_a_state_slice_into_a_separate_session_not_the_transcript() {
    let v = VARIANTS[1];
    let ws = TestWorkspace::new();
    let read = Call {
        id: "call_src".into(),
        name: "read_file".into(),
        arguments: json!({"path": "config.toml"}).to_string(),
    };
    let model = MockModel::start(
        v,
        vec![
            Turn::calls("I bet the port is 9999; checking.", vec![read]),
            Turn::text("Port 8080."),
            Turn::text("The earlier run established the port from config.toml."),
        ],
    )
    .await;
    let first = run_attest(
        &model,
        &ws,
        &["--session", "planner", "--expect", "observe", "Which port?"],
    )
    .await;
    assert_eq!(first.state(), "completed", "{}", first.describe());
    let source = first.done()["run_id"].as_str().unwrap().to_string();
    let second = run_attest(
        &model,
        &ws,
        &["--handoff-from", &source, "Summarize what is known"],
    )
    .await;
    model.assert_valid();
    assert_eq!(second.state(), "completed", "{}", second.describe());
    assert_ne!(second.events[0]["session_id"], "planner");
    let request = &model.requests()[2];
    let system = system_text(v, request);
    assert!(
        system.contains(&format!("Handoff from run {source}")),
        "{system}"
    );
    assert!(system.contains("goal: Which port?"), "{system}");
    assert!(
        system.contains("confirmed_fact: read_file") && system.contains("call_src"),
        "{system}"
    );
    // Neither the earlier transcript nor its narration crosses over.
    let text = request.to_string();
    assert!(!text.contains("9999"), "{text}");
    assert_eq!(
        model.tool_results(2).len(),
        0,
        "the earlier call/result pairs were sent"
    );

    let same = run_attest(
        &model,
        &ws,
        &["--session", "planner", "--handoff-from", &source, "x"],
    )
    .await;
    assert_eq!(same.code, 2);
    assert!(same.stderr.contains("separate session"), "{}", same.stderr);
}
