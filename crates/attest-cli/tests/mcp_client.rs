//! `[[mcp_servers]]` through the real binary, against the real servers
//! from npm (`@modelcontextprotocol/server-filesystem` and
//! `server-everything`, over stdio and over streamable HTTP on loopback):
//! what the model was offered and sent, the receipts, what is on disk.
//!
//! `.ci/run` installs the servers and sets `ATTEST_MCP_SERVERS_DIR`; in CI
//! (`CI` set) a missing variable is a failure. Elsewhere the tests install
//! them with npm into the user's cache. They never skip.

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const FILESYSTEM: &str = "@modelcontextprotocol/server-filesystem";
const EVERYTHING: &str = "@modelcontextprotocol/server-everything";
/// The versions `.ci/run` installs.
const VERSION: &str = "2026.8.31";

/// Where the servers are installed, installing them when missing.
fn servers_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = match std::env::var_os("ATTEST_MCP_SERVERS_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "ATTEST_MCP_SERVERS_DIR is not set: .ci/run installs the MCP servers and sets it"
                );
                let home = std::env::var_os("HOME").expect("HOME is set");
                PathBuf::from(home).join(".cache/attest/mcp-servers")
            }
        };
        if !entry(&dir, FILESYSTEM).is_file() || !entry(&dir, EVERYTHING).is_file() {
            std::fs::create_dir_all(&dir).unwrap();
            let status = std::process::Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--prefix"])
                .arg(&dir)
                .arg(format!("{FILESYSTEM}@{VERSION}"))
                .arg(format!("{EVERYTHING}@{VERSION}"))
                .status()
                .expect("npm runs (the MCP tests need Node.js and npm)");
            assert!(status.success(), "npm install of the MCP servers failed");
        }
        dir
    })
}

fn entry(dir: &Path, package: &str) -> PathBuf {
    dir.join("node_modules").join(package).join("dist/index.js")
}

fn server_entry(package: &str) -> String {
    entry(servers_dir(), package).display().to_string()
}

/// The receipts of the run's `done` event, by tool name.
fn receipt<'a>(run: &'a RunResult, tool: &str) -> &'a Value {
    run.done()["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["tool_name"] == tool)
        .unwrap_or_else(|| panic!("no receipt for {tool}: {}", run.describe()))
}

fn offered(model: &MockModel, index: usize) -> Vec<String> {
    model.requests()[index]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
        .collect()
}

const OPENAI: Variant = Variant {
    wire: Wire::OpenAi,
    stream: false,
};

#[tokio::test]
async fn a_read_through_the_filesystem_server_satisfies_an_observe_contract() {
    let ws = TestWorkspace::new();
    ws.write("notes.txt", "the launch code is tulip\n");
    let root = ws.path().canonicalize().unwrap();
    ws.append_config(&format!(
        "[[mcp_servers]]\nname = \"fs\"\ncommand = \"node\"\nargs = [{:?}, {:?}]\ntrusted_annotations = true\n",
        server_entry(FILESYSTEM),
        root.display().to_string()
    ));
    let model = MockModel::start(
        OPENAI,
        vec![
            Turn::tool(
                "fs__read_text_file",
                json!({"path": root.join("notes.txt").display().to_string()}),
            ),
            Turn::text("The launch code is tulip."),
        ],
    )
    .await;
    let run = run_attest(&model, &ws, &["--expect", "observe", "Read notes.txt"]).await;
    assert_eq!(run.state(), "completed", "{}", run.describe());
    let tools = offered(&model, 0);
    assert!(
        tools.contains(&"fs__read_text_file".to_string()),
        "{tools:?}"
    );
    assert!(tools.contains(&"fs__write_file".to_string()), "{tools:?}");
    let read = receipt(&run, "fs__read_text_file");
    assert_eq!(read["effect"], "observe", "trusted readOnlyHint");
    assert_eq!(read["status"], "ok");
    let results = model.tool_results(1);
    assert!(
        results[0].1.contains("the launch code is tulip"),
        "what the model was sent: {results:?}"
    );
    model.assert_valid();
}

