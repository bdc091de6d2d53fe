//! What the runner reports about one attempt: the facts of the run, read
//! from its events and trace. Metrics and checks are computed from these
//! alone, so a result file reproduces every number in it.

use attest_protocol::{MemoryProvenance, Receipt, TerminalReason, TerminalState};
use serde::{Deserialize, Serialize};

/// One attempt of one case in one group, as run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// 0-based index of the attempt within its case and group.
    pub attempt: u32,
    /// The run in the store; absent when the attempt failed before a run
    /// existed (an infra failure).
    #[serde(default)]
    pub run_id: Option<String>,
    #[serde(default)]
    pub state: Option<TerminalState>,
    #[serde(default)]
    pub reason: Option<TerminalReason>,
    /// The model's last answer, whether or not the run accepted it.
    /// Untrusted model text.
    #[serde(default)]
    pub answer: Option<String>,
    #[serde(default)]
    pub receipts: Vec<Receipt>,
    /// Every tool call the harness parsed, in order.
    #[serde(default)]
    pub tool_calls: Vec<ToolCallRecord>,
    /// The first model response carried at least one valid tool call.
    #[serde(default)]
    pub first_turn_tool_call: bool,
    /// Responses with a tool-call parse anomaly (signalled tool use without
    /// a parsable call, malformed arguments, forged observations).
    #[serde(default)]
    pub parse_anomalies: u32,
    /// `None`: grounding was not computed for this run (reported as
    /// unavailable, never as 0).
    #[serde(default)]
    pub grounding: Option<GroundingRecord>,
    #[serde(default)]
    pub memory_candidates: Vec<MemoryCandidateRecord>,
    /// Model calls made.
    #[serde(default)]
    pub steps: u32,
    #[serde(default)]
    pub latency_ms: u64,
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    /// Set when the attempt failed for a reason outside the model and the
    /// harness (endpoint unreachable, fixture not copied, the runner
    /// crashed). Such attempts are counted apart and never dropped.
    #[serde(default)]
    pub infra_failure: Option<String>,
    /// `attest trace` of the run, for the report.
    #[serde(default)]
    pub trace_text: Option<String>,
}

impl AttemptRecord {
    /// An attempt that could not be run at all.
    pub fn infra(attempt: u32, reason: impl Into<String>) -> Self {
        AttemptRecord {
            infra_failure: Some(reason.into()),
            ..AttemptRecord::empty(attempt)
        }
    }

    pub fn empty(attempt: u32) -> Self {
        AttemptRecord {
            attempt,
            run_id: None,
            state: None,
            reason: None,
            answer: None,
            receipts: Vec::new(),
            tool_calls: Vec::new(),
            first_turn_tool_call: false,
            parse_anomalies: 0,
            grounding: None,
            memory_candidates: Vec::new(),
            steps: 0,
            latency_ms: 0,
            input_tokens: 0,
            output_tokens: 0,
            infra_failure: None,
            trace_text: None,
        }
    }

    pub fn is_infra_failure(&self) -> bool {
        self.infra_failure.is_some()
    }

    /// A non-empty answer.
    pub fn answered(&self) -> Option<&str> {
        self.answer.as_deref().filter(|a| !a.trim().is_empty())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    pub call_id: String,
    pub name: String,
    /// The arguments as parsed; a string when they were not valid JSON.
    #[serde(default)]
    pub arguments: serde_json::Value,
}

/// The grounding of an answer's checkable values (SPEC A9), summarized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroundingRecord {
    /// Checkable values in the answer.
    pub values: u32,
    /// Values found in no call output, prompt or earlier evidence.
    pub ungrounded: u32,
    /// Paths and URLs/domains asserted that are ungrounded or contradicted.
    pub wrong_paths: u32,
    pub wrong_urls: u32,
}

/// A memory candidate the run produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryCandidateRecord {
    pub content: String,
    pub provenance: MemoryProvenance,
    /// A receipt's output backs it.
    pub receipt_backed: bool,
    /// It was (or, in a group without the gate, would have been) promoted.
    pub promoted: bool,
}

impl MemoryCandidateRecord {
    /// Promoted with nothing behind it: neither the user, a file, a skill
    /// nor a receipt.
    pub fn pollutes(&self) -> bool {
        self.promoted
            && !self.receipt_backed
            && matches!(
                self.provenance,
                MemoryProvenance::ModelInference
                    | MemoryProvenance::LegacyUnverified
                    | MemoryProvenance::ToolReceipt
            )
    }
}
