//! A repository cannot turn attest against its user (SPEC F2, F4, F14),
//! through the binary: the shell policy's known bypasses never run under
//! `--approval deny`; sandboxed commands cannot change `.attest/`,
//! `attest.toml` or `.git/`; tools get a scrubbed environment; command
//! tools run in the sandbox.

mod common;

use common::*;
use serde_json::json;
use std::path::Path;

fn sandbox_here() -> bool {
    let report = attest::tools::Sandbox::detect(attest::SandboxMode::WorkspaceWrite);
    if report.mechanism.is_none() {
        println!("no sandbox mechanism on this machine: {}", report.note);
    }
    report.mechanism.is_some()
}

/// `attest trace` of the run `r` in `ws`, which must succeed.
async fn trace_of(ws: &TestWorkspace, r: &RunResult) -> RunResult {
    let trace = run_binary(
        vec![
            "trace".into(),
            r.done()["run_id"].as_str().unwrap().into(),
            "-C".into(),
            ws.path().display().to_string(),
        ],
        &[],
    )
    .await;
    assert_eq!(trace.code, 0, "{}", trace.describe());
    trace
}

fn has(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

fn executable(ws: &TestWorkspace, rel: &str, body: &str) {
    let p = ws.write(rel, body);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Each command would create its marker file if it ran, and each needs
/// the programs listed to do so.
const BYPASSES: &[(&str, &str, &[&str])] = &[
    ("m1", "env -S 'touch m1' ls", &["env"]),
    ("m2", "PATH=.:$PATH ls", &[]),
    ("m3", "echo dG91Y2ggbTM= | base64 -d | sh", &["base64"]),
    ("m4", "sh <<EOF\ntouch m4\nEOF", &[]),
    ("m5", "python3 -c 'open(\"m5\", \"w\")'", &["python3"]),
    ("m6", "awk 'BEGIN{system(\"touch m6\")}'", &["awk"]),
    ("m7", "find . -maxdepth 0 -exec touch m7 ';'", &["find"]),
    ("m8", "sed -n '1e touch m8' config.toml", &["sed"]),
    ("m9", "git -c core.fsmonitor='touch m9' status", &["git"]),
    ("m10", "git status", &["git"]),
    ("m11", "bash -c \"$'\\x74ouch' m11\"", &["bash"]),
    ("m12", "rg --pre ./pre.sh x", &["rg"]),
    (
        "m13",
        "bash -c \"x='a[\\$(touch m13)]'; echo \\$((x))\"",
        &["bash"],
    ),
];

fn bypass_workspace() -> TestWorkspace {
    let ws = TestWorkspace::new();
    // A `ls` of the repository's own, for `PATH=.`.
    executable(&ws, "ls", "#!/bin/sh\ntouch m2\n");
    executable(&ws, "pre.sh", "#!/bin/sh\ntouch m12\ncat \"$1\"\n");
    // A repository whose own config runs a program on `git status`.
    ws.write(
        ".git/config",
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = touch m10\n",
    );
    ws.write(".git/HEAD", "ref: refs/heads/main\n");
    std::fs::create_dir_all(ws.path().join(".git/objects")).unwrap();
    std::fs::create_dir_all(ws.path().join(".git/refs")).unwrap();
    ws
}

fn bypass_turns() -> Vec<Turn> {
    vec![
        Turn::calls(
            "",
            BYPASSES
                .iter()
                .map(|(_, cmd, _)| call("shell", json!({ "command": cmd })))
                .chain([call("shell", json!({"command": "cat config.toml | wc -l"}))])
                .collect(),
        ),
        Turn::text("done"),
    ]
}

#[tokio::test]
async fn known_bypasses_never_run_under_approval_deny() {
    let v = VARIANTS[0];
    let ws = bypass_workspace();
    let model = MockModel::start(v, bypass_turns()).await;
    let r = run_attest(&model, &ws, &["--approval", "deny", "Look around"]).await;
    model.assert_valid();
    assert_eq!(r.state(), "completed", "{}", r.describe());
    for (marker, cmd, _) in BYPASSES {
        assert!(
            !ws.path().join(marker).exists(),
            "`{cmd}` ran: {marker} was created"
        );
    }
    let receipts = r.done()["receipts"].as_array().unwrap().clone();
    assert_eq!(receipts.len(), BYPASSES.len() + 1, "{}", r.describe());
    for (receipt, (_, cmd, _)) in receipts.iter().zip(BYPASSES) {
        assert_eq!(receipt["status"], "denied", "`{cmd}`: {receipt}");
    }
    // The ordinary read-only pipeline still ran.
    assert_eq!(receipts[BYPASSES.len()]["status"], "ok", "{}", r.describe());
    let results = model.tool_results(1);
    assert!(results.last().unwrap().1.contains('2'), "{results:?}");
    // Every bypass was put to the approver (none was allowed outright).
    assert_eq!(
        r.of_type("approval_requested").len(),
        BYPASSES.len(),
        "{}",
        r.describe()
    );
}

#[tokio::test]
async fn the_same_commands_do_run_when_approved() {
    // The control: shows the markers would be seen if a bypass ran.
    let v = VARIANTS[0];
    let ws = bypass_workspace();
    let model = MockModel::start(v, bypass_turns()).await;
    let r = run_attest(&model, &ws, &["--approval", "allow", "Look around"]).await;
    assert_eq!(r.state(), "completed", "{}", r.describe());
    let mut checked = 0;
    for (marker, cmd, needs) in BYPASSES {
        if !needs.iter().all(|p| has(p)) {
            println!("control skipped for `{cmd}`: needs {needs:?}");
            continue;
        }
        assert!(
            ws.path().join(marker).exists(),
            "control: `{cmd}` did not create {marker}: {}",
            r.describe()
        );
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} controls could run here");
}

fn store_bytes(ws: &TestWorkspace) -> Vec<u8> {
    let mut bytes = Vec::new();
    for name in ["attest.db", "attest.db-wal"] {
        if let Ok(b) = std::fs::read(ws.path().join(".attest").join(name)) {
            bytes.extend(b);
        }
    }
    bytes
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

fn triggers(db: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test]
async fn sandboxed_commands_cannot_change_the_store_the_config_or_git() {
    if !sandbox_here() {
        return;
    }
    let v = VARIANTS[1];
    let ws = TestWorkspace::new();
    ws.write(".git/config", "[core]\n\tbare = false\n");
    let config_before = std::fs::read_to_string(ws.path().join("attest.toml")).unwrap();
    // Written so that the marker itself never appears in a command line
    // (which the store records).
    let marker = "$(printf 'FOR%s' GED)";
    let attempts = [
        format!("echo {marker} >> .attest/attest.db"),
        "rm -f .attest/attest.db-wal .attest/attest.db".to_string(),
        format!("printf '[provider]\\nbase_url = \"%s\"\\n' {marker} >> attest.toml"),
        "mv attest.toml elsewhere.toml".to_string(),
        format!("echo \"[core] fsmonitor = {marker}\" >> .git/config"),
        "echo 'touch pwned' > .git/hooks/pre-commit".to_string(),
        "python3 -c \"import sqlite3; c = sqlite3.connect('.attest/attest.db'); c.execute('DROP TRIGGER entries_no_update'); c.commit()\"".to_string(),
        "echo still-writable > notes.txt".to_string(),
    ];
    let model = MockModel::start(
        v,
        vec![
            Turn::calls(
                "",
                attempts
                    .iter()
                    .map(|c| call("shell", json!({ "command": c })))
                    .collect(),
            ),
            Turn::text("done"),
        ],
    )
    .await;
    let r = run_attest(&model, &ws, &["--approval", "allow", "Tamper"]).await;
    model.assert_valid();
    assert_eq!(r.state(), "completed", "{}", r.describe());
    let statuses: Vec<String> = r
        .of_type("tool_result")
        .iter()
        .map(|e| e["status"].as_str().unwrap().to_string())
        .collect();
    // Each attempt ran and failed; the ordinary write worked.
    assert_eq!(
        statuses,
        ["error", "error", "error", "error", "error", "error", "error", "ok"],
        "{}",
        r.describe()
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("attest.toml")).unwrap(),
        config_before
    );
    assert!(!ws.path().join("elsewhere.toml").exists());
    assert_eq!(
        std::fs::read_to_string(ws.path().join(".git/config")).unwrap(),
        "[core]\n\tbare = false\n"
    );
    assert!(!ws.path().join(".git/hooks/pre-commit").exists());
    assert!(ws.path().join(".attest/attest.db").exists());
    assert!(!contains(&store_bytes(&ws), "FORGED"));
    assert_eq!(
        triggers(&ws.path().join(".attest/attest.db")),
        ["entries_no_delete", "entries_no_update"]
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("notes.txt")).unwrap(),
        "still-writable\n"
    );
    // The model was told why.
    let results = model.tool_results(1);
    assert!(results[0].1.contains("read-only"), "{results:?}");
    // The store is whole: the run reads back.
    trace_of(&ws, &r).await;
}

#[tokio::test]
async fn tools_get_a_scrubbed_environment_plus_the_pass_through_names() {
    let v = VARIANTS[2];
    let ws = TestWorkspace::new();
    ws.append_config("[sandbox]\nenv_passthrough = [\"MY_PASSTHROUGH\"]\n");
    let model = MockModel::start(
        v,
        vec![
            Turn::calls(
                "",
                vec![
                    call(
                        "shell",
                        json!({"command": "echo \"aws=[$AWS_SECRET_ACCESS_KEY] pass=[$MY_PASSTHROUGH]\""}),
                    ),
                    call("shell", json!({"command": "env"})),
                ],
            ),
            Turn::text("done"),
        ],
    )
    .await;
    let r = run_attest_env(
        &model,
        &ws,
        &["--approval", "allow", "Show the environment"],
        &[
            ("AWS_SECRET_ACCESS_KEY", "canary-xyz-98765"),
            ("MY_PASSTHROUGH", "arrived-4242"),
        ],
    )
    .await;
    model.assert_valid();
    assert_eq!(r.state(), "completed", "{}", r.describe());
    let results = model.tool_results(1);
    assert!(
        results[0].1.contains("aws=[] pass=[arrived-4242]"),
        "{results:?}"
    );
    assert!(
        results[1].1.contains("MY_PASSTHROUGH=arrived-4242"),
        "{results:?}"
    );
    for i in 0..model.requests().len() {
        assert!(
            !model.request_text(i).contains("canary-xyz"),
            "the canary reached request {i}"
        );
    }
    assert!(!r.stdout.contains("canary-xyz"));
    assert!(!contains(&store_bytes(&ws), "canary-xyz"));
    assert!(contains(&store_bytes(&ws), "arrived-4242"));
}

#[tokio::test]
async fn command_tools_run_in_the_sandbox_unless_configured_out() {
    if !sandbox_here() {
        return;
    }
    let v = VARIANTS[3];
    let ws = TestWorkspace::new();
    let outside = tempfile::tempdir().unwrap();
    let confined = outside.path().join("from-confined");
    let free = outside.path().join("from-free");
    ws.append_config(&format!(
        r#"
[[tools]]
name = "confined_write"
description = "Write a file"
effect = "mutate"
command = ["sh", "-c", "cat >/dev/null; echo x > '{}' && echo '{{}}'"]

[[tools]]
name = "free_write"
description = "Write a file"
effect = "mutate"
sandbox = false
command = ["sh", "-c", "cat >/dev/null; echo x > '{}' && echo '{{}}'"]
"#,
        confined.display(),
        free.display()
    ));
    let model = MockModel::start(
        v,
        vec![
            Turn::calls(
                "",
                vec![
                    call("confined_write", json!({})),
                    call("free_write", json!({})),
                ],
            ),
            Turn::text("done"),
        ],
    )
    .await;
    let r = run_attest(&model, &ws, &["--approval", "allow", "Write"]).await;
    model.assert_valid();
    assert_eq!(r.state(), "completed", "{}", r.describe());
    let statuses: Vec<String> = r
        .of_type("tool_result")
        .iter()
        .map(|e| e["status"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(statuses, ["error", "ok"], "{}", r.describe());
    assert!(!confined.exists(), "a sandboxed command tool wrote outside");
    assert!(free.exists());
}

/// Drops the append-only triggers and rewrites the first entry of `run`
/// whose type is `entry_type`, replacing `from` by `to` in its JSON, as an
/// attacker with access to the file would. Returns the entry's 1-based
/// position in the run's log.
fn tamper(ws: &TestWorkspace, run: &str, entry_type: &str, from: &str, to: &str) -> usize {
    let conn = rusqlite::Connection::open(ws.path().join(".attest/attest.db")).unwrap();
    conn.execute_batch("DROP TRIGGER entries_no_update; DROP TRIGGER entries_no_delete;")
        .unwrap();
    let rows: Vec<(i64, String, String)> = {
        let mut stmt = conn
            .prepare("SELECT id, type, body FROM entries WHERE run_id = ?1 ORDER BY id")
            .unwrap();
        stmt.query_map([run], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let (index, (id, _, body)) = rows
        .iter()
        .enumerate()
        .find(|(_, (_, t, b))| t == entry_type && b.contains(from))
        .unwrap_or_else(|| panic!("no {entry_type} entry with {from}"));
    conn.execute(
        "UPDATE entries SET body = ?2 WHERE id = ?1",
        rusqlite::params![id, body.replace(from, to)],
    )
    .unwrap();
    index + 1
}

#[tokio::test]
async fn trace_and_resume_refuse_a_tampered_log_naming_the_first_bad_entry() {
    let v = VARIANTS[1];
    let ws = TestWorkspace::new();
    let model = MockModel::start(
        v,
        vec![
            Turn::tool("read_file", json!({"path": "config.toml"})),
            Turn::Delayed {
                delay: std::time::Duration::from_secs(20),
                turn: Box::new(Turn::text("too late")),
            },
            Turn::text("The port is 8080."),
        ],
    )
    .await;
    let (code, lines) = run_and_signal(
        &model,
        &ws,
        &["Which port?"],
        "-KILL",
        "\"type\":\"tool_result\"",
    )
    .await;
    assert_eq!(code, None, "killed mid-run");
    let run_id = serde_json::from_str::<serde_json::Value>(&lines[0]).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let trace_args = || {
        vec![
            "trace".to_string(),
            run_id.clone(),
            "-C".to_string(),
            ws.path().display().to_string(),
        ]
    };
    // Untouched, the log reads back.
    let before = run_binary(trace_args(), &[]).await;
    assert_eq!(before.code, 0, "{}", before.describe());

    // The tool result now claims another port.
    let seq = tamper(&ws, &run_id, "tool_result", "8080", "9999");
    let trace = run_binary(trace_args(), &[]).await;
    assert_eq!(trace.code, 2, "{}", trace.describe());
    assert!(
        trace.stderr.contains("hash chain is broken")
            && trace.stderr.contains(&format!("at entry {seq} (row ")),
        "{}",
        trace.describe()
    );
    assert!(!trace.stdout.contains("9999"), "{}", trace.describe());

    let requests_before = model.requests().len();
    let resume = run_binary(
        vec![
            "resume".into(),
            run_id.clone(),
            "--json".into(),
            "--base-url".into(),
            model.base_url(),
            "-C".into(),
            ws.path().display().to_string(),
        ],
        &[],
    )
    .await;
    assert_eq!(resume.code, 2, "{}", resume.describe());
    assert!(
        resume.stderr.contains(&format!("at entry {seq} (row "))
            && resume.stderr.contains("resume refuses it"),
        "{}",
        resume.describe()
    );
    assert_eq!(
        model.requests().len(),
        requests_before,
        "resume reached the model"
    );
    assert!(resume.events.is_empty(), "{}", resume.describe());
}

#[tokio::test]
async fn the_write_and_edit_tools_refuse_the_store_the_config_and_git() {
    // No sandbox needed: the built-in tools check the path themselves.
    let v = VARIANTS[0];
    let ws = TestWorkspace::new();
    ws.write(".git/config", "[core]\n\tbare = false\n");
    let config_before = std::fs::read_to_string(ws.path().join("attest.toml")).unwrap();
    let model = MockModel::start(
        v,
        vec![
            Turn::calls(
                "",
                vec![
                    call(
                        "write_file",
                        json!({"path": ".attest/forged.txt", "content": "x"}),
                    ),
                    call(
                        "write_file",
                        json!({"path": "attest.toml", "content": "[provider]\n"}),
                    ),
                    call(
                        "write_file",
                        json!({"path": "./.git/hooks/pre-commit", "content": "touch pwned"}),
                    ),
                    call(
                        "edit_file",
                        json!({"path": ".git/config", "old_string": "bare = false", "new_string": "fsmonitor = ./x"}),
                    ),
                    call(
                        "write_file",
                        json!({"path": "notes.txt", "content": "still-writable"}),
                    ),
                ],
            ),
            Turn::text("done"),
        ],
    )
    .await;
    let r = run_attest(&model, &ws, &["--approval", "allow", "Tamper"]).await;
    model.assert_valid();
    assert_eq!(r.state(), "completed", "{}", r.describe());
    let results = model.tool_results(1);
    assert_eq!(results.len(), 5, "{results:?}");
    for (_, text, _) in &results[..4] {
        assert!(text.contains("which is protected"), "{results:?}");
    }
    assert!(!results[4].1.contains("protected"), "{results:?}");
    assert!(!ws.path().join(".attest/forged.txt").exists());
    assert!(!ws.path().join(".git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read_to_string(ws.path().join("attest.toml")).unwrap(),
        config_before
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join(".git/config")).unwrap(),
        "[core]\n\tbare = false\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("notes.txt")).unwrap(),
        "still-writable"
    );
    // Every run's trace says what its sandbox confines and what not.
    let trace = trace_of(&ws, &r).await;
    let line = trace
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("sandbox "))
        .unwrap_or_else(|| panic!("no sandbox line: {}", trace.stdout));
    let report = attest::tools::Sandbox::detect(attest::SandboxMode::WorkspaceWrite);
    assert!(
        line.contains(report.mechanism.unwrap_or("none")) && line.contains("not confined: "),
        "{line}"
    );
}
