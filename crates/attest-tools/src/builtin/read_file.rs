//! `read_file`: the content of one workspace file, with its hash.

use super::{parse_args, resolve_observed, OUTPUT_LIMIT};
use crate::{Tool, ToolContext, ToolOutput};
use async_trait::async_trait;
use attest_core::text::{read_hashed_head, truncate_str, HashedHead};
use attest_protocol::{EffectClass, Evidence, Permission, ToolSpec};
use serde::Deserialize;

pub(crate) struct ReadFile {
    spec: ToolSpec,
}

#[derive(Deserialize)]
struct Args {
    path: String,
}

impl ReadFile {
    pub(crate) fn new() -> Self {
        ReadFile {
            spec: ToolSpec::new(
                "read_file",
                "Read a text file in the workspace and return its content; files over 64 KiB are \
                 truncated with a note. A missing file is reported as `file not found`.",
                EffectClass::Observe,
                serde_json::json!({
                    "type": "object",
                    "properties": {
                        "path": {
                            "type": "string",
                            "description": "File path, relative to the workspace root."
                        }
                    },
                    "required": ["path"],
                    "additionalProperties": false
                }),
            ),
        }
    }
}

#[async_trait]
impl Tool for ReadFile {
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
        let path = match resolve_observed(&ctx.workspace, &args.path, "file") {
            Ok(p) => p,
            Err(out) => return *out,
        };
        let rel = ctx.workspace.display(&path);
        // One hop to the blocking pool for the whole read: each `tokio::fs`
        // call is a hop of its own, waking threads through the kernel.
        let read = tokio::task::spawn_blocking(move || read_regular(&path)).await;
        let HashedHead {
            head,
            total,
            sha256,
        } = match read {
            Ok(Ok(r)) => r,
            Ok(Err(ReadError::Directory)) => {
                return ToolOutput::error(format!(
                    "`{rel}` is a directory, not a file; use list_dir to see its entries"
                ))
            }
            Ok(Err(ReadError::NotRegular)) => {
                // A FIFO or device would block or never end.
                return ToolOutput::error(format!("`{rel}` is not a regular file"));
            }
            Ok(Err(ReadError::Io(e))) => {
                return ToolOutput::error(format!("cannot read `{rel}`: {e}"))
            }
            Err(e) => return ToolOutput::error(format!("cannot read `{rel}`: {e}")),
        };
        let text = String::from_utf8_lossy(&head);
        let output = if total as usize > OUTPUT_LIMIT {
            let (shown, _) = truncate_str(&text, OUTPUT_LIMIT);
            format!(
                "{shown}\n[truncated: showing the first {} bytes of {total}; the file is {total} bytes]",
                shown.len()
            )
        } else {
            text.into_owned()
        };
        ToolOutput::ok(
            output,
            Evidence {
                path: Some(rel),
                sha256: Some(sha256),
                size_bytes: Some(total),
                ..Evidence::default()
            },
        )
    }
}

enum ReadError {
    Directory,
    NotRegular,
    Io(std::io::Error),
}

impl From<std::io::Error> for ReadError {
    fn from(e: std::io::Error) -> Self {
        ReadError::Io(e)
    }
}

