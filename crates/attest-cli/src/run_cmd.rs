//! `attest run`: one task, non-interactive.

use crate::config::{self, LoadedConfig};
use crate::render::HumanRenderer;
use crate::EXIT_USAGE;
use anyhow::{anyhow, bail, Context, Result};
use attest_core::{Engine, JsonlRunLog, RetryPolicy, RunConfig, StaticApprover};
use attest_protocol::{CompletionContract, ContractKind, Event};
use attest_providers::http::{HttpProvider, HttpProviderConfig, WireFormat};
use attest_providers::scripted::ScriptedProvider;
use attest_providers::ModelProvider;
use attest_tools::{builtin_tools, CommandTool, Tool, ToolContext, ToolRegistry, Workspace};
use clap::{Args, ValueEnum};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProviderKind {
    Openai,
    Anthropic,
    Scripted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApprovalMode {
    Deny,
    Allow,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The task. `-` reads it from standard input.
    pub prompt: String,
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
    /// Decision for tools whose permission is `ask` (non-interactive default: deny).
    #[arg(long, value_enum, default_value_t = ApprovalMode::Deny)]
    pub approval: ApprovalMode,
    /// Wall-clock limit for the whole run, in seconds.
    #[arg(long)]
    pub timeout: Option<u64>,
    /// Print one JSON event per line on stdout instead of human output.
    #[arg(long)]
    pub json: bool,
}

fn parse_contract(s: &str) -> Result<ContractKind, String> {
    s.parse()
}

/// Run the command; returns the process exit code.
pub async fn execute(args: RunArgs) -> u8 {
    match prepare(args) {
        Ok(prepared) => prepared.run().await,
        Err(e) => {
            eprintln!("attest: {e:#}");
            EXIT_USAGE
        }
    }
}

struct Prepared {
    engine: Engine,
    cfg: RunConfig,
    prompt: String,
    runs_dir: PathBuf,
    json: bool,
    provider_label: String,
}

fn prepare(args: RunArgs) -> Result<Prepared> {
    let workspace = Workspace::new(&args.workspace)
        .with_context(|| format!("workspace {}", args.workspace.display()))?;
    let LoadedConfig { file, path } = config::load(args.config.as_deref(), workspace.root())?;
    let config_note = path
        .as_ref()
        .map(|p| format!(" (config {})", p.display()))
        .unwrap_or_default();

    let prompt = read_prompt(&args.prompt)?;

    let kind = match (&args.provider, file.provider.name.as_deref()) {
        (Some(k), _) => *k,
        (None, Some(name)) => ProviderKind::from_str(name, true)
            .map_err(|_| anyhow!("unknown provider `{name}` in config{config_note}"))?,
        (None, None) => bail!(
            "no provider configured: pass --provider openai|anthropic|scripted, set ATTEST_PROVIDER, or set [provider] name in attest.toml"
        ),
    };

    let mut secrets = Vec::new();
    // Tools never inherit provider keys, whichever provider this run uses.
    let mut hidden_env = vec![
        "OPENAI_API_KEY".to_string(),
        "ANTHROPIC_API_KEY".to_string(),
    ];
    let (provider, provider_label): (Arc<dyn ModelProvider>, String) = match kind {
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
            let p = ScriptedProvider::from_file(&script)?;
            (Arc::new(p), format!("scripted {}", script.display()))
        }
        ProviderKind::Openai | ProviderKind::Anthropic => {
            let (wire, name, url_env, key_env) = if kind == ProviderKind::Openai {
                (
                    WireFormat::OpenAiChat,
                    "openai",
                    "OPENAI_BASE_URL",
                    "OPENAI_API_KEY",
                )
            } else {
                (
                    WireFormat::AnthropicMessages,
                    "anthropic",
                    "ANTHROPIC_BASE_URL",
                    "ANTHROPIC_API_KEY",
                )
            };
            let base_url = args
                .base_url
                .clone()
                .or_else(|| non_empty_env(url_env))
                .or_else(|| file.provider.base_url.clone())
                .unwrap_or_else(|| {
                    if kind == ProviderKind::Openai {
                        "https://api.openai.com/v1".into()
                    } else {
                        "https://api.anthropic.com".into()
                    }
                });
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
                base_url,
                model: model.clone(),
                api_key,
                request_timeout: Duration::from_secs(
                    file.provider.request_timeout_secs.unwrap_or(300),
                ),
                extra_headers: Vec::new(),
            })?;
            let label = format!("{name} {model} at {}", http.endpoint());
            (Arc::new(http), label)
        }
    };

    let registry = build_registry(&file, &workspace)?;

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
                registry_names(&registry)
            );
        }
    }

    let mut cfg = RunConfig::new(contract);
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
    if let Some(t) = file.provider.max_tokens {
        cfg.max_tokens = t;
    }
    cfg.temperature = file.provider.temperature;
    cfg.timeout = args
        .timeout
        .or(file.run.timeout_secs)
        .map(Duration::from_secs);
    let defaults = RetryPolicy::default();
    cfg.retry = RetryPolicy {
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
    };
    cfg.secrets = secrets;

    let approver = match args.approval {
        ApprovalMode::Deny => StaticApprover::deny(),
        ApprovalMode::Allow => StaticApprover {
            approve: true,
            decided_by: "flag".into(),
        },
    };
    let runs_dir = workspace.root().join(".attest").join("runs");
    let engine = Engine::new(
        provider,
        Arc::new(registry),
        ToolContext {
            hidden_env,
            ..ToolContext::new(workspace)
        },
        Arc::new(approver),
    );
    Ok(Prepared {
        engine,
        cfg,
        prompt,
        runs_dir,
        json: args.json,
        provider_label,
    })
}