#[tokio::test]
async fn a_write_outside_the_servers_root_fails_and_writes_nothing() {
    let ws = TestWorkspace::new();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().canonicalize().unwrap().join("evil.txt");
    let root = ws.path().canonicalize().unwrap();
    ws.append_config(&format!(
        "[[mcp_servers]]\nname = \"fs\"\ncommand = \"node\"\nargs = [{:?}, {:?}]\ntrusted_annotations = true\npermission = \"allow\"\n",
        server_entry(FILESYSTEM),
        root.display().to_string()
    ));
    let model = MockModel::start(
        OPENAI,
        vec![
            Turn::tool(
                "fs__write_file",
                json!({"path": target.display().to_string(), "content": "pwned"}),
            ),
            Turn::text("Done."),
        ],
    )
    .await;
    let run = run_attest(
        &model,
        &ws,
        &[
            "--expect",
            "mutate",
            "--approval",
            "allow",
            "Write evil.txt",
        ],
    )
    .await;
    assert_ne!(run.state(), "completed", "{}", run.describe());
    let write = receipt(&run, "fs__write_file");
    assert_eq!(write["effect"], "mutate");
    assert_eq!(write["status"], "error", "{write}");
    assert!(!target.exists(), "nothing was written outside the root");
    // destructiveHint: asked even though the server's permission is allow.
    let asked = run.of_type("approval_requested");
    assert_eq!(asked.len(), 1, "{}", run.describe());
    let results = model.tool_results(1);
    assert!(
        results[0].1.to_lowercase().contains("denied") || results[0].1.contains("outside"),
        "{results:?}"
    );
}

#[tokio::test]
async fn no_permission_in_the_config_lets_a_destructive_tool_run_unasked() {
    let ws = TestWorkspace::new();
    let root = ws.path().canonicalize().unwrap();
    let target = root.join("inside.txt");
    // Every way the config can say allow: the server, the tool, the default.
    ws.append_config(&format!(
        "[[mcp_servers]]\nname = \"fs\"\ncommand = \"node\"\nargs = [{:?}, {:?}]\ntrusted_annotations = true\npermission = \"allow\"\n[permissions]\ndefault = \"allow\"\nfs__write_file = \"allow\"\n",
        server_entry(FILESYSTEM),
        root.display().to_string()
    ));
    let model = MockModel::start(
        OPENAI,
        vec![
            Turn::tool(
                "fs__write_file",
                json!({"path": target.display().to_string(), "content": "unasked"}),
            ),
            Turn::text("Done."),
        ],
    )
    .await;
    let run = run_attest(
        &model,
        &ws,
        &[
            "--expect",
            "mutate",
            "--approval",
            "deny",
            "Write inside.txt",
        ],
    )
    .await;
    assert_eq!(
        run.of_type("approval_requested").len(),
        1,
        "{}",
        run.describe()
    );
    assert_eq!(
        receipt(&run, "fs__write_file")["status"],
        "denied",
        "{}",
        run.describe()
    );
    assert!(!target.exists(), "the destructive call never ran");
    assert_ne!(run.state(), "completed", "{}", run.describe());
}

#[tokio::test]
async fn the_everything_server_progress_errors_and_structured_content() {
    let ws = TestWorkspace::new();
    ws.append_config(&format!(
        "[[mcp_servers]]\nname = \"every\"\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\ntrusted_annotations = true\ntools = [\"trigger-long-running-operation\", \"get-structured-content\", \"get-resource-reference\"]\n",
        server_entry(EVERYTHING)
    ));
    let model = MockModel::start(
        OPENAI,
        vec![
            Turn::calls(
                "",
                vec![
                    call(
                        "every__trigger-long-running-operation",
                        json!({"duration": 1, "steps": 3}),
                    ),
                    call(
                        "every__get-structured-content",
                        json!({"location": "Chicago"}),
                    ),
                    call("every__get-resource-reference", json!({"resourceId": 0})),
                ],
            ),
            Turn::text("It drizzles in Chicago."),
        ],
    )
    .await;
    let run = run_attest(&model, &ws, &["--expect", "observe", "Weather?"]).await;
    assert_eq!(
        offered(&model, 0)
            .iter()
            .filter(|t| t.starts_with("every__"))
            .count(),
        3,
        "only the allow list: {:?}",
        offered(&model, 0)
    );
    assert_eq!(
        receipt(&run, "every__trigger-long-running-operation")["status"],
        "ok"
    );
    assert_eq!(
        receipt(&run, "every__get-structured-content")["status"],
        "ok"
    );
    assert_eq!(
        receipt(&run, "every__get-resource-reference")["status"],
        "error"
    );
    let results = model.tool_results(1);
    let text = |i: usize| results[i].1.clone();
    assert!(
        text(0).contains("Long running operation completed"),
        "{results:?}"
    );
    assert!(text(1).contains("Light rain"), "{results:?}");
    assert!(text(2).contains("Invalid resourceId"), "{results:?}");

    // The long call's progress notifications: stored events between its
    // start and its result, display only (the model gets just the result).
    let long = "every__trigger-long-running-operation";
    let seq_of = |kind: &str| {
        run.of_type(kind)
            .iter()
            .find(|e| e["tool_name"] == long)
            .map(|e| e["seq"].as_u64().unwrap())
            .unwrap_or_else(|| panic!("no {kind} for {long}: {}", run.describe()))
    };
    let (started, finished) = (seq_of("tool_started"), seq_of("tool_result"));
    let reports: Vec<&Value> = run
        .of_type("tool_progress")
        .into_iter()
        .filter(|e| e["tool_name"] == long)
        .collect();
    let figures: Vec<f64> = reports
        .iter()
        .map(|e| e["progress"].as_f64().unwrap())
        .collect();
    assert!(
        figures.first() == Some(&1.0)
            && figures.last() == Some(&3.0)
            && figures.windows(2).all(|w| w[0] < w[1]),
        "progress 1, …, 3 of 3: {reports:?}"
    );
    for report in &reports {
        assert_eq!(report["total"], 3.0, "{report}");
        let seq = report["seq"].as_u64().unwrap();
        assert!(
            started < seq && seq < finished,
            "{report} outside {started}..{finished}"
        );
    }
    let stored = ws
        .log_entries()
        .into_iter()
        .filter(|e| e["event"]["type"] == "tool_progress")
        .count();
    assert_eq!(
        stored,
        reports.len(),
        "the progress events are in the store too"
    );
    assert_eq!(
        results.len(),
        3,
        "one result per call, no progress among them"
    );
}

