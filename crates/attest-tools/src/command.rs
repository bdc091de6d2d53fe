//! Command tools: user-defined tools from config that run a program.
//!
//! The program gets the validated arguments as JSON on stdin, runs in the
//! workspace root, and reports through its exit status and stdout. A tool
//! that declares an `evidence` JSON pointer must print JSON with a value
//! there (a message id, a URL); without it, a successful run is
//! `missing_evidence` and satisfies no contract.
//!
//! Like `shell`, the program runs inside the run's sandbox with the
//! scrubbed tool environment (SPEC F14), unless its config says
//! `sandbox = false`.

use crate::process::{self, describe_status, RunResult};
use crate::{Sandbox, Tool, ToolContext, ToolOutput};
use async_trait::async_trait;
use attest_core::text::{captured_text, truncate_str};
use attest_protocol::{DataSource, EffectClass, ErrorType, Evidence, Permission, ToolSpec};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Bytes of stdout kept as the model's output.
const STDOUT_LIMIT: usize = 32 * 1024;
/// Bytes of stderr kept in a failure message.
const STDERR_LIMIT: usize = 4 * 1024;
/// Bytes of stdout read at all: the evidence pointer needs the whole JSON.
const CAPTURE_LIMIT: usize = 1024 * 1024;
const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// Extra time the registry's own timeout allows, so the tool's timeout
/// (which reports how long it waited) fires first.
const REGISTRY_GRACE: Duration = Duration::from_secs(5);

/// One `[[tools]]` entry of the config.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandToolConfig {
    pub name: String,
    pub description: String,
    pub effect: EffectClass,
    /// Program and its fixed arguments. No shell is involved.
    pub command: Vec<String>,
    /// JSON Schema of the arguments object.
    #[serde(default = "default_parameters")]
    pub parameters: serde_json::Value,
    /// JSON pointer into the program's stdout (parsed as JSON) to the value
    /// that proves the effect, e.g. `/message_id`.
    #[serde(default)]
    pub evidence: Option<String>,
    #[serde(default)]
    pub permission: Option<Permission>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Run inside the run's sandbox, like `shell` (default: yes). `false`
    /// runs the program unconfined (a tool that needs the network when
    /// the sandbox has it off, say).
    #[serde(default)]
    pub sandbox: Option<bool>,
}

fn default_parameters() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {},
        "additionalProperties": false
    })
}

/// Why a command tool's config was rejected.
#[derive(Debug, thiserror::Error)]
pub enum CommandToolError {
    #[error("invalid tool name `{name}`: use 1 to 64 letters, digits, `_` or `-`")]
    InvalidName { name: String },
    #[error("tool `{name}`: `command` is empty; give the program and its arguments")]
    EmptyCommand { name: String },
    #[error("tool `{name}`: invalid `parameters` schema: {reason}")]
    InvalidSchema { name: String, reason: String },
    #[error("tool `{name}`: `evidence` must be a JSON pointer starting with `/`, got `{pointer}`")]
    InvalidEvidencePointer { name: String, pointer: String },
    #[error("tool `{name}`: `timeout_ms` must be greater than 0")]
    InvalidTimeout { name: String },
    #[error(
        "tool `{name}`: `effect = \"deliver\"` needs `evidence`, a JSON pointer to the value in its output that proves the delivery (e.g. \"/message_id\")"
    )]
    DeliverWithoutEvidence { name: String },
    #[error("tool `{name}`: effect `internal` is reserved for the harness's own tools; use observe, mutate or deliver")]
    ReservedEffect { name: String },
}

/// A tool backed by an external program.
#[derive(Debug)]
pub struct CommandTool {
    spec: ToolSpec,
    program: PathBuf,
    args: Vec<String>,
    evidence: Option<String>,
    permission: Permission,
    timeout: Duration,
    sandboxed: bool,
    /// The run's sandbox, used when `sandboxed`.
    sandbox: Option<Arc<Sandbox>>,
}

