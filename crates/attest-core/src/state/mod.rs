//! The run's explicit agent state (SPEC E1–E3): goal, confirmed facts, open
//! questions, failed paths, data limitations and next steps, kept by the
//! harness from events — never from the model's say-so — and rendered at the
//! tail of each request within a token budget (`tail.rs`).
//!
//! Rules enforced here (seed 003 P4):
//! - a `confirmed_fact` has at least one source ref and comes from a receipt
//!   or the user, never from model text ([`AgentState::add`] refuses it);
//! - model text enters only as `model_generated` next steps, never as a fact;
//! - failed paths merge by fingerprint and data limitations are superseded,
//!   never silently dropped.

mod active;
mod handoff;
mod tail;
mod tokens;

pub(crate) use handoff::summary as handoff_summary;
pub use handoff::SliceFilter;
pub use tail::{render_tail, tail_tokens, TailBudget, TailRender, GOAL_CUT_NOTE};
pub use tokens::{count_tokens, within_tokens};

use active::ActiveIndex;
use attest_protocol::{
    AgentStateItem, ConfidenceLevel, EffectClass, EvidenceType, Receipt, ReceiptStatus,
    StateItemType, StateStatus, VerificationStatus,
};
use chrono::Utc;
use tail::Section;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateError {
    #[error("a confirmed fact needs at least one source ref")]
    FactWithoutSource,
    #[error("a confirmed fact cannot rest on {0:?} evidence")]
    FactFromModel(EvidenceType),
}

/// The agent state of one run.
#[derive(Debug, Clone, Default)]
pub struct AgentState {
    items: Vec<AgentStateItem>,
    next_id: u32,
    /// The active items, indexed as each step reads them.
    active: ActiveIndex,
}

impl AgentState {
    /// A state whose goal is the user's request.
    pub fn with_goal(goal: &str, source_ref: &str) -> Self {
        let mut state = AgentState::default();
        let item = state.item(
            StateItemType::Goal,
            goal.trim(),
            vec![source_ref.to_string()],
            EvidenceType::UserProvided,
            ConfidenceLevel::High,
        );
        state.push(item);
        state
    }

    pub fn items(&self) -> &[AgentStateItem] {
        &self.items
    }

    pub fn active(&self) -> impl Iterator<Item = &AgentStateItem> {
        self.items
            .iter()
            .filter(|i| i.status == StateStatus::Active)
    }

    /// True when the state holds more than the goal.
    pub fn has_progress(&self) -> bool {
        self.active.has_more_than_goal()
    }

    /// How many active items `section` holds.
    fn active_in(&self, section: Section) -> usize {
        self.active.count(section)
    }

    /// The active items of `section`, newest first (by update time, then id).
    fn newest_in(&self, section: Section) -> impl Iterator<Item = &AgentStateItem> {
        self.active.newest(section).map(|at| &self.items[at])
    }

    /// Keep `item` (indexed while it is active).
    fn push(&mut self, item: AgentStateItem) {
        self.items.push(item);
        let at = self.items.len() - 1;
        self.active.insert(at, &self.items[at]);
    }

    fn item(
        &mut self,
        item_type: StateItemType,
        content: &str,
        source_refs: Vec<String>,
        evidence_type: EvidenceType,
        confidence_level: ConfidenceLevel,
    ) -> AgentStateItem {
        self.next_id += 1;
        let now = Utc::now();
        AgentStateItem {
            id: format!("s{}", self.next_id),
            item_type,
            content: content.to_string(),
            source_refs,
            evidence_type,
            confidence_level,
            status: StateStatus::Active,
            superseded_by: None,
            fingerprint: None,
            blocking: false,
            occurrences: 1,
            created_at: now,
            updated_at: now,
        }
    }

    /// Add an item, enforcing the confirmed-fact rule (SPEC E2).
    pub fn add(&mut self, item: AgentStateItem) -> Result<(), StateError> {
        if item.item_type == StateItemType::ConfirmedFact {
            if item.source_refs.is_empty() {
                return Err(StateError::FactWithoutSource);
            }
            if matches!(
                item.evidence_type,
                EvidenceType::ModelGenerated | EvidenceType::Inferred
            ) {
                return Err(StateError::FactFromModel(item.evidence_type));
            }
        }
        self.push(item);
        Ok(())
    }

