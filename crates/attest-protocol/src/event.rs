use crate::{
    CacheResetPoint, CompletionContract, EffectClass, Grounding, Receipt, ReceiptStatus,
    TerminalReason, TerminalState,
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Token usage summed over a run's model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of `input_tokens`, those the provider read from its prompt cache,
    /// where it reports them (SPEC D5: a stable prefix should show up here).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_input_tokens: u64,
    /// Of `input_tokens`, those the provider wrote to its prompt cache
    /// (Anthropic's `cache_creation_input_tokens`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_creation_input_tokens: u64,
}

impl Usage {
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
        self.cache_creation_input_tokens += other.cache_creation_input_tokens;
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Why a response was a protocol error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProtocolErrorKind {
    /// The provider signalled tool use but no valid call could be parsed.
    NoParsableToolCall,
    /// The model wrote text imitating a tool result.
    ForgedObservation,
    /// Text protocol: more than one Action where one is allowed.
    MultipleActions,
    /// Text protocol: an Action and a Final Answer in one response.
    ActionWithFinalAnswer,
    /// Text protocol: an Action line that does not parse or names no offered tool.
    UnparsableAction,
    /// Text protocol: neither an Action nor a Final Answer.
    MissingActionOrAnswer,
}

/// One line of the event stream (`--json`). Every event carries the run id and
/// a sequence number; `docs/events.md` documents each kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub run_id: String,
    pub seq: u64,
    #[serde(serialize_with = "crate::timestamp::serialize")]
    pub ts: DateTime<Utc>,
    #[serde(flatten)]
    pub body: EventBody,
}

