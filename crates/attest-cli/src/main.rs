//! The `attest` binary: the only crate that knows about terminals, flags,
//! environment variables, exit codes and JSONL output. The engine is the
//! `attest` crate's, assembled by its builder.

mod chat_cmd;
mod eval_runner;
mod inspect;
mod mcp_serve;
mod memory_cmd;
mod output;
mod render;
mod run_cmd;
mod serve_cmd;
mod setup;
mod trust_cmd;
mod workspace_cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Exit code for usage and configuration errors.
const EXIT_USAGE: u8 = 2;

/// The exit code of a run that ended in `state` (the README's table).
pub(crate) fn exit_code_for(state: attest_protocol::TerminalState) -> u8 {
    use attest_protocol::TerminalState::*;
    match state {
        Completed => 0,
        Unverified => 3,
        Incomplete => 4,
        Failed => 5,
        Cancelled => 130,
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "attest",
    version,
    about = "An evidence-first agent harness: the model proposes, attest executes, receipts decide."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one task non-interactively; the exit code says how it ended
    /// (0 completed, 3 unverified, 4 incomplete, 5 failed, 130 cancelled).
    Run(run_cmd::RunArgs),
    /// An interactive session: streaming answers, live tool progress,
    /// approvals at the prompt (/exit, /trace, /approvals).
    Chat(chat_cmd::ChatArgs),
    /// Continue a run left unfinished by a crash, from its log.
    Resume(run_cmd::ResumeArgs),
    /// List sessions.
    Sessions(inspect::WorkspaceArg),
    /// List runs with state, reason, steps and time.
    Runs(inspect::RunsArgs),
    /// Show how a run went and why it ended as it did.
    Trace(inspect::TraceArgs),
    /// Create AGENTS.md, SOUL.md, USER.md, skills/ and attest.toml where
    /// missing. Never overwrites a file that has content; with --migrate,
    /// updates unedited older defaults.
    Init(workspace_cmd::InitArgs),
    /// Report on the workspace files, skills and defaults; the exit code is
    /// 0 when all files are current or customized, 1 when one is outdated,
    /// missing or empty or a skill or file cannot be used, 2 on errors.
    Doctor(workspace_cmd::DoctorArgs),
    /// Trust a workspace's own attest.toml (its provider, permissions,
    /// sandbox and tools settings); --list, --revoke. A changed file is
    /// untrusted again.
    Trust(trust_cmd::TrustArgs),
    /// Durable memory with provenance: list, show, promote, retract,
    /// verify, import, and sync MEMORY.md hand edits.
    Memory(memory_cmd::MemoryArgs),
    /// Serve runs over HTTP: a JSON API, event streams that resume
    /// exactly (Last-Event-ID), approvals, bearer tokens with scopes.
    Serve(serve_cmd::ServeArgs),
    /// Bearer tokens of `attest serve`: create (printed once), list, revoke.
    Token(serve_cmd::TokenArgs),
    /// Evaluate the harness: a suite's cases K times per A/B group, with
    /// metrics and intervals (`report` writes HTML, `compare` diffs two
    /// result files).
    Eval(attest_cli::eval::cli::EvalArgs),
    /// Serve attest as an MCP server on stdio: one tool, `attest_run
    /// {prompt, expect, required_tools}`, returning the run's terminal
    /// state, reason, receipts and answer.
    McpServe(mcp_serve::McpServeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A run drives one model connection and one tool at a time: on a
    // single thread its wake-ups stay in the process instead of crossing
    // threads through the kernel each step. The local model computes on
    // threads of its own, and MCP clients on a runtime of their own.
    // Front ends that serve many clients at once keep a worker pool.
    let single = matches!(cli.command, Command::Run(_) | Command::Resume(_));
    let runtime = match async_runtime(single) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("attest: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let code = match cli.command {
        Command::Run(args) => runtime.block_on(run_cmd::run(args)),
        Command::Chat(args) => runtime.block_on(chat_cmd::chat(args)),
        Command::Resume(args) => runtime.block_on(run_cmd::resume(args)),
        Command::Sessions(args) => report(inspect::sessions(args)),
        Command::Runs(args) => report(inspect::runs(args)),
        Command::Trace(args) => report(inspect::trace(args)),
        Command::Init(args) => report(workspace_cmd::init(args)),
        Command::Doctor(args) => workspace_cmd::doctor(args),
        Command::Memory(args) => report(memory_cmd::run(args)),
        Command::Trust(args) => report(trust_cmd::run(args)),
        Command::Serve(args) => report(runtime.block_on(serve_cmd::serve(args))),
        Command::Token(args) => report(serve_cmd::token(args)),
        Command::Eval(args) => {
            runtime.block_on(attest_cli::eval::cli::run(args, &eval_runner::runner))
        }
        Command::McpServe(args) => runtime.block_on(mcp_serve::serve(args)),
    };
    ExitCode::from(code)
}

/// A current-thread runtime when `single`, else a multi-thread one.
fn async_runtime(single: bool) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = if single {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    builder.enable_all().build()
}

fn report(result: anyhow::Result<()>) -> u8 {
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("attest: {e:#}");
            EXIT_USAGE
        }
    }
}