    /// Update from a tool call's receipt. `needed` says whether the call's
    /// effect is one the contract needs (its failures then block the goal).
    pub fn on_receipt(&mut self, receipt: &Receipt, arguments_summary: &str, needed: bool) {
        let call = receipt.call_id.clone();
        let what = format!("{} {}", receipt.tool_name, arguments_summary);
        match (receipt.status, receipt.verification_status) {
            (ReceiptStatus::Ok, VerificationStatus::Verified) => {
                // A success resolves earlier failures of the same call shape.
                let key = failure_key(receipt);
                self.supersede(self.active.with_fingerprint(&key).collect());
                if receipt.effect == EffectClass::Observe || receipt.evidence.absent.is_some() {
                    let content = format!("{what}: {}", evidence_summary(receipt, &what));
                    let fact = self.item(
                        StateItemType::ConfirmedFact,
                        &content,
                        vec![call],
                        EvidenceType::Observed,
                        ConfidenceLevel::High,
                    );
                    let _ = self.add(fact);
                } else {
                    let content = format!("{what} succeeded: {}", evidence_summary(receipt, &what));
                    let fact = self.item(
                        StateItemType::ConfirmedFact,
                        &content,
                        vec![call],
                        EvidenceType::Observed,
                        ConfidenceLevel::High,
                    );
                    let _ = self.add(fact);
                }
                // The evidence an open question asked for may now exist.
                self.supersede(self.active.newest(Section::Questions).collect());
            }
            (ReceiptStatus::Ok, _) => {
                let content = format!(
                    "{what} reported success but returned no declared evidence; the action is not verified"
                );
                let mut limitation = self.item(
                    StateItemType::DataLimitation,
                    &content,
                    vec![call],
                    EvidenceType::Observed,
                    ConfidenceLevel::High,
                );
                limitation.blocking = needed;
                self.push(limitation);
            }
            (status, _) => {
                let reason = receipt.error.clone().unwrap_or_default();
                let key = failure_key(receipt);
                let content = format!(
                    "{what} ended {}: {}",
                    status.as_str(),
                    first_line(&reason, 200)
                );
                let existing = self.active.with_fingerprint(&key).next();
                if let Some(at) = existing {
                    // Reindexed: its update time and section may change.
                    self.active.remove(at, &self.items[at]);
                    let existing = &mut self.items[at];
                    existing.occurrences += 1;
                    existing.content = content;
                    existing.source_refs.push(call);
                    existing.updated_at = Utc::now();
                    existing.blocking |= needed;
                    self.active.insert(at, &self.items[at]);
                    return;
                }
                let mut failed = self.item(
                    StateItemType::FailedPath,
                    &content,
                    vec![call],
                    EvidenceType::Observed,
                    ConfidenceLevel::High,
                );
                failed.fingerprint = Some(key);
                failed.blocking = needed;
                self.push(failed);
            }
        }
    }

    /// Required evidence is missing after an answer: an open question.
    pub fn on_missing_evidence(&mut self, missing: &str, source_ref: &str) {
        self.supersede(self.active.newest(Section::Questions).collect());
        let question = self.item(
            StateItemType::OpenQuestion,
            &format!("Not yet verified: the task requires {missing}."),
            vec![source_ref.to_string()],
            EvidenceType::Observed,
            ConfidenceLevel::High,
        );
        self.push(question);
    }

    /// Commentary before tool calls: the model's own plan, kept as a
    /// low-confidence next step (replacing the previous one), never a fact.
    pub fn on_commentary(&mut self, text: &str, source_ref: &str) {
        let text = first_line(text, 200);
        if text.is_empty() {
            return;
        }
        self.supersede(self.active.newest(Section::NextSteps).collect());
        let step = self.item(
            StateItemType::NextStep,
            &text,
            vec![source_ref.to_string()],
            EvidenceType::ModelGenerated,
            ConfidenceLevel::Low,
        );
        self.push(step);
    }

    /// Mark the active items at `ats` superseded; the goal never is.
    fn supersede(&mut self, ats: Vec<usize>) {
        let now = Utc::now();
        for at in ats {
            if self.items[at].item_type == StateItemType::Goal {
                continue;
            }
            self.active.remove(at, &self.items[at]);
            let item = &mut self.items[at];
            item.status = StateStatus::Superseded;
            item.updated_at = now;
        }
    }
}

/// Repeats of the same failing call merge on tool + arguments + status.
fn failure_key(receipt: &Receipt) -> String {
    format!("{}:{}", receipt.tool_name, receipt.input_fingerprint)
}

/// The receipt's evidence in a few words. `call` is how the line already
/// names the call: a path it quotes as an argument, exactly, is not
/// repeated. No digest: a dozen hex digits cost as many tokens as the rest
/// of a line and tell the model nothing; the receipt keeps the whole one.
fn evidence_summary(receipt: &Receipt, call: &str) -> String {
    let e = &receipt.evidence;
    let mut parts = Vec::new();
    if e.absent == Some(true) {
        parts.push(format!(
            "{} does not exist",
            e.path.as_deref().unwrap_or("the target")
        ));
    } else if let Some(p) = e.path.as_ref().filter(|p| {
        !call.contains(&attest_protocol::json::value_text(
            &serde_json::Value::from(p.as_str()),
        ))
    }) {
        parts.push(format!("path {p}"));
    }
    if let Some(s) = e.size_bytes {
        parts.push(format!("{s} bytes"));
    }
    if let Some(c) = e.exit_code {
        parts.push(format!("exit code {c}"));
    }
    if let Some(m) = &e.message_id {
        parts.push(format!("message id {m}"));
    }
    if let Some(n) = e.match_count {
        parts.push(format!("{n} matches"));
    }
    if parts.is_empty() {
        "completed".to_string()
    } else {
        parts.join(", ")
    }
}

fn first_line(text: &str, max_chars: usize) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    match line.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests;
