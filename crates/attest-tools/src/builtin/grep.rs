//! `grep`: regex search over the workspace, honouring ignore files.

use super::{parse_args, resolve_observed};
use crate::{Tool, ToolContext, ToolOutput, Workspace};
use async_trait::async_trait;
use attest_core::text::truncate_str;
use attest_protocol::{EffectClass, Evidence, Permission, ToolSpec};
use regex::Regex;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Matches listed before the search stops.
const MAX_MATCHES: usize = 200;
/// A matching line is shown up to this many bytes (minified files).
const MAX_LINE: usize = 500;
/// Larger files are skipped, as are files that look binary.
const MAX_FILE: u64 = 10 * 1024 * 1024;
/// How far into a file to look for a NUL byte (the binary test `git` uses).
const BINARY_PROBE: usize = 8192;

pub(crate) struct Grep {
    spec: ToolSpec,
}

#[derive(Deserialize)]
struct Args {
    pattern: String,
    #[serde(default = "dot")]
    path: String,
}

fn dot() -> String {
    ".".to_string()
}

impl Grep {
    pub(crate) fn new() -> Self {
        Grep {
            spec: ToolSpec::new(
                "grep",
                "Search files under a workspace path for lines matching a regular expression \
                 (Rust regex syntax), skipping hidden and git-ignored files. Returns \
                 `path:line:text` for each match, up to 200.",
                EffectClass::Observe,
                serde_json::json!({
                    "type": "object",
                    "properties": {
                        "pattern": {
                            "type": "string",
                            "description": "Regular expression to search for, e.g. `fn main` or `(?i)todo`."
                        },
                        "path": {
                            "type": "string",
                            "description": "File or directory to search, relative to the workspace root. Defaults to `.`."
                        }
                    },
                    "required": ["pattern"],
                    "additionalProperties": false
                }),
            ),
        }
    }
}

#[async_trait]
impl Tool for Grep {
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
        let regex = match Regex::new(&args.pattern) {
            Ok(r) => r,
            Err(e) => return ToolOutput::error(format!("invalid regex: {e}")),
        };
        let path = match resolve_observed(&ctx.workspace, &args.path, "path") {
            Ok(p) => p,
            Err(out) => return *out,
        };
        let workspace = ctx.workspace.clone();
        // Walking and reading files is blocking work.
        match tokio::task::spawn_blocking(move || search(&workspace, &path, &regex)).await {
            Ok(out) => out,
            Err(e) => ToolOutput::error(format!("search failed: {e}")),
        }
    }
}

fn search(workspace: &Workspace, root: &Path, regex: &Regex) -> ToolOutput {
    let mut lines = Vec::new();
    let mut capped = false;
    let mut skipped = 0usize;
    'files: for file in files_under(root) {
        let Some(text) = read_text(&file) else {
            skipped += 1;
            continue;
        };
        let rel = workspace.display(&file);
        for (i, line) in text.lines().enumerate() {
            if !regex.is_match(line) {
                continue;
            }
            if lines.len() == MAX_MATCHES {
                capped = true;
                break 'files;
            }
            let (shown, cut) = truncate_str(line, MAX_LINE);
            let more = if cut { " [line truncated]" } else { "" };
            lines.push(format!("{rel}:{}:{shown}{more}", i + 1));
        }
    }
    let count = lines.len() as u64;
    let mut output = if lines.is_empty() {
        "no matches".to_string()
    } else {
        lines.join("\n")
    };
    if capped {
        output.push_str(&format!(
            "\n[stopped after {MAX_MATCHES} matches; there are more. Narrow the pattern or path.]"
        ));
    }
    if skipped > 0 {
        output.push_str(&format!(
            "\n[skipped {skipped} binary, unreadable or oversized file(s)]"
        ));
    }
    ToolOutput::ok(
        output,
        Evidence {
            path: Some(workspace.display(root)),
            // The number of matches listed (at most MAX_MATCHES).
            match_count: Some(count),
            ..Evidence::default()
        },
    )
}

