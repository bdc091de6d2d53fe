//! [`Engine`]: runs, sessions and resumes on top of the core loop and the
//! store. What a front end would otherwise repeat: a run's row and
//! settings in the store, the session's earlier evidence as history, runs
//! left by a dead process closed first, a structured handoff, memory before
//! and after, and a stream of events.

use crate::builder::{EngineBuilder, EventObserver, Notices};
use crate::error::Error;
use crate::memory;
use crate::settings::RunSettings;
use crate::store_log::{resume_state, verify_log, SharedStore, StoreLog, Unchained};
use attest_core::provider::TextSink;
use attest_core::state::{AgentState, SliceFilter};
use attest_core::tool::Workspace;
use attest_core::{new_id, session_history, ContextLayer, RunConfig, RunOutcome};
use attest_protocol::{CompletionContract, Event, TranscriptItem, LOOP_VERSION};
use attest_store::{NewRun, RunRecord};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// One task for the engine.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    pub prompt: String,
    /// The contract; default: the engine's (`expect`, `require_tool`).
    pub contract: Option<CompletionContract>,
    /// Continue this session (its earlier runs' evidence is sent as
    /// history); default: a new session.
    pub session: Option<String>,
    /// Start from a structured handoff of this run (SPEC E5); the new run
    /// is a separate session.
    pub handoff_from: Option<String>,
    /// Step budget; default: the engine's.
    pub max_steps: Option<u32>,
    /// Compact the session's history before the first request.
    pub force_compaction: bool,
    /// Live display of streamed answer text; not logged.
    pub text_sink: Option<TextSink>,
    /// The run's id; default: a fresh one.
    pub run_id: Option<String>,
    /// For `attest eval` only: the A/B group this run is an attempt of; its
    /// switches may turn the harness's guarantees off, and the run's trace
    /// records it (SPEC I2). Default: none, everything on.
    pub eval_group: Option<attest_protocol::EvalGroup>,
}

impl RunRequest {
    pub fn new(prompt: impl Into<String>) -> Self {
        RunRequest {
            prompt: prompt.into(),
            ..RunRequest::default()
        }
    }

    /// Require evidence of this kind (`observe`, `mutate`, …).
    pub fn expect(mut self, kind: attest_protocol::ContractKind) -> Self {
        let mut contract = self.contract.take().unwrap_or_default();
        contract.kind = kind;
        self.contract = Some(contract);
        self
    }

    /// Require a satisfying receipt of this tool.
    pub fn require_tool(mut self, name: impl Into<String>) -> Self {
        let mut contract = self.contract.take().unwrap_or_default();
        contract.required_tools.push(name.into());
        self.contract = Some(contract);
        self
    }

    pub fn session(mut self, id: impl Into<String>) -> Self {
        self.session = Some(id.into());
        self
    }
}

/// A run in progress: its events as they happen, then its outcome.
pub struct RunHandle {
    pub run_id: String,
    pub session_id: String,
    events: mpsc::UnboundedReceiver<Event>,
    task: tokio::task::JoinHandle<Result<RunOutcome, Error>>,
    cancel: CancellationToken,
}

impl RunHandle {
    /// The next event; `None` once the run has ended and every event was read.
    pub async fn next_event(&mut self) -> Option<Event> {
        self.events.recv().await
    }

    /// Stop the run: it ends `cancelled`, in-flight calls interrupted.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Wait for the outcome (events not yet read are dropped).
    pub async fn outcome(self) -> Result<RunOutcome, Error> {
        match self.task.await {
            Ok(result) => result,
            Err(e) => Err(Error::Run(format!("the run's task stopped: {e}"))),
        }
    }
}

