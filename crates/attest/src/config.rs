//! `attest.toml`: the file schema and where it is looked up. The CLI and the
//! server read the same file; a front end applies its own flags on top
//! (precedence everywhere: flag, then environment, then file, then default).

use attest_core::policy::PermissionsConfig;
use attest_protocol::TaskType;
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
    /// Tool allow-lists by profile name.
    #[serde(default)]
    pub profiles: std::collections::BTreeMap<String, Profile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSection {
    pub expect: Option<String>,
    pub max_steps: Option<u32>,
    pub max_corrections: Option<u32>,
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

/// Where the config came from, for messages.
#[derive(Debug, Default)]
pub struct LoadedConfig {
    pub file: ConfigFile,
    pub path: Option<PathBuf>,
}

impl LoadedConfig {
    /// ` (config PATH)`, or nothing without a file: for error messages.
    pub fn note(&self) -> String {
        self.path
            .as_ref()
            .map(|p| format!(" (config {})", p.display()))
            .unwrap_or_default()
    }
}

/// Load `explicit`, else `<workspace>/attest.toml`, else `user_config` (the
/// front end knows where the user's config directory is). An explicit file
/// that does not exist is an error; the others are optional.
pub fn load(
    explicit: Option<&Path>,
    workspace: &Path,
    user_config: Option<&Path>,
) -> Result<LoadedConfig, ConfigError> {
    if let Some(path) = explicit {
        if !path.is_file() {
            return Err(ConfigError::Missing(path.to_path_buf()));
        }
        return read(path);
    }
    let candidates = [
        Some(workspace.join("attest.toml")),
        user_config.map(Path::to_path_buf),
    ];
    for path in candidates.into_iter().flatten() {
        if path.is_file() {
            return read(&path);
        }
    }
    Ok(LoadedConfig::default())
}

/// Read and parse one config file.
pub fn read(path: &Path) -> Result<LoadedConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let file: ConfigFile = toml::from_str(&text).map_err(|source| ConfigError::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(LoadedConfig {
        file,
        path: Some(path.to_path_buf()),
    })
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
}
