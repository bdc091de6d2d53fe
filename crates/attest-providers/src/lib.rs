//! Model providers: everything that knows a wire format.
//!
//! A provider turns a [`ModelRequest`] (system prompt, tool specs and the
//! canonical transcript) into one model call and returns a [`ModelResponse`]:
//! the text, the parsed tool calls, the raw finish reason and the raw output
//! for audit.
//!
//! Invariants:
//! - Requests are rebuilt from the canonical transcript on every step
//!   ([`pairing::normalize`] first): each tool call is answered by exactly one
//!   result before the next message, and orphan results are dropped (SPEC C3).
//! - The system prompt and tool list serialize byte-identically for identical
//!   inputs (SPEC D5): no maps with random order, no timestamps.
//! - Providers never decide terminal states; they report what came back,
//!   including "tool use was signalled but nothing parsed" (an empty
//!   `tool_calls` with [`FinishKind::ToolUse`]).
//! - An incomplete stream (no `[DONE]` / `message_stop` / `response.completed`)
//!   is an error, never an answer.

pub mod anthropic;
pub mod http;
pub mod openai;
pub mod pairing;
pub mod responses;
pub mod scripted;
mod sse;
pub mod text_protocol;
pub mod tool_call_format;
mod types;
mod wire;

pub use types::{
    FinishKind, ModelRequest, ModelResponse, ParsedCall, ProtocolViolation, ProviderError, TextSink,
};

use async_trait::async_trait;

/// One model endpoint. Implementations: [`http::HttpProvider`] (OpenAI chat,
/// OpenAI Responses, Anthropic Messages) and [`scripted::ScriptedProvider`].
#[async_trait]
pub trait ModelProvider: Send + Sync {
    /// Provider name as configured (`openai`, `anthropic`, `scripted`).
    fn name(&self) -> &str;
    /// Wire format family (`openai_chat`, `openai_responses`,
    /// `anthropic_messages`, `scripted`).
    fn api_family(&self) -> &str;
    /// Model name sent to the endpoint.
    fn model(&self) -> &str;
    /// Version of prompt text this provider adds itself (the text
    /// protocol's tool block), so traces tell its versions apart (SPEC B5).
    fn prompt_version(&self) -> Option<&str> {
        None
    }
    /// Perform one model call. No retries here: the engine retries, so every
    /// attempt is visible in the event stream.
    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ProviderError>;

    /// As [`ModelProvider::complete`], showing response text to `sink` as
    /// it streams in (live display only: the engine acts on the full
    /// response). Providers that cannot stream text fall back to `complete`.
    async fn complete_streaming(
        &self,
        request: &ModelRequest,
        sink: &TextSink,
    ) -> Result<ModelResponse, ProviderError> {
        let _ = sink;
        self.complete(request).await
    }
}
