//! The user-owned instruction files at the workspace root: `AGENTS.md`
//! (project instructions), `SOUL.md` (tone), `USER.md` (facts about the user).
//! They follow the base prompt in that order (SPEC D1). They are context for
//! the model, not policy: nothing in them can loosen what the harness enforces
//! in code.

use crate::text::{read_hashed_head, HashedHead};
use crate::tool::{Workspace, WorkspaceError};
use serde::Serialize;
use std::path::Path;

/// The workspace files, in prompt order.
pub const WORKSPACE_FILE_NAMES: [&str; 3] = ["AGENTS.md", "SOUL.md", "USER.md"];

/// Default per-file budget: enough for real project instructions, small
/// enough that one runaway file cannot crowd out the task.
pub const DEFAULT_MAX_FILE_BYTES: usize = 16 * 1024;

/// Errors of the context layer.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    #[error("workspace root `{path}` is not usable: {reason}")]
    InvalidRoot { path: String, reason: String },
    #[error("cannot read `{path}`: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write `{path}`: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{path}` is not a regular file")]
    NotAFile { path: String },
    #[error("`{path}` is not a file attest init manages")]
    NotManaged { path: String },
    #[error("{}", super::skill_tool::unknown_skill_message(name, available))]
    UnknownSkill {
        name: String,
        available: Vec<String>,
    },
    #[error("skill `{name}` is not usable: {reason}")]
    InvalidSkill { name: String, reason: String },
}

/// Per-file limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileLimits {
    /// Most bytes of a file's text put in the prompt; the rest is cut at a
    /// char boundary and a marker line says so.
    pub max_bytes: usize,
}

impl Default for FileLimits {
    fn default() -> Self {
        FileLimits {
            max_bytes: DEFAULT_MAX_FILE_BYTES,
        }
    }
}

/// One file as it goes into the prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Layer {
    /// `AGENTS.md`, `SOUL.md` or `USER.md`.
    pub name: String,
    /// The text for the prompt: the file (cut to the budget), plus a marker
    /// line when cut or when invalid UTF-8 was replaced.
    pub content: String,
    /// Size of the file on disk.
    pub bytes: usize,
    pub truncated: bool,
    /// True when the file is not valid UTF-8 and was decoded lossily.
    pub lossy: bool,
    /// sha256 of the whole file on disk (not of `content`), so a trace can
    /// name exactly which version of the file was used.
    pub sha256: String,
}

impl Layer {
    /// The layer as a prompt section: a heading naming the file, then its
    /// content. Deterministic for identical files.
    pub fn render(&self) -> String {
        format!(
            "# Workspace file: {}\n\n{}",
            self.name,
            self.content.trim_end()
        )
    }
}

/// A workspace file that exists but was not loaded, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedFile {
    pub name: String,
    pub reason: String,
}

/// The workspace files that were found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WorkspaceFiles {
    /// In prompt order (`AGENTS.md`, `SOUL.md`, `USER.md`); absent and
    /// blank files have no layer.
    pub layers: Vec<Layer>,
    /// Files present but not followed (symlinks leading outside the
    /// workspace or nowhere).
    pub skipped: Vec<SkippedFile>,
}

impl WorkspaceFiles {
    /// Reads the files at `root`. Missing files are fine; a file that exists
    /// but cannot be read is an error, so a broken setup is not silently run
    /// without its instructions.
    pub fn load(root: &Path, limits: &FileLimits) -> Result<WorkspaceFiles, ContextError> {
        let workspace = open_workspace(root)?;
        let mut files = WorkspaceFiles::default();
        for name in WORKSPACE_FILE_NAMES {
            let path = match workspace.resolve_existing(name) {
                Ok(path) => path,
                Err(WorkspaceError::NotFound { .. }) => continue,
                Err(WorkspaceError::Escape { .. }) => {
                    files.skipped.push(SkippedFile {
                        name: name.to_string(),
                        reason: "symlink to a file outside the workspace; not followed".into(),
                    });
                    continue;
                }
                Err(WorkspaceError::DanglingSymlink { .. }) => {
                    files.skipped.push(SkippedFile {
                        name: name.to_string(),
                        reason: "symlink to nothing; not followed".into(),
                    });
                    continue;
                }
                Err(WorkspaceError::Io { source, .. }) => {
                    return Err(ContextError::Io {
                        path: name.to_string(),
                        source,
                    })
                }
                // `Protected` comes only from write checks.
                Err(
                    e @ (WorkspaceError::InvalidRoot { .. } | WorkspaceError::Protected { .. }),
                ) => {
                    return Err(ContextError::InvalidRoot {
                        path: root.display().to_string(),
                        reason: e.to_string(),
                    })
                }
            };
            if let Some(layer) = read_layer(name, &path, limits)? {
                files.layers.push(layer);
            }
        }
        Ok(files)
    }

