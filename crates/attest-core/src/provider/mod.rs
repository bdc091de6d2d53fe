//! The model side of the engine's boundary: the [`ModelProvider`] trait,
//! what a request and a response are, and the pairing normalizer every
//! request passes through (SPEC C3).
//!
//! Implementations live elsewhere: `attest-providers` (wire formats over
//! HTTP, the text protocol, scripted responses) and `attest-local` (the
//! embedded model). Nothing here knows a wire format or an HTTP client.

pub mod pairing;
mod types;

pub use types::{
    shared_history, FinishKind, ModelRequest, ModelResponse, ParsedCall, ProtocolViolation,
    ProviderError, TextSink,
};

use async_trait::async_trait;

/// One model endpoint. Implementations: `attest_providers::http::HttpProvider` (OpenAI chat,
/// Anthropic Messages), `attest_providers::scripted::ScriptedProvider` and
/// `attest_local::LocalProvider`.
#[async_trait]
pub trait ModelProvider: Send + Sync {
    /// Provider name as configured (`openai`, `anthropic`, `scripted`).
    fn name(&self) -> &str;
    /// Wire format family (`openai_chat`, `anthropic_messages`, `scripted`).
    fn api_family(&self) -> &str;
    /// Model name sent to the endpoint.
    fn model(&self) -> &str;
    /// Version of prompt text this provider adds itself (the text
    /// protocol's tool block), so traces tell its versions apart (SPEC B5).
    fn prompt_version(&self) -> Option<&str> {
        None
    }
    /// How a call of `tool` is written under this provider's protocol, as
    /// the harness's corrective turn shows it.
    fn call_syntax(&self, tool: &attest_protocol::ToolSpec) -> String {
        format!(
            "a native tool call of `{}` (the tool-calling interface, arguments as one JSON object)",
            tool.name
        )
    }
    /// The model's context window in tokens, where the provider knows it
    /// for certain (a local GGUF's `context_length`); the engine sizes
    /// compaction from it (SPEC P2).
    fn context_window(&self) -> Option<usize> {
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
