//! Turning flags, environment, config and (for resume) a run's stored
//! settings into an engine. Precedence: flag, then stored settings, then
//! environment, then `attest.toml`, then default. The assembly itself is
//! the `attest` crate's builder; this file only decides what to ask it for.

use anyhow::{Context, Result};
use attest::config::{LoadOptions, LoadedConfig};
use attest::trust::TrustStore;
use attest::{
    ApprovalMode, Approver, Engine, EnvLookup, ProtocolMode, ProviderKind, ProviderSpec,
    RunSettings,
};
use attest_protocol::ContractKind;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// A clap parser for one of `names`, parsed into `T`.
fn choice<T>(names: &'static [&'static str]) -> impl TypedValueParser<Value = T>
where
    T: FromStr + Clone + Send + Sync + 'static,
{
    PossibleValuesParser::new(names).map(|s| {
        s.parse::<T>()
            .unwrap_or_else(|_| unreachable!("`{s}` is one of the possible values"))
    })
}

/// Options shared by `attest run` and `attest resume`.
#[derive(Debug, Clone, Default, Args)]
pub struct EngineArgs {
    /// Model provider.
    #[arg(long, env = "ATTEST_PROVIDER", value_parser = choice::<ProviderKind>(&ProviderKind::NAMES))]
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
    #[arg(long, value_parser = choice::<ProtocolMode>(&ProtocolMode::NAMES))]
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
    /// End the run `unverified` (`ungrounded_claim`) when the answer names a
    /// value that no tool output, the prompt or earlier evidence shows, or
    /// uses no tool output at all; one corrective turn first (config:
    /// `[run] require_grounding = true`).
    #[arg(long)]
    pub require_grounding: bool,
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
    #[arg(long, value_parser = choice::<ApprovalMode>(&["deny", "allow"]))]
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
    /// Export GenAI spans over OTLP/HTTP to this base endpoint
    /// (`http://localhost:4318`); default: `[telemetry] otlp_endpoint`.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
}

fn parse_contract(s: &str) -> Result<ContractKind, String> {
    s.parse()
}

impl EngineArgs {
    /// Fill options not given on the command line from a run's stored settings.
    pub fn with_defaults_from(mut self, s: &RunSettings) -> Self {
        let p = &s.provider;
        self.provider = self.provider.or(p.kind);
        self.base_url = self.base_url.or_else(|| p.base_url.clone());
        self.model = self.model.or_else(|| p.model.clone());
        self.api_key_env = self.api_key_env.or_else(|| p.api_key_env.clone());
        self.script = self.script.or_else(|| p.script.clone());
        self.model_path = self.model_path.or_else(|| p.model_path.clone());
        self.threads = self.threads.or(p.threads);
        self.protocol = self.protocol.or(p.protocol);
        self.expect = self.expect.or(Some(s.contract.kind));
        if self.require_tool.is_empty() {
            self.require_tool = s.contract.required_tools.clone();
        }
        self.max_steps = self.max_steps.or(Some(s.max_steps));
        self.max_corrections = self.max_corrections.or(Some(s.max_corrections));
        self.require_grounding |= s.require_grounding;
        if !self.stream && !self.no_stream {
            self.stream = s.stream;
            self.no_stream = !s.stream;
        }
        self.approval = self.approval.or(Some(s.approval));
        self.timeout = self.timeout.or(s.timeout_secs);
        self
    }

    fn provider_spec(&self) -> ProviderSpec {
        ProviderSpec {
            kind: self.provider,
            base_url: self.base_url.clone(),
            model: self.model.clone(),
            api_key_env: self.api_key_env.clone(),
            script: self.script.clone(),
            model_path: self.model_path.clone(),
            threads: self.threads,
            protocol: self.protocol,
        }
    }
}

/// Everything a command needs to drive runs.
pub struct Prepared {
    pub engine: Engine,
    pub json: bool,
    /// OTLP export; flushed (briefly, after the run) when this drops.
    pub telemetry: Option<attest::telemetry::Telemetry>,
}

impl Prepared {
    /// Send the spans of the runs so far, waiting briefly; export never
    /// fails a run, so its errors are dropped.
    pub fn flush_telemetry(&self) {
        if let Some(t) = &self.telemetry {
            t.shutdown(Duration::from_secs(3));
        }
    }

    pub fn provider_label(&self) -> &str {
        self.engine.provider_label()
    }
}

/// The process environment, for the engine's lookups (API keys by
/// variable name, base URLs, cache locations).
pub fn process_env() -> EnvLookup {
    Arc::new(|var| std::env::var(var).ok())
}

/// `$XDG_CONFIG_HOME/attest/config.toml` or `~/.config/attest/config.toml`.
pub fn user_config_path() -> Option<PathBuf> {
    user_config_dir().map(|d| d.join("config.toml"))
}

/// `ATTEST_CACHE_DIR`, `$XDG_CACHE_HOME/attest` or `~/.cache/attest`.
pub fn user_cache_dir() -> Option<PathBuf> {
    let nonempty = |v: &str| {
        std::env::var_os(v)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
    };
    nonempty("ATTEST_CACHE_DIR").or_else(|| {
        nonempty("XDG_CACHE_HOME")
            .or_else(|| nonempty("HOME").map(|h| h.join(".cache")))
            .map(|base| base.join("attest"))
    })
}

/// `$XDG_DATA_HOME/attest` or `~/.local/share/attest`.
pub fn user_data_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))?;
    Some(base.join("attest"))
}

/// `$XDG_CONFIG_HOME/attest` or `~/.config/attest`.
pub fn user_config_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("attest"))
}

/// The user's trusted workspaces (`~/.config/attest/trusted/`).
pub fn trust_store() -> Option<TrustStore> {
    user_config_dir().map(|d| TrustStore::new(d.join("trusted")))
}

