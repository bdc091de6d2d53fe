//! Test support: a scripted model server on loopback that speaks the OpenAI
//! chat and Anthropic Messages wire formats (streaming and not), validates
//! every request like the real services do, and records what it was sent
//! (the OpenAI Responses API has its own in `responses`); plus helpers to
//! run the real `attest` binary against it.
#![allow(dead_code)]

pub mod prompt_cache;
pub mod responses;
pub mod server;
pub mod signing;
pub mod validate;
mod wire;

use serde_json::{json, Value};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// Which wire format and transfer mode a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    OpenAi,
    Anthropic,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    pub wire: Wire,
    pub stream: bool,
}

pub const VARIANTS: [Variant; 4] = [
    Variant {
        wire: Wire::OpenAi,
        stream: false,
    },
    Variant {
        wire: Wire::OpenAi,
        stream: true,
    },
    Variant {
        wire: Wire::Anthropic,
        stream: false,
    },
    Variant {
        wire: Wire::Anthropic,
        stream: true,
    },
];

pub const STREAM_VARIANTS: [Variant; 2] = [
    Variant {
        wire: Wire::OpenAi,
        stream: true,
    },
    Variant {
        wire: Wire::Anthropic,
        stream: true,
    },
];

/// A tool call the scripted model makes. `arguments` is sent verbatim.
#[derive(Debug, Clone)]
pub struct Call {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// One scripted model turn.
#[derive(Debug, Clone)]
pub enum Turn {
    Reply {
        text: String,
        calls: Vec<Call>,
        /// Override of the finish reason; default follows the calls.
        finish: Option<&'static str>,
    },
    /// An HTTP error status, optionally with `retry-after` seconds.
    Status {
        code: u16,
        retry_after: Option<&'static str>,
    },
    /// An HTTP error status whose body is this text (a provider echoing
    /// what it was sent, say).
    ErrorBody { code: u16, body: String },
    /// A streamed reply cut off before its terminator.
    BrokenStream { text: String, calls: Vec<Call> },
    /// Wait before answering with the inner turn.
    Delayed { delay: Duration, turn: Box<Turn> },
}

static CALL_COUNTER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

pub fn call(name: &str, arguments: Value) -> Call {
    raw_call(name, &arguments.to_string())
}

pub fn raw_call(name: &str, arguments: &str) -> Call {
    let n = CALL_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Call {
        id: format!("call_{n}"),
        name: name.to_string(),
        arguments: arguments.to_string(),
    }
}

impl Turn {
    pub fn text(text: &str) -> Turn {
        Turn::Reply {
            text: text.into(),
            calls: vec![],
            finish: None,
        }
    }
    pub fn calls(text: &str, calls: Vec<Call>) -> Turn {
        Turn::Reply {
            text: text.into(),
            calls,
            finish: None,
        }
    }
    pub fn tool(name: &str, arguments: Value) -> Turn {
        Turn::calls("", vec![call(name, arguments)])
    }
}

/// What the server saw.
#[derive(Debug, Default)]
struct Recorded {
    requests: Vec<Value>,
    paths: Vec<String>,
    headers: Vec<Vec<(String, String)>>,
    violations: Vec<String>,
    /// When each request arrived and its response was handed back
    /// (microseconds since the Unix epoch), for benchmarks.
    times: Vec<(u64, u64)>,
    /// Raw bodies not yet checked ([`Checks::AfterRun`]).
    unchecked: Vec<Vec<u8>>,
}

/// When a lean server checks each request against the wire rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checks {
    /// Before it answers, as every other server here does: parsing and
    /// checking a whole body takes longer as the history grows.
    Inline,
    /// Once the run is over ([`MockModel::check_after_run`]). The answer
    /// then costs about the same at the 500th request as at the first, and
    /// the server does no growing work between a benchmark's steps. The
    /// usage it reports is estimated from the raw bytes: all input, the
    /// part shared with the previous body read from the cache.
    AfterRun,
}

/// Whether `body` keeps the wire rules of `variant`.
fn check_request(variant: Variant, body: &Value) -> Result<(), String> {
    match variant.wire {
        Wire::OpenAi => validate::openai_request(body, variant.stream),
        Wire::Anthropic => validate::anthropic_request(body, variant.stream),
    }
}

