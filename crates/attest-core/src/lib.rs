//! The attest engine: the evidence-first run loop.
//!
//! A run takes a prompt and a [`CompletionContract`](attest_protocol::CompletionContract),
//! drives a [`ModelProvider`](provider::ModelProvider) through the tool
//! loop, executes the calls the model proposes through the
//! [`ToolRegistry`](tool::ToolRegistry), and decides the terminal state
//! from the contract and the receipts.
//!
//! This crate also defines the traits the engine's parts implement —
//! [`provider::ModelProvider`], [`tool::Tool`] and [`tool::Middleware`],
//! [`RunLog`], [`Approver`] — so that implementations (HTTP providers, the
//! embedded model, built-in tools, the sandbox, the SQLite store) depend on
//! the engine and never the reverse.
//!
//! Invariants:
//! - The model only proposes. Tools run only here, through the registry, after
//!   their call is appended to the log; the harness never performs a side
//!   effect on the model's behalf (corrective turns only ask).
//! - The terminal state is computed from receipts and events
//!   ([`judge`]), never from model text.
//! - Every request is rebuilt from the canonical transcript and normalized for
//!   call/result pairing; text that imitates a tool result and protocol-error
//!   responses never enter the transcript (a fixed placeholder does).
//! - No HTTP, SQL, sandbox or terminal I/O here: providers, tools and the
//!   [`RunLog`] are traits implemented elsewhere (the JSONL log is the one
//!   exception, a plain file append). A test of the facade crate
//!   (`crates/attest/tests/architecture.rs`) keeps HTTP clients, SSE, SQL,
//!   sandbox and model-runtime crates out of this crate's dependency tree,
//!   and environment-variable reads out of its sources.

mod approval;
pub mod context;
pub mod doom_loop;
mod engine;
pub mod failure;
mod forgery;
pub mod grounding;
mod harness_echo;
mod judge;
mod log;
pub mod memory;
pub mod policy;
mod prompt;
pub mod provider;
pub mod redact;
mod render;
mod session;
pub mod state;
pub mod text;
pub mod tool;

pub use approval::{
    ApprovalDecision, ApprovalRequest, Approver, PendingApproval, PendingApprovals, StaticApprover,
};
pub use engine::{
    new_id, prefix_hash, CompactionPolicy, ContextLayer, ContextWindow, DoomLoopLimits, Engine,
    EngineError, Observer, ReasoningPolicy, ResumeState, RetryPolicy, RunConfig, RunOutcome,
    HISTORY_TOOL, SUMMARY_HEADER, TOOL_SEARCH,
};
// The one forgery detector; it moves into this crate with the restructure.
pub use forgery::{detect_forged_observation, Forgery};
pub use judge::{judge, Attempt, Judgement};
pub use log::{JsonlRunLog, LogEntry, LogError, MemoryRunLog, RunLog};
pub use prompt::{base_system_prompt, CORRECTIVE_PREFIX, PROMPT_VERSION, PROTOCOL_PLACEHOLDER};
pub use redact::Redactor;
pub use session::session_history;

/// Builds, ahead of their first use, what every process builds once before
/// its first request: the JSON Schema meta-validator that checks tool
/// schemas and the redactor's patterns (milliseconds of CPU). A front end
/// calls it while it waits for something else, such as the sandbox probe's
/// child processes. Only a process's first call does any work.
pub fn warm_up() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        tool::warm_up();
        redact::compile_patterns();
    });
}
