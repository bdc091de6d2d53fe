//! The write-ahead rule with a log that holds entries until the engine
//! flushes (as the durable store does, one transaction per step boundary):
//! a call is durable before its tool runs, a result before the model sees
//! it, an event before an observer does — and the entries of a step are
//! written together, not one by one.

use attest_core::tool::{ToolContext, ToolRegistry, Workspace};
use attest_core::{Engine, LogEntry, LogError, RunConfig, RunLog, StaticApprover};
use attest_protocol::{
    CompletionContract, ContractKind, Event, TerminalState, ToolSpec, TranscriptItem,
};
use attest_providers::scripted::ScriptedProvider;
use attest_providers::{ModelProvider, ModelRequest, ModelResponse, ProviderError};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

type Durable = Arc<Mutex<Vec<LogEntry>>>;

/// Holds appended entries until `flush`, like the store.
struct HoldingLog {
    held: Vec<LogEntry>,
    durable: Durable,
    flushes: usize,
}

impl RunLog for HoldingLog {
    fn append(&mut self, entry: &LogEntry) -> Result<(), LogError> {
        self.held.push(entry.clone());
        Ok(())
    }

    fn flush(&mut self) -> Result<(), LogError> {
        if !self.held.is_empty() {
            self.flushes += 1;
            self.durable.lock().unwrap().append(&mut self.held);
        }
        Ok(())
    }
}

fn durable_calls(durable: &Durable, name: &str) -> usize {
    durable
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, LogEntry::Item { item: TranscriptItem::ToolCall { name: n, .. } } if n == name))
        .count()
}

/// Counts, when it runs, how many of its own calls are durable.
struct Probe {
    spec: ToolSpec,
    durable: Durable,
    runs: Mutex<Vec<(usize, usize)>>,
}

#[async_trait::async_trait]
impl attest_core::tool::Tool for Probe {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn default_permission(&self) -> attest_protocol::Permission {
        attest_protocol::Permission::Allow
    }
    async fn execute(
        &self,
        _args: serde_json::Value,
        _ctx: &ToolContext,
    ) -> attest_core::tool::ToolOutput {
        let mut runs = self.runs.lock().unwrap();
        let run = runs.len() + 1;
        runs.push((run, durable_calls(&self.durable, "probe")));
        attest_core::tool::ToolOutput::ok(
            format!("probe run {run}"),
            attest_protocol::Evidence::default(),
        )
    }
}

/// The scripted model, checking at each request that every tool result it
/// is sent is already durable.
struct Checking {
    inner: ScriptedProvider,
    durable: Durable,
    missing: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl ModelProvider for Checking {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn api_family(&self) -> &str {
        self.inner.api_family()
    }
    fn model(&self) -> &str {
        self.inner.model()
    }
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ProviderError> {
        let durable = self.durable.lock().unwrap().clone();
        for item in &request.history {
            if let TranscriptItem::ToolResult { call_id, .. } = &**item {
                let stored = durable.iter().any(|e| {
                    matches!(e, LogEntry::Item { item: TranscriptItem::ToolResult { call_id: c, .. } } if c == call_id)
                });
                if !stored {
                    self.missing.lock().unwrap().push(call_id.clone());
                }
            }
        }
        self.inner.complete(request).await
    }
}

/// An observe tool's spec, without arguments.
fn observe_spec(name: &str, description: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        parameters: serde_json::json!({"type": "object", "properties": {}}),
        effect: attest_protocol::EffectClass::Observe,
    }
}

/// An engine with `provider` and `tool` in `dir` (approving nothing), a log
/// that holds entries until the engine flushes them into `durable`, and an
/// observe run's configuration, not streamed.
fn setup(
    provider: Arc<dyn ModelProvider>,
    tool: Arc<dyn attest_core::tool::Tool>,
    dir: &std::path::Path,
    durable: &Durable,
) -> (Engine, HoldingLog, RunConfig) {
    let registry = Arc::new(ToolRegistry::new(vec![tool]).unwrap());
    let engine = Engine::new(
        provider,
        registry,
        ToolContext::new(Workspace::new(dir).unwrap()),
        Arc::new(StaticApprover {
            approve: false,
            decided_by: "test".into(),
        }),
    );
    let log = HoldingLog {
        held: Vec::new(),
        durable: Arc::clone(durable),
        flushes: 0,
    };
    let mut cfg = RunConfig::new(CompletionContract::new(ContractKind::Observe));
    cfg.stream = false;
    (engine, log, cfg)
}

