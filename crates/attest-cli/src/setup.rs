//! Turning flags, environment, config and (for resume) a run's stored
//! settings into an [`Engine`] and a [`RunConfig`]. Precedence: flag, then
//! stored settings, then environment, then `attest.toml`, then default.

use crate::config::{self, ConfigFile, LoadedConfig};
use anyhow::{anyhow, bail, Context, Result};
use attest_core::context::skills::SkillCatalog;
use attest_core::context::workspace_files::{FileLimits, WorkspaceFiles};
use attest_core::{
    Approver, ContextLayer, DoomLoopLimits, Engine, ReasoningPolicy, RetryPolicy, RunConfig,
    StaticApprover,
};
use attest_protocol::{CompletionContract, ContractKind};
use attest_providers::http::{HttpProvider, HttpProviderConfig, WireFormat};
use attest_providers::scripted::ScriptedProvider;
use attest_providers::text_protocol::TextProtocolProvider;
use attest_providers::ModelProvider;
use attest_tools::failure::default_key_path;
use attest_tools::middleware::standard_chain;
use attest_tools::{
    builtin_tools, skill_tool, CommandTool, ShellContext, Tool, ToolContext, ToolEnv, ToolRegistry,
    Workspace,
};
use attest_tools::{
    FailureTracker, FingerprintKey, PermissionPolicy, Redactor, RetryPolicy as ToolRetryPolicy,
    Sandbox, SandboxMode, SandboxOptions,
};
use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    Openai,
    Anthropic,
    Scripted,
    /// The embedded model, run in-process (the default when none is configured).
    Local,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    Deny,
    Allow,
}

/// How tools are offered to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProtocolMode {
    /// The provider's native tool calling.
    Native,
    /// The text (ReAct) protocol: tools described in the prompt, only the
    /// harness writes Observations.
    Text,
    /// Text when the provider is configured without tool calling, else native.
    Auto,
}

/// Options shared by `attest run` and `attest resume`.
#[derive(Debug, Clone, Default, Args)]
pub struct EngineArgs {
    /// Model provider.
    #[arg(long, env = "ATTEST_PROVIDER", value_enum)]
    pub provider: Option<ProviderKind>,
    /// Endpoint base URL (OpenAI: including `/v1`; Anthropic: without it).
    /// Defaults to OPENAI_BASE_URL / ANTHROPIC_BASE_URL.
    #[arg(long)]
    pub base_url: Option<String>,
    /// Model name.
    #[arg(long, env = "ATTEST_MODEL")]
    pub model: Option<String>,
    /// Read the API key from this variable instead of OPENAI_API_KEY / ANTHROPIC_API_KEY.
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// Script of responses for `--provider scripted` (JSON or YAML).
    #[arg(long)]
    pub script: Option<PathBuf>,
    /// GGUF file for `--provider local` (default: the cached default model,
    /// fetched on first use).
    #[arg(long, env = "ATTEST_LOCAL_MODEL")]
    pub model_path: Option<PathBuf>,
    /// Inference threads for `--provider local` (default: all cores).
    #[arg(long, env = "ATTEST_THREADS")]
    pub threads: Option<usize>,
    /// Tool protocol: native tool calling, or the text (ReAct) protocol.
    #[arg(long, value_enum)]
    pub protocol: Option<ProtocolMode>,
    /// Workspace root; tools are confined to it.
    #[arg(short = 'C', long, default_value = ".")]
    pub workspace: PathBuf,
    /// Config file (default: WORKSPACE/attest.toml, then the user config dir).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Completion contract: what evidence a `completed` run needs.
    #[arg(long, value_parser = parse_contract)]
    pub expect: Option<ContractKind>,
    /// A tool that must have a successful receipt (repeatable).
    #[arg(long = "require-tool")]
    pub require_tool: Vec<String>,
    /// Model calls allowed before the run ends `incomplete`.
    #[arg(long)]
    pub max_steps: Option<u32>,
    /// Corrective turns when required evidence is missing.
    #[arg(long)]
    pub max_corrections: Option<u32>,
    /// Stream responses (default).
    #[arg(long, overrides_with = "no_stream")]
    pub stream: bool,
    /// Do not stream responses.
    #[arg(long = "no-stream")]
    pub no_stream: bool,
    /// Show the model's response as it is generated: `progress` events with
    /// `"delta": true` under `--json`, raw text on stderr otherwise.
    /// Default: on for `--provider local` (with `--json`, or when stderr is
    /// a terminal), off for other providers (they stream only with `--stream`).
    #[arg(long, overrides_with = "no_stream_tokens")]
    pub stream_tokens: bool,
    /// Do not show the model's response as it is generated.
    #[arg(long = "no-stream-tokens")]
    pub no_stream_tokens: bool,
    /// Decision for tools whose permission is `ask` (non-interactive default: deny).
    #[arg(long, value_enum)]
    pub approval: Option<ApprovalMode>,
    /// Wall-clock limit for the whole run, in seconds.
    #[arg(long)]
    pub timeout: Option<u64>,
    /// Tool profile from `[profiles.NAME]` in attest.toml: only its tools are offered.
    #[arg(long)]
    pub profile: Option<String>,
    /// Print one JSON event per line on stdout instead of human output.
    #[arg(long)]
    pub json: bool,
}

