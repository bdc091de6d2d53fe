//! Text-protocol (ReAct) adapter for models without native tool calling
//! (SPEC B1–B3, seed 002).
//!
//! [`TextProtocolProvider`] wraps any [`ModelProvider`]. The inner provider is
//! sent no tool schemas: the tools are described in the system prompt
//! ([`render::tool_block`]) and history is rewritten so that calls read as
//! `Action:` lines and results as harness-written `Observation:` messages
//! ([`render::history`]). The reply is parsed by [`parser::parse`]: one Action
//! becomes one [`ParsedCall`], a Final Answer becomes the text, and anything
//! else — above all a self-written Observation — comes back as a
//! [`ProtocolViolation`](crate::ProtocolViolation) with no text and no calls, so the engine keeps the
//! raw output in the audit trace only and puts its placeholder in history.

mod action;
pub mod parser;
pub mod render;

use crate::{
    shared_history, FinishKind, ModelProvider, ModelRequest, ModelResponse, ParsedCall,
    ProviderError,
};
use async_trait::async_trait;
use attest_protocol::{CallSource, TranscriptItem};
use parser::ReactStep;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Stop sequences sent to the inner model. A first line of defence only: a
/// server that honours them cuts the model before it can forge a result, and
/// the parser rejects forgeries from servers that do not.
pub const STOP_SEQUENCES: [&str; 2] = ["\nObservation:", "Observation:"];

/// Wraps a provider whose model has no native tool calling.
pub struct TextProtocolProvider {
    inner: Arc<dyn ModelProvider>,
    api_family: String,
    /// Source of call ids, unique per provider instance.
    next_call: AtomicU64,
}

impl TextProtocolProvider {
    pub fn new(inner: Arc<dyn ModelProvider>) -> Self {
        let api_family = format!("text_protocol+{}", inner.api_family());
        TextProtocolProvider {
            inner,
            api_family,
            next_call: AtomicU64::new(1),
        }
    }

    /// The request the inner provider gets: text-only history, the tool
    /// block in the system prompt, no tool schemas, the stop sequences.
    pub fn inner_request(&self, request: &ModelRequest) -> ModelRequest {
        let block = render::tool_block(&request.tools);
        let system = if request.system.is_empty() {
            block
        } else {
            format!("{}\n\n{block}", request.system)
        };
        let mut stop = request.stop.clone();
        for s in STOP_SEQUENCES {
            if !stop.iter().any(|have| have == s) {
                stop.push(s.to_string());
            }
        }
        ModelRequest {
            system,
            tools: Arc::default(),
            history: shared_history(render::history(request.history.iter().map(|item| &**item))),
            stream: request.stream,
            max_tokens: request.max_tokens,
            temperature: request.temperature,
            seed: request.seed,
            stop,
            cache_key: request.cache_key.clone(),
        }
    }

    fn fresh_call_id(&self) -> String {
        format!("react_{}", self.next_call.fetch_add(1, Ordering::Relaxed))
    }

    /// Turn the inner response into what the engine expects.
    fn translate(&self, request: &ModelRequest, inner: ModelResponse) -> ModelResponse {
        let inner_finish = inner.finish;
        let mut out = ModelResponse {
            text: String::new(),
            reasoning: inner.reasoning,
            // The rendered ReAct history cannot carry it back in place.
            encrypted_reasoning: Vec::new(),
            tool_calls: Vec::new(),
            finish: FinishKind::Other,
            raw_finish_reason: inner.raw_finish_reason,
            usage: inner.usage,
            raw: inner.raw,
            parse_failures: inner.parse_failures,
            protocol_violation: inner.protocol_violation,
            call_source: CallSource::TextProtocol,
        };
        if out.protocol_violation.is_some() {
            return out;
        }
        if !inner.tool_calls.is_empty() {
            // No schemas were sent, so nothing native is executed; noted for the trace.
            out.parse_failures.push(format!(
                "ignored {} native tool call(s) from a text-protocol model",
                inner.tool_calls.len()
            ));
        }
        let real_outputs = request.history.iter().filter_map(|item| match &**item {
            TranscriptItem::ToolResult { output, .. } => Some(output.as_str()),
            _ => None,
        });
        match parser::parse_quoting(&inner.text, &request.tools, real_outputs) {
            Ok(ReactStep::Action {
                thought,
                tool,
                arguments,
            }) => {
                out.text = thought;
                out.tool_calls.push(ParsedCall {
                    id: self.fresh_call_id(),
                    name: tool,
                    arguments,
                });
                out.finish = FinishKind::ToolUse;
            }
            Ok(ReactStep::Final { answer, .. }) => {
                out.text = answer;
                // A cut-off or withheld answer stays one: the engine decides.
                out.finish = match inner_finish {
                    FinishKind::Length | FinishKind::ContentFilter => inner_finish,
                    _ => FinishKind::Stop,
                };
            }
            Err(violation) => {
                // The engine keeps none of it in history; the text goes to
                // the audit trace (and, in an eval group without protocol
                // isolation, into history as written).
                out.text = inner.text;
                out.protocol_violation = Some(violation);
            }
        }
        out
    }
}

#[async_trait]
impl ModelProvider for TextProtocolProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn api_family(&self) -> &str {
        &self.api_family
    }

    fn prompt_version(&self) -> Option<&str> {
        Some(render::TEXT_PROTOCOL_VERSION)
    }

    fn call_syntax(&self, tool: &attest_protocol::ToolSpec) -> String {
        format!(
            "this line, with the values filled in: `{}`",
            render::action_example(tool)
        )
    }

    fn model(&self) -> &str {
        self.inner.model()
    }

    fn context_window(&self) -> Option<usize> {
        self.inner.context_window()
    }

    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ProviderError> {
        let inner = self.inner.complete(&self.inner_request(request)).await?;
        Ok(self.translate(request, inner))
    }
}
