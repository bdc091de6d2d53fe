//! The loop of one run and its terminal decision.

use super::calls::CallsOutcome;
use super::compaction::{item_cache, CompactionBudget, HistorySize, ItemCache};
use super::history_tool::{history_spec, Archive, HistoryTool};
use super::model::{Interrupt, Interrupter, ModelOutcome};
use super::tool_search::{tool_search_spec, Activated, ToolSearchTool, TOOL_SEARCH};
use super::{Engine, EngineError, RunConfig, RunOutcome};
use crate::doom_loop::DoomLoopGuard;
use crate::grounding::{ground, Evidence};
use crate::harness_echo::repeats_harness_text;
use crate::judge::{judge, Attempt, Judgement};
use crate::log::{LogEntry, RunLog};
use crate::prompt::{
    base_prompt_for, corrective_message, grounding_corrective, own_answer_corrective,
    CONTINUATION_MESSAGE, GROUNDING_PREFIX, PROTOCOL_PLACEHOLDER,
};
use crate::provider::pairing::GrowingNormalizer;
use crate::provider::{FinishKind, ModelResponse, ParsedCall};
use crate::redact::Redactor;
use crate::state::{render_tail, AgentState};
use crate::tool::{Tool, ToolRegistry};
use attest_protocol::CompletionContract;
use attest_protocol::{
    AssistantPhase, Event, EventBody, Grounding, HarnessMessageKind, ProtocolErrorKind, Receipt,
    ReceiptStatus, ResumedWith, TerminalReason, TerminalState, ToolSpec, TraceRecord,
    TranscriptItem, Usage, LOOP_VERSION,
};
use std::collections::{HashMap, HashSet};
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

/// What the prefix hash depends on besides the system prompt: the
/// compaction index and the visible tools, as the list
/// [`Run::visible_tools`] shares while they stay the same (tools come and
/// go: found by `tool_search`, withdrawn by their MCP server).
pub(super) type PrefixKey = (Option<usize>, Arc<[ToolSpec]>);

/// The tools a request offers, by position: the run's own (`tools`, then
/// `deferred` after them), and whether `history` is among them.
#[derive(Debug, PartialEq, Eq)]
struct VisibleKey {
    picked: Vec<usize>,
    compacted: bool,
}

