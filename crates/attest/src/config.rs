//! `attest.toml`: the file schema and where it is looked up. The CLI and the
//! server read the same file; a front end applies its own flags on top
//! (precedence everywhere: flag, then environment, then file, then default).
//!
//! Trust (SPEC F13): keys are project keys (`[run]`, `[profiles]`,
//! `[safety]`: run defaults, tool sets that can only narrow) or security
//! keys (everything else: the provider's endpoint and key source,
//! permissions, the sandbox, retries, command tools, MCP servers, the server
//! and telemetry). The user's own config and an explicit `--config` file
//! are trusted. A workspace's `attest.toml` is laid over the user's config;
//! unless the user trusted that workspace (and that exact file), only its
//! project keys count and each security key it sets is reported as ignored.

use crate::trust::{config_digest, TrustStore, WORKSPACE_CONFIG};
use attest_core::policy::PermissionsConfig;
use attest_protocol::TaskType;
use attest_tools::mcp::McpServerConfig;
use attest_tools::{CommandToolConfig, SandboxMode};
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    #[serde(default)]
    pub run: RunSection,
    #[serde(default)]
    pub provider: ProviderSection,
    #[serde(default)]
    pub retry: RetrySection,
    /// Permission policy: a default, per-tool decisions, per-argument rules.
    #[serde(default)]
    pub permissions: PermissionsConfig,
    #[serde(default)]
    pub sandbox: SandboxSection,
    #[serde(default)]
    pub safety: SafetySection,
    #[serde(default)]
    pub tools: Vec<CommandToolConfig>,
    /// MCP servers whose tools join the registry as `server__tool`.
    #[serde(default)]
    pub mcp_servers: Vec<McpServerConfig>,
    /// OpenTelemetry export (SPEC H3).
    #[serde(default)]
    pub telemetry: TelemetrySection,
    /// Tool allow-lists by profile name.
    #[serde(default)]
    pub profiles: std::collections::BTreeMap<String, Profile>,
    /// `attest serve`: where it keeps its store and the runs' workspaces.
    #[serde(default)]
    pub server: ServerSection,
}

/// `attest serve` (SPEC J2). Relative paths are relative to the config
/// file's directory.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    /// Where the server's store (`server.db`) lives.
    pub data_dir: Option<PathBuf>,
    /// A run's `workspace` names a directory under this one (default:
    /// `<data_dir>/workspaces`).
    pub workspaces_root: Option<PathBuf>,
    /// An approval nobody decided within this many seconds is denied
    /// (default 300).
    pub approval_timeout_secs: Option<u64>,
    /// Runs driven at once; the rest wait in the queue (default 1024).
    pub max_concurrent_runs: Option<usize>,
    /// Seconds between heartbeat comments on an idle event stream
    /// (default 15).
    pub heartbeat_secs: Option<u64>,
    /// A PostgreSQL database (`postgres://…`) shared by several servers,
    /// instead of the embedded store under `data_dir`.
    pub database_url: Option<String>,
    /// Seconds a worker's lease on a run lasts without renewal; a run
    /// whose server stopped is taken over this long after (default 30).
    pub lease_secs: Option<u64>,
    /// Outbound webhooks, `[[server.webhooks]]`.
    #[serde(default)]
    pub webhooks: Vec<WebhookEntry>,
    /// Inbound signed approval callbacks, `[server.hooks]`.
    #[serde(default)]
    pub hooks: HooksSection,
}

/// `[[server.webhooks]]`: where a run's `approval_requested` (and `done`)
/// are delivered, signed per Standard Webhooks. Secrets are named by
/// environment variable, never written here.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookEntry {
    pub url: String,
    /// Variable holding the `whsec_…` signing secret (required for
    /// `format = "standard"`).
    pub secret_env: Option<String>,
    /// `approval_requested`, `done` (default: `approval_requested`).
    pub events: Option<Vec<String>>,
    /// `standard` (default): a JSON event; `feishu` / `slack`: the body is
    /// an interactive card / Block Kit message with Approve and Reject.
    pub format: Option<String>,
    /// Attempts per delivery, retried with backoff (default 5).
    pub max_attempts: Option<u32>,
}