#[tokio::test]
async fn a_stdio_server_gets_its_entrys_env_and_not_the_harnesss_and_deny_means_never_run() {
    let ws = TestWorkspace::new();
    let entry = server_entry(EVERYTHING);
    ws.append_config(&format!(
        "[[mcp_servers]]\nname = \"every\"\ncommand = \"node\"\nargs = [{entry:?}, \"stdio\"]\nenv = {{ PROBE_FROM_CONFIG = \"probe-42\" }}\npermission = \"allow\"\ntools = [\"get-env\"]\n\n[[mcp_servers]]\nname = \"locked\"\ncommand = \"node\"\nargs = [{entry:?}, \"stdio\"]\npermission = \"deny\"\ntools = [\"echo\"]\n"
    ));
    let model = MockModel::start(
        OPENAI,
        vec![
            Turn::calls(
                "",
                vec![
                    call("every__get-env", json!({})),
                    call("locked__echo", json!({"message": "let me out"})),
                ],
            ),
            Turn::text("Done."),
        ],
    )
    .await;
    let run = run_attest_env(
        &model,
        &ws,
        &["Show the environment"],
        &[("HARNESS_ONLY_VALUE", "kept-from-tools")],
    )
    .await;
    assert_eq!(
        receipt(&run, "every__get-env")["status"],
        "ok",
        "{}",
        run.describe()
    );
    assert_eq!(
        receipt(&run, "locked__echo")["status"],
        "denied",
        "{}",
        run.describe()
    );
    let results = model.tool_results(1);
    let env = &results[0].1;
    assert!(
        env.contains("\"PROBE_FROM_CONFIG\": \"probe-42\""),
        "the entry's env: {env}"
    );
    assert!(
        !env.contains("HARNESS_ONLY_VALUE") && !env.contains("kept-from-tools"),
        "the harness's own environment reached the server: {env}"
    );
    assert!(
        !results[1].1.contains("let me out"),
        "the denied call ran: {results:?}"
    );
    assert!(
        run.of_type("tool_started")
            .iter()
            .all(|e| e["tool_name"] != "locked__echo"),
        "a denied call never starts: {}",
        run.describe()
    );
}

/// The everything server over streamable HTTP on a loopback port.
struct HttpServer {
    child: std::process::Child,
    url: String,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_http_server() -> HttpServer {
    use std::io::{BufRead, BufReader};
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = std::process::Command::new("node")
        .arg(server_entry(EVERYTHING))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("node starts");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        let n = stderr.read_line(&mut line).unwrap();
        assert!(n > 0, "the HTTP server exited before listening");
        if line.contains("listening on port") {
            break;
        }
    }
    // Keep draining so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sink = String::new();
        while stderr.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
            sink.clear();
        }
    });
    HttpServer {
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
    }
}

