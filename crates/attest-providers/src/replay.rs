//! Replay (SPEC I4): a recorded run's raw model outputs, in order, fed back
//! through today's parsers, so a real failure becomes a deterministic
//! regression case. Each output is parsed as its wire format is parsed now
//! (a whole JSON body or its stream's data lines; calls written in the
//! content adopted; the embedded model's text read by today's tool-call
//! parser), never as it was parsed when recorded. A text-protocol run's
//! outputs are the inner model's: wrap this provider in
//! [`crate::text_protocol::TextProtocolProvider`] to replay one.

use crate::content_calls;
use crate::scripted::ScriptedResponse;
use crate::tool_call_format::{self, ParseOptions};
use crate::{anthropic, openai, responses};
use crate::{FinishKind, ModelProvider, ModelRequest, ModelResponse, ParsedCall, ProviderError};
use async_trait::async_trait;
use attest_protocol::{CallSource, Usage};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The wire formats whose outputs can be replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    OpenAiChat,
    AnthropicMessages,
    OpenAiResponses,
    LocalGguf,
    Scripted,
}

impl Family {
    fn parse(api_family: &str) -> Option<Family> {
        Some(match api_family {
            "openai_chat" => Family::OpenAiChat,
            "anthropic_messages" => Family::AnthropicMessages,
            "openai_responses" => Family::OpenAiResponses,
            "local_gguf" => Family::LocalGguf,
            "scripted" => Family::Scripted,
            _ => return None,
        })
    }
}

/// Serves a recorded run's raw outputs, one per model call.
#[derive(Debug)]
pub struct ReplayProvider {
    family: Family,
    api_family: String,
    model: String,
    outputs: Vec<String>,
    next: AtomicUsize,
    next_call: AtomicUsize,
}

impl ReplayProvider {
    /// `api_family` is the recorded run's (its `request` trace records),
    /// without a `text_protocol+` prefix; `outputs` its raw outputs in order.
    pub fn new(
        api_family: &str,
        model: &str,
        outputs: Vec<String>,
    ) -> Result<ReplayProvider, ProviderError> {
        let family = Family::parse(api_family).ok_or_else(|| {
            ProviderError::Script(format!(
                "replay: cannot replay outputs of the `{api_family}` wire format"
            ))
        })?;
        Ok(ReplayProvider {
            family,
            api_family: api_family.to_string(),
            model: model.to_string(),
            outputs,
            next: AtomicUsize::new(0),
            next_call: AtomicUsize::new(0),
        })
    }

    fn fresh_id(&self) -> String {
        format!("replay_{}", self.next_call.fetch_add(1, Ordering::Relaxed))
    }

    /// One raw output, parsed as today's provider of its format parses it.
    fn parse(
        &self,
        raw: &str,
        request: &ModelRequest,
        index: usize,
    ) -> Result<ModelResponse, ProviderError> {
        let mut response = match self.family {
            Family::OpenAiChat => openai::parse_response(raw).or_else(|_| {
                stream(
                    raw,
                    openai::StreamAccumulator::new(),
                    |a, d| a.push(d),
                    |a| a.finish(),
                )
            })?,
            Family::AnthropicMessages => anthropic::parse_response(raw).or_else(|_| {
                stream(
                    raw,
                    anthropic::StreamAccumulator::new(),
                    |a, d| a.push(d),
                    |a| a.finish(),
                )
            })?,
            Family::OpenAiResponses => responses::parse_response(raw).or_else(|_| {
                stream(
                    raw,
                    responses::StreamAccumulator::new(),
                    |a, d| a.push(d),
                    |a| a.finish(),
                )
            })?,
            Family::Scripted => serde_json::from_str::<ScriptedResponse>(raw)
                .map_err(|e| ProviderError::Decode(format!("replay: a scripted output: {e}")))?
                .to_model_response(index),
            Family::LocalGguf => return self.local(raw, request),
        };
        response.raw = raw.to_string();
        if self.family != Family::Scripted {
            content_calls::adopt(&mut response, &request.tools, || self.fresh_id());
        }
        Ok(response)
    }

