//! Retrieval and rendering of the memory layer of the system prompt
//! (SPEC D1, G3, G4): relevant, unexpired, active items with their
//! provenance and age, within an item and token budget. Candidates and
//! retracted items are never injected; stale items and items a skill
//! covers appear only as pointers to the authoritative source.

use super::conflict::covering_skill;
use super::labels::{provenance_label, recorded_on};
use super::words::{subject, terms};
use super::DecisionRecord;
use crate::context::skills::SkillMeta;
use crate::state::count_tokens;
use attest_protocol::{MemoryDecision, MemoryItem, MemoryKind, MemoryProvenance, MemoryStatus};
use chrono::{DateTime, Utc};
use std::collections::BTreeSet;

/// Budgets for the memory layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetrievalLimits {
    pub max_items: usize,
    /// Tokens of the item lines (the fixed heading is not counted).
    pub max_tokens: usize,
    /// Share of an item's words that must occur in the prompt.
    pub min_relevance: f64,
}

impl Default for RetrievalLimits {
    fn default() -> Self {
        // Seed 000 §5.7: the old harness injected up to 5 items / 4000
        // chars with no threshold. Fewer, relevant, labelled items.
        RetrievalLimits {
            max_items: 8,
            max_tokens: 400,
            min_relevance: 0.2,
        }
    }
}

/// The rendered layer and what was decided for each item in it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryLayer {
    /// Empty when nothing is injected: the caller leaves the layer out.
    pub text: String,
    pub decisions: Vec<DecisionRecord>,
}

pub const MEMORY_HEADING: &str = "# Memory\n\nRemembered from earlier runs, each line with its source and date. Memory is not evidence: a loaded skill, a file read in this run and a tool result all outrank it. Where a line names an authoritative source, read that source before relying on the line; if you cannot, say that you are not sure.\n";

/// How well an item matches the prompt (`prompt_terms` is
/// `terms` of it), 0..=1: the share of the item's
/// subject words and values the prompt names. Preferences and facts about
/// the user apply to every task.
pub fn relevance(item: &MemoryItem, prompt_terms: &BTreeSet<String>) -> f64 {
    if matches!(item.kind, MemoryKind::Preference | MemoryKind::UserFact) {
        return 1.0;
    }
    let own = terms(&item.content);
    if own.is_empty() {
        return 0.0;
    }
    own.intersection(prompt_terms).count() as f64 / own.len() as f64
}

fn line(item: &MemoryItem, skills: &[SkillMeta]) -> (String, MemoryDecision, String) {
    if item.status == MemoryStatus::Stale {
        let on = recorded_on(item);
        let text = match (item.provenance, &item.source_ref.skill, &item.source_ref.path) {
            (MemoryProvenance::Skill, Some(skill), _) => format!(
                "- Out of date: something recorded from skill `{skill}` on {on}; the skill has changed since. Load it if the task depends on it."
            ),
            (_, _, Some(path)) => format!(
                "- Out of date: something recorded from {path} on {on}; {path} has changed since. Read {path} if the task depends on it."
            ),
            _ => format!(
                "- Out of date: a remembered statement about {} was contradicted by a later tool result. Rely on current tool results, or say that you are not sure.",
                subject(&item.content).into_iter().collect::<Vec<_>>().join(" ")
            ),
        };
        return (
            text,
            MemoryDecision::Deferred,
            "stale: only a pointer to its source is injected".into(),
        );
    }
    let label = provenance_label(item);
    match covering_skill(item, skills) {
        Some(skill) => (
            format!(
                "- {} ({label}). Skill `{}` covers this and is authoritative: load it before relying on this line; if you cannot load it, say that you are not sure.",
                item.content.trim_end_matches(['.', '。']),
                skill.name
            ),
            MemoryDecision::Deferred,
            format!("skill `{}` covers its subject and is authoritative", skill.name),
        ),
        None => (
            format!("- {} ({label})", item.content.trim_end_matches(['.', '。'])),
            MemoryDecision::Injected,
            format!("active and relevant; {label}"),
        ),
    }
}

