//! `attest chat`: an interactive session in the terminal. Each line is a
//! turn of one session; answer text streams as it arrives, tool progress is
//! shown live, approvals are asked inline, and every turn still ends in a
//! terminal state decided by its receipts.

use crate::inspect::timeline;
use crate::output::Output;
use crate::run_cmd::{earlier_turns, exit_code, remember};
use crate::setup::{prepare_with, EngineArgs};
use crate::store_log::{open_store, StoreLog};
use anyhow::Result;
use async_trait::async_trait;
use attest_core::{new_id, redact_secrets, ApprovalDecision, ApprovalRequest, Approver};
use attest_protocol::{Event, LOOP_VERSION};
use attest_providers::TextSink;
use attest_store::{NewRun, Store};
use clap::Args;
use std::collections::BTreeSet;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, Mutex as AsyncMutex};
use tokio_util::sync::CancellationToken;

const PROMPT: &str = "you> ";

#[derive(Debug, Args)]
pub struct ChatArgs {
    /// Continue this session (default: a new one).
    #[arg(long)]
    pub session: Option<String>,
    /// Seconds to wait for an approval answer before denying.
    #[arg(long, default_value_t = 300)]
    pub approval_timeout: u64,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// Lines typed at the terminal, shared by the prompt and the approver.
type Lines = Arc<AsyncMutex<mpsc::Receiver<String>>>;

fn spawn_line_reader() -> Lines {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut line = String::new();
        loop {
            line.clear();
            match stdin.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if tx
                        .blocking_send(line.trim_end_matches(['\n', '\r']).to_string())
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    });
    Arc::new(AsyncMutex::new(rx))
}

/// Asks at the terminal: allow once, allow for the session, or deny with a
/// message the model sees. No answer in time is a denial.
struct TerminalApprover {
    lines: Lines,
    timeout: Duration,
    always: Mutex<BTreeSet<String>>,
    decided: Mutex<Vec<String>>,
}

impl TerminalApprover {
    fn record(&self, request: &ApprovalRequest, decision: &ApprovalDecision) {
        if let Ok(mut d) = self.decided.lock() {
            d.push(format!(
                "{} {} {} — {}",
                request.call_id,
                request.tool_name,
                request.arguments,
                if decision.approved {
                    format!("allowed ({})", decision.decided_by)
                } else {
                    format!("denied ({})", decision.decided_by)
                }
            ));
        }
    }
}

#[async_trait]
impl Approver for TerminalApprover {
    async fn decide(&self, request: &ApprovalRequest) -> ApprovalDecision {
        let remembered = self
            .always
            .lock()
            .map(|a| a.contains(&request.tool_name))
            .unwrap_or(false);
        let decision = if remembered {
            ApprovalDecision {
                approved: true,
                decided_by: "session".into(),
                message: None,
            }
        } else {
            {
                let mut err = std::io::stderr().lock();
                let _ = write!(
                    err,
                    "\n? Allow {} {}\n  ({})\n  [y] once  [a] always this session  [n] deny (optionally: n <message for the model>) > ",
                    request.tool_name, request.arguments, request.reason
                );
                let _ = err.flush();
            }
            let answer = {
                let mut lines = self.lines.lock().await;
                tokio::time::timeout(self.timeout, lines.recv()).await
            };
            match answer {
                Ok(Some(line)) => {
                    let line = line.trim();
                    let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
                    match word {
                        "y" | "yes" => ApprovalDecision {
                            approved: true,
                            decided_by: "user".into(),
                            message: None,
                        },
                        "a" | "always" => {
                            if let Ok(mut a) = self.always.lock() {
                                a.insert(request.tool_name.clone());
                            }
                            ApprovalDecision {
                                approved: true,
                                decided_by: "user".into(),
                                message: None,
                            }
                        }
                        _ => ApprovalDecision {
                            approved: false,
                            decided_by: "user".into(),
                            message: (!rest.trim().is_empty()).then(|| rest.trim().to_string()),
                        },
                    }
                }
                Ok(None) => ApprovalDecision {
                    approved: false,
                    decided_by: "user".into(),
                    message: Some("the terminal closed".into()),
                },
                Err(_) => ApprovalDecision {
                    approved: false,
                    decided_by: "timeout".into(),
                    message: None,
                },
            }
        };
        self.record(request, &decision);
        decision
    }
}

pub async fn chat(args: ChatArgs) -> u8 {
    match run_chat(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("attest: {e:#}");
            crate::EXIT_USAGE
        }
    }
}

