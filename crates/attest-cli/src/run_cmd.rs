//! `attest run` and `attest resume`.

use crate::output::Output;
use crate::setup::{prepare, EngineArgs, Prepared, StoredSettings};
use crate::store_log::{open_store, resume_state, verify_log, StoreLog, Unchained};
use crate::EXIT_USAGE;
use anyhow::{bail, Context, Result};
use attest_core::state::{AgentState, SliceFilter};
use attest_core::{
    redact_secrets, session_history, ContextLayer, EngineError, RunConfig, RunOutcome,
};
use attest_protocol::{TranscriptItem, LOOP_VERSION};
use attest_store::{NewRun, SqliteStore, Store};
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
    let mut prepared = prepare(&args.engine)?;
    let prompt = read_prompt(&args.prompt)?;
    let mut store = open_store(prepared.workspace.root())?;
    if let Some(session) = &args.session {
        prepared.cfg.session_id = session.clone();
    }
    let session = prepared.cfg.session_id.clone();
    prepared.cfg.prior_history = earlier_turns(&prepared, &mut store, &session, None).await?;
    if let Some(from) = &args.handoff_from {
        let source = store.run(from)?;
        verify_log(&store, &source.id, "--handoff-from", Unchained::Warn)?;
        if source.session_id == session {
            bail!("--handoff-from {from}: a handoff starts a separate session; drop --session {session} or pick another");
        }
        let contract = serde_json::from_value::<StoredSettings>(source.settings.clone())
            .map(|s| s.contract)
            .unwrap_or_default();
        let state = AgentState::from_transcript(&store.items(&source.id)?, &contract);
        prepared.cfg.context_layers.push(ContextLayer {
            name: "handoff".to_string(),
            text: state.handoff(&source.id, &SliceFilter::default()),
            truncated: false,
        });
    }
    let memory_decisions = prepared.add_memory_layer(&mut store, &prompt);
    store.ensure_session(&session)?;
    store.begin_run(&NewRun {
        id: prepared.cfg.run_id.clone(),
        session_id: session,
        trace_id: prepared.cfg.trace_id.clone(),
        prompt: redact_secrets(&prompt, &prepared.cfg.secrets),
        settings: serde_json::to_value(&prepared.settings)?,
        loop_version: LOOP_VERSION.to_string(),
        prompt_version: prepared.engine.prompt_version(),
    })?;
    let mut output = Output::new(prepared.json, &prepared.provider_label);
    let cancel = cancel_on_ctrl_c();
    let mut log = StoreLog {
        store: &mut store,
        run_id: prepared.cfg.run_id.clone(),
    };
    let mut observer = |e: &attest_protocol::Event| output.on_event(e);
    let result = prepared
        .engine
        .run(&prompt, &prepared.cfg, &mut log, &mut observer, cancel)
        .await;
    remember(&prepared, &mut store, &result, memory_decisions);
    Ok(exit_code(result))
}

async fn start_resume(args: ResumeArgs) -> Result<u8> {
    let store = open_store(&args.engine.workspace)?;
    let record = store.run(&args.run)?;
    verify_log(&store, &record.id, "resume", Unchained::Refuse)?;
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
    let stored: StoredSettings = serde_json::from_value(record.settings.clone())
        .context("the run's stored settings are unreadable; pass --provider and --model")?;
    drop(store);
    let mut prepared = prepare(&args.engine.clone().with_defaults_from(&stored))?;
    let mut store = open_store(prepared.workspace.root())?;
    prepared.cfg.run_id = record.id.clone();
    prepared.cfg.trace_id = record.trace_id.clone();
    prepared.cfg.session_id = record.session_id.clone();
    prepared.cfg.prior_history =
        earlier_turns(&prepared, &mut store, &record.session_id, Some(&record.id)).await?;
    let memory_decisions = prepared.add_memory_layer(&mut store, &record.prompt);
    let state = resume_state(&store, &record.id)?;
    store.claim_run(&record.id)?;
    let mut output = Output::new(prepared.json, &prepared.provider_label);
    let cancel = cancel_on_ctrl_c();
    let mut log = StoreLog {
        store: &mut store,
        run_id: record.id.clone(),
    };
    let mut observer = |e: &attest_protocol::Event| output.on_event(e);
    let result = prepared
        .engine
        .resume(state, &prepared.cfg, &mut log, &mut observer, cancel)
        .await;
    remember(&prepared, &mut store, &result, memory_decisions);
    Ok(exit_code(result))
}

/// Memory consolidation after a run that ended (SPEC G2): what it learned
/// goes through the gate, every decision into its trace. A memory failure
/// never changes the run's outcome or exit code.
pub(crate) fn remember(
    prepared: &Prepared,
    store: &mut SqliteStore,
    result: &Result<RunOutcome, EngineError>,
    decisions: Vec<attest_core::memory::DecisionRecord>,
) {
    if let Ok(outcome) = result {
        if let Err(e) = crate::memory_run::after_run(
            store,
            prepared.workspace.root(),
            outcome,
            &prepared.cfg.secrets,
            decisions,
        ) {
            eprintln!("attest: memory not updated after this run: {e:#}");
        }
    }
}

/// History from the session's earlier runs (oldest first, up to `before`).
/// A run left `running` by a dead process is closed first: its pending
/// calls are recorded as interrupted and it ends `failed`/`interrupted`.
pub(crate) async fn earlier_turns(
    prepared: &Prepared,
    store: &mut SqliteStore,
    session: &str,
    before: Option<&str>,
) -> Result<Vec<TranscriptItem>> {
    let mut runs = store.runs(Some(session))?;
    runs.reverse();
    let mut transcripts = Vec::new();
    for run in runs {
        if Some(run.id.as_str()) == before {
            break;
        }
        verify_log(store, &run.id, "session history", Unchained::Warn)?;
        if run.is_running() {
            if !run.is_orphaned() {
                bail!(
                    "session {session} has run {} in progress (process {}); wait for it to end",
                    run.id,
                    run.pid.unwrap_or(0)
                );
            }
            close_orphan(prepared, store, &run).await?;
        }
        transcripts.push(store.items(&run.id)?);
    }
    Ok(session_history(&transcripts))
}

async fn close_orphan(
    prepared: &Prepared,
    store: &mut SqliteStore,
    run: &attest_store::RunRecord,
) -> Result<()> {
    eprintln!(
        "attest: run {} was left unfinished by a process that stopped; recording it as interrupted (use `attest resume` instead to continue it)",
        run.id
    );
    let state = resume_state(store, &run.id)?;
    let cfg = RunConfig {
        run_id: run.id.clone(),
        trace_id: run.trace_id.clone(),
        session_id: run.session_id.clone(),
        ..prepared.cfg.clone()
    };
    store.claim_run(&run.id)?;
    let mut log = StoreLog {
        store,
        run_id: run.id.clone(),
    };
    let mut quiet = |_: &attest_protocol::Event| {};
    prepared
        .engine
        .close_interrupted(state, &cfg, &mut log, &mut quiet)
        .await?;
    Ok(())
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

pub(crate) fn exit_code(result: Result<RunOutcome, EngineError>) -> u8 {
    match result {
        Ok(outcome) => outcome.state.exit_code() as u8,
        Err(e) => {
            eprintln!("attest: the run was stopped: {e}");
            EXIT_FAILED
        }
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
