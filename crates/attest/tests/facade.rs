//! The facade as an embedder uses it: `Engine::start` and its handle, the
//! builder's permission, sandbox, approver and observer parts, driven by
//! the scripted provider the example and the doctest use.

use async_trait::async_trait;
use attest::core::policy::{PermissionsConfig, ToolPermission};
use attest::providers::scripted::ScriptedProvider;
use attest::{
    ApprovalMode, ContractKind, EffectClass, Engine, Event, EventBody, Evidence, Permission,
    ReceiptStatus, RunRequest, SandboxMode, TerminalReason, TerminalState, Tool, ToolContext,
    ToolOutput, ToolSpec,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn script(yaml: &str) -> ScriptedProvider {
    ScriptedProvider::from_text(yaml).expect("the script parses")
}

/// A workspace with `config.toml` and a model that reads it, then answers.
fn reading_engine() -> (tempfile::TempDir, attest::EngineBuilder) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.toml"), "port = 8080\n").unwrap();
    let model = script(
        r#"
- tool_calls: [{ name: read_file, arguments: { path: config.toml } }]
- text: "The port is 8080."
"#,
    );
    let builder = Engine::builder().provider(model).workspace(dir.path());
    (dir, builder)
}

/// All of a handle's events, with a limit so a hang fails the test.
async fn drain(handle: &mut attest::RunHandle) -> Vec<Event> {
    let mut events = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(60), handle.next_event()).await {
            Ok(Some(event)) => events.push(event),
            Ok(None) => return events,
            Err(_) => panic!("no event for 60 s; so far: {events:?}"),
        }
    }
}

fn types(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(|e| e.body.type_name()).collect()
}

