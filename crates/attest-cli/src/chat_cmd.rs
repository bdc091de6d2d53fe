//! `attest chat`: an interactive session in the terminal. Each line is a
//! turn of one session; answer text streams as it arrives, tool progress is
//! shown live, approvals are asked inline, and every turn still ends in a
//! terminal state decided by its receipts.

use crate::inspect::timeline;
use crate::output::Output;
use crate::run_cmd::exit_code;
use crate::setup::{load_config, prepare_loaded, trust_store, EngineArgs};
use anyhow::Result;
use async_trait::async_trait;
use attest::config::LoadedConfig;
use attest::RunRequest;
use attest_core::provider::TextSink;
use attest_core::{new_id, ApprovalDecision, ApprovalRequest, Approver};
use attest_protocol::Event;
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
                via: Some("terminal".into()),
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
                            via: Some("terminal".into()),
                        },
                        "a" | "always" => {
                            if let Ok(mut a) = self.always.lock() {
                                a.insert(request.tool_name.clone());
                            }
                            ApprovalDecision {
                                approved: true,
                                decided_by: "user".into(),
                                message: None,
                                via: Some("terminal".into()),
                            }
                        }
                        _ => ApprovalDecision {
                            approved: false,
                            decided_by: "user".into(),
                            message: (!rest.trim().is_empty()).then(|| rest.trim().to_string()),
                            via: Some("terminal".into()),
                        },
                    }
                }
                Ok(None) => ApprovalDecision {
                    approved: false,
                    decided_by: "user".into(),
                    message: Some("the terminal closed".into()),
                    via: Some("terminal".into()),
                },
                Err(_) => ApprovalDecision {
                    approved: false,
                    decided_by: "timeout".into(),
                    message: None,
                    via: None,
                },
            }
        };
        self.record(request, &decision);
        decision
    }
}

/// The settings for the chat. When the workspace's `attest.toml` sets
/// security keys and is not trusted, a person at a terminal is asked once
/// whether to trust it (SPEC F13); anything but yes keeps them ignored.
async fn offer_trust(args: &EngineArgs, lines: &Lines) -> Result<LoadedConfig> {
    use std::io::IsTerminal as _;
    let loaded = load_config(args)?;
    let Some(path) = loaded.untrusted_workspace() else {
        return Ok(loaded);
    };
    if !std::io::stdin().is_terminal() {
        return Ok(loaded);
    }
    eprint!(
        "attest: {} sets security settings ({}). Trust this workspace and use them? [y/N] ",
        path.display(),
        loaded.ignored.join(", ")
    );
    let answer = lines.lock().await.recv().await.unwrap_or_default();
    if !matches!(answer.trim(), "y" | "Y" | "yes") {
        return Ok(loaded);
    }
    let store = trust_store()
        .ok_or_else(|| anyhow::anyhow!("cannot locate the user config dir (set HOME)"))?;
    let record = store.trust(&args.workspace)?;
    eprintln!("attest: trusted {}", record.path.display());
    load_config(args)
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
    let loaded = offer_trust(&args.engine, &lines).await?;
    let prepared = prepare_loaded(
        &args.engine,
        loaded,
        Some(approver.clone() as Arc<dyn Approver>),
    )?;
    let session = args.session.clone().unwrap_or_else(new_id);
    let store = prepared.engine.store().clone();
    eprintln!(
        "attest chat — session {session} ({}). /exit to leave, /trace for the last turn, /approvals for decisions.",
        prepared.provider_label()
    );
    let stream_progress = prepared.engine.streams_progress();
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
                        let store = store.lock();
                        let run = store.run(id)?;
                        print!("{}", timeline(&run, &store.entries(id)?));
                    }
                    None => println!("no turn yet"),
                }
                continue;
            }
            _ => {}
        }
        streamed.store(false, std::sync::atomic::Ordering::Relaxed);
        let run_id = new_id();
        let mut request = RunRequest {
            session: Some(session.clone()),
            run_id: Some(run_id.clone()),
            force_compaction: std::mem::take(&mut compact_next),
            ..RunRequest::new(input)
        };
        // With token deltas on (the local model's default) the raw response
        // streams to stderr and the answer is printed once judged;
        // otherwise answer text streams to stdout.
        if !stream_progress {
            let flag = Arc::clone(&streamed);
            request.text_sink = Some(TextSink(Arc::new(move |delta: &str| {
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
                let mut out = std::io::stdout().lock();
                // Already redacted by the engine; escape sequences a model
                // writes must not drive the terminal.
                let _ = out.write_all(crate::render::terminal_safe(delta).as_bytes());
                let _ = out.flush();
            })));
        }
        // Ctrl-C during a turn cancels the turn, not the chat.
        let cancel = CancellationToken::new();
        let on_ctrl_c = cancel.clone();
        let watcher = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                on_ctrl_c.cancel();
            }
        });
        let mut output = Output::chat(prepared.provider_label());
        let mut observer = |e: &Event| output.on_event(e);
        let result = prepared
            .engine
            .run_observed(request, &mut observer, cancel)
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
        // Errors are reported; the chat goes on.
        if let Err(e) = exit_code(result) {
            eprintln!("attest: {e:#}");
        }
        last_run = Some(run_id);
    }
    Ok(0)
}
