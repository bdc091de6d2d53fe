//! attest, embedded: an evidence-first agent harness for Rust programs.
//!
//! The model only proposes tool calls; the engine executes them, writes a
//! receipt for each, and decides how a run ended — `completed`,
//! `unverified`, `incomplete`, `failed` or `cancelled`, with a reason —
//! from the run's [`CompletionContract`] and its receipts, never from what
//! the model says.
//!
//! ```
//! use attest::{ContractKind, Engine, RunRequest, TerminalState};
//! use attest::providers::scripted::ScriptedProvider;
//!
//! # tokio_test(async {
//! let dir = tempfile::tempdir().unwrap();
//! std::fs::write(dir.path().join("config.toml"), "port = 8080\n").unwrap();
//! // A model that reads the file, then answers from what it read.
//! let model = ScriptedProvider::from_text(r#"
//!   - tool_calls: [{ name: read_file, arguments: { path: config.toml } }]
//!   - text: "The port is 8080."
//! "#).unwrap();
//!
//! let engine = Engine::builder().provider(model).workspace(dir.path()).build().unwrap();
//! let outcome = engine
//!     .run(RunRequest::new("Which port does config.toml set?").expect(ContractKind::Observe))
//!     .await
//!     .unwrap();
//! assert_eq!(outcome.state, TerminalState::Completed);
//! assert_eq!(outcome.receipts[0].tool_name, "read_file");
//! # });
//! # fn tokio_test(f: impl std::future::Future<Output = ()>) {
//! #     tokio::runtime::Runtime::new().unwrap().block_on(f)
//! # }
//! ```
//!
//! Every part has a default and can be replaced on the [`EngineBuilder`]:
//! the provider (the embedded local model, an OpenAI-compatible or
//! Anthropic endpoint from a [`ProviderSpec`], or your own
//! [`ModelProvider`]), the tools (the built-in workspace tools, command
//! tools from config, your own [`Tool`]), the permission policy, the shell
//! sandbox, the store (in memory unless given a file), the [`Approver`] for
//! calls whose permission is `ask`, an observer of the events of
//! [`Engine::run`]. [`Engine::start`] streams a run's events;
//! [`Engine::resume`] continues a run whose process died.
//!
//! The CLI and the HTTP server are built on this crate; nothing here reads
//! environment variables (a front end passes an [`EnvLookup`]) or writes to
//! a terminal (notices go to a callback).

mod builder;
pub mod config;
mod engine;
mod error;
mod mcp;
pub mod memory;
mod protocol_choice;
mod provider;
mod settings;
mod store_log;
pub mod telemetry;
pub mod trust;

pub use builder::{EngineBuilder, EventObserver, Notices};
pub use engine::{Engine, RunHandle, RunRequest};
pub use error::Error;
pub use protocol_choice::{ProtocolMemory, ProtocolRecord};
pub use provider::{
    build_provider, no_env, BuiltProvider, EnvLookup, ProtocolMode, ProviderKind, ProviderSpec,
};
pub use settings::{ApprovalMode, RunSettings};
pub use store_log::{
    open_store, resume_state, store_path, verify_log, SharedStore, StoreLog, Unchained,
};

pub use attest_core::provider::ModelProvider;
pub use attest_core::tool::{Tool, ToolContext, ToolOutput, Workspace};
pub use attest_core::{ApprovalDecision, ApprovalRequest, Approver, RunOutcome, StaticApprover};
pub use attest_protocol::{
    CompletionContract, ContractKind, EffectClass, Event, EventBody, Evidence, Permission, Receipt,
    ReceiptStatus, TerminalReason, TerminalState, ToolSpec,
};
pub use attest_tools::SandboxMode;

/// The crates behind the facade, for what it does not re-export.
pub use attest_core as core;
pub use attest_protocol as protocol;
pub use attest_providers as providers;
pub use attest_store as store;
pub use attest_tools as tools;