async fn run_chat(args: ChatArgs) -> Result<u8> {
    let lines = spawn_line_reader();
    let approver = Arc::new(TerminalApprover {
        lines: Arc::clone(&lines),
        timeout: Duration::from_secs(args.approval_timeout),
        always: Mutex::new(BTreeSet::new()),
        decided: Mutex::new(Vec::new()),
    });
    let mut prepared = prepare_with(&args.engine, Some(approver.clone() as Arc<dyn Approver>))?;
    let session = args.session.clone().unwrap_or_else(new_id);
    prepared.cfg.session_id = session.clone();
    let mut store = open_store(prepared.workspace.root())?;
    eprintln!(
        "attest chat — session {session} ({}). /exit to leave, /trace for the last turn, /approvals for decisions.",
        prepared.provider_label
    );
    let mut last_run: Option<String> = None;
    let mut compact_next = false;
    let streamed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    loop {
        print!("{PROMPT}");
        let _ = std::io::stdout().flush();
        let Some(line) = lines.lock().await.recv().await else {
            break;
        };
        let input = line.trim();
        match input {
            "" => continue,
            "/exit" | "/quit" => break,
            "/help" => {
                println!("/exit  leave\n/trace  how the last turn went\n/approvals  approval decisions so far\n/compact  compact the session's history before the next turn");
                continue;
            }
            "/compact" => {
                compact_next = true;
                println!("the next turn starts with the session's history compacted (a declared reset point)");
                continue;
            }
            "/approvals" => {
                let decided = approver
                    .decided
                    .lock()
                    .map(|d| d.clone())
                    .unwrap_or_default();
                if decided.is_empty() {
                    println!("no approvals asked yet");
                }
                for d in decided {
                    println!("{d}");
                }
                continue;
            }
            "/trace" => {
                match &last_run {
                    Some(id) => {
                        let run = store.run(id)?;
                        print!("{}", timeline(&run, &store.entries(id)?));
                    }
                    None => println!("no turn yet"),
                }
                continue;
            }
            _ => {}
        }
        // Memory is retrieved for each turn's own prompt.
        prepared.cfg.context_layers.retain(|l| l.name != "memory");
        let memory_decisions = prepared.add_memory_layer(&mut store, input);
        let mut cfg = prepared.cfg.clone();
        cfg.force_compaction = std::mem::take(&mut compact_next);
        streamed.store(false, std::sync::atomic::Ordering::Relaxed);
        // With token deltas on (the local model's default) the raw response
        // streams to stderr and the answer is printed once judged;
        // otherwise answer text streams to stdout.
        if !cfg.stream_progress {
            let flag = Arc::clone(&streamed);
            cfg.text_sink = Some(TextSink(Arc::new(move |delta: &str| {
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(delta.as_bytes());
                let _ = out.flush();
            })));
        }
        cfg.run_id = new_id();
        cfg.trace_id = new_id();
        cfg.prior_history = earlier_turns(&prepared, &mut store, &session, None).await?;
        store.ensure_session(&session)?;
        store.begin_run(&NewRun {
            id: cfg.run_id.clone(),
            session_id: session.clone(),
            trace_id: cfg.trace_id.clone(),
            prompt: redact_secrets(input, &cfg.secrets),
            settings: serde_json::to_value(&prepared.settings)?,
            loop_version: LOOP_VERSION.to_string(),
            prompt_version: prepared.engine.prompt_version(),
        })?;
        // Ctrl-C during a turn cancels the turn, not the chat.
        let cancel = CancellationToken::new();
        let on_ctrl_c = cancel.clone();
        let watcher = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                on_ctrl_c.cancel();
            }
        });
        let mut output = Output::chat(&prepared.provider_label);
        let mut observer = |e: &Event| output.on_event(e);
        let mut log = StoreLog {
            store: &mut store,
            run_id: cfg.run_id.clone(),
        };
        let result = prepared
            .engine
            .run(input, &cfg, &mut log, &mut observer, cancel)
            .await;
        watcher.abort();
        if let Ok(outcome) = &result {
            // Without streaming (or in the text protocol) nothing was shown yet.
            if !streamed.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(answer) = &outcome.answer {
                    print!("{answer}");
                }
            }
            println!();
            match outcome.state {
                attest_protocol::TerminalState::Completed => println!("[completed]"),
                state => println!("[{state}: {}] {}", outcome.reason, outcome.basis),
            }
        }
        remember(&prepared, &mut store, &result, memory_decisions);
        // Errors are reported; the chat goes on.
        let _ = exit_code(result);
        last_run = Some(cfg.run_id.clone());
    }
    Ok(0)
}
