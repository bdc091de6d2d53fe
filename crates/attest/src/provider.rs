//! Which model a run talks to: a [`ProviderSpec`] (what the user chose —
//! flags, config, a run's stored settings) built into a [`ModelProvider`].
//!
//! Secrets: the spec names the variable an API key is read from, never the
//! key. The key is looked up through the caller's [`EnvLookup`] when the
//! provider is built, and comes back in [`BuiltProvider::secrets`] so the
//! engine scrubs it from everything it writes.

use crate::config::ConfigFile;
use crate::error::Error;
use crate::protocol_choice::ProtocolMemory;
use attest_core::provider::ModelProvider;
use attest_providers::http::{HttpProvider, HttpProviderConfig, WireFormat};
use attest_providers::scripted::ScriptedProvider;
use attest_providers::text_protocol::TextProtocolProvider;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// Looks up an environment-style setting (an API key's variable, a base URL
/// override). Front ends pass the process environment; the default looks
/// nothing up, so an embedder's engine never reads ambient settings.
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// A lookup that finds nothing.
pub fn no_env() -> EnvLookup {
    Arc::new(|_| None)
}

/// The model behind a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    Openai,
    /// The OpenAI Responses API (`/v1/responses`).
    OpenaiResponses,
    Anthropic,
    Scripted,
    /// The embedded model, run in-process (the default when none is configured).
    Local,
}

impl ProviderKind {
    pub const NAMES: [&'static str; 5] = [
        "openai",
        "openai-responses",
        "anthropic",
        "scripted",
        "local",
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::OpenaiResponses => "openai-responses",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Scripted => "scripted",
            ProviderKind::Local => "local",
        }
    }
}

impl FromStr for ProviderKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "openai" => Ok(ProviderKind::Openai),
            "openai-responses" | "openai_responses" => Ok(ProviderKind::OpenaiResponses),
            "anthropic" => Ok(ProviderKind::Anthropic),
            "scripted" => Ok(ProviderKind::Scripted),
            "local" => Ok(ProviderKind::Local),
            _ => Err(format!(
                "unknown provider `{s}` (expected {})",
                Self::NAMES.join(", ")
            )),
        }
    }
}

/// How tools are offered to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

impl ProtocolMode {
    pub const NAMES: [&'static str; 3] = ["native", "text", "auto"];
}

impl FromStr for ProtocolMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "native" => Ok(ProtocolMode::Native),
            "text" => Ok(ProtocolMode::Text),
            "auto" => Ok(ProtocolMode::Auto),
            _ => Err(format!(
                "unknown protocol `{s}` (expected native, text or auto)"
            )),
        }
    }
}

/// What the user chose. Fields left `None` fall back to the environment
/// lookup, then `[provider]` in the config, then the built-in default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProviderSpec {
    /// `None`: `[provider] name`, else the embedded model.
    #[serde(rename = "provider", default)]
    pub kind: Option<ProviderKind>,
    pub base_url: Option<String>,
    pub model: Option<String>,
    /// The variable the API key is read from (never the key).
    pub api_key_env: Option<String>,
    /// `scripted`: the script file.
    pub script: Option<PathBuf>,
    /// `local`: the GGUF file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_path: Option<PathBuf>,
    /// `local`: inference threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    pub protocol: Option<ProtocolMode>,
}

/// A provider ready to use, with what the engine must know about it.
pub struct BuiltProvider {
    pub provider: Arc<dyn ModelProvider>,
    /// For people: `openai gpt-4o at https://…`, `local qwen… (…, 2 threads)`.
    pub label: String,
    /// Values to scrub from everything written (the API key).
    pub secrets: Vec<String>,
    /// Variables no tool may inherit (the key's variable).
    pub hidden_env: Vec<String>,
    /// The spec with every default filled in, stored with the run so a
    /// resume talks to the same model.
    pub resolved: ProviderSpec,
    /// Under `--protocol auto` against an OpenAI-compatible server: the
    /// model's key in the protocol memory, and whether it was moved to the
    /// text protocol for never making a native call.
    pub learning: Option<(String, bool)>,
}

impl std::fmt::Debug for BuiltProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuiltProvider")
            .field("label", &self.label)
            .field("resolved", &self.resolved)
            .finish_non_exhaustive()
    }
}

