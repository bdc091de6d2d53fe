//! Workspace bootstrap (SPEC D4): the default `AGENTS.md`, `SOUL.md`,
//! `USER.md`, example skill and `attest.toml`, each carrying a policy marker.
//!
//! The files are the user's. Bootstrap creates what is missing and fills
//! what is empty, and never writes over anything else. Every default text
//! ever shipped stays in [`DEFAULT_TEXTS`], so a file can be classified as
//! the current default, an older default (byte for byte: safe to replace on
//! request) or the user's own (never touched).

use super::workspace_files::{open_workspace, ContextError};
use crate::tool::WorkspaceError;
use serde::Serialize;
use std::io::Write;
use std::path::Path;

/// The policy version of the current default texts.
pub const POLICY_VERSION: &str = "2026.11.1";

/// Files bigger than this are never a default: not read for comparison.
const MAX_COMPARED_BYTES: u64 = 1024 * 1024;

/// One default text of one file, as shipped in one policy version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefaultText {
    /// Workspace-relative path.
    pub path: &'static str,
    pub version: &'static str,
    pub content: &'static str,
}

/// Whether a missing file is something to create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Presence {
    /// Created by `init` whenever missing.
    Required,
    /// The example skill: created with `skills/` on first bootstrap; once
    /// `skills/` exists, its absence is the user's choice.
    Example,
}

/// The managed files, in the order they are reported.
const MANAGED: [(&str, Presence); 5] = [
    ("AGENTS.md", Presence::Required),
    ("SOUL.md", Presence::Required),
    ("USER.md", Presence::Required),
    ("skills/example/SKILL.md", Presence::Example),
    ("attest.toml", Presence::Required),
];

/// Every default text, oldest first within a file. The last one of a file is
/// its current default. Never edit a shipped entry: add a new version, so
/// workspaces holding the old text can be recognised and migrated.
pub const DEFAULT_TEXTS: &[DefaultText] = &[
    DefaultText {
        path: "AGENTS.md",
        version: "2026.10.1",
        content: AGENTS_2026_10_1,
    },
    DefaultText {
        path: "AGENTS.md",
        version: "2026.11.1",
        content: AGENTS_2026_11_1,
    },
    DefaultText {
        path: "SOUL.md",
        version: "2026.11.1",
        content: SOUL_2026_11_1,
    },
    DefaultText {
        path: "USER.md",
        version: "2026.11.1",
        content: USER_2026_11_1,
    },
    DefaultText {
        path: "skills/example/SKILL.md",
        version: "2026.11.1",
        content: EXAMPLE_SKILL_2026_11_1,
    },
    DefaultText {
        path: "attest.toml",
        version: "2026.11.1",
        content: ATTEST_TOML_2026_11_1,
    },
];

const AGENTS_2026_10_1: &str = "\
<!-- attest-default AGENTS.md policy 2026.10.1 -->
# Project instructions

## Commands
- Build: `<build command>`
- Test: `<test command>`

## Style
- <code style and conventions>
";

const AGENTS_2026_11_1: &str = "\
<!-- attest-default AGENTS.md policy 2026.11.1 -->
<!--
This file is yours: attest adds it to the context of every run and never
overwrites it. It is user-owned context, not a security policy: permissions,
approvals and completion checks are enforced by attest in code, whatever this
file says. Replace the placeholders below and delete what does not apply.
-->
# Project instructions

## Commands
- Build: `<build command>`
- Test: `<test command>`
- Lint and format: `<lint command>`

## Files
- `<directory>/`: <what lives there>
- Do not edit: <generated files, vendored code>

## Style
- <language version, formatting, naming>
- <commit message format>

## Done means
- <what a finished change includes here: tests pass, docs updated, …>
";

const SOUL_2026_11_1: &str = "\
<!-- attest-default SOUL.md policy 2026.11.1 -->
# Tone

- Be direct and technically precise; no filler, no flattery.
- Keep answers short; give details when asked or when they matter.
- Answer in the language the user writes in.
";

const USER_2026_11_1: &str = "\
<!-- attest-default USER.md policy 2026.11.1 -->
# About the user

Facts about you that help with your work here. Fill in what you like and
delete the rest.

- Name: <name>
- Role: <e.g. backend developer>
- Languages: <e.g. English, German>
- Time zone: <e.g. Europe/Berlin>
- Preferences: <e.g. small commits, ask before adding dependencies>
";