/// `[server.hooks]`: the secrets `POST /v1/hooks/{adapter}` verifies
/// senders with, by environment variable. An adapter whose secret is not
/// configured answers 404.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HooksSection {
    /// `whsec_…` secret of the `generic` adapter (Standard Webhooks).
    pub generic_secret_env: Option<String>,
    /// Feishu/Lark app's Encrypt Key: signatures and encrypted bodies.
    pub feishu_encrypt_key_env: Option<String>,
    /// Feishu/Lark app's Verification Token, checked when set.
    pub feishu_verification_token_env: Option<String>,
    /// Slack app's Signing Secret (`v0` request signing).
    pub slack_signing_secret_env: Option<String>,
    /// Where a Slack callback's `response_url` may point for the message
    /// to be updated with the decision (default `https://hooks.slack.com/`;
    /// GovSlack's is `https://hooks.slack-gov.com/`). Any other URL is
    /// not contacted.
    pub slack_response_url_prefix: Option<String>,
    /// Key of the single-use approval tokens in card buttons (required
    /// with a `feishu` or `slack` webhook or adapter).
    pub action_secret_env: Option<String>,
}

/// `[telemetry]`: where spans are exported, and whether they carry contents.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySection {
    /// OTLP/HTTP base endpoint (`http://localhost:4318`).
    pub otlp_endpoint: Option<String>,
    /// Attach prompt, answer and tool contents (redacted) to spans.
    pub capture_content: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSection {
    pub expect: Option<String>,
    pub max_steps: Option<u32>,
    pub max_corrections: Option<u32>,
    /// Ungrounded answers end `unverified` (SPEC A9; `--require-grounding`).
    pub require_grounding: Option<bool>,
    pub stream: Option<bool>,
    pub timeout_secs: Option<u64>,
    /// Reasoning content: `strip` (default), `keep` or `budget`.
    pub reasoning: Option<String>,
    /// With `reasoning = "budget"`: tokens kept per response (default 1024).
    pub max_reasoning_tokens: Option<usize>,
    /// The profile used when `--profile` is not given.
    pub profile: Option<String>,
    /// With more tools than this, the rest are found via `tool_search` (default 24).
    pub defer_tools_after: Option<usize>,
    /// Compact the history when a request would fill this fraction of the
    /// model's context window, after the output reservation (default 0.8).
    pub compaction_trigger: Option<f64>,
}

/// A named tool surface (SPEC D7): the tools a profile may see.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub tools: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderSection {
    /// `openai`, `openai-responses`, `anthropic`, `scripted` or `local`.
    pub name: Option<String>,
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key_env: Option<String>,
    pub script: Option<PathBuf>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
    /// Sampling seed sent with every request, where the provider takes one.
    pub seed: Option<u64>,
    pub request_timeout_secs: Option<u64>,
    /// `native`, `text` or `auto` (text when `tool_calling = false`).
    pub protocol: Option<crate::provider::ProtocolMode>,
    /// Whether the model supports native tool calling.
    pub tool_calling: Option<bool>,
    /// `auto` (default): a native-protocol response whose whole content is
    /// well-formed calls to offered tools runs them; `off`: it is text.
    pub content_tool_calls: Option<attest_providers::content_calls::ContentToolCalls>,
    /// `local`: the GGUF file to run.
    pub model_path: Option<PathBuf>,
    /// `local`: inference threads.
    pub threads: Option<usize>,
    /// `local`: context length cap, in tokens.
    pub context_length: Option<usize>,
    /// `local`: keep the system message's KV cache on disk for the next
    /// run (default: yes).
    pub prefix_cache: Option<bool>,
    /// `local`: map the weights from the GGUF file (default: yes); `false`
    /// reads them into the process's own memory: a slower load, slightly
    /// faster generation.
    pub mmap: Option<bool>,
    /// The model's context window in tokens, over the known-model table
    /// and a local GGUF's own `context_length`.
    pub context_window: Option<usize>,
    /// Prompt-cache hints: `prompt_cache_key` (OpenAI) and `cache_control`
    /// breakpoints (Anthropic); default on, off for servers that reject
    /// unknown fields.
    pub prompt_cache: Option<bool>,
}

