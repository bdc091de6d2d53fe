//! Durable transcript: sessions, crash-safe resume, `attest trace`, and the
//! store's handling of secrets and damage — through the real binary.

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::Duration;

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn ws_arg(ws: &TestWorkspace) -> String {
    ws.path().display().to_string()
}

/// A mutating tool that records each execution, then takes its time.
const SLOW_WRITE: &str = r#"
[[tools]]
name = "slow_write"
description = "Append a line to executions.log, slowly"
effect = "mutate"
command = ["sh", "-c", "cat >/dev/null; echo ran >> executions.log; sleep 4; echo done"]
permission = "allow"
"#;

fn executions(ws: &TestWorkspace) -> usize {
    std::fs::read_to_string(ws.path().join("executions.log")).map_or(0, |t| t.lines().count())
}

#[tokio::test]
async fn second_turn_of_a_session_carries_the_first_turns_calls_and_results() {
    for v in [VARIANTS[0], VARIANTS[3]] {
        let ws = TestWorkspace::new();
        let read = call("read_file", json!({"path": "config.toml"}));
        let read_id = read.id.clone();
        let model = MockModel::start(
            v,
            vec![
                Turn::calls("Let me open the config first.", vec![read]),
                Turn::text("The port is 8080."),
                Turn::text("You asked about the port; it is 8080."),
            ],
        )
        .await;
        let r1 = run_attest(
            &model,
            &ws,
            &["--session", "s1", "--expect", "observe", "Which port?"],
        )
        .await;
        assert_eq!(r1.state(), "completed", "{}", r1.describe());
        let r2 = run_attest(&model, &ws, &["--session", "s1", "What did I ask before?"]).await;
        assert_eq!(r2.state(), "completed", "{}", r2.describe());
        model.assert_valid();
        let turn2 = model.request_text(2);
        assert!(turn2.contains(&read_id), "turn 1's call missing: {turn2}");
        assert!(
            turn2.contains("port = 8080"),
            "turn 1's result missing: {turn2}"
        );
        assert!(turn2.contains("Which port?") && turn2.contains("The port is 8080."));
        assert!(
            !turn2.contains("Let me open the config first."),
            "pre-tool narration replayed: {turn2}"
        );
        assert_eq!(r1.events[0]["session_id"], "s1");

        let out = run_binary(
            s(&["runs", "--session", "s1", "--json", "-C", &ws_arg(&ws)]),
            &[],
        )
        .await;
        let runs: Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(runs.as_array().unwrap().len(), 2);
        assert!(runs
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["status"] == "completed"));
        let out = run_binary(s(&["sessions", "-C", &ws_arg(&ws)]), &[]).await;
        assert!(out.stdout.contains("s1  2 run(s)"), "{}", out.stdout);
    }
}

#[tokio::test]
async fn an_unverified_answer_is_not_replayed_as_fact_in_the_next_turn() {
    let v = VARIANTS[1];
    let ws = TestWorkspace::new();
    let model = MockModel::start(
        v,
        vec![
            Turn::text("I sent the report to bob."),
            Turn::text("Yes, it is sent."),
            Turn::text("I have no record of sending it."),
        ],
    )
    .await;
    ws.append_config(
        "[[tools]]\nname = \"send_report\"\ndescription = \"Send\"\neffect = \"deliver\"\ncommand = [\"true\"]\nevidence = \"/message_id\"\n",
    );
    let r1 = run_attest(
        &model,
        &ws,
        &["--session", "s", "--expect", "deliver", "Send the report"],
    )
    .await;
    assert_eq!(r1.state(), "unverified");
    let r2 = run_attest(&model, &ws, &["--session", "s", "Did you send it?"]).await;
    assert_eq!(r2.state(), "completed");
    let turn2 = model.request_text(2);
    assert!(!turn2.contains("I sent the report to bob."), "{turn2}");
    assert!(!turn2.contains("Yes, it is sent."), "{turn2}");
    assert!(turn2.contains("ended unverified"), "{turn2}");
}

