//! How an item's provenance and age read, in the prompt, in `MEMORY.md`
//! and in `attest memory list`: the model and the user see where a memory
//! came from, not just what it says (SPEC G3).

use attest_protocol::{MemoryItem, MemoryProvenance};

fn date(item: &MemoryItem) -> String {
    item.verified_at
        .unwrap_or(item.created_at)
        .format("%Y-%m-%d")
        .to_string()
}

fn short_hash(hash: &str) -> String {
    format!("{}…", &hash[..hash.len().min(8)])
}

/// "from a tool result on 2026-11-30 (config.toml, sha256 9a37c1d2…)",
/// "stated by the user on 2026-11-30", "inferred by the model on …,
/// unverified".
pub fn provenance_label(item: &MemoryItem) -> String {
    let src = &item.source_ref;
    let on = date(item);
    match item.provenance {
        MemoryProvenance::UserExplicit => {
            if src
                .note
                .as_deref()
                .is_some_and(|n| n.starts_with("promoted"))
            {
                format!("vouched for by the user on {on}")
            } else {
                format!("stated by the user on {on}")
            }
        }
        MemoryProvenance::ToolReceipt => match (&src.path, &src.sha256) {
            (Some(path), Some(sha)) => {
                format!(
                    "from a tool result on {on} ({path}, sha256 {})",
                    short_hash(sha)
                )
            }
            _ => format!(
                "from a tool result on {on} ({} call {})",
                src.tool_name.as_deref().unwrap_or("tool"),
                src.call_id.as_deref().unwrap_or("?")
            ),
        },
        MemoryProvenance::Skill => format!(
            "from skill `{}` on {on}{}",
            src.skill.as_deref().unwrap_or("?"),
            src.sha256
                .as_deref()
                .map(|s| format!(" (sha256 {})", short_hash(s)))
                .unwrap_or_default()
        ),
        MemoryProvenance::WorkspaceFile => format!(
            "from {} on {on}{}",
            src.path.as_deref().unwrap_or("a workspace file"),
            src.sha256
                .as_deref()
                .map(|s| format!(" (sha256 {})", short_hash(s)))
                .unwrap_or_default()
        ),
        MemoryProvenance::ModelInference => format!("inferred by the model on {on}, unverified"),
        MemoryProvenance::LegacyUnverified => format!(
            "imported on {on}{}, unverified",
            src.note
                .as_deref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        ),
    }
}

/// The date an item was last confirmed (or created), for pointer lines.
pub fn recorded_on(item: &MemoryItem) -> String {
    date(item)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::tests::item;
    use attest_protocol::MemoryStatus;

    #[test]
    fn labels_name_source_and_date() {
        let mut it = item(
            "The port is 8080.",
            MemoryProvenance::ToolReceipt,
            MemoryStatus::Active,
        );
        it.source_ref.path = Some("config.toml".into());
        it.source_ref.sha256 = Some("9a37c1d2ffff".into());
        assert_eq!(
            provenance_label(&it),
            "from a tool result on 2026-11-30 (config.toml, sha256 9a37c1d2…)"
        );
        it.provenance = MemoryProvenance::UserExplicit;
        assert_eq!(provenance_label(&it), "stated by the user on 2026-11-30");
        it.provenance = MemoryProvenance::ModelInference;
        assert_eq!(
            provenance_label(&it),
            "inferred by the model on 2026-11-30, unverified"
        );
        it.provenance = MemoryProvenance::Skill;
        it.source_ref.skill = Some("api".into());
        assert_eq!(
            provenance_label(&it),
            "from skill `api` on 2026-11-30 (sha256 9a37c1d2…)"
        );
    }
}
