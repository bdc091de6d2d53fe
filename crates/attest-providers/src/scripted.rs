//! A provider that replays a script of responses, for deterministic demos and
//! tests (SPEC I4). Selected with `--provider scripted --script FILE`.
//!
//! Script format (JSON or YAML), either a list or `{ "responses": [...] }`:
//! ```yaml
//! responses:
//!   - text: "Let me read it."
//!     tool_calls:
//!       - name: read_file
//!         arguments: { path: config.toml }   # an object, or a raw string (may be invalid JSON)
//!   - text: "The port is 8080."
//!     finish_reason: stop                     # default: tool_calls when calls are present, else stop
//!   - error: { status: 503, message: "overloaded" }
//! ```
//! Each model call consumes the next entry; a call past the end is an error.

use crate::{FinishKind, ModelProvider, ModelRequest, ModelResponse, ParsedCall, ProviderError};
use async_trait::async_trait;
use attest_protocol::{CallSource, Usage};
use serde::Deserialize;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum ScriptFile {
    List(Vec<ScriptedResponse>),
    Wrapped { responses: Vec<ScriptedResponse> },
}

/// One scripted model response.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedResponse {
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub reasoning: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<ScriptedCall>,
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// Simulated latency before the response arrives.
    #[serde(default)]
    pub delay_ms: u64,
    /// Return this error instead of a response.
    #[serde(default)]
    pub error: Option<ScriptedError>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    #[serde(default)]
    pub id: Option<String>,
    pub name: String,
    #[serde(default)]
    pub arguments: serde_json::Value,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedError {
    pub status: u16,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
}

/// Replays [`ScriptedResponse`]s in order and remembers every request.
#[derive(Debug)]
pub struct ScriptedProvider {
    model: String,
    responses: Vec<ScriptedResponse>,
    state: Mutex<ScriptState>,
}

#[derive(Debug, Default)]
struct ScriptState {
    next: usize,
    requests: Vec<ModelRequest>,
}

impl ScriptedProvider {
    pub fn new(responses: Vec<ScriptedResponse>) -> Self {
        ScriptedProvider {
            model: "scripted".to_string(),
            responses,
            state: Mutex::new(ScriptState::default()),
        }
    }

    /// Parse a script from JSON or YAML text.
    pub fn from_text(text: &str) -> Result<Self, ProviderError> {
        let parsed: ScriptFile = match serde_json::from_str(text) {
            Ok(file) => file,
            Err(json_err) => serde_yaml_ng::from_str(text).map_err(|yaml_err| {
                ProviderError::Script(format!(
                    "script is neither valid JSON ({json_err}) nor valid YAML ({yaml_err})"
                ))
            })?,
        };
        let responses = match parsed {
            ScriptFile::List(r) | ScriptFile::Wrapped { responses: r } => r,
        };
        Ok(Self::new(responses))
    }

    pub fn from_file(path: &Path) -> Result<Self, ProviderError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ProviderError::Script(format!("cannot read script {}: {e}", path.display()))
        })?;
        Self::from_text(&text)
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<ModelRequest> {
        self.lock().requests.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ScriptState> {
        // A poisoned lock only means another test thread panicked; the data is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn arguments_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Null => "{}".to_string(),
        serde_json::Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

fn finish_kind(raw: &str) -> FinishKind {
    match raw {
        "stop" | "end_turn" | "stop_sequence" => FinishKind::Stop,
        "tool_calls" | "tool_use" => FinishKind::ToolUse,
        "length" | "max_tokens" => FinishKind::Length,
        "content_filter" | "refusal" => FinishKind::ContentFilter,
        _ => FinishKind::Other,
    }
}

impl ScriptedResponse {
    pub(crate) fn to_model_response(&self, index: usize) -> ModelResponse {
        let tool_calls: Vec<ParsedCall> = self
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, call)| ParsedCall {
                id: call
                    .id
                    .clone()
                    .unwrap_or_else(|| format!("call_{index}_{i}")),
                name: call.name.clone(),
                arguments: arguments_text(&call.arguments),
            })
            .collect();
        let raw_finish = self.finish_reason.clone().unwrap_or_else(|| {
            if tool_calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            }
            .to_string()
        });
        ModelResponse {
            text: self.text.clone(),
            reasoning: self.reasoning.clone(),
            encrypted_reasoning: Vec::new(),
            finish: finish_kind(&raw_finish),
            raw_finish_reason: Some(raw_finish),
            usage: Usage {
                input_tokens: 0,
                output_tokens: (self.text.len() / 4) as u64,
                ..Usage::default()
            },
            raw: serde_json::json!({
                "text": self.text,
                "tool_calls": self.tool_calls.iter().map(|c| serde_json::json!({"name": c.name, "arguments": c.arguments})).collect::<Vec<_>>(),
            })
            .to_string(),
            tool_calls,
            parse_failures: Vec::new(),
            protocol_violation: None,
            call_source: CallSource::Native,
        }
    }
}

