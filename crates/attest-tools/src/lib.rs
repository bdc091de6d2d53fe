//! Tools: the trait, the registry, argument validation, permissions, the
//! built-in workspace tools and command tools from config.
//!
//! Invariants:
//! - A tool runs only through [`ToolRegistry::execute`], after its arguments
//!   parsed and validated against its JSON Schema ([`ToolRegistry::prepare`]).
//!   Invalid arguments, unknown tools and refusals become error results the
//!   model sees; they never panic and never run the tool.
//! - Every execution yields a [`Receipt`](attest_protocol::Receipt) written by
//!   the harness, with the evidence the tool declares (hash, exit code,
//!   message id). A success without its declared evidence is
//!   `missing_evidence` and satisfies no contract.
//! - Built-in file tools are confined to the workspace root: absolute paths
//!   outside it, `..` and symlink escapes are refused.
//! - This crate knows nothing of prompts, providers or terminal states.
//!
//! Around execution: [`middleware`] (the chain every call passes before it
//! runs: argument redaction, the permission [`policy`], the retry budget),
//! [`sandbox`] (where `shell` commands run), [`failure`] (fingerprints,
//! the failure tracker, hint codes, `data_impact`, model-facing text),
//! [`redact`] and [`doom_loop`].

mod builtin;
mod command;
pub mod doom_loop;
pub mod env;
pub mod failure;
pub mod middleware;
pub mod policy;
mod process;
pub mod protected;
pub mod redact;
mod registry;
pub mod sandbox;
mod text;
mod workspace;

pub use builtin::builtin_tools;
pub use builtin::skill::{self as skills, skill_tool};
pub use command::{CommandTool, CommandToolConfig, CommandToolError};
pub use doom_loop::{DoomLoopGuard, DoomLoopSignal};
pub use env::ToolEnv;
pub use failure::{FailureTracker, FingerprintKey, RetryPolicy};
pub use middleware::{
    CallContext, ChainOutcome, Clearance, Denial, Middleware, MiddlewareDecision, PendingApproval,
};
pub use policy::{
    shell_command_is_read_only, PermissionPolicy, PermissionsConfig, PolicyDecision, ShellContext,
};
pub use redact::Redactor;
pub use registry::{
    fingerprint_arguments, PrepareError, PreparedCall, RegistryError, ToolRegistry,
};
pub use sandbox::{Sandbox, SandboxMode, SandboxOptions, SandboxReport};
pub use workspace::{Workspace, WorkspaceError};

use async_trait::async_trait;
use attest_protocol::{DataQuality, DataSource, ErrorType, Evidence, Permission, ToolSpec};
use std::sync::Arc;

/// What a tool reports back: whether it succeeded, what the model sees, the
/// evidence for the receipt, and whether the declared evidence is present.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub success: bool,
    /// Text for the model. On failure, the (sanitized) reason.
    pub output: String,
    pub evidence: Evidence,
    /// False when the tool succeeded but its declared evidence is missing.
    pub evidence_present: bool,
    /// True when the tool was stopped for exceeding its time limit; the
    /// receipt then says `timeout` rather than `error`.
    pub timed_out: bool,
    /// On failure, what kind; feeds the failure fingerprint.
    pub error_type: Option<ErrorType>,
    /// The quality of the data returned, when the tool knows it (empty,
    /// partial, stale, from a fallback, …).
    pub quality: Option<DataQuality>,
}

impl ToolOutput {
    pub fn ok(output: impl Into<String>, evidence: Evidence) -> Self {
        ToolOutput {
            success: true,
            output: output.into(),
            evidence,
            evidence_present: true,
            timed_out: false,
            error_type: None,
            quality: None,
        }
    }

    pub fn error(reason: impl Into<String>) -> Self {
        ToolOutput {
            success: false,
            output: reason.into(),
            evidence: Evidence::default(),
            evidence_present: false,
            timed_out: false,
            error_type: Some(ErrorType::ToolError),
            quality: None,
        }
    }

