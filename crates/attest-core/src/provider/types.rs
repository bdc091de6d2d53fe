use attest_protocol::{CallSource, ProtocolErrorKind, ToolSpec, TranscriptItem, Usage};
use std::sync::Arc;
use std::time::Duration;

/// Everything needed for one model call. `history` must already be normalized
/// by [`crate::provider::pairing::normalize_shared`].
#[derive(Debug, Clone)]
pub struct ModelRequest {
    pub system: String,
    /// Shared with the run's other requests while the set is the same:
    /// providers keep the list's wire form by that identity.
    pub tools: Arc<[ToolSpec]>,
    /// Shared with the run, which builds every request from the same
    /// items: a request costs a reference per item, not a copy, and an
    /// item that is the same allocation from one request to the next is
    /// the same item (providers keep its wire form by that identity).
    pub history: Vec<Arc<TranscriptItem>>,
    pub stream: bool,
    pub max_tokens: u32,
    pub temperature: Option<f32>,
    /// Sampling seed, where the provider takes one (the embedded model,
    /// OpenAI-compatible servers); `None`: the provider's own.
    pub seed: Option<u64>,
    /// Stop sequences, where the wire format supports them.
    pub stop: Vec<String>,
    /// Names the cacheable prefix this request shares with the run's
    /// others (derived from the session), for providers that route by it
    /// (OpenAI's `prompt_cache_key`); `None` sends no key.
    pub cache_key: Option<String>,
}

/// A tool call as parsed from a response. `arguments` is the raw JSON text the
/// model produced; it may be invalid and is validated by the tool registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// The normalized meaning of a raw finish / stop reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishKind {
    /// Natural end of an answer (`stop`, `end_turn`, `stop_sequence`).
    Stop,
    /// The provider says it is calling tools (`tool_calls`, `tool_use`).
    ToolUse,
    /// The output was cut by a token limit.
    Length,
    /// The provider withheld or stopped the output (`content_filter`,
    /// Anthropic's `refusal`).
    ContentFilter,
    /// Anything else (unknown values, missing).
    Other,
}

/// What one model call returned.
#[derive(Debug, Clone)]
pub struct ModelResponse {
    pub text: String,
    pub reasoning: Option<String>,
    /// Provider-encrypted reasoning to pass back verbatim on later requests
    /// (OpenAI Responses `encrypted_content`); empty for other wire formats.
    pub encrypted_reasoning: Vec<String>,
    pub tool_calls: Vec<ParsedCall>,
    pub finish: FinishKind,
    /// The finish / stop reason exactly as the provider sent it.
    pub raw_finish_reason: Option<String>,
    pub usage: Usage,
    /// Raw body (or concatenated SSE data lines), for the audit trace only.
    pub raw: String,
    /// Tool-call fragments that could not be turned into a call (no name, …).
    pub parse_failures: Vec<String>,
    /// Set when the response broke the protocol in a way the wire format
    /// can tell (text protocol: a self-written Observation, two Actions, an
    /// unparsable Action). The engine then keeps nothing of it but the raw
    /// text in the audit trace.
    pub protocol_violation: Option<ProtocolViolation>,
    /// Where `tool_calls` came from (for the trace).
    pub call_source: CallSource,
}

/// A failed model call. `is_retryable` decides whether the engine retries.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("HTTP {status}: {body}")]
    Http {
        status: u16,
        /// Response body, truncated; never contains the API key.
        body: String,
        retry_after: Option<Duration>,
    },
    #[error("transport error: {0}")]
    Transport(String),
    #[error("stream ended before its terminator: {0}")]
    IncompleteStream(String),
    #[error("could not decode provider response: {0}")]
    Decode(String),
    #[error("scripted provider: {0}")]
    Script(String),
    /// The service answered, but reported the response itself as failed
    /// (Responses `response.failed`, a stream `error` event).
    #[error("the provider reported a failure: {message}")]
    Failed { message: String, retryable: bool },
}

impl ProviderError {
    /// 408, 409, 429 and 5xx, transport failures and broken streams are
    /// retried, and reported failures the service marks as transient;
    /// other 4xx, undecodable bodies and script errors are not.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProviderError::Http { status, .. } => {
                matches!(status, 408 | 409 | 429) || (500..600).contains(status)
            }
            ProviderError::Transport(_) | ProviderError::IncompleteStream(_) => true,
            ProviderError::Decode(_) | ProviderError::Script(_) => false,
            ProviderError::Failed { retryable, .. } => *retryable,
        }
    }

    /// The server's `retry-after`, when it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// How a response broke the protocol, as detected by the wire format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolViolation {
    pub kind: ProtocolErrorKind,
    pub detail: String,
}

/// Receives response text as it streams in, for live display only. HTTP
/// providers pass the text content (not tool-call arguments); the local
/// provider passes the raw generated text, tool-call syntax included. Pieces
/// are always whole characters.
#[derive(Clone)]
pub struct TextSink(pub std::sync::Arc<dyn Fn(&str) + Send + Sync>);

impl std::fmt::Debug for TextSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TextSink")
    }
}

/// `items` as a request's [`ModelRequest::history`].
pub fn shared_history(items: impl IntoIterator<Item = TranscriptItem>) -> Vec<Arc<TranscriptItem>> {
    items.into_iter().map(Arc::new).collect()
}