/// A server whose tool list changes mid-run (`retire` removes `probe` and
/// sends `notifications/tools/list_changed`): the withdrawn tool leaves the
/// offered tools at a declared cache reset, and a call to it fails plainly.
#[tokio::test]
async fn a_tool_the_server_withdraws_mid_run_is_no_longer_offered_and_its_call_fails() {
    let ws = TestWorkspace::new();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/retiring-mcp-server.mjs");
    let sdk = servers_dir().join("node_modules/@modelcontextprotocol/sdk");
    ws.append_config(&format!(
        "[[mcp_servers]]\nname = \"srv\"\ncommand = \"node\"\nargs = [{:?}]\nenv = {{ ATTEST_MCP_SDK = {:?} }}\npermission = \"allow\"\n",
        fixture.display().to_string(),
        sdk.display().to_string()
    ));
    let model = MockModel::start(
        OPENAI,
        vec![
            Turn::tool("srv__retire", json!({})),
            Turn::tool("read_file", json!({"path": "config.toml"})),
            Turn::tool("srv__probe", json!({})),
            Turn::text("The probe was retired."),
        ],
    )
    .await;
    let run = run_attest(&model, &ws, &["--expect", "observe", "Retire the probe"]).await;
    assert_eq!(
        receipt(&run, "srv__retire")["status"],
        "ok",
        "{}",
        run.describe()
    );
    let probe = receipt(&run, "srv__probe");
    assert_eq!(probe["status"], "error", "{}", run.describe());
    assert!(
        model.tool_results(3)[2]
            .1
            .contains("no longer offers `probe`"),
        "{:?}",
        model.tool_results(3)
    );
    assert!(offered(&model, 0).contains(&"srv__probe".to_string()));
    assert!(
        !offered(&model, 3).contains(&"srv__probe".to_string()),
        "still offered after it was withdrawn: {:?}",
        offered(&model, 3)
    );
    // The change of the offered tools is a declared reset point.
    let resets: Vec<Value> = ws
        .log_entries()
        .into_iter()
        .filter(|e| e["trace"]["record"] == "cache_reset")
        .collect();
    assert!(
        resets.iter().any(|r| {
            let point = &r["trace"]["reset_point"];
            point["reason"] == "tool_schema_change"
                && !point["source_refs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|t| t == "srv__probe")
        }),
        "no declared reset without srv__probe: {resets:?}"
    );
}

/// A loopback TCP relay in front of `target` that keeps every byte the
/// client sent, to check the headers the server received.
async fn recording_relay(target: &str) -> (String, std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let target = target
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = std::sync::Arc::clone(&sent);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(&target).await else {
                continue;
            };
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = server.into_split();
            let kept = std::sync::Arc::clone(&kept);
            tokio::spawn(async move {
                let mut buf = [0u8; 8192];
                while let Ok(n) = client_read.read(&mut buf).await {
                    if n == 0 || server_write.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    kept.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            });
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
            });
        }
    });
    (format!("http://127.0.0.1:{port}/mcp"), sent)
}

#[tokio::test]
async fn a_streamable_http_server_with_a_bearer_token_that_is_never_shown() {
    let server = start_http_server();
    let (relay_url, sent) = recording_relay(&server.url).await;
    let ws = TestWorkspace::new();
    ws.append_config(&format!(
        "[[mcp_servers]]\nname = \"web\"\nurl = {relay_url:?}\nbearer_token_env = \"WEB_MCP_TOKEN\"\npermission = \"allow\"\ntools = [\"echo\"]\n"
    ));
    let token = "tok-3c9f1e7a5b2d";
    let model = MockModel::start(
        OPENAI,
        vec![
            Turn::tool("web__echo", json!({"message": format!("hello {token}")})),
            Turn::text("It echoed."),
        ],
    )
    .await;
    let run = run_attest_env(
        &model,
        &ws,
        &["--expect", "mutate", "Echo hello"],
        &[("WEB_MCP_TOKEN", token)],
    )
    .await;
    let echo = receipt(&run, "web__echo");
    assert_eq!(echo["status"], "ok", "{}", run.describe());
    assert_eq!(echo["effect"], "mutate", "untrusted annotations");
    let results = model.tool_results(1);
    assert!(results[0].1.starts_with("Echo: hello "), "{results:?}");
    // The token is a secret of the run: scrubbed from what the model is
    // sent, the events and the log.
    assert!(!results[0].1.contains(token), "{results:?}");
    assert!(!run.stdout.contains(token) && !run.stderr.contains(token));
    let log = serde_json::to_string(&ws.log_entries()).unwrap();
    assert!(!log.contains(token), "the token reached the log");
    // …and sent to the server, on every request, as its bearer token.
    let sent = String::from_utf8_lossy(&sent.lock().unwrap()).to_ascii_lowercase();
    let requests = sent.matches(" /mcp http/1.1").count();
    let authorized = sent
        .matches(&format!("authorization: bearer {token}"))
        .count();
    assert!(requests >= 2, "initialize, tools/list, the call: {sent}");
    assert_eq!(
        authorized, requests,
        "every request carries the token: {sent}"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_a_notice_and_the_run_goes_on() {
    let ws = TestWorkspace::new();
    ws.append_config(
        "[[mcp_servers]]\nname = \"gone\"\ncommand = \"/nonexistent/mcp-server\"\ntimeout_ms = 2000\n",
    );
    let model = MockModel::start(OPENAI, vec![Turn::text("Hello.")]).await;
    let run = run_attest(&model, &ws, &["Say hello"]).await;
    assert_eq!(run.state(), "completed", "{}", run.describe());
    assert!(
        run.stderr.contains("MCP server `gone`") && run.stderr.contains("not offered"),
        "{}",
        run.stderr
    );
    assert!(offered(&model, 0).iter().all(|t| !t.starts_with("gone__")));
}