/// How shell commands are confined (SPEC F4).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSection {
    /// `workspace-write` (default), `read-only` or `off`.
    pub mode: Option<SandboxMode>,
    /// Let sandboxed commands reach the network (default: no).
    pub network: Option<bool>,
    /// Environment variables tools get besides the allow list (PATH, HOME,
    /// LANG, LC_*, TERM, TMPDIR, USER, SHELL): names, or `PREFIX_*`.
    #[serde(default)]
    pub env_passthrough: Vec<String>,
}

/// Failure handling (SPEC F6–F11).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SafetySection {
    /// Task type for the data-impact mapping (default `general`).
    pub task_type: Option<TaskType>,
    /// Consecutive identical failures before a reminder (default 3).
    pub doom_loop_threshold: Option<u32>,
    /// Further identical failures after the reminder before the run ends (default 2).
    pub doom_loop_extra_repeats: Option<u32>,
    /// Failed attempts allowed per failure fingerprint before backoff (default 2).
    pub retry_budget: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySection {
    pub max_retries: Option<u32>,
    pub initial_backoff_ms: Option<u64>,
    pub max_backoff_ms: Option<u64>,
}

/// A config file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {0} does not exist")]
    Missing(PathBuf),
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    /// A value that parsed but means nothing (an unknown provider name, …).
    #[error("{0}")]
    Invalid(String),
}

/// The sections a workspace's own config may set without being trusted.
pub const PROJECT_SECTIONS: [&str; 3] = ["run", "profiles", "safety"];

/// Arrays of tables that add to the user's rather than replace them.
const APPENDED_SECTIONS: [&str; 2] = ["tools", "mcp_servers"];

/// Where the settings came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// The user's own config file.
    User(PathBuf),
    /// A file given explicitly (`--config`, the server's config).
    Explicit(PathBuf),
    /// The workspace's `attest.toml`, trusted or not.
    Workspace { path: PathBuf, trusted: bool },
}

/// The settings in force and how they were assembled.
#[derive(Debug, Default)]
pub struct LoadedConfig {
    pub file: ConfigFile,
    pub sources: Vec<ConfigSource>,
    /// Security keys of an untrusted workspace config that were not used,
    /// as dotted paths (`provider.base_url`, `tools`).
    pub ignored: Vec<String>,
}

impl LoadedConfig {
    /// ` (config PATH, …)`, or nothing without a file: for error messages.
    pub fn note(&self) -> String {
        let paths: Vec<String> = self
            .sources
            .iter()
            .map(|s| match s {
                ConfigSource::User(p) | ConfigSource::Explicit(p) => p.display().to_string(),
                ConfigSource::Workspace { path, .. } => path.display().to_string(),
            })
            .collect();
        if paths.is_empty() {
            String::new()
        } else {
            format!(" (config {})", paths.join(", "))
        }
    }

    /// The workspace config that was read untrusted, when it set security
    /// keys that were ignored.
    pub fn untrusted_workspace(&self) -> Option<&Path> {
        self.sources.iter().find_map(|s| match s {
            ConfigSource::Workspace {
                path,
                trusted: false,
            } if !self.ignored.is_empty() => Some(path.as_path()),
            _ => None,
        })
    }
}

/// Where to look, and whom to believe.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadOptions<'a> {
    /// A file the user named: read alone, trusted.
    pub explicit: Option<&'a Path>,
    /// The workspace whose `attest.toml` is laid over the user's config.
    pub workspace: Option<&'a Path>,
    /// The user's own config file (the front end knows where it is).
    pub user_config: Option<&'a Path>,
    /// The user's trusted workspaces; `None` trusts no workspace config.
    pub trust: Option<&'a TrustStore>,
}

