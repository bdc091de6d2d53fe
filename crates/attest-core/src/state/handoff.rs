//! Structured handoff between sessions (SPEC E5). A run with a different
//! model, provider, tool schema or prompt prefix starts a separate session;
//! what it receives from the earlier one is a slice of agent state — the
//! goal, source-backed facts, failures and open questions, each with its
//! refs — never the earlier transcript or its narration.

use super::AgentState;
use attest_protocol::{CompletionContract, EvidenceType, StateItemType, TranscriptItem};

/// A short form of a call's arguments for state lines. A call with one
/// string argument (a path, a command) shows that string alone, still
/// JSON-quoted so a line can always tell the model's text from the
/// harness's; anything else shows its JSON. At most 120 characters.
pub(crate) fn summary(arguments: &str) -> String {
    let lone = match attest_protocol::json::parse_value(arguments) {
        Ok(serde_json::Value::Object(map)) if map.len() == 1 => map
            .into_iter()
            .next()
            .filter(|(_, value)| value.is_string())
            .map(|(_, value)| attest_protocol::json::value_text(&value)),
        _ => None,
    };
    let text = lone.as_deref().unwrap_or(arguments);
    match text.char_indices().nth(120) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// Which state item types a specialist receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceFilter {
    pub types: Vec<StateItemType>,
}

impl Default for SliceFilter {
    /// Everything but next steps: those are the earlier model's own plan.
    fn default() -> Self {
        SliceFilter {
            types: vec![
                StateItemType::Goal,
                StateItemType::ConfirmedFact,
                StateItemType::FailedPath,
                StateItemType::DataLimitation,
                StateItemType::OpenQuestion,
            ],
        }
    }
}

impl AgentState {
    /// The state a finished run's transcript implies: its goal and what
    /// its receipts established. The same rules as during the run apply
    /// (facts only from receipts, never from model text).
    pub fn from_transcript(items: &[TranscriptItem], contract: &CompletionContract) -> AgentState {
        let mut state = AgentState::default();
        let mut arguments = std::collections::HashMap::new();
        for item in items {
            match item {
                TranscriptItem::UserInput { text } if state.items().is_empty() => {
                    state = AgentState::with_goal(text, "user_input");
                }
                TranscriptItem::ToolCall {
                    call_id,
                    arguments: args,
                    ..
                } => {
                    arguments.insert(call_id.clone(), args.clone());
                }
                TranscriptItem::ToolResult {
                    receipt: Some(r), ..
                } => {
                    let args = arguments.get(&r.call_id).map_or("", String::as_str);
                    let needed = contract.effect_counts(r.effect)
                        || contract.required_tools.contains(&r.tool_name);
                    state.on_receipt(r, &summary(args), needed);
                }
                _ => {}
            }
        }
        state
    }

    /// The handoff text for another session: the filtered active items with
    /// their source refs, prefixed by where they come from.
    pub fn handoff(&self, from_run: &str, filter: &SliceFilter) -> String {
        let mut out = format!(
            "[attest] Handoff from run {from_run} (a separate session). Only these items carry over; each names its source. Facts are receipt-backed; anything else is not established."
        );
        for item in self
            .active()
            .filter(|i| filter.types.contains(&i.item_type))
        {
            // A model's own words never cross a session boundary.
            if item.evidence_type == EvidenceType::ModelGenerated {
                continue;
            }
            let kind = serde_json::to_value(item.item_type)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            out.push_str(&format!(
                "\n- {kind}: {} [{} {}]",
                item.content,
                from_run,
                item.source_refs.join(", ")
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attest_protocol::{
        AssistantPhase, ContractKind, EffectClass, Evidence, Receipt, ReceiptStatus,
        VerificationStatus,
    };

    #[test]
    fn a_handoff_carries_goal_and_receipt_facts_but_no_narration() {
        let now = chrono::Utc::now();
        let items = vec![
            TranscriptItem::UserInput {
                text: "Find the port".into(),
            },
            TranscriptItem::AssistantOutput {
                text: "It is surely 9999.".into(),
                reasoning: None,
                encrypted_reasoning: Vec::new(),
                phase: AssistantPhase::Commentary,
            },
            TranscriptItem::ToolCall {
                call_id: "c1".into(),
                name: "read_file".into(),
                arguments: r#"{"path":"config.toml"}"#.into(),
            },
            TranscriptItem::ToolResult {
                call_id: "c1".into(),
                name: "read_file".into(),
                status: ReceiptStatus::Ok,
                output: "port = 8080".into(),
                receipt: Some(Box::new(Receipt {
                    call_id: "c1".into(),
                    tool_name: "read_file".into(),
                    effect: EffectClass::Observe,
                    status: ReceiptStatus::Ok,
                    started_at: now,
                    finished_at: now,
                    input_fingerprint: "f".into(),
                    evidence: Evidence {
                        path: Some("config.toml".into()),
                        sha256: Some("ab".repeat(32)),
                        ..Evidence::default()
                    },
                    verification_status: VerificationStatus::Verified,
                    error: None,
                })),
            },
        ];
        let state =
            AgentState::from_transcript(&items, &CompletionContract::new(ContractKind::Observe));
        let text = state.handoff("run1", &SliceFilter::default());
        assert!(text.contains("goal: Find the port"), "{text}");
        assert!(text.contains("confirmed_fact: read_file"), "{text}");
        assert!(text.contains("[run1 c1]"), "{text}");
        assert!(!text.contains("9999"), "{text}");
        let goal_only = state.handoff(
            "run1",
            &SliceFilter {
                types: vec![StateItemType::Goal],
            },
        );
        assert!(!goal_only.contains("confirmed_fact"), "{goal_only}");
    }
}
