//! When memory meets an authoritative source (SPEC G3): a skill that covers
//! an item's subject, or a newer tool result about the same subject with
//! different values. The source always wins; what happens to the item
//! depends on its conflict policy.

use super::values::distinctive_values;
use super::words::{subject, words};
use crate::context::skills::SkillMeta;
use attest_protocol::{MemoryItem, MemoryKind};

/// The skill whose name or description covers the item's subject, if any.
/// Preferences and facts about the user are the user's to state: a skill
/// never outranks them.
pub fn covering_skill<'a>(item: &MemoryItem, skills: &'a [SkillMeta]) -> Option<&'a SkillMeta> {
    if matches!(item.kind, MemoryKind::Preference | MemoryKind::UserFact) {
        return None;
    }
    let about = subject(&item.content);
    if about.is_empty() {
        return None;
    }
    skills.iter().find(|skill| {
        // An item read from this very skill is the skill's own word.
        if item.source_ref.skill.as_deref() == Some(skill.name.as_str()) {
            return false;
        }
        let name = words(&skill.name.replace(['-', '_'], " "));
        let by_name = !name.is_empty() && name.is_subset(&about);
        let by_description = words(&skill.description).intersection(&about).count() >= 2;
        by_name || by_description
    })
}

/// True when `newer` and `older` are about the same thing and name
/// different values of the same kind: "the API lives at a.example.com" vs
/// "the API lives at b.example.com".
pub fn contradicts(newer: &str, older: &str) -> bool {
    let (a, b) = (subject(newer), subject(older));
    if a.is_empty() || a != b {
        return false;
    }
    let (va, vb) = (distinctive_values(newer), distinctive_values(older));
    va.iter().any(|x| {
        vb.iter().any(|y| x.kind == y.kind)
            && !vb
                .iter()
                .any(|y| y.kind == x.kind && y.text.eq_ignore_ascii_case(&x.text))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::tests::item;
    use attest_protocol::{MemoryProvenance, MemoryStatus};

    fn skill(name: &str, description: &str) -> SkillMeta {
        SkillMeta {
            name: name.into(),
            description: description.into(),
            path: format!("skills/{name}/SKILL.md"),
            sha256: "00".repeat(32),
        }
    }

    #[test]
    fn skills_cover_facts_by_name_or_description() {
        let skills = [
            skill("api", "The company API: base URL and authentication"),
            skill("billing-service", "Invoices and payment runs"),
        ];
        let fact = |c: &str| item(c, MemoryProvenance::ModelInference, MemoryStatus::Candidate);
        assert_eq!(
            covering_skill(&fact("The API lives at api.wrong-example.com."), &skills)
                .map(|s| s.name.as_str()),
            Some("api")
        );
        assert_eq!(
            covering_skill(&fact("The billing service runs on port 7000."), &skills)
                .map(|s| s.name.as_str()),
            Some("billing-service")
        );
        assert!(covering_skill(&fact("The port is 8080."), &skills).is_none());
        let mut pref = fact("I prefer the API docs in English.");
        pref.kind = MemoryKind::Preference;
        assert!(covering_skill(&pref, &skills).is_none());
        let mut own = fact("The API lives at api.right-example.com.");
        own.source_ref.skill = Some("api".into());
        assert!(covering_skill(&own, &skills).is_none());
    }

    #[test]
    fn contradiction_needs_same_subject_and_different_values() {
        assert!(contradicts(
            "The API lives at api.right-example.com.",
            "The API lives at api.wrong-example.com."
        ));
        assert!(contradicts("The port is 9090.", "the port is 8080"));
        assert!(!contradicts("The port is 8080.", "The port is 8080"));
        assert!(!contradicts("The admin port is 9000.", "The port is 8080."));
        assert!(!contradicts(
            "The port is 8080.",
            "The port is in config.toml."
        ));
    }
}
