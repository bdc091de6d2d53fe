//! `shell`: run a command line with `sh -c` in the workspace root, inside
//! the run's sandbox when it has one.

use super::parse_args;
use crate::process::{self, describe_status, RunResult};
use crate::snapshot::{Changes, Snapshot, ENTRY_LIMIT};
use crate::{Sandbox, Tool, ToolContext, ToolOutput};
use async_trait::async_trait;
use attest_core::policy::{shell_command_is_read_only, ShellContext};
use attest_core::text::captured_text;
use attest_protocol::{DataSource, EffectClass, ErrorType, Evidence, Permission, ToolSpec};
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Bytes kept of each of stdout and stderr.
const STREAM_LIMIT: usize = 32 * 1024;
const TIMEOUT: Duration = Duration::from_secs(120);

pub(crate) struct Shell {
    spec: ToolSpec,
    /// Where commands run; `None` runs them unconfined (tests,
    /// `SandboxMode::Off`).
    sandbox: Option<Arc<Sandbox>>,
}

#[derive(Deserialize)]
struct Args {
    command: String,
}

impl Shell {
    pub(crate) fn new(sandbox: Option<Arc<Sandbox>>) -> Self {
        Shell {
            sandbox,
            spec: ToolSpec::new(
                "shell",
                "Run a shell command (`sh -c`) in the workspace root and return its stdout and \
                 stderr. A non-zero exit status is a failure; the command is killed after 120 \
                 seconds and gets no stdin.",
                EffectClass::Mutate,
                serde_json::json!({
                    "type": "object",
                    "properties": {
                        "command": {
                            "type": "string",
                            "description": "The command line, e.g. `cargo test 2>&1 | tail -n 20`."
                        }
                    },
                    "required": ["command"],
                    "additionalProperties": false
                }),
            ),
        }
    }
}

#[async_trait]
impl Tool for Shell {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn default_permission(&self) -> Permission {
        Permission::Ask
    }

    fn timeout(&self) -> Duration {
        TIMEOUT
    }

    fn data_source(&self) -> DataSource {
        DataSource::Command
    }

    async fn execute(&self, args: serde_json::Value, ctx: &ToolContext) -> ToolOutput {
        let args: Args = match parse_args(args) {
            Ok(a) => a,
            Err(out) => return *out,
        };
        // Effect is judged per call (SPEC A3): a command the policy
        // classifies read-only observes; any other is credited only with
        // the workspace paths it actually changed.
        let shell_ctx = ShellContext::new(
            ctx.workspace.root(),
            ctx.env.get("PATH").map(|p| p.to_os_string()),
        );
        if shell_command_is_read_only(&args.command, &shell_ctx) {
            return self.run_command(&args.command, ctx).await.observed_only();
        }
        let root = ctx.workspace.root().to_path_buf();
        let before = snapshot_before(root.clone()).await;
        let out = self.run_command(&args.command, ctx).await;
        let (Some(before), true) = (before, out.success) else {
            return out;
        };
        let Some(changes) = changes_after(root, before).await else {
            return out;
        };
        let idle = changes.changes.is_empty();
        let out = ToolOutput {
            evidence: Evidence {
                changes: Some(changes.changes),
                snapshot_truncated: changes.truncated.then_some(true),
                ..out.evidence
            },
            ..out
        };
        if idle {
            return out.with_no_effect();
        }
        out
    }
}

/// The snapshot before a command, taken off the async threads; `None` if
/// the blocking task failed.
async fn snapshot_before(root: PathBuf) -> Option<Snapshot> {
    tokio::task::spawn_blocking(move || Snapshot::take(&root, ENTRY_LIMIT))
        .await
        .ok()
}

/// What changed since `before`, off the async threads.
async fn changes_after(root: PathBuf, before: Snapshot) -> Option<Changes> {
    tokio::task::spawn_blocking(move || before.changes_since(&root, ENTRY_LIMIT))
        .await
        .ok()
}

impl Shell {
    async fn run_command(&self, command: &str, ctx: &ToolContext) -> ToolOutput {
        let cmd = match process::tool_command(ctx, self.sandbox.as_deref(), "sh", &["-c", command])
        {
            Ok(cmd) => cmd,
            Err(e) => {
                return ToolOutput::error(format!("the sandbox could not be set up: {e}"))
                    .with_error_type(ErrorType::SpawnFailed)
            }
        };
        // The registry enforces `timeout()`; dropping the run kills the
        // command's whole process group.
        let finished = match process::run(cmd, None, None, STREAM_LIMIT).await {
            RunResult::Finished(f) => f,
            RunResult::TimedOut => {
                return ToolOutput::timeout(format!("timed out after {} s", TIMEOUT.as_secs()))
            }
            RunResult::SpawnFailed(e) => {
                return ToolOutput::error(format!("could not start `sh`: {e}"))
                    .with_error_type(ErrorType::SpawnFailed)
            }
            RunResult::WaitFailed(e) => {
                return ToolOutput::error(format!("lost track of the command: {e}"))
            }
        };
        let stdout = captured_text(&finished.stdout, finished.stdout_total, STREAM_LIMIT);
        let stderr = captured_text(&finished.stderr, finished.stderr_total, STREAM_LIMIT);
        let evidence = Evidence {
            exit_code: finished.status.code(),
            ..Evidence::default()
        };
        if finished.status.success() {
            let output = match (stdout.is_empty(), stderr.is_empty()) {
                (true, true) => "(command succeeded with no output)".to_string(),
                (false, true) => stdout,
                (true, false) => format!("[stderr]\n{stderr}"),
                (false, false) => format!("{stdout}\n[stderr]\n{stderr}"),
            };
            return ToolOutput::ok(output, evidence);
        }
        let mut output = format!("command exited with {}", describe_status(&finished.status));
        if !stdout.is_empty() {
            output.push_str(&format!("\n[stdout]\n{stdout}"));
        }
        if !stderr.is_empty() {
            output.push_str(&format!("\n[stderr]\n{stderr}"));
        }
        if let Some(note) = sandbox_note(self.sandbox.as_deref(), &stderr) {
            output.push_str(note);
        }
        ToolOutput {
            evidence,
            ..ToolOutput::error(output).with_error_type(ErrorType::NonZeroExit)
        }
    }
}

