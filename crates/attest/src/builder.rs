//! [`EngineBuilder`]: everything an engine is made of, with a default for
//! each part, assembled in one place for the CLI, the server and embedders.

use crate::config::ConfigFile;
use crate::engine::{Engine, Inner};
use crate::error::Error;
use crate::provider::{build_provider, no_env, EnvLookup, ProviderSpec};
use crate::settings::{ApprovalMode, RunSettings};
use crate::store_log::SharedStore;
use attest_core::context::skill_tool::skill_tool;
use attest_core::context::skills::SkillCatalog;
use attest_core::context::workspace_files::{FileLimits, WorkspaceFiles};
use attest_core::failure::{FailureTracker, FingerprintKey, RetryPolicy as ToolRetryPolicy};
use attest_core::policy::{PermissionPolicy, PermissionsConfig, ShellContext};
use attest_core::provider::ModelProvider;
use attest_core::tool::middleware::standard_chain;
use attest_core::tool::{Tool, ToolContext, ToolEnv, ToolRegistry, Workspace};
use attest_core::{
    Approver, ContextLayer, ContextWindow, DoomLoopLimits, ReasoningPolicy, RetryPolicy, RunConfig,
    StaticApprover,
};
use attest_protocol::{CompletionContract, ContractKind};
use attest_providers::context_window::known_context_window;
use attest_store::SqliteStore;
use attest_tools::{builtin_tools, CommandTool, Sandbox, SandboxMode, SandboxOptions};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Receives one-line notices meant for a person (a skipped workspace file,
/// a missing sandbox, a memory problem). The CLI prints them on stderr.
pub type Notices = Arc<dyn Fn(&str) + Send + Sync>;

/// Sees every event of each run [`Engine::run`] drives, as it happens.
pub type EventObserver = Arc<dyn Fn(&attest_protocol::Event) + Send + Sync>;

/// Where the model comes from.
enum ProviderChoice {
    /// Built from a spec and the config (the embedded model by default).
    Spec(ProviderSpec),
    /// The embedder's own.
    Custom(Arc<dyn ModelProvider>),
    /// Built once from a spec and shared by many engines (the server's).
    Built(crate::provider::BuiltProvider),
}

/// Where runs are stored.
enum StoreChoice {
    /// An in-memory store: nothing touches the disk (the default for
    /// embedders).
    Memory,
    /// A SQLite file, created when missing.
    Path(PathBuf),
    /// A store the caller opened (the server's, shared by its workers).
    Shared(SharedStore),
}

/// Where the failure-fingerprint key comes from (SPEC F9).
enum KeyChoice {
    /// A fresh random key for this engine.
    Generated,
    /// A key file, created when missing (the CLI keeps one per user).
    Path(PathBuf),
}

/// Run limits and switches an explicit setter gave; `None` falls back to
/// the config file, then the built-in default.
#[derive(Default)]
struct RunDefaults {
    contract: Option<ContractKind>,
    required_tools: Vec<String>,
    max_steps: Option<u32>,
    max_corrections: Option<u32>,
    require_grounding: Option<bool>,
    stream: Option<bool>,
    stream_progress: Option<bool>,
    timeout: Option<Option<Duration>>,
}

/// Builds an [`Engine`]. Every part has a default: the embedded model (or a
/// provider from `[provider]` in the config), the built-in tools in the
/// current directory, the default permission policy, the workspace-write
/// sandbox without network, an in-memory store, an approver that denies,
/// no observer.
pub struct EngineBuilder {
    provider: ProviderChoice,
    config: ConfigFile,
    config_note: String,
    /// Security keys an untrusted workspace config set, with their file:
    /// traced in every run.
    ignored_config: Vec<(String, String)>,
    workspace: PathBuf,
    builtin_tools: bool,
    tools: Vec<Arc<dyn Tool>>,
    profile: Option<String>,
    permissions: Option<PermissionsConfig>,
    sandbox: Option<SandboxMode>,
    network: Option<bool>,
    store: StoreChoice,
    approver: Option<Arc<dyn Approver>>,
    approval: Option<ApprovalMode>,
    env: EnvLookup,
    /// The environment tool processes are drawn from (filtered to the allow
    /// list and `[sandbox] env_passthrough`); `None`: a minimal `PATH`.
    tool_env_source: Option<Vec<(OsString, OsString)>>,
    key: KeyChoice,
    protocol_memory: Option<crate::protocol_choice::ProtocolMemory>,
    memory: bool,
    workspace_context: bool,
    notices: Notices,
    observer: Option<EventObserver>,
    extra_command_tools: Vec<attest_tools::CommandToolConfig>,
    extra_mcp_servers: Vec<attest_tools::mcp::McpServerConfig>,
    run: RunDefaults,
    log_tap: Option<crate::telemetry::LogTap>,
}

impl Default for EngineBuilder {
    fn default() -> Self {
        EngineBuilder {
            provider: ProviderChoice::Spec(ProviderSpec::default()),
            config: ConfigFile::default(),
            config_note: String::new(),
            ignored_config: Vec::new(),
            workspace: PathBuf::from("."),
            builtin_tools: true,
            tools: Vec::new(),
            profile: None,
            permissions: None,
            sandbox: None,
            network: None,
            store: StoreChoice::Memory,
            approver: None,
            approval: None,
            env: no_env(),
            tool_env_source: None,
            key: KeyChoice::Generated,
            protocol_memory: None,
            memory: false,
            workspace_context: true,
            notices: Arc::new(|_| {}),
            observer: None,
            extra_command_tools: Vec::new(),
            extra_mcp_servers: Vec::new(),
            run: RunDefaults::default(),
            log_tap: None,
        }
    }
}

impl EngineBuilder {
    /// Use this provider (a scripted one, an embedder's own) instead of
    /// building one from a spec.
    pub fn provider(mut self, provider: impl ModelProvider + 'static) -> Self {
        self.provider = ProviderChoice::Custom(Arc::new(provider));
        self
    }

    /// As [`EngineBuilder::provider`], for a provider already shared.
    pub fn provider_arc(mut self, provider: Arc<dyn ModelProvider>) -> Self {
        self.provider = ProviderChoice::Custom(provider);
        self
    }

    /// Use a provider [`build_provider`] made, shared by several engines:
    /// its secrets are still scrubbed and its spec stored with each run.
    pub fn built_provider(mut self, built: crate::provider::BuiltProvider) -> Self {
        self.provider = ProviderChoice::Built(built);
        self
    }

    /// Build the provider from `spec` (fields it leaves open come from the
    /// environment lookup, then `[provider]`, then the defaults).
    pub fn provider_spec(mut self, spec: ProviderSpec) -> Self {
        self.provider = ProviderChoice::Spec(spec);
        self
    }

    /// Settings from an `attest.toml`: run defaults, provider, permissions,
    /// sandbox, command tools, profiles, safety. Explicit setters win over it.
    /// `note` names the file in error messages (` (config PATH)`).
    pub fn config(mut self, config: ConfigFile, note: impl Into<String>) -> Self {
        self.config = config;
        self.config_note = note.into();
        self
    }

    /// Settings as [`crate::config::load`] assembled them: the merged file,
    /// and the security keys of an untrusted workspace config that were
    /// left out (each run records them as `config_ignored`).
    pub fn loaded_config(mut self, loaded: crate::config::LoadedConfig) -> Self {
        let note = loaded.note();
        let source = loaded
            .untrusted_workspace()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        self.ignored_config = loaded
            .ignored
            .iter()
            .map(|k| (k.clone(), source.clone()))
            .collect();
        self.config(loaded.file, note)
    }

    /// The workspace root: file tools are confined to it (default `.`).
    pub fn workspace(mut self, dir: impl Into<PathBuf>) -> Self {
        self.workspace = dir.into();
        self
    }

    /// Offer the built-in workspace tools (default: yes).
    pub fn builtin_tools(mut self, on: bool) -> Self {
        self.builtin_tools = on;
        self
    }

    /// Add a tool of the caller's.
    pub fn tool(mut self, tool: impl Tool + 'static) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }

    /// Add a command tool, as a `[[tools]]` entry of the config would
    /// (kept across a later [`EngineBuilder::config`]; checked the same way
    /// when the engine is built).
    pub fn command_tool(mut self, tool: attest_tools::CommandToolConfig) -> Self {
        self.extra_command_tools.push(tool);
        self
    }

    /// Add an MCP server, as an `[[mcp_servers]]` entry of the config
    /// would (kept across a later [`EngineBuilder::config`]).
    pub fn mcp_server(mut self, server: attest_tools::mcp::McpServerConfig) -> Self {
        self.extra_mcp_servers.push(server);
        self
    }

    /// Offer only the tools of `[profiles.NAME]` (SPEC D7).
    pub fn profile(mut self, name: impl Into<String>) -> Self {
        self.profile = Some(name.into());
        self
    }

    /// The permission policy (default: `[permissions]` of the config, else
    /// reads allowed, writes and commands ask).
    pub fn permissions(mut self, permissions: PermissionsConfig) -> Self {
        self.permissions = Some(permissions);
        self
    }

    /// How `shell` commands are confined (default: `[sandbox] mode`, else
    /// workspace-write).
    pub fn sandbox(mut self, mode: SandboxMode) -> Self {
        self.sandbox = Some(mode);
        self
    }

    /// Let sandboxed commands reach the network (default: `[sandbox]
    /// network`, else no).
    pub fn sandbox_network(mut self, on: bool) -> Self {
        self.network = Some(on);
        self
    }

    /// Keep runs in this SQLite file (created when missing).
    pub fn store_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.store = StoreChoice::Path(path.into());
        self
    }

    /// Keep runs in a store the caller opened and shares.
    pub fn store(mut self, store: SharedStore) -> Self {
        self.store = StoreChoice::Shared(store);
        self
    }

    /// Who decides calls whose permission is `ask` (default: the approval
    /// mode's static answer, deny unless set).
    pub fn approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = Some(approver);
        self
    }

    /// The non-interactive answer to `ask` (default deny); stored with each
    /// run. A custom approver still decides when one is set.
    pub fn approval_mode(mut self, mode: ApprovalMode) -> Self {
        self.approval = Some(mode);
        self
    }

    /// Where environment-style settings come from (API keys by variable
    /// name, base-URL overrides, cache locations). Default: nowhere.
    pub fn env(mut self, lookup: EnvLookup) -> Self {
        self.env = lookup;
        self
    }

    /// The environment tool processes may draw from (the CLI passes its
    /// own): they get its allow-listed variables (PATH, HOME, LANG, LC_*,
    /// TERM, TMPDIR, USER, SHELL) and those `[sandbox] env_passthrough`
    /// names, never the rest. Default: only a system `PATH`.
    pub fn tool_env_source(mut self, vars: impl IntoIterator<Item = (OsString, OsString)>) -> Self {
        self.tool_env_source = Some(vars.into_iter().collect());
        self
    }

    /// Keep the failure-fingerprint key in this file (default: a fresh key
    /// per engine).
    pub fn fingerprint_key_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.key = KeyChoice::Path(path.into());
        self
    }

    /// Learn, per model and endpoint, whether native tool calls arrive under
    /// `--protocol auto`, in this file (default: no learning). A model that
    /// answered two runs without a native call while tools were offered gets
    /// the text protocol from then on.
    pub fn protocol_memory(mut self, path: impl Into<PathBuf>) -> Self {
        self.protocol_memory = Some(crate::protocol_choice::ProtocolMemory::new(path));
        self
    }

    /// Durable memory with provenance (SPEC G): the memory layer before each
    /// run, consolidation and `MEMORY.md` after it (default: off).
    pub fn memory(mut self, on: bool) -> Self {
        self.memory = on;
        self
    }

    /// Load `AGENTS.md`, `SOUL.md`, `USER.md` and the skills catalog from
    /// the workspace into the system prompt (default: yes).
    pub fn workspace_context(mut self, on: bool) -> Self {
        self.workspace_context = on;
        self
    }

    /// Where notices for a person go (default: nowhere).
    pub fn notices(mut self, notices: Notices) -> Self {
        self.notices = notices;
        self
    }

    /// Show every event of each run [`Engine::run`] drives to `observer`
    /// as it happens (default: none). [`Engine::run_observed`],
    /// [`Engine::start`] and [`Engine::resume`] take their own observer or
    /// stream instead.
    pub fn observer(
        mut self,
        observer: impl Fn(&attest_protocol::Event) + Send + Sync + 'static,
    ) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// The completion contract runs get unless a request says otherwise
    /// (default: `[run] expect`, else `answer`).
    pub fn expect(mut self, kind: ContractKind) -> Self {
        self.run.contract = Some(kind);
        self
    }

    /// A tool every run must have a satisfying receipt of.
    pub fn require_tool(mut self, name: impl Into<String>) -> Self {
        self.run.required_tools.push(name.into());
        self
    }

    /// Model calls before a run is `incomplete` (default 20).
    pub fn max_steps(mut self, n: u32) -> Self {
        self.run.max_steps = Some(n);
        self
    }

    /// Corrective turns when required evidence is missing (default 1).
    pub fn max_corrections(mut self, n: u32) -> Self {
        self.run.max_corrections = Some(n);
        self
    }

    /// End a run `unverified` (`ungrounded_claim`) when its answer names a
    /// value no tool output, prompt or earlier evidence shows (default no:
    /// grounding is reported only).
    pub fn require_grounding(mut self, on: bool) -> Self {
        self.run.require_grounding = Some(on);
        self
    }

    /// Stream responses from the provider (default yes).
    pub fn stream(mut self, on: bool) -> Self {
        self.run.stream = Some(on);
        self
    }

    /// Emit the response as it is generated (`progress` events with
    /// `delta: true`, observer only; default no).
    pub fn stream_progress(mut self, on: bool) -> Self {
        self.run.stream_progress = Some(on);
        self
    }

    /// Wall-clock limit of a run (default: `[run] timeout_secs`, else none).
    pub fn timeout(mut self, limit: Option<Duration>) -> Self {
        self.run.timeout = Some(limit);
        self
    }

    /// Show every log entry, once stored, to `tap` (telemetry export:
    /// [`crate::telemetry::Telemetry::tap`]).
    pub fn log_tap(mut self, tap: crate::telemetry::LogTap) -> Self {
        self.log_tap = Some(tap);
        self
    }

    /// Assemble the engine.
    pub fn build(mut self) -> Result<Engine, Error> {
        let extra_tools = std::mem::take(&mut self.extra_command_tools);
        self.config.tools.extend(extra_tools);
        let extra_servers = std::mem::take(&mut self.extra_mcp_servers);
        self.config.mcp_servers.extend(extra_servers);
        let file = &self.config;
        let note = &self.config_note;
        let workspace = Workspace::new(&self.workspace)
            .map_err(|e| Error::config(format!("workspace {}: {e}", self.workspace.display())))?;
        let mut learning = None;
        let (provider, label, secrets, hidden_env, provider_spec) = match &self.provider {
            ProviderChoice::Spec(spec) => {
                let built = build_provider(
                    spec,
                    file,
                    workspace.root(),
                    &self.env,
                    self.protocol_memory.as_ref(),
                )
                .map_err(|e| with_note(e, note))?;
                if let Some((key, true)) = &built.learning {
                    (self.notices)(&format!(
                        "{key} made no native tool call in {} runs that offered tools; using the text protocol (--protocol native to go back)",
                        crate::protocol_choice::RUNS_BEFORE_SWITCH
                    ));
                }
                learning = built.learning.clone();
                (
                    built.provider,
                    built.label,
                    built.secrets,
                    built.hidden_env,
                    Some(built.resolved),
                )
            }
            ProviderChoice::Built(built) => (
                Arc::clone(&built.provider),
                built.label.clone(),
                built.secrets.clone(),
                built.hidden_env.clone(),
                Some(built.resolved.clone()),
            ),
            ProviderChoice::Custom(p) => (
                Arc::clone(p),
                format!("{} {}", p.name(), p.model()),
                Vec::new(),
                Vec::new(),
                None,
            ),
        };

        // The sandbox probe waits on throwaway child processes: it runs
        // while the store is opened, the workspace's files are read and
        // what the first run needs built once per process is built.
        let sandbox_options = self.sandbox_options();
        let probe = sandbox_options.as_ref().map(Sandbox::probe_in_background);
        let store = match std::mem::replace(&mut self.store, StoreChoice::Memory) {
            StoreChoice::Memory => SharedStore::new(SqliteStore::open_in_memory()?),
            StoreChoice::Path(path) => SharedStore::new(open_at(&path)?),
            StoreChoice::Shared(store) => store,
        };
        let (context_layers, with_skills) = if self.workspace_context {
            self.context_layers(workspace.root())?
        } else {
            (Vec::new(), false)
        };
        attest_core::warm_up();
        drop(probe);
        let sandbox = shell_sandbox(sandbox_options, &workspace)?;
        let sandbox_record = {
            let off = attest_tools::sandbox::SandboxReport::switched_off();
            let report = sandbox.as_ref().map_or(&off, |s| s.report());
            attest_protocol::TraceRecord::Sandbox {
                mechanism: report.mechanism.map(String::from),
                note: report.note.clone(),
                not_confined: report.not_confined.clone(),
            }
        };
        let tool_env = match &self.tool_env_source {
            Some(vars) => ToolEnv::from_vars(vars.iter().cloned(), &file.sandbox.env_passthrough),
            None => ToolEnv::minimal(),
        };
        let mut hidden_env = hidden_env;
        hidden_env.extend(
            file.mcp_servers
                .iter()
                .filter_map(|s| s.bearer_token_env.clone()),
        );
        let tool_ctx = ToolContext {
            hidden_env,
            env: tool_env,
            ..ToolContext::new(workspace.clone())
        };
        let mcp = crate::mcp::connect_all(
            &file.mcp_servers,
            workspace.root(),
            sandbox.clone(),
            &tool_ctx,
            &self.env,
            &*self.notices,
        )?;
        let mut registry = self.registry(&workspace, with_skills, sandbox.clone(), mcp.tools)?;
        if let Some(name) = self.profile.as_ref().or(file.run.profile.as_ref()) {
            registry = apply_profile(registry, file, name)?;
        }
        // The one redactor (SPEC F8): what every part of a run scrubs with.
        let redactor =
            attest_core::Redactor::new().with_secrets(secrets.into_iter().chain(mcp.secrets));
        let tracker = self.install_safety(
            &mut registry,
            &workspace,
            sandbox.as_deref(),
            &redactor,
            &mcp.destructive,
        )?;

        let contract = self.contract(&registry)?;
        let mut cfg = RunConfig::new(contract);
        self.apply_run_defaults(&mut cfg)?;
        cfg.context_window = Some(self.context_window(provider.as_ref())?);
        cfg.redactor = redactor;
        cfg.context_layers = context_layers;

        let approval = self.approval.unwrap_or(ApprovalMode::Deny);
        let approver: Arc<dyn Approver> = match (&self.approver, approval) {
            (Some(a), _) => Arc::clone(a),
            (None, ApprovalMode::Deny) => Arc::new(StaticApprover::deny()),
            (None, ApprovalMode::Allow) => Arc::new(StaticApprover {
                approve: true,
                decided_by: "flag".into(),
            }),
        };
        if self.approver.is_none() {
            cfg.approval = Some(approval.as_str().to_string());
        }
        let settings = RunSettings {
            provider: provider_spec.unwrap_or_default(),
            contract: cfg.contract.clone(),
            max_steps: cfg.max_steps,
            max_corrections: cfg.max_corrections,
            require_grounding: cfg.require_grounding,
            stream: cfg.stream,
            approval,
            timeout_secs: cfg.timeout.map(|t| t.as_secs()),
        };
        let core = attest_core::Engine::new(provider, Arc::new(registry), tool_ctx, approver)
            .with_failure_tracker(tracker);
        Ok(Engine::from_inner(Inner {
            core,
            template: cfg,
            settings,
            store,
            workspace,
            label,
            memory: self.memory,
            notices: self.notices,
            observer: self.observer,
            sandbox_record,
            ignored_config: self.ignored_config,
            learning: learning.and_then(|(key, switched)| {
                self.protocol_memory.map(|memory| (memory, key, switched))
            }),
            log_tap: self.log_tap,
        }))
    }

    /// SPEC D1 layers after the base prompt, loaded once per engine.
    fn context_layers(&self, root: &Path) -> Result<(Vec<ContextLayer>, bool), Error> {
        let files = WorkspaceFiles::load(root, &FileLimits::default())
            .map_err(|e| Error::config(e.to_string()))?;
        for skipped in &files.skipped {
            (self.notices)(&format!(
                "workspace file {} skipped: {}",
                skipped.name, skipped.reason
            ));
        }
        let catalog = SkillCatalog::load(root);
        for problem in &catalog.problems {
            (self.notices)(&format!("skill ignored: {problem}"));
        }
        let mut layers: Vec<ContextLayer> = files
            .layers
            .iter()
            .map(|l| ContextLayer {
                name: l.name.clone(),
                text: l.render(),
                truncated: l.truncated,
            })
            .collect();
        if !catalog.is_empty() {
            layers.push(ContextLayer {
                name: "skills_catalog".to_string(),
                text: catalog.render(),
                truncated: false,
            });
        }
        Ok((layers, !catalog.is_empty()))
    }

    /// The options of the sandbox `shell` runs commands in (SPEC F4);
    /// `None` when it is off.
    fn sandbox_options(&self) -> Option<SandboxOptions> {
        let file = &self.config;
        let mode = self
            .sandbox
            .or(file.sandbox.mode)
            .unwrap_or(SandboxMode::WorkspaceWrite);
        (mode != SandboxMode::Off).then(|| SandboxOptions {
            mode,
            allow_network: self.network.or(file.sandbox.network).unwrap_or(false),
            writable_roots: Vec::new(),
            // `bwrap` is looked for where commands will look for programs.
            search_path: self.tool_search_path(),
        })
    }

    /// The `PATH` tool processes run with: the one in
    /// [`EngineBuilder::tool_env_source`], else the minimal environment's.
    fn tool_search_path(&self) -> Option<OsString> {
        match &self.tool_env_source {
            Some(vars) => vars
                .iter()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.clone()),
            None => Some(attest_tools::sandbox::default_search_path()),
        }
    }

    fn registry(
        &self,
        workspace: &Workspace,
        with_skills: bool,
        sandbox: Option<Arc<Sandbox>>,
        mcp_tools: Vec<Arc<dyn Tool>>,
    ) -> Result<ToolRegistry, Error> {
        let mut tools: Vec<Arc<dyn Tool>> = if self.builtin_tools {
            builtin_tools(sandbox.clone())
        } else {
            Vec::new()
        };
        if with_skills {
            tools.push(skill_tool());
        }
        for tool_cfg in &self.config.tools {
            let tool = CommandTool::new(tool_cfg.clone(), workspace.root())
                .map_err(|e| Error::config(format!("[[tools]] `{}`: {e}", tool_cfg.name)))?
                .with_sandbox(sandbox.clone());
            tools.push(Arc::new(tool));
        }
        tools.extend(mcp_tools);
        tools.extend(self.tools.iter().cloned());
        ToolRegistry::new(tools).map_err(|e| Error::config(e.to_string()))
    }

    /// The middleware chain (argument redaction, permission policy, retry
    /// budget) and the failure tracker (SPEC F1–F3, F6, F9).
    fn install_safety(
        &self,
        registry: &mut ToolRegistry,
        workspace: &Workspace,
        sandbox: Option<&Sandbox>,
        redactor: &attest_core::Redactor,
        destructive: &[String],
    ) -> Result<Arc<FailureTracker>, Error> {
        let file = &self.config;
        let permissions = self
            .permissions
            .clone()
            .unwrap_or_else(|| file.permissions.clone());
        // Read-only shell commands are judged against the workspace and the
        // PATH they will run with (a program found in the workspace is not
        // the system tool).
        let search_path = self.tool_search_path();
        let mut policy = PermissionPolicy::new(permissions)
            .map_err(|e| Error::config(format!("invalid [permissions]: {e}")))?
            .with_shell_context(ShellContext::new(workspace.root(), search_path));
        for name in destructive {
            // An MCP server's own word that a tool destroys: no allow in
            // the permissions makes it run unasked.
            policy = policy.require_approval_for(
                name,
                "its MCP server marks it destructive (destructiveHint), so each call needs approval",
            );
        }
        let unknown = policy.unknown_tools(&registry.names());
        if !unknown.is_empty() {
            return Err(Error::config(format!(
                "[permissions] names unknown tool(s) {} (available: {})",
                unknown.join(", "),
                registry.names().join(", ")
            )));
        }
        if let Some(report) = sandbox.map(|s| s.report()) {
            if report.shell_requires_approval() {
                // Said once, plainly (SPEC F4).
                (self.notices)(&report.note);
                policy = policy.require_approval_for(
                    "shell",
                    "no sandbox is available here, so every shell command needs approval",
                );
            }
        }
        let key = match &self.key {
            KeyChoice::Generated => FingerprintKey::generate(),
            KeyChoice::Path(path) => FingerprintKey::load_or_create(path),
        }
        .map_err(|e| Error::config(format!("fingerprint key: {e}")))?;
        let retry = ToolRetryPolicy {
            retry_budget: file
                .safety
                .retry_budget
                .unwrap_or(ToolRetryPolicy::default().retry_budget),
            ..ToolRetryPolicy::default()
        };
        let tracker = Arc::new(FailureTracker::new(
            key,
            redactor.clone(),
            retry,
            file.safety.task_type.unwrap_or_default(),
        ));
        for middleware in standard_chain(
            Arc::new(redactor.clone()),
            Arc::new(policy),
            Arc::clone(&tracker),
        ) {
            registry.push_middleware(middleware);
        }
        Ok(tracker)
    }

    fn contract(&self, registry: &ToolRegistry) -> Result<CompletionContract, Error> {
        let kind = match (self.run.contract, self.config.run.expect.as_deref()) {
            (Some(k), _) => k,
            (None, Some(s)) => s.parse().map_err(|e: String| {
                Error::config(format!("{e} in [run] expect{}", self.config_note))
            })?,
            (None, None) => ContractKind::Answer,
        };
        let mut contract = CompletionContract::new(kind);
        contract.required_tools = self.run.required_tools.clone();
        for tool in &contract.required_tools {
            if registry.get(tool).is_none() {
                return Err(Error::config(format!(
                    "--require-tool {tool}: no such tool (available: {})",
                    registry.names().join(", ")
                )));
            }
        }
        Ok(contract)
    }

    /// The model's context window (SPEC P2): `[provider] context_window`,
    /// else what the provider knows (a local GGUF), else the known-model
    /// table, else 128k with a notice.
    fn context_window(&self, provider: &dyn ModelProvider) -> Result<ContextWindow, Error> {
        let file = &self.config;
        let tokens = file
            .provider
            .context_window
            .or_else(|| provider.context_window())
            .or_else(|| known_context_window(provider.model()));
        let tokens = match tokens {
            Some(0) => {
                return Err(Error::config(format!(
                    "[provider] context_window must be at least 1{}",
                    self.config_note
                )))
            }
            Some(n) => n,
            None => {
                // A script has no window to know.
                if provider.api_family() != "scripted" {
                    (self.notices)(&format!(
                        "the context window of model `{}` is not known; assuming {} tokens (set [provider] context_window)",
                        provider.model(),
                        ContextWindow::UNKNOWN_MODEL_TOKENS
                    ));
                }
                ContextWindow::UNKNOWN_MODEL_TOKENS
            }
        };
        let mut window = ContextWindow::new(tokens);
        if let Some(trigger) = file.run.compaction_trigger {
            if !(trigger > 0.0 && trigger <= 1.0) {
                return Err(Error::config(format!(
                    "[run] compaction_trigger = {trigger}: expected a fraction above 0 and at most 1{}",
                    self.config_note
                )));
            }
            window.trigger = trigger;
        }
        Ok(window)
    }

    fn apply_run_defaults(&self, cfg: &mut RunConfig) -> Result<(), Error> {
        let file = &self.config;
        cfg.max_steps = self.run.max_steps.or(file.run.max_steps).unwrap_or(20);
        if cfg.max_steps == 0 {
            return Err(Error::config("--max-steps must be at least 1"));
        }
        cfg.max_corrections = self
            .run
            .max_corrections
            .or(file.run.max_corrections)
            .unwrap_or(1);
        cfg.require_grounding = self
            .run
            .require_grounding
            .or(file.run.require_grounding)
            .unwrap_or(false);
        cfg.stream = self.run.stream.or(file.run.stream).unwrap_or(true);
        cfg.stream_progress = self.run.stream_progress.unwrap_or(false);
        if let Some(t) = file.provider.max_tokens {
            cfg.max_tokens = t;
        }
        cfg.temperature = file.provider.temperature;
        cfg.seed = file.provider.seed;
        cfg.timeout = match self.run.timeout {
            Some(limit) => limit,
            None => file.run.timeout_secs.map(Duration::from_secs),
        };
        cfg.retry = retry_policy(file);
        if let Some(n) = file.run.defer_tools_after {
            cfg.defer_tools_after = Some(n);
        }
        cfg.reasoning = match file.run.reasoning.as_deref() {
            None | Some("strip") => ReasoningPolicy::Strip,
            Some("keep") => ReasoningPolicy::Keep,
            Some("budget") => ReasoningPolicy::Budget {
                max_tokens: file.run.max_reasoning_tokens.unwrap_or(1024),
            },
            Some(other) => {
                return Err(Error::config(format!(
                    "[run] reasoning = \"{other}\": expected strip, keep or budget{}",
                    self.config_note
                )))
            }
        };
        cfg.doom_loop = DoomLoopLimits {
            threshold: file.safety.doom_loop_threshold.unwrap_or(3).max(1),
            extra_repeats: file.safety.doom_loop_extra_repeats.unwrap_or(2),
        };
        Ok(())
    }
}

