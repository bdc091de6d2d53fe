//! Confinement of file paths to the workspace root.
//!
//! Every path a built-in tool touches goes through [`Workspace`]. The check is
//! made on the canonical form (symlinks and `..` resolved by the OS), so a
//! symlink inside the workspace that points outside it is refused like a
//! plain `../` path. For a path that does not exist yet, the deepest existing
//! ancestor is canonicalized and the missing rest is applied lexically: the
//! missing components cannot be symlinks, so this is exact.
//!
//! This is a check, not a sandbox: a process that swaps a directory for a
//! symlink between the check and the use can still race it.

use std::io;
use std::path::{Component, Path, PathBuf};

/// Why a path was refused or could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("workspace root `{path}` is not usable: {reason}")]
    InvalidRoot { path: String, reason: String },
    #[error("path `{path}` escapes the workspace root")]
    Escape { path: String },
    #[error("path `{path}` does not exist")]
    NotFound {
        /// The path as given.
        path: String,
        /// Where it would be, canonical and inside the workspace; lets a tool
        /// report an observed absence with a workspace-relative path.
        resolved: PathBuf,
    },
    #[error(
        "path `{path}` goes through a symlink whose target does not exist; refusing to follow it"
    )]
    DanglingSymlink { path: String },
    #[error(
        "`{path}` is inside `{entry}`, which is protected: the harness's store, the workspace \
         config and git's own files cannot be changed by tools"
    )]
    Protected {
        path: String,
        /// The protected entry (`.attest`, `attest.toml`, `.git`).
        entry: &'static str,
    },
    #[error("cannot access `{path}`: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
}

