//! `attest run` and `attest resume`.

use crate::output::Output;
use crate::setup::{prepare, EngineArgs};
use crate::EXIT_USAGE;
use anyhow::{bail, Context, Result};
use attest::{RunOutcome, RunRequest, RunSettings};
use attest_store::Store;
use clap::Args;
use std::io::Read;
use tokio_util::sync::CancellationToken;

/// Exit code when the run store fails mid-run.
const EXIT_FAILED: u8 = 5;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The task. `-` reads it from standard input.
    pub prompt: String,
    /// Continue a session: earlier runs' tool calls and results are sent as
    /// history. A new session id is made when omitted.
    #[arg(long)]
    pub session: Option<String>,
    /// Start from a structured handoff of another run (SPEC E5): its goal,
    /// receipt-backed facts, failures and open questions with their source
    /// refs — not its transcript. The new run is a separate session.
    #[arg(long, value_name = "RUN")]
    pub handoff_from: Option<String>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run to resume (id or unique prefix).
    pub run: String,
    /// Provider and limits default to the run's stored settings.
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Run a new task; returns the exit code.
pub async fn run(args: RunArgs) -> u8 {
    match start_run(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("attest: {e:#}");
            EXIT_USAGE
        }
    }
}

/// Resume a run left unfinished by a crash; returns the exit code.
pub async fn resume(args: ResumeArgs) -> u8 {
    match start_resume(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("attest: {e:#}");
            EXIT_USAGE
        }
    }
}

async fn start_run(args: RunArgs) -> Result<u8> {
    let prepared = prepare(&args.engine)?;
    let prompt = read_prompt(&args.prompt)?;
    let request = RunRequest {
        session: args.session.clone(),
        handoff_from: args.handoff_from.clone(),
        ..RunRequest::new(prompt)
    };
    let mut output = Output::new(prepared.json, prepared.provider_label());
    let mut observer = |e: &attest_protocol::Event| output.on_event(e);
    let result = prepared
        .engine
        .run_observed(request, &mut observer, cancel_on_ctrl_c())
        .await;
    exit_code(result)
}

async fn start_resume(args: ResumeArgs) -> Result<u8> {
    // The stored settings choose the provider: they are read only from a
    // log whose hash chain holds (the chain's first link covers them).
    let store = attest::open_store(&args.engine.workspace)?;
    let record = store.run(&args.run)?;
    attest::verify_log(&store, &record.id, "resume", attest::Unchained::Refuse)?;
    drop(store);
    if !record.is_running() {
        bail!(
            "run {} already ended: {} ({})",
            record.id,
            record.status,
            record.reason.as_deref().unwrap_or("-")
        );
    }
    if !record.is_orphaned() {
        bail!(
            "run {} is still running in process {}",
            record.id,
            record.pid.unwrap_or(0)
        );
    }
    let stored: RunSettings = serde_json::from_value(record.settings.clone())
        .context("the run's stored settings are unreadable; pass --provider and --model")?;
    if let Some(why) = weakening_flag(&args.engine, &stored) {
        bail!("run {}: {why}", record.id);
    }
    let prepared = prepare(&args.engine.clone().with_defaults_from(&stored))?;
    let mut output = Output::new(prepared.json, prepared.provider_label());
    let mut observer = |e: &attest_protocol::Event| output.on_event(e);
    let result = prepared
        .engine
        .resume(&record.id, &mut observer, cancel_on_ctrl_c())
        .await;
    exit_code(result)
}

/// A resume keeps the run's contract, approval mode and limits (SPEC A10):
/// a flag may repeat or tighten them, never loosen them. Says which flag
/// would, and what the run has.
fn weakening_flag(args: &EngineArgs, stored: &RunSettings) -> Option<String> {
    let kept = "a resumed run keeps the contract, approval mode and limits it started with";
    if let Some(kind) = args.expect.filter(|k| *k != stored.contract.kind) {
        return Some(format!(
            "--expect {kind} would change its contract `{}`; {kept}",
            stored.contract.kind
        ));
    }
    let dropped: Vec<&str> = (stored.contract.required_tools.iter())
        .filter(|t| !args.require_tool.is_empty() && !args.require_tool.contains(t))
        .map(String::as_str)
        .collect();
    if !dropped.is_empty() {
        return Some(format!(
            "--require-tool leaves out required tool(s) {}; {kept}",
            dropped.join(", ")
        ));
    }
    if args.approval == Some(attest::ApprovalMode::Allow)
        && stored.approval == attest::ApprovalMode::Deny
    {
        return Some(format!(
            "--approval allow would approve what the run denies (it started with --approval deny); {kept}"
        ));
    }
    if let Some(n) = args.max_steps.filter(|n| *n > stored.max_steps) {
        return Some(format!(
            "--max-steps {n} exceeds its limit of {}; {kept}",
            stored.max_steps
        ));
    }
    if let Some(n) = args.max_corrections.filter(|n| *n > stored.max_corrections) {
        return Some(format!(
            "--max-corrections {n} exceeds its limit of {}; {kept}",
            stored.max_corrections
        ));
    }
    if let (Some(t), Some(limit)) = (args.timeout, stored.timeout_secs) {
        if t > limit {
            return Some(format!(
                "--timeout {t} exceeds its limit of {limit} s; {kept}"
            ));
        }
    }
    None
}

fn cancel_on_ctrl_c() -> CancellationToken {
    let cancel = CancellationToken::new();
    let on_ctrl_c = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_ctrl_c.cancel();
        }
    });
    cancel
}

/// The exit code of a run: its terminal state's, 5 when the engine stopped
/// mid-run (the store failed), and an error for problems before it started.
pub(crate) fn exit_code(result: Result<RunOutcome, attest::Error>) -> Result<u8> {
    match result {
        Ok(outcome) => Ok(crate::exit_code_for(outcome.state)),
        Err(attest::Error::Engine(e)) => {
            eprintln!("attest: the run was stopped: {e}");
            Ok(EXIT_FAILED)
        }
        Err(e) => Err(e.into()),
    }
}

fn read_prompt(arg: &str) -> Result<String> {
    let prompt = if arg == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read the prompt from standard input")?;
        text
    } else {
        arg.to_string()
    };
    if prompt.trim().is_empty() {
        bail!("the prompt is empty");
    }
    Ok(prompt)
}