fn parse_contract(s: &str) -> Result<ContractKind, String> {
    s.parse()
}

/// The resolved settings of a run, stored with it so `attest resume` can
/// rebuild the same engine. Never holds secrets (only the key's variable name).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredSettings {
    pub provider: ProviderKind,
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key_env: Option<String>,
    pub script: Option<PathBuf>,
    /// `--provider local`: the GGUF file that was run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_path: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    pub protocol: ProtocolMode,
    pub contract: CompletionContract,
    pub max_steps: u32,
    pub max_corrections: u32,
    pub stream: bool,
    pub approval: ApprovalMode,
    pub timeout_secs: Option<u64>,
}

impl EngineArgs {
    /// Fill options not given on the command line from a run's stored settings.
    pub fn with_defaults_from(mut self, s: &StoredSettings) -> Self {
        self.provider = self.provider.or(Some(s.provider));
        self.base_url = self.base_url.or_else(|| s.base_url.clone());
        self.model = self.model.or_else(|| s.model.clone());
        self.api_key_env = self.api_key_env.or_else(|| s.api_key_env.clone());
        self.script = self.script.or_else(|| s.script.clone());
        self.model_path = self.model_path.or_else(|| s.model_path.clone());
        self.threads = self.threads.or(s.threads);
        self.protocol = self.protocol.or(Some(s.protocol));
        self.expect = self.expect.or(Some(s.contract.kind));
        if self.require_tool.is_empty() {
            self.require_tool = s.contract.required_tools.clone();
        }
        self.max_steps = self.max_steps.or(Some(s.max_steps));
        self.max_corrections = self.max_corrections.or(Some(s.max_corrections));
        if !self.stream && !self.no_stream {
            self.stream = s.stream;
            self.no_stream = !s.stream;
        }
        self.approval = self.approval.or(Some(s.approval));
        self.timeout = self.timeout.or(s.timeout_secs);
        self
    }
}

/// Everything a command needs to drive a run.
pub struct Prepared {
    pub engine: Engine,
    pub cfg: RunConfig,
    pub workspace: Workspace,
    pub json: bool,
    pub provider_label: String,
    pub settings: StoredSettings,
}

impl Prepared {
    /// SPEC D1: the memory layer follows the skills catalog (the last layer
    /// `prepare` pushes). Built per task, after `prepare`, because
    /// retrieval needs the prompt. A memory failure is reported and the run
    /// goes on without the layer. Returns the decisions made, to be traced
    /// once the run's log exists.
    pub fn add_memory_layer(
        &mut self,
        store: &mut attest_store::SqliteStore,
        prompt: &str,
    ) -> Vec<attest_core::memory::DecisionRecord> {
        match crate::memory_run::layer_for(store, self.workspace.root(), prompt) {
            Ok((layer, decisions)) => {
                self.cfg.context_layers.extend(layer);
                decisions
            }
            Err(e) => {
                eprintln!("attest: memory not used for this run: {e:#}");
                Vec::new()
            }
        }
    }
}

pub fn prepare(args: &EngineArgs) -> Result<Prepared> {
    prepare_with(args, None)
}

