use crate::{
    CacheResetPoint, Grounding, HarnessSwitches, MemoryDecision, MemoryProvenance, Permission,
    ProtocolErrorKind, TerminalReason, TerminalState,
};
use serde::{Deserialize, Serialize};

/// Where the tool calls of a response came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallSource {
    /// The wire format's own tool-call field (or the local model's template).
    #[default]
    Native,
    /// The response's text content, which held nothing but well-formed calls
    /// (`[provider] content_tool_calls`).
    Content,
    /// A text-protocol `Action:`.
    TextProtocol,
}

/// An audit record kept in a run's trace beside its events (SPEC H1, B4).
/// Raw model output lives here and nowhere that feeds a prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum TraceRecord {
    /// A request about to be sent.
    Request {
        step: u32,
        attempt: u32,
        provider: String,
        api_family: String,
        model: String,
        stream: bool,
        /// sha256 of the serialized system prompt + tool list (SPEC D5).
        prefix_hash: String,
        tool_names: Vec<String>,
        message_count: usize,
        max_tokens: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        temperature: Option<f32>,
        /// What the request was assembled from, with sizes.
        #[serde(default)]
        context_sources: Vec<ContextSource>,
        /// Notes from the pairing normalizer (synthetic or dropped results).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pairing_notes: Vec<String>,
    },
    /// What came back, parsed, plus the raw text for audit.
    Response {
        step: u32,
        raw_finish_reason: Option<String>,
        text: String,
        parsed_calls: Vec<String>,
        /// Where the parsed calls came from; absent when there are none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_source: Option<CallSource>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        parse_failures: Vec<String>,
        input_tokens: u64,
        output_tokens: u64,
        /// Of `input_tokens`, those read from the provider's prompt cache.
        #[serde(default, skip_serializing_if = "is_zero")]
        cached_input_tokens: u64,
        /// Of `input_tokens`, those written to the provider's prompt cache.
        #[serde(default, skip_serializing_if = "is_zero")]
        cache_creation_input_tokens: u64,
    },
    /// The raw model output of a response, kept for audit only.
    RawOutput { step: u32, raw: String },
    /// A provider attempt failed.
    ProviderError {
        step: u32,
        attempt: u32,
        error: String,
        retryable: bool,
    },
    /// A permission decision for one call.
    PermissionDecision {
        call_id: String,
        tool_name: String,
        permission: Permission,
        approved: bool,
        decided_by: String,
    },
    /// Arguments that could not be parsed or validated.
    InvalidArguments {
        call_id: String,
        tool_name: String,
        error: String,
    },
    /// A protocol-breaking response (e.g. text imitating a tool result): the
    /// raw output is kept here and only here; history gets a placeholder.
    ProtocolViolation {
        step: u32,
        kind: ProtocolErrorKind,
        raw: String,
    },
    /// The prompt prefix changed outside a compaction (tools found by
    /// `tool_search`): a declared reset point.
    CacheReset {
        step: u32,
        reset_point: CacheResetPoint,
    },
    /// How one candidate answer's checkable values map to the evidence
    /// (SPEC A9), written each time an answer is judged.
    Grounding { step: u32, grounding: Grounding },
    /// The terminal decision and its basis.
    Terminal {
        state: TerminalState,
        reason: TerminalReason,
        basis: String,
    },
    /// What the sandbox of this run's commands confines and what it does
    /// not (SPEC F4), written at the start of every run.
    Sandbox {
        /// `bubblewrap` or `landlock`; absent when commands run unconfined
        /// (no mechanism here, or the sandbox switched off).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mechanism: Option<String>,
        /// One plain sentence.
        note: String,
        /// What commands can still do, in plain words.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        not_confined: Vec<String>,
    },
    /// A security key of an untrusted workspace's `attest.toml` that was
    /// not used (SPEC F13): the run went on with the user's own config.
    ConfigIgnored {
        /// Dotted path of the key (`provider.base_url`, `tools`).
        key: String,
        /// The file that set it.
        source: String,
    },
    /// The run is an attempt of an eval group, with the harness's
    /// guarantees switched as `switches` says (SPEC I2). First record of
    /// such a run; never present outside an eval.
    EvalGroup {
        group: String,
        switches: HarnessSwitches,
    },
    /// What memory consolidation, verification or retrieval decided about
    /// one item, and why (SPEC G2, H1). The preview is redacted.
    MemoryDecision {
        item_id: String,
        content_preview: String,
        provenance: MemoryProvenance,
        decision: MemoryDecision,
        reason: String,
    },
    /// One attempt to deliver an outbound webhook about this run (SPEC
    /// J2). Never the secret nor the signature.
    WebhookDelivery {
        /// `approval_requested` or `done`.
        event: String,
        /// The `webhook-id` header: the same on every attempt.
        webhook_id: String,
        /// The receiver's host (not its path, which may hold a token).
        host: String,
        /// 1 for the first attempt.
        attempt: u32,
        /// The receiver's HTTP status, when it answered.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
        /// Why the attempt failed without a status (connect, timeout).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// A 2xx answer: no further attempt.
        delivered: bool,
    },
}

/// One source of a request's context and its size (SPEC H1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextSource {
    /// `system_prompt`, `tools`, `session_history`, `run_transcript`, …
    pub name: String,
    pub items: usize,
    pub bytes: usize,
    #[serde(default)]
    pub truncated: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
