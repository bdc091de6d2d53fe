//! `skill`: the body of one workspace skill (`skills/<name>/SKILL.md`), loaded
//! on demand. Only the catalog (names and descriptions) is in the prompt
//! (SPEC D3); the body comes in through this tool, with a receipt.
//!
//! The file-level rules live here and are shared with the catalog
//! ([`super::skills`], which adds the YAML check of the front matter): where skills
//! are, which names are valid, how the front matter is split off, and how a
//! skill file is read. One implementation, so the catalog and the tool agree
//! on what a skill is.

use crate::text::{sha256_hex, truncate_str};
use crate::tool::{
    decode_args as parse_args, Tool, ToolContext, ToolOutput, Workspace, WorkspaceError,
    OUTPUT_LIMIT,
};
use async_trait::async_trait;
use attest_protocol::{EffectClass, ErrorType, Evidence, Permission, ToolSpec};
use serde::Deserialize;
use std::sync::Arc;

/// The directory under the workspace root that holds skills.
pub const SKILLS_DIR: &str = "skills";
/// The file inside `skills/<name>/` that is the skill.
pub const SKILL_FILE: &str = "SKILL.md";
/// Longest valid skill name, in bytes.
pub const SKILL_NAME_MAX: usize = 64;
/// Largest `SKILL.md` read; a bigger one is refused rather than loaded in
/// part (a skill is either whole or absent).
pub const SKILL_FILE_MAX_BYTES: u64 = 1024 * 1024;

/// The `skill` tool.
pub fn skill_tool() -> Arc<dyn Tool> {
    Arc::new(SkillTool::new())
}

/// `^[a-z0-9][a-z0-9_-]{0,63}$`: also what keeps a name from being a path.
pub fn is_valid_skill_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    match bytes.first() {
        Some(b) if b.is_ascii_lowercase() || b.is_ascii_digit() => {}
        _ => return false,
    }
    bytes.len() <= SKILL_NAME_MAX
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-' || *b == b'_')
}

/// Splits `---\n<front matter>\n---\n<body>` into front matter and body.
/// `None` when the text does not open with a `---` line or the block is
/// never closed. A leading BOM and `\r\n` line ends are accepted; blank lines
/// between the closing `---` and the body are dropped.
pub fn split_front_matter(text: &str) -> Option<(&str, &str)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (first, mut rest) = split_line(text);
    if first.trim_end() != "---" {
        return None;
    }
    let start = text.len() - rest.len();
    loop {
        let line_start = text.len() - rest.len();
        if rest.is_empty() {
            return None;
        }
        let (line, after) = split_line(rest);
        if line.trim_end() == "---" {
            let front = &text[start..line_start];
            let body = after.trim_start_matches(['\n', '\r']);
            return Some((front, body));
        }
        rest = after;
    }
}

/// The first line of `s` (without its `\n`) and what follows it.
fn split_line(s: &str) -> (&str, &str) {
    match s.find('\n') {
        Some(i) => (&s[..i], &s[i + 1..]),
        None => (s, ""),
    }
}

/// One `SKILL.md`, read and split, not yet checked beyond its delimiters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillFile {
    pub name: String,
    /// Workspace-relative: `skills/<name>/SKILL.md`.
    pub path: String,
    /// The YAML between the `---` lines, unparsed.
    pub front_matter: String,
    /// Everything after the front matter.
    pub body: String,
    /// sha256 of the whole file as stored.
    pub sha256: String,
    pub size_bytes: u64,
}

