//! `edit_file`: replace one exact, unique occurrence of a string in a file.

use super::parse_args;
use crate::{Tool, ToolContext, ToolOutput, WorkspaceError};
use async_trait::async_trait;
use attest_core::text::sha256_hex;
use attest_protocol::{EffectClass, Evidence, Permission, ToolSpec};
use serde::Deserialize;

pub(crate) struct EditFile {
    spec: ToolSpec,
}

#[derive(Deserialize)]
struct Args {
    path: String,
    old_string: String,
    new_string: String,
}

impl EditFile {
    pub(crate) fn new() -> Self {
        EditFile {
            spec: ToolSpec::new(
                "edit_file",
                "Replace one exact occurrence of `old_string` with `new_string` in a workspace \
                 file. `old_string` must occur exactly once; include surrounding lines to make it \
                 unique.",
                EffectClass::Mutate,
                serde_json::json!({
                    "type": "object",
                    "properties": {
                        "path": {
                            "type": "string",
                            "description": "File path, relative to the workspace root."
                        },
                        "old_string": {
                            "type": "string",
                            "description": "Exact text to replace, whitespace included; must occur exactly once."
                        },
                        "new_string": {
                            "type": "string",
                            "description": "Text to put in its place."
                        }
                    },
                    "required": ["path", "old_string", "new_string"],
                    "additionalProperties": false
                }),
            ),
        }
    }
}

#[async_trait]
impl Tool for EditFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn default_permission(&self) -> Permission {
        Permission::Ask
    }

    async fn execute(&self, args: serde_json::Value, ctx: &ToolContext) -> ToolOutput {
        let args: Args = match parse_args(args) {
            Ok(a) => a,
            Err(out) => return *out,
        };
        if args.old_string.is_empty() {
            return ToolOutput::error(
                "old_string is empty; give the exact text to replace (use write_file to create a file)",
            );
        }
        let path = match ctx.workspace.resolve_existing(&args.path) {
            Ok(p) => p,
            Err(WorkspaceError::NotFound { resolved, .. }) => {
                return ToolOutput::error(format!(
                    "file not found: {}; use write_file to create it",
                    ctx.workspace.display(&resolved)
                ))
            }
            Err(e) => return ToolOutput::error(e.to_string()),
        };
        let lexical = attest_core::tool::protected::lexical_join(ctx.workspace.root(), &args.path);
        if let Err(e) = ctx
            .workspace
            .check_unprotected(&args.path, &lexical)
            .and_then(|()| ctx.workspace.check_unprotected(&args.path, &path))
        {
            return ToolOutput::error(e.to_string());
        }
        let rel = ctx.workspace.display(&path);
        if !path.is_file() {
            return ToolOutput::error(format!("`{rel}` is not a regular file"));
        }
        let content = match tokio::fs::read(&path).await {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(s) => s,
                Err(_) => {
                    return ToolOutput::error(format!(
                        "`{rel}` is not valid UTF-8; edit_file edits text files only"
                    ))
                }
            },
            Err(e) => return ToolOutput::error(format!("cannot read `{rel}`: {e}")),
        };
        match count_occurrences(&content, &args.old_string) {
            0 => return ToolOutput::error(format!("old_string not found in `{rel}`")),
            1 => {}
            n => {
                return ToolOutput::error(format!(
                    "old_string occurs {n} times in `{rel}`; add surrounding context so it \
                     matches exactly once"
                ))
            }
        }
        let updated = content.replacen(&args.old_string, &args.new_string, 1);
        let unchanged = updated == content;
        if !unchanged {
            if let Err(e) = tokio::fs::write(&path, updated.as_bytes()).await {
                return ToolOutput::error(format!("cannot write `{rel}`: {e}"));
            }
        }
        let out = ToolOutput::ok(
            format!(
                "edited {rel}: replaced 1 occurrence ({} bytes now)",
                updated.len()
            ),
            Evidence {
                path: Some(rel),
                sha256: Some(sha256_hex(updated.as_bytes())),
                size_bytes: Some(updated.len() as u64),
                ..Evidence::default()
            },
        );
        if unchanged {
            // new_string equals old_string: nothing was edited.
            return out.with_no_effect();
        }
        out
    }
}