pub(crate) struct Inner {
    pub(crate) core: attest_core::Engine,
    /// Settings every run starts from; ids, contract and history are set
    /// per run.
    pub(crate) template: RunConfig,
    pub(crate) settings: RunSettings,
    pub(crate) store: SharedStore,
    pub(crate) workspace: Workspace,
    pub(crate) label: String,
    pub(crate) memory: bool,
    pub(crate) notices: Notices,
    /// Sees the events of runs [`Engine::run`] drives.
    pub(crate) observer: Option<EventObserver>,
    /// What the commands' sandbox confines, recorded in every run.
    pub(crate) sandbox_record: attest_protocol::TraceRecord,
    /// `(key, file)` of untrusted workspace config keys left out.
    pub(crate) ignored_config: Vec<(String, String)>,
    /// `--protocol auto` learning: the memory, the model's key, and whether
    /// this engine already switched it to the text protocol.
    pub(crate) learning: Option<(crate::protocol_choice::ProtocolMemory, String, bool)>,
    /// Sees each log entry after it is stored (telemetry export).
    pub(crate) log_tap: Option<crate::telemetry::LogTap>,
}

/// The engine: cheap to clone, shared by every run it drives.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

impl Engine {
    /// Start assembling an engine.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    pub(crate) fn from_inner(inner: Inner) -> Self {
        Engine {
            inner: Arc::new(inner),
        }
    }

    /// The model, for people: `openai gpt-4o at …`, `scripted FILE`.
    pub fn provider_label(&self) -> &str {
        &self.inner.label
    }

    pub fn workspace(&self) -> &Workspace {
        &self.inner.workspace
    }

    /// The store runs go to.
    pub fn store(&self) -> &SharedStore {
        &self.inner.store
    }

    /// What runs are stored with (provider spec, contract, limits).
    pub fn settings(&self) -> &RunSettings {
        &self.inner.settings
    }

    /// Whether runs emit the response as it is generated (`progress`
    /// events with `delta: true`).
    pub fn streams_progress(&self) -> bool {
        self.inner.template.stream_progress
    }

    /// The prompt version stamped on runs (SPEC B5).
    pub fn prompt_version(&self) -> String {
        self.inner.core.prompt_version()
    }

    /// Run a task to its terminal state; every event also goes to
    /// `observer` as it happens. `cancel` ends the run `cancelled`.
    pub async fn run_observed(
        &self,
        request: RunRequest,
        observer: &mut (dyn FnMut(&Event) + Send),
        cancel: CancellationToken,
    ) -> Result<RunOutcome, Error> {
        let inner = &self.inner;
        let prompt = request.prompt.clone();
        if prompt.trim().is_empty() {
            return Err(Error::Run("the prompt is empty".into()));
        }
        let mut cfg = inner.template.clone();
        cfg.run_id = request.run_id.clone().unwrap_or_else(new_id);
        cfg.trace_id = new_id();
        cfg.session_id = request.session.clone().unwrap_or_else(new_id);
        if let Some(contract) = &request.contract {
            cfg.contract = contract.clone();
        }
        if let Some(n) = request.max_steps {
            if n == 0 {
                return Err(Error::Run("the step budget must be at least 1".into()));
            }
            cfg.max_steps = n;
        }
        cfg.force_compaction = request.force_compaction;
        cfg.eval_group = request.eval_group.clone();
        cfg.text_sink = request.text_sink.clone();
        cfg.prior_history = self.earlier_turns(&cfg.session_id, None).await?;
        if let Some(from) = &request.handoff_from {
            cfg.context_layers
                .push(self.handoff_layer(from, &cfg.session_id)?);
        }
        let memory_decisions = self.add_memory_layer(&mut cfg, &prompt);
        let mut settings = inner.settings.clone();
        settings.contract = cfg.contract.clone();
        settings.max_steps = cfg.max_steps;
        {
            let mut store = inner.store.lock();
            store.ensure_session(&cfg.session_id)?;
            store.begin_run(&NewRun {
                id: cfg.run_id.clone(),
                session_id: cfg.session_id.clone(),
                trace_id: cfg.trace_id.clone(),
                prompt: cfg.redactor.redact_to(&prompt, usize::MAX),
                settings: serde_json::to_value(&settings)
                    .map_err(attest_store::StoreError::from)?,
                loop_version: LOOP_VERSION.to_string(),
                prompt_version: self.prompt_version(),
            })?;
            if let Some((_, key, true)) = &inner.learning {
                // A different protocol means a different prompt prefix: a
                // declared reset point (SPEC E4).
                store.append(
                    &cfg.run_id,
                    &attest_protocol::LogEntry::Trace {
                        trace: attest_protocol::TraceRecord::CacheReset {
                            step: 0,
                            reset_point: attest_protocol::CacheResetPoint {
                                reason: attest_protocol::CacheResetReason::ProtocolSwitch,
                                prefix_hash_before: String::new(),
                                prefix_hash_after: String::new(),
                                source_refs: vec![key.clone()],
                                created_at: chrono::Utc::now(),
                            },
                        },
                    },
                )?;
            }
            // What the run starts under, in one write: its sandbox and the
            // config keys it did not use.
            let mut records = vec![inner.sandbox_record.clone()];
            records.extend(inner.ignored_config.iter().map(|(key, source)| {
                attest_protocol::TraceRecord::ConfigIgnored {
                    key: key.clone(),
                    source: source.clone(),
                }
            }));
            let entries: Vec<attest_protocol::LogEntry> = records
                .into_iter()
                .map(|trace| attest_protocol::LogEntry::Trace { trace })
                .collect();
            store.append_all(&cfg.run_id, &entries)?;
        }
        let mut log = StoreLog::new(inner.store.clone(), &cfg.run_id, inner.log_tap.clone());
        let outcome = inner
            .core
            .run(&prompt, &cfg, &mut log, observer, cancel)
            .await?;
        self.remember(&outcome, &cfg.redactor, memory_decisions);
        self.learn_protocol(&outcome.run_id);
        Ok(outcome)
    }

    /// After a native-protocol run under `--protocol auto`: whether a
    /// native call arrived while tools were offered.
    fn learn_protocol(&self, run_id: &str) {
        let Some((memory, key, false)) = &self.inner.learning else {
            return;
        };
        // Only the two records it reads: a long run's whole log is
        // megabytes, and reading it was the run's peak of memory.
        let traces = self
            .inner
            .store
            .lock()
            .traces(run_id, &crate::protocol_choice::LEARNED_FROM);
        if let Ok(traces) = traces {
            memory.learn(key, &traces);
        }
    }

    /// Run a task to its terminal state; its events go to the builder's
    /// [`observer`](EngineBuilder::observer), if one was set.
    pub async fn run(&self, request: RunRequest) -> Result<RunOutcome, Error> {
        let observer = self.inner.observer.clone();
        let mut observe = |e: &Event| {
            if let Some(observer) = &observer {
                observer(e);
            }
        };
        self.run_observed(request, &mut observe, CancellationToken::new())
            .await
    }

    /// Start a task on the runtime; read its events from the handle.
    pub fn start(&self, request: RunRequest) -> RunHandle {
        let (tx, events) = mpsc::unbounded_channel();
        let run_id = request.run_id.clone().unwrap_or_else(new_id);
        let session_id = request.session.clone().unwrap_or_else(new_id);
        let request = RunRequest {
            run_id: Some(run_id.clone()),
            session: Some(session_id.clone()),
            ..request
        };
        let cancel = CancellationToken::new();
        let engine = self.clone();
        let token = cancel.clone();
        let task = tokio::spawn(async move {
            let mut observer = move |e: &Event| {
                let _ = tx.send(e.clone());
            };
            engine.run_observed(request, &mut observer, token).await
        });
        RunHandle {
            run_id,
            session_id,
            events,
            task,
            cancel,
        }
    }

    /// Continue a run whose process died, from its log (SPEC C5): calls
    /// left without a result are recorded as interrupted — never
    /// re-executed — and the run goes on under the contract and limits it
    /// was started with.
    pub async fn resume(
        &self,
        run_id: &str,
        observer: &mut (dyn FnMut(&Event) + Send),
        cancel: CancellationToken,
    ) -> Result<RunOutcome, Error> {
        let inner = &self.inner;
        let record = {
            let store = inner.store.lock();
            let record = store.run(run_id)?;
            verify_log(store.as_ref(), &record.id, "resume", Unchained::Refuse)?;
            record
        };
        if !record.is_running() {
            return Err(Error::Run(format!(
                "run {} already ended: {} ({})",
                record.id,
                record.status,
                record.reason.as_deref().unwrap_or("-")
            )));
        }
        if !record.is_orphaned() {
            return Err(Error::Run(format!(
                "run {} is still running in process {}",
                record.id,
                record.pid.unwrap_or(0)
            )));
        }
        let mut cfg = self.config_for(&record);
        if let Ok(stored) = serde_json::from_value::<RunSettings>(record.settings.clone()) {
            keep_stored(&mut cfg, stored);
        }
        cfg.prior_history = self
            .earlier_turns(&record.session_id, Some(&record.id))
            .await?;
        let memory_decisions = self.add_memory_layer(&mut cfg, &record.prompt);
        let state = {
            let mut store = inner.store.lock();
            let state = resume_state(store.as_ref(), &record.id)?;
            // Of two resumes that saw the same dead owner, one proceeds.
            store.claim_run(&record.id, record.pid)?;
            state
        };
        let mut log = StoreLog::new(inner.store.clone(), &record.id, inner.log_tap.clone());
        let outcome = inner
            .core
            .resume(state, &cfg, &mut log, observer, cancel)
            .await?;
        self.remember(&outcome, &cfg.redactor, memory_decisions);
        Ok(outcome)
    }

    /// The template with a stored run's ids.
    fn config_for(&self, record: &RunRecord) -> RunConfig {
        RunConfig {
            run_id: record.id.clone(),
            trace_id: record.trace_id.clone(),
            session_id: record.session_id.clone(),
            ..self.inner.template.clone()
        }
    }

    /// History from the session's earlier runs (oldest first, up to
    /// `before`). A run left `running` by a dead process is closed first:
    /// its pending calls are recorded as interrupted and it ends
    /// `failed`/`interrupted`.
    async fn earlier_turns(
        &self,
        session: &str,
        before: Option<&str>,
    ) -> Result<Vec<TranscriptItem>, Error> {
        let mut runs = self.inner.store.lock().runs(Some(session))?;
        runs.reverse();
        let mut transcripts = Vec::new();
        for run in runs {
            if Some(run.id.as_str()) == before {
                break;
            }
            self.verified(&run.id, "session history")?;
            if run.is_running() {
                if !run.is_orphaned() {
                    return Err(Error::Run(format!(
                        "session {session} has run {} in progress (process {}); wait for it to end",
                        run.id,
                        run.pid.unwrap_or(0)
                    )));
                }
                self.close_orphan(&run).await?;
            }
            transcripts.push(self.inner.store.lock().items(&run.id)?);
        }
        Ok(session_history(&transcripts))
    }

    async fn close_orphan(&self, run: &RunRecord) -> Result<(), Error> {
        (self.inner.notices)(&format!(
            "run {} was left unfinished by a process that stopped; recording it as interrupted (use `attest resume` instead to continue it)",
            run.id
        ));
        let cfg = self.config_for(run);
        let state = {
            let mut store = self.inner.store.lock();
            match store.claim_run(&run.id, run.pid) {
                Ok(()) => {}
                // Another process is closing or resuming it.
                Err(attest_store::StoreError::AlreadyClaimed { .. }) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
            resume_state(store.as_ref(), &run.id)?
        };
        let mut log = StoreLog::new(
            self.inner.store.clone(),
            &run.id,
            self.inner.log_tap.clone(),
        );
        let mut quiet = |_: &Event| {};
        self.inner
            .core
            .close_interrupted(state, &cfg, &mut log, &mut quiet)
            .await?;
        Ok(())
    }

    /// Checks `run_id`'s hash chain before its log is used; an unchained
    /// run is read with a notice.
    fn verified(&self, run_id: &str, doing: &str) -> Result<(), Error> {
        let warning = verify_log(
            self.inner.store.lock().as_ref(),
            run_id,
            doing,
            Unchained::Warn,
        )?;
        if let Some(warning) = warning {
            (self.inner.notices)(&warning);
        }
        Ok(())
    }

    /// The handoff layer for a run starting from `from`'s state slice.
    fn handoff_layer(&self, from: &str, session: &str) -> Result<ContextLayer, Error> {
        let source = self.inner.store.lock().run(from)?;
        self.verified(&source.id, "--handoff-from")?;
        let store = self.inner.store.lock();
        if source.session_id == session {
            return Err(Error::Run(format!(
                "--handoff-from {from}: a handoff starts a separate session; drop --session {session} or pick another"
            )));
        }
        let contract = serde_json::from_value::<RunSettings>(source.settings.clone())
            .map(|s| s.contract)
            .unwrap_or_default();
        let state = AgentState::from_transcript(&store.items(&source.id)?, &contract);
        Ok(ContextLayer {
            name: "handoff".to_string(),
            text: state.handoff(&source.id, &SliceFilter::default()),
            truncated: false,
        })
    }

    /// SPEC D1: the memory layer follows the skills catalog. Built per
    /// task, because retrieval needs the prompt. A memory failure is a
    /// notice and the run goes on without the layer.
    fn add_memory_layer(
        &self,
        cfg: &mut RunConfig,
        prompt: &str,
    ) -> Vec<attest_core::memory::DecisionRecord> {
        if !self.inner.memory {
            return Vec::new();
        }
        let mut store = self.inner.store.lock();
        match memory::layer_for(store.as_mut(), self.inner.workspace.root(), prompt) {
            Ok((layer, decisions)) => {
                cfg.context_layers.retain(|l| l.name != memory::LAYER_NAME);
                cfg.context_layers.extend(layer);
                decisions
            }
            Err(e) => {
                (self.inner.notices)(&format!("memory not used for this run: {e}"));
                Vec::new()
            }
        }
    }

    /// Memory consolidation after a run that ended (SPEC G2). A memory
    /// failure never changes the run's outcome.
    fn remember(
        &self,
        outcome: &RunOutcome,
        redactor: &attest_core::Redactor,
        decisions: Vec<attest_core::memory::DecisionRecord>,
    ) {
        if !self.inner.memory {
            return;
        }
        let mut store = self.inner.store.lock();
        match memory::after_run(
            store.as_mut(),
            self.inner.workspace.root(),
            outcome,
            redactor,
            decisions,
        ) {
            Ok(projection) => {
                if let Some(message) = projection.and_then(|p| p.message()) {
                    (self.inner.notices)(&message);
                }
            }
            Err(e) => (self.inner.notices)(&format!("memory not updated after this run: {e}")),
        }
    }
}

/// A resumed run keeps the contract and limits it was started with (SPEC
/// A10); the engine's own settings can only tighten them: more required
/// tools, fewer steps or corrective turns, a shorter time limit.
fn keep_stored(cfg: &mut RunConfig, stored: RunSettings) {
    let mut contract = stored.contract;
    for tool in &cfg.contract.required_tools {
        if !contract.required_tools.contains(tool) {
            contract.required_tools.push(tool.clone());
        }
    }
    cfg.contract = contract;
    cfg.max_steps = cfg.max_steps.min(stored.max_steps);
    cfg.max_corrections = cfg.max_corrections.min(stored.max_corrections);
    // Grounding once required stays required.
    cfg.require_grounding |= stored.require_grounding;
    cfg.stream = stored.stream;
    let stored_timeout = stored.timeout_secs.map(std::time::Duration::from_secs);
    cfg.timeout = match (cfg.timeout, stored_timeout) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
}