/// Regular files under `root` (or `root` itself), in a stable order,
/// honouring `.gitignore`/`.ignore` even outside a git repository, skipping
/// hidden entries and the harness's own `.attest/` directory. Symlinks are
/// not followed, so the walk cannot leave the workspace.
fn files_under(root: &Path) -> impl Iterator<Item = PathBuf> {
    ignore::WalkBuilder::new(root)
        .hidden(true)
        .git_ignore(true)
        .require_git(false)
        .git_global(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(|e| e.file_name() != ".attest")
        .build()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .map(ignore::DirEntry::into_path)
}

/// The file as text, or `None` when it is unreadable, too large or binary.
fn read_text(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.len() > MAX_FILE {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
    if bytes[..bytes.len().min(BINARY_PROBE)].contains(&0) {
        return None;
    }
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::test_support::context;
    use serde_json::json;
    use std::os::unix::fs::symlink;

    fn write(dir: &Path, rel: &str, content: &str) {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    #[tokio::test]
    async fn finds_matches_with_paths_and_line_numbers() {
        let (dir, ctx) = context();
        write(
            dir.path(),
            "src/a.rs",
            "fn main() {}\nlet x = 1;\nfn other() {}\n",
        );
        write(dir.path(), "b.txt", "nothing\n");
        let out = Grep::new().execute(json!({"pattern": "^fn "}), &ctx).await;
        assert!(out.success, "{out:?}");
        assert_eq!(
            out.output,
            "src/a.rs:1:fn main() {}\nsrc/a.rs:3:fn other() {}"
        );
        assert_eq!(out.evidence.match_count, Some(2));
        assert_eq!(out.evidence.path.as_deref(), Some("."));
    }

    #[tokio::test]
    async fn path_narrows_the_search() {
        let (dir, ctx) = context();
        write(dir.path(), "a/x.txt", "hit\n");
        write(dir.path(), "b/y.txt", "hit\n");
        let out = Grep::new()
            .execute(json!({"pattern": "hit", "path": "b"}), &ctx)
            .await;
        assert_eq!(out.output, "b/y.txt:1:hit");
        let out = Grep::new()
            .execute(json!({"pattern": "hit", "path": "a/x.txt"}), &ctx)
            .await;
        assert_eq!(out.output, "a/x.txt:1:hit");
        assert_eq!(out.evidence.path.as_deref(), Some("a/x.txt"));
    }

    #[tokio::test]
    async fn skips_ignored_hidden_attest_and_binary_files() {
        let (dir, ctx) = context();
        write(dir.path(), ".gitignore", "target/\n");
        write(dir.path(), "target/out.txt", "needle\n");
        write(dir.path(), ".hidden/h.txt", "needle\n");
        write(dir.path(), ".attest/trace.jsonl", "needle\n");
        std::fs::write(dir.path().join("bin.dat"), b"needle\0\x01").unwrap();
        write(dir.path(), "keep.txt", "needle\n");
        let out = Grep::new()
            .execute(json!({"pattern": "needle"}), &ctx)
            .await;
        assert!(
            out.output.starts_with("keep.txt:1:needle"),
            "{}",
            out.output
        );
        assert_eq!(out.evidence.match_count, Some(1));
        assert!(out.output.contains("skipped 1 binary"), "{}", out.output);
    }

    #[tokio::test]
    async fn does_not_follow_symlinks_out_of_the_workspace() {
        let (dir, ctx) = context();
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "secret.txt", "needle\n");
        symlink(outside.path(), dir.path().join("out")).unwrap();
        let out = Grep::new()
            .execute(json!({"pattern": "needle"}), &ctx)
            .await;
        assert_eq!(out.output, "no matches");
        let out = Grep::new()
            .execute(json!({"pattern": "needle", "path": "out"}), &ctx)
            .await;
        assert!(!out.success);
        assert!(out.output.contains("escapes the workspace root"));
    }

    #[tokio::test]
    async fn zero_matches_is_a_success() {
        let (dir, ctx) = context();
        write(dir.path(), "a.txt", "abc\n");
        let out = Grep::new().execute(json!({"pattern": "xyz"}), &ctx).await;
        assert!(out.success);
        assert!(out.evidence_present);
        assert_eq!(out.output, "no matches");
        assert_eq!(out.evidence.match_count, Some(0));
    }

    #[tokio::test]
    async fn invalid_regex_is_an_error_with_the_reason() {
        let (_dir, ctx) = context();
        let out = Grep::new()
            .execute(json!({"pattern": "(unclosed"}), &ctx)
            .await;
        assert!(!out.success);
        assert!(out.output.starts_with("invalid regex:"), "{}", out.output);
        assert!(out.output.contains("unclosed group"), "{}", out.output);
    }

    #[tokio::test]
    async fn caps_at_200_matches_and_says_so() {
        let (dir, ctx) = context();
        write(dir.path(), "many.txt", &"hit\n".repeat(300));
        let out = Grep::new().execute(json!({"pattern": "hit"}), &ctx).await;
        assert!(out.success);
        assert_eq!(out.evidence.match_count, Some(200));
        assert!(out.output.contains("many.txt:200:hit"));
        assert!(!out.output.contains("many.txt:201:hit"));
        assert!(out.output.contains("stopped after 200 matches"));

        // Exactly 200 is not capped.
        write(dir.path(), "many.txt", &"hit\n".repeat(200));
        let out = Grep::new().execute(json!({"pattern": "hit"}), &ctx).await;
        assert!(!out.output.contains("stopped after"));
    }

    #[tokio::test]
    async fn missing_path_is_an_observed_absence() {
        let (_dir, ctx) = context();
        let out = Grep::new()
            .execute(json!({"pattern": "x", "path": "nope"}), &ctx)
            .await;
        assert!(out.success);
        assert_eq!(out.evidence.absent, Some(true));
        assert_eq!(out.output, "path not found: nope");
    }
}