/// The settings for `args`: `--config FILE` alone, else the user's config
/// with the workspace's `attest.toml` over it (its security keys only when
/// the workspace is trusted).
pub fn load_config(args: &EngineArgs) -> Result<LoadedConfig> {
    let trust = trust_store();
    Ok(attest::config::load(LoadOptions {
        explicit: args.config.as_deref(),
        workspace: Some(&args.workspace),
        user_config: user_config_path().as_deref(),
        trust: trust.as_ref(),
    })?)
}

pub fn prepare(args: &EngineArgs) -> Result<Prepared> {
    prepare_with(args, None)
}

/// As [`prepare`], with an approver of the caller's (the chat's terminal
/// prompt) instead of the `--approval` flag's.
pub fn prepare_with(args: &EngineArgs, approver: Option<Arc<dyn Approver>>) -> Result<Prepared> {
    prepare_loaded(args, load_config(args)?, approver)
}

/// As [`prepare_with`], with settings already loaded.
pub fn prepare_loaded(
    args: &EngineArgs,
    loaded: LoadedConfig,
    approver: Option<Arc<dyn Approver>>,
) -> Result<Prepared> {
    if let Some(path) = loaded.untrusted_workspace() {
        // Said once, plainly (SPEC F13); each run also traces them.
        eprintln!(
            "attest: {} is not trusted, so its security settings are ignored: {} (run `attest trust {}` to use them)",
            path.display(),
            loaded.ignored.join(", "),
            args.workspace.display()
        );
    }
    let kind = match (args.provider, loaded.file.provider.name.as_deref()) {
        (Some(k), _) => Some(k),
        (None, Some(name)) => name.parse().ok(),
        (None, None) => Some(ProviderKind::Local),
    };
    let threads = args.threads.or(loaded.file.provider.threads);
    if let Some(n) = threads.filter(|&n| n > 0 && kind == Some(ProviderKind::Local)) {
        // Generation runs on the provider's own pool; prompt evaluation runs
        // in candle's kernels, whose worker pool is sized once, from this
        // variable, on first use (later than this). Nothing else reads or
        // writes the environment at this point of set-up.
        if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
            std::env::set_var("CANDLE_NUM_THREADS", n.to_string());
        }
    }
    let key_path = attest_core::failure::default_key_path(
        std::env::var_os("XDG_CONFIG_HOME").as_deref(),
        std::env::var_os("HOME").as_deref(),
    )
    .context("cannot locate the user config dir for the fingerprint key (set HOME)")?;

    let loaded_telemetry = (
        loaded.file.telemetry.otlp_endpoint.clone(),
        loaded.file.telemetry.capture_content,
    );
    let mut builder = Engine::builder()
        .loaded_config(loaded)
        .workspace(&args.workspace)
        .provider_spec(args.provider_spec())
        .env(process_env())
        .tool_env_source(std::env::vars_os())
        .store_path(attest::store_path(&args.workspace))
        .fingerprint_key_path(key_path)
        .memory(true)
        .notices(Arc::new(|msg: &str| eprintln!("attest: {msg}")))
        .approval_mode(args.approval.unwrap_or(ApprovalMode::Deny));
    if let Some(approver) = approver {
        builder = builder.approver(approver);
    }
    if let Some(dir) = user_cache_dir() {
        builder = builder.protocol_memory(dir.join("protocols.json"));
    }
    if let Some(name) = &args.profile {
        builder = builder.profile(name);
    }
    if let Some(kind) = args.expect {
        builder = builder.expect(kind);
    }
    for tool in &args.require_tool {
        builder = builder.require_tool(tool);
    }
    if let Some(n) = args.max_steps {
        builder = builder.max_steps(n);
    }
    if let Some(n) = args.max_corrections {
        builder = builder.max_corrections(n);
    }
    if args.require_grounding {
        builder = builder.require_grounding(true);
    }
    if args.no_stream {
        builder = builder.stream(false);
    } else if args.stream {
        builder = builder.stream(true);
    }
    let stream_progress = if args.no_stream_tokens {
        false
    } else if args.stream_tokens {
        true
    } else {
        use std::io::IsTerminal as _;
        kind == Some(ProviderKind::Local) && (args.json || std::io::stderr().is_terminal())
    };
    builder = builder.stream_progress(stream_progress);
    if let Some(secs) = args.timeout {
        builder = builder.timeout(Some(Duration::from_secs(secs)));
    }
    let telemetry = telemetry(args, &loaded_telemetry);
    if let Some(t) = &telemetry {
        builder = builder.log_tap(t.tap());
    }
    let engine = builder.build()?;
    Ok(Prepared {
        engine,
        json: args.json,
        telemetry,
    })
}

/// OTLP export from `--otlp-endpoint` / `OTEL_EXPORTER_OTLP_ENDPOINT` /
/// `[telemetry]`; contents only with `capture_content` or the GenAI
/// conventions' `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`.
/// A bad endpoint is a notice: export never stops a run.
fn telemetry(
    args: &EngineArgs,
    (file_endpoint, file_capture): &(Option<String>, Option<bool>),
) -> Option<attest::telemetry::Telemetry> {
    use attest::telemetry::{TelemetryConfig, CAPTURE_CONTENT_ENV};
    let config = TelemetryConfig::resolve(
        args.otlp_endpoint.clone().or_else(|| file_endpoint.clone()),
        *file_capture,
        std::env::var(CAPTURE_CONTENT_ENV).ok().as_deref(),
    )?;
    match attest::telemetry::Telemetry::start(&config) {
        Ok(t) => Some(t),
        Err(e) => {
            eprintln!("attest: {e}; spans are not exported");
            None
        }
    }
}