const EXAMPLE_SKILL_2026_11_1: &str = "\
---
name: example
description: Example of the SKILL.md format; load it only to see how a skill is written.
---
<!-- attest-default skills/example/SKILL.md policy 2026.11.1 -->
# Example skill

A skill holds the know-how for one kind of task: steps, commands, URLs, hosts.
The model sees only each skill's name and description, and loads the body with
the `skill` tool when a task matches.

To add one, create `skills/<name>/SKILL.md` with `name` (the directory name:
lowercase letters, digits, `-`, `_`) and a one-line `description` of when to
use it, then write the instructions below the front matter.
";

const ATTEST_TOML_2026_11_1: &str = "\
# attest-default attest.toml policy 2026.11.1
# attest settings for this workspace. Flags and environment variables take
# precedence over this file. While this file exists, the user config
# (~/.config/attest/config.toml) is not read.
# To use a setting, remove the `#` in front of it.

[run]
# Evidence a `completed` run needs: answer, observe, mutate or deliver.
#expect = \"answer\"
#max_steps = 20
#max_corrections = 1
#stream = true
#timeout_secs = 600

[provider]
# openai or anthropic.
#name = \"openai\"
#model = \"<model name>\"
#base_url = \"https://api.openai.com/v1\"
#api_key_env = \"OPENAI_API_KEY\"
#max_tokens = 4096
#temperature = 0.2
#request_timeout_secs = 300
# native, text (ReAct) or auto (text when tool_calling = false).
#protocol = \"auto\"
#tool_calling = true

[retry]
#max_retries = 3
#initial_backoff_ms = 500
#max_backoff_ms = 30000

[permissions]
# allow, ask or deny, per tool.
#read_file = \"allow\"
#write_file = \"ask\"
#shell = \"ask\"

# A tool of your own: a program that gets the arguments as JSON on stdin.
#[[tools]]
#name = \"send_message\"
#description = \"Send a chat message\"
#effect = \"deliver\"
#command = [\"python3\", \"send.py\"]
#evidence = \"/message_id\"
";

/// All default texts shipped for `path`, oldest first.
pub fn defaults_for(path: &str) -> impl Iterator<Item = &'static DefaultText> + '_ {
    DEFAULT_TEXTS.iter().filter(move |d| d.path == path)
}

/// The current default text of `path`.
pub fn current_default(path: &str) -> Option<&'static DefaultText> {
    defaults_for(path).last()
}

/// The paths `init` manages, in report order.
pub fn managed_paths() -> impl Iterator<Item = &'static str> {
    MANAGED.iter().map(|(p, _)| *p)
}

/// What a managed file is now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum FileStatus {
    Missing,
    /// Exists with zero bytes: `init` may fill it.
    Empty,
    /// Byte for byte the current default.
    Current {
        version: &'static str,
    },
    /// Byte for byte an older default: `init --migrate` may replace it.
    Outdated {
        version: &'static str,
        current: &'static str,
    },
    /// Anything else: the user's own. `based_on` is the version named by its
    /// policy marker, if it kept one.
    Customized {
        based_on: Option<String>,
    },
    /// A symlink or something other than a regular file: never touched.
    Unmanaged {
        reason: String,
    },
}

/// One managed file and its status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileReport {
    pub path: &'static str,
    pub status: FileStatus,
}

/// What `init` would do to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Create,
    Fill,
    /// Only with `--migrate`.
    Migrate,
    Keep,
}

impl FileReport {
    /// Missing, empty or an older default: `doctor` flags it.
    pub fn needs_attention(&self) -> bool {
        matches!(
            self.status,
            FileStatus::Missing | FileStatus::Empty | FileStatus::Outdated { .. }
        )
    }

    /// What `init` (or `init --migrate`, when `migrate`) would do.
    pub fn action(&self, migrate: bool) -> Action {
        match self.status {
            FileStatus::Missing => Action::Create,
            FileStatus::Empty => Action::Fill,
            FileStatus::Outdated { .. } if migrate => Action::Migrate,
            _ => Action::Keep,
        }
    }
}