/// A line telling the model why a write or connection failed, when the
/// failure looks like the sandbox's doing: otherwise it tends to retry
/// with `sudo` or other paths.
fn sandbox_note(sandbox: Option<&Sandbox>, stderr: &str) -> Option<&'static str> {
    let report = sandbox?.report();
    report.mechanism?;
    let text = if report.network_allowed {
        "\n[attest] Commands run in a sandbox: writes are allowed only inside the workspace and \
         $TMPDIR, and `.attest/`, `attest.toml` and `.git/` are read-only. Work within those \
         limits or ask the user."
    } else {
        "\n[attest] Commands run in a sandbox: writes are allowed only inside the workspace and \
         $TMPDIR, `.attest/`, `attest.toml` and `.git/` are read-only, and network access is \
         off. Work within those limits or ask the user."
    };
    const SIGNS: [&str; 5] = [
        "Read-only file system",
        "Permission denied",
        "Operation not permitted",
        "Network is unreachable",
        "Could not resolve host",
    ];
    SIGNS.iter().any(|s| stderr.contains(s)).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::test_support::context;
    use serde_json::json;

    async fn run(ctx: &ToolContext, command: &str) -> ToolOutput {
        Shell::new(None)
            .execute(json!({"command": command}), ctx)
            .await
    }

    #[tokio::test]
    async fn success_returns_output_and_exit_code() {
        let (_dir, ctx) = context();
        let out = run(&ctx, "echo hello; echo warn >&2").await;
        assert!(out.success, "{out:?}");
        assert!(out.evidence_present);
        assert_eq!(out.output, "hello\n[stderr]\nwarn");
        assert_eq!(out.evidence.exit_code, Some(0));
    }

    #[tokio::test]
    async fn a_read_only_command_observes_and_takes_no_snapshot() {
        let (dir, ctx) = context();
        std::fs::write(dir.path().join("Cargo.toml"), "version = 1").unwrap();
        let out = run(&ctx, "cat Cargo.toml").await;
        assert!(out.success, "{out:?}");
        assert_eq!(out.effect, Some(EffectClass::Observe));
        assert_eq!(out.evidence.changes, None);
    }

    #[tokio::test]
    async fn a_mutating_command_reports_what_it_changed_or_no_effect() {
        let (dir, ctx) = context();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        let idle = run(&ctx, "mkdir -p src").await;
        assert!(idle.success && idle.no_effect, "{idle:?}");
        assert_eq!(idle.effect, None);
        assert_eq!(idle.evidence.changes, Some(vec![]));
        let made = run(&ctx, "touch src/new.rs").await;
        assert!(made.success && !made.no_effect, "{made:?}");
        let changes = made.evidence.changes.unwrap();
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert_eq!(changes[0].path, "src/new.rs");
        assert_eq!(changes[0].change, attest_protocol::ChangeKind::Created);
    }

    #[tokio::test]
    async fn runs_in_the_workspace_root_without_stdin() {
        let (dir, ctx) = context();
        let out = run(&ctx, "pwd; cat; echo after").await;
        assert!(out.success, "{out:?}");
        let pwd = dir.path().canonicalize().unwrap();
        assert_eq!(out.output, format!("{}\nafter", pwd.display()));
    }

    #[tokio::test]
    async fn nonzero_exit_is_a_failure_with_code_and_output() {
        let (_dir, ctx) = context();
        let out = run(&ctx, "echo partial; echo boom >&2; exit 7").await;
        assert!(!out.success);
        assert!(!out.timed_out);
        assert_eq!(out.evidence.exit_code, Some(7));
        assert_eq!(
            out.output,
            "command exited with status 7\n[stdout]\npartial\n[stderr]\nboom"
        );
    }

    #[tokio::test]
    async fn killed_by_signal_is_a_failure() {
        let (_dir, ctx) = context();
        let out = run(&ctx, "kill -9 $$").await;
        assert!(!out.success);
        assert_eq!(out.evidence.exit_code, None);
        assert!(out.output.contains("signal 9"), "{}", out.output);
    }

    #[tokio::test]
    async fn output_is_truncated_per_stream() {
        let (_dir, ctx) = context();
        let out = run(&ctx, "yes | head -c 100000").await;
        assert!(out.success);
        assert!(out.output.len() < STREAM_LIMIT + 200);
        assert!(
            out.output.contains("output was 100000 bytes"),
            "{}",
            &out.output[STREAM_LIMIT - 10..]
        );
    }

    #[tokio::test]
    async fn silent_success_says_so() {
        let (_dir, ctx) = context();
        let out = run(&ctx, "true").await;
        assert!(out.success);
        assert_eq!(out.output, "(command succeeded with no output)");
    }

    #[test]
    fn default_timeout_is_two_minutes() {
        assert_eq!(Shell::new(None).timeout(), Duration::from_secs(120));
    }
}
