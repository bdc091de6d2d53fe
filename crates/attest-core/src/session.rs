//! Cross-turn history (SPEC C4): what a new run of a session sees of the
//! session's earlier runs.
//!
//! Later turns keep the evidence — user inputs and every tool call with its
//! result — and only answers the harness accepted. Pre-tool narration is
//! dropped, and the answer of a run that did not complete is replaced by a
//! harness note saying so, so an unverified claim never comes back as an
//! established fact (the failure seed 000 §5.5 describes).

use attest_protocol::{AssistantPhase, HarnessMessageKind, TerminalState, TranscriptItem};

/// Reduce the transcripts of earlier runs (oldest first) to the history a
/// new run is sent. Calls left without results (a crashed run) are paired
/// later by the normalizer with synthetic interrupted results.
pub fn session_history(runs: &[Vec<TranscriptItem>]) -> Vec<TranscriptItem> {
    let mut out = Vec::new();
    for items in runs {
        let terminal = items.iter().find_map(|i| match i {
            TranscriptItem::Terminal { state, reason, .. } => Some((*state, *reason)),
            _ => None,
        });
        let last_answer = items.iter().rposition(|i| {
            matches!(
                i,
                TranscriptItem::AssistantOutput {
                    phase: AssistantPhase::Answer,
                    ..
                }
            )
        });
        for (index, item) in items.iter().enumerate() {
            match item {
                TranscriptItem::UserInput { .. }
                | TranscriptItem::ToolCall { .. }
                | TranscriptItem::ToolResult { .. } => out.push(item.clone()),
                TranscriptItem::AssistantOutput {
                    phase: AssistantPhase::Answer,
                    ..
                } if Some(index) == last_answer
                    && matches!(terminal, Some((TerminalState::Completed, _))) =>
                {
                    out.push(item.clone())
                }
                // Commentary, rejected answers, corrective turns and
                // placeholders are process, not evidence.
                _ => {}
            }
        }
        match terminal {
            Some((TerminalState::Completed, _)) => {}
            Some((state, reason)) => out.push(TranscriptItem::HarnessMessage {
                kind: HarnessMessageKind::Reminder,
                text: format!(
                    "[attest] That earlier request ended {state} ({reason}); its answer is omitted because it was not backed by the required evidence. Do not rely on it."
                ),
            }),
            None => out.push(TranscriptItem::HarnessMessage {
                kind: HarnessMessageKind::Reminder,
                text: "[attest] That earlier request was interrupted before it ended; calls it left unfinished did not complete.".to_string(),
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use attest_protocol::{ReceiptStatus, TerminalReason};

    fn answer(text: &str) -> TranscriptItem {
        TranscriptItem::AssistantOutput {
            text: text.into(),
            reasoning: None,
            encrypted_reasoning: Vec::new(),
            phase: AssistantPhase::Answer,
        }
    }

    fn run(state: TerminalState, final_answer: &str) -> Vec<TranscriptItem> {
        vec![
            TranscriptItem::UserInput { text: "q".into() },
            TranscriptItem::AssistantOutput {
                text: "Let me check.".into(),
                reasoning: None,
                encrypted_reasoning: Vec::new(),
                phase: AssistantPhase::Commentary,
            },
            TranscriptItem::ToolCall {
                call_id: "c1".into(),
                name: "read_file".into(),
                arguments: "{}".into(),
            },
            TranscriptItem::ToolResult {
                call_id: "c1".into(),
                name: "read_file".into(),
                status: ReceiptStatus::Ok,
                output: "data".into(),
                receipt: None,
            },
            answer("first try"),
            TranscriptItem::HarnessMessage {
                kind: HarnessMessageKind::Corrective,
                text: "fix".into(),
            },
            answer(final_answer),
            TranscriptItem::Terminal {
                state,
                reason: TerminalReason::ContractSatisfied,
                answer: Some(final_answer.into()),
            },
        ]
    }

    #[test]
    fn keeps_evidence_and_the_accepted_answer_only() {
        let out = session_history(&[run(TerminalState::Completed, "it is 42")]);
        let kinds: Vec<&str> = out
            .iter()
            .map(|i| match i {
                TranscriptItem::UserInput { .. } => "user",
                TranscriptItem::ToolCall { .. } => "call",
                TranscriptItem::ToolResult { .. } => "result",
                TranscriptItem::AssistantOutput { .. } => "answer",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["user", "call", "result", "answer"]);
        assert!(
            matches!(&out[3], TranscriptItem::AssistantOutput { text, .. } if text == "it is 42")
        );
    }

    #[test]
    fn an_unverified_answer_never_comes_back() {
        let out = session_history(&[run(TerminalState::Unverified, "I sent it")]);
        let text = serde_json::to_string(&out).unwrap();
        assert!(!text.contains("I sent it"), "{text}");
        assert!(text.contains("ended unverified"), "{text}");
    }
}
