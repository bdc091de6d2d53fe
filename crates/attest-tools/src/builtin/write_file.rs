//! `write_file`: create or overwrite one workspace file.

use super::parse_args;
use crate::{Tool, ToolContext, ToolOutput};
use async_trait::async_trait;
use attest_core::text::sha256_hex;
use attest_protocol::{EffectClass, Evidence, Permission, ToolSpec};
use serde::Deserialize;

pub(crate) struct WriteFile {
    spec: ToolSpec,
}

#[derive(Deserialize)]
struct Args {
    path: String,
    content: String,
}

impl WriteFile {
    pub(crate) fn new() -> Self {
        WriteFile {
            spec: ToolSpec::new(
                "write_file",
                "Create or overwrite a workspace file with the given content, creating parent \
                 directories as needed. To change part of an existing file, prefer edit_file.",
                EffectClass::Mutate,
                serde_json::json!({
                    "type": "object",
                    "properties": {
                        "path": {
                            "type": "string",
                            "description": "File path, relative to the workspace root."
                        },
                        "content": {
                            "type": "string",
                            "description": "The complete new content of the file."
                        }
                    },
                    "required": ["path", "content"],
                    "additionalProperties": false
                }),
            ),
        }
    }
}

#[async_trait]
impl Tool for WriteFile {
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
        let path = match ctx.workspace.resolve_for_tool_write(&args.path) {
            Ok(p) => p,
            Err(e) => return ToolOutput::error(e.to_string()),
        };
        let rel = ctx.workspace.display(&path);
        if path.is_dir() {
            return ToolOutput::error(format!("`{rel}` is a directory; cannot write a file there"));
        }
        let bytes = args.content.as_bytes();
        // Writing a file's own content back changes nothing (`no_effect`).
        let unchanged = tokio::fs::read(&path).await.is_ok_and(|old| old == bytes);
        if let Err(e) = tokio::fs::write(&path, bytes).await {
            return ToolOutput::error(format!("cannot write `{rel}`: {e}"));
        }
        let out = ToolOutput::ok(
            format!("wrote {} bytes to {rel}", bytes.len()),
            Evidence {
                path: Some(rel),
                sha256: Some(sha256_hex(bytes)),
                size_bytes: Some(bytes.len() as u64),
                ..Evidence::default()
            },
        );
        if unchanged {
            return out.with_no_effect();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::test_support::context;
    use serde_json::json;
    use std::os::unix::fs::symlink;

    #[tokio::test]
    async fn writes_and_creates_parents() {
        let (dir, ctx) = context();
        let out = WriteFile::new()
            .execute(json!({"path": "a/b/c.txt", "content": "hi"}), &ctx)
            .await;
        assert!(out.success, "{out:?}");
        assert_eq!(out.output, "wrote 2 bytes to a/b/c.txt");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap(),
            "hi"
        );
        assert_eq!(out.evidence.path.as_deref(), Some("a/b/c.txt"));
        assert_eq!(out.evidence.sha256, Some(sha256_hex(b"hi")));
        assert_eq!(out.evidence.size_bytes, Some(2));
    }

    #[tokio::test]
    async fn rewriting_the_same_content_has_no_effect() {
        let (dir, ctx) = context();
        std::fs::write(dir.path().join("f"), "same").unwrap();
        let out = WriteFile::new()
            .execute(json!({"path": "f", "content": "same"}), &ctx)
            .await;
        assert!(out.success && out.no_effect, "{out:?}");
        let out = WriteFile::new()
            .execute(json!({"path": "f", "content": "other"}), &ctx)
            .await;
        assert!(out.success && !out.no_effect, "{out:?}");
    }

    #[tokio::test]
    async fn overwrites() {
        let (dir, ctx) = context();
        std::fs::write(dir.path().join("f"), "old content").unwrap();
        let out = WriteFile::new()
            .execute(json!({"path": "f", "content": "new"}), &ctx)
            .await;
        assert!(out.success);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("f")).unwrap(),
            "new"
        );
    }

    #[tokio::test]
    async fn escapes_are_refused_and_write_nothing() {
        let (dir, ctx) = context();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("target"), "original").unwrap();
        symlink(outside.path().join("target"), dir.path().join("link")).unwrap();
        symlink(outside.path(), dir.path().join("outdir")).unwrap();
        let abs = outside.path().join("abs.txt");
        for path in [
            "../escaped.txt",
            "link",
            "outdir/new.txt",
            "outdir/sub/new.txt",
            abs.to_str().unwrap(),
        ] {
            let out = WriteFile::new()
                .execute(json!({"path": path, "content": "pwned"}), &ctx)
                .await;
            assert!(!out.success, "{path}");
            assert!(out.output.contains("escapes the workspace root"), "{path}");
        }
        assert_eq!(
            std::fs::read_to_string(outside.path().join("target")).unwrap(),
            "original"
        );
        assert!(!outside.path().join("new.txt").exists());
        assert!(!outside.path().join("sub").exists());
        assert!(!abs.exists());
    }

    #[tokio::test]
    async fn protected_paths_are_refused_with_a_clear_error() {
        let (dir, ctx) = context();
        std::fs::create_dir_all(dir.path().join(".attest")).unwrap();
        std::fs::write(dir.path().join(".attest/attest.db"), "store").unwrap();
        std::fs::create_dir_all(dir.path().join(".git/hooks")).unwrap();
        symlink(dir.path().join(".git/hooks"), dir.path().join("hooks")).unwrap();
        for path in [
            ".attest/attest.db",
            "./.attest/attest.db",
            "attest.toml",
            ".git/hooks/pre-commit",
            ".Git/hooks/pre-commit",
            "hooks/post-checkout",
        ] {
            let out = WriteFile::new()
                .execute(json!({"path": path, "content": "pwned"}), &ctx)
                .await;
            assert!(!out.success, "{path}");
            assert!(
                out.output.contains("which is protected"),
                "{path}: {}",
                out.output
            );
        }
        assert_eq!(
            std::fs::read_to_string(dir.path().join(".attest/attest.db")).unwrap(),
            "store"
        );
        assert!(!dir.path().join("attest.toml").exists());
        assert!(!dir.path().join(".git/hooks/pre-commit").exists());
        assert!(!dir.path().join(".git/hooks/post-checkout").exists());
    }

    #[tokio::test]
    async fn directory_target_is_an_error() {
        let (dir, ctx) = context();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let out = WriteFile::new()
            .execute(json!({"path": "d", "content": "x"}), &ctx)
            .await;
        assert!(!out.success);
        assert!(out.output.contains("is a directory"));
    }
}