/// Build the provider `spec` names, with `config`'s `[provider]` section
/// filling what the spec leaves open. `workspace` anchors a relative script.
pub fn build_provider(
    spec: &ProviderSpec,
    config: &ConfigFile,
    workspace: &Path,
    env: &EnvLookup,
    memory: Option<&ProtocolMemory>,
) -> Result<BuiltProvider, Error> {
    let file = &config.provider;
    let mut learning = None;
    let kind = match (spec.kind, file.name.as_deref()) {
        (Some(k), _) => k,
        (None, Some(name)) => name
            .parse()
            .map_err(|e: String| Error::Config(format!("{e} in [provider] name")))?,
        (None, None) if cfg!(feature = "local") => ProviderKind::Local,
        (None, None) => {
            return Err(Error::Config(
                "no provider configured: choose openai, anthropic or scripted (this build has no embedded model: feature `local`)".into(),
            ))
        }
    };
    let protocol = spec
        .protocol
        .or(file.protocol)
        .unwrap_or(ProtocolMode::Auto);
    let non_empty = |var: &str| env(var).filter(|v| !v.is_empty());
    let mut resolved = ProviderSpec {
        kind: Some(kind),
        protocol: Some(protocol),
        ..ProviderSpec::default()
    };
    // Tools never inherit provider keys, whichever provider this run uses.
    let mut hidden_env = vec![
        "OPENAI_API_KEY".to_string(),
        "ANTHROPIC_API_KEY".to_string(),
    ];
    let mut secrets = Vec::new();
    let (mut provider, mut label): (Arc<dyn ModelProvider>, String) = match kind {
        ProviderKind::Scripted => {
            let script = spec
                .script
                .clone()
                .or_else(|| file.script.clone())
                .ok_or_else(|| {
                    Error::Config(
                        "the scripted provider needs a script: --script FILE or [provider] script"
                            .into(),
                    )
                })?;
            let script = if script.is_relative() && !script.exists() {
                workspace.join(script)
            } else {
                script
            };
            let script = script.canonicalize().unwrap_or(script);
            let p = ScriptedProvider::from_file(&script)
                .map_err(|e| Error::Config(format!("script {}: {e}", script.display())))?;
            resolved.script = Some(script.clone());
            (Arc::new(p), format!("scripted {}", script.display()))
        }
        ProviderKind::Openai | ProviderKind::OpenaiResponses | ProviderKind::Anthropic => {
            let (wire, name, url_env, key_env, default_url) = if kind == ProviderKind::Openai {
                (
                    WireFormat::OpenAiChat,
                    "openai",
                    "OPENAI_BASE_URL",
                    "OPENAI_API_KEY",
                    "https://api.openai.com/v1",
                )
            } else if kind == ProviderKind::OpenaiResponses {
                (
                    WireFormat::OpenAiResponses,
                    "openai-responses",
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
            let base_url = spec
                .base_url
                .clone()
                .or_else(|| non_empty(url_env))
                .or_else(|| file.base_url.clone())
                .unwrap_or_else(|| default_url.to_string());
            let model = spec
                .model
                .clone()
                .or_else(|| file.model.clone())
                .ok_or_else(|| {
                    Error::Config(
                        "no model: name one (--model NAME, ATTEST_MODEL or [provider] model)"
                            .into(),
                    )
                })?;
            let key_var = spec
                .api_key_env
                .clone()
                .or_else(|| file.api_key_env.clone())
                .unwrap_or_else(|| key_env.to_string());
            let api_key = non_empty(&key_var);
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
                request_timeout: Duration::from_secs(file.request_timeout_secs.unwrap_or(300)),
                extra_headers: Vec::new(),
                content_tool_calls: file.content_tool_calls.unwrap_or_default(),
                // Encrypted reasoning goes back only under `[run] reasoning = "keep"`.
                encrypted_reasoning: config.run.reasoning.as_deref() == Some("keep"),
                prompt_cache: file.prompt_cache.unwrap_or(true),
            })
            .map_err(|e| Error::Config(e.to_string()))?;
            let label = format!("{name} {model} at {}", http.endpoint());
            if let Some(memory) = memory.filter(|_| {
                kind == ProviderKind::Openai
                    && protocol == ProtocolMode::Auto
                    && file.tool_calling.is_none()
            }) {
                let key = ProtocolMemory::key(&model, &http.endpoint());
                learning = Some((key.clone(), memory.get(&key).prefers_text()));
            }
            resolved.base_url = Some(base_url);
            resolved.model = Some(model);
            resolved.api_key_env = Some(key_var);
            (Arc::new(http), label)
        }
        ProviderKind::Local => local::provider(spec, config, env, &mut resolved)?,
    };
    let learned_text = learning.as_ref().is_some_and(|(_, text)| *text);
    let use_text = match protocol {
        ProtocolMode::Text => true,
        ProtocolMode::Native => false,
        ProtocolMode::Auto => file.tool_calling == Some(false) || learned_text,
    };
    if use_text {
        provider = Arc::new(TextProtocolProvider::new(provider));
        label.push_str(" (text protocol)");
    }
    Ok(BuiltProvider {
        learning,
        provider,
        label,
        secrets,
        hidden_env,
        resolved,
    })
}