impl CommandTool {
    /// Validates the config. A relative program path with a `/` in it
    /// (`./scripts/send.sh`) is taken relative to `workspace_root`; a bare
    /// name is looked up on `PATH`.
    pub fn new(cfg: CommandToolConfig, workspace_root: &Path) -> Result<Self, CommandToolError> {
        let name = cfg.name;
        if !valid_name(&name) {
            return Err(CommandToolError::InvalidName { name });
        }
        let mut command = cfg.command.into_iter();
        let Some(program) = command.next().filter(|p| !p.is_empty()) else {
            return Err(CommandToolError::EmptyCommand { name });
        };
        validate_schema(&cfg.parameters).map_err(|reason| CommandToolError::InvalidSchema {
            name: name.clone(),
            reason,
        })?;
        if let Some(pointer) = &cfg.evidence {
            if !pointer.starts_with('/') {
                return Err(CommandToolError::InvalidEvidencePointer {
                    name,
                    pointer: pointer.clone(),
                });
            }
        }
        match (cfg.effect, &cfg.evidence) {
            // A delivery that exits 0 proves nothing by itself (SPEC A3).
            (EffectClass::Deliver, None) => {
                return Err(CommandToolError::DeliverWithoutEvidence { name })
            }
            (EffectClass::Internal, _) => return Err(CommandToolError::ReservedEffect { name }),
            _ => {}
        }
        if cfg.timeout_ms == Some(0) {
            return Err(CommandToolError::InvalidTimeout { name });
        }
        let program_path = Path::new(&program);
        let program = if program_path.is_relative() && program.contains('/') {
            workspace_root.join(program_path)
        } else {
            program_path.to_path_buf()
        };
        let permission = cfg.permission.unwrap_or(match cfg.effect {
            EffectClass::Observe => Permission::Allow,
            EffectClass::Mutate | EffectClass::Deliver | EffectClass::Internal => Permission::Ask,
        });
        Ok(CommandTool {
            spec: ToolSpec {
                name,
                description: cfg.description,
                parameters: cfg.parameters,
                effect: cfg.effect,
            },
            program,
            args: command.collect(),
            evidence: cfg.evidence,
            permission,
            timeout: Duration::from_millis(cfg.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS)),
            sandboxed: cfg.sandbox.unwrap_or(true),
            sandbox: None,
        })
    }

    /// Run the program in `sandbox` (unless the config said `sandbox = false`).
    pub fn with_sandbox(mut self, sandbox: Option<Arc<Sandbox>>) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// Whether the program runs inside the run's sandbox.
    pub fn sandboxed(&self) -> bool {
        self.sandboxed
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn validate_schema(schema: &serde_json::Value) -> Result<(), String> {
    let Some(object) = schema.as_object() else {
        return Err("must be a JSON object".to_string());
    };
    if object.get("type").and_then(|t| t.as_str()) != Some("object") {
        return Err("must have `\"type\": \"object\"` (tool arguments are an object)".to_string());
    }
    jsonschema::validator_for(schema)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[async_trait]
impl Tool for CommandTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn default_permission(&self) -> Permission {
        self.permission
    }

    fn timeout(&self) -> Duration {
        self.timeout + REGISTRY_GRACE
    }

    /// The program's file name: the outside party failures are blamed on.
    fn provider(&self) -> &str {
        self.program
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("command")
    }

    fn data_source(&self) -> DataSource {
        match self.spec.effect {
            EffectClass::Deliver => DataSource::Delivery,
            EffectClass::Observe | EffectClass::Mutate | EffectClass::Internal => {
                DataSource::Command
            }
        }
    }

    async fn execute(&self, args: serde_json::Value, ctx: &ToolContext) -> ToolOutput {
        let stdin = match serde_json::to_vec(&args) {
            Ok(bytes) => bytes,
            Err(e) => return ToolOutput::error(format!("cannot encode arguments: {e}")),
        };
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let sandbox = self.sandbox.as_deref().filter(|_| self.sandboxed);
        let cmd = match process::tool_command(ctx, sandbox, &self.program, &args) {
            Ok(cmd) => cmd,
            Err(e) => {
                return ToolOutput::error(format!("the sandbox could not be set up: {e}"))
                    .with_error_type(ErrorType::SpawnFailed)
            }
        };
        let finished = match process::run(cmd, Some(stdin), Some(self.timeout), CAPTURE_LIMIT).await
        {
            RunResult::Finished(f) => f,
            RunResult::TimedOut => {
                return ToolOutput::timeout(format!(
                    "timed out after {} ms",
                    self.timeout.as_millis()
                ))
            }
            RunResult::SpawnFailed(e) => {
                return ToolOutput::error(format!(
                    "could not start `{}`: {e}",
                    self.program.display()
                ))
                .with_error_type(ErrorType::SpawnFailed)
            }
            RunResult::WaitFailed(e) => {
                return ToolOutput::error(format!("lost track of the command: {e}"))
            }
        };
        if !finished.status.success() {
            let stderr = captured_text(&finished.stderr, finished.stderr_total, STDERR_LIMIT);
            return ToolOutput {
                evidence: Evidence {
                    exit_code: finished.status.code(),
                    ..Evidence::default()
                },
                ..ToolOutput::error(format!(
                    "command exited with {}: {stderr}",
                    describe_status(&finished.status)
                ))
                .with_error_type(ErrorType::NonZeroExit)
            };
        }
        let stdout = String::from_utf8_lossy(&finished.stdout);
        let mut evidence = Evidence {
            exit_code: finished.status.code(),
            ..Evidence::default()
        };
        let evidence_present = match &self.evidence {
            // Nothing declared, nothing missing.
            None => true,
            Some(pointer) => match evidence_value(&stdout, pointer) {
                Some(id) => {
                    evidence.message_id = Some(id);
                    true
                }
                None => false,
            },
        };
        let trimmed = stdout.trim();
        let (shown, cut) = truncate_str(trimmed, STDOUT_LIMIT);
        let output = if cut || finished.stdout_total > finished.stdout.len() as u64 {
            format!(
                "{shown}\n[truncated: output was {} bytes]",
                finished.stdout_total
            )
        } else {
            shown.to_string()
        };
        ToolOutput {
            evidence_present,
            ..ToolOutput::ok(output, evidence)
        }
    }
}

/// The evidence at `pointer` in `stdout` parsed as JSON: a non-empty string
/// or a number (as text). Anything else (no JSON, no value, null, "",
/// booleans, arrays, objects) proves nothing.
fn evidence_value(stdout: &str, pointer: &str) -> Option<String> {
    let json: serde_json::Value = serde_json::from_str(stdout.trim()).ok()?;
    match json.pointer(pointer)? {
        serde_json::Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Workspace;
    use serde_json::json;
    use std::os::unix::fs::PermissionsExt;

    struct Fixture {
        dir: tempfile::TempDir,
        ctx: ToolContext,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(dir.path()).unwrap();
        Fixture {
            dir,
            ctx: ToolContext::new(workspace),
        }
    }

    impl Fixture {
        /// Writes an executable script at `rel` in the workspace.
        fn script(&self, rel: &str, body: &str) {
            let path = self.dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }

        fn tool(&self, cfg: serde_json::Value) -> CommandTool {
            let cfg: CommandToolConfig = serde_json::from_value(cfg).unwrap();
            CommandTool::new(cfg, self.dir.path()).unwrap()
        }
    }

    fn config(extra: serde_json::Value) -> serde_json::Value {
        let mut base = json!({
            "name": "send",
            "description": "Send a message.",
            "effect": "deliver",
            "command": ["./bin/send.sh"],
            "evidence": "/message_id"
        });
        for (k, v) in extra.as_object().unwrap() {
            base[k] = v.clone();
        }
        base
    }

    fn build_err(cfg: serde_json::Value) -> CommandToolError {
        let cfg: CommandToolConfig = serde_json::from_value(cfg).unwrap();
        CommandTool::new(cfg, Path::new("/tmp")).unwrap_err()
    }

    #[test]
    fn config_validation() {
        assert!(matches!(
            build_err(config(json!({"name": "has space"}))),
            CommandToolError::InvalidName { .. }
        ));
        assert!(matches!(
            build_err(config(json!({"name": ""}))),
            CommandToolError::InvalidName { .. }
        ));
        assert!(matches!(
            build_err(config(json!({"name": "x".repeat(65)}))),
            CommandToolError::InvalidName { .. }
        ));
        assert!(matches!(
            build_err(config(json!({"command": []}))),
            CommandToolError::EmptyCommand { .. }
        ));
        assert!(matches!(
            build_err(config(json!({"parameters": {"type": "string"}}))),
            CommandToolError::InvalidSchema { .. }
        ));
        assert!(matches!(
            build_err(config(json!({"parameters": [1]}))),
            CommandToolError::InvalidSchema { .. }
        ));
        assert!(matches!(
            build_err(config(
                json!({"parameters": {"type": "object", "properties": {"a": {"type": 5}}}})
            )),
            CommandToolError::InvalidSchema { .. }
        ));
        assert!(matches!(
            build_err(config(json!({"evidence": "message_id"}))),
            CommandToolError::InvalidEvidencePointer { .. }
        ));
        assert!(matches!(
            build_err(config(json!({"timeout_ms": 0}))),
            CommandToolError::InvalidTimeout { .. }
        ));
        match build_err(config(json!({"evidence": null}))) {
            CommandToolError::DeliverWithoutEvidence { name } => assert_eq!(name, "send"),
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(
            build_err(config(json!({"effect": "internal"}))),
            CommandToolError::ReservedEffect { .. }
        ));
        let unknown: Result<CommandToolConfig, _> =
            serde_json::from_value(config(json!({"evidnce": "/x"})));
        assert!(unknown.is_err(), "unknown fields must be rejected");
    }

    #[test]
    fn defaults() {
        let f = fixture();
        let tool = f.tool(config(json!({})));
        assert_eq!(tool.spec().name, "send");
        assert_eq!(tool.spec().effect, EffectClass::Deliver);
        assert_eq!(tool.spec().parameters, default_parameters());
        assert_eq!(tool.default_permission(), Permission::Ask);
        assert_eq!(tool.program, f.dir.path().join("bin/send.sh"));
        assert_eq!(
            tool.timeout(),
            Duration::from_millis(30_000) + REGISTRY_GRACE
        );
        let observe = f.tool(config(
            json!({"effect": "observe", "command": ["python3", "-c", "x"]}),
        ));
        assert_eq!(observe.default_permission(), Permission::Allow);
        // A bare program name stays a PATH lookup.
        assert_eq!(observe.program, PathBuf::from("python3"));
        assert_eq!(observe.args, ["-c", "x"]);
        let explicit = f.tool(config(json!({"permission": "deny"})));
        assert_eq!(explicit.default_permission(), Permission::Deny);
    }

    #[tokio::test]
    async fn runs_in_the_sandbox_unless_configured_out() {
        use crate::sandbox::{Sandbox, SandboxMode, SandboxOptions};
        let f = fixture();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("escaped");
        f.script(
            "bin/write.sh",
            &format!(
                "cat >/dev/null; echo x > '{}' && echo inside > inside.txt && echo '{{}}'",
                target.display()
            ),
        );
        let sandbox = Sandbox::new(
            SandboxOptions::new(SandboxMode::WorkspaceWrite),
            f.dir.path(),
        )
        .unwrap();
        if sandbox.report().mechanism.is_none() {
            println!("no sandbox mechanism here: {}", sandbox.report().note);
            return;
        }
        let sandbox = Some(std::sync::Arc::new(sandbox));
        let ctx = f.ctx.clone();
        let confined = f
            .tool(config(
                json!({"command": ["./bin/write.sh"], "evidence": null, "effect": "mutate"}),
            ))
            .with_sandbox(sandbox.clone());
        assert!(confined.sandboxed());
        let out = confined.execute(json!({}), &ctx).await;
        assert!(!out.success, "{}", out.output);
        assert!(!target.exists(), "a sandboxed command tool wrote outside");
        let free = f
            .tool(config(
                json!({"command": ["./bin/write.sh"], "evidence": null, "effect": "mutate", "sandbox": false}),
            ))
            .with_sandbox(sandbox);
        assert!(!free.sandboxed());
        let out = free.execute(json!({}), &ctx).await;
        assert!(out.success, "{}", out.output);
        assert!(target.exists());
        assert!(f.dir.path().join("inside.txt").exists());
    }

    #[tokio::test]
    async fn gets_only_the_tool_environment() {
        let f = fixture();
        f.script(
            "bin/env.sh",
            r#"cat >/dev/null; printf '{"secret": "%s", "passed": "%s"}' "$SECRET_TOKEN" "$PASSED""#,
        );
        let env = attest_core::tool::ToolEnv::from_vars(
            [
                ("PATH", std::env::var("PATH").unwrap_or_default()),
                ("SECRET_TOKEN", "canary-xyz".to_string()),
                ("PASSED", "yes".to_string()),
            ]
            .map(|(k, v)| (k.into(), v.into())),
            &["PASSED".to_string()],
        );
        let ctx = f.ctx.clone().with_env(env);
        let tool = f.tool(config(
            json!({"command": ["./bin/env.sh"], "evidence": "/passed"}),
        ));
        let out = tool.execute(json!({}), &ctx).await;
        assert!(out.success, "{}", out.output);
        assert_eq!(out.output, r#"{"secret": "", "passed": "yes"}"#);
    }

    #[tokio::test]
    async fn success_with_evidence_and_arguments_on_stdin() {
        let f = fixture();
        // Echo stdin back inside the JSON, so the test sees what it got.
        f.script(
            "bin/send.sh",
            r#"input=$(cat); printf '{"message_id": "msg-42", "got": %s}' "$input""#,
        );
        let tool = f.tool(config(json!({})));
        let out = tool.execute(json!({"to": "ops", "n": 1}), &f.ctx).await;
        assert!(out.success, "{out:?}");
        assert!(out.evidence_present);
        assert_eq!(out.evidence.message_id.as_deref(), Some("msg-42"));
        assert_eq!(out.evidence.exit_code, Some(0));
        let printed: serde_json::Value = serde_json::from_str(&out.output).unwrap();
        assert_eq!(printed["got"], json!({"to": "ops", "n": 1}));
    }

    #[tokio::test]
    async fn numeric_evidence_is_converted() {
        let f = fixture();
        f.script("bin/send.sh", r#"echo '{"result": {"id": 1234}}'"#);
        let tool = f.tool(config(json!({"evidence": "/result/id"})));
        let out = tool.execute(json!({}), &f.ctx).await;
        assert!(out.evidence_present);
        assert_eq!(out.evidence.message_id.as_deref(), Some("1234"));
    }

    #[tokio::test]
    async fn missing_evidence_is_still_a_success() {
        let f = fixture();
        for body in [
            r#"echo '{"other": 1}'"#,
            r#"echo '{"message_id": null}'"#,
            r#"echo '{"message_id": ""}'"#,
            r#"echo 'sent, no json'"#,
        ] {
            f.script("bin/send.sh", body);
            let out = f.tool(config(json!({}))).execute(json!({}), &f.ctx).await;
            assert!(out.success, "{body}: {out:?}");
            assert!(!out.evidence_present, "{body}");
            assert_eq!(out.evidence.message_id, None, "{body}");
        }
    }

    #[tokio::test]
    async fn no_declared_evidence_means_nothing_is_missing() {
        let f = fixture();
        let tool = f.tool(config(json!({
            "evidence": null,
            "effect": "observe",
            "command": ["sh", "-c", "echo '  plain text  '"]
        })));
        let out = tool.execute(json!({}), &f.ctx).await;
        assert!(out.success);
        assert!(out.evidence_present);
        assert_eq!(out.output, "plain text");
    }

    #[tokio::test]
    async fn nonzero_exit_is_a_failure_with_stderr() {
        let f = fixture();
        f.script(
            "bin/send.sh",
            "echo 'out' ; echo '  rate limited  ' >&2; exit 4",
        );
        let out = f.tool(config(json!({}))).execute(json!({}), &f.ctx).await;
        assert!(!out.success);
        assert!(!out.timed_out);
        assert_eq!(out.output, "command exited with status 4: rate limited");
        assert_eq!(out.evidence.exit_code, Some(4));
    }

    #[tokio::test]
    async fn stderr_is_truncated_in_the_failure_message() {
        let f = fixture();
        f.script(
            "bin/send.sh",
            "head -c 10000 /dev/zero | tr '\\0' e >&2; exit 1",
        );
        let out = f.tool(config(json!({}))).execute(json!({}), &f.ctx).await;
        assert!(!out.success);
        assert!(
            out.output.len() < STDERR_LIMIT + 200,
            "{}",
            out.output.len()
        );
        assert!(out.output.contains("output was 10000 bytes"));
    }

    #[tokio::test]
    async fn stdout_is_truncated_for_the_model() {
        let f = fixture();
        let tool = f.tool(config(json!({
            "evidence": null,
            "effect": "mutate",
            "command": ["sh", "-c", "head -c 50000 /dev/zero | tr '\\0' o"]
        })));
        let out = tool.execute(json!({}), &f.ctx).await;
        assert!(out.success);
        assert!(out.output.starts_with(&"o".repeat(STDOUT_LIMIT)));
        assert!(out.output.ends_with("[truncated: output was 50000 bytes]"));
    }

    #[tokio::test]
    async fn timeout_kills_and_says_so() {
        let f = fixture();
        f.script("bin/send.sh", "sleep 30");
        let tool = f.tool(config(json!({"timeout_ms": 200})));
        let start = std::time::Instant::now();
        let out = tool.execute(json!({}), &f.ctx).await;
        assert!(!out.success);
        assert!(out.timed_out);
        assert_eq!(out.output, "timed out after 200 ms");
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn missing_program_is_a_clear_failure() {
        let f = fixture();
        let out = f.tool(config(json!({}))).execute(json!({}), &f.ctx).await;
        assert!(!out.success);
        assert!(!out.timed_out);
        assert!(
            out.output.starts_with("could not start `"),
            "{}",
            out.output
        );
        assert!(out.output.contains("bin/send.sh"), "{}", out.output);
    }

    #[tokio::test]
    async fn runs_in_the_workspace_root() {
        let f = fixture();
        let tool = f.tool(config(json!({
            "evidence": null,
            "effect": "mutate",
            "command": ["python3", "-c", "import os, sys, json; a = json.load(sys.stdin); print(os.getcwd(), a['k'])"],
            "parameters": {"type": "object", "properties": {"k": {"type": "string"}}}
        })));
        let out = tool.execute(json!({"k": "v"}), &f.ctx).await;
        assert!(out.success, "{out:?}");
        let root = f.dir.path().canonicalize().unwrap();
        assert_eq!(out.output, format!("{} v", root.display()));
    }
}