#[tokio::test]
async fn calls_results_and_events_are_durable_before_anyone_acts_on_them() {
    let dir = tempfile::tempdir().unwrap();
    let durable: Durable = Arc::default();
    let probe = Arc::new(Probe {
        spec: observe_spec("probe", "Probe the log."),
        durable: Arc::clone(&durable),
        runs: Mutex::default(),
    });
    let script = r#"[{"tool_calls":[{"id":"a","name":"probe","arguments":{"n":1}}]},
        {"tool_calls":[{"id":"b","name":"probe","arguments":{"n":2}},{"id":"c","name":"probe","arguments":{"n":3}}]},
        {"text":"probe ran three times."}]"#;
    let provider = Arc::new(Checking {
        inner: ScriptedProvider::from_text(script).unwrap(),
        durable: Arc::clone(&durable),
        missing: Mutex::default(),
    });
    let (engine, mut log, cfg) = setup(provider.clone(), probe.clone(), dir.path(), &durable);
    let mut early = Vec::new();
    let mut seen = 0usize;
    let observed = Arc::clone(&durable);
    let mut observer = |e: &Event| {
        seen += 1;
        let stored = observed.lock().unwrap().iter().any(|entry| {
            matches!(entry, LogEntry::Event { event } if event.seq == e.seq && event.body == e.body)
        });
        if !stored {
            early.push(e.body.type_name());
        }
    };
    let outcome = engine
        .run(
            "Probe three times.",
            &cfg,
            &mut log,
            &mut observer,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(outcome.state, TerminalState::Completed, "{}", outcome.basis);
    // A response's calls are all logged before the first runs: the second
    // and third run find both of the second response's calls durable.
    assert_eq!(
        *probe.runs.lock().unwrap(),
        [(1, 1), (2, 3), (3, 3)],
        "each run of the tool found its own call durable"
    );
    assert!(
        provider.missing.lock().unwrap().is_empty(),
        "results sent before they were durable: {:?}",
        provider.missing.lock().unwrap()
    );
    assert!(
        early.is_empty(),
        "the observer saw events before they were durable: {early:?}"
    );
    assert!(seen > 0);
    assert!(log.held.is_empty(), "the run ended with entries unwritten");
    // Three requests, three tool runs, the end: seven writes, however many
    // entries they held.
    let entries = durable.lock().unwrap().len();
    assert_eq!(
        log.flushes, 7,
        "{entries} entries in {} writes",
        log.flushes
    );
    assert!(
        entries > 3 * log.flushes,
        "{entries} entries in {} writes",
        log.flushes
    );
}

/// What the observer has been shown, in order.
type Shown = Arc<Mutex<Vec<Event>>>;

/// Notes, each time it runs, whether the observer has already been shown
/// its `tool_started` event; with `cancel`, stops the run and never returns.
struct Watching {
    spec: ToolSpec,
    shown: Shown,
    durable: Durable,
    /// (`tool_started` durable, `tool_started` shown) at each run.
    runs: Mutex<Vec<(bool, bool)>>,
    cancel: Option<CancellationToken>,
}

fn has_started(events: impl IntoIterator<Item = Event>, count: usize) -> bool {
    events
        .into_iter()
        .filter(|e| e.body.type_name() == "tool_started")
        .count()
        >= count
}

#[async_trait::async_trait]
impl attest_core::tool::Tool for Watching {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn default_permission(&self) -> attest_protocol::Permission {
        attest_protocol::Permission::Allow
    }
    async fn execute(
        &self,
        _args: serde_json::Value,
        _ctx: &ToolContext,
    ) -> attest_core::tool::ToolOutput {
        let run = {
            let mut runs = self.runs.lock().unwrap();
            let durable = durable_events(&self.durable);
            let shown = self.shown.lock().unwrap().clone();
            let run = runs.len() + 1;
            runs.push((has_started(durable, run), has_started(shown, run)));
            run
        };
        if let Some(cancel) = &self.cancel {
            cancel.cancel();
            std::future::pending::<()>().await;
        }
        attest_core::tool::ToolOutput::ok(
            format!("watch run {run}"),
            attest_protocol::Evidence::default(),
        )
    }
}

fn durable_events(durable: &Durable) -> Vec<Event> {
    (durable.lock().unwrap().iter())
        .filter_map(|e| match e {
            LogEntry::Event { event } => Some(event.clone()),
            _ => None,
        })
        .collect()
}