/// How many leading bytes `a` and `b` share.
fn shared_prefix(a: &[u8], b: &[u8]) -> usize {
    // Whole blocks first (compared as slices, so a few instructions per
    // block), then the bytes of the first block that differs.
    let blocks = a.chunks(64).zip(b.chunks(64)).take_while(|(x, y)| x == y);
    let start = (blocks.count() * 64).min(a.len()).min(b.len());
    start
        + a[start..]
            .iter()
            .zip(&b[start..])
            .take_while(|(x, y)| x == y)
            .count()
}

fn epoch_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

struct ScriptedResponder {
    variant: Variant,
    turns: Mutex<VecDeque<Turn>>,
    /// Picks each turn from its request instead of the script.
    choose: Option<Chooser>,
    recorded: Arc<Mutex<Recorded>>,
    cache: Mutex<prompt_cache::PromptCache>,
    /// Whether request bodies are kept for `requests()` (a benchmark's
    /// server keeps none: a long run's bodies come to hundreds of MB).
    keep_bodies: bool,
    checks: Checks,
}

impl Respond for ScriptedResponder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let arrived = epoch_micros();
        let response = self.respond_to(request);
        self.recorded
            .lock()
            .unwrap()
            .times
            .push((arrived, epoch_micros()));
        response
    }
}

impl ScriptedResponder {
    fn respond_to(&self, request: &Request) -> ResponseTemplate {
        let mut rec = self.recorded.lock().unwrap();
        rec.paths.push(request.url.path().to_string());
        rec.headers.push(
            request
                .headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
                .collect(),
        );
        if self.checks == Checks::AfterRun {
            let previous = rec.unchecked.last().map_or(&[][..], Vec::as_slice);
            let shared = shared_prefix(previous, &request.body);
            let usage = prompt_cache::CacheUsage {
                input: request.body.len().div_ceil(4) as u64,
                read: shared.div_ceil(4) as u64,
                written: 0,
            };
            rec.unchecked.push(request.body.clone());
            drop(rec);
            return self.next_turn(usage);
        }
        let body: Value = match serde_json::from_slice(&request.body) {
            Ok(v) => v,
            Err(e) => {
                rec.violations
                    .push(format!("request body is not JSON: {e}"));
                return ResponseTemplate::new(400).set_body_string("bad json");
            }
        };
        let check = check_request(self.variant, &body);
        let usage = self.cache.lock().unwrap().serve(self.variant.wire, &body);
        if self.keep_bodies || self.choose.is_some() {
            rec.requests.push(body);
        }
        if let Err(v) = check {
            rec.violations.push(v.clone());
            return ResponseTemplate::new(400).set_body_json(json!({"error": {"message": v}}));
        }
        drop(rec);
        if let Some(choose) = &self.choose {
            let body = self.recorded.lock().unwrap().requests.last().cloned();
            return wire::render(self.variant, &choose(&body.unwrap_or_default()), usage);
        }
        self.next_turn(usage)
    }

    /// The script's next turn, or a 400 once it has run out.
    fn next_turn(&self, usage: prompt_cache::CacheUsage) -> ResponseTemplate {
        let Some(turn) = self.turns.lock().unwrap().pop_front() else {
            self.recorded
                .lock()
                .unwrap()
                .violations
                .push("script exhausted: the harness made one call too many".into());
            return ResponseTemplate::new(400)
                .set_body_json(json!({"error": {"message": "script exhausted"}}));
        };
        wire::render(self.variant, &turn, usage)
    }
}

/// How a reactive model server answers a request.
pub type Chooser = Arc<dyn Fn(&Value) -> Turn + Send + Sync>;

/// A scripted model server on loopback.
pub struct MockModel {
    pub server: MockServer,
    pub variant: Variant,
    recorded: Arc<Mutex<Recorded>>,
}

impl MockModel {
    pub async fn start(variant: Variant, turns: Vec<Turn>) -> MockModel {
        Self::start_inner(variant, turns, None, true, Checks::Inline).await
    }

    /// [`MockModel::start`] keeping no request bodies (`requests()` stays
    /// empty), checking them when `checks` says: for benchmarks, where the
    /// server shares the machine with the harness it measures.
    pub async fn start_lean(variant: Variant, turns: Vec<Turn>, checks: Checks) -> MockModel {
        Self::start_inner(variant, turns, None, false, checks).await
    }

    /// A model that answers each request with the turn `choose` picks from
    /// it: for concurrent runs, whose requests arrive in no set order.
    pub async fn reactive(
        variant: Variant,
        choose: impl Fn(&Value) -> Turn + Send + Sync + 'static,
    ) -> MockModel {
        Self::start_inner(
            variant,
            Vec::new(),
            Some(Arc::new(choose)),
            true,
            Checks::Inline,
        )
        .await
    }