fn with_note(e: Error, note: &str) -> Error {
    match e {
        Error::Config(msg) if !note.is_empty() => Error::Config(format!("{msg}{note}")),
        other => other,
    }
}

/// The sandbox `shell` runs commands in (SPEC F4), from
/// [`EngineBuilder::sandbox_options`]; `None` when it is off.
fn shell_sandbox(
    options: Option<SandboxOptions>,
    workspace: &Workspace,
) -> Result<Option<Arc<Sandbox>>, Error> {
    let Some(options) = options else {
        return Ok(None);
    };
    let sandbox = Sandbox::new(options, workspace.root())
        .map_err(|e| Error::config(format!("cannot set up the shell sandbox: {e}")))?;
    Ok(Some(Arc::new(sandbox)))
}

fn open_at(path: &Path) -> Result<SqliteStore, Error> {
    Ok(SqliteStore::open(path)?)
}

fn retry_policy(file: &ConfigFile) -> RetryPolicy {
    let defaults = RetryPolicy::default();
    RetryPolicy {
        max_retries: file.retry.max_retries.unwrap_or(defaults.max_retries),
        initial_backoff: file
            .retry
            .initial_backoff_ms
            .map(Duration::from_millis)
            .unwrap_or(defaults.initial_backoff),
        max_backoff: file
            .retry
            .max_backoff_ms
            .map(Duration::from_millis)
            .unwrap_or(defaults.max_backoff),
    }
}

/// Keep only the profile's tools (SPEC D7).
fn apply_profile(
    registry: ToolRegistry,
    file: &ConfigFile,
    name: &str,
) -> Result<ToolRegistry, Error> {
    let profile = file.profiles.get(name).ok_or_else(|| {
        Error::config(format!(
            "no profile `{name}` in [profiles] (defined: {})",
            file.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
        ))
    })?;
    let names = registry.names();
    if let Some(unknown) = profile.tools.iter().find(|t| !names.contains(t)) {
        return Err(Error::config(format!(
            "profile `{name}` names unknown tool `{unknown}` (available: {})",
            names.join(", ")
        )));
    }
    let kept: Vec<Arc<dyn Tool>> = names
        .iter()
        .filter(|n| profile.tools.contains(n))
        .filter_map(|n| registry.get(n).cloned())
        .collect();
    ToolRegistry::new(kept).map_err(|e| Error::config(e.to_string()))
}
