//! `list_dir`: the entries of one workspace directory.

use super::{parse_args, resolve_observed, OUTPUT_LIMIT};
use crate::{Tool, ToolContext, ToolOutput};
use async_trait::async_trait;
use attest_core::text::truncate_with_note;
use attest_protocol::{EffectClass, Evidence, Permission, ToolSpec};
use serde::Deserialize;

pub(crate) struct ListDir {
    spec: ToolSpec,
}

#[derive(Deserialize)]
struct Args {
    #[serde(default = "dot")]
    path: String,
}

fn dot() -> String {
    ".".to_string()
}

impl ListDir {
    pub(crate) fn new() -> Self {
        ListDir {
            spec: ToolSpec::new(
                "list_dir",
                "List the entries of a workspace directory, sorted, one per line; directories \
                 end with `/`. Lists the workspace root when no path is given.",
                EffectClass::Observe,
                serde_json::json!({
                    "type": "object",
                    "properties": {
                        "path": {
                            "type": "string",
                            "description": "Directory path, relative to the workspace root. Defaults to `.`."
                        }
                    },
                    "required": [],
                    "additionalProperties": false
                }),
            ),
        }
    }
}

#[async_trait]
impl Tool for ListDir {
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
        let path = match resolve_observed(&ctx.workspace, &args.path, "directory") {
            Ok(p) => p,
            Err(out) => return *out,
        };
        let rel = ctx.workspace.display(&path);
        if !path.is_dir() {
            return ToolOutput::error(format!(
                "`{rel}` is not a directory; use read_file to read a file"
            ));
        }
        let mut reader = match tokio::fs::read_dir(&path).await {
            Ok(r) => r,
            Err(e) => return ToolOutput::error(format!("cannot list `{rel}`: {e}")),
        };
        let mut entries = Vec::new();
        loop {
            let entry = match reader.next_entry().await {
                Ok(Some(entry)) => entry,
                Ok(None) => break,
                Err(e) => return ToolOutput::error(format!("cannot list `{rel}`: {e}")),
            };
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_dir = match entry.file_type().await {
                Ok(t) if t.is_dir() => true,
                // A symlink counts as a directory only when it leads to one
                // inside the workspace, the only place the model may go.
                Ok(t) if t.is_symlink() => {
                    let child = path.join(&name);
                    let child = child.to_string_lossy();
                    ctx.workspace
                        .resolve_existing(&child)
                        .is_ok_and(|p| p.is_dir())
                }
                _ => false,
            };
            entries.push(if is_dir { format!("{name}/") } else { name });
        }
        entries.sort();
        let output = if entries.is_empty() {
            "(empty directory)".to_string()
        } else {
            truncate_with_note(&entries.join("\n"), OUTPUT_LIMIT)
        };
        ToolOutput::ok(
            output,
            Evidence {
                path: Some(rel),
                match_count: Some(entries.len() as u64),
                ..Evidence::default()
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::test_support::context;
    use serde_json::json;
    use std::os::unix::fs::symlink;

    #[tokio::test]
    async fn lists_sorted_with_dir_marks() {
        let (dir, ctx) = context();
        std::fs::write(dir.path().join("b.txt"), "").unwrap();
        std::fs::write(dir.path().join("a.txt"), "").unwrap();
        std::fs::create_dir(dir.path().join("c")).unwrap();
        std::fs::write(dir.path().join("c/inner"), "").unwrap();
        symlink(dir.path().join("c"), dir.path().join("d")).unwrap();
        let out = ListDir::new().execute(json!({}), &ctx).await;
        assert!(out.success, "{out:?}");
        assert_eq!(out.output, "a.txt\nb.txt\nc/\nd/");
        assert_eq!(out.evidence.match_count, Some(4));
        assert_eq!(out.evidence.path.as_deref(), Some("."));

        let out = ListDir::new().execute(json!({"path": "c"}), &ctx).await;
        assert_eq!(out.output, "inner");
        assert_eq!(out.evidence.path.as_deref(), Some("c"));
    }

    #[tokio::test]
    async fn symlink_to_outside_dir_is_not_marked_as_dir() {
        let (dir, ctx) = context();
        let outside = tempfile::tempdir().unwrap();
        symlink(outside.path(), dir.path().join("out")).unwrap();
        let out = ListDir::new().execute(json!({"path": "."}), &ctx).await;
        assert_eq!(out.output, "out");
        let out = ListDir::new().execute(json!({"path": "out"}), &ctx).await;
        assert!(!out.success);
        assert!(out.output.contains("escapes the workspace root"));
    }

    #[tokio::test]
    async fn empty_directory() {
        let (_dir, ctx) = context();
        let out = ListDir::new().execute(json!({"path": "."}), &ctx).await;
        assert!(out.success);
        assert_eq!(out.output, "(empty directory)");
        assert_eq!(out.evidence.match_count, Some(0));
    }

    #[tokio::test]
    async fn missing_directory_is_an_observed_absence() {
        let (_dir, ctx) = context();
        let out = ListDir::new().execute(json!({"path": "gone"}), &ctx).await;
        assert!(out.success);
        assert_eq!(out.output, "directory not found: gone");
        assert_eq!(out.evidence.absent, Some(true));
        assert_eq!(out.evidence.match_count, None);
    }

    #[tokio::test]
    async fn a_file_and_an_escape_are_errors() {
        let (dir, ctx) = context();
        std::fs::write(dir.path().join("f"), "").unwrap();
        let out = ListDir::new().execute(json!({"path": "f"}), &ctx).await;
        assert!(!out.success);
        assert!(out.output.contains("not a directory"));
        let out = ListDir::new().execute(json!({"path": ".."}), &ctx).await;
        assert!(!out.success);
        assert!(out.output.contains("escapes the workspace root"));
    }
}