/// Load the settings: an explicit file alone; else the user's config with
/// the workspace's `attest.toml` over it, its security keys only when the
/// workspace is trusted. Missing optional files are no error.
pub fn load(opts: LoadOptions<'_>) -> Result<LoadedConfig, ConfigError> {
    if let Some(path) = opts.explicit {
        if !path.is_file() {
            return Err(ConfigError::Missing(path.to_path_buf()));
        }
        let (file, _) = read_table(path)?;
        return Ok(LoadedConfig {
            file,
            sources: vec![ConfigSource::Explicit(path.to_path_buf())],
            ignored: Vec::new(),
        });
    }
    let mut merged = toml::Table::new();
    let mut loaded = LoadedConfig::default();
    if let Some(path) = opts.user_config.filter(|p| p.is_file()) {
        let (_, table) = read_table(path)?;
        merge(&mut merged, table);
        loaded.sources.push(ConfigSource::User(path.to_path_buf()));
    }
    if let Some(ws) = opts.workspace {
        let path = ws.join(WORKSPACE_CONFIG);
        if path.is_file() {
            let (_, mut table, text) = read_table_and_text(&path)?;
            let trusted = opts
                .trust
                .is_some_and(|t| t.is_trusted(ws, &config_digest(text.as_bytes())));
            if !trusted {
                loaded.ignored = security_keys(&table);
                table.retain(|section, _| PROJECT_SECTIONS.contains(&section));
            }
            merge(&mut merged, table);
            loaded
                .sources
                .push(ConfigSource::Workspace { path, trusted });
        }
    }
    loaded.file = toml::Value::Table(merged)
        .try_into()
        .map_err(|source| ConfigError::Parse {
            path: PathBuf::from("(merged config)"),
            source,
        })?;
    Ok(loaded)
}

/// Read and parse one config file alone.
pub fn read(path: &Path) -> Result<ConfigFile, ConfigError> {
    Ok(read_table(path)?.0)
}

/// One file, checked against the schema on its own (so an error names the
/// file it is in), and as a table for merging.
fn read_table(path: &Path) -> Result<(ConfigFile, toml::Table), ConfigError> {
    read_table_and_text(path).map(|(file, table, _)| (file, table))
}

/// The file, its table and its text (hashed for trust: the same bytes that
/// were parsed, so a file swapped between reading and hashing cannot be
/// trusted under another file's digest).
fn read_table_and_text(path: &Path) -> Result<(ConfigFile, toml::Table, String), ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let parse = |source| ConfigError::Parse {
        path: path.to_path_buf(),
        source,
    };
    let file: ConfigFile = toml::from_str(&text).map_err(parse)?;
    let table: toml::Table = toml::from_str(&text).map_err(parse)?;
    Ok((file, table, text))
}