/// Why a skill could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SkillFileError {
    #[error(
        "invalid skill name `{name}`: use 1 to {SKILL_NAME_MAX} lowercase letters, digits, `-` or `_`, starting with a letter or digit"
    )]
    InvalidName { name: String },
    #[error("no skill `{name}` ({path} does not exist)")]
    NotFound { name: String, path: String },
    #[error("`{path}` is a symlink that leads outside the workspace or nowhere; not followed")]
    Escape { path: String },
    #[error("`{path}` is malformed: {reason}")]
    Malformed { path: String, reason: String },
    #[error("cannot read `{path}`: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// An entry of `skills/`: a candidate skill, or why it is not one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkillEntry {
    /// `skills/<name>/SKILL.md` exists, with a valid name; not yet read.
    Candidate(String),
    Rejected {
        /// Workspace-relative path of the entry.
        path: String,
        reason: String,
    },
}

fn rel_skill_path(name: &str) -> String {
    format!("{SKILLS_DIR}/{name}/{SKILL_FILE}")
}

fn map_resolve_error(e: WorkspaceError, path: &str) -> SkillFileError {
    match e {
        WorkspaceError::Escape { .. } | WorkspaceError::DanglingSymlink { .. } => {
            SkillFileError::Escape {
                path: path.to_string(),
            }
        }
        WorkspaceError::Io { source, .. } => SkillFileError::Io {
            path: path.to_string(),
            source,
        },
        other => SkillFileError::Io {
            path: path.to_string(),
            source: std::io::Error::other(other.to_string()),
        },
    }
}