#[cfg(feature = "local")]
mod local {
    use super::*;
    use attest_local::fetch::{
        default_prefix_cache_dir, ensure_model, known_model, FetchOptions, QWEN25_CODER_1_5B,
    };
    use attest_local::{KnownModel, LocalConfig, LocalProvider};

    /// The embedded model: resolve the model file (an explicit path, a
    /// known model named by `model`, else the default model, fetched into
    /// the cache on first use) and load it.
    pub(super) fn provider(
        spec: &ProviderSpec,
        config: &ConfigFile,
        env: &EnvLookup,
        resolved: &mut ProviderSpec,
    ) -> Result<(Arc<dyn ModelProvider>, String), Error> {
        let file = &config.provider;
        let lookup = |v: &str| env(v);
        let fetch_opts = FetchOptions::from_env(&lookup);
        let explicit = spec.model_path.clone().or_else(|| file.model_path.clone());
        let path = match explicit {
            Some(p) if p.is_file() => p,
            Some(p) => match p.to_str().and_then(known_model) {
                Some(m) => fetch_blocking(m, &fetch_opts)?,
                None => {
                    return Err(Error::Config(format!(
                        "model file {} does not exist (from --model-path / ATTEST_LOCAL_MODEL / [provider] model_path)",
                        p.display()
                    )))
                }
            },
            None => {
                let model = match spec.model.clone().or_else(|| file.model.clone()) {
                    Some(name) => known_model(&name).ok_or_else(|| {
                        let known: Vec<&str> =
                            attest_local::KNOWN_MODELS.iter().map(|m| m.id).collect();
                        Error::Config(format!(
                            "the local provider has no model `{name}` (known: {}); give a GGUF file path for another model",
                            known.join(", ")
                        ))
                    })?,
                    None => &QWEN25_CODER_1_5B,
                };
                fetch_blocking(model, &fetch_opts)?
            }
        };
        let path = path.canonicalize().unwrap_or(path);
        let mut cfg = LocalConfig::new(&path);
        cfg.threads = spec.threads.or(file.threads);
        cfg.max_context = file.context_length;
        if file.prefix_cache != Some(false) {
            cfg.prefix_cache_dir = default_prefix_cache_dir(&lookup);
        }
        if file.mmap == Some(false) {
            cfg.weights = attest_local::WeightLoading::Read;
        }
        if let Some(t) = file.max_tokens {
            cfg.max_new_tokens = t as usize;
        }
        let provider = blocking(|| LocalProvider::load(cfg))
            .map_err(|e| Error::Config(format!("loading {}: {e}", path.display())))?;
        let label = format!(
            "local {} ({}, {} threads{})",
            provider.model(),
            path.display(),
            provider.threads(),
            match provider.weights() {
                attest_local::WeightLoading::Read => ", weights read",
                attest_local::WeightLoading::Map => "",
            }
        );
        resolved.model = Some(provider.model().to_string());
        resolved.model_path = Some(path);
        resolved.threads = spec.threads.or(file.threads);
        Ok((Arc::new(provider), label))
    }

    fn fetch_blocking(model: &'static KnownModel, opts: &FetchOptions) -> Result<PathBuf, Error> {
        blocking(|| ensure_model(model, opts))
            .map_err(|e| Error::Config(format!("model {}: {e}", model.id)))
    }

    /// Loading and fetching block; inside a multi-threaded runtime they get
    /// the thread to themselves.
    fn blocking<T>(f: impl FnOnce() -> T) -> T {
        match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(f)
            }
            _ => f(),
        }
    }
}

#[cfg(not(feature = "local"))]
mod local {
    use super::*;

    pub(super) fn provider(
        _spec: &ProviderSpec,
        _config: &ConfigFile,
        _env: &EnvLookup,
        _resolved: &mut ProviderSpec,
    ) -> Result<(Arc<dyn ModelProvider>, String), Error> {
        Err(Error::Config(
            "this attest was built without the embedded model (cargo feature `local`)".into(),
        ))
    }
}