/// As [`prepare`], with an approver of the caller's (the chat's terminal
/// prompt) instead of the `--approval` flag's.
pub fn prepare_with(args: &EngineArgs, approver: Option<Arc<dyn Approver>>) -> Result<Prepared> {
    let workspace = Workspace::new(&args.workspace)
        .with_context(|| format!("workspace {}", args.workspace.display()))?;
    let LoadedConfig { file, path } = config::load(args.config.as_deref(), workspace.root())?;
    let config_note = path
        .as_ref()
        .map(|p| format!(" (config {})", p.display()))
        .unwrap_or_default();

    let kind = match (&args.provider, file.provider.name.as_deref()) {
        (Some(k), _) => *k,
        (None, Some(name)) => ProviderKind::from_str(name, true)
            .map_err(|_| anyhow!("unknown provider `{name}` in config{config_note}"))?,
        #[cfg(feature = "local")]
        (None, None) => ProviderKind::Local,
        #[cfg(not(feature = "local"))]
        (None, None) => bail!(
            "no provider configured: pass --provider openai|anthropic|scripted, set ATTEST_PROVIDER, or set [provider] name in attest.toml (this build has no embedded model: feature `local`)"
        ),
    };
    let protocol = args
        .protocol
        .or(file.provider.protocol)
        .unwrap_or(ProtocolMode::Auto);

    let mut secrets = Vec::new();
    // Tools never inherit provider keys, whichever provider this run uses.
    let mut hidden_env = vec![
        "OPENAI_API_KEY".to_string(),
        "ANTHROPIC_API_KEY".to_string(),
    ];
    let mut settings = StoredSettings {
        provider: kind,
        base_url: None,
        model: None,
        api_key_env: None,
        script: None,
        model_path: None,
        threads: None,
        protocol,
        contract: CompletionContract::default(),
        max_steps: 20,
        max_corrections: 1,
        stream: true,
        approval: ApprovalMode::Deny,
        timeout_secs: None,
    };
    let (mut provider, mut provider_label): (Arc<dyn ModelProvider>, String) = match kind {
        ProviderKind::Scripted => {
            let script = args
                .script
                .clone()
                .or_else(|| file.provider.script.clone())
                .ok_or_else(|| anyhow!("--provider scripted needs --script FILE"))?;
            let script = if script.is_relative() && !script.exists() {
                workspace.root().join(script)
            } else {
                script
            };
            let script = script.canonicalize().unwrap_or(script);
            let p = ScriptedProvider::from_file(&script)?;
            settings.script = Some(script.clone());
            (Arc::new(p), format!("scripted {}", script.display()))
        }
        ProviderKind::Openai | ProviderKind::Anthropic => {
            let (wire, name, url_env, key_env, default_url) = if kind == ProviderKind::Openai {
                (
                    WireFormat::OpenAiChat,
                    "openai",
                    "OPENAI_BASE_URL",
                    "OPENAI_API_KEY",
                    "https://api.openai.com/v1",
                )
            } else {
                (
                    WireFormat::AnthropicMessages,
                    "anthropic",
                    "ANTHROPIC_BASE_URL",
                    "ANTHROPIC_API_KEY",
                    "https://api.anthropic.com",
                )
            };
            let base_url = args
                .base_url
                .clone()
                .or_else(|| non_empty_env(url_env))
                .or_else(|| file.provider.base_url.clone())
                .unwrap_or_else(|| default_url.to_string());
            let model = args
                .model
                .clone()
                .or_else(|| file.provider.model.clone())
                .ok_or_else(|| anyhow!("no model: pass --model NAME or set ATTEST_MODEL"))?;
            let key_var = args
                .api_key_env
                .clone()
                .or_else(|| file.provider.api_key_env.clone())
                .unwrap_or_else(|| key_env.to_string());
            let api_key = non_empty_env(&key_var);
            hidden_env.push(key_var.clone());
            if let Some(k) = &api_key {
                secrets.push(k.clone());
            }
            let http = HttpProvider::new(HttpProviderConfig {
                name: name.to_string(),
                wire,
                base_url: base_url.clone(),
                model: model.clone(),
                api_key,
                request_timeout: Duration::from_secs(
                    file.provider.request_timeout_secs.unwrap_or(300),
                ),
                extra_headers: Vec::new(),
            })?;
            let label = format!("{name} {model} at {}", http.endpoint());
            settings.base_url = Some(base_url);
            settings.model = Some(model);
            settings.api_key_env = Some(key_var);
            (Arc::new(http), label)
        }
        ProviderKind::Local => local_provider(args, &file, &mut settings)?,
    };
    let use_text = match protocol {
        ProtocolMode::Text => true,
        ProtocolMode::Native => false,
        ProtocolMode::Auto => file.provider.tool_calling == Some(false),
    };
    if use_text {
        provider = Arc::new(TextProtocolProvider::new(provider));
        provider_label.push_str(" (text protocol)");
    }

    // SPEC D1 layers after the base prompt, loaded once for the whole run.
    let files = WorkspaceFiles::load(workspace.root(), &FileLimits::default())?;
    for skipped in &files.skipped {
        eprintln!(
            "attest: workspace file {} skipped: {}",
            skipped.name, skipped.reason
        );
    }
    let catalog = SkillCatalog::load(workspace.root());
    for problem in &catalog.problems {
        eprintln!("attest: skill ignored: {problem}");
    }
    let mut context_layers: Vec<ContextLayer> = files
        .layers
        .iter()
        .map(|l| ContextLayer {
            name: l.name.clone(),
            text: l.render(),
            truncated: l.truncated,
        })
        .collect();
    if !catalog.is_empty() {
        context_layers.push(ContextLayer {
            name: "skills_catalog".to_string(),
            text: catalog.render(),
            truncated: false,
        });
    }
    let mut registry = build_registry(&file, &workspace, !catalog.is_empty())?;
    if let Some(name) = args.profile.as_ref().or(file.run.profile.as_ref()) {
        registry = apply_profile(registry, &file, name)?;
    }
    let safety = install_safety(&file, &mut registry, &workspace, &secrets)?;

    let expect = match (args.expect, file.run.expect.as_deref()) {
        (Some(k), _) => k,
        (None, Some(s)) => s
            .parse()
            .map_err(|e: String| anyhow!("{e} in [run] expect{config_note}"))?,
        (None, None) => ContractKind::Answer,
    };
    let mut contract = CompletionContract::new(expect);
    contract.required_tools = args.require_tool.clone();
    for tool in &contract.required_tools {
        if registry.get(tool).is_none() {
            bail!(
                "--require-tool {tool}: no such tool (available: {})",
                registry.names().join(", ")
            );
        }
    }

    let mut cfg = RunConfig::new(contract.clone());
    cfg.max_steps = args.max_steps.or(file.run.max_steps).unwrap_or(20);
    if cfg.max_steps == 0 {
        bail!("--max-steps must be at least 1");
    }
    cfg.max_corrections = args
        .max_corrections
        .or(file.run.max_corrections)
        .unwrap_or(1);
    cfg.stream = if args.no_stream {
        false
    } else if args.stream {
        true
    } else {
        file.run.stream.unwrap_or(true)
    };
    cfg.stream_progress = if args.no_stream_tokens {
        false
    } else if args.stream_tokens {
        true
    } else {
        use std::io::IsTerminal as _;
        kind == ProviderKind::Local && (args.json || std::io::stderr().is_terminal())
    };
    if let Some(t) = file.provider.max_tokens {
        cfg.max_tokens = t;
    }
    cfg.temperature = file.provider.temperature;
    let timeout_secs = args.timeout.or(file.run.timeout_secs);
    cfg.timeout = timeout_secs.map(Duration::from_secs);
    cfg.retry = retry_policy(&file);
    cfg.secrets = secrets;
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
            bail!("[run] reasoning = \"{other}\": expected strip, keep or budget{config_note}")
        }
    };
    cfg.context_layers = context_layers;

    let approval = args.approval.unwrap_or(ApprovalMode::Deny);
    let approver: Arc<dyn Approver> = match (approver, approval) {
        (Some(a), _) => a,
        (None, ApprovalMode::Deny) => Arc::new(StaticApprover::deny()),
        (None, ApprovalMode::Allow) => Arc::new(StaticApprover {
            approve: true,
            decided_by: "flag".into(),
        }),
    };
    settings.contract = contract;
    settings.max_steps = cfg.max_steps;
    settings.max_corrections = cfg.max_corrections;
    settings.stream = cfg.stream;
    settings.approval = approval;
    settings.timeout_secs = timeout_secs;

    cfg.doom_loop = DoomLoopLimits {
        threshold: file.safety.doom_loop_threshold.unwrap_or(3).max(1),
        extra_repeats: file.safety.doom_loop_extra_repeats.unwrap_or(2),
    };
    let mut tool_ctx = ToolContext {
        hidden_env,
        env: ToolEnv::from_process(&file.sandbox.env_passthrough),
        ..ToolContext::new(workspace.clone())
    };
    if let Some(sandbox) = safety.sandbox {
        tool_ctx = tool_ctx.with_sandbox(sandbox);
    }
    let engine = Engine::new(provider, Arc::new(registry), tool_ctx, approver)
        .with_failure_tracker(safety.tracker);
    Ok(Prepared {
        engine,
        cfg,
        workspace,
        json: args.json,
        provider_label,
        settings,
    })
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
fn apply_profile(registry: ToolRegistry, file: &ConfigFile, name: &str) -> Result<ToolRegistry> {
    let profile = file.profiles.get(name).ok_or_else(|| {
        anyhow!(
            "no profile `{name}` in [profiles] (defined: {})",
            file.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
        )
    })?;
    let names = registry.names();
    if let Some(unknown) = profile.tools.iter().find(|t| !names.contains(t)) {
        bail!(
            "profile `{name}` names unknown tool `{unknown}` (available: {})",
            names.join(", ")
        );
    }
    let kept: Vec<Arc<dyn Tool>> = names
        .iter()
        .filter(|n| profile.tools.contains(n))
        .filter_map(|n| registry.get(n).cloned())
        .collect();
    Ok(ToolRegistry::new(kept)?)
}

