//! `attest eval` on the engine: every attempt is a real run in its own
//! workspace and store, the groups switch the engine's guarantees, and a
//! recorded run replays through today's engine. Everything here drives the
//! binary and reads what it left on disk: the result file, each attempt's
//! store (`attest trace`) and what the scripted model was sent.

mod common;

use assert_cmd::Command;
use common::{MockModel, TestWorkspace, Turn, VARIANTS};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn eval(args: &[&str], cwd: &Path) -> std::process::Output {
    Command::cargo_bin("attest")
        .unwrap()
        .arg("eval")
        .args(args)
        .current_dir(cwd)
        .env("HOME", cwd)
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .unwrap()
}

fn group<'a>(result: &'a Value, name: &str) -> &'a Value {
    result["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == name)
        .unwrap_or_else(|| panic!("no group {name}"))
}

fn attempts(group: &Value) -> &Vec<Value> {
    group["cases"][0]["attempts"].as_array().unwrap()
}

/// Every request the scripted model of one attempt was sent, as text.
fn requests_sent(work: &Path, group: &str, case: &str, attempt: u32) -> Vec<String> {
    let path = work
        .join(group)
        .join(case)
        .join(attempt.to_string())
        .join(".attest/model-requests.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let requests: Vec<Value> = serde_json::from_str(&text).unwrap();
    requests.iter().map(|r| r.to_string()).collect()
}

fn forged(text: &str) -> bool {
    text.contains(r#"\"count\":0"#) || text.contains(r#""count":0"#)
}

#[test]
fn react_forgery_full_shows_8_receipt_backed_of_10_and_the_forgery_never_sent_on() {
    let dir = tempfile::tempdir().unwrap();
    let suite = repo_root().join("examples/eval/react-forgery.yaml");
    let out = eval(
        &[
            suite.to_str().unwrap(),
            "--groups",
            "baseline,full",
            "-j",
            "3",
            "--json",
            "r.json",
        ],
        dir.path(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let result: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("r.json")).unwrap()).unwrap();
    assert_eq!(result["status"], "complete");
    let work = dir.path().join("r.json.d");

    let full = group(&result, "full");
    let runs = attempts(full);
    assert_eq!(runs.len(), 10);
    let backed: Vec<u64> = runs
        .iter()
        .filter(|a| a["state"] == "completed" && a["verdict"]["receipt_backed"] == true)
        .map(|a| a["attempt"].as_u64().unwrap())
        .collect();
    assert_eq!(backed, [0, 1, 2, 4, 5, 6, 8, 9]);
    for n in [3, 7] {
        let a = &runs[n];
        assert_eq!(a["state"], "unverified", "{a}");
        assert_eq!(a["reason"], "missing_receipt");
        assert!(a["parse_anomalies"].as_u64().unwrap() >= 1);
    }
    let m = &full["metrics"]["receipt_backed_completion_rate"];
    assert_eq!(m["value"], 0.8);
    assert_eq!(m["n"], 10);
    assert!(m["ci95"][0].as_f64().unwrap() < 0.8 && m["ci95"][1].as_f64().unwrap() > 0.8);
    // Every run's answer is grounded by the engine; the forged "0" of
    // attempts 3 and 7 is found in no evidence.
    let g = &full["metrics"]["ungrounded_value_rate"];
    assert_eq!(g["n"], 10, "{g}");
    for n in [3, 7] {
        assert!(
            runs[n]["grounding"]["ungrounded"].as_u64().unwrap() >= 1,
            "{}",
            runs[n]
        );
    }
    assert_eq!(runs[0]["grounding"]["ungrounded"], 0, "{}", runs[0]);

    // Every attempt is a real run: its store has it, with its group.
    for a in runs {
        let n = a["attempt"].as_u64().unwrap() as u32;
        let ws = work.join("full/mcp-mention").join(n.to_string());
        let trace = Command::cargo_bin("attest")
            .unwrap()
            .args(["trace", a["run_id"].as_str().unwrap(), "-C"])
            .arg(&ws)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&trace.stdout);
        assert!(
            text.contains("eval group full: invariant prompt on, receipt guard on"),
            "{text}"
        );
        // Under full the forged value never reached a later request.
        for (i, sent) in requests_sent(&work, "full", "mcp-mention", n)
            .iter()
            .enumerate()
        {
            assert!(!forged(sent), "full attempt {n} request {i}: {sent}");
        }
    }
    // The forgeries were made (kept in the audit trace only).
    let trace = Command::cargo_bin("attest")
        .unwrap()
        .args(["trace", runs[7]["run_id"].as_str().unwrap(), "-C"])
        .arg(work.join("full/mcp-mention/7"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&trace.stdout).contains("protocol violation ForgedObservation"));

    // Baseline: the same two forgeries are accepted as done, unbacked, and
    // the invariant prompt was never sent.
    let base = group(&result, "baseline");
    let runs = attempts(base);
    for n in [3, 7] {
        let a = &runs[n];
        assert_eq!(a["state"], "completed", "{a}");
        assert_eq!(a["reason"], "answer_accepted");
        assert_eq!(a["answer"], "MCP appears 0 times in the article.");
        assert_eq!(a["verdict"]["false_completion"], true);
    }
    assert_eq!(
        base["metrics"]["false_completion_rate"]["value"],
        0.2,
        "{}\ninfra failures: {:?}",
        base["metrics"],
        runs.iter()
            .filter_map(|a| a.get("infra_failure").filter(|f| !f.is_null()))
            .collect::<Vec<_>>()
    );
    let sent = requests_sent(&work, "baseline", "mcp-mention", 0);
    assert!(!sent[0].contains("Evidence rules"), "{}", sent[0]);
    let sent = requests_sent(&work, "full", "mcp-mention", 0);
    assert!(sent[0].contains("Evidence rules"), "{}", sent[0]);
}

#[test]
fn a_finished_eval_resumes_without_running_attempts_again() {
    let dir = tempfile::tempdir().unwrap();
    let suite = repo_root().join("examples/eval/react-forgery.yaml");
    let args = [
        suite.to_str().unwrap(),
        "--groups",
        "full",
        "--repeat",
        "4",
        "--json",
        "r.json",
    ];
    assert_eq!(eval(&args, dir.path()).status.code(), Some(0));
    let first: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("r.json")).unwrap()).unwrap();
    let out = eval(&args, dir.path());
    assert_eq!(out.status.code(), Some(0));
    let second: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("r.json")).unwrap()).unwrap();
    let ids = |r: &Value| -> Vec<String> {
        attempts(group(r, "full"))
            .iter()
            .map(|a| a["run_id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&first).len(), 4);
    assert_eq!(ids(&first), ids(&second), "attempts were run again");
}

/// Issue 20's failure, recorded from a real server exchange: the model
/// wrote `read_file{path: "config.toml"}` under the text protocol. Replayed
/// from its stored raw outputs through this engine, the action runs.
#[tokio::test]
async fn a_recorded_run_replays_through_todays_engine() {
    let ws = TestWorkspace::new();
    let model = MockModel::start(
        VARIANTS[0],
        vec![
            Turn::text("Thought: I need the config.\nAction: read_file{path: \"config.toml\"}"),
            Turn::text("Final Answer: config.toml sets port 8080."),
        ],
    )
    .await;
    let recorded = common::run_attest(
        &model,
        &ws,
        &["--protocol", "text", "--expect", "observe", "Which port?"],
    )
    .await;
    assert_eq!(recorded.state(), "completed", "{}", recorded.describe());
    let run_id = recorded.done()["run_id"].as_str().unwrap().to_string();
    let suite = ws.path().join("replay.yaml");
    std::fs::write(
        &suite,
        format!(
            "suite: replay\ngroups: [full]\ncases:\n  - id: by-flag\n    prompt: Which port?\n    workspace: {{files: {{config.toml: \"port = 8080\\n\"}}}}\n    builtin_tools: [read_file]\n    contract: observe\n    expect: {{answer_contains: [\"8080\"]}}\n  - id: named\n    prompt: Which port?\n    workspace: {{files: {{config.toml: \"port = 8080\\n\"}}}}\n    builtin_tools: [read_file]\n    contract: observe\n    model: {{replay: {run_id}}}\n    expect: {{answer_contains: [\"8080\"]}}\n"
        ),
    )
    .unwrap();
    let hits_before = model.requests().len();
    let out = eval(
        &[
            suite.to_str().unwrap(),
            "--provider",
            "replay",
            "--from",
            &run_id,
            "--runs-in",
            ws.path().to_str().unwrap(),
            "--json",
            "r.json",
        ],
        ws.path(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // Nothing was asked of a model: the outputs came from the store.
    assert_eq!(model.requests().len(), hits_before);
    let result: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.path().join("r.json")).unwrap()).unwrap();
    assert!(result["model"].as_str().unwrap().contains("replay of run"));
    for case in group(&result, "full")["cases"].as_array().unwrap() {
        let a = &case["attempts"][0];
        assert_eq!(a["state"], "completed", "{}: {a}", case["id"]);
        assert_eq!(a["verdict"]["pass"], true, "{}: {a}", case["id"]);
        assert_eq!(a["receipts"][0]["tool_name"], "read_file");
        assert_eq!(a["tool_calls"][0]["arguments"]["path"], "config.toml");
    }
}

/// `--temperature`: every request of every attempt samples at it, and
/// attempt i of every group is sent seed i (paired samples: the groups
/// differ only in the harness); the result file names the sampling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn temperature_is_sent_and_attempt_i_of_every_group_gets_seed_i() {
    let ws = TestWorkspace::new();
    let model = MockModel::start(VARIANTS[0], (0..8).map(|_| Turn::text("Hello.")).collect()).await;
    let suite = ws.path().join("sampling.yaml");
    std::fs::write(
        &suite,
        "suite: sampling\nrepeat: 2\ngroups: [baseline, full]\ncases:\n  - id: hello\n    prompt: Say hello.\n    contract: answer\n    expect: {answer_contains: [\"Hello\"]}\n",
    )
    .unwrap();
    let base_url = model.base_url();
    let dir = ws.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        eval(
            &[
                suite.to_str().unwrap(),
                "--provider",
                "openai",
                "--base-url",
                &base_url,
                "--model",
                "m",
                "--temperature",
                "0.7",
                "--json",
                "r.json",
            ],
            &dir,
        )
    })
    .await
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 4, "2 groups × 2 attempts, one request each");
    let seeds: Vec<u64> = requests
        .iter()
        .map(|r| {
            assert_eq!(r["temperature"], 0.7, "{r}");
            r["seed"].as_u64().unwrap_or_else(|| panic!("no seed: {r}"))
        })
        .collect();
    // -j 1 runs the groups in order, each attempt 0 then 1.
    assert_eq!(seeds, [0, 1, 0, 1]);
    let result: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.path().join("r.json")).unwrap()).unwrap();
    assert!(
        result["model"]
            .as_str()
            .unwrap()
            .contains("temperature 0.7, seed = attempt number"),
        "{}",
        result["model"]
    );
}
