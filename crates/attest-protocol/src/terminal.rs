use serde::{Deserialize, Serialize};
use std::fmt;

/// How a run ended (SPEC A1). Decided by the harness from the contract, the
/// receipts and the events, never from model text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TerminalState {
    Completed,
    Unverified,
    Incomplete,
    Failed,
    Cancelled,
}

impl TerminalState {
    pub fn as_str(self) -> &'static str {
        match self {
            TerminalState::Completed => "completed",
            TerminalState::Unverified => "unverified",
            TerminalState::Incomplete => "incomplete",
            TerminalState::Failed => "failed",
            TerminalState::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for TerminalState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Machine-readable reason for a terminal state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TerminalReason {
    /// The contract's receipts exist (or the contract needs none).
    ContractSatisfied,
    /// The contract needed receipts that do not exist.
    MissingReceipt,
    /// The step budget ran out before an answer.
    MaxSteps,
    /// The provider signalled tool use that could not be parsed, or the model
    /// broke the protocol too often.
    ProtocolError,
    /// The provider failed after retries.
    ProviderError,
    /// The model kept repeating the same failing call.
    DoomLoop,
    /// A needed tool was refused by policy or approval.
    ApprovalDenied,
    /// Every attempt at the needed effect failed.
    ToolFailure,
    /// The user cancelled (Ctrl-C).
    UserCancelled,
    /// The run's wall-clock limit expired.
    Timeout,
    /// The process running it stopped (crash, kill) before it ended.
    Interrupted,
    /// The final answer was cut off by the output token limit, and so was
    /// the one continuation asked for.
    Truncated,
    /// The provider withheld or stopped the answer (content filter, refusal).
    ContentFilter,
    /// Under `require_grounding`: the answer names values no receipt,
    /// prompt or earlier evidence shows, or uses no evidence at all.
    UngroundedClaim,
    /// The model's final response repeated text the harness wrote (the
    /// state tail, a corrective turn, a placeholder) instead of answering.
    NoAnswer,
    /// The receipt guard was off (an eval group, [`crate::HarnessSwitches`]):
    /// the answer was accepted without judging it against the contract.
    AnswerAccepted,
}

impl TerminalReason {
    pub fn as_str(self) -> &'static str {
        match self {
            TerminalReason::ContractSatisfied => "contract_satisfied",
            TerminalReason::MissingReceipt => "missing_receipt",
            TerminalReason::MaxSteps => "max_steps",
            TerminalReason::ProtocolError => "protocol_error",
            TerminalReason::ProviderError => "provider_error",
            TerminalReason::DoomLoop => "doom_loop",
            TerminalReason::ApprovalDenied => "approval_denied",
            TerminalReason::ToolFailure => "tool_failure",
            TerminalReason::UserCancelled => "user_cancelled",
            TerminalReason::Timeout => "timeout",
            TerminalReason::Interrupted => "interrupted",
            TerminalReason::Truncated => "truncated",
            TerminalReason::ContentFilter => "content_filter",
            TerminalReason::UngroundedClaim => "ungrounded_claim",
            TerminalReason::NoAnswer => "no_answer",
            TerminalReason::AnswerAccepted => "answer_accepted",
        }
    }
}

impl fmt::Display for TerminalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