/// Checks that `path` is a regular file, then reads it hashed, keeping
/// only the head.
fn read_regular(path: &std::path::Path) -> Result<HashedHead, ReadError> {
    // A few bytes past the limit, so a multi-byte char cut at the limit is
    // decoded whole or dropped by the char-boundary truncation.
    const KEEP: usize = OUTPUT_LIMIT + 4;
    let meta = std::fs::metadata(path)?;
    if meta.is_dir() {
        return Err(ReadError::Directory);
    }
    if !meta.is_file() {
        return Err(ReadError::NotRegular);
    }
    Ok(read_hashed_head(std::fs::File::open(path)?, KEEP)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::test_support::context;
    use attest_core::text::sha256_hex;
    use serde_json::json;
    use std::os::unix::fs::symlink;

    #[tokio::test]
    async fn reads_content_with_hash_and_size() {
        let (dir, ctx) = context();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/a.txt"), "hello\n").unwrap();
        let out = ReadFile::new()
            .execute(json!({"path": "src/a.txt"}), &ctx)
            .await;
        assert!(out.success, "{out:?}");
        assert!(out.evidence_present);
        assert_eq!(out.output, "hello\n");
        assert_eq!(out.evidence.path.as_deref(), Some("src/a.txt"));
        assert_eq!(out.evidence.sha256, Some(sha256_hex(b"hello\n")));
        assert_eq!(out.evidence.size_bytes, Some(6));
        assert_eq!(out.evidence.absent, None);
    }

    #[tokio::test]
    async fn missing_file_is_an_observed_absence() {
        let (_dir, ctx) = context();
        let out = ReadFile::new()
            .execute(json!({"path": "nope/x.txt"}), &ctx)
            .await;
        assert!(out.success);
        assert!(out.evidence_present);
        assert_eq!(out.output, "file not found: nope/x.txt");
        assert_eq!(out.evidence.absent, Some(true));
        assert_eq!(out.evidence.path.as_deref(), Some("nope/x.txt"));
        assert_eq!(out.evidence.sha256, None);
    }

    #[tokio::test]
    async fn large_file_is_truncated_but_hashed_whole() {
        let (dir, ctx) = context();
        let content = "x".repeat(OUTPUT_LIMIT + 1000);
        std::fs::write(dir.path().join("big.txt"), &content).unwrap();
        let out = ReadFile::new()
            .execute(json!({"path": "big.txt"}), &ctx)
            .await;
        assert!(out.success);
        assert!(out.output.starts_with(&"x".repeat(OUTPUT_LIMIT)));
        assert!(!out.output.starts_with(&"x".repeat(OUTPUT_LIMIT + 1)));
        assert!(
            out.output
                .contains(&format!("the file is {} bytes", content.len())),
            "{}",
            &out.output[OUTPUT_LIMIT..]
        );
        assert_eq!(out.evidence.size_bytes, Some(content.len() as u64));
        assert_eq!(out.evidence.sha256, Some(sha256_hex(content.as_bytes())));
    }

    #[tokio::test]
    async fn truncation_does_not_split_a_char() {
        let (dir, ctx) = context();
        // 'é' is two bytes; with one leading byte, the limit falls inside one.
        let content = format!("a{}", "é".repeat(OUTPUT_LIMIT));
        std::fs::write(dir.path().join("u.txt"), &content).unwrap();
        let out = ReadFile::new()
            .execute(json!({"path": "u.txt"}), &ctx)
            .await;
        assert!(out.success);
        assert!(!out.output.contains('\u{FFFD}'));
    }

    #[tokio::test]
    async fn non_utf8_is_read_lossily() {
        let (dir, ctx) = context();
        std::fs::write(dir.path().join("b.bin"), [0x66, 0xff, 0x67]).unwrap();
        let out = ReadFile::new()
            .execute(json!({"path": "b.bin"}), &ctx)
            .await;
        assert!(out.success);
        assert_eq!(out.output, "f\u{FFFD}g");
        assert_eq!(out.evidence.size_bytes, Some(3));
    }

    #[tokio::test]
    async fn directory_is_an_error() {
        let (dir, ctx) = context();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let out = ReadFile::new().execute(json!({"path": "d"}), &ctx).await;
        assert!(!out.success);
        assert!(out.output.contains("is a directory"), "{}", out.output);
    }

    #[tokio::test]
    async fn a_fifo_is_refused_not_opened() {
        let (dir, ctx) = context();
        let made = std::process::Command::new("mkfifo")
            .arg(dir.path().join("pipe"))
            .status()
            .unwrap();
        assert!(made.success());
        // Opening a FIFO with no writer blocks: the bound turns a hang into
        // a failure, and a writer then frees the blocked thread.
        let Ok(out) = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            ReadFile::new().execute(json!({"path": "pipe"}), &ctx),
        )
        .await
        else {
            drop(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(dir.path().join("pipe")),
            );
            panic!("read_file opened the FIFO and blocked");
        };
        assert!(!out.success);
        assert!(
            out.output.contains("is not a regular file"),
            "{}",
            out.output
        );
    }

    #[tokio::test]
    async fn escapes_are_refused() {
        let (dir, ctx) = context();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s3cret").unwrap();
        symlink(outside.path().join("secret"), dir.path().join("link")).unwrap();
        symlink(outside.path(), dir.path().join("outdir")).unwrap();
        let abs = outside.path().join("secret");
        for path in [
            "../secret",
            "link",
            "outdir/secret",
            "outdir/missing",
            abs.to_str().unwrap(),
        ] {
            let out = ReadFile::new().execute(json!({"path": path}), &ctx).await;
            assert!(!out.success, "{path}: {out:?}");
            assert!(out.output.contains("escapes the workspace root"), "{path}");
            assert!(!out.output.contains("s3cret"));
        }
    }

    #[tokio::test]
    async fn bad_arguments_are_an_error_not_a_panic() {
        let (_dir, ctx) = context();
        let out = ReadFile::new().execute(json!({"path": 3}), &ctx).await;
        assert!(!out.success);
        assert!(out.output.starts_with("invalid arguments"));
    }
}