    /// The layer of one file, if loaded.
    pub fn get(&self, name: &str) -> Option<&Layer> {
        self.layers.iter().find(|l| l.name == name)
    }

    /// All layers rendered, in order, separated by blank lines; empty when
    /// there are none.
    pub fn render(&self) -> String {
        self.layers
            .iter()
            .map(Layer::render)
            .collect::<Vec<_>>()
            .join("\n\n")
    }
}

pub(crate) fn open_workspace(root: &Path) -> Result<Workspace, ContextError> {
    Workspace::new(root).map_err(|e| ContextError::InvalidRoot {
        path: root.display().to_string(),
        reason: match e {
            WorkspaceError::InvalidRoot { reason, .. } => reason,
            other => other.to_string(),
        },
    })
}

fn read_layer(name: &str, path: &Path, limits: &FileLimits) -> Result<Option<Layer>, ContextError> {
    let io = |source| ContextError::Io {
        path: name.to_string(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        // A FIFO would block, a directory cannot be read as text.
        return Err(ContextError::NotAFile {
            path: name.to_string(),
        });
    }
    // Hash the whole file but keep only what can be shown (plus a few bytes
    // so a char cut at the limit decodes whole): a huge file costs no memory.
    let keep = limits.max_bytes.saturating_add(4);
    let file = std::fs::File::open(path).map_err(io)?;
    let HashedHead {
        head,
        total,
        sha256,
    } = read_hashed_head(file, keep).map_err(io)?;
    let total = usize::try_from(total).unwrap_or(usize::MAX);
    let cut_on_read = total > head.len();
    let (text, lossy) = match std::str::from_utf8(&head) {
        Ok(s) => (s.to_string(), false),
        // Only the tail is incomplete because the read stopped mid-char.
        Err(e) if cut_on_read && e.error_len().is_none() => (
            String::from_utf8_lossy(&head[..e.valid_up_to()]).into_owned(),
            false,
        ),
        Err(_) => (String::from_utf8_lossy(&head).into_owned(), true),
    };
    if text.trim().is_empty() && !cut_on_read {
        return Ok(None);
    }
    let (shown, truncated) = cut_at_char_boundary(&text, limits.max_bytes);
    let truncated = truncated || cut_on_read;
    let mut content = shown.to_string();
    if truncated {
        push_marker(
            &mut content,
            &format!(
                "[attest: {name} is {total} bytes; only the first {} bytes are shown]",
                shown.len()
            ),
        );
    }
    if lossy {
        push_marker(
            &mut content,
            &format!(
                "[attest: {name} is not valid UTF-8; undecodable bytes are shown as \u{FFFD}]"
            ),
        );
    }
    Ok(Some(Layer {
        name: name.to_string(),
        content,
        bytes: total,
        truncated,
        lossy,
        sha256,
    }))
}

fn push_marker(content: &mut String, marker: &str) {
    if !content.is_empty() && !content.ends_with('\n') {
        content.push('\n');
    }
    content.push_str(marker);
    content.push('\n');
}

/// The longest prefix of at most `max` bytes ending on a char boundary.
fn cut_at_char_boundary(s: &str, max: usize) -> (&str, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::sha256_hex;
    use std::os::unix::fs::symlink;

    fn load(dir: &Path) -> WorkspaceFiles {
        WorkspaceFiles::load(dir, &FileLimits::default()).unwrap()
    }

    #[test]
    fn loads_present_files_in_order_with_hashes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("USER.md"), "I am Ana.\n").unwrap();
        std::fs::write(dir.path().join("AGENTS.md"), "Run `make test`.\n").unwrap();
        std::fs::write(dir.path().join("SOUL.md"), "  \n\n").unwrap();
        let files = load(dir.path());
        let names: Vec<&str> = files.layers.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["AGENTS.md", "USER.md"], "blank SOUL.md is no layer");
        let agents = files.get("AGENTS.md").unwrap();
        assert_eq!(agents.content, "Run `make test`.\n");
        assert_eq!(agents.bytes, 17);
        assert!(!agents.truncated && !agents.lossy);
        assert_eq!(agents.sha256, sha256_hex(b"Run `make test`.\n"));
        assert!(files.skipped.is_empty());
        assert_eq!(
            files.render(),
            "# Workspace file: AGENTS.md\n\nRun `make test`.\n\n# Workspace file: USER.md\n\nI am Ana."
        );
    }

    #[test]
    fn no_files_is_empty_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let files = load(dir.path());
        assert!(files.layers.is_empty());
        assert_eq!(files.render(), "");
    }

    #[test]
    fn truncation_cuts_at_a_char_boundary_with_a_marker() {
        let dir = tempfile::tempdir().unwrap();
        // 'é' is two bytes; with one leading byte the limit falls inside one.
        let text = format!("a{}", "é".repeat(100));
        std::fs::write(dir.path().join("AGENTS.md"), &text).unwrap();
        let files = WorkspaceFiles::load(dir.path(), &FileLimits { max_bytes: 10 }).unwrap();
        let layer = &files.layers[0];
        assert!(layer.truncated);
        assert!(!layer.lossy, "a char cut by the read is not invalid UTF-8");
        assert_eq!(layer.bytes, text.len());
        assert_eq!(
            layer.sha256,
            sha256_hex(text.as_bytes()),
            "hash of the whole file"
        );
        let mut lines = layer.content.lines();
        assert_eq!(lines.next(), Some("aéééé"));
        assert_eq!(
            lines.next(),
            Some("[attest: AGENTS.md is 201 bytes; only the first 9 bytes are shown]")
        );
        assert_eq!(lines.next(), None);
        assert!(!layer.content.contains('\u{FFFD}'));
    }

    #[test]
    fn file_at_the_budget_is_not_truncated() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("SOUL.md"), "x".repeat(16 * 1024)).unwrap();
        let files = load(dir.path());
        assert!(!files.layers[0].truncated);
        assert_eq!(files.layers[0].content.len(), 16 * 1024);
    }

    #[test]
    fn non_utf8_is_lossy_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("USER.md"), [b'h', b'i', 0xff, b'\n']).unwrap();
        let layer = load(dir.path()).layers.remove(0);
        assert!(layer.lossy);
        assert!(layer.content.starts_with("hi\u{FFFD}\n"));
        assert!(
            layer.content.contains("USER.md is not valid UTF-8"),
            "{}",
            layer.content
        );
    }

    #[test]
    fn symlink_escape_is_skipped_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.md"), "SECRET").unwrap();
        symlink(
            outside.path().join("secret.md"),
            dir.path().join("AGENTS.md"),
        )
        .unwrap();
        symlink(outside.path().join("nothing"), dir.path().join("SOUL.md")).unwrap();
        // A symlink that stays inside is followed.
        std::fs::create_dir(dir.path().join("docs")).unwrap();
        std::fs::write(dir.path().join("docs/user.md"), "inside").unwrap();
        symlink(dir.path().join("docs/user.md"), dir.path().join("USER.md")).unwrap();
        let files = load(dir.path());
        assert_eq!(files.layers.len(), 1);
        assert_eq!(files.layers[0].name, "USER.md");
        assert_eq!(files.layers[0].content, "inside");
        let skipped: Vec<&str> = files.skipped.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(skipped, ["AGENTS.md", "SOUL.md"]);
        assert!(files.skipped[0].reason.contains("outside the workspace"));
        assert!(!format!("{files:?}").contains("SECRET"));
    }

    #[test]
    fn unreadable_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("AGENTS.md")).unwrap();
        let err = WorkspaceFiles::load(dir.path(), &FileLimits::default()).unwrap_err();
        assert_eq!(err.to_string(), "`AGENTS.md` is not a regular file");

        let missing = dir.path().join("no-such-dir");
        let err = WorkspaceFiles::load(&missing, &FileLimits::default()).unwrap_err();
        assert!(matches!(err, ContextError::InvalidRoot { .. }), "{err}");
    }

    #[test]
    fn permission_denied_is_an_error() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("AGENTS.md");
        std::fs::write(&p, "x").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o000)).unwrap();
        if std::fs::read(&p).is_ok() {
            return; // running as root: permissions are not enforced
        }
        let err = WorkspaceFiles::load(dir.path(), &FileLimits::default()).unwrap_err();
        assert!(
            err.to_string().starts_with("cannot read `AGENTS.md`"),
            "{err}"
        );
    }
}