/// What a resumed run keeps from its start (SPEC A10): `attest resume`
/// refuses a flag that would weaken any of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumedWith {
    pub contract: CompletionContract,
    pub max_steps: u32,
    pub max_corrections: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// How `ask` permissions are answered when nobody is asked (`deny`,
    /// `allow`), when the front end says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    /// Grounding decides the run (SPEC A9); serialized only when true.
    #[serde(default, skip_serializing_if = "is_false")]
    pub require_grounding: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventBody {
    RunStarted {
        trace_id: String,
        session_id: String,
        provider: String,
        model: String,
        contract: CompletionContract,
        loop_version: String,
        prompt_version: String,
    },
    /// First event of a resumed run (after a crash): calls that were in
    /// flight are recorded as interrupted, never re-executed.
    RunResumed {
        trace_id: String,
        session_id: String,
        interrupted_calls: Vec<String>,
        /// The stored contract and limits the run goes on under (absent in
        /// logs of earlier versions).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resumed_with: Option<ResumedWith>,
    },
    /// Commentary the model wrote alongside tool calls, or (with `delta`)
    /// a piece of the model's response as it is generated. Never a
    /// completion.
    Progress {
        step: u32,
        text: String,
        /// A raw token delta of the model's response as it is generated:
        /// untrusted, display-only, may contain tool-call syntax or answer
        /// text; never evidence, never an answer. Delta events are not
        /// stored in the run log (the whole response is, in the trace) and
        /// carry the `seq` of the last stored event. Serialized only when
        /// true.
        #[serde(default, skip_serializing_if = "is_false")]
        delta: bool,
    },
    ToolStarted {
        step: u32,
        call_id: String,
        tool_name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        effect: Option<EffectClass>,
        arguments: serde_json::Value,
    },
    /// A running tool said how far it got (an MCP server's progress
    /// notification). Display only: never evidence, never shown to the
    /// model; `message` is the tool's own words, redacted. At most a few
    /// per second of one call are stored.
    ToolProgress {
        step: u32,
        call_id: String,
        tool_name: String,
        progress: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    ToolResult {
        step: u32,
        call_id: String,
        tool_name: String,
        status: ReceiptStatus,
        /// The first part of what the model was shown.
        output_preview: String,
        receipt: Receipt,
    },
    ApprovalRequested {
        call_id: String,
        tool_name: String,
        arguments: serde_json::Value,
        reason: String,
    },
    ApprovalResolved {
        call_id: String,
        tool_name: String,
        approved: bool,
        /// Who decided: `policy`, `flag`, `user`, `timeout`,
        /// `non_interactive`, or the name of the API token that decided.
        decided_by: String,
        /// How the decision arrived (`terminal`, `api`, `webhook`); absent
        /// for one the harness made itself. When: the event's `ts`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        via: Option<String>,
    },
    CorrectiveInjected {
        step: u32,
        missing: String,
        text: String,
    },
    /// The answer was cut off by the output token limit (`finish_reason`
    /// as the provider sent it): the model is asked once to continue it.
    ContinuationRequested {
        step: u32,
        finish_reason: String,
        text: String,
    },
    ProtocolError {
        step: u32,
        kind: ProtocolErrorKind,
        detail: String,
    },
    /// A harness reminder was added as the latest user-role message
    /// (doom loop: the same call failed the same way repeatedly).
    ReminderInjected { step: u32, text: String, count: u32 },
    ProviderRetry {
        step: u32,
        attempt: u32,
        delay_ms: u64,
        error: String,
    },
    /// History was compacted at a declared cache reset point (SPEC E4).
    Compacted {
        step: u32,
        reset_point: CacheResetPoint,
        archived_items: usize,
        history_tokens_before: usize,
    },
    /// Emitted only for `completed` runs.
    Final { answer: String },
    Done {
        trace_id: String,
        state: TerminalState,
        reason: TerminalReason,
        /// The model's last answer text, whatever the state; null when the
        /// model never gave one (narration before tool calls is not an answer).
        answer: Option<String>,
        /// Plain-language basis of the decision.
        basis: String,
        receipts: Vec<Receipt>,
        /// How the answer's checkable values map to the evidence (SPEC A9);
        /// absent when there is no answer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grounding: Option<Grounding>,
        steps: u32,
        usage: Usage,
        loop_version: String,
        prompt_version: String,
    },
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl EventBody {
    /// A live-only token delta (`progress` with `delta: true`).
    pub fn is_delta(&self) -> bool {
        matches!(self, EventBody::Progress { delta: true, .. })
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            EventBody::RunStarted { .. } => "run_started",
            EventBody::RunResumed { .. } => "run_resumed",
            EventBody::Progress { .. } => "progress",
            EventBody::ToolStarted { .. } => "tool_started",
            EventBody::ToolProgress { .. } => "tool_progress",
            EventBody::ToolResult { .. } => "tool_result",
            EventBody::ApprovalRequested { .. } => "approval_requested",
            EventBody::ApprovalResolved { .. } => "approval_resolved",
            EventBody::CorrectiveInjected { .. } => "corrective_injected",
            EventBody::ContinuationRequested { .. } => "continuation_requested",
            EventBody::ProtocolError { .. } => "protocol_error",
            EventBody::ReminderInjected { .. } => "reminder_injected",
            EventBody::ProviderRetry { .. } => "provider_retry",
            EventBody::Compacted { .. } => "compacted",
            EventBody::Final { .. } => "final",
            EventBody::Done { .. } => "done",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(body: EventBody) -> serde_json::Value {
        serde_json::to_value(Event {
            run_id: "r".into(),
            seq: 3,
            ts: Utc::now(),
            body,
        })
        .unwrap()
    }

    #[test]
    fn commentary_progress_has_no_delta_key_and_deltas_say_so() {
        let commentary = event(EventBody::Progress {
            step: 1,
            text: "Reading it.".into(),
            delta: false,
        });
        assert_eq!(commentary["type"], "progress");
        assert!(commentary.get("delta").is_none(), "{commentary}");
        let delta = event(EventBody::Progress {
            step: 1,
            text: "<tool_call>".into(),
            delta: true,
        });
        assert_eq!(delta["delta"], true, "{delta}");
        // Lines written before the field existed still read back.
        let old: Event = serde_json::from_str(
            r#"{"run_id":"r","seq":2,"ts":"2026-01-01T00:00:00Z","type":"progress","step":1,"text":"x"}"#,
        )
        .unwrap();
        assert!(!old.body.is_delta());
        let back: Event = serde_json::from_value(delta).unwrap();
        assert!(back.body.is_delta());
    }
}
