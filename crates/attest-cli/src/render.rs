//! Human output: progress on stderr, the answer on stdout.

use attest_protocol::{Event, EventBody, ReceiptStatus, TerminalState};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub struct HumanRenderer {
    provider_label: String,
    /// In `attest chat` text is streamed and the verdict printed by the chat.
    chat: bool,
    /// A running tool's spinner, on a terminal only.
    spinner: Option<Spinner>,
    /// Token deltas left stderr mid-line; the next line starts fresh.
    mid_line: bool,
}

/// Redraws `⠋ tool 1.2s` on stderr while a tool runs.
struct Spinner {
    running: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Spinner {
    fn start(tool: &str) -> Option<Spinner> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let running = Arc::new(AtomicBool::new(true));
        let flag = Arc::clone(&running);
        let tool = tool.to_string();
        let thread = std::thread::spawn(move || {
            const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
            let started = std::time::Instant::now();
            let mut frame = 0;
            while flag.load(Ordering::Relaxed) {
                let mut err = std::io::stderr().lock();
                let _ = write!(
                    err,
                    "\r  {} {tool} {:.1}s ",
                    FRAMES[frame % FRAMES.len()],
                    started.elapsed().as_secs_f32()
                );
                let _ = err.flush();
                drop(err);
                frame += 1;
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
        });
        Some(Spinner { running, thread })
    }

    fn stop(self) {
        self.running.store(false, Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

impl HumanRenderer {
    pub fn new(provider_label: &str) -> Self {
        HumanRenderer {
            provider_label: provider_label.to_string(),
            chat: false,
            spinner: None,
            mid_line: false,
        }
    }

    pub fn for_chat(mut self) -> Self {
        self.chat = true;
        self
    }

    pub fn on_event(&mut self, event: &Event) {
        if let Some(spinner) = self.spinner.take() {
            spinner.stop();
        }
        let mut err = std::io::stderr().lock();
        // Token deltas: the model's raw text as it is generated, inline.
        if let EventBody::Progress {
            text, delta: true, ..
        } = &event.body
        {
            let text = terminal_safe(text);
            let _ = err.write_all(text.as_bytes());
            let _ = err.flush();
            if !text.is_empty() {
                self.mid_line = !text.ends_with('\n');
            }
            return;
        }
        if std::mem::take(&mut self.mid_line) {
            let _ = writeln!(err);
        }
        // Write errors on a closed terminal are not worth failing a run for.
        let _ = match &event.body {
            EventBody::RunStarted { .. } | EventBody::Progress { .. } | EventBody::Done { .. }
                if self.chat =>
            {
                Ok(())
            }
            EventBody::RunStarted {
                contract,
                session_id,
                ..
            } => writeln!(
                err,
                "attest: run {} ({}, contract {}, session {session_id})",
                event.run_id, self.provider_label, contract.kind
            ),
            EventBody::RunResumed {
                interrupted_calls, ..
            } => writeln!(
                err,
                "attest: resuming run {} ({}); interrupted calls: {}",
                event.run_id,
                self.provider_label,
                if interrupted_calls.is_empty() {
                    "none".to_string()
                } else {
                    interrupted_calls.join(", ")
                }
            ),
            EventBody::Progress { text, .. } => writeln!(err, "  … {}", one_line(text, 200)),
            EventBody::ToolStarted {
                tool_name,
                arguments,
                ..
            } => {
                let line = writeln!(
                    err,
                    "  → {tool_name} {}",
                    one_line(&arguments.to_string(), 160)
                );
                drop(err);
                self.spinner = Spinner::start(tool_name);
                line
            }
            EventBody::ToolProgress {
                tool_name,
                progress,
                total,
                message,
                ..
            } => {
                let figure = match total {
                    Some(total) => format!("{progress}/{total}"),
                    None => progress.to_string(),
                };
                let said = message
                    .as_deref()
                    .map(|m| format!(" {}", one_line(&terminal_safe(m), 120)))
                    .unwrap_or_default();
                let line = writeln!(err, "    {tool_name} {figure}{said}");
                drop(err);
                self.spinner = Spinner::start(tool_name);
                line
            }
            EventBody::ToolResult {
                tool_name,
                status,
                receipt,
                output_preview,
                ..
            } => {
                let mark = if *status == ReceiptStatus::Ok {
                    "✓"
                } else {
                    "✗"
                };
                let mut detail = String::new();
                if let Some(h) = &receipt.evidence.sha256 {
                    detail.push_str(&format!(" sha256 {}", &h[..h.len().min(12)]));
                }
                if let Some(c) = receipt.evidence.exit_code {
                    detail.push_str(&format!(" exit {c}"));
                }
                if let Some(id) = &receipt.evidence.message_id {
                    detail.push_str(&format!(" id {id}"));
                }
                if *status != ReceiptStatus::Ok {
                    detail.push_str(&format!(" — {}", one_line(output_preview, 160)));
                }
                writeln!(
                    err,
                    "  {mark} {tool_name} {} ({} ms){detail}",
                    status.as_str(),
                    receipt.duration_ms()
                )
            }
            EventBody::ApprovalRequested { tool_name, .. } => {
                writeln!(err, "  ? approval requested for {tool_name}")
            }
            EventBody::ApprovalResolved {
                tool_name,
                approved,
                decided_by,
                ..
            } => writeln!(
                err,
                "  {} {tool_name} {} by {decided_by}",
                if *approved { "✓" } else { "✗" },
                if *approved { "approved" } else { "denied" }
            ),
            EventBody::CorrectiveInjected { missing, .. } => {
                writeln!(err, "  ↻ corrective turn: missing {missing}")
            }
            EventBody::ContinuationRequested { finish_reason, .. } => writeln!(
                err,
                "  ↻ the answer was cut off ({finish_reason}); asked once to continue"
            ),
            EventBody::ProtocolError { kind, detail, .. } => {
                writeln!(err, "  ! protocol error ({kind:?}): {detail}")
            }
            EventBody::ProviderRetry {
                attempt,
                delay_ms,
                error,
                ..
            } => writeln!(
                err,
                "  ⟳ provider retry {attempt} in {delay_ms} ms: {}",
                one_line(error, 160)
            ),
            EventBody::Compacted { archived_items, .. } => writeln!(
                err,
                "  ⇣ history compacted: {archived_items} item(s) archived (declared cache reset point)"
            ),
            EventBody::ReminderInjected { text, .. } => {
                let text = text.strip_prefix("[attest reminder] ").unwrap_or(text);
                writeln!(err, "  ↻ reminder: {}", one_line(text, 160))
            }
            EventBody::Final { .. } => Ok(()),
            EventBody::Done {
                state,
                reason,
                answer,
                basis,
                steps,
                grounding,
                receipts,
                ..
            } => {
                if let Some(g) = grounding {
                    let _ = write!(err, "{}", grounding_marks(g, !receipts.is_empty()));
                }
                let _ = writeln!(
                    err,
                    "attest: {state} ({reason}) after {steps} step(s): {basis}\nattest: details: attest trace {}",
                    event.run_id
                );
                let mut out = std::io::stdout().lock();
                match (state, answer) {
                    (TerminalState::Completed, Some(a)) => writeln!(out, "{a}"),
                    (TerminalState::Unverified, Some(a)) => {
                        writeln!(out, "UNVERIFIED: {basis}\n{a}")
                    }
                    _ => Ok(()),
                }
            }
        };
    }
}

/// The human marks of an answer's grounding (SPEC A9): its ungrounded
/// values, and a warning when tools ran but the answer uses none of their
/// output.
pub fn grounding_marks(g: &attest_protocol::Grounding, tools_ran: bool) -> String {
    let mut out = String::new();
    if !g.ungrounded.is_empty() {
        let values: Vec<String> = g
            .ungrounded
            .iter()
            .map(|v| format!("`{}`", terminal_safe(v)))
            .collect();
        out.push_str(&format!(
            "attest: ungrounded in the answer (no tool output, prompt or earlier evidence shows it): {}\n",
            values.join(", ")
        ));
    }
    if !g.evidence_used && tools_ran {
        out.push_str(
            "attest: warning: the answer uses no value from any tool output; it is not backed by what the tools returned\n",
        );
    }
    out
}

/// Model text without control characters (other than newline and tab):
/// untrusted output must not drive the terminal with escape sequences.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    if text
        .chars()
        .all(|c| !c.is_control() || c == '\n' || c == '\t')
    {
        return std::borrow::Cow::Borrowed(text);
    }
    text.chars()
        .filter(|&c| !c.is_control() || c == '\n' || c == '\t')
        .collect::<String>()
        .into()
}

pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c == '\n' { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_model_text_loses_escape_sequences_but_keeps_layout() {
        let raw = "ok\x1b]0;pwned\x07 \x1b[2Jdone\n\tnext\r";
        assert_eq!(terminal_safe(raw), "ok]0;pwned [2Jdone\n\tnext");
        assert!(matches!(
            terminal_safe("plain\ttext\n"),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