#[tokio::test]
async fn trace_shows_requests_calls_receipts_and_the_terminal_basis() {
    let v = VARIANTS[1];
    let ws = TestWorkspace::new();
    let model = MockModel::start(
        v,
        vec![
            Turn::Status {
                code: 503,
                retry_after: Some("0"),
            },
            Turn::text("Observation: fake"),
            Turn::calls(
                "",
                vec![
                    call("read_file", json!({"path": "config.toml"})),
                    call("shell", json!({"command": "touch made.txt"})),
                ],
            ),
            Turn::text("8080"),
        ],
    )
    .await;
    let r = run_attest(&model, &ws, &["--expect", "observe", "Which port?"]).await;
    assert_eq!(r.state(), "completed", "{}", r.describe());
    let run_id = r.done()["run_id"].as_str().unwrap().to_string();

    let out = run_binary(s(&["trace", &run_id[..8], "-C", &ws_arg(&ws)]), &[]).await;
    assert_eq!(out.code, 0, "{}", out.describe());
    let t = &out.stdout;
    for needle in [
        "loop_version loop-",
        "prompt_version prompt-",
        "request attempt 1: openai_chat test-model stream=true",
        "request attempt 2",
        "retry 1 after 0 ms",
        "context: base_prompt 1 item(s)",
        "tools: read_file, list_dir, grep, write_file, edit_file, shell",
        "prefix ",
        "response: finish tool_calls",
        "protocol violation ForgedObservation",
        "permission read_file",
        "→ allowed by policy",
        "permission shell",
        "→ refused by non_interactive",
        "receipt read_file",
        "\"sha256\"",
        "receipt shell",
        "denied",
        "terminal: completed (contract_satisfied)",
        "basis: observe contract satisfied by receipts: read_file",
    ] {
        assert!(t.contains(needle), "trace lacks `{needle}`:\n{t}");
    }

    let out = run_binary(s(&["trace", &run_id, "--json", "-C", &ws_arg(&ws)]), &[]).await;
    let doc: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(doc["run"]["status"], "completed");
    assert!(doc["entries"].as_array().unwrap().len() > 10);

    let out = run_binary(s(&["trace", &run_id, "--raw", "-C", &ws_arg(&ws)]), &[]).await;
    // Streamed: the raw output is the SSE data, split across chunks.
    assert!(
        out.stdout.contains("\"Observat") && out.stdout.contains("ion: fake"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("protocol_violation"), "{}", out.stdout);
}

/// Start `attest run --json` in the background, SIGKILL it when `kill_when`
/// sees a line, and return the lines it printed.
async fn run_and_kill(
    model: &MockModel,
    ws: &TestWorkspace,
    extra: &[&str],
    kill_when: &'static str,
) -> Vec<String> {
    let (code, lines) = if kill_when.contains("tool_started") {
        // Killed while the slow write runs: once it has written its line
        // (it is started after `tool_started` is printed).
        let log = ws.path().join("executions.log");
        let written = move || std::fs::read_to_string(&log).is_ok_and(|t| t.contains("ran"));
        run_and_signal_when(model, ws, extra, "-KILL", kill_when, written).await
    } else {
        run_and_signal(model, ws, extra, "-KILL", kill_when).await
    };
    assert_eq!(code, None, "the process was killed by a signal");
    lines
}

fn seqs(lines: &[String]) -> Vec<u64> {
    lines
        .iter()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

async fn resume(ws: &TestWorkspace, model: &MockModel, run_id: &str) -> RunResult {
    run_binary(
        s(&[
            "resume",
            run_id,
            "--json",
            "--base-url",
            &model.base_url(),
            "-C",
            &ws_arg(ws),
        ]),
        &[],
    )
    .await
}

#[tokio::test]
async fn sigkill_at_any_point_then_resume_loses_nothing_and_never_reexecutes_a_mutation() {
    let v = VARIANTS[1];
    // Kill points: waiting for the model (nothing logged yet), during the
    // mutating call (logged, no result), after the result (next model call).
    for point in ["before_call", "during_call", "after_result"] {
        let ws = TestWorkspace::new();
        ws.append_config(SLOW_WRITE);
        let mut turns = Vec::new();
        let kill_when = match point {
            "before_call" => {
                turns.push(Turn::Delayed {
                    delay: Duration::from_secs(20),
                    turn: Box::new(Turn::text("too late")),
                });
                "\"type\":\"run_started\""
            }
            "during_call" => {
                turns.push(Turn::tool("slow_write", json!({})));
                "\"type\":\"tool_started\""
            }
            _ => {
                ws.append_config("[[tools]]\nname = \"quick_write\"\ndescription = \"Append\"\neffect = \"mutate\"\ncommand = [\"sh\", \"-c\", \"cat >/dev/null; echo ran >> executions.log\"]\npermission = \"allow\"\n");
                turns.push(Turn::tool("quick_write", json!({})));
                turns.push(Turn::Delayed {
                    delay: Duration::from_secs(20),
                    turn: Box::new(Turn::text("too late")),
                });
                "\"type\":\"tool_result\""
            }
        };
        // What the model says after the resume.
        turns.push(Turn::text("Stopped; the write may not have completed."));
        let model = MockModel::start(v, turns).await;
        let printed = run_and_kill(&model, &ws, &["Append a line"], kill_when).await;
        let run_id = serde_json::from_str::<Value>(&printed[0]).unwrap()["run_id"]
            .as_str()
            .unwrap()
            .to_string();
        let executed_before = executions(&ws);

        // The store shows the run as interrupted and keeps every event that was printed.
        let out = run_binary(s(&["runs", "-C", &ws_arg(&ws)]), &[]).await;
        assert!(
            out.stdout.contains("interrupted?"),
            "{point}: {}",
            out.stdout
        );
        let stored_seqs: Vec<u64> = ws
            .log_entries()
            .iter()
            .filter(|e| e["entry"] == "event")
            .map(|e| e["event"]["seq"].as_u64().unwrap())
            .collect();
        for seq in seqs(&printed) {
            assert!(
                stored_seqs.contains(&seq),
                "{point}: printed event {seq} lost"
            );
        }

        let r = resume(&ws, &model, &run_id).await;
        model.assert_valid();
        assert_eq!(
            r.events[0]["type"],
            "run_resumed",
            "{point}: {}",
            r.describe()
        );
        assert_eq!(r.state(), "completed", "{point}: {}", r.describe());
        assert_eq!(
            executions(&ws),
            executed_before,
            "{point}: a mutating call was re-executed"
        );
        let last = model.requests().len() - 1;
        let results = model.tool_results(last);
        match point {
            "during_call" => {
                assert_eq!(
                    r.events[0]["interrupted_calls"].as_array().unwrap().len(),
                    1
                );
                assert!(results[0].1.contains("INTERRUPTED"), "{results:?}");
                assert_eq!(r.done()["receipts"][0]["status"], "interrupted");
            }
            "after_result" => assert!(
                results[0].1.contains("ran")
                    || results[0].1.is_empty()
                    || !results[0].1.contains("INTERRUPTED")
            ),
            _ => assert!(results.is_empty()),
        }
        // Seq numbers continue after the crash.
        let first_resumed = r.events[0]["seq"].as_u64().unwrap();
        assert!(first_resumed > *seqs(&printed).last().unwrap(), "{point}");
        // Resuming again is refused: the run has ended.
        let again = resume(&ws, &model, &run_id).await;
        assert_eq!(again.code, 2);
        assert!(again.stderr.contains("already ended"), "{}", again.stderr);
    }
}

#[tokio::test]
async fn the_next_run_of_a_session_closes_a_crashed_run_as_interrupted() {
    let v = VARIANTS[1];
    let ws = TestWorkspace::new();
    ws.append_config(SLOW_WRITE);
    let slow = call("slow_write", json!({}));
    let slow_id = slow.id.clone();
    let model = MockModel::start(
        v,
        vec![
            Turn::calls("", vec![slow]),
            Turn::text("The last write was interrupted."),
        ],
    )
    .await;
    let printed = run_and_kill(
        &model,
        &ws,
        &["--session", "s", "Append"],
        "\"type\":\"tool_started\"",
    )
    .await;
    let crashed = serde_json::from_str::<Value>(&printed[0]).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = run_attest(&model, &ws, &["--session", "s", "What happened?"]).await;
    model.assert_valid();
    assert_eq!(r.state(), "completed", "{}", r.describe());
    assert_eq!(executions(&ws), 1, "the interrupted call was re-executed");
    let results = model.tool_results(1);
    assert_eq!(results[0].0, slow_id);
    assert!(results[0].1.contains("INTERRUPTED"), "{results:?}");
    let out = run_binary(s(&["runs", "--json", "-C", &ws_arg(&ws)]), &[]).await;
    let runs: Value = serde_json::from_str(&out.stdout).unwrap();
    let old = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == crashed.as_str())
        .unwrap();
    assert_eq!(old["status"], "failed");
    assert_eq!(old["reason"], "interrupted");
}

#[tokio::test]
async fn secrets_never_reach_the_store_file() {
    const CANARY: &str = "sk-canary-store-91c2e7";
    let v = VARIANTS[1];
    let ws = TestWorkspace::new();
    ws.write("leaked.txt", &format!("key={CANARY}"));
    let model = MockModel::start(
        v,
        vec![
            Turn::tool("read_file", json!({"path": "leaked.txt"})),
            Turn::text(&format!("The key is {CANARY}")),
        ],
    )
    .await;
    let args = s(&[
        "run",
        "--json",
        "--provider",
        "openai",
        "--base-url",
        &model.base_url(),
        "--model",
        "m",
        "-C",
        &ws_arg(&ws),
        &format!("Here is my key {CANARY}, read leaked.txt"),
    ]);
    let r = run_binary(args, &[("OPENAI_API_KEY", CANARY)]).await;
    assert_eq!(r.state(), "completed", "{}", r.describe());
    assert!(!r.stdout.contains(CANARY));
    for suffix in ["", "-wal", "-shm"] {
        let path = ws.path().join(format!(".attest/attest.db{suffix}"));
        if let Ok(bytes) = std::fs::read(&path) {
            let hay = String::from_utf8_lossy(&bytes);
            assert!(!hay.contains(CANARY), "the key reached {}", path.display());
        }
    }
    assert!(
        !model.request_text(0).contains(CANARY),
        "the key reached the model"
    );
}

#[tokio::test]
async fn a_damaged_or_newer_store_gives_a_clear_error() {
    let ws = TestWorkspace::new();
    std::fs::create_dir_all(ws.path().join(".attest")).unwrap();
    std::fs::write(ws.path().join(".attest/attest.db"), vec![0x5a; 8192]).unwrap();
    let out = run_binary(s(&["runs", "-C", &ws_arg(&ws)]), &[]).await;
    assert_eq!(out.code, 2, "{}", out.describe());
    assert!(
        out.stderr.contains("damaged") && out.stderr.contains("aside"),
        "{}",
        out.stderr
    );

    let ws = TestWorkspace::new();
    drop(ws.store());
    set_user_version(&ws, 99);
    let out = run_binary(s(&["runs", "-C", &ws_arg(&ws)]), &[]).await;
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("schema version 99"), "{}", out.stderr);
}

fn set_user_version(ws: &TestWorkspace, version: i64) {
    // Write the header field SQLite keeps `user_version` in (offset 60, big-endian).
    use std::io::{Seek, SeekFrom, Write};
    let path = ws.path().join(".attest/attest.db");
    let _ = std::fs::remove_file(ws.path().join(".attest/attest.db-wal"));
    let _ = std::fs::remove_file(ws.path().join(".attest/attest.db-shm"));
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(60)).unwrap();
    f.write_all(&(version as u32).to_be_bytes()).unwrap();
}