#[tokio::test]
async fn start_streams_the_run_and_ends_with_done() {
    let (_dir, builder) = reading_engine();
    let engine = builder.build().unwrap();
    let mut handle =
        engine.start(RunRequest::new("Which port is set?").expect(ContractKind::Observe));
    let events = drain(&mut handle).await;
    let names = types(&events);
    assert_eq!(names.first(), Some(&"run_started"), "{names:?}");
    assert_eq!(names.last(), Some(&"done"), "{names:?}");
    assert_eq!(names.iter().filter(|n| **n == "done").count(), 1);
    assert!(names.contains(&"tool_result"), "{names:?}");
    assert!(events.iter().all(|e| e.run_id == handle.run_id));
    let run_id = handle.run_id.clone();
    let outcome = handle.outcome().await.unwrap();
    assert_eq!(outcome.run_id, run_id);
    assert_eq!(outcome.state, TerminalState::Completed);
    match &events.last().unwrap().body {
        EventBody::Done { state, answer, .. } => {
            assert_eq!(*state, outcome.state);
            assert_eq!(answer.as_deref(), Some("The port is 8080."));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn cancel_ends_the_run_cancelled() {
    // The model takes a minute to answer: long enough to be cancelled.
    let model = script("- { text: \"too late\", delay_ms: 60000 }");
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::builder()
        .provider(model)
        .workspace(dir.path())
        .build()
        .unwrap();
    let mut handle = engine.start(RunRequest::new("Answer slowly."));
    let first = tokio::time::timeout(Duration::from_secs(60), handle.next_event())
        .await
        .expect("the run starts")
        .expect("an event");
    assert_eq!(first.body.type_name(), "run_started");
    handle.cancel();
    let events = drain(&mut handle).await;
    match &events.last().expect("events after the cancel").body {
        EventBody::Done { state, .. } => assert_eq!(*state, TerminalState::Cancelled),
        other => panic!("{other:?}"),
    }
    let outcome = tokio::time::timeout(Duration::from_secs(10), handle.outcome())
        .await
        .expect("the outcome comes at once")
        .unwrap();
    assert_eq!(outcome.state, TerminalState::Cancelled);
    assert_eq!(outcome.reason, TerminalReason::UserCancelled);
    assert_eq!(outcome.answer, None);
}

#[tokio::test]
async fn a_tool_the_permissions_deny_is_refused() {
    let (_dir, builder) = reading_engine();
    let mut permissions = PermissionsConfig::default();
    permissions
        .tools
        .insert("read_file".into(), ToolPermission::Fixed(Permission::Deny));
    let engine = builder.permissions(permissions).build().unwrap();
    let outcome = engine
        .run(RunRequest::new("Which port is set?").expect(ContractKind::Observe))
        .await
        .unwrap();
    assert_eq!(outcome.receipts.len(), 1);
    assert_eq!(outcome.receipts[0].tool_name, "read_file");
    assert_eq!(outcome.receipts[0].status, ReceiptStatus::Denied);
    assert_ne!(outcome.state, TerminalState::Completed, "{}", outcome.basis);

    // The same run without the setter reads the file (read_file's own
    // default is allow).
    let (_dir, builder) = reading_engine();
    let outcome = builder
        .build()
        .unwrap()
        .run(RunRequest::new("Which port is set?").expect(ContractKind::Observe))
        .await
        .unwrap();
    assert_eq!(outcome.receipts[0].status, ReceiptStatus::Ok);
    assert_eq!(outcome.state, TerminalState::Completed);
}

/// A tool whose permission is `ask`, counting its executions.
struct Launch {
    spec: ToolSpec,
    runs: Arc<AtomicUsize>,
}

#[async_trait]
impl Tool for Launch {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn default_permission(&self) -> Permission {
        Permission::Ask
    }
    async fn execute(&self, _args: serde_json::Value, _ctx: &ToolContext) -> ToolOutput {
        self.runs.fetch_add(1, Ordering::SeqCst);
        ToolOutput::ok("launched", Evidence::default())
    }
}

fn launch(runs: &Arc<AtomicUsize>) -> Launch {
    Launch {
        spec: ToolSpec::new(
            "launch",
            "Launch it",
            EffectClass::Mutate,
            serde_json::json!({"type": "object", "properties": {}}),
        ),
        runs: Arc::clone(runs),
    }
}

const LAUNCH_SCRIPT: &str = r#"
- tool_calls: [{ name: launch, arguments: {} }]
- text: "Launched."
"#;

/// The events of one `run`, seen by the builder's observer.
fn collector() -> (Arc<Mutex<Vec<Event>>>, impl Fn(&Event) + Send + Sync) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    (seen, move |e: &Event| sink.lock().unwrap().push(e.clone()))
}

#[tokio::test]
async fn the_default_approver_denies_an_ask_tool() {
    let runs = Arc::new(AtomicUsize::new(0));
    let dir = tempfile::tempdir().unwrap();
    let (seen, observer) = collector();
    let engine = Engine::builder()
        .provider(script(LAUNCH_SCRIPT))
        .workspace(dir.path())
        .builtin_tools(false)
        .tool(launch(&runs))
        .observer(observer)
        .build()
        .unwrap();
    let outcome = engine
        .run(RunRequest::new("Launch it.").expect(ContractKind::Mutate))
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 0, "a denied call ran");
    assert_eq!(outcome.receipts[0].status, ReceiptStatus::Denied);
    assert_ne!(outcome.state, TerminalState::Completed, "{}", outcome.basis);
    let events = seen.lock().unwrap().clone();
    assert!(
        events.iter().any(|e| matches!(
            &e.body,
            EventBody::ApprovalResolved { tool_name, approved: false, .. } if tool_name == "launch"
        )),
        "{:?}",
        types(&events)
    );

    // Told to allow, the same engine runs it: the denial was the approver's.
    let engine = Engine::builder()
        .provider(script(LAUNCH_SCRIPT))
        .workspace(dir.path())
        .builtin_tools(false)
        .tool(launch(&runs))
        .approval_mode(ApprovalMode::Allow)
        .build()
        .unwrap();
    let outcome = engine
        .run(RunRequest::new("Launch it.").expect(ContractKind::Mutate))
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(outcome.receipts[0].status, ReceiptStatus::Ok);
}

#[tokio::test]
async fn the_observer_sees_every_event_of_run() {
    let (_dir, builder) = reading_engine();
    let (seen, observer) = collector();
    let engine = builder.observer(observer).build().unwrap();
    let outcome = engine
        .run(RunRequest::new("Which port is set?").expect(ContractKind::Observe))
        .await
        .unwrap();
    let events = seen.lock().unwrap().clone();
    let names = types(&events);
    assert_eq!(names.first(), Some(&"run_started"), "{names:?}");
    assert_eq!(names.last(), Some(&"done"), "{names:?}");
    assert!(names.contains(&"tool_result"), "{names:?}");
    assert!(events.iter().all(|e| e.run_id == outcome.run_id));
    // Stored events are the ones observed, in order (`seq` 1, 2, …).
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");

    // `run_observed` takes its own observer instead.
    seen.lock().unwrap().clear();
    let (_dir2, builder) = reading_engine();
    let (seen2, observer2) = collector();
    let engine = builder.observer(observer2).build().unwrap();
    let mut own = Vec::new();
    engine
        .run_observed(
            RunRequest::new("Which port is set?"),
            &mut |e: &Event| own.push(e.body.type_name()),
            Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(own.last(), Some(&"done"));
    assert!(seen2.lock().unwrap().is_empty());
}

/// A `shell` command, allowed, and what it printed.
async fn shell_output(mode: Option<SandboxMode>, command: &str) -> (String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let model = script(&format!(
        "- tool_calls: [{{ name: shell, arguments: {{ command: {} }} }}]\n- text: done\n",
        serde_json::to_string(command).unwrap()
    ));
    let mut permissions = PermissionsConfig::default();
    permissions
        .tools
        .insert("shell".into(), ToolPermission::Fixed(Permission::Allow));
    let mut builder = Engine::builder()
        .provider(model)
        .workspace(dir.path())
        .permissions(permissions)
        // Where no sandbox mechanism exists every command asks; allow.
        .approval_mode(ApprovalMode::Allow);
    if let Some(mode) = mode {
        builder = builder.sandbox(mode);
    }
    let (seen, observer) = collector();
    let engine = builder.observer(observer).build().unwrap();
    engine.run(RunRequest::new("Run it.")).await.unwrap();
    let events = seen.lock().unwrap().clone();
    let output = events
        .iter()
        .find_map(|e| match &e.body {
            EventBody::ToolResult { output_preview, .. } => Some(output_preview.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no tool result: {:?}", types(&events)));
    (output, dir)
}

#[tokio::test]
async fn the_sandbox_setter_decides_how_commands_run() {
    // A sandboxed command gets the sandbox's private temp dir; with the
    // sandbox off it runs with the tool environment as it is.
    let (default, _d) = shell_output(None, "echo \"tmp=$TMPDIR\"").await;
    assert!(default.contains("attest-sandbox-"), "{default}");
    let (read_only, _d) = shell_output(Some(SandboxMode::ReadOnly), "echo \"tmp=$TMPDIR\"").await;
    assert!(read_only.contains("attest-sandbox-"), "{read_only}");
    let (off, _d) = shell_output(Some(SandboxMode::Off), "echo \"tmp=$TMPDIR\"").await;
    assert!(!off.contains("attest-sandbox-"), "{off}");

    // Where this machine has a mechanism, read-only means the workspace
    // cannot be written; off means it can.
    let (_, dir) = shell_output(Some(SandboxMode::Off), "touch made.txt").await;
    assert!(dir.path().join("made.txt").exists());
    if attest::tools::Sandbox::detect(SandboxMode::ReadOnly)
        .mechanism
        .is_some()
    {
        let (out, dir) = shell_output(Some(SandboxMode::ReadOnly), "touch made.txt").await;
        assert!(!dir.path().join("made.txt").exists(), "{out}");
    } else {
        println!("no sandbox mechanism here: only the temp dir is checked");
    }
}

#[tokio::test]
async fn a_command_tool_added_by_the_builder_runs_and_its_receipt_decides() {
    let dir = tempfile::tempdir().unwrap();
    let tool: attest::tools::CommandToolConfig = serde_json::from_value(serde_json::json!({
        "name": "order_state",
        "description": "The state of an order",
        "effect": "observe",
        "command": ["sh", "-c", "cat >/dev/null; echo shipped"],
        // The builder's default sandbox may be missing on this machine;
        // this test is about the setter, not the sandbox.
        "sandbox": false
    }))
    .unwrap();
    let model = script(
        r#"
- tool_calls: [{ name: order_state, arguments: {} }]
- text: "The order has shipped."
"#,
    );
    let engine = Engine::builder()
        .provider(model)
        .workspace(dir.path())
        .command_tool(tool)
        // A later config keeps what the setter added.
        .config(attest::config::ConfigFile::default(), "")
        .build()
        .unwrap();
    let outcome = engine
        .run(RunRequest::new("Has the order shipped?").expect(ContractKind::Observe))
        .await
        .unwrap();
    assert_eq!(outcome.state, TerminalState::Completed, "{outcome:?}");
    let receipt = &outcome.receipts[0];
    assert_eq!(receipt.tool_name, "order_state");
    assert_eq!(receipt.status, ReceiptStatus::Ok);
    assert_eq!(receipt.effect, EffectClass::Observe);
}