fn build_registry(
    file: &ConfigFile,
    workspace: &Workspace,
    with_skills: bool,
) -> Result<ToolRegistry> {
    let mut tools: Vec<Arc<dyn Tool>> = builtin_tools();
    if with_skills {
        tools.push(skill_tool());
    }
    for tool_cfg in &file.tools {
        let name = tool_cfg.name.clone();
        let tool = CommandTool::new(tool_cfg.clone(), workspace.root())
            .with_context(|| format!("[[tools]] `{name}`"))?;
        tools.push(Arc::new(tool));
    }
    Ok(ToolRegistry::new(tools)?)
}

fn non_empty_env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.is_empty())
}

/// `--provider local`: resolve the model file (`--model-path` /
/// `ATTEST_LOCAL_MODEL`, `[provider] model_path`, a known model named by
/// `--model`, else the default model, fetched into the cache on first use)
/// and load it.
#[cfg(feature = "local")]
fn local_provider(
    args: &EngineArgs,
    file: &ConfigFile,
    settings: &mut StoredSettings,
) -> Result<(Arc<dyn ModelProvider>, String)> {
    use attest_local::fetch::{ensure_model, known_model, FetchOptions, QWEN25_CODER_1_5B};
    use attest_local::{LocalConfig, LocalProvider};

    let explicit = args
        .model_path
        .clone()
        .or_else(|| file.provider.model_path.clone());
    let path = match explicit {
        Some(p) if p.is_file() => p,
        Some(p) => match p.to_str().and_then(known_model) {
            Some(m) => fetch_blocking(m)?,
            None => bail!(
                "model file {} does not exist (from --model-path / ATTEST_LOCAL_MODEL / [provider] model_path)",
                p.display()
            ),
        },
        None => {
            let model = match args.model.clone().or_else(|| file.provider.model.clone()) {
                Some(name) => known_model(&name).ok_or_else(|| {
                    let known: Vec<&str> = attest_local::KNOWN_MODELS.iter().map(|m| m.id).collect();
                    anyhow!(
                        "--provider local: unknown model `{name}` (known: {}); pass --model-path FILE for another GGUF",
                        known.join(", ")
                    )
                })?,
                None => &QWEN25_CODER_1_5B,
            };
            fetch_blocking(model)?
        }
    };
    let path = path.canonicalize().unwrap_or(path);

    fn fetch_blocking(model: &'static attest_local::KnownModel) -> Result<PathBuf> {
        let opts = FetchOptions::default();
        let fetch = || ensure_model(model, &opts);
        let path = match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(fetch)
            }
            _ => fetch(),
        }?;
        Ok(path)
    }

    let mut cfg = LocalConfig::new(&path);
    cfg.threads = args.threads.or(file.provider.threads);
    if let Some(n) = cfg.threads.filter(|&n| n > 0) {
        // Generation runs on the provider's own pool; prompt evaluation runs
        // in candle's kernels, whose worker pool is sized once, from this
        // variable, on first use (later than this). Nothing else reads or
        // writes the environment at this point of set-up.
        if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
            std::env::set_var("CANDLE_NUM_THREADS", n.to_string());
        }
    }
    cfg.max_context = file.provider.context_length;
    if file.provider.prefix_cache != Some(false) {
        cfg.prefix_cache_dir = attest_local::fetch::default_prefix_cache_dir();
    }
    if let Some(t) = file.provider.max_tokens {
        cfg.max_new_tokens = t as usize;
    }
    let load = || LocalProvider::load(cfg);
    let provider = match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(load)
        }
        _ => load(),
    }
    .with_context(|| format!("loading {}", path.display()))?;
    let label = format!(
        "local {} ({}, {} threads)",
        provider.model(),
        path.display(),
        provider.threads()
    );
    settings.model = Some(provider.model().to_string());
    settings.model_path = Some(path);
    settings.threads = args.threads.or(file.provider.threads);
    Ok((Arc::new(provider), label))
}

