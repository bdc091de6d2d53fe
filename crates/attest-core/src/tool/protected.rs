//! Protected paths (SPEC F14): the harness's own state and the
//! repository's machinery, which tools must not change even though the
//! workspace around them is writable.
//!
//! - `.attest/`: the run store (receipts, transcripts, traces) that
//!   `resume`, session history and `attest trace` read back;
//! - `attest.toml`: the workspace's config;
//! - `.git/`: hooks and config that git runs programs from.
//!
//! The write tools refuse them ([`crate::tool::Workspace::resolve_for_tool_write`]);
//! the sandbox makes them read-only to commands (`sandbox/`).

use std::path::{Component, Path, PathBuf};

/// The protected entries of a workspace root.
pub const PROTECTED_ENTRIES: [&str; 3] = [".attest", "attest.toml", ".git"];

/// The protected entry `path` is or lies in, when `path` is under `root`.
/// Names compare without regard to ASCII case: on a case-insensitive file
/// system `.GIT/config` is `.git/config`, and refusing the variant on a
/// case-sensitive one costs nothing.
pub fn protected_entry(root: &Path, path: &Path) -> Option<&'static str> {
    let rel = path.strip_prefix(root).ok()?;
    let first = match rel.components().next()? {
        Component::Normal(name) => name.to_str()?,
        _ => return None,
    };
    PROTECTED_ENTRIES
        .into_iter()
        .find(|p| p.eq_ignore_ascii_case(first))
}

/// The protected entries that exist under `root` (as their paths under
/// `root`, not followed if they are symlinks), plus the git dir a `.git`
/// file points to when that lies under `root` too.
pub fn existing_protected_paths(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(root) else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if PROTECTED_ENTRIES
            .iter()
            .any(|p| p.eq_ignore_ascii_case(name))
        {
            out.push(entry.path());
        }
    }
    out.sort();
    let dot_git = root.join(".git");
    if dot_git.is_file() {
        if let Some(target) = std::fs::read_to_string(&dot_git).ok().and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("gitdir:"))
                .map(|g| root.join(g.trim()))
        }) {
            if let Ok(real) = target.canonicalize() {
                if real.starts_with(root) && !out.iter().any(|p| real.starts_with(p)) {
                    out.push(real);
                }
            }
        }
    }
    out
}

/// `rel` joined to `root` with `.` and `..` applied lexically (no file
/// system access), for a check before anything is created.
pub fn lexical_join(root: &Path, rel: &str) -> PathBuf {
    let given = Path::new(rel);
    let mut out = if given.is_absolute() {
        PathBuf::from("/")
    } else {
        root.to_path_buf()
    };
    for component in given.components() {
        match component {
            Component::Normal(name) => out.push(name),
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_matched_by_their_first_component_in_any_case() {
        let root = Path::new("/w");
        for (path, entry) in [
            ("/w/.attest/attest.db", Some(".attest")),
            ("/w/.attest", Some(".attest")),
            ("/w/attest.toml", Some("attest.toml")),
            ("/w/ATTEST.TOML", Some("attest.toml")),
            ("/w/.git/hooks/pre-commit", Some(".git")),
            ("/w/.GiT/config", Some(".git")),
            ("/w/src/.git/config", None),
            ("/w/attest.toml.bak", None),
            ("/w/.gitignore", None),
            ("/other/.git", None),
        ] {
            assert_eq!(protected_entry(root, Path::new(path)), entry, "{path}");
        }
    }

    #[test]
    fn lexical_join_applies_dots() {
        let root = Path::new("/w");
        assert_eq!(lexical_join(root, "./.attest/x"), Path::new("/w/.attest/x"));
        assert_eq!(
            lexical_join(root, "src/../.git/config"),
            Path::new("/w/.git/config")
        );
        assert_eq!(
            lexical_join(root, "/w/attest.toml"),
            Path::new("/w/attest.toml")
        );
    }

    #[test]
    fn existing_entries_and_a_worktree_git_dir_are_listed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join(".attest")).unwrap();
        std::fs::write(root.join("attest.toml"), "").unwrap();
        std::fs::create_dir_all(root.join("gitdirs/wt")).unwrap();
        std::fs::write(root.join(".git"), "gitdir: gitdirs/wt\n").unwrap();
        std::fs::write(root.join("other"), "").unwrap();
        let found = existing_protected_paths(&root);
        assert_eq!(
            found,
            [
                root.join(".attest"),
                root.join(".git"),
                root.join("attest.toml"),
                root.join("gitdirs/wt"),
            ]
        );
    }
}