/// `over` laid onto `base`: tables merge key by key, the appended arrays
/// (command tools, MCP servers) add up, anything else is replaced.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (Some(toml::Value::Array(b)), toml::Value::Array(o))
                if APPENDED_SECTIONS.contains(&key.as_str()) =>
            {
                b.extend(o)
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// The security keys a config table sets, as dotted paths.
fn security_keys(table: &toml::Table) -> Vec<String> {
    let mut keys = Vec::new();
    for (section, value) in table {
        if PROJECT_SECTIONS.contains(&section.as_str()) {
            continue;
        }
        match value {
            toml::Value::Table(t) if !t.is_empty() => {
                keys.extend(t.keys().map(|k| format!("{section}.{k}")))
            }
            _ => keys.push(section.clone()),
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_config_and_rejects_unknown_keys() {
        let text = r#"
[run]
expect = "observe"
max_steps = 5
[provider]
name = "openai"
base_url = "http://127.0.0.1:1/v1"
model = "m"
[retry]
max_retries = 1
[permissions]
shell = "deny"
[[tools]]
name = "send_message"
description = "Send"
effect = "deliver"
command = ["python3", "send.py"]
evidence = "/message_id"
"#;
        let cfg: ConfigFile = toml::from_str(text).unwrap();
        assert_eq!(cfg.run.max_steps, Some(5));
        assert!(matches!(
            cfg.permissions.tools.get("shell"),
            Some(attest_core::policy::ToolPermission::Fixed(
                attest_protocol::Permission::Deny
            ))
        ));
        assert_eq!(cfg.tools[0].name, "send_message");
        let err = toml::from_str::<ConfigFile>("[run]\nmax_stepz = 3").unwrap_err();
        assert!(err.to_string().contains("max_stepz"), "{err}");
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn an_untrusted_workspace_contributes_project_keys_only() {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let user = write(
            home.path(),
            "config.toml",
            "[provider]\nname = \"openai\"\nmodel = \"mine\"\n[run]\nmax_steps = 9\n[[tools]]\nname = \"a\"\ndescription = \"a\"\neffect = \"observe\"\ncommand = [\"true\"]\n",
        );
        write(
            ws.path(),
            WORKSPACE_CONFIG,
            "[run]\nmax_steps = 3\n[provider]\nmodel = \"theirs\"\n[[tools]]\nname = \"b\"\ndescription = \"b\"\neffect = \"observe\"\ncommand = [\"true\"]\n",
        );
        let trust = TrustStore::new(home.path().join("trusted"));
        let opts = LoadOptions {
            explicit: None,
            workspace: Some(ws.path()),
            user_config: Some(&user),
            trust: Some(&trust),
        };
        let untrusted = load(opts).unwrap();
        assert_eq!(untrusted.file.run.max_steps, Some(3));
        assert_eq!(untrusted.file.provider.model.as_deref(), Some("mine"));
        let names: Vec<&str> = untrusted
            .file
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(names, ["a"]);
        assert_eq!(untrusted.ignored, ["provider.model", "tools"]);
        assert!(untrusted.untrusted_workspace().is_some());

        trust.trust(ws.path()).unwrap();
        let trusted = load(opts).unwrap();
        assert_eq!(trusted.file.provider.model.as_deref(), Some("theirs"));
        let names: Vec<&str> = trusted.file.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b"], "command tools add up");
        assert!(trusted.ignored.is_empty());
        assert_eq!(
            trusted.file.provider.name.as_deref(),
            Some("openai"),
            "tables merge key by key"
        );
    }

    #[test]
    fn a_bad_file_is_named_in_the_error() {
        let ws = tempfile::tempdir().unwrap();
        write(ws.path(), WORKSPACE_CONFIG, "[run]\nmax_stepz = 3\n");
        let err = load(LoadOptions {
            workspace: Some(ws.path()),
            ..LoadOptions::default()
        })
        .unwrap_err();
        assert!(
            err.to_string().contains("attest.toml") && err.to_string().contains("max_stepz"),
            "{err}"
        );
    }

    #[test]
    fn mcp_servers_and_telemetry_of_an_untrusted_workspace_are_ignored() {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        write(
            ws.path(),
            WORKSPACE_CONFIG,
            "[[mcp_servers]]\nname = \"evil\"\ncommand = \"sh\"\n[telemetry]\notlp_endpoint = \"http://collector.example\"\ncapture_content = true\n",
        );
        let trust = TrustStore::new(home.path().join("trusted"));
        let loaded = load(LoadOptions {
            explicit: None,
            workspace: Some(ws.path()),
            user_config: None,
            trust: Some(&trust),
        })
        .unwrap();
        assert!(loaded.file.mcp_servers.is_empty());
        assert_eq!(loaded.file.telemetry.otlp_endpoint, None);
        assert_eq!(
            loaded.ignored,
            [
                "mcp_servers",
                "telemetry.capture_content",
                "telemetry.otlp_endpoint"
            ]
        );
    }
}
