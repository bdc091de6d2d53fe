//! `attest sessions`, `attest runs` and `attest trace`: reading the store.

use crate::render::one_line;
use anyhow::Result;
use attest::{open_store, verify_log, Unchained};
use attest_protocol::{CallSource, EventBody, LogEntry, TraceRecord, TranscriptItem};
use attest_store::{RunRecord, Store};
use clap::Args;
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct WorkspaceArg {
    /// Workspace whose store to read.
    #[arg(short = 'C', long, default_value = ".")]
    pub workspace: PathBuf,
    /// JSON output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Only runs of this session.
    #[arg(long)]
    pub session: Option<String>,
    #[command(flatten)]
    pub ws: WorkspaceArg,
}

#[derive(Debug, Args)]
pub struct TraceArgs {
    /// Run id or unique prefix.
    pub run: String,
    /// Show the raw model outputs kept for audit.
    #[arg(long)]
    pub raw: bool,
    #[command(flatten)]
    pub ws: WorkspaceArg,
}

fn status_label(run: &RunRecord) -> String {
    if run.is_orphaned() {
        "interrupted? (process gone: `attest resume`)".to_string()
    } else {
        run.status.clone()
    }
}

pub fn sessions(args: WorkspaceArg) -> Result<()> {
    let store = open_store(&args.workspace)?;
    let sessions = store.sessions()?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&sessions)?);
        return Ok(());
    }
    if sessions.is_empty() {
        println!("no sessions");
    }
    for s in sessions {
        println!(
            "{}  {} run(s)  last {}  updated {}",
            s.id,
            s.runs,
            s.last_status.as_deref().unwrap_or("-"),
            s.updated_at
        );
    }
    Ok(())
}

pub fn runs(args: RunsArgs) -> Result<()> {
    let store = open_store(&args.ws.workspace)?;
    let runs = store.runs(args.session.as_deref())?;
    if args.ws.json {
        println!("{}", serde_json::to_string_pretty(&runs)?);
        return Ok(());
    }
    if runs.is_empty() {
        println!("no runs");
    }
    for r in runs {
        println!(
            "{}  {:<12} {:<18} steps {:<3} {}  session {}  {}",
            r.id,
            status_label(&r),
            r.reason.as_deref().unwrap_or("-"),
            r.steps,
            r.started_at,
            r.session_id,
            one_line(&r.prompt, 60)
        );
    }
    Ok(())
}