    async fn start_inner(
        variant: Variant,
        turns: Vec<Turn>,
        choose: Option<Chooser>,
        keep_bodies: bool,
        checks: Checks,
    ) -> MockModel {
        let server = if keep_bodies {
            MockServer::start().await
        } else {
            MockServer::builder()
                .disable_request_recording()
                .start()
                .await
        };
        let recorded = Arc::new(Mutex::new(Recorded::default()));
        Mock::given(method("POST"))
            .respond_with(ScriptedResponder {
                variant,
                turns: Mutex::new(turns.into()),
                choose,
                recorded: Arc::clone(&recorded),
                cache: Default::default(),
                keep_bodies,
                checks,
            })
            .mount(&server)
            .await;
        MockModel {
            server,
            variant,
            recorded,
        }
    }

    /// Base URL as a user would pass it: with `/v1` for OpenAI, without for Anthropic.
    pub fn base_url(&self) -> String {
        match self.variant.wire {
            Wire::OpenAi => format!("{}/v1", self.server.uri()),
            Wire::Anthropic => self.server.uri(),
        }
    }

    pub fn requests(&self) -> Vec<Value> {
        self.recorded.lock().unwrap().requests.clone()
    }

    pub fn paths(&self) -> Vec<String> {
        self.recorded.lock().unwrap().paths.clone()
    }

    /// (arrival, response handed back) of every request, in microseconds
    /// since the Unix epoch.
    pub fn times(&self) -> Vec<(u64, u64)> {
        self.recorded.lock().unwrap().times.clone()
    }

    pub fn headers(&self) -> Vec<Vec<(String, String)>> {
        self.recorded.lock().unwrap().headers.clone()
    }

    /// Checks the bodies a [`Checks::AfterRun`] server has kept, in the
    /// order they came, adding what they break to `violations()`.
    pub fn check_after_run(&self) {
        let bodies = std::mem::take(&mut self.recorded.lock().unwrap().unchecked);
        let found = bodies.iter().enumerate().filter_map(|(i, raw)| {
            let checked = serde_json::from_slice::<Value>(raw)
                .map_err(|e| format!("request body is not JSON: {e}"))
                .and_then(|body| check_request(self.variant, &body));
            checked.err().map(|v| format!("request {}: {v}", i + 1))
        });
        let found: Vec<String> = found.collect();
        self.recorded.lock().unwrap().violations.extend(found);
    }

    /// Every broken wire rule, and a script that ran out.
    pub fn violations(&self) -> Vec<String> {
        self.recorded.lock().unwrap().violations.clone()
    }

    /// Panics if any request broke the wire rules or the script ran out.
    pub fn assert_valid(&self) {
        let rec = self.recorded.lock().unwrap();
        assert!(
            rec.violations.is_empty(),
            "requests violated the wire rules: {:#?}",
            rec.violations
        );
    }

    /// The system prompt + tool list of every request must be byte-identical (SPEC D5).
    pub fn assert_stable_prefix(&self) {
        let prefixes: Vec<String> = self
            .requests()
            .iter()
            .map(|r| match self.variant.wire {
                Wire::OpenAi => format!("{}{}", r["messages"][0], r["tools"]),
                Wire::Anthropic => format!("{}{}", r["system"], r["tools"]),
            })
            .collect();
        for p in &prefixes {
            assert_eq!(p, &prefixes[0], "prefix changed between steps");
        }
    }

    /// The request's history as one string, for "is this text present" checks.
    pub fn request_text(&self, index: usize) -> String {
        let r = &self.requests()[index];
        match self.variant.wire {
            Wire::OpenAi => r["messages"].to_string(),
            Wire::Anthropic => r["messages"].to_string(),
        }
    }

    /// Tool results of request `index`, as (call id, content, is_error).
    pub fn tool_results(&self, index: usize) -> Vec<(String, String, bool)> {
        validate::tool_results(self.variant.wire, &self.requests()[index])
    }
}

/// A temporary workspace with files and an `attest.toml`.
pub struct TestWorkspace {
    pub dir: tempfile::TempDir,
}