pub(super) struct Run<'a> {
    pub(super) engine: &'a Engine,
    pub(super) cfg: &'a RunConfig,
    pub(super) log: &'a mut dyn RunLog,
    observer: &'a mut (dyn FnMut(&Event) + Send),
    /// Logged events the observer gets at the next flush, once they are
    /// durable.
    unflushed: Vec<Event>,
    /// Durable events not shown yet: the commit before a model request or a
    /// tool holds them until that wait has begun (see [`Run::commit`]).
    unshown: Vec<Event>,
    pub(super) trace_id: String,
    seq: u64,
    /// This run's transcript items (earlier turns are in `cfg.prior_history`).
    pub(super) items: Vec<TranscriptItem>,
    /// What is kept of each of `items` when it was logged: its bytes, its
    /// tokens once counted, its request form (see [`ItemCache`]).
    pub(super) item_caches: Vec<ItemCache>,
    /// The same for `cfg.prior_history`.
    pub(super) prior_caches: Vec<ItemCache>,
    /// The bytes of `prior_caches`, summed once.
    pub(super) prior_bytes: usize,
    /// The history the next request carries, in its items' request forms
    /// (see [`Run::build_request_history`]): grown by each item logged,
    /// rebuilt only at a compaction.
    pub(super) request_forms: Vec<Arc<TranscriptItem>>,
    /// Sizes of that history, kept the same way.
    pub(super) history_size: HistorySize,
    /// The prefix hash and the tool list's size in bytes, and what they
    /// were computed for.
    pub(super) prefix_cache: Option<(PrefixKey, (String, usize))>,
    /// The tools last offered and which they were (see [`Self::visible_tools`]).
    visible: std::sync::Mutex<Option<(VisibleKey, Arc<[ToolSpec]>)>>,
    /// This run's budgets: from the model's context window when known.
    pub(super) compaction: CompactionBudget,
    /// The session's prompt-cache key: every run of a session shares its prefix.
    pub(super) cache_key: String,
    pub(super) receipts: Vec<Receipt>,
    /// Indices of the satisfying receipts, by tool and canonical arguments
    /// (the duplicate guard looks every call up here).
    pub(super) successes: HashMap<String, Vec<usize>>,
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
    /// The request history's normalization, carried from step to step.
    pub(super) normalizer: GrowingNormalizer,
    /// Index of the newest `Compaction` among `items` (kept as items are
    /// added: looked up several times a step).
    pub(super) compaction_at: Option<usize>,
    pub(super) compacted: bool,
    /// Consecutive identical failures (SPEC F10).
    pub(super) doom: DoomLoopGuard,
    pub(super) pending_reminder: Option<(String, u32)>,
    pub(super) doom_stop: Option<String>,
    pub(super) redactor: Redactor,
    /// The one continuation of a cut-off answer was asked for.
    continued: bool,
    /// The cut-off text it continues.
    partial_answer: Option<String>,
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
        let compaction_at = items
            .iter()
            .rposition(|i| matches!(i, TranscriptItem::Compaction { .. }));
        // State that a resumed run rebuilds from its own log.
        let mut receipts = Vec::new();
        let mut seen_call_ids = HashSet::new();
        let (mut corrections, mut protocol_errors, mut last_answer) = (0, 0, None);
        let mut continued = false;
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
                } => receipts.push(Receipt::clone(r)),
                TranscriptItem::HarnessMessage { kind, text } => match kind {
                    // The grounding check has its own one turn.
                    HarnessMessageKind::Corrective if !text.starts_with(GROUNDING_PREFIX) => {
                        corrections += 1
                    }
                    HarnessMessageKind::ProtocolPlaceholder => protocol_errors += 1,
                    HarnessMessageKind::Continuation => continued = true,
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
        let item_caches = items.iter().map(item_cache).collect();
        let prior_caches: Vec<ItemCache> = cfg.prior_history.iter().map(item_cache).collect();
        let prior_bytes = prior_caches.iter().map(|c| c.bytes).sum();
        let compaction = CompactionBudget::new(
            cfg.context_window,
            &cfg.compaction,
            cfg.max_tokens as usize,
            system.len() + serde_json::to_vec(&tools).map_or(0, |json| json.len()),
        );
        let mut run = Run {
            engine,
            cfg,
            log,
            observer,
            unflushed: Vec::new(),
            unshown: Vec::new(),
            trace_id: cfg.trace_id.clone(),
            seq: last_seq,
            items,
            item_caches,
            prior_caches,
            prior_bytes,
            request_forms: Vec::new(),
            history_size: HistorySize::default(),
            prefix_cache: None,
            visible: Default::default(),
            compaction,
            cache_key: cache_key(&cfg.session_id),
            successes: success_index(&receipts),
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
            normalizer: GrowingNormalizer::default(),
            compaction_at,
            compacted,
            doom: DoomLoopGuard::new(cfg.doom_loop.threshold, cfg.doom_loop.extra_repeats),
            pending_reminder: None,
            doom_stop: None,
            redactor: cfg.redactor.clone(),
            continued,
            partial_answer: None,
        };
        run.reset_request_history();
        run
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
                if let Some(outcome) = self.close_judged()? {
                    return Ok(outcome);
                }
                let pending = self.pending_calls();
                self.emit(EventBody::RunResumed {
                    trace_id: self.trace_id.clone(),
                    session_id: self.cfg.session_id.clone(),
                    interrupted_calls: pending.iter().map(|c| c.id.clone()).collect(),
                    resumed_with: Some(self.resumed_with()),
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
            // A withheld or cut-off answer is not an answer (SPEC B2).
            if response.finish == FinishKind::ContentFilter {
                let raw = response.raw_finish_reason.clone().unwrap_or_default();
                return self.finish(
                    TerminalState::Failed,
                    TerminalReason::ContentFilter,
                    format!("the provider withheld or stopped the answer (finish reason `{raw}`)"),
                );
            }
            if response.finish == FinishKind::Length {
                let raw = response.raw_finish_reason.clone().unwrap_or_default();
                if self.continued {
                    return self.finish(
                        TerminalState::Incomplete,
                        TerminalReason::Truncated,
                        format!(
                            "the answer was cut off by the output token limit (finish reason `{raw}`), again after one continuation"
                        ),
                    );
                }
                self.continued = true;
                if !response.text.trim().is_empty() {
                    let text = self.push_assistant(&response, AssistantPhase::Commentary)?;
                    self.partial_answer = Some(text);
                }
                self.push(TranscriptItem::HarnessMessage {
                    kind: HarnessMessageKind::Continuation,
                    text: CONTINUATION_MESSAGE.to_string(),
                })?;
                self.emit(EventBody::ContinuationRequested {
                    step,
                    finish_reason: raw,
                    text: CONTINUATION_MESSAGE.to_string(),
                })?;
                continue;
            }
            if response.text.trim().is_empty() {
                return self.finish(
                    TerminalState::Failed,
                    TerminalReason::ProtocolError,
                    "the model returned neither text nor a tool call".to_string(),
                );
            }
            // A continued answer is the cut-off part and its continuation.
            let response = match self.partial_answer.take() {
                Some(head) => ModelResponse {
                    text: format!("{head}{}", response.text),
                    ..response
                },
                None => response,
            };
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
        let answer = self.last_answer.clone().unwrap_or_default();
        if self.cfg.switches().receipt_guard && self.repeats_harness_text(&answer) {
            // Not the model's answer (hole 7): treated like none.
            self.last_answer = None;
            return self.no_own_answer(step);
        }
        let (grounding, had_outputs) = self.grounding_of(&answer);
        self.trace(TraceRecord::Grounding {
            step,
            grounding: grounding.clone(),
        })?;
        if !self.cfg.switches().receipt_guard {
            // An eval group without the guard: what a naive loop does.
            let outcome = self.finish(
                TerminalState::Completed,
                TerminalReason::AnswerAccepted,
                "receipt guard off (eval group): the answer was accepted without judging it against the contract".to_string(),
            )?;
            return Ok(Some(outcome));
        }
        let attempts: Vec<Attempt> = self.receipts.iter().map(Attempt::from).collect();
        let outcome = match judge(&self.cfg.contract, &attempts) {
            Judgement::Satisfied => match self.grounding_problem(&grounding, had_outputs) {
                None => {
                    let basis = self.satisfied_basis();
                    self.finish(TerminalState::Completed, TerminalReason::ContractSatisfied, basis)?
                }
                Some(problem) if !self.grounding_corrected() => {
                    let text = grounding_corrective(&grounding.ungrounded);
                    self.push(TranscriptItem::HarnessMessage {
                        kind: HarnessMessageKind::Corrective,
                        text: text.clone(),
                    })?;
                    self.emit(EventBody::CorrectiveInjected {
                        step,
                        missing: problem,
                        text,
                    })?;
                    return Ok(None);
                }
                Some(problem) => self.finish(
                    TerminalState::Unverified,
                    TerminalReason::UngroundedClaim,
                    format!("grounding is required and {problem}, after a corrective turn"),
                )?,
            },
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

    /// Grounding of `answer` in this run's calls, the session's earlier ones
    /// and the user's prompts (SPEC A9); and whether this run has any call
    /// output the answer could have used.
    fn grounding_of(&self, answer: &str) -> (Grounding, bool) {
        let tools = self.visible_tools();
        let names = tools.iter().map(|t| t.name.as_str()).collect();
        let evidence = Evidence::from_items(&self.items, &self.cfg.prior_history, names);
        (ground(answer, &evidence), !evidence.run.is_empty())
    }

    /// Under `require_grounding`, what is wrong with the answer's grounding:
    /// a value found nowhere, or no value from the outputs this run has.
    fn grounding_problem(&self, grounding: &Grounding, had_outputs: bool) -> Option<String> {
        if !self.cfg.require_grounding {
            return None;
        }
        if !grounding.ungrounded.is_empty() {
            let values: Vec<String> = grounding
                .ungrounded
                .iter()
                .map(|v| format!("`{v}`"))
                .collect();
            return Some(format!(
                "the answer names {} that no tool output, prompt or earlier evidence shows",
                values.join(", ")
            ));
        }
        (!grounding.evidence_used && had_outputs)
            .then(|| "the answer uses no value from any tool output of the run".to_string())
    }

    /// The grounding check's one corrective turn has been spent.
    fn grounding_corrected(&self) -> bool {
        self.items.iter().any(|i| {
            matches!(i, TranscriptItem::HarnessMessage { kind: HarnessMessageKind::Corrective, text }
                if text.starts_with(GROUNDING_PREFIX))
        })
    }

    /// Whether `answer` mostly repeats what the harness wrote to the model:
    /// the state tail as last sent, its messages, its base prompt.
    fn repeats_harness_text(&self, answer: &str) -> bool {
        let tail = render_tail(&self.state, &self.tail_budget()).text;
        let mut harness: Vec<&str> = vec![
            &tail,
            PROTOCOL_PLACEHOLDER,
            crate::prompt::base_system_prompt(),
        ];
        // What the harness only relays: the user's words, the model's
        // arguments, also in the short form fact lines quote them in.
        let mut relayed: Vec<&str> = Vec::new();
        let mut summaries: Vec<String> = Vec::new();
        for item in self.cfg.prior_history.iter().chain(&self.items) {
            match item {
                TranscriptItem::HarnessMessage { text, .. } => harness.push(text),
                TranscriptItem::UserInput { text } => relayed.push(text),
                TranscriptItem::ToolCall { arguments, .. } => {
                    relayed.push(arguments);
                    summaries.push(arguments_summary(arguments));
                }
                _ => {}
            }
        }
        relayed.extend(summaries.iter().map(String::as_str));
        if let Some((reminder, _)) = &self.pending_reminder {
            harness.push(reminder);
        }
        repeats_harness_text(answer, &harness, &relayed)
    }

    /// A response that was no answer of the model's own: a corrective
    /// turn while the budget lasts, then `unverified`.
    fn no_own_answer(&mut self, step: u32) -> Result<Option<RunOutcome>, EngineError> {
        if self.corrections < self.cfg.max_corrections {
            self.corrections += 1;
            let text = own_answer_corrective();
            self.push(TranscriptItem::HarnessMessage {
                kind: HarnessMessageKind::Corrective,
                text: text.clone(),
            })?;
            self.emit(EventBody::CorrectiveInjected {
                step,
                missing: "an answer of the model's own (the response repeated harness text)"
                    .to_string(),
                text,
            })?;
            return Ok(None);
        }
        self.finish(
            TerminalState::Unverified,
            TerminalReason::NoAnswer,
            format!(
                "the model's final response repeated text the harness wrote instead of answering, after {} corrective turn(s)",
                self.corrections
            ),
        )
        .map(Some)
    }

    /// The tools offered: the registry's (less the deferred ones not yet
    /// found), plus `history` once compacted and `tool_search` while tools
    /// are deferred. Order is stable, so the prefix changes only when the
    /// set does. While it does not, this is the same allocation as the last
    /// request's, so a provider writes the list's JSON once (it keeps it by
    /// that identity) and a step copies no schema.
    pub(super) fn visible_tools(&self) -> Arc<[ToolSpec]> {
        let key = self.visible_key();
        let mut cache = self
            .visible
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((cached, tools)) = &*cache {
            if *cached == key {
                return Arc::clone(tools);
            }
        }
        let mut tools: Vec<ToolSpec> = (key.picked.iter())
            .map(|&i| match i.checked_sub(self.tools.len()) {
                None => self.tools[i].clone(),
                Some(d) => self.deferred[d].clone(),
            })
            .collect();
        if key.compacted {
            tools.push(history_spec());
        }
        if !self.deferred.is_empty() {
            tools.push(tool_search_spec(self.deferred.len()));
        }
        let tools: Arc<[ToolSpec]> = tools.into();
        *cache = Some((key, Arc::clone(&tools)));
        tools
    }

    /// Which tools [`Self::visible_tools`] offers now: the run's tools and
    /// specs are fixed, so their positions name them.
    fn visible_key(&self) -> VisibleKey {
        let mut picked: Vec<usize> = (0..self.tools.len())
            .filter(|&i| !self.is_withdrawn(&self.tools[i].name))
            .collect();
        if let Ok(activated) = self.activated.lock() {
            picked.extend(
                (self.deferred.iter().enumerate())
                    .filter(|(_, s)| activated.contains(&s.name) && !self.is_withdrawn(&s.name))
                    .map(|(d, _)| self.tools.len() + d),
            );
        }
        VisibleKey {
            picked,
            compacted: self.compacted,
        }
    }

    /// A tool its provider withdrew during the run ([`crate::tool::Tool::withdrawn`]).
    pub(super) fn is_withdrawn(&self, name: &str) -> bool {
        self.engine
            .registry
            .get(name)
            .is_some_and(|tool| tool.withdrawn())
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

    /// A run whose verdict was logged but whose `done` was not (a crash
    /// in between, from a version that wrote them apart) is ended now with
    /// that verdict instead of being run on.
    fn close_judged(&mut self) -> Result<Option<RunOutcome>, EngineError> {
        let Some((state, reason, answer)) = self.items.iter().rev().find_map(|i| match i {
            TranscriptItem::Terminal {
                state,
                reason,
                answer,
            } => Some((*state, *reason, answer.clone())),
            _ => None,
        }) else {
            return Ok(None);
        };
        self.emit(EventBody::RunResumed {
            trace_id: self.trace_id.clone(),
            session_id: self.cfg.session_id.clone(),
            interrupted_calls: Vec::new(),
            resumed_with: Some(self.resumed_with()),
        })?;
        self.last_answer = answer;
        let basis = format!(
            "the run had ended {state} ({reason}) but its done event was not written before its process stopped; written on reopening"
        );
        self.write_end(None, state, reason, basis).map(Some)
    }

    /// The contract and limits a resumed run goes on under.
    fn resumed_with(&self) -> ResumedWith {
        ResumedWith {
            contract: self.cfg.contract.clone(),
            max_steps: self.cfg.max_steps,
            max_corrections: self.cfg.max_corrections,
            timeout_secs: self.cfg.timeout.map(|t| t.as_secs()),
            approval: self.cfg.approval.clone(),
            require_grounding: self.cfg.require_grounding,
        }
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
        let terminal = TranscriptItem::Terminal {
            state,
            reason,
            answer: self.last_answer.clone(),
        };
        self.write_end(Some(terminal), state, reason, basis)
    }

    /// The run's end: its terminal item (unless already logged), the
    /// terminal trace, `final` when completed, and `done`.
    fn write_end(
        &mut self,
        terminal: Option<TranscriptItem>,
        state: TerminalState,
        reason: TerminalReason,
        basis: String,
    ) -> Result<RunOutcome, EngineError> {
        let basis = self.redact(&basis);
        let answer = self.last_answer.clone();
        let grounding = answer.as_deref().map(|a| self.grounding_of(a).0);
        let mut bodies = Vec::new();
        if state == TerminalState::Completed {
            bodies.push(EventBody::Final {
                answer: answer.clone().unwrap_or_default(),
            });
        }
        bodies.push(EventBody::Done {
            trace_id: self.trace_id.clone(),
            state,
            reason,
            answer: answer.clone(),
            basis: basis.clone(),
            // Moved, and moved back out for the outcome below: a long
            // run's receipts are much of what it holds, and a copy each
            // for `done` and the outcome was much of the end's peak memory.
            receipts: std::mem::take(&mut self.receipts),
            grounding,
            steps: self.steps,
            usage: self.usage,
            loop_version: LOOP_VERSION.to_string(),
            prompt_version: self.engine.prompt_version(),
        });
        let events: Vec<Event> = bodies.into_iter().map(|b| self.sequenced(b)).collect();
        // The verdict and its `done` stand or fall together (one
        // transaction): a crash cannot leave a judged run without its end.
        let mut ending: Vec<LogEntry> = terminal
            .iter()
            .map(|item| LogEntry::Item { item: item.clone() })
            .collect();
        ending.push(LogEntry::Trace {
            trace: TraceRecord::Terminal {
                state,
                reason,
                basis: basis.clone(),
            },
        });
        // Moved, not copied: `done` carries every receipt of the run.
        ending.extend(events.into_iter().map(|event| LogEntry::Event { event }));
        let mut entries = self.log.append_all(ending)?;
        terminal.into_iter().for_each(|item| self.remember(item));
        let ended = entries.iter().filter_map(|entry| match entry {
            LogEntry::Event { event } => Some(event),
            _ => None,
        });
        let held = std::mem::take(&mut self.unshown);
        for event in held
            .iter()
            .chain(&std::mem::take(&mut self.unflushed))
            .chain(ended)
        {
            (self.observer)(event);
        }
        let receipts = take_done_receipts(&mut entries);
        Ok(RunOutcome {
            run_id: self.cfg.run_id.clone(),
            trace_id: self.trace_id.clone(),
            session_id: self.cfg.session_id.clone(),
            state,
            reason,
            answer,
            basis,
            receipts,
            steps: self.steps,
            usage: self.usage,
        })
    }

    pub(super) fn emit(&mut self, body: EventBody) -> Result<(), EngineError> {
        let event = self.sequenced(body);
        self.log.append(&LogEntry::Event {
            event: event.clone(),
        })?;
        self.unflushed.push(event);
        Ok(())
    }

    /// Make what the run logged durable (one store transaction), then show
    /// its events to the observer at once: before an approval or a retry's
    /// back-off, and for a tool's progress reports. Before a model request
    /// or a tool's execution the run calls [`Self::commit`] instead.
    pub(super) fn flush(&mut self) -> Result<(), EngineError> {
        self.commit()?;
        self.show_committed();
        Ok(())
    }

    /// Make what the run logged durable, and hold its events for
    /// [`Self::show_committed`]. A model request or a tool starts once this
    /// returns, and its events are shown after it has: the observer's work
    /// (a line on stdout per event) then overlaps the wait instead of
    /// delaying the request or the tool. Whatever shows events next shows
    /// these first, so the observer still sees every event once, in order.
    pub(super) fn commit(&mut self) -> Result<(), EngineError> {
        self.log.flush()?;
        self.unshown.append(&mut self.unflushed);
        Ok(())
    }

    /// Show the observer the events made durable and not shown yet.
    pub(super) fn show_committed(&mut self) {
        for event in std::mem::take(&mut self.unshown) {
            (self.observer)(&event);
        }
    }

    /// The next logged event: redacted, with the next `seq`.
    fn sequenced(&mut self, mut body: EventBody) -> Event {
        // Free text that can quote the model or a provider goes through the
        // run's one redactor whatever built it (SPEC F8).
        match &mut body {
            EventBody::ProtocolError { detail: text, .. }
            | EventBody::ProviderRetry { error: text, .. }
            | EventBody::Done { basis: text, .. } => *text = self.redact(text),
            EventBody::ToolProgress {
                message: Some(text),
                ..
            } => *text = self.redact(text),
            _ => {}
        }
        self.seq += 1;
        Event {
            run_id: self.cfg.run_id.clone(),
            seq: self.seq,
            ts: chrono::Utc::now(),
            body,
        }
    }

    /// An event for the observer only, not the log (live token deltas):
    /// it carries the `seq` of the last logged event, so the log's
    /// sequence stays without gaps.
    pub(super) fn emit_live(&mut self, body: EventBody) {
        // Live events come while the model is called, after the commit
        // before it: nothing logged can be overtaken once what that commit
        // holds back is shown.
        debug_assert!(self.unflushed.is_empty(), "a live event before a flush");
        self.show_committed();
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
        self.remember(item);
        Ok(())
    }

    /// Keep a logged item, with its cache (the two stay index for index).
    fn remember(&mut self, item: TranscriptItem) {
        let cache = item_cache(&item);
        let (form, bytes) = (Arc::clone(&cache.request_form), cache.bytes);
        self.item_caches.push(cache);
        let compaction = matches!(item, TranscriptItem::Compaction { .. });
        if compaction {
            self.compaction_at = Some(self.items.len());
        }
        self.items.push(item);
        if compaction {
            self.reset_request_history();
        } else {
            self.history_size.bytes += bytes;
            self.request_forms.push(form);
        }
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
        let text = attest_protocol::json::value_text(value);
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

/// A session's prompt-cache key: short, fixed-length, stable across its runs.
fn cache_key(session_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = hex::encode(Sha256::digest(session_id.as_bytes()));
    format!("attest-{}", &digest[..32])
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

/// The key of a satisfying receipt in `Run::successes`.
pub(super) fn success_key(tool: &str, fingerprint: &str) -> String {
    format!("{tool}\u{0}{fingerprint}")
}

/// Adds `receipt`, the run's `i`th, to a `Run::successes` index if it is
/// satisfying.
pub(super) fn index_success(index: &mut HashMap<String, Vec<usize>>, i: usize, receipt: &Receipt) {
    if receipt.is_satisfying() {
        index
            .entry(success_key(&receipt.tool_name, &receipt.input_fingerprint))
            .or_default()
            .push(i);
    }
}

/// The receipts `done` carries among `entries`, taken out of it.
fn take_done_receipts(entries: &mut [LogEntry]) -> Vec<Receipt> {
    entries
        .iter_mut()
        .find_map(|entry| match entry {
            LogEntry::Event {
                event:
                    Event {
                        body: EventBody::Done { receipts, .. },
                        ..
                    },
            } => Some(std::mem::take(receipts)),
            _ => None,
        })
        .unwrap_or_default()
}

fn success_index(receipts: &[Receipt]) -> HashMap<String, Vec<usize>> {
    let mut index = HashMap::new();
    for (i, r) in receipts.iter().enumerate() {
        index_success(&mut index, i, r);
    }
    index
}
