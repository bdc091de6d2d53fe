//! The loop of one run and its terminal decision.

use super::calls::CallsOutcome;
use super::history_tool::{history_spec, Archive, HistoryTool};
use super::model::{Interrupt, Interrupter, ModelOutcome};
use super::tool_search::{tool_search_spec, Activated, ToolSearchTool, TOOL_SEARCH};
use super::{Engine, EngineError, RunConfig, RunOutcome};
use crate::doom_loop::DoomLoopGuard;
use crate::judge::{judge, Attempt, Judgement};
use crate::log::{LogEntry, RunLog};
use crate::prompt::{base_prompt_for, corrective_message, PROTOCOL_PLACEHOLDER};
use crate::provider::{FinishKind, ModelResponse, ParsedCall};
use crate::redact::Redactor;
use crate::state::AgentState;
use crate::tool::{Tool, ToolRegistry};
use attest_protocol::CompletionContract;
use attest_protocol::{
    AssistantPhase, Event, EventBody, HarnessMessageKind, ProtocolErrorKind, Receipt,
    ReceiptStatus, TerminalReason, TerminalState, ToolSpec, TraceRecord, TranscriptItem, Usage,
    LOOP_VERSION,
};
use std::collections::HashSet;
use std::sync::Arc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How a run begins.
pub(super) enum Start<'p> {
    Prompt(&'p str),
    /// Continue from the log after a crash.
    Resume,
    /// Record pending calls as interrupted and end the run.
    Close,
}

pub(super) struct Run<'a> {
    pub(super) engine: &'a Engine,
    pub(super) cfg: &'a RunConfig,
    pub(super) log: &'a mut dyn RunLog,
    observer: &'a mut (dyn FnMut(&Event) + Send),
    pub(super) trace_id: String,
    seq: u64,
    /// This run's transcript items (earlier turns are in `cfg.prior_history`).
    pub(super) items: Vec<TranscriptItem>,
    pub(super) receipts: Vec<Receipt>,
    pub(super) usage: Usage,
    steps: u32,
    last_answer: Option<String>,
    pub(super) seen_call_ids: HashSet<String>,
    corrections: u32,
    protocol_errors: u32,
    pub(super) system: String,
    pub(super) tools: Vec<ToolSpec>,
    pub(super) interrupt: Interrupter,
    /// Explicit agent state, rendered at the tail of each request.
    pub(super) state: AgentState,
    /// Compacted originals by call id, for the `history` tool.
    pub(super) archive: Archive,
    /// The harness's own tools: `history` (after compaction) and
    /// `tool_search` (when tools are deferred).
    pub(super) internal_registry: Arc<ToolRegistry>,
    /// Tools not offered until `tool_search` finds them (SPEC D7).
    pub(super) deferred: Vec<ToolSpec>,
    pub(super) activated: Activated,
    /// The prefix hash of the previous request, to declare changes.
    pub(super) last_prefix: Option<String>,
    pub(super) compacted: bool,
    /// Consecutive identical failures (SPEC F10).
    pub(super) doom: DoomLoopGuard,
    pub(super) pending_reminder: Option<(String, u32)>,
    pub(super) doom_stop: Option<String>,
    redactor: Redactor,
}