    /// The embedded model's output: generated text, read by today's
    /// tool-call parser against today's tools.
    fn local(&self, raw: &str, request: &ModelRequest) -> Result<ModelResponse, ProviderError> {
        let v: serde_json::Value = serde_json::from_str(raw)
            .map_err(|e| ProviderError::Decode(format!("replay: a local model output: {e}")))?;
        let text = v["text"].as_str().unwrap_or_default();
        let truncated = v["finish_reason"] == "length";
        let usage = Usage {
            input_tokens: v["usage"]["prompt_tokens"].as_u64().unwrap_or(0),
            output_tokens: v["usage"]["completion_tokens"].as_u64().unwrap_or(0),
            cached_input_tokens: 0,
            cache_creation_input_tokens: 0,
        };
        let mut out = ModelResponse {
            text: String::new(),
            reasoning: None,
            encrypted_reasoning: Vec::new(),
            tool_calls: Vec::new(),
            finish: if truncated {
                FinishKind::Length
            } else {
                FinishKind::Stop
            },
            raw_finish_reason: Some(if truncated { "length" } else { "stop" }.to_string()),
            usage,
            raw: raw.to_string(),
            parse_failures: Vec::new(),
            protocol_violation: None,
            call_source: CallSource::Native,
        };
        let opts = ParseOptions {
            truncated,
            reasoning_prefilled: false,
        };
        match tool_call_format::parse(text, &request.tools, opts) {
            Ok(parsed) => {
                out.text = parsed.content;
                out.reasoning = parsed.reasoning;
                out.parse_failures = parsed.dropped;
                if !parsed.calls.is_empty() {
                    out.finish = FinishKind::ToolUse;
                    out.raw_finish_reason = Some("tool_calls".into());
                    out.tool_calls = parsed
                        .calls
                        .into_iter()
                        .map(|c| ParsedCall {
                            id: self.fresh_id(),
                            name: c.name,
                            arguments: c.arguments,
                        })
                        .collect();
                }
            }
            Err(violation) => {
                out.text = text.to_string();
                out.protocol_violation = Some(violation);
            }
        }
        Ok(out)
    }
}

/// A streamed output: its data lines, one per line, fed to the format's
/// accumulator.
fn stream<A>(
    raw: &str,
    mut acc: A,
    push: impl Fn(&mut A, &str) -> Result<(), ProviderError>,
    finish: impl FnOnce(A) -> Result<ModelResponse, ProviderError>,
) -> Result<ModelResponse, ProviderError> {
    for line in raw.lines().filter(|l| !l.trim().is_empty()) {
        push(&mut acc, line)?;
    }
    finish(acc)
}

#[async_trait]
impl ModelProvider for ReplayProvider {
    fn name(&self) -> &str {
        "replay"
    }

    fn api_family(&self) -> &str {
        &self.api_family
    }

    fn model(&self) -> &str {
        &self.model
    }

    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ProviderError> {
        let index = self.next.fetch_add(1, Ordering::Relaxed);
        let Some(raw) = self.outputs.get(index) else {
            return Err(ProviderError::Script(format!(
                "replay: the recorded run has {} model outputs and call {} was made",
                self.outputs.len(),
                index + 1
            )));
        };
        self.parse(raw, request, index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attest_protocol::{EffectClass, ToolSpec};

    fn request() -> ModelRequest {
        ModelRequest {
            system: String::new(),
            tools: vec![ToolSpec {
                name: "read_file".into(),
                description: "Read a file.".into(),
                parameters: serde_json::json!({"type": "object"}),
                effect: EffectClass::Observe,
            }]
            .into(),
            history: Vec::new(),
            stream: false,
            max_tokens: 100,
            temperature: None,
            seed: None,
            stop: Vec::new(),
            cache_key: None,
        }
    }

    #[tokio::test]
    async fn outputs_are_parsed_by_todays_parsers_in_order_then_run_out() {
        let body = serde_json::json!({"choices": [{"message": {"content": "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.txt\"}}\n```"}, "finish_reason": "stop"}]}).to_string();
        let stream = [
            r#"{"choices":[{"delta":{"content":"The port "}}]}"#,
            r#"{"choices":[{"delta":{"content":"is 8080."},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ]
        .join("\n");
        let p = ReplayProvider::new("openai_chat", "m", vec![body, stream]).unwrap();
        let first = p.complete(&request()).await.unwrap();
        // A call left in the content is adopted, as today's HTTP provider does.
        assert_eq!(first.tool_calls.len(), 1, "{first:?}");
        assert_eq!(first.tool_calls[0].name, "read_file");
        assert_eq!(first.call_source, CallSource::Content);
        let second = p.complete(&request()).await.unwrap();
        assert_eq!(second.text, "The port is 8080.");
        let third = p.complete(&request()).await.unwrap_err();
        assert!(third.to_string().contains("has 2 model outputs"), "{third}");
        assert!(!third.is_retryable());
    }

    #[tokio::test]
    async fn local_and_scripted_outputs_replay() {
        let local = serde_json::json!({"text": "<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n</tool_call>", "finish_reason": "stop"}).to_string();
        let p = ReplayProvider::new("local_gguf", "qwen", vec![local]).unwrap();
        let r = p.complete(&request()).await.unwrap();
        assert_eq!(r.tool_calls[0].name, "read_file");
        assert_eq!(r.finish, FinishKind::ToolUse);
        let scripted = serde_json::json!({"text": "done", "tool_calls": []}).to_string();
        let p = ReplayProvider::new("scripted", "scripted", vec![scripted]).unwrap();
        assert_eq!(p.complete(&request()).await.unwrap().text, "done");
        assert!(ReplayProvider::new("carrier_pigeon", "m", vec![]).is_err());
    }
}