fn build_registry(file: &config::ConfigFile, workspace: &Workspace) -> Result<ToolRegistry> {
    let mut tools: Vec<Arc<dyn Tool>> = builtin_tools();
    for tool_cfg in &file.tools {
        let name = tool_cfg.name.clone();
        let tool = CommandTool::new(tool_cfg.clone(), workspace.root())
            .with_context(|| format!("[[tools]] `{name}`"))?;
        tools.push(Arc::new(tool));
    }
    let mut registry = ToolRegistry::new(tools)?;
    for (tool, permission) in &file.permissions {
        if registry.get(tool).is_none() {
            bail!(
                "[permissions] names unknown tool `{tool}` (available: {})",
                registry_names(&registry)
            );
        }
        registry.set_permission(tool, *permission);
    }
    Ok(registry)
}

fn registry_names(registry: &ToolRegistry) -> String {
    registry
        .specs()
        .iter()
        .map(|s| s.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn non_empty_env(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.is_empty())
}

fn read_prompt(arg: &str) -> Result<String> {
    let prompt = if arg == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read the prompt from standard input")?;
        text
    } else {
        arg.to_string()
    };
    if prompt.trim().is_empty() {
        bail!("the prompt is empty");
    }
    Ok(prompt)
}

impl Prepared {
    async fn run(self) -> u8 {
        let mut log = match JsonlRunLog::create(&self.runs_dir, &self.cfg.run_id) {
            Ok(log) => log,
            Err(e) => {
                eprintln!("attest: cannot create the run log: {e}");
                return EXIT_USAGE;
            }
        };
        let cancel = CancellationToken::new();
        let on_ctrl_c = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                on_ctrl_c.cancel();
            }
        });

        let mut human = HumanRenderer::new(&self.provider_label, log.path());
        let json = self.json;
        let mut observer = |event: &Event| {
            if json {
                let mut out = std::io::stdout().lock();
                if let Ok(line) = serde_json::to_string(event) {
                    // A closed stdout must not abort the run; the log still has everything.
                    let _ = writeln!(out, "{line}");
                    let _ = out.flush();
                }
            } else {
                human.on_event(event);
            }
        };
        let result = self
            .engine
            .run(&self.prompt, &self.cfg, &mut log, &mut observer, cancel)
            .await;
        match result {
            Ok(outcome) => outcome.state.exit_code() as u8,
            Err(e) => {
                eprintln!("attest: the run log failed, the run was stopped: {e}");
                5
            }
        }
    }
}