/// The status of every managed file under `root`. The example skill is
/// reported only when present or when `skills/` does not exist yet.
pub fn inspect(root: &Path) -> Result<Vec<FileReport>, ContextError> {
    let workspace = open_workspace(root)?;
    let skills_exist = std::fs::symlink_metadata(workspace.root().join("skills")).is_ok();
    let mut reports = Vec::new();
    for (path, presence) in MANAGED {
        let status = classify(&workspace, path)?;
        if presence == Presence::Example && status == FileStatus::Missing && skills_exist {
            continue;
        }
        reports.push(FileReport { path, status });
    }
    Ok(reports)
}

/// The status of one managed file.
fn classify(
    workspace: &crate::tool::Workspace,
    path: &'static str,
) -> Result<FileStatus, ContextError> {
    let io = |source| ContextError::Io {
        path: path.to_string(),
        source,
    };
    let resolved = match workspace.resolve_existing(path) {
        Ok(p) => p,
        Err(WorkspaceError::NotFound { .. }) => return Ok(FileStatus::Missing),
        Err(WorkspaceError::Escape { .. } | WorkspaceError::DanglingSymlink { .. }) => {
            return Ok(FileStatus::Unmanaged {
                reason: "a symlink leading outside the workspace or nowhere".into(),
            })
        }
        Err(WorkspaceError::Io { source, .. }) => return Err(io(source)),
        // `Protected` comes only from write checks, never from this lookup.
        Err(e @ (WorkspaceError::InvalidRoot { .. } | WorkspaceError::Protected { .. })) => {
            return Err(io(std::io::Error::other(e.to_string())))
        }
    };
    let link = std::fs::symlink_metadata(workspace.root().join(path)).map_err(io)?;
    if link.file_type().is_symlink() {
        // Writing through a link would change a file elsewhere.
        return Ok(FileStatus::Unmanaged {
            reason: "a symlink".into(),
        });
    }
    let meta = std::fs::metadata(&resolved).map_err(io)?;
    if !meta.is_file() {
        return Ok(FileStatus::Unmanaged {
            reason: "not a regular file".into(),
        });
    }
    if meta.len() == 0 {
        return Ok(FileStatus::Empty);
    }
    if meta.len() > MAX_COMPARED_BYTES {
        return Ok(FileStatus::Customized { based_on: None });
    }
    let bytes = std::fs::read(&resolved).map_err(io)?;
    Ok(status_of(path, &bytes))
}

/// Classifies a non-empty file's bytes against the default texts.
fn status_of(path: &'static str, bytes: &[u8]) -> FileStatus {
    let current = current_default(path)
        .map(|d| d.version)
        .unwrap_or(POLICY_VERSION);
    for default in defaults_for(path) {
        if default.content.as_bytes() == bytes {
            return if default.version == current {
                FileStatus::Current {
                    version: default.version,
                }
            } else {
                FileStatus::Outdated {
                    version: default.version,
                    current,
                }
            };
        }
    }
    FileStatus::Customized {
        based_on: marker_version(path, &String::from_utf8_lossy(bytes)),
    }
}

/// The version in a file's `attest-default <path> policy <version>` marker.
pub fn marker_version(path: &str, text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (_, after) = line.split_once("attest-default ")?;
        let mut words = after.split_whitespace();
        if words.next()? != path || words.next()? != "policy" {
            return None;
        }
        words.next().map(str::to_string)
    })
}

/// A unified diff from the file's older default to the current one; `None`
/// unless the report says the file is an outdated default.
pub fn migration_diff(report: &FileReport) -> Option<String> {
    let FileStatus::Outdated { version, current } = report.status else {
        return None;
    };
    let old = defaults_for(report.path).find(|d| d.version == version)?;
    let new = current_default(report.path)?;
    Some(
        similar::TextDiff::from_lines(old.content, new.content)
            .unified_diff()
            .context_radius(3)
            .header(
                &format!("{} (default {version})", report.path),
                &format!("{} (default {current})", report.path),
            )
            .to_string(),
    )
}

/// What [`apply`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Applied {
    Created {
        version: &'static str,
    },
    Filled {
        version: &'static str,
    },
    Migrated {
        from: &'static str,
        to: &'static str,
    },
    /// Nothing written; the file's status at the time of the check.
    Unchanged {
        status: FileStatus,
    },
}

