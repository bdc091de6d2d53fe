//! The tool side of the engine's boundary: the [`Tool`] trait, what a tool
//! reports ([`ToolOutput`]), the per-call context ([`ToolContext`]), the
//! [`ToolRegistry`] with argument validation, the [`middleware`] chain every
//! call passes before it runs, and [`Workspace`] path confinement.
//!
//! Implementations live in `attest-tools` (built-in workspace tools, command
//! tools, the shell sandbox) or in an embedder's own code. Nothing here
//! starts a process or knows a sandbox.

mod env;
pub mod middleware;
pub mod protected;
mod registry;
mod workspace;

pub use env::{is_allowed as env_is_allowed, ToolEnv, ALLOWED_VARS};

pub use middleware::{
    CallContext, ChainOutcome, Clearance, Denial, Middleware, MiddlewareDecision, PendingApproval,
};
pub(crate) use registry::{warm_up, write_canonical};
/// Size limits the registry applies to what a tool returns.
pub mod registry_limits {
    pub use super::registry::{MODEL_OUTPUT_LIMIT, RECEIPT_ERROR_LIMIT};
}
pub use registry::{
    fingerprint_arguments, PrepareError, PreparedCall, RegistryError, ToolRegistry,
};
pub use workspace::{Workspace, WorkspaceError};

use async_trait::async_trait;
use attest_protocol::{
    DataQuality, DataSource, EffectClass, ErrorType, Evidence, Permission, ToolSpec,
};

/// Most bytes of file content or listing a built-in tool hands the model.
pub const OUTPUT_LIMIT: usize = 64 * 1024;

/// Decodes validated arguments into a tool's argument struct. The registry
/// has already checked them against the schema, so a failure here means the
/// schema and the struct disagree; it is still an error result, never a
/// panic. Boxed: a `ToolOutput` is large and the error path is the rare one.
pub fn decode_args<T: serde::de::DeserializeOwned>(
    args: serde_json::Value,
) -> Result<T, Box<ToolOutput>> {
    serde_json::from_value(args)
        .map_err(|e| Box::new(ToolOutput::error(format!("invalid arguments: {e}"))))
}

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
    /// What this call did, when less than the tool declares: a `shell`
    /// command the policy classifies read-only observes. Only `observe` is
    /// taken; a call never claims more than its tool declares.
    pub effect: Option<EffectClass>,
    /// True when a mutating call succeeded but changed nothing; its receipt
    /// is `no_effect` and satisfies no mutate contract.
    pub no_effect: bool,
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
            effect: None,
            no_effect: false,
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
            effect: None,
            no_effect: false,
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

    /// This call only read: its receipt is `observe` whatever the tool declares.
    pub fn observed_only(mut self) -> Self {
        self.effect = Some(EffectClass::Observe);
        self
    }

    /// This mutating call changed nothing.
    pub fn with_no_effect(mut self) -> Self {
        self.no_effect = true;
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
    /// configured pass-through names (SPEC F14); [`ToolEnv::minimal`]
    /// unless the front end passes its own.
    pub env: ToolEnv,
    /// Environment variables removed from every child process a tool starts
    /// (the provider's API key variable, …): tools never see harness secrets.
    pub hidden_env: Vec<String>,
    /// Where a long-running tool reports how far it got; `None` when
    /// nobody listens.
    pub progress: Option<ProgressSink>,
}

/// How far a running tool got, as it said (an MCP progress notification).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolProgress {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

/// The engine's end of a call's progress reports: display only, never
/// evidence. Sending never blocks and never fails the tool.
#[derive(Debug, Clone)]
pub struct ProgressSink(tokio::sync::mpsc::UnboundedSender<ToolProgress>);

impl ProgressSink {
    /// A sink and the receiver its reports arrive on.
    pub fn channel() -> (
        ProgressSink,
        tokio::sync::mpsc::UnboundedReceiver<ToolProgress>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (ProgressSink(tx), rx)
    }

    pub fn report(&self, progress: ToolProgress) {
        // The call may already be over: a late report is dropped.
        let _ = self.0.send(progress);
    }
}

impl ToolContext {
    pub fn new(workspace: Workspace) -> Self {
        ToolContext {
            workspace,
            env: ToolEnv::minimal(),
            hidden_env: Vec::new(),
            progress: None,
        }
    }

    pub fn with_env(mut self, env: ToolEnv) -> Self {
        self.env = env;
        self
    }

    /// Give `cmd` the tools' environment: [`ToolContext::env`] less the
    /// hidden variables, nothing else of the harness's.
    pub fn apply_env(&self, cmd: &mut tokio::process::Command) {
        self.env.apply(cmd, &self.hidden_env);
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
    /// Whether the tool's provider no longer offers it (an MCP server's
    /// tool list changed during the run): it leaves the tools offered from
    /// the next request on, a declared cache reset; a call to it still
    /// fails plainly.
    fn withdrawn(&self) -> bool {
        false
    }
    /// Run with validated arguments. Must not panic on any input.
    async fn execute(&self, args: serde_json::Value, ctx: &ToolContext) -> ToolOutput;
}