impl TestWorkspace {
    pub fn new() -> TestWorkspace {
        let ws = TestWorkspace {
            dir: tempfile::tempdir().unwrap(),
        };
        ws.write("config.toml", "[server]\nport = 8080\n");
        ws.write(
            "attest.toml",
            "[retry]\nmax_retries = 2\ninitial_backoff_ms = 10\nmax_backoff_ms = 50\n",
        );
        ws
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn write(&self, rel: &str, content: &str) -> PathBuf {
        let p = self.dir.path().join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, content).unwrap();
        p
    }

    pub fn append_config(&self, extra: &str) {
        let p = self.dir.path().join("attest.toml");
        let mut text = std::fs::read_to_string(&p).unwrap();
        text.push('\n');
        text.push_str(extra);
        std::fs::write(p, text).unwrap();
    }

    /// The run store of this workspace.
    pub fn store(&self) -> attest_store::SqliteStore {
        attest_store::SqliteStore::open(&self.dir.path().join(".attest/attest.db")).unwrap()
    }

    /// Every log entry of every run in this workspace, as JSON.
    pub fn log_entries(&self) -> Vec<Value> {
        use attest_store::Store;
        let store = self.store();
        let mut out = Vec::new();
        for run in store.runs(None).unwrap() {
            for e in store.entries(&run.id).unwrap() {
                out.push(serde_json::to_value(e).unwrap());
            }
        }
        out
    }

    /// Every raw audit artifact in this workspace.
    pub fn artifacts(&self) -> Vec<attest_store::Artifact> {
        use attest_store::Store;
        let store = self.store();
        store
            .runs(None)
            .unwrap()
            .iter()
            .flat_map(|r| store.artifacts(&r.id).unwrap())
            .collect()
    }
}

/// The result of one `attest run`.
#[derive(Debug)]
pub struct RunResult {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub events: Vec<Value>,
}

impl RunResult {
    pub fn done(&self) -> &Value {
        let last = self
            .events
            .last()
            .unwrap_or_else(|| panic!("no events; stderr: {}", self.stderr));
        assert_eq!(last["type"], "done", "last event is not done: {last}");
        last
    }

    pub fn state(&self) -> &str {
        self.done()["state"].as_str().unwrap()
    }

    pub fn reason(&self) -> &str {
        self.done()["reason"].as_str().unwrap()
    }

    pub fn of_type(&self, kind: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["type"] == kind).collect()
    }

    pub fn describe(&self) -> String {
        format!(
            "exit {}\nstderr:\n{}\nstdout:\n{}",
            self.code, self.stderr, self.stdout
        )
    }
}

/// Run `attest run --json` against the mock with extra args; parses events.
pub async fn run_attest(model: &MockModel, ws: &TestWorkspace, extra: &[&str]) -> RunResult {
    run_binary(mock_run_args(model, ws, true, extra), &[]).await
}

/// Run `attest run --json` against the mock with extra args and extra
/// environment variables for attest itself.
pub async fn run_attest_env(
    model: &MockModel,
    ws: &TestWorkspace,
    extra: &[&str],
    env: &[(&str, &str)],
) -> RunResult {
    run_binary(mock_run_args(model, ws, true, extra), env).await
}

/// Run `attest run` with human output (no `--json`) against the mock.
pub async fn run_attest_human(model: &MockModel, ws: &TestWorkspace, extra: &[&str]) -> RunResult {
    run_binary(mock_run_args(model, ws, false, extra), &[]).await
}

