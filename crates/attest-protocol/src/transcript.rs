use crate::{CacheResetPoint, Receipt, ReceiptStatus, TerminalReason, TerminalState};
use serde::{Deserialize, Serialize};

/// Whether assistant text was commentary on the way to tool calls or an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AssistantPhase {
    /// Text that accompanied tool calls ("let me read the file"). Never an answer.
    Commentary,
    /// Text of a response without tool calls: a candidate answer.
    Answer,
}

/// Why the harness wrote a user-role message of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HarnessMessageKind {
    /// A corrective turn: required evidence is missing (SPEC A4).
    Corrective,
    /// Stands in for an omitted protocol-breaking response (SPEC B3).
    ProtocolPlaceholder,
    /// A reminder (doom loop, budget).
    Reminder,
    /// The one request to continue an answer cut off by the token limit.
    Continuation,
    /// A real tool result rendered as `Observation: …` for a text-protocol
    /// (ReAct) model. Only built into requests from a `ToolResult`; the
    /// canonical transcript keeps the result itself (SPEC B1).
    Observation,
    /// The run's state snapshot at the tail of a request (SPEC E3). Only
    /// built into requests; never written to the transcript.
    StateSnapshot,
    /// The summary of compacted history (SPEC E4), built into requests from
    /// a `Compaction` item.
    CompactionSummary,
}

/// One entry of the canonical, append-only transcript (SPEC C1). Provider
/// requests are rebuilt from these items alone.
// Items are appended and serialized, not shuffled in hot loops: boxing the
// receipt would buy nothing but indirection.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TranscriptItem {
    UserInput {
        text: String,
    },
    AssistantOutput {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
        /// Provider-encrypted reasoning (OpenAI Responses `encrypted_content`),
        /// opaque and kept verbatim so it can be passed back. Only stored
        /// when the reasoning policy keeps reasoning whole.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        encrypted_reasoning: Vec<String>,
        phase: AssistantPhase,
    },
    ToolCall {
        call_id: String,
        name: String,
        /// Arguments exactly as the model sent them (may be invalid JSON).
        arguments: String,
    },
    ToolResult {
        call_id: String,
        name: String,
        status: ReceiptStatus,
        /// What the model is shown (already redacted and length-limited).
        output: String,
        /// Boxed: a receipt is most of this variant's size, and every item
        /// of a transcript, held in memory for a run's length, is as large
        /// as its largest variant.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        receipt: Option<Box<Receipt>>,
    },
    /// A user-role message written by the harness, never by the model.
    HarnessMessage {
        kind: HarnessMessageKind,
        text: String,
    },
    /// A declared compaction (SPEC E4): from here on, requests carry
    /// `summary` in place of all earlier history (the session's earlier
    /// turns and this run's first `covers` items). The originals stay in the
    /// log and are copied to the archive.
    Compaction {
        reset_point: CacheResetPoint,
        summary: String,
        /// Number of this run's items (from the start) the summary replaces.
        covers: usize,
    },
    Terminal {
        state: TerminalState,
        reason: TerminalReason,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<String>,
    },
}

// A run holds every item of its transcript (and each item's request form)
// for its whole length: keep the enum small, large fields boxed.
const _: () = assert!(std::mem::size_of::<TranscriptItem>() <= 128);

impl TranscriptItem {
    pub fn call_id(&self) -> Option<&str> {
        match self {
            TranscriptItem::ToolCall { call_id, .. }
            | TranscriptItem::ToolResult { call_id, .. } => Some(call_id),
            _ => None,
        }
    }
}
