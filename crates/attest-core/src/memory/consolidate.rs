//! Consolidation after a run (SPEC G2): extract proposals from the run's
//! user input and answer, screen them for secrets, pass them through the
//! gate, merge them with what is already remembered, and settle conflicts
//! with the run's tool results and the workspace's skills. Pure: the caller
//! reads the store before and writes the result after.

use super::conflict::{contradicts, covering_skill};
use super::extract::{answer_facts, user_statements, Origin, Proposal};
use super::gate::{backing_receipts, gate, Gated};
use super::screen::screen;
use super::{item_id, DecisionRecord};
use crate::context::skills::SkillMeta;
use crate::redact::Redactor;
use attest_protocol::{
    AssistantPhase, MemoryDecision, MemoryItem, MemoryProvenance, MemoryStatus, TerminalState,
    TranscriptItem,
};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

/// What consolidation reads of a finished run.
#[derive(Debug, Clone, Copy)]
pub struct RunSummary<'a> {
    pub run_id: &'a str,
    /// The run's transcript items, as stored.
    pub items: &'a [TranscriptItem],
    pub state: TerminalState,
    /// The accepted answer (set only for `completed` runs).
    pub answer: Option<&'a str>,
}

/// Items to write back (new or changed) and every decision, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Consolidation {
    pub upserts: Vec<MemoryItem>,
    pub decisions: Vec<DecisionRecord>,
}

struct Pool {
    items: BTreeMap<String, MemoryItem>,
    touched: Vec<String>,
}

impl Pool {
    fn set(&mut self, item: MemoryItem) {
        if !self.touched.contains(&item.id) {
            self.touched.push(item.id.clone());
        }
        self.items.insert(item.id.clone(), item);
    }
}

fn new_item(id: String, p: &Proposal, content: String, g: Gated, now: DateTime<Utc>) -> MemoryItem {
    MemoryItem {
        id,
        content,
        kind: p.kind,
        provenance: g.provenance,
        verified_at: (g.status == MemoryStatus::Active).then_some(now),
        source_ref: g.source_ref,
        expires_at: g.expires_at,
        confidence: g.confidence,
        conflict_policy: g.conflict_policy,
        status: g.status,
        created_at: now,
        updated_at: now,
    }
}

/// The run's answer: the accepted one of a completed run, else the last
/// answer-phase output (kept only as an inference).
fn answer_text<'a>(run: &RunSummary<'a>) -> Option<&'a str> {
    if run.state == TerminalState::Completed {
        return run.answer;
    }
    run.items.iter().rev().find_map(|i| match i {
        TranscriptItem::AssistantOutput {
            text,
            phase: AssistantPhase::Answer,
            ..
        } => Some(text.as_str()),
        _ => None,
    })
}