/// The directory the file tools are confined to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// Opens a workspace. The root must exist and be a directory; it is
    /// stored canonicalized so containment checks compare like with like.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, WorkspaceError> {
        let given = root.as_ref();
        let invalid = |reason: String| WorkspaceError::InvalidRoot {
            path: given.display().to_string(),
            reason,
        };
        let root = given.canonicalize().map_err(|e| invalid(e.to_string()))?;
        if !root.is_dir() {
            return Err(invalid("not a directory".to_string()));
        }
        Ok(Workspace { root })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves a path that must exist. Returns its canonical form.
    /// A missing path inside the workspace is [`WorkspaceError::NotFound`];
    /// a missing path outside it is still [`WorkspaceError::Escape`].
    pub fn resolve_existing(&self, rel: &str) -> Result<PathBuf, WorkspaceError> {
        let candidate = self.candidate(rel);
        match candidate.canonicalize() {
            Ok(canonical) => self.check_inside(rel, canonical),
            Err(e) if is_missing(&e) => {
                let resolved = self.resolve_missing(rel, &candidate)?;
                Err(WorkspaceError::NotFound {
                    path: rel.to_string(),
                    resolved,
                })
            }
            Err(source) => Err(WorkspaceError::Io {
                path: rel.to_string(),
                source,
            }),
        }
    }

    /// Resolves a path to be written. It may not exist yet; its missing
    /// parent directories are created, but only after the path is known to
    /// stay inside the workspace.
    pub fn resolve_for_write(&self, rel: &str) -> Result<PathBuf, WorkspaceError> {
        let candidate = self.candidate(rel);
        let target = match candidate.canonicalize() {
            Ok(canonical) => return self.check_inside(rel, canonical),
            Err(e) if is_missing(&e) => self.resolve_missing(rel, &candidate)?,
            Err(source) => {
                return Err(WorkspaceError::Io {
                    path: rel.to_string(),
                    source,
                })
            }
        };
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|source| WorkspaceError::Io {
                path: rel.to_string(),
                source,
            })?;
            // Re-check after creating: something may have raced us between
            // the check and the creation.
            let parent = parent.canonicalize().map_err(|source| WorkspaceError::Io {
                path: rel.to_string(),
                source,
            })?;
            self.check_inside(rel, parent)?;
        }
        Ok(target)
    }

    /// Resolves a path a tool is to write (SPEC F14): like
    /// [`Workspace::resolve_for_write`], but a path in a protected entry
    /// (`.attest/`, `attest.toml`, `.git/`; see [`crate::tool::protected`]) is
    /// refused, as written and as resolved (symlinks into one, case
    /// variants), before any directory is created.
    pub fn resolve_for_tool_write(&self, rel: &str) -> Result<PathBuf, WorkspaceError> {
        self.check_unprotected(rel, &super::protected::lexical_join(&self.root, rel))?;
        let candidate = self.candidate(rel);
        let target = match candidate.canonicalize() {
            Ok(canonical) => self.check_inside(rel, canonical)?,
            Err(e) if is_missing(&e) => self.resolve_missing(rel, &candidate)?,
            Err(source) => {
                return Err(WorkspaceError::Io {
                    path: rel.to_string(),
                    source,
                })
            }
        };
        self.check_unprotected(rel, &target)?;
        self.resolve_for_write(rel)
    }

    /// Refuses `path` (absolute) when it is in a protected entry.
    pub fn check_unprotected(&self, rel: &str, path: &Path) -> Result<(), WorkspaceError> {
        match super::protected::protected_entry(&self.root, path) {
            Some(entry) => Err(WorkspaceError::Protected {
                path: rel.to_string(),
                entry,
            }),
            None => Ok(()),
        }
    }

    /// The workspace-relative form of a path under the root, `.` for the root
    /// itself. A path outside the root is shown as is.
    pub fn display(&self, path: impl AsRef<Path>) -> String {
        let path = path.as_ref();
        match path.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) => path.to_string_lossy().into_owned(),
        }
    }

    fn candidate(&self, rel: &str) -> PathBuf {
        let p = Path::new(rel);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.root.join(p)
        }
    }

    fn check_inside(&self, rel: &str, canonical: PathBuf) -> Result<PathBuf, WorkspaceError> {
        if canonical.starts_with(&self.root) {
            Ok(canonical)
        } else {
            Err(WorkspaceError::Escape {
                path: rel.to_string(),
            })
        }
    }

    /// Resolves a path that does not exist: canonicalize the deepest existing
    /// ancestor, apply the remaining components lexically, check containment.
    fn resolve_missing(&self, rel: &str, candidate: &Path) -> Result<PathBuf, WorkspaceError> {
        // The candidate itself is included: it may be a dangling symlink.
        for ancestor in candidate.ancestors() {
            // lstat, so that a dangling symlink counts as existing and is not
            // mistaken for a missing plain name we could create through.
            if std::fs::symlink_metadata(ancestor).is_err() {
                continue;
            }
            let base = match ancestor.canonicalize() {
                Ok(base) => base,
                Err(e) if is_missing(&e) => {
                    return Err(WorkspaceError::DanglingSymlink {
                        path: rel.to_string(),
                    })
                }
                Err(source) => {
                    return Err(WorkspaceError::Io {
                        path: rel.to_string(),
                        source,
                    })
                }
            };
            let rest = candidate.strip_prefix(ancestor).unwrap_or(candidate);
            let mut resolved = base;
            for component in rest.components() {
                match component {
                    Component::Normal(name) => resolved.push(name),
                    Component::ParentDir => {
                        resolved.pop();
                    }
                    // Prefix/root cannot follow an existing ancestor; `.` is a no-op.
                    Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
                }
            }
            return self.check_inside(rel, resolved);
        }
        // Not even `/` exists: nothing sensible to resolve against.
        Err(WorkspaceError::Escape {
            path: rel.to_string(),
        })
    }
}

