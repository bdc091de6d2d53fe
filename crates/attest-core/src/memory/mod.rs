//! Memory with provenance (SPEC G1–G4, seed 000 §5.6–5.7, §9.4).
//!
//! The failure this prevents (seed #24): the model asserted a wrong domain
//! without reading anything, consolidation stored it, and from then on it
//! was injected as system context and beat the correct — but unloaded —
//! skill. Here, by construction:
//! - only what the user stated and what a successful receipt shows may be
//!   `active` ([`gate`]); model inferences, imports, and URLs, domains,
//!   paths and commands nobody confirmed stay `candidate`;
//! - candidates are never injected; active items are injected with their
//!   provenance and date, and never as more than memory ([`memory_layer`]);
//! - a changed source file or skill makes an item `stale`, injected only as
//!   a pointer to the source ([`verify`]); a skill that covers an item's
//!   subject is named as authoritative, and an unverified item it covers
//!   is retracted;
//! - secrets are refused whole ([`screen`]).
//!
//! Everything here is pure or reads workspace files; the CLI reads and
//! writes the store around it and traces every [`DecisionRecord`].

mod conflict;
mod consolidate;
mod extract;
mod gate;
mod labels;
mod legacy;
mod projection;
mod retrieve;
mod screen;
pub(crate) mod values;
mod verify;
mod words;

#[cfg(test)]
mod proptests;
#[cfg(test)]
pub(crate) mod tests;

pub use conflict::{contradicts, covering_skill};
pub use consolidate::{consolidate, Consolidation, RunSummary};
pub use extract::{answer_facts, user_statements, Origin, Proposal};
pub use gate::{backing_receipts, gate, Gated, ReceiptView};
pub use labels::provenance_label;
pub use legacy::parse_legacy;
pub use projection::{
    detect_edits, render_projection, HandEdits, PROJECTION_FILE, PROJECTION_HEADER,
};
pub use retrieve::{memory_layer, relevance, MemoryLayer, RetrievalLimits, MEMORY_HEADING};
pub use screen::{screen, Refusal, MAX_CONTENT_CHARS};
pub use values::{appears_in, distinctive_values, Value, ValueKind};
pub use verify::{check_source, verify, SourceCheck, Verification};

use crate::redact::Redactor;
use attest_protocol::{
    ConfidenceLevel, ConflictPolicy, MemoryDecision, MemoryItem, MemoryKind, MemoryProvenance,
    MemorySourceRef, MemoryStatus, TraceRecord,
};
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

/// One decision about one item, for the run's trace (SPEC G2, H1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionRecord {
    pub item_id: String,
    /// Redacted and cut short.
    pub content_preview: String,
    pub provenance: MemoryProvenance,
    pub decision: MemoryDecision,
    pub reason: String,
}

impl DecisionRecord {
    pub fn new(item: &MemoryItem, decision: MemoryDecision, reason: String) -> Self {
        DecisionRecord {
            item_id: item.id.clone(),
            content_preview: preview(&item.content),
            provenance: item.provenance,
            decision,
            reason,
        }
    }

    pub fn to_trace(&self) -> TraceRecord {
        TraceRecord::MemoryDecision {
            item_id: self.item_id.clone(),
            content_preview: self.content_preview.clone(),
            provenance: self.provenance,
            decision: self.decision,
            reason: self.reason.clone(),
        }
    }
}

/// Content normalized for identity: case, spacing and trailing
/// punctuation do not make a different memory.
pub fn normalize(content: &str) -> String {
    content
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
        .trim_end_matches(['.', '!', '。', '！', ';', '；'])
        .to_string()
}

/// `mem-` and 12 hex digits of the normalized content's sha256: the same
/// statement is the same item, whoever makes it and however often.
pub fn item_id(content: &str) -> String {
    let digest = Sha256::digest(normalize(content).as_bytes());
    format!("mem-{}", &hex::encode(digest)[..12])
}

/// At most 120 chars, on one line.
pub fn preview(content: &str) -> String {
    let one_line = content.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(120) {
        Some((cut, _)) => format!("{}…", &one_line[..cut]),
        None => one_line,
    }
}

/// The user vouches for an item (`attest memory promote`): it becomes the
/// user's own statement, active. Its earlier source is kept for the record.
pub fn promote_by_user(item: &MemoryItem, now: DateTime<Utc>) -> MemoryItem {
    MemoryItem {
        provenance: MemoryProvenance::UserExplicit,
        status: MemoryStatus::Active,
        source_ref: MemorySourceRef {
            note: Some(format!(
                "promoted by the user (was {} {})",
                item.status.as_str(),
                item.provenance.as_str()
            )),
            ..item.source_ref.clone()
        },
        verified_at: Some(now),
        expires_at: None,
        confidence: ConfidenceLevel::High,
        conflict_policy: ConflictPolicy::DeferToSource,
        updated_at: now,
        ..item.clone()
    }
}

fn kind_of(content: &str) -> MemoryKind {
    user_statements(content)
        .first()
        .map(|p| p.kind)
        .unwrap_or(MemoryKind::ProjectFact)
}

/// An item the user wrote by hand (a confirmed `MEMORY.md` edit): their
/// own statement, so active — the confirmation is the user vouching.
pub fn user_item(
    content: &str,
    note: &str,
    redactor: &Redactor,
    now: DateTime<Utc>,
) -> Result<MemoryItem, Refusal> {
    let item = noted_candidate(
        content,
        note.to_string(),
        MemoryProvenance::UserExplicit,
        redactor,
        now,
    )?;
    Ok(MemoryItem {
        verified_at: Some(now),
        confidence: ConfidenceLevel::High,
        conflict_policy: ConflictPolicy::DeferToSource,
        status: MemoryStatus::Active,
        ..item
    })
}

/// An imported entry: `legacy_unverified`, a candidate. Nothing vouches
/// for it, so any authoritative source retracts it.
pub fn legacy_item(
    content: &str,
    origin: &str,
    redactor: &Redactor,
    now: DateTime<Utc>,
) -> Result<MemoryItem, Refusal> {
    noted_candidate(
        content,
        format!("import of {origin}"),
        MemoryProvenance::LegacyUnverified,
        redactor,
        now,
    )
}

/// A screened, unverified candidate whose source is a note.
fn noted_candidate(
    content: &str,
    note: String,
    provenance: MemoryProvenance,
    redactor: &Redactor,
    now: DateTime<Utc>,
) -> Result<MemoryItem, Refusal> {
    let content = screen(content, redactor)?;
    Ok(MemoryItem {
        id: item_id(&content),
        kind: kind_of(&content),
        provenance,
        source_ref: MemorySourceRef {
            note: Some(note),
            ..Default::default()
        },
        verified_at: None,
        expires_at: None,
        confidence: ConfidenceLevel::Unknown,
        conflict_policy: ConflictPolicy::RetractOnConflict,
        status: MemoryStatus::Candidate,
        created_at: now,
        updated_at: now,
        content,
    })
}