/// The entries of `skills/`, sorted by name. Hidden entries (`.git`,
/// `.DS_Store`) are ignored; a missing `skills/` is no skills.
pub fn scan_skills(workspace: &Workspace) -> Result<Vec<SkillEntry>, SkillFileError> {
    let dir = match workspace.resolve_existing(SKILLS_DIR) {
        Ok(dir) => dir,
        Err(WorkspaceError::NotFound { .. }) => return Ok(Vec::new()),
        Err(e) => return Err(map_resolve_error(e, SKILLS_DIR)),
    };
    if !dir.is_dir() {
        return Err(SkillFileError::Malformed {
            path: SKILLS_DIR.to_string(),
            reason: "not a directory".to_string(),
        });
    }
    let io_err = |source| SkillFileError::Io {
        path: SKILLS_DIR.to_string(),
        source,
    };
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(&dir).map_err(io_err)? {
        let entry = entry.map_err(io_err)?;
        let raw = entry.file_name();
        let Some(name) = raw.to_str() else {
            entries.push((
                raw.to_string_lossy().into_owned(),
                SkillEntry::Rejected {
                    path: format!("{SKILLS_DIR}/{}", raw.to_string_lossy()),
                    reason: "the directory name is not valid UTF-8".to_string(),
                },
            ));
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let path = format!("{SKILLS_DIR}/{name}");
        let reject = |reason: String| SkillEntry::Rejected {
            path: path.clone(),
            reason,
        };
        // `is_dir` follows a symlink; where it leads is checked below.
        let verdict = if !entry.path().is_dir() {
            reject(format!(
                "not a skill directory (expected {SKILLS_DIR}/<name>/{SKILL_FILE})"
            ))
        } else if !is_valid_skill_name(name) {
            reject(format!(
                "not a valid skill name (1 to {SKILL_NAME_MAX} lowercase letters, digits, `-` or `_`, starting with a letter or digit)"
            ))
        } else {
            let file = rel_skill_path(name);
            match workspace.resolve_existing(&file) {
                Ok(p) if p.is_file() => SkillEntry::Candidate(name.to_string()),
                Ok(_) => reject(format!("{file} is not a regular file")),
                Err(WorkspaceError::NotFound { .. }) => reject(format!("has no {SKILL_FILE}")),
                Err(e) => reject(map_resolve_error(e, &file).to_string()),
            }
        };
        entries.push((name.to_string(), verdict));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(entries.into_iter().map(|(_, e)| e).collect())
}

/// Reads `skills/<name>/SKILL.md`: confined to the workspace, whole, UTF-8,
/// with a front matter block. The YAML inside is not checked here.
pub fn read_skill_file(workspace: &Workspace, name: &str) -> Result<SkillFile, SkillFileError> {
    if !is_valid_skill_name(name) {
        return Err(SkillFileError::InvalidName {
            name: name.to_string(),
        });
    }
    let rel = rel_skill_path(name);
    let path = match workspace.resolve_existing(&rel) {
        Ok(p) => p,
        Err(WorkspaceError::NotFound { .. }) => {
            return Err(SkillFileError::NotFound {
                name: name.to_string(),
                path: rel,
            })
        }
        Err(e) => return Err(map_resolve_error(e, &rel)),
    };
    let malformed = |reason: &str| SkillFileError::Malformed {
        path: rel.clone(),
        reason: reason.to_string(),
    };
    let io_err = |source| SkillFileError::Io {
        path: rel.clone(),
        source,
    };
    let meta = std::fs::metadata(&path).map_err(io_err)?;
    if !meta.is_file() {
        return Err(malformed("not a regular file"));
    }
    if meta.len() > SKILL_FILE_MAX_BYTES {
        return Err(malformed(&format!(
            "{} bytes, more than the {SKILL_FILE_MAX_BYTES}-byte limit",
            meta.len()
        )));
    }
    let bytes = std::fs::read(&path).map_err(io_err)?;
    let sha256 = sha256_hex(&bytes);
    let size_bytes = bytes.len() as u64;
    let text = String::from_utf8(bytes).map_err(|_| malformed("not valid UTF-8"))?;
    let (front, body) = split_front_matter(&text).ok_or_else(|| {
        malformed("no front matter: the file must start with a `---` line, then `name:` and `description:`, then a closing `---` line")
    })?;
    Ok(SkillFile {
        name: name.to_string(),
        path: rel.clone(),
        front_matter: front.to_string(),
        body: body.to_string(),
        sha256,
        size_bytes,
    })
}

/// Names of the candidate skills, sorted: for "unknown skill" messages.
pub fn available_skill_names(workspace: &Workspace) -> Vec<String> {
    scan_skills(workspace)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| match e {
            SkillEntry::Candidate(name) => Some(name),
            SkillEntry::Rejected { .. } => None,
        })
        .collect()
}

/// "unknown skill `x`; available: a, b" — the model's way to correct itself.
pub fn unknown_skill_message(name: &str, available: &[String]) -> String {
    if available.is_empty() {
        format!("unknown skill `{name}`: this workspace has no skills")
    } else {
        format!(
            "unknown skill `{name}`; available skills: {}",
            available.join(", ")
        )
    }
}

pub(crate) struct SkillTool {
    spec: ToolSpec,
}

#[derive(Deserialize)]
struct Args {
    name: String,
}

impl SkillTool {
    pub(crate) fn new() -> Self {
        SkillTool {
            spec: ToolSpec::new(
                "skill",
                "Load the full instructions of a workspace skill from the skills catalog, by \
                 name. Load a skill that clearly matches the task before relying on its domain \
                 facts (URLs, commands, hosts).",
                EffectClass::Internal,
                serde_json::json!({
                    "type": "object",
                    "properties": {
                        "name": {
                            "type": "string",
                            "description": "The skill's name as listed in the skills catalog."
                        }
                    },
                    "required": ["name"],
                    "additionalProperties": false
                }),
            ),
        }
    }
}

#[async_trait]
impl Tool for SkillTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn default_permission(&self) -> Permission {
        Permission::Allow
    }

    async fn execute(&self, args: serde_json::Value, ctx: &ToolContext) -> ToolOutput {
        let args: Args = match parse_args(args) {
            Ok(a) => a,
            Err(out) => return *out,
        };
        let workspace = ctx.workspace.clone();
        // Small synchronous file reads, shared with the catalog; kept off
        // the async workers all the same.
        let result = tokio::task::spawn_blocking(move || {
            let read = read_skill_file(&workspace, &args.name);
            let available = match &read {
                Err(SkillFileError::InvalidName { .. } | SkillFileError::NotFound { .. }) => {
                    available_skill_names(&workspace)
                }
                _ => Vec::new(),
            };
            (args.name, read, available)
        })
        .await;
        let (name, read, available) = match result {
            Ok(r) => r,
            Err(e) => return ToolOutput::error(format!("skill lookup failed: {e}")),
        };
        match read {
            Ok(file) => {
                let output = match truncate_str(&file.body, OUTPUT_LIMIT) {
                    (body, false) => body.to_string(),
                    (head, true) => format!(
                        "{head}\n[truncated: showing the first {} of {} bytes of the skill body]",
                        head.len(),
                        file.body.len()
                    ),
                };
                ToolOutput::ok(
                    output,
                    Evidence {
                        path: Some(file.path),
                        sha256: Some(file.sha256),
                        size_bytes: Some(file.size_bytes),
                        ..Evidence::default()
                    },
                )
            }
            Err(SkillFileError::InvalidName { .. } | SkillFileError::NotFound { .. }) => {
                ToolOutput::error(unknown_skill_message(&name, &available))
                    .with_error_type(ErrorType::NotFound)
            }
            Err(e @ SkillFileError::Malformed { .. }) => {
                ToolOutput::error(e.to_string()).with_error_type(ErrorType::ParseError)
            }
            Err(e @ SkillFileError::Escape { .. }) => {
                ToolOutput::error(e.to_string()).with_error_type(ErrorType::PermissionDenied)
            }
            Err(e @ SkillFileError::Io { .. }) => ToolOutput::error(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(dir.path()).unwrap();
        (dir, ToolContext::new(workspace))
    }
    use serde_json::json;
    use std::os::unix::fs::symlink;

    const SKILL: &str =
        "---\nname: deploy\ndescription: How to deploy.\n---\n\n# Deploy\nRun `make deploy`.\n";

    fn write(root: &std::path::Path, rel: &str, content: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    #[test]
    fn skill_names() {
        for ok in ["a", "deploy", "web-search_2", "0x", &"a".repeat(64)] {
            assert!(is_valid_skill_name(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "_a",
            "A",
            "a b",
            "../x",
            "a/b",
            "é",
            &"a".repeat(65),
        ] {
            assert!(!is_valid_skill_name(bad), "{bad}");
        }
    }

    #[test]
    fn front_matter_split() {
        assert_eq!(
            split_front_matter("---\nname: a\n---\nbody\n"),
            Some(("name: a\n", "body\n"))
        );
        assert_eq!(
            split_front_matter("\u{feff}---\r\nname: a\r\n---\r\n\r\nbody"),
            Some(("name: a\r\n", "body"))
        );
        assert_eq!(split_front_matter("---\n---\n"), Some(("", "")));
        assert_eq!(
            split_front_matter("---\nname: a\n---"),
            Some(("name: a\n", ""))
        );
        assert_eq!(split_front_matter("name: a\n---\nbody"), None);
        assert_eq!(split_front_matter("---\nname: a\nbody"), None);
        assert_eq!(split_front_matter(""), None);
        // `----` is not a delimiter.
        assert_eq!(split_front_matter("---\na: b\n----\nx"), None);
    }

    #[tokio::test]
    async fn returns_the_body_with_evidence() {
        let (dir, ctx) = context();
        write(dir.path(), "skills/deploy/SKILL.md", SKILL);
        let out = skill_tool().execute(json!({"name": "deploy"}), &ctx).await;
        assert!(out.success, "{out:?}");
        assert!(out.evidence_present);
        assert_eq!(out.output, "# Deploy\nRun `make deploy`.\n");
        assert!(!out.output.contains("description"));
        assert_eq!(out.evidence.path.as_deref(), Some("skills/deploy/SKILL.md"));
        assert_eq!(out.evidence.sha256, Some(sha256_hex(SKILL.as_bytes())));
        assert_eq!(out.evidence.size_bytes, Some(SKILL.len() as u64));
    }

    #[tokio::test]
    async fn unknown_skill_lists_the_available_ones() {
        let (dir, ctx) = context();
        write(dir.path(), "skills/deploy/SKILL.md", SKILL);
        write(
            dir.path(),
            "skills/alpha/SKILL.md",
            "---\nname: alpha\ndescription: A.\n---\nA\n",
        );
        std::fs::create_dir_all(dir.path().join("skills/empty")).unwrap();
        for name in ["nope", "../etc", "Deploy"] {
            let out = skill_tool().execute(json!({"name": name}), &ctx).await;
            assert!(!out.success, "{name}");
            assert_eq!(out.error_type, Some(ErrorType::NotFound));
            assert!(
                out.output.ends_with("available skills: alpha, deploy"),
                "{}",
                out.output
            );
        }
    }

    #[tokio::test]
    async fn no_skills_at_all() {
        let (_dir, ctx) = context();
        let out = skill_tool().execute(json!({"name": "x"}), &ctx).await;
        assert!(!out.success);
        assert!(out.output.contains("has no skills"), "{}", out.output);
    }

    #[tokio::test]
    async fn malformed_and_escaping_skills_are_errors() {
        let (dir, ctx) = context();
        write(dir.path(), "skills/bare/SKILL.md", "# no front matter\n");
        let out = skill_tool().execute(json!({"name": "bare"}), &ctx).await;
        assert!(!out.success);
        assert!(out.output.contains("no front matter"), "{}", out.output);

        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "SKILL.md", "---\nname: out\n---\nsecret\n");
        std::fs::create_dir_all(dir.path().join("skills")).unwrap();
        symlink(outside.path(), dir.path().join("skills/out")).unwrap();
        let out = skill_tool().execute(json!({"name": "out"}), &ctx).await;
        assert!(!out.success);
        assert!(!out.output.contains("secret"));
        assert!(
            out.output.contains("outside the workspace"),
            "{}",
            out.output
        );
    }

    #[tokio::test]
    async fn long_bodies_are_truncated_but_hashed_whole() {
        let (dir, ctx) = context();
        let content = format!(
            "---\nname: big\ndescription: d\n---\n{}",
            "x".repeat(OUTPUT_LIMIT + 10)
        );
        write(dir.path(), "skills/big/SKILL.md", &content);
        let out = skill_tool().execute(json!({"name": "big"}), &ctx).await;
        assert!(out.success);
        assert!(out.output.contains("[truncated:"), "tail");
        assert_eq!(out.evidence.sha256, Some(sha256_hex(content.as_bytes())));
    }

    #[test]
    fn scan_reports_rejects_sorted() {
        let (dir, ctx) = context();
        write(dir.path(), "skills/zeta/SKILL.md", SKILL);
        write(dir.path(), "skills/Bad/SKILL.md", SKILL);
        write(dir.path(), "skills/README.md", "hi");
        write(dir.path(), "skills/.hidden/SKILL.md", SKILL);
        std::fs::create_dir_all(dir.path().join("skills/empty")).unwrap();
        let got = scan_skills(&ctx.workspace).unwrap();
        let summary: Vec<String> = got
            .iter()
            .map(|e| match e {
                SkillEntry::Candidate(n) => format!("ok {n}"),
                SkillEntry::Rejected { path, .. } => format!("no {path}"),
            })
            .collect();
        assert_eq!(
            summary,
            [
                "no skills/Bad",
                "no skills/README.md",
                "no skills/empty",
                "ok zeta"
            ]
        );
    }

    #[test]
    fn spec_is_an_allowed_observation() {
        let tool = skill_tool();
        assert_eq!(tool.spec().name, "skill");
        assert_eq!(tool.spec().effect, EffectClass::Internal);
        assert_eq!(tool.default_permission(), Permission::Allow);
        assert!(jsonschema::validator_for(&tool.spec().parameters).is_ok());
    }
}