/// Brings one managed file to its current default where that is allowed:
/// creates it if missing, fills it if empty, and, only when `migrate`,
/// replaces an older default. The status is checked again right before
/// writing, so a file edited since [`inspect`] is left alone.
pub fn apply(root: &Path, path: &str, migrate: bool) -> Result<Applied, ContextError> {
    let workspace = open_workspace(root)?;
    let not_managed = || ContextError::NotManaged {
        path: path.to_string(),
    };
    let Some(&(path, _)) = MANAGED.iter().find(|(p, _)| *p == path) else {
        return Err(not_managed());
    };
    let default = current_default(path).ok_or_else(not_managed)?;
    let status = classify(&workspace, path)?;
    let write_err = |source| ContextError::Write {
        path: path.to_string(),
        source,
    };
    let outcome = match (status, migrate) {
        (FileStatus::Missing, _) => {
            let target = workspace
                .resolve_for_write(path)
                .map_err(|e| ContextError::Write {
                    path: path.to_string(),
                    source: std::io::Error::other(e.to_string()),
                })?;
            // create_new: never replaces a file (or follows a link) that
            // appeared since the check.
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&target)
            {
                Ok(mut file) => {
                    file.write_all(default.content.as_bytes())
                        .map_err(write_err)?;
                    Applied::Created {
                        version: default.version,
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Applied::Unchanged {
                    status: classify(&workspace, path)?,
                },
                Err(e) => return Err(write_err(e)),
            }
        }
        (FileStatus::Empty, _) => {
            let target = workspace.root().join(path);
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .open(&target)
                .map_err(write_err)?;
            // Written to since the check: it is the user's now.
            if file.metadata().map_err(write_err)?.len() != 0 {
                Applied::Unchanged {
                    status: classify(&workspace, path)?,
                }
            } else {
                file.write_all(default.content.as_bytes())
                    .map_err(write_err)?;
                Applied::Filled {
                    version: default.version,
                }
            }
        }
        (FileStatus::Outdated { version, current }, true) => {
            let old = defaults_for(path)
                .find(|d| d.version == version)
                .map(|d| d.content)
                .unwrap_or_default();
            replace_if_unchanged(&workspace.root().join(path), old, default.content)
                .map_err(write_err)?;
            Applied::Migrated {
                from: version,
                to: current,
            }
        }
        (status, _) => Applied::Unchanged { status },
    };
    Ok(outcome)
}

/// Replaces `target` with `new` through a temporary file and a rename, so a
/// crash leaves either the old or the new text, never half of one. The file
/// is compared with `old` once more just before the rename.
fn replace_if_unchanged(target: &Path, old: &str, new: &str) -> std::io::Result<()> {
    let dir = target.parent().unwrap_or(Path::new("."));
    let file_name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{file_name}.attest-migrate-{}",
        std::process::id()
    ));
    let result = (|| {
        let permissions = std::fs::metadata(target)?.permissions();
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        file.write_all(new.as_bytes())?;
        file.sync_all()?;
        std::fs::set_permissions(&tmp, permissions)?;
        if std::fs::read(target)? != old.as_bytes() {
            return Err(std::io::Error::other(
                "the file changed while migrating; left as it is",
            ));
        }
        std::fs::rename(&tmp, target)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn statuses(root: &Path) -> Vec<(&'static str, FileStatus)> {
        inspect(root)
            .unwrap()
            .into_iter()
            .map(|r| (r.path, r.status))
            .collect()
    }

    fn init(root: &Path) -> Vec<Applied> {
        managed_paths()
            .filter(|p| inspect(root).unwrap().iter().any(|r| r.path == *p))
            .map(|p| apply(root, p, false).unwrap())
            .collect()
    }

    fn current(path: &str) -> FileStatus {
        FileStatus::Current {
            version: current_default(path).unwrap().version,
        }
    }

    #[test]
    fn every_default_carries_its_own_marker_and_versions_are_ordered() {
        for d in DEFAULT_TEXTS {
            assert_eq!(
                marker_version(d.path, d.content).as_deref(),
                Some(d.version),
                "{} {}",
                d.path,
                d.version
            );
        }
        for path in managed_paths() {
            let versions: Vec<&str> = defaults_for(path).map(|d| d.version).collect();
            assert!(!versions.is_empty(), "{path}");
            let mut unique = versions.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(versions.len(), unique.len(), "{path}: duplicate versions");
            // Two versions with one text would make the status ambiguous.
            for (i, a) in defaults_for(path).enumerate() {
                for b in defaults_for(path).skip(i + 1) {
                    assert_ne!(a.content, b.content, "{path}");
                }
            }
        }
        assert_eq!(
            current_default("AGENTS.md").unwrap().version,
            POLICY_VERSION
        );
        // Something to migrate from.
        assert!(defaults_for("AGENTS.md").count() >= 2);
    }

    #[test]
    fn defaults_do_not_restate_the_runtime_invariants() {
        let agents = current_default("AGENTS.md").unwrap().content;
        assert!(agents.contains("not a security policy"));
        for d in DEFAULT_TEXTS {
            let lower = d.content.to_lowercase();
            for phrase in [
                "source of truth",
                "tool result",
                "not verified",
                "observation",
            ] {
                assert!(!lower.contains(phrase), "{} says {phrase:?}", d.path);
            }
        }
    }

    #[test]
    fn the_example_skill_is_a_valid_skill() {
        let dir = tempfile::tempdir().unwrap();
        init(dir.path());
        let catalog = crate::context::skills::SkillCatalog::load(dir.path());
        assert_eq!(catalog.problems, Vec::<String>::new());
        assert_eq!(catalog.names(), ["example"]);
    }

    #[test]
    fn init_creates_everything_then_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let before = statuses(dir.path());
        assert!(
            before.iter().all(|(_, s)| *s == FileStatus::Missing),
            "{before:?}"
        );
        assert_eq!(before.len(), 5);
        let done = init(dir.path());
        assert!(
            done.iter().all(|a| matches!(a, Applied::Created { .. })),
            "{done:?}"
        );
        for path in managed_paths() {
            let text = std::fs::read_to_string(dir.path().join(path)).unwrap();
            assert_eq!(text, current_default(path).unwrap().content);
        }
        let after = statuses(dir.path());
        for (path, status) in &after {
            assert_eq!(*status, current(path));
        }
        let again = init(dir.path());
        assert!(
            again.iter().all(|a| matches!(a, Applied::Unchanged { .. })),
            "{again:?}"
        );
    }

    #[test]
    fn classification_of_user_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        init(root);
        let old = defaults_for("AGENTS.md").next().unwrap();
        std::fs::write(root.join("AGENTS.md"), old.content).unwrap();
        // Marker kept, text edited.
        let soul = format!(
            "{}- Use British spelling.\n",
            current_default("SOUL.md").unwrap().content
        );
        std::fs::write(root.join("SOUL.md"), &soul).unwrap();
        // No marker at all.
        std::fs::write(root.join("USER.md"), "I am Ana.\n").unwrap();
        std::fs::write(root.join("attest.toml"), "").unwrap();
        let got = statuses(root);
        assert_eq!(
            got,
            [
                (
                    "AGENTS.md",
                    FileStatus::Outdated {
                        version: old.version,
                        current: POLICY_VERSION
                    }
                ),
                (
                    "SOUL.md",
                    FileStatus::Customized {
                        based_on: Some(POLICY_VERSION.into())
                    }
                ),
                ("USER.md", FileStatus::Customized { based_on: None }),
                (
                    "skills/example/SKILL.md",
                    current("skills/example/SKILL.md")
                ),
                ("attest.toml", FileStatus::Empty),
            ]
        );
        let reports = inspect(root).unwrap();
        let flagged: Vec<&str> = reports
            .iter()
            .filter(|r| r.needs_attention())
            .map(|r| r.path)
            .collect();
        assert_eq!(flagged, ["AGENTS.md", "attest.toml"]);
        assert_eq!(reports[0].action(false), Action::Keep);
        assert_eq!(reports[0].action(true), Action::Migrate);
        assert_eq!(reports[1].action(true), Action::Keep);
        assert_eq!(reports[4].action(false), Action::Fill);
    }

    #[test]
    fn a_trailing_byte_makes_a_default_customized() {
        let old = defaults_for("AGENTS.md").next().unwrap();
        let edited = format!("{} ", old.content);
        assert_eq!(
            status_of("AGENTS.md", edited.as_bytes()),
            FileStatus::Customized {
                based_on: Some(old.version.into())
            }
        );
    }

    #[test]
    fn migrate_replaces_only_outdated_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        init(root);
        let old = defaults_for("AGENTS.md").next().unwrap();
        std::fs::write(root.join("AGENTS.md"), old.content).unwrap();
        std::fs::write(root.join("USER.md"), "mine\n").unwrap();

        let report = &inspect(root).unwrap()[0];
        let diff = migration_diff(report).unwrap();
        assert!(diff.contains("--- AGENTS.md (default 2026.10.1)"), "{diff}");
        assert!(diff.contains("+++ AGENTS.md (default 2026.11.1)"), "{diff}");
        assert!(
            diff.contains("+- Lint and format: `<lint command>`"),
            "{diff}"
        );
        assert!(migration_diff(&inspect(root).unwrap()[2]).is_none());

        // Without migrate, an outdated default is kept.
        assert!(matches!(
            apply(root, "AGENTS.md", false).unwrap(),
            Applied::Unchanged { .. }
        ));
        assert_eq!(
            std::fs::read_to_string(root.join("AGENTS.md")).unwrap(),
            old.content
        );

        assert_eq!(
            apply(root, "AGENTS.md", true).unwrap(),
            Applied::Migrated {
                from: old.version,
                to: POLICY_VERSION
            }
        );
        assert_eq!(
            std::fs::read_to_string(root.join("AGENTS.md")).unwrap(),
            current_default("AGENTS.md").unwrap().content
        );
        assert!(matches!(
            apply(root, "USER.md", true).unwrap(),
            Applied::Unchanged { .. }
        ));
        assert_eq!(
            std::fs::read_to_string(root.join("USER.md")).unwrap(),
            "mine\n"
        );
        // No temporary files left behind.
        let leftovers: Vec<_> = std::fs::read_dir(root)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains("attest-migrate"))
            .collect();
        assert!(leftovers.is_empty());
    }

    #[test]
    fn symlinks_are_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let old = defaults_for("AGENTS.md").next().unwrap();
        std::fs::write(outside.path().join("a.md"), old.content).unwrap();
        symlink(outside.path().join("a.md"), dir.path().join("AGENTS.md")).unwrap();
        // Dangling: create_new must not create the target through it.
        symlink(outside.path().join("none.md"), dir.path().join("SOUL.md")).unwrap();
        std::fs::write(dir.path().join("inner.md"), "").unwrap();
        symlink(dir.path().join("inner.md"), dir.path().join("USER.md")).unwrap();
        let got = statuses(dir.path());
        for (path, status) in &got[..3] {
            assert!(
                matches!(status, FileStatus::Unmanaged { .. }),
                "{path}: {status:?}"
            );
        }
        for path in ["AGENTS.md", "SOUL.md", "USER.md"] {
            assert!(matches!(
                apply(dir.path(), path, true).unwrap(),
                Applied::Unchanged { .. }
            ));
        }
        assert_eq!(
            std::fs::read_to_string(outside.path().join("a.md")).unwrap(),
            old.content
        );
        assert!(!outside.path().join("none.md").exists());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("inner.md")).unwrap(),
            ""
        );
    }

    #[test]
    fn skills_dir_escaping_is_not_written_into() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        symlink(outside.path(), dir.path().join("skills")).unwrap();
        let got = statuses(dir.path());
        assert!(matches!(got[3].1, FileStatus::Unmanaged { .. }), "{got:?}");
        assert!(matches!(
            apply(dir.path(), "skills/example/SKILL.md", false).unwrap(),
            Applied::Unchanged { .. }
        ));
        assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
    }

    #[test]
    fn a_deleted_example_skill_stays_deleted() {
        let dir = tempfile::tempdir().unwrap();
        init(dir.path());
        std::fs::remove_dir_all(dir.path().join("skills/example")).unwrap();
        let got = statuses(dir.path());
        assert!(got.iter().all(|(p, _)| *p != "skills/example/SKILL.md"));
        assert!(inspect(dir.path())
            .unwrap()
            .iter()
            .all(|r| !r.needs_attention()));
    }

    #[test]
    fn directories_are_unmanaged_and_unknown_paths_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("AGENTS.md")).unwrap();
        assert!(matches!(
            statuses(dir.path())[0].1,
            FileStatus::Unmanaged { .. }
        ));
        assert!(apply(dir.path(), "../x", false).is_err());
        assert!(apply(dir.path(), "README.md", false).is_err());
    }
}