/// Occurrences of `needle`, overlapping ones included: in `aaa`, `aa`
/// occurs twice, and replacing "the" one would be a guess.
fn count_occurrences(haystack: &str, needle: &str) -> usize {
    let mut count = 0;
    let mut start = 0;
    while let Some(pos) = haystack[start..].find(needle) {
        count += 1;
        let at = start + pos;
        // Step one char past the match start, staying on a char boundary.
        start = at + haystack[at..].chars().next().map_or(1, char::len_utf8);
        if start > haystack.len() {
            break;
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::test_support::context;
    use serde_json::json;
    use std::os::unix::fs::symlink;

    fn edit(path: &str, old: &str, new: &str) -> serde_json::Value {
        json!({"path": path, "old_string": old, "new_string": new})
    }

    #[test]
    fn counts_overlapping_occurrences() {
        assert_eq!(count_occurrences("aaa", "aa"), 2);
        assert_eq!(count_occurrences("abcabc", "abc"), 2);
        assert_eq!(count_occurrences("éaé", "é"), 2);
        assert_eq!(count_occurrences("abc", "x"), 0);
        assert_eq!(count_occurrences("abc", "abc"), 1);
    }

    #[tokio::test]
    async fn replaces_a_unique_occurrence() {
        let (dir, ctx) = context();
        std::fs::write(dir.path().join("f.rs"), "let a = 1;\nlet b = 2;\n").unwrap();
        let out = EditFile::new()
            .execute(edit("f.rs", "b = 2", "b = 3"), &ctx)
            .await;
        assert!(out.success, "{out:?}");
        let now = std::fs::read_to_string(dir.path().join("f.rs")).unwrap();
        assert_eq!(now, "let a = 1;\nlet b = 3;\n");
        assert_eq!(out.evidence.sha256, Some(sha256_hex(now.as_bytes())));
        assert_eq!(out.evidence.size_bytes, Some(now.len() as u64));
        assert_eq!(out.evidence.path.as_deref(), Some("f.rs"));
    }

    #[tokio::test]
    async fn not_found_and_ambiguous_are_errors_and_change_nothing() {
        let (dir, ctx) = context();
        std::fs::write(dir.path().join("f"), "x = 1\nx = 1\n").unwrap();
        let out = EditFile::new().execute(edit("f", "y", "z"), &ctx).await;
        assert!(!out.success);
        assert!(
            out.output.starts_with("old_string not found"),
            "{}",
            out.output
        );
        let out = EditFile::new()
            .execute(edit("f", "x = 1", "x = 2"), &ctx)
            .await;
        assert!(!out.success);
        assert!(out.output.contains("occurs 2 times"), "{}", out.output);
        assert!(out.output.contains("context"));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("f")).unwrap(),
            "x = 1\nx = 1\n"
        );
    }

    #[tokio::test]
    async fn empty_old_string_and_missing_file_are_errors() {
        let (dir, ctx) = context();
        std::fs::write(dir.path().join("f"), "abc").unwrap();
        let out = EditFile::new().execute(edit("f", "", "z"), &ctx).await;
        assert!(!out.success);
        let out = EditFile::new()
            .execute(edit("missing", "a", "b"), &ctx)
            .await;
        assert!(!out.success);
        assert!(out.output.starts_with("file not found: missing"));
    }

    #[tokio::test]
    async fn protected_paths_are_refused() {
        let (dir, ctx) = context();
        std::fs::create_dir_all(dir.path().join(".git")).unwrap();
        std::fs::write(dir.path().join(".git/config"), "[core]\n").unwrap();
        std::fs::write(dir.path().join("attest.toml"), "[run]\n").unwrap();
        symlink(dir.path().join("attest.toml"), dir.path().join("cfg")).unwrap();
        for (path, old) in [
            (".git/config", "[core]"),
            ("attest.toml", "[run]"),
            ("cfg", "[run]"),
        ] {
            let out = EditFile::new()
                .execute(edit(path, old, "[alias]"), &ctx)
                .await;
            assert!(!out.success, "{path}");
            assert!(
                out.output.contains("which is protected"),
                "{path}: {}",
                out.output
            );
        }
        assert_eq!(
            std::fs::read_to_string(dir.path().join("attest.toml")).unwrap(),
            "[run]\n"
        );
    }

    #[tokio::test]
    async fn symlink_escape_is_refused() {
        let (dir, ctx) = context();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("t"), "secret").unwrap();
        symlink(outside.path().join("t"), dir.path().join("link")).unwrap();
        let out = EditFile::new()
            .execute(edit("link", "secret", "pwned"), &ctx)
            .await;
        assert!(!out.success);
        assert!(out.output.contains("escapes the workspace root"));
        assert_eq!(
            std::fs::read_to_string(outside.path().join("t")).unwrap(),
            "secret"
        );
    }
}