impl<'a> Run<'a> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        engine: &'a Engine,
        cfg: &'a RunConfig,
        log: &'a mut dyn RunLog,
        observer: &'a mut (dyn FnMut(&Event) + Send),
        cancel: CancellationToken,
        items: Vec<TranscriptItem>,
        last_seq: u64,
        steps: u32,
    ) -> Self {
        let mut tools = engine.registry.specs();
        let deferred = match cfg.defer_tools_after {
            Some(n) if tools.len() > n => tools.split_off(n),
            _ => Vec::new(),
        };
        // SPEC D1: the base invariants first, never overridable (only an
        // eval group switches them off), then the layers.
        let mut system = base_prompt_for(cfg.switches().invariant_prompt).to_string();
        for layer in cfg
            .context_layers
            .iter()
            .filter(|l| !l.text.trim().is_empty())
        {
            system.push_str("\n\n");
            system.push_str(layer.text.trim_end());
        }
        // State that a resumed run rebuilds from its own log.
        let mut receipts = Vec::new();
        let mut seen_call_ids = HashSet::new();
        let (mut corrections, mut protocol_errors, mut last_answer) = (0, 0, None);
        for item in cfg.prior_history.iter().chain(&items) {
            if let TranscriptItem::ToolCall { call_id, .. } = item {
                seen_call_ids.insert(call_id.clone());
            }
        }
        let state = AgentState::from_transcript(&items, &cfg.contract);
        for item in &items {
            match item {
                TranscriptItem::ToolResult {
                    receipt: Some(r), ..
                } => receipts.push(r.clone()),
                TranscriptItem::HarnessMessage { kind, .. } => match kind {
                    HarnessMessageKind::Corrective => corrections += 1,
                    HarnessMessageKind::ProtocolPlaceholder => protocol_errors += 1,
                    _ => {}
                },
                TranscriptItem::AssistantOutput {
                    text,
                    phase: AssistantPhase::Answer,
                    ..
                } => last_answer = Some(text.clone()),
                _ => {}
            }
        }
        // After a compaction (resume), rebuild the archive the history tool reads.
        let archive: Archive = Default::default();
        let mut compacted = false;
        if let Some(covers) = items.iter().rev().find_map(|i| match i {
            TranscriptItem::Compaction { covers, .. } => Some(*covers),
            _ => None,
        }) {
            compacted = true;
            if let Ok(mut map) = archive.lock() {
                for item in cfg
                    .prior_history
                    .iter()
                    .chain(&items[..covers.min(items.len())])
                {
                    if let Some(id) = item.call_id() {
                        map.entry(id.to_string()).or_default().push(item.clone());
                    }
                }
            }
        }
        // Deferred tools the model already found (a resumed run).
        let activated: Activated = Default::default();
        if let Ok(mut set) = activated.lock() {
            for spec in &deferred {
                let seen = items.iter().any(|i| match i {
                    TranscriptItem::ToolCall { name, .. } => name == &spec.name,
                    TranscriptItem::ToolResult { name, output, .. } => {
                        name == TOOL_SEARCH && output.contains(&format!("{}:", spec.name))
                    }
                    _ => false,
                });
                if seen {
                    set.insert(spec.name.clone());
                }
            }
        }
        let mut internal: Vec<Arc<dyn Tool>> =
            vec![Arc::new(HistoryTool::new(Arc::clone(&archive)))];
        if !deferred.is_empty() {
            internal.push(Arc::new(ToolSearchTool::new(
                deferred.clone(),
                Arc::clone(&activated),
            )));
        }
        let internal_registry =
            Arc::new(ToolRegistry::new(internal).expect("uniquely named internal tools"));
        Run {
            engine,
            cfg,
            log,
            observer,
            trace_id: cfg.trace_id.clone(),
            seq: last_seq,
            items,
            receipts,
            usage: Usage::default(),
            steps,
            last_answer,
            seen_call_ids,
            corrections,
            protocol_errors,
            system,
            tools,
            interrupt: Interrupter {
                cancel,
                deadline: cfg.timeout.map(|t| Instant::now() + t),
            },
            state,
            archive,
            internal_registry,
            deferred,
            activated,
            last_prefix: None,
            compacted,
            doom: DoomLoopGuard::new(cfg.doom_loop.threshold, cfg.doom_loop.extra_repeats),
            pending_reminder: None,
            doom_stop: None,
            redactor: cfg.redactor.clone(),
        }
    }

    pub(super) async fn drive(mut self, start: Start<'_>) -> Result<RunOutcome, EngineError> {
        match start {
            Start::Prompt(prompt) => {
                let provider = &self.engine.provider;
                self.emit(EventBody::RunStarted {
                    trace_id: self.trace_id.clone(),
                    session_id: self.cfg.session_id.clone(),
                    provider: provider.name().to_string(),
                    model: provider.model().to_string(),
                    contract: self.cfg.contract.clone(),
                    loop_version: LOOP_VERSION.to_string(),
                    prompt_version: self.engine.prompt_version(),
                })?;
                if let Some(g) = &self.cfg.eval_group {
                    self.trace(TraceRecord::EvalGroup {
                        group: g.name.clone(),
                        switches: g.switches,
                    })?;
                }
                let prompt = self.redact(prompt);
                self.state = AgentState::with_goal(&prompt, "user_input");
                self.push(TranscriptItem::UserInput { text: prompt })?;
            }
            Start::Resume | Start::Close => {
                let pending = self.pending_calls();
                self.emit(EventBody::RunResumed {
                    trace_id: self.trace_id.clone(),
                    session_id: self.cfg.session_id.clone(),
                    interrupted_calls: pending.iter().map(|c| c.id.clone()).collect(),
                })?;
                for call in &pending {
                    self.record_refusal(
                        self.steps,
                        call,
                        ReceiptStatus::Interrupted,
                        "the process running this call stopped before it returned; the call was not re-executed",
                    )?;
                }
                if matches!(start, Start::Close) {
                    return self.finish(
                        TerminalState::Failed,
                        TerminalReason::Interrupted,
                        "the process running this run stopped before it ended".to_string(),
                    );
                }
                // A crash between the answer and its judgement: judge it now.
                if let Some(TranscriptItem::AssistantOutput {
                    phase: AssistantPhase::Answer,
                    ..
                }) = self.items.last()
                {
                    if let Some(outcome) = self.judge_answer(self.steps)? {
                        return Ok(outcome);
                    }
                }
            }
        }

        while self.steps < self.cfg.max_steps {
            self.steps += 1;
            let step = self.steps;
            let response = match self.call_model(step).await? {
                ModelOutcome::Response(r) => r,
                ModelOutcome::Interrupted(why) => return self.finish_interrupted(why),
                ModelOutcome::Failed(error) => {
                    return self.finish(
                        TerminalState::Failed,
                        TerminalReason::ProviderError,
                        format!("the provider failed after retries: {error}"),
                    )
                }
            };

            if let Some((kind, detail)) = self.protocol_violation(&response) {
                self.protocol_errors += 1;
                self.trace(TraceRecord::ProtocolViolation {
                    step,
                    kind,
                    raw: self.redact_raw(&response),
                })?;
                self.emit(EventBody::ProtocolError { step, kind, detail })?;
                if !self.cfg.switches().protocol_isolation {
                    // A naive loop (eval groups without protocol isolation):
                    // the text enters history as written.
                    if !response.tool_calls.is_empty() {
                        if let Some(outcome) = self.calls_step(step, &response).await? {
                            return Ok(outcome);
                        }
                        continue;
                    }
                    if let Some(answer) = naive_answer(&response.text) {
                        self.push_assistant(&response, AssistantPhase::Answer)?;
                        self.last_answer = Some(self.redact(answer));
                        if let Some(outcome) = self.judge_answer(step)? {
                            return Ok(outcome);
                        }
                        continue;
                    }
                }
                self.push(TranscriptItem::HarnessMessage {
                    kind: HarnessMessageKind::ProtocolPlaceholder,
                    text: PROTOCOL_PLACEHOLDER.to_string(),
                })?;
                if self.protocol_errors >= self.cfg.max_protocol_errors {
                    return self.finish(
                        TerminalState::Failed,
                        TerminalReason::ProtocolError,
                        format!("{} protocol-breaking responses", self.protocol_errors),
                    );
                }
                continue;
            }

            if !response.tool_calls.is_empty() {
                if let Some(outcome) = self.calls_step(step, &response).await? {
                    return Ok(outcome);
                }
                continue;
            }

            if response.finish == FinishKind::ToolUse {
                let raw = response.raw_finish_reason.clone().unwrap_or_default();
                let failures = if response.parse_failures.is_empty() {
                    String::new()
                } else {
                    format!(": {}", response.parse_failures.join("; "))
                };
                self.emit(EventBody::ProtocolError {
                    step,
                    kind: ProtocolErrorKind::NoParsableToolCall,
                    detail: format!(
                        "finish reason `{raw}` signals tool use but no valid call could be parsed{failures}"
                    ),
                })?;
                return self.finish(
                    TerminalState::Failed,
                    TerminalReason::ProtocolError,
                    format!("the provider signalled tool use (`{raw}`) but sent no parsable call"),
                );
            }
            if response.text.trim().is_empty() {
                return self.finish(
                    TerminalState::Failed,
                    TerminalReason::ProtocolError,
                    "the model returned neither text nor a tool call".to_string(),
                );
            }
            let text = self.push_assistant(&response, AssistantPhase::Answer)?;
            self.last_answer = Some(text);
            if let Some(outcome) = self.judge_answer(step)? {
                return Ok(outcome);
            }
        }
        self.finish(
            TerminalState::Incomplete,
            TerminalReason::MaxSteps,
            format!(
                "the step budget ({}) ran out before the model gave an answer that could be accepted",
                self.cfg.max_steps
            ),
        )
    }

    /// Execute a response's calls; `Some` ends the run.
    async fn calls_step(
        &mut self,
        step: u32,
        response: &ModelResponse,
    ) -> Result<Option<RunOutcome>, EngineError> {
        Ok(match self.run_calls(step, response).await? {
            CallsOutcome::Continue => None,
            CallsOutcome::Interrupted(why) => Some(self.finish_interrupted(why)?),
            CallsOutcome::DoomLoop(basis) => {
                Some(self.finish(TerminalState::Incomplete, TerminalReason::DoomLoop, basis)?)
            }
        })
    }

    /// Log the response's text (redacted) with its reasoning as the policy
    /// keeps it; returns the logged text.
    pub(super) fn push_assistant(
        &mut self,
        response: &ModelResponse,
        phase: AssistantPhase,
    ) -> Result<String, EngineError> {
        let text = self.redact(&response.text);
        let reasoning = self
            .cfg
            .reasoning
            .apply(response.reasoning.as_deref())
            .map(|r| self.redact(&r));
        // Opaque ciphertext: kept verbatim (redaction would break it), and
        // only under a policy that keeps reasoning whole.
        let encrypted_reasoning = if self.cfg.reasoning.keeps_encrypted() {
            response.encrypted_reasoning.clone()
        } else {
            Vec::new()
        };
        self.push(TranscriptItem::AssistantOutput {
            text: text.clone(),
            reasoning,
            encrypted_reasoning,
            phase,
        })?;
        Ok(text)
    }

    /// Judge the answer just logged. `Some` ends the run; `None` means a
    /// corrective turn was injected and the loop goes on.
    fn judge_answer(&mut self, step: u32) -> Result<Option<RunOutcome>, EngineError> {
        if !self.cfg.switches().receipt_guard {
            let outcome = self.finish(
                TerminalState::Completed,
                TerminalReason::AnswerAccepted,
                "receipt guard off (eval group): the answer was accepted without judging it against the contract".to_string(),
            )?;
            return Ok(Some(outcome));
        }
        let attempts: Vec<Attempt> = self.receipts.iter().map(Attempt::from).collect();
        let outcome = match judge(&self.cfg.contract, &attempts) {
            Judgement::Satisfied => {
                let basis = self.satisfied_basis();
                self.finish(TerminalState::Completed, TerminalReason::ContractSatisfied, basis)?
            }
            Judgement::NoAttempt { missing } if self.corrections < self.cfg.max_corrections => {
                self.corrections += 1;
                self.state.on_missing_evidence(&missing, &format!("step_{step}"));
                let tools = self.tools_that_can_satisfy();
                let syntax = (self.tools.iter())
                    .find(|t| tools.first() == Some(&t.name))
                    .map(|t| self.engine.provider.call_syntax(t));
                let text = corrective_message(&missing, &tools, syntax.as_deref());
                self.push(TranscriptItem::HarnessMessage {
                    kind: HarnessMessageKind::Corrective,
                    text: text.clone(),
                })?;
                self.emit(EventBody::CorrectiveInjected { step, missing, text })?;
                return Ok(None);
            }
            Judgement::NoAttempt { missing } => self.finish(
                TerminalState::Unverified,
                TerminalReason::MissingReceipt,
                format!(
                    "the contract needs {missing}; the model answered without it after {} corrective turn(s)",
                    self.corrections
                ),
            )?,
            Judgement::End { state, reason, basis } => self.finish(state, reason, basis)?,
        };
        Ok(Some(outcome))
    }

    /// The tools offered: the registry's (less the deferred ones not yet
    /// found), plus `history` once compacted and `tool_search` while tools
    /// are deferred. Order is stable, so the prefix changes only when the
    /// set does.
    pub(super) fn visible_tools(&self) -> Vec<ToolSpec> {
        let mut tools = self.tools.clone();
        if let Ok(activated) = self.activated.lock() {
            tools.extend(
                self.deferred
                    .iter()
                    .filter(|s| activated.contains(&s.name))
                    .cloned(),
            );
        }
        if self.compacted {
            tools.push(history_spec());
        }
        if !self.deferred.is_empty() {
            tools.push(tool_search_spec(self.deferred.len()));
        }
        tools
    }

    /// A deferred tool the model has not found yet.
    pub(super) fn is_hidden(&self, name: &str) -> bool {
        self.deferred.iter().any(|s| s.name == name)
            && !self
                .activated
                .lock()
                .map(|a| a.contains(name))
                .unwrap_or(false)
    }

    /// Calls of this run that have no result yet (a crash mid-call).
    fn pending_calls(&self) -> Vec<ParsedCall> {
        let answered: HashSet<&str> = self
            .items
            .iter()
            .filter_map(|i| match i {
                TranscriptItem::ToolResult { call_id, .. } => Some(call_id.as_str()),
                _ => None,
            })
            .collect();
        self.items
            .iter()
            .filter_map(|i| match i {
                TranscriptItem::ToolCall {
                    call_id,
                    name,
                    arguments,
                } if !answered.contains(call_id.as_str()) => Some(ParsedCall {
                    id: call_id.clone(),
                    name: name.clone(),
                    arguments: arguments.clone(),
                }),
                _ => None,
            })
            .collect()
    }

    fn tools_that_can_satisfy(&self) -> Vec<String> {
        let contract = &self.cfg.contract;
        self.tools
            .iter()
            .filter(|t| {
                contract.effect_counts(t.effect) || contract.required_tools.contains(&t.name)
            })
            .map(|t| t.name.clone())
            .collect()
    }

    fn satisfied_basis(&self) -> String {
        if !self.cfg.contract.needs_evidence() {
            return "answer contract: no evidence required".to_string();
        }
        let used: Vec<String> = self
            .receipts
            .iter()
            .filter(|r| r.is_satisfying())
            .map(|r| format!("{} ({})", r.tool_name, r.call_id))
            .collect();
        format!(
            "{} contract satisfied by receipts: {}",
            self.cfg.contract.kind,
            used.join(", ")
        )
    }

    fn finish_interrupted(&mut self, why: Interrupt) -> Result<RunOutcome, EngineError> {
        match why {
            Interrupt::Cancelled => self.finish(
                TerminalState::Cancelled,
                TerminalReason::UserCancelled,
                "the run was cancelled by the user".to_string(),
            ),
            Interrupt::TimedOut => self.finish(
                TerminalState::Failed,
                TerminalReason::Timeout,
                "the run's time limit expired".to_string(),
            ),
        }
    }

    fn finish(
        &mut self,
        state: TerminalState,
        reason: TerminalReason,
        basis: String,
    ) -> Result<RunOutcome, EngineError> {
        let basis = self.redact(&basis);
        let answer = self.last_answer.clone();
        self.push(TranscriptItem::Terminal {
            state,
            reason,
            answer: answer.clone(),
        })?;
        self.trace(TraceRecord::Terminal {
            state,
            reason,
            basis: basis.clone(),
        })?;
        if state == TerminalState::Completed {
            self.emit(EventBody::Final {
                answer: answer.clone().unwrap_or_default(),
            })?;
        }
        self.emit(EventBody::Done {
            trace_id: self.trace_id.clone(),
            state,
            reason,
            answer: answer.clone(),
            basis: basis.clone(),
            receipts: self.receipts.clone(),
            steps: self.steps,
            usage: self.usage,
            loop_version: LOOP_VERSION.to_string(),
            prompt_version: self.engine.prompt_version(),
        })?;
        Ok(RunOutcome {
            run_id: self.cfg.run_id.clone(),
            trace_id: self.trace_id.clone(),
            session_id: self.cfg.session_id.clone(),
            state,
            reason,
            answer,
            basis,
            receipts: self.receipts.clone(),
            steps: self.steps,
            usage: self.usage,
        })
    }

    pub(super) fn emit(&mut self, mut body: EventBody) -> Result<(), EngineError> {
        // Free text that can quote the model or a provider goes through the
        // run's one redactor whatever built it (SPEC F8).
        match &mut body {
            EventBody::ProtocolError { detail: text, .. }
            | EventBody::ProviderRetry { error: text, .. }
            | EventBody::Done { basis: text, .. } => *text = self.redact(text),
            _ => {}
        }
        self.seq += 1;
        let event = Event {
            run_id: self.cfg.run_id.clone(),
            seq: self.seq,
            ts: chrono::Utc::now(),
            body,
        };
        self.log.append(&LogEntry::Event {
            event: event.clone(),
        })?;
        (self.observer)(&event);
        Ok(())
    }

    /// An event for the observer only, not the log (live token deltas):
    /// it carries the `seq` of the last logged event, so the log's
    /// sequence stays without gaps.
    pub(super) fn emit_live(&mut self, body: EventBody) {
        let event = Event {
            run_id: self.cfg.run_id.clone(),
            seq: self.seq,
            ts: chrono::Utc::now(),
            body,
        };
        (self.observer)(&event);
    }

    pub(super) fn push(&mut self, item: TranscriptItem) -> Result<(), EngineError> {
        self.log.append(&LogEntry::Item { item: item.clone() })?;
        self.items.push(item);
        Ok(())
    }

    pub(super) fn trace(&mut self, mut trace: TraceRecord) -> Result<(), EngineError> {
        if let TraceRecord::Terminal { basis, .. } = &mut trace {
            *basis = self.redact(basis);
        }
        self.log.append(&LogEntry::Trace { trace })?;
        Ok(())
    }

    /// Scrub secrets from a JSON value (arguments shown in events).
    pub(super) fn redact_json(&self, value: &serde_json::Value) -> serde_json::Value {
        let text = value.to_string();
        let redacted = self.redact(&text);
        if redacted == text {
            return value.clone();
        }
        serde_json::from_str(&redacted).unwrap_or(serde_json::Value::String(redacted))
    }

    /// A response's raw output, scrubbed for the audit trace. A streamed
    /// response's raw lines can split a secret the parsed text holds whole,
    /// so every piece of what redaction removes from the parsed text is
    /// removed from the raw lines too (SPEC H2: secrets never stored).
    pub(super) fn redact_raw(&self, response: &ModelResponse) -> String {
        let mut clean = response.text.clone();
        for part in response
            .reasoning
            .iter()
            .chain(response.tool_calls.iter().map(|c| &c.arguments))
        {
            clean.push('\n');
            clean.push_str(part);
        }
        self.redactor
            .for_pieces_of(&clean)
            .redact_to(&response.raw, usize::MAX)
    }

    /// Scrub secrets — configured values (API keys) and anything shaped
    /// like a key, token or webhook — from text the run is about to keep or
    /// send (SPEC F8). Never shortens: length limits are applied elsewhere.
    pub(super) fn redact(&self, text: &str) -> String {
        self.redactor.redact_to(text, usize::MAX)
    }
}

/// What a naive loop takes as the answer of a response that broke the
/// protocol: the text after its last `Final Answer:`, else all of it; `None`
/// when nothing is left.
fn naive_answer(text: &str) -> Option<&str> {
    let answer = match text.rfind("Final Answer:") {
        Some(at) => &text[at + "Final Answer:".len()..],
        None => text,
    };
    Some(answer.trim()).filter(|a| !a.is_empty())
}

/// Whether a receipt's tool is one the contract needs (its failures block).
pub(super) fn needed(cfg: &RunConfig, receipt: &Receipt) -> bool {
    let contract: &CompletionContract = &cfg.contract;
    contract.effect_counts(receipt.effect) || contract.required_tools.contains(&receipt.tool_name)
}

/// A short form of a call's arguments for state lines.
pub(super) fn arguments_summary(arguments: &str) -> String {
    crate::state::handoff_summary(arguments)
}