pub fn consolidate(
    run: &RunSummary<'_>,
    existing: &[MemoryItem],
    skills: &[SkillMeta],
    redactor: &Redactor,
    now: DateTime<Utc>,
) -> Consolidation {
    let completed = run.state == TerminalState::Completed;
    let receipts = backing_receipts(run.items);
    let mut proposals: Vec<Proposal> = run
        .items
        .iter()
        .filter_map(|i| match i {
            TranscriptItem::UserInput { text } => Some(user_statements(text)),
            _ => None,
        })
        .flatten()
        .collect();
    if let Some(answer) = answer_text(run) {
        proposals.extend(answer_facts(answer));
    }

    let mut pool = Pool {
        items: existing.iter().map(|i| (i.id.clone(), i.clone())).collect(),
        touched: Vec::new(),
    };
    let mut decisions = Vec::new();
    // Ids made active from this run's receipts: the newest word on their
    // subject.
    let mut backed_now: Vec<String> = Vec::new();

    for p in proposals {
        let unverified = match p.origin {
            Origin::UserStatement => MemoryProvenance::UserExplicit,
            Origin::Answer => MemoryProvenance::ModelInference,
        };
        let content = match screen(&p.content, redactor) {
            Ok(c) => c,
            Err(refusal) => {
                decisions.push(DecisionRecord {
                    item_id: item_id(&refusal.preview),
                    content_preview: refusal.preview,
                    provenance: unverified,
                    decision: MemoryDecision::Rejected,
                    reason: refusal.reason,
                });
                continue;
            }
        };
        let g = gate(&p, completed, &receipts, run.run_id, now);
        let id = item_id(&content);
        let from_receipt = matches!(
            g.provenance,
            MemoryProvenance::ToolReceipt | MemoryProvenance::Skill
        ) && g.status == MemoryStatus::Active;
        let (decision, reason) = match pool.items.get(&id).cloned() {
            None => {
                let item = new_item(id.clone(), &p, content, g.clone(), now);
                let decision = decision_for(item.status);
                pool.set(item);
                (decision, g.reason)
            }
            Some(old) if old.status == MemoryStatus::Retracted => {
                if g.provenance == MemoryProvenance::UserExplicit {
                    let item = MemoryItem {
                        created_at: old.created_at,
                        ..new_item(id.clone(), &p, content, g.clone(), now)
                    };
                    let decision = decision_for(item.status);
                    pool.set(item);
                    (
                        decision,
                        format!(
                            "stated again by the user after it was retracted; {}",
                            g.reason
                        ),
                    )
                } else {
                    (
                        MemoryDecision::Rejected,
                        "it was retracted; only the user can bring it back (`attest memory promote`)".into(),
                    )
                }
            }
            Some(old) if g.status == MemoryStatus::Active => {
                let item = MemoryItem {
                    created_at: old.created_at,
                    ..new_item(id.clone(), &p, content, g.clone(), now)
                };
                pool.set(item);
                (
                    MemoryDecision::Promoted,
                    format!(
                        "{} (was {} {})",
                        g.reason,
                        old.status.as_str(),
                        old.provenance.as_str()
                    ),
                )
            }
            Some(old) if old.status == MemoryStatus::Candidate => {
                // A user's word outranks the model's for the same content,
                // though a risky value still waits for a receipt.
                if g.provenance == MemoryProvenance::UserExplicit
                    && old.provenance != MemoryProvenance::UserExplicit
                {
                    pool.set(MemoryItem {
                        created_at: old.created_at,
                        ..new_item(id.clone(), &p, content, g.clone(), now)
                    });
                }
                (
                    MemoryDecision::KeptCandidate,
                    format!("already a candidate; {}", g.reason),
                )
            }
            Some(old) => (
                MemoryDecision::Rejected,
                format!(
                    "already remembered as {} ({}); an unbacked repetition changes nothing",
                    old.status.as_str(),
                    old.provenance.as_str()
                ),
            ),
        };
        if from_receipt && decision == MemoryDecision::Promoted {
            backed_now.push(id.clone());
        }
        let item = pool.items.get(&id);
        decisions.push(DecisionRecord {
            item_id: id.clone(),
            content_preview: super::preview(item.map_or("", |i| i.content.as_str())),
            provenance: item.map_or(unverified, |i| i.provenance),
            decision,
            reason,
        });
    }

    settle_contradictions(&mut pool, &backed_now, run.run_id, now, &mut decisions);
    settle_changed_files(
        &mut pool,
        &receipts_with_hash(run.items),
        &backed_now,
        run.run_id,
        now,
        &mut decisions,
    );
    settle_skill_coverage(&mut pool, skills, now, &mut decisions);

    let upserts = pool
        .touched
        .iter()
        .filter_map(|id| pool.items.get(id).cloned())
        .collect();
    Consolidation { upserts, decisions }
}

fn decision_for(status: MemoryStatus) -> MemoryDecision {
    if status == MemoryStatus::Active {
        MemoryDecision::Promoted
    } else {
        MemoryDecision::KeptCandidate
    }
}

fn change(
    pool: &mut Pool,
    mut item: MemoryItem,
    status: MemoryStatus,
    decision: MemoryDecision,
    reason: String,
    now: DateTime<Utc>,
    decisions: &mut Vec<DecisionRecord>,
) {
    item.status = status;
    item.updated_at = now;
    decisions.push(DecisionRecord::new(&item, decision, reason));
    pool.set(item);
}