/// Errors that mean "some component is not there" rather than a real I/O fault.
fn is_missing(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, tempfile::TempDir, Workspace) {
        let ws_dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(ws_dir.path().join("a.txt"), "a").unwrap();
        std::fs::create_dir(ws_dir.path().join("sub")).unwrap();
        std::fs::write(ws_dir.path().join("sub/b.txt"), "b").unwrap();
        std::fs::write(outside.path().join("secret.txt"), "s").unwrap();
        let ws = Workspace::new(ws_dir.path()).unwrap();
        (ws_dir, outside, ws)
    }

    #[test]
    fn root_must_exist_and_be_a_dir() {
        let (dir, _o, _ws) = setup();
        assert!(matches!(
            Workspace::new(dir.path().join("nope")),
            Err(WorkspaceError::InvalidRoot { .. })
        ));
        assert!(matches!(
            Workspace::new(dir.path().join("a.txt")),
            Err(WorkspaceError::InvalidRoot { .. })
        ));
    }

    #[test]
    fn relative_path_resolves_inside() {
        let (_d, _o, ws) = setup();
        let p = ws.resolve_existing("sub/b.txt").unwrap();
        assert_eq!(p, ws.root().join("sub/b.txt"));
        assert_eq!(ws.display(&p), "sub/b.txt");
        assert_eq!(ws.display(ws.root()), ".");
        // `..` that stays inside is fine.
        let p = ws.resolve_existing("sub/../a.txt").unwrap();
        assert_eq!(ws.display(&p), "a.txt");
    }

    #[test]
    fn dotdot_escape_is_refused() {
        let (_d, _o, ws) = setup();
        let err = ws.resolve_existing("../x").unwrap_err();
        assert!(matches!(err, WorkspaceError::Escape { .. }), "{err:?}");
        assert_eq!(err.to_string(), "path `../x` escapes the workspace root");
        // Even when it goes down first, through a directory that is missing.
        assert!(matches!(
            ws.resolve_existing("nodir/../../x"),
            Err(WorkspaceError::Escape { .. })
        ));
        assert!(matches!(
            ws.resolve_for_write("nodir/../../x"),
            Err(WorkspaceError::Escape { .. })
        ));
        assert!(matches!(
            ws.resolve_for_write("../x"),
            Err(WorkspaceError::Escape { .. })
        ));
    }

    #[test]
    fn absolute_outside_is_refused() {
        let (_d, outside, ws) = setup();
        let abs = outside.path().join("secret.txt");
        assert!(matches!(
            ws.resolve_existing(abs.to_str().unwrap()),
            Err(WorkspaceError::Escape { .. })
        ));
        assert!(matches!(
            ws.resolve_for_write(abs.to_str().unwrap()),
            Err(WorkspaceError::Escape { .. })
        ));
        assert!(matches!(
            ws.resolve_existing("/etc/passwd"),
            Err(WorkspaceError::Escape { .. })
        ));
        // Missing and outside: an escape, not a not-found.
        assert!(matches!(
            ws.resolve_existing("/definitely/not/here"),
            Err(WorkspaceError::Escape { .. })
        ));
    }

    #[test]
    fn absolute_inside_is_accepted() {
        let (_d, _o, ws) = setup();
        let abs = ws.root().join("a.txt");
        let p = ws.resolve_existing(abs.to_str().unwrap()).unwrap();
        assert_eq!(p, abs);
    }

    #[test]
    fn missing_inside_is_not_found_not_escape() {
        let (_d, _o, ws) = setup();
        match ws.resolve_existing("sub/missing.txt") {
            Err(WorkspaceError::NotFound { path, resolved }) => {
                assert_eq!(path, "sub/missing.txt");
                assert_eq!(ws.display(&resolved), "sub/missing.txt");
            }
            other => panic!("expected NotFound, got {other:?}"),
        }
    }

    #[test]
    fn symlink_pointing_outside_is_refused() {
        let (d, outside, ws) = setup();
        symlink(outside.path().join("secret.txt"), d.path().join("link.txt")).unwrap();
        assert!(matches!(
            ws.resolve_existing("link.txt"),
            Err(WorkspaceError::Escape { .. })
        ));
        assert!(matches!(
            ws.resolve_for_write("link.txt"),
            Err(WorkspaceError::Escape { .. })
        ));
    }

    #[test]
    fn symlink_pointing_inside_is_accepted() {
        let (d, _o, ws) = setup();
        symlink(d.path().join("sub/b.txt"), d.path().join("inner.txt")).unwrap();
        let p = ws.resolve_existing("inner.txt").unwrap();
        assert_eq!(ws.display(&p), "sub/b.txt");
    }

    #[test]
    fn symlinked_dir_escape_for_write_is_refused_and_creates_nothing() {
        let (d, outside, ws) = setup();
        symlink(outside.path(), d.path().join("out")).unwrap();
        assert!(matches!(
            ws.resolve_for_write("out/new.txt"),
            Err(WorkspaceError::Escape { .. })
        ));
        assert!(matches!(
            ws.resolve_for_write("out/deep/er/new.txt"),
            Err(WorkspaceError::Escape { .. })
        ));
        assert!(!outside.path().join("deep").exists());
    }

    #[test]
    fn dangling_symlink_is_refused_for_write() {
        let (d, outside, ws) = setup();
        symlink(
            outside.path().join("nothing-yet"),
            d.path().join("dangling"),
        )
        .unwrap();
        let err = ws.resolve_for_write("dangling").unwrap_err();
        assert!(
            matches!(err, WorkspaceError::DanglingSymlink { .. }),
            "{err:?}"
        );
        assert!(ws.resolve_for_write("dangling/x.txt").is_err());
        assert!(!outside.path().join("nothing-yet").exists());
    }

    #[test]
    fn protected_paths_are_refused_for_tool_writes_and_create_nothing() {
        let (d, _o, ws) = setup();
        std::fs::create_dir_all(d.path().join(".git/hooks")).unwrap();
        std::fs::create_dir(d.path().join(".attest")).unwrap();
        std::fs::write(d.path().join(".attest/attest.db"), "db").unwrap();
        symlink(d.path().join(".attest/attest.db"), d.path().join("db-link")).unwrap();
        symlink(d.path().join(".git"), d.path().join("gitlink")).unwrap();
        for (path, entry) in [
            (".attest/attest.db", ".attest"),
            ("./.attest/attest.db", ".attest"),
            ("sub/../.attest/new", ".attest"),
            ("attest.toml", "attest.toml"),
            ("ATTEST.toml", "attest.toml"),
            (".git/hooks/pre-commit", ".git"),
            (".git/config", ".git"),
            (".GIT/config", ".git"),
            ("db-link", ".attest"),
            ("gitlink/hooks/post-checkout", ".git"),
            ("gitlink/new-dir/x", ".git"),
        ] {
            match ws.resolve_for_tool_write(path) {
                Err(WorkspaceError::Protected { entry: e, .. }) => assert_eq!(e, entry, "{path}"),
                other => panic!("{path}: expected Protected, got {other:?}"),
            }
        }
        let abs = ws.root().join(".git/config");
        assert!(matches!(
            ws.resolve_for_tool_write(abs.to_str().unwrap()),
            Err(WorkspaceError::Protected { .. })
        ));
        assert!(!d.path().join(".git/new-dir").exists());
        assert!(!d.path().join(".GIT").exists());
        // Lookalikes are ordinary files.
        for path in [
            ".gitignore",
            "attest.toml.example",
            "src/.git-notes",
            "docs/.attest.md",
        ] {
            assert!(ws.resolve_for_tool_write(path).is_ok(), "{path}");
        }
        // The harness itself may still write there.
        assert!(ws.resolve_for_write("attest.toml").is_ok());
    }

    #[test]
    fn nonexistent_file_inside_is_ok_for_write_and_parents_are_created() {
        let (_d, _o, ws) = setup();
        let p = ws.resolve_for_write("new/dir/file.txt").unwrap();
        assert_eq!(ws.display(&p), "new/dir/file.txt");
        assert!(ws.root().join("new/dir").is_dir());
        assert!(!p.exists());
        // `..` through a missing directory that stays inside is normalized.
        let p = ws.resolve_for_write("x/../y.txt").unwrap();
        assert_eq!(ws.display(&p), "y.txt");
    }
}