/// The scripted model, noting at each request how many events were durable
/// and how many the observer had been shown.
struct Counting {
    inner: ScriptedProvider,
    durable: Durable,
    shown: Shown,
    requests: Mutex<Vec<(usize, usize)>>,
}

#[async_trait::async_trait]
impl ModelProvider for Counting {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn api_family(&self) -> &str {
        self.inner.api_family()
    }
    fn model(&self) -> &str {
        self.inner.model()
    }
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ProviderError> {
        let durable = durable_events(&self.durable).len();
        let shown = self.shown.lock().unwrap().len();
        self.requests.lock().unwrap().push((durable, shown));
        self.inner.complete(request).await
    }
}

/// Runs the watching tool through `script` and returns the outcome, the
/// tool, the provider and the events shown and stored.
async fn watched_run(
    script: &str,
    cancel: Option<CancellationToken>,
) -> (
    attest_core::RunOutcome,
    Arc<Watching>,
    Arc<Counting>,
    Vec<Event>,
    Vec<Event>,
) {
    let dir = tempfile::tempdir().unwrap();
    let durable: Durable = Arc::default();
    let shown: Shown = Arc::default();
    let tool = Arc::new(Watching {
        spec: observe_spec("watch", "Watch the observer."),
        shown: Arc::clone(&shown),
        durable: Arc::clone(&durable),
        runs: Mutex::default(),
        cancel: cancel.clone(),
    });
    let provider = Arc::new(Counting {
        inner: ScriptedProvider::from_text(script).unwrap(),
        durable: Arc::clone(&durable),
        shown: Arc::clone(&shown),
        requests: Mutex::default(),
    });
    let (engine, mut log, cfg) = setup(provider.clone(), tool.clone(), dir.path(), &durable);
    let into = Arc::clone(&shown);
    let mut observer = |e: &Event| into.lock().unwrap().push(e.clone());
    let outcome = engine
        .run(
            "Watch twice.",
            &cfg,
            &mut log,
            &mut observer,
            cancel.unwrap_or_default(),
        )
        .await
        .unwrap();
    let shown = shown.lock().unwrap().clone();
    (outcome, tool, provider, shown, durable_events(&durable))
}

#[tokio::test]
async fn a_steps_events_are_shown_once_its_request_or_tool_has_started() {
    let script = r#"[{"tool_calls":[{"id":"a","name":"watch","arguments":{"n":1}}]},
        {"tool_calls":[{"id":"b","name":"watch","arguments":{"n":2}}]},
        {"text":"watch ran twice."}]"#;
    let (outcome, tool, provider, shown, stored) = watched_run(script, None).await;
    assert_eq!(outcome.state, TerminalState::Completed, "{}", outcome.basis);
    // A tool runs once its call and `tool_started` are durable, before the
    // observer is shown them: showing them overlaps the tool's run.
    assert_eq!(*tool.runs.lock().unwrap(), [(true, false), (true, false)]);
    // Likewise a request: the events made durable just before it (the
    // previous step's result) are shown after it has been sent.
    let requests = provider.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 3);
    for (i, (durable, shown)) in requests.iter().enumerate() {
        assert!(
            shown < durable,
            "request {}: {shown} of {durable} durable events already shown",
            i + 1
        );
    }
    // And yet the observer is shown every stored event once, in order.
    assert_eq!(shown, stored);
    let seqs: Vec<u64> = shown.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=shown.len() as u64).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_run_stopped_while_its_tool_runs_still_shows_every_event_in_order() {
    let script = r#"[{"tool_calls":[{"id":"a","name":"watch","arguments":{}}]},
        {"text":"never asked."}]"#;
    let cancel = CancellationToken::new();
    let (outcome, tool, _provider, shown, stored) = watched_run(script, Some(cancel)).await;
    assert_eq!(outcome.state, TerminalState::Cancelled, "{}", outcome.basis);
    assert_eq!(*tool.runs.lock().unwrap(), [(true, false)]);
    // `tool_started` comes before the end, whether it was shown before the
    // stop was noticed or held back until the run's last events.
    let kinds: Vec<&str> = shown.iter().map(|e| e.body.type_name()).collect();
    let started = kinds.iter().position(|k| *k == "tool_started");
    let done = kinds.iter().position(|k| *k == "done");
    assert!(started.is_some() && started < done, "{kinds:?}");
    assert_eq!(shown, stored);
}