#[cfg(not(feature = "local"))]
fn local_provider(
    _args: &EngineArgs,
    _file: &ConfigFile,
    _settings: &mut StoredSettings,
) -> Result<(Arc<dyn ModelProvider>, String)> {
    bail!("this attest was built without the embedded model (cargo feature `local`)")
}

/// What `install_safety` set up for the run.
struct Safety {
    sandbox: Option<Arc<Sandbox>>,
    tracker: Arc<FailureTracker>,
}

/// The middleware chain (argument redaction, permission policy, retry
/// budget), the shell sandbox and the failure tracker (SPEC F1–F4, F6, F9).
fn install_safety(
    file: &ConfigFile,
    registry: &mut ToolRegistry,
    workspace: &Workspace,
    secrets: &[String],
) -> Result<Safety> {
    let mode = file.sandbox.mode.unwrap_or(SandboxMode::WorkspaceWrite);
    let mut policy = PermissionPolicy::new(file.permissions.clone())
        .context("invalid [permissions]")?
        .with_shell_context(ShellContext::new(
            workspace.root(),
            std::env::var_os("PATH"),
        ));
    let unknown = policy.unknown_tools(&registry.names());
    if !unknown.is_empty() {
        bail!(
            "[permissions] names unknown tool(s) {} (available: {})",
            unknown.join(", "),
            registry.names().join(", ")
        );
    }
    let sandbox = if mode == SandboxMode::Off {
        None
    } else {
        let options = SandboxOptions {
            mode,
            allow_network: file.sandbox.network.unwrap_or(false),
            writable_roots: Vec::new(),
        };
        Some(Arc::new(
            Sandbox::new(options, workspace.root()).context("cannot set up the shell sandbox")?,
        ))
    };
    if let Some(report) = sandbox.as_ref().map(|s| s.report()) {
        if report.shell_requires_approval() {
            // Said once, plainly (SPEC F4).
            eprintln!("attest: {}", report.note);
            policy = policy.require_approval_for(
                "shell",
                "no sandbox is available here, so every shell command needs approval",
            );
        }
    }
    let key_path = default_key_path(
        std::env::var_os("XDG_CONFIG_HOME").as_deref(),
        std::env::var_os("HOME").as_deref(),
    )
    .ok_or_else(|| {
        anyhow!("cannot locate the user config dir for the fingerprint key (set HOME)")
    })?;
    let key = FingerprintKey::load_or_create(&key_path)
        .with_context(|| format!("fingerprint key {}", key_path.display()))?;
    let redactor = Redactor::new().with_secrets(secrets.iter().cloned());
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
    for middleware in standard_chain(Arc::new(redactor), Arc::new(policy), Arc::clone(&tracker)) {
        registry.push_middleware(middleware);
    }
    Ok(Safety { sandbox, tracker })
}