pub fn trace(args: TraceArgs) -> Result<()> {
    let store = open_store(&args.ws.workspace)?;
    let run = store.run(&args.run)?;
    if let Some(warning) = verify_log(&store, &run.id, "trace", Unchained::Warn)? {
        eprintln!("attest: {warning}");
    }
    let entries = store.entries(&run.id)?;
    if args.raw {
        let artifacts = store.artifacts(&run.id)?;
        if args.ws.json {
            println!("{}", serde_json::to_string_pretty(&artifacts)?);
        } else {
            for a in artifacts {
                println!(
                    "--- artifact {} ({}, step {}) {}\n{}",
                    a.id,
                    a.kind,
                    a.step.map_or("-".into(), |s| s.to_string()),
                    a.created_at,
                    a.body
                );
            }
        }
        return Ok(());
    }
    if args.ws.json {
        let doc = serde_json::json!({ "run": run, "entries": entries });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    print!("{}", timeline(&run, &entries));
    Ok(())
}

/// A readable account of a run: requests, responses, calls with their
/// permission decisions and receipts, retries, and the terminal basis.
pub fn timeline(run: &RunRecord, entries: &[LogEntry]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "run {}  session {}  trace {}",
        run.id, run.session_id, run.trace_id
    );
    let _ = writeln!(
        out,
        "status {}{}  steps {}  started {}  finished {}",
        status_label(run),
        run.reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default(),
        run.steps,
        run.started_at,
        run.finished_at.as_deref().unwrap_or("-")
    );
    let _ = writeln!(
        out,
        "loop_version {}  prompt_version {}",
        run.loop_version, run.prompt_version
    );
    let _ = writeln!(out, "prompt: {}", one_line(&run.prompt, 200));
    if let Some(line) = cache_line(entries) {
        let _ = writeln!(out, "{line}");
    }
    for entry in entries {
        let line = match entry {
            LogEntry::Trace { trace } => trace_line(trace),
            LogEntry::Event { event } => event_line(&event.body),
            LogEntry::Item { item } => item_line(item),
            LogEntry::Archive { .. } => None,
        };
        if let Some(line) = line {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

/// The prompt cache's hit rate over the run's responses: the share of
/// input tokens the provider read from its cache. `None` when no response
/// reported input tokens.
fn cache_line(entries: &[LogEntry]) -> Option<String> {
    let (mut input, mut read, mut written, mut responses) = (0u64, 0u64, 0u64, 0usize);
    for entry in entries {
        if let LogEntry::Trace {
            trace:
                TraceRecord::Response {
                    input_tokens,
                    cached_input_tokens,
                    cache_creation_input_tokens,
                    ..
                },
        } = entry
        {
            input += input_tokens;
            read += cached_input_tokens;
            written += cache_creation_input_tokens;
            responses += 1;
        }
    }
    if input == 0 {
        return None;
    }
    let written = if written > 0 {
        format!(", {written} written")
    } else {
        String::new()
    };
    Some(format!(
        "prompt cache: {read} of {input} input tokens read from cache over {responses} response(s), hit rate {:.1}%{written}",
        read as f64 * 100.0 / input as f64
    ))
}

fn trace_line(trace: &TraceRecord) -> Option<String> {
    Some(match trace {
        TraceRecord::Request {
            step,
            attempt,
            api_family,
            model,
            stream,
            prefix_hash,
            tool_names,
            message_count,
            max_tokens,
            temperature,
            context_sources,
            pairing_notes,
            ..
        } => {
            let sources: Vec<String> = context_sources
                .iter()
                .map(|s| {
                    format!(
                        "{} {} item(s) {} B{}",
                        s.name,
                        s.items,
                        s.bytes,
                        if s.truncated { " truncated" } else { "" }
                    )
                })
                .collect();
            let mut l = format!(
                "\nstep {step}  request attempt {attempt}: {api_family} {model} stream={stream} max_tokens={max_tokens}{} messages={message_count} prefix {}\n  tools: {}\n  context: {}",
                temperature.map(|t| format!(" temperature={t}")).unwrap_or_default(),
                &prefix_hash[..prefix_hash.len().min(12)],
                tool_names.join(", "),
                sources.join("; ")
            );
            for note in pairing_notes {
                let _ = write!(l, "\n  pairing: {note}");
            }
            l
        }
        TraceRecord::Response {
            raw_finish_reason,
            parsed_calls,
            call_source,
            parse_failures,
            input_tokens,
            output_tokens,
            cached_input_tokens,
            text,
            ..
        } => {
            let cached = if *cached_input_tokens > 0 {
                format!(" (cached {cached_input_tokens})")
            } else {
                String::new()
            };
            let mut l = format!(
                "  response: finish {}  tokens in {input_tokens}{cached} out {output_tokens}  calls [{}]",
                raw_finish_reason.as_deref().unwrap_or("(none)"),
                parsed_calls.join(", ")
            );
            if let Some(source) = call_source.filter(|s| *s != CallSource::Native) {
                let _ = write!(
                    l,
                    " from {}",
                    serde_json::json!(source).as_str().unwrap_or("")
                );
            }
            if !text.is_empty() {
                let _ = write!(l, "\n    text: {}", one_line(text, 160));
            }
            for f in parse_failures {
                let _ = write!(l, "\n    parse failure: {f}");
            }
            l
        }
        TraceRecord::RawOutput { .. } => return None,
        TraceRecord::ProviderError {
            attempt,
            error,
            retryable,
            ..
        } => format!(
            "  provider error (attempt {attempt}, {}): {}",
            if *retryable { "retryable" } else { "final" },
            one_line(error, 200)
        ),
        TraceRecord::PermissionDecision {
            call_id,
            tool_name,
            permission,
            approved,
            decided_by,
        } => format!(
            "  permission {tool_name} {call_id}: {permission} → {} by {decided_by}",
            if *approved { "allowed" } else { "refused" }
        ),
        TraceRecord::InvalidArguments {
            call_id,
            tool_name,
            error,
        } => {
            format!(
                "  invalid call {tool_name} {call_id}: {}",
                one_line(error, 200)
            )
        }
        TraceRecord::ProtocolViolation { kind, raw, .. } => {
            format!(
                "  protocol violation {kind:?}: raw output kept as {raw} (`attest trace --raw`)"
            )
        }
        TraceRecord::CacheReset { reset_point, .. } => format!(
            "  cache reset ({:?}): prefix {} → {}",
            reset_point.reason,
            &reset_point.prefix_hash_before[..reset_point.prefix_hash_before.len().min(12)],
            &reset_point.prefix_hash_after[..reset_point.prefix_hash_after.len().min(12)]
        ),
        TraceRecord::Grounding { step, grounding } => grounding_lines(*step, grounding),
        TraceRecord::Terminal {
            state,
            reason,
            basis,
        } => {
            format!("\nterminal: {state} ({reason})\n  basis: {basis}")
        }
        TraceRecord::WebhookDelivery {
            event,
            webhook_id,
            host,
            attempt,
            status,
            error,
            ..
        } => {
            let outcome = match (status, error) {
                (Some(code), _) => format!("HTTP {code}"),
                (None, Some(e)) => one_line(e, 120),
                (None, None) => "no answer".into(),
            };
            format!("  webhook {event} {webhook_id} to {host} (attempt {attempt}): {outcome}")
        }
        TraceRecord::Sandbox {
            mechanism,
            note,
            not_confined,
        } => {
            let mut line = format!(
                "  sandbox {}: {note}",
                mechanism.as_deref().unwrap_or("none")
            );
            if !not_confined.is_empty() {
                line.push_str(&format!(" (not confined: {})", not_confined.join("; ")));
            }
            line
        }
        TraceRecord::ConfigIgnored { key, source } => {
            format!("  config ignored: {key} from untrusted {source}")
        }
        TraceRecord::EvalGroup { group, switches } => {
            let on = |b: bool| if b { "on" } else { "off" };
            format!(
                "  eval group {group}: invariant prompt {}, receipt guard {}, protocol isolation {}, memory gate {}",
                on(switches.invariant_prompt),
                on(switches.receipt_guard),
                on(switches.protocol_isolation),
                on(switches.memory_gate)
            )
        }
        TraceRecord::MemoryDecision {
            item_id,
            content_preview,
            provenance,
            decision,
            reason,
        } => format!(
            "  memory {} {item_id} ({}): {}\n    why: {}",
            decision.as_str(),
            provenance.as_str(),
            one_line(content_preview, 120),
            one_line(reason, 240)
        ),
    })
}

/// The mapping of an answer's checkable values to where they were found.
fn grounding_lines(step: u32, g: &attest_protocol::Grounding) -> String {
    let mut out = format!(
        "  grounding of the answer at step {step}: {} value(s), evidence used: {}",
        g.values.len(),
        if g.evidence_used { "yes" } else { "no" }
    );
    for v in &g.values {
        let mut found = Vec::new();
        if !v.call_ids.is_empty() {
            found.push(format!("output of {}", v.call_ids.join(", ")));
        }
        if !v.session_call_ids.is_empty() {
            found.push(format!(
                "earlier output of {}",
                v.session_call_ids.join(", ")
            ));
        }
        if v.in_prompt {
            found.push("the prompt".to_string());
        }
        if v.tool_name {
            found.push("a tool name".to_string());
        }
        let found = if found.is_empty() {
            "UNGROUNDED".to_string()
        } else {
            found.join("; ")
        };
        out.push_str(&format!(
            "\n    {} `{}` ← {found}",
            v.kind.as_str(),
            one_line(&v.label(), 80)
        ));
    }
    out
}

fn event_line(body: &EventBody) -> Option<String> {
    Some(match body {
        EventBody::ToolResult {
            call_id,
            tool_name,
            receipt,
            ..
        } => {
            let ev = serde_json::to_string(&receipt.evidence).unwrap_or_default();
            format!(
                "  receipt {tool_name} {call_id}: {} {} {} ms  evidence {ev}{}",
                receipt.status.as_str(),
                serde_json::to_value(receipt.verification_status)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default(),
                receipt.duration_ms(),
                receipt
                    .error
                    .as_deref()
                    .map(|e| format!("  error: {}", one_line(e, 160)))
                    .unwrap_or_default()
            )
        }
        EventBody::ProviderRetry {
            attempt, delay_ms, ..
        } => {
            format!("  retry {attempt} after {delay_ms} ms")
        }
        EventBody::CorrectiveInjected { missing, .. } => {
            format!("  corrective turn: missing {missing}")
        }
        EventBody::ContinuationRequested { finish_reason, .. } => {
            format!("  continuation requested: the answer was cut off ({finish_reason})")
        }
        EventBody::ProtocolError { kind, detail, .. } => {
            format!("  protocol error {kind:?}: {detail}")
        }
        EventBody::ApprovalRequested {
            tool_name, call_id, ..
        } => format!("  approval requested {tool_name} {call_id}"),
        EventBody::RunResumed {
            interrupted_calls, ..
        } => format!(
            "\nresumed after an interruption; interrupted calls: [{}]",
            interrupted_calls.join(", ")
        ),
        _ => return None,
    })
}

fn item_line(item: &TranscriptItem) -> Option<String> {
    match item {
        TranscriptItem::ToolCall {
            call_id,
            name,
            arguments,
        } => Some(format!(
            "  call {name} {call_id} {}",
            one_line(arguments, 160)
        )),
        _ => None,
    }
}