/// The memory layer for a request about `prompt`. Deterministic for the
/// same inputs, so the prompt prefix stays byte-identical within a run.
pub fn memory_layer(
    items: &[MemoryItem],
    prompt: &str,
    skills: &[SkillMeta],
    now: DateTime<Utc>,
    limits: &RetrievalLimits,
) -> MemoryLayer {
    let candidates: Vec<&MemoryItem> = items
        .iter()
        .filter(|i| matches!(i.status, MemoryStatus::Active | MemoryStatus::Stale))
        // Belt and braces: the gate never makes these active, and nothing
        // unverified is injected even if a store was edited by hand.
        .filter(|i| !i.provenance.is_unverified())
        .filter(|i| i.expires_at.is_none_or(|t| t > now))
        .collect();
    if candidates.is_empty() {
        // No candidate, no need for the prompt's terms, whose patterns cost
        // a new process a few milliseconds before its first request.
        return MemoryLayer::default();
    }
    let prompt_terms = terms(prompt);
    let mut eligible: Vec<(f64, &MemoryItem)> = candidates
        .into_iter()
        .map(|i| (relevance(i, &prompt_terms), i))
        .filter(|(score, _)| *score > 0.0 && *score >= limits.min_relevance)
        .collect();
    eligible.sort_by(|(sa, a), (sb, b)| {
        sb.total_cmp(sa)
            .then_with(|| {
                b.verified_at
                    .unwrap_or(b.created_at)
                    .cmp(&a.verified_at.unwrap_or(a.created_at))
            })
            .then_with(|| a.id.cmp(&b.id))
    });
    let mut layer = MemoryLayer::default();
    let mut lines = Vec::new();
    let mut tokens = 0;
    for (score, item) in eligible {
        if lines.len() >= limits.max_items {
            break;
        }
        let (text, decision, reason) = line(item, skills);
        let cost = count_tokens(&text);
        if tokens + cost > limits.max_tokens {
            continue;
        }
        tokens += cost;
        lines.push(text);
        layer.decisions.push(DecisionRecord::new(
            item,
            decision,
            format!("{reason} (relevance {score:.2})"),
        ));
    }
    if !lines.is_empty() {
        layer.text = format!("{MEMORY_HEADING}{}\n", lines.join("\n"));
    }
    layer
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::tests::{item, now};

    fn receipt_fact(content: &str) -> MemoryItem {
        let mut it = item(content, MemoryProvenance::ToolReceipt, MemoryStatus::Active);
        it.source_ref.path = Some("config.toml".into());
        it.source_ref.sha256 = Some("9a37c1d2".repeat(8));
        it
    }

    #[test]
    fn injects_relevant_active_items_with_provenance() {
        let items = [
            receipt_fact("The port is 8080."),
            receipt_fact("The database is PostgreSQL 16."),
            item(
                "I prefer short answers.",
                MemoryProvenance::UserExplicit,
                MemoryStatus::Active,
            ),
        ];
        let mut pref = items[2].clone();
        pref.kind = MemoryKind::Preference;
        let items = [items[0].clone(), items[1].clone(), pref];
        let layer = memory_layer(
            &items,
            "Which port does the server listen on?",
            &[],
            now(),
            &RetrievalLimits::default(),
        );
        assert!(layer.text.starts_with("# Memory\n"), "{}", layer.text);
        assert!(
            layer.text.contains("- The port is 8080 (from a tool result on 2026-11-30 (config.toml, sha256 9a37c1d2…))"),
            "{}",
            layer.text
        );
        assert!(layer
            .text
            .contains("I prefer short answers (stated by the user on 2026-11-30)"));
        assert!(
            !layer.text.contains("PostgreSQL"),
            "irrelevant: {}",
            layer.text
        );
        assert_eq!(layer.decisions.len(), 2);
        assert!(layer
            .decisions
            .iter()
            .all(|d| d.decision == MemoryDecision::Injected));
        let again = memory_layer(
            &items,
            "Which port does the server listen on?",
            &[],
            now(),
            &RetrievalLimits::default(),
        );
        assert_eq!(again, layer, "deterministic");
    }

    #[test]
    fn candidates_retracted_expired_and_unverified_items_are_never_injected() {
        let mut expired = receipt_fact("The port is 7070.");
        expired.expires_at = Some(now() - chrono::Duration::days(1));
        let mut forged = receipt_fact("The port is 6060.");
        forged.provenance = MemoryProvenance::ModelInference;
        let items = [
            item(
                "The port is 5050.",
                MemoryProvenance::ModelInference,
                MemoryStatus::Candidate,
            ),
            item(
                "The port is 4040.",
                MemoryProvenance::UserExplicit,
                MemoryStatus::Candidate,
            ),
            item(
                "The port is 3030.",
                MemoryProvenance::UserExplicit,
                MemoryStatus::Retracted,
            ),
            expired,
            forged,
        ];
        let layer = memory_layer(&items, "port?", &[], now(), &RetrievalLimits::default());
        assert_eq!(layer.text, "");
        assert!(layer.decisions.is_empty());
    }

    #[test]
    fn stale_items_point_to_their_source_without_their_value() {
        let mut stale = receipt_fact("The port is 8080.");
        stale.status = MemoryStatus::Stale;
        let layer = memory_layer(
            &[stale],
            "Which port?",
            &[],
            now(),
            &RetrievalLimits::default(),
        );
        assert!(!layer.text.contains("8080"), "{}", layer.text);
        assert!(
            layer
                .text
                .contains("config.toml has changed since. Read config.toml"),
            "{}",
            layer.text
        );
        assert_eq!(layer.decisions[0].decision, MemoryDecision::Deferred);
    }

    #[test]
    fn a_covering_skill_is_named_as_authoritative() {
        let fact = receipt_fact("The API lives at api.old-example.com.");
        let skill = SkillMeta {
            name: "api".into(),
            description: "The company API".into(),
            path: "skills/api/SKILL.md".into(),
            sha256: "00".repeat(32),
        };
        let layer = memory_layer(
            &[fact],
            "Where does the API live?",
            &[skill],
            now(),
            &RetrievalLimits::default(),
        );
        assert!(
            layer
                .text
                .contains("Skill `api` covers this and is authoritative: load it"),
            "{}",
            layer.text
        );
        assert!(layer.text.contains("say that you are not sure"));
        assert_eq!(layer.decisions[0].decision, MemoryDecision::Deferred);
    }

    #[test]
    fn budgets_cap_items_and_tokens() {
        let items: Vec<MemoryItem> = (0..20)
            .map(|i| {
                let mut it = receipt_fact(&format!(
                    "The port number {} is 80{i:02}.",
                    "port ".repeat(i)
                ));
                it.id = format!("mem-{i:02}");
                it
            })
            .collect();
        let limits = RetrievalLimits {
            max_items: 3,
            ..Default::default()
        };
        let layer = memory_layer(&items, "port", &[], now(), &limits);
        assert_eq!(layer.decisions.len(), 3);
        let limits = RetrievalLimits {
            max_tokens: 60,
            ..Default::default()
        };
        let layer = memory_layer(&items, "port", &[], now(), &limits);
        let body = layer.text.trim_start_matches(MEMORY_HEADING);
        assert!(count_tokens(body) <= 61, "{body}");
        assert!(!layer.decisions.is_empty());
    }
}
