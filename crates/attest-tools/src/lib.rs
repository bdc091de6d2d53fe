//! Tool implementations: the built-in workspace tools, the `skill` tool,
//! command tools from config, and the sandbox `shell` and command tools run
//! in.
//!
//! Invariants:
//! - Tools only implement [`Tool`]; they run through the engine's
//!   [`ToolRegistry`](attest_core::tool::ToolRegistry) after its middleware chain, never on their own.
//! - Built-in file tools are confined to the workspace root: absolute paths
//!   outside it, `..` and symlink escapes are refused.
//! - A tool that starts a process gives it only the tools' environment (an
//!   allow list plus configured pass-through, never the harness's secrets)
//!   and, when given a [`Sandbox`], runs it inside it ([`tool_command`]).
//! - This crate knows nothing of prompts, providers or terminal states; the
//!   trait, registry, policy and failure semantics it builds on are
//!   `attest-core`'s.

mod builtin;
mod command;
mod process;
pub mod sandbox;
mod snapshot;

pub use builtin::builtin_tools;
pub use command::{CommandTool, CommandToolConfig, CommandToolError};
pub use process::tool_command;
pub use sandbox::{Sandbox, SandboxMode, SandboxOptions, SandboxReport};

// The trait and types every tool implements, re-exported for implementors.
#[doc(no_inline)]
pub use attest_core::tool::{Tool, ToolContext, ToolEnv, ToolOutput, Workspace, WorkspaceError};