/// A fact backed by this run's tool result wins over older items about the
/// same subject with other values: unverified ones are retracted, the rest
/// are marked stale for review (SPEC G3).
fn settle_contradictions(
    pool: &mut Pool,
    backed_now: &[String],
    run_id: &str,
    now: DateTime<Utc>,
    decisions: &mut Vec<DecisionRecord>,
) {
    for new_id in backed_now {
        let Some(newer) = pool.items.get(new_id).cloned() else {
            continue;
        };
        let losers: Vec<MemoryItem> = pool
            .items
            .values()
            .filter(|old| {
                old.id != newer.id
                    && !backed_now.contains(&old.id)
                    && matches!(old.status, MemoryStatus::Active | MemoryStatus::Candidate)
                    && contradicts(&newer.content, &old.content)
            })
            .cloned()
            .collect();
        let source = format!(
            "the result of {} {} in run {run_id}",
            newer.source_ref.tool_name.as_deref().unwrap_or("a tool"),
            newer.source_ref.call_id.as_deref().unwrap_or("?")
        );
        for old in losers {
            let (status, decision) = if retracts_on_conflict(&old) {
                (MemoryStatus::Retracted, MemoryDecision::Retracted)
            } else if old.status == MemoryStatus::Active {
                (MemoryStatus::Stale, MemoryDecision::MarkedStale)
            } else {
                continue;
            };
            let reason = format!(
                "contradicted by {source}, which is authoritative: \"{}\"",
                super::preview(&newer.content)
            );
            change(pool, old, status, decision, reason, now, decisions);
        }
    }
}

fn retracts_on_conflict(item: &MemoryItem) -> bool {
    item.provenance == MemoryProvenance::ModelInference
        || item.conflict_policy == attest_protocol::ConflictPolicy::RetractOnConflict
}

fn receipts_with_hash(items: &[TranscriptItem]) -> Vec<(String, String)> {
    backing_receipts(items)
        .into_iter()
        .filter_map(|r| Some((r.path?.to_string(), r.sha256?.to_string())))
        .collect()
}

/// A file read in this run with another hash than an item recorded: the
/// current file is authoritative, the item is stale.
fn settle_changed_files(
    pool: &mut Pool,
    reads: &[(String, String)],
    backed_now: &[String],
    run_id: &str,
    now: DateTime<Utc>,
    decisions: &mut Vec<DecisionRecord>,
) {
    let stale: Vec<MemoryItem> = pool
        .items
        .values()
        .filter(|i| i.status == MemoryStatus::Active && !backed_now.contains(&i.id))
        .filter(|i| {
            let (Some(path), Some(sha)) = (&i.source_ref.path, &i.source_ref.sha256) else {
                return false;
            };
            reads.iter().any(|(p, s)| p == path && s != sha)
        })
        .cloned()
        .collect();
    for item in stale {
        let path = item.source_ref.path.clone().unwrap_or_default();
        let reason = format!("{path} was read in run {run_id} and has changed since this was recorded; the file is authoritative");
        change(
            pool,
            item,
            MemoryStatus::Stale,
            MemoryDecision::MarkedStale,
            reason,
            now,
            decisions,
        );
    }
}

/// An unverified inference about something a skill covers is retracted:
/// the skill is authoritative (seed 000 §6.2, the #24 failure).
fn settle_skill_coverage(
    pool: &mut Pool,
    skills: &[SkillMeta],
    now: DateTime<Utc>,
    decisions: &mut Vec<DecisionRecord>,
) {
    let covered: Vec<(MemoryItem, String)> = pool
        .items
        .values()
        .filter(|i| i.status != MemoryStatus::Retracted && retracts_on_conflict(i))
        .filter_map(|i| covering_skill(i, skills).map(|s| (i.clone(), s.name.clone())))
        .collect();
    for (item, skill) in covered {
        let reason = format!("skill `{skill}` covers this and is authoritative; an unverified inference does not compete with it");
        change(
            pool,
            item,
            MemoryStatus::Retracted,
            MemoryDecision::Retracted,
            reason,
            now,
            decisions,
        );
    }
}