    /// A failure because the time limit expired.
    pub fn timeout(reason: impl Into<String>) -> Self {
        ToolOutput {
            timed_out: true,
            error_type: Some(ErrorType::Timeout),
            ..ToolOutput::error(reason)
        }
    }

    pub fn with_error_type(mut self, error_type: ErrorType) -> Self {
        self.error_type = Some(error_type);
        self
    }

    pub fn with_quality(mut self, quality: DataQuality) -> Self {
        self.quality = Some(quality);
        self
    }

    /// What kind of failure this is; `None` for a success.
    pub fn failure_type(&self) -> Option<ErrorType> {
        if self.success {
            return None;
        }
        Some(self.error_type.unwrap_or(if self.timed_out {
            ErrorType::Timeout
        } else {
            ErrorType::ToolError
        }))
    }
}

/// Per-execution context handed to a tool.
#[derive(Debug, Clone)]
pub struct ToolContext {
    pub workspace: Workspace,
    /// The environment child processes of tools get: an allow list plus
    /// configured pass-through names (SPEC F14). The default is the allow
    /// list of this process's environment.
    pub env: ToolEnv,
    /// Environment variables removed from every child process a tool starts
    /// (the provider's API key variable, …), even when passed through:
    /// tools never see harness secrets.
    pub hidden_env: Vec<String>,
    /// The sandbox the `shell` tool and command tools run in; `None` runs
    /// them unconfined (tests, `SandboxMode::Off`).
    pub sandbox: Option<Arc<Sandbox>>,
}

impl ToolContext {
    pub fn new(workspace: Workspace) -> Self {
        ToolContext {
            workspace,
            env: ToolEnv::from_process(&[]),
            hidden_env: Vec::new(),
            sandbox: None,
        }
    }

    pub fn with_sandbox(mut self, sandbox: Arc<Sandbox>) -> Self {
        self.sandbox = Some(sandbox);
        self
    }

    pub fn with_env(mut self, env: ToolEnv) -> Self {
        self.env = env;
        self
    }

    /// A child process for a tool, in the workspace root: inside the
    /// run's sandbox when `sandboxed` (and there is one), with the scrubbed
    /// environment (and the sandbox's private `TMPDIR`).
    pub fn command(
        &self,
        program: impl AsRef<std::ffi::OsStr>,
        args: &[&str],
        sandboxed: bool,
    ) -> Result<tokio::process::Command, sandbox::SandboxError> {
        let root = self.workspace.root();
        let sandbox = self.sandbox.as_ref().filter(|_| sandboxed);
        let mut cmd = match sandbox {
            Some(sandbox) => sandbox.command(program, args, root)?,
            None => {
                let mut cmd = tokio::process::Command::new(program);
                cmd.args(args).current_dir(root);
                cmd
            }
        };
        self.env.apply(&mut cmd, &self.hidden_env);
        if let Some(tmp) = sandbox.and_then(|s| s.tmp_dir()) {
            for var in ["TMPDIR", "TMP", "TEMP"] {
                cmd.env(var, tmp);
            }
        }
        Ok(cmd)
    }
}

/// A tool the model may call.
#[async_trait]
pub trait Tool: Send + Sync {
    fn spec(&self) -> &ToolSpec;
    /// Permission when config says nothing about this tool.
    fn default_permission(&self) -> Permission;
    /// Timeout for one execution.
    fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(60)
    }
    /// Who serves the call, for failure records: `local` unless the tool
    /// talks to an outside service or program.
    fn provider(&self) -> &str {
        "local"
    }
    /// What kind of data the tool supplies, for `data_impact`.
    fn data_source(&self) -> DataSource {
        DataSource::Workspace
    }
    /// Run with validated arguments. Must not panic on any input.
    async fn execute(&self, args: serde_json::Value, ctx: &ToolContext) -> ToolOutput;
}
