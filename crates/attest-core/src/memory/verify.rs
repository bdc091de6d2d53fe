//! Re-checking an item against its source (SPEC G3, G4): a file-backed
//! item re-hashes the file, a skill-backed item compares the skill's
//! sha256. A changed source makes the item `stale` — never injected as
//! current — and a source back at the recorded version makes it active
//! again.

use crate::context::skills::SkillMeta;
use crate::text::sha256_hex;
use crate::tool::Workspace;
use attest_protocol::{MemoryDecision, MemoryItem, MemoryProvenance, MemoryStatus};
use std::path::Path;

/// What the source says now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceCheck {
    Unchanged(String),
    Changed(String),
    /// Nothing to re-check: the user's word, or a command's output.
    NotCheckable,
}

/// The outcome of verifying one item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    pub status: MemoryStatus,
    pub decision: MemoryDecision,
    pub reason: String,
}

fn short(hash: &str) -> &str {
    &hash[..hash.len().min(8)]
}

/// Compares the item's recorded source with the workspace as it is now.
pub fn check_source(item: &MemoryItem, root: &Path, skills: &[SkillMeta]) -> SourceCheck {
    let src = &item.source_ref;
    let Some(recorded) = src.sha256.as_deref() else {
        return SourceCheck::NotCheckable;
    };
    if item.provenance == MemoryProvenance::Skill {
        if let Some(name) = src.skill.as_deref() {
            return match skills.iter().find(|s| s.name == name) {
                None => SourceCheck::Changed(format!(
                    "skill `{name}` is no longer in the workspace (or no longer valid)"
                )),
                Some(s) if s.sha256 == recorded => SourceCheck::Unchanged(format!(
                    "skill `{name}` still has sha256 {}",
                    short(recorded)
                )),
                Some(s) => SourceCheck::Changed(format!(
                    "skill `{name}` changed (sha256 {} → {})",
                    short(recorded),
                    short(&s.sha256)
                )),
            };
        }
    }
    let Some(path) = src.path.as_deref() else {
        return SourceCheck::NotCheckable;
    };
    // Through the workspace's confinement: a recorded path never reads
    // outside it, even if the store was edited.
    let bytes = Workspace::new(root)
        .map_err(|e| e.to_string())
        .and_then(|ws| ws.resolve_existing(path).map_err(|e| e.to_string()))
        .and_then(|p| std::fs::read(p).map_err(|e| e.to_string()));
    match bytes {
        Err(e) => SourceCheck::Changed(format!("{path} cannot be read any more: {e}")),
        Ok(bytes) => {
            let now = sha256_hex(&bytes);
            if now == recorded {
                SourceCheck::Unchanged(format!("{path} still has sha256 {}", short(recorded)))
            } else {
                SourceCheck::Changed(format!(
                    "{path} changed (sha256 {} → {})",
                    short(recorded),
                    short(&now)
                ))
            }
        }
    }
}

/// Verifies an active or stale item. `None` when there is nothing to do:
/// candidates and retracted items are not re-checked (verification never
/// promotes), and items without a checkable source keep their status.
pub fn verify(item: &MemoryItem, root: &Path, skills: &[SkillMeta]) -> Option<Verification> {
    if !matches!(item.status, MemoryStatus::Active | MemoryStatus::Stale) {
        return None;
    }
    match check_source(item, root, skills) {
        SourceCheck::NotCheckable => None,
        SourceCheck::Unchanged(reason) => Some(Verification {
            status: MemoryStatus::Active,
            decision: MemoryDecision::Verified,
            reason: if item.status == MemoryStatus::Stale {
                format!("{reason}: back at the recorded version, active again")
            } else {
                reason
            },
        }),
        SourceCheck::Changed(reason) => Some(Verification {
            status: MemoryStatus::Stale,
            decision: MemoryDecision::MarkedStale,
            reason: format!("{reason}; no longer injected as current"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::tests::item;

    #[test]
    fn file_backed_items_follow_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.toml"), "port = 8080\n").unwrap();
        let mut it = item(
            "The port is 8080.",
            MemoryProvenance::ToolReceipt,
            MemoryStatus::Active,
        );
        it.source_ref.path = Some("config.toml".into());
        it.source_ref.sha256 = Some(sha256_hex(b"port = 8080\n"));
        let v = verify(&it, dir.path(), &[]).unwrap();
        assert_eq!(v.status, MemoryStatus::Active);
        assert_eq!(v.decision, MemoryDecision::Verified);

        std::fs::write(dir.path().join("config.toml"), "port = 9090\n").unwrap();
        let v = verify(&it, dir.path(), &[]).unwrap();
        assert_eq!(v.status, MemoryStatus::Stale);
        assert!(v.reason.contains("config.toml changed"), "{}", v.reason);

        it.status = MemoryStatus::Stale;
        std::fs::write(dir.path().join("config.toml"), "port = 8080\n").unwrap();
        let v = verify(&it, dir.path(), &[]).unwrap();
        assert_eq!(v.status, MemoryStatus::Active, "{}", v.reason);

        std::fs::remove_file(dir.path().join("config.toml")).unwrap();
        assert_eq!(
            verify(&it, dir.path(), &[]).unwrap().status,
            MemoryStatus::Stale
        );

        it.source_ref.path = Some("../outside.txt".into());
        assert_eq!(
            verify(&it, dir.path(), &[]).unwrap().status,
            MemoryStatus::Stale
        );
    }

    #[test]
    fn skill_backed_items_compare_the_skill_hash() {
        let mut it = item(
            "The API lives at api.x.com.",
            MemoryProvenance::Skill,
            MemoryStatus::Active,
        );
        it.source_ref.skill = Some("api".into());
        it.source_ref.sha256 = Some("aa".repeat(32));
        let meta = |sha: &str| SkillMeta {
            name: "api".into(),
            description: "d".into(),
            path: "skills/api/SKILL.md".into(),
            sha256: sha.into(),
        };
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            verify(&it, dir.path(), &[meta(&"aa".repeat(32))])
                .unwrap()
                .status,
            MemoryStatus::Active
        );
        assert_eq!(
            verify(&it, dir.path(), &[meta(&"bb".repeat(32))])
                .unwrap()
                .status,
            MemoryStatus::Stale
        );
        assert_eq!(
            verify(&it, dir.path(), &[]).unwrap().status,
            MemoryStatus::Stale
        );
    }

    #[test]
    fn uncheckable_candidates_and_retracted_items_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let user = item(
            "I prefer tabs.",
            MemoryProvenance::UserExplicit,
            MemoryStatus::Active,
        );
        assert_eq!(verify(&user, dir.path(), &[]), None);
        let mut cand = item(
            "x 8080",
            MemoryProvenance::ModelInference,
            MemoryStatus::Candidate,
        );
        cand.source_ref.path = Some("config.toml".into());
        cand.source_ref.sha256 = Some("aa".into());
        assert_eq!(verify(&cand, dir.path(), &[]), None);
    }
}