#[async_trait]
impl ModelProvider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    fn api_family(&self) -> &str {
        "scripted"
    }

    fn model(&self) -> &str {
        &self.model
    }

    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ProviderError> {
        let (index, entry) = {
            let mut state = self.lock();
            state.requests.push(request.clone());
            let index = state.next;
            state.next += 1;
            (index, self.responses.get(index).cloned())
        };
        let Some(entry) = entry else {
            return Err(ProviderError::Script(format!(
                "script exhausted: it has {} responses and call {} was made",
                self.responses.len(),
                index + 1
            )));
        };
        if entry.delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(entry.delay_ms)).await;
        }
        if let Some(err) = &entry.error {
            return Err(ProviderError::Http {
                status: err.status,
                body: err.message.clone(),
                retry_after: err.retry_after_ms.map(Duration::from_millis),
            });
        }
        Ok(entry.to_model_response(index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> ModelRequest {
        ModelRequest {
            system: "s".into(),
            tools: vec![].into(),
            history: vec![],
            stream: false,
            max_tokens: 100,
            temperature: None,
            seed: None,
            stop: vec![],
            cache_key: None,
        }
    }

    #[tokio::test]
    async fn replays_yaml_script_in_order_then_reports_exhaustion() {
        let script = "responses:\n  - text: reading\n    tool_calls:\n      - name: read_file\n        arguments: {path: a.txt}\n  - text: done\n";
        let provider = ScriptedProvider::from_text(script).unwrap();
        let first = provider.complete(&request()).await.unwrap();
        assert_eq!(first.finish, FinishKind::ToolUse);
        assert_eq!(first.tool_calls[0].name, "read_file");
        assert_eq!(first.tool_calls[0].arguments, r#"{"path":"a.txt"}"#);
        let second = provider.complete(&request()).await.unwrap();
        assert_eq!(second.text, "done");
        assert_eq!(second.finish, FinishKind::Stop);
        let err = provider.complete(&request()).await.unwrap_err();
        assert!(err.to_string().contains("exhausted"), "{err}");
        assert_eq!(provider.requests().len(), 3);
    }

    #[tokio::test]
    async fn raw_string_arguments_are_kept_verbatim_and_errors_are_http_errors() {
        let script = r#"[{"tool_calls":[{"name":"x","arguments":"{not json"}]},{"error":{"status":429,"retry_after_ms":5}}]"#;
        let provider = ScriptedProvider::from_text(script).unwrap();
        let first = provider.complete(&request()).await.unwrap();
        assert_eq!(first.tool_calls[0].arguments, "{not json");
        let err = provider.complete(&request()).await.unwrap_err();
        assert!(err.is_retryable());
        assert_eq!(err.retry_after(), Some(Duration::from_millis(5)));
    }

    #[test]
    fn malformed_script_is_a_clear_error() {
        let err = ScriptedProvider::from_text("responses: [ {text: 1, bogus: 2} ]").unwrap_err();
        assert!(err.to_string().contains("neither valid JSON"), "{err}");
    }
}