fn mock_run_args(model: &MockModel, ws: &TestWorkspace, json: bool, extra: &[&str]) -> Vec<String> {
    let provider = match model.variant.wire {
        Wire::OpenAi => "openai",
        Wire::Anthropic => "anthropic",
    };
    let mut args: Vec<String> = vec!["run".into()];
    if json {
        args.push("--json".into());
    }
    args.extend([
        "--provider".into(),
        provider.into(),
        "--base-url".into(),
        model.base_url(),
        "--model".into(),
        "test-model".into(),
        "-C".into(),
        ws.path().display().to_string(),
        if model.variant.stream {
            "--stream"
        } else {
            "--no-stream"
        }
        .into(),
    ]);
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Run the `attest` binary with arguments and extra environment variables.
pub async fn run_binary(args: Vec<String>, env: &[(&str, &str)]) -> RunResult {
    let streams_events = matches!(args.first().map(String::as_str), Some("run" | "resume"));
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    tokio::task::spawn_blocking(move || {
        trust_workspace_of(&args);
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("attest"));
        cmd.args(&args);
        for var in [
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "OPENAI_BASE_URL",
            "ANTHROPIC_BASE_URL",
            "ATTEST_PROVIDER",
            "ATTEST_MODEL",
        ] {
            cmd.env_remove(var);
        }
        cmd.env("XDG_CONFIG_HOME", test_config_home());
        // What one test's runs teach `--protocol auto` (per model and
        // endpoint; mock ports are reused) must not reach another test's.
        let cache = tempfile::tempdir().unwrap();
        if !args.iter().any(|a| a == "local") {
            cmd.env("ATTEST_CACHE_DIR", cache.path());
        }
        for (k, v) in &env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run attest");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let events = stdout
            .lines()
            .filter(|l| streams_events && l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad event line {l}: {e}")))
            .collect();
        RunResult {
            code: out.status.code().unwrap_or(-1),
            stdout,
            stderr: String::from_utf8_lossy(&out.stderr).to_string(),
            events,
        }
    })
    .await
    .unwrap()
}

/// The tests' workspaces are the user's own: their `attest.toml` (with the
/// test's retry, permission and tool settings) is trusted before a command
/// that reads it, as `attest trust` would record it. Tests of the trust
/// model itself spawn the binary themselves.
pub fn trust_workspace_of(args: &[String]) {
    let Some(i) = args.iter().position(|a| a == "-C" || a == "--workspace") else {
        return;
    };
    let Some(dir) = args.get(i + 1) else { return };
    if !Path::new(dir).join("attest.toml").is_file() {
        return;
    }
    trust_workspace(Path::new(dir));
}

/// `attest trust DIR` with the tests' config home.
pub fn trust_workspace(dir: &Path) {
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("attest"))
        .arg("trust")
        .arg(dir)
        .env("XDG_CONFIG_HOME", test_config_home())
        .output()
        .expect("run attest trust");
    assert!(
        out.status.success(),
        "attest trust {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A config home for the binary under test: empty of config files, so the
/// user's real config never leaks in; attest keeps its fingerprint key there.
pub fn test_config_home() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join("attest-test-config-home");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Start `attest run --json` against `model`, send `signal` (e.g. `-INT`,
/// `-KILL`) once a printed event line contains `when`, and read stdout to
/// the end. Returns the exit code (`None` when killed by a signal) and the
/// event lines printed.
pub async fn run_and_signal(
    model: &MockModel,
    ws: &TestWorkspace,
    extra: &[&str],
    signal: &'static str,
    when: &'static str,
) -> (Option<i32>, Vec<String>) {
    // Let the process get into the state the test is about.
    let settle = || {
        std::thread::sleep(std::time::Duration::from_millis(250));
        true
    };
    run_and_signal_when(model, ws, extra, signal, when, settle).await
}

/// [`run_and_signal`], signalling once `ready` holds after the line (polled
/// for up to 30 s): for a state a fixed wait could miss on a loaded machine.
pub async fn run_and_signal_when(
    model: &MockModel,
    ws: &TestWorkspace,
    extra: &[&str],
    signal: &'static str,
    when: &'static str,
    ready: impl Fn() -> bool + Send + 'static,
) -> (Option<i32>, Vec<String>) {
    use std::io::{BufRead, BufReader};
    trust_workspace(ws.path());
    let cache = tempfile::tempdir().unwrap();
    let provider = match model.variant.wire {
        Wire::OpenAi => "openai",
        Wire::Anthropic => "anthropic",
    };
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("attest"))
        .args([
            "run",
            "--json",
            "--provider",
            provider,
            "--base-url",
            &model.base_url(),
            "--model",
            "m",
        ])
        .arg(if model.variant.stream {
            "--stream"
        } else {
            "--no-stream"
        })
        .arg("-C")
        .arg(ws.path())
        .args(extra)
        .env("XDG_CONFIG_HOME", test_config_home())
        .env("ATTEST_CACHE_DIR", cache.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let stdout = child.stdout.take().unwrap();
    let lines = tokio::task::spawn_blocking(move || {
        let mut lines = Vec::new();
        let mut signalled = false;
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            let hit = !signalled && line.contains(when);
            lines.push(line);
            if hit {
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
                while !ready() {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "never ready to signal"
                    );
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                std::process::Command::new("kill")
                    .args([signal, &pid.to_string()])
                    .status()
                    .unwrap();
                signalled = true;
            }
        }
        lines
    })
    .await
    .unwrap();
    (child.wait().unwrap().code(), lines)
}
