//! The run loop. One [`Engine::run`] call drives one run to a terminal state.

use crate::approval::{ApprovalRequest, Approver};
use crate::judge::{judge, Attempt, Judgement};
use crate::log::{LogEntry, LogError, RunLog};
use crate::prompt::{base_system_prompt, corrective_message, PROMPT_VERSION, PROTOCOL_PLACEHOLDER};
use crate::{forgery, render};
use attest_protocol::{
    AssistantPhase, CompletionContract, Event, EventBody, HarnessMessageKind, Permission,
    ProtocolErrorKind, Receipt, ReceiptStatus, TerminalReason, TerminalState, ToolSpec,
    TraceRecord, TranscriptItem, Usage, LOOP_VERSION,
};
use attest_providers::{
    pairing, FinishKind, ModelProvider, ModelRequest, ModelResponse, ParsedCall,
};
use attest_tools::{ToolContext, ToolRegistry};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Retry policy for retryable provider errors (429, 5xx, broken streams).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    pub max_retries: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// Delay before retry number `attempt` (1-based): the server's
    /// `retry-after` when given, else exponential backoff; capped either way.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let exponential = self
            .initial_backoff
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
        retry_after.unwrap_or(exponential).min(self.max_backoff)
    }
}

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub run_id: String,
    pub session_id: String,
    pub contract: CompletionContract,
    pub max_steps: u32,
    /// Corrective turns allowed when required receipts are missing (SPEC A4).
    pub max_corrections: u32,
    /// Protocol-breaking responses tolerated before the run fails.
    pub max_protocol_errors: u32,
    pub stream: bool,
    pub max_tokens: u32,
    pub temperature: Option<f32>,
    pub retry: RetryPolicy,
    /// Wall-clock limit for the whole run.
    pub timeout: Option<Duration>,
    /// Secret values (API keys) scrubbed from everything the run writes.
    pub secrets: Vec<String>,
}

impl RunConfig {
    pub fn new(contract: CompletionContract) -> Self {
        RunConfig {
            run_id: new_id(),
            session_id: new_id(),
            contract,
            max_steps: 20,
            max_corrections: 1,
            max_protocol_errors: 3,
            stream: true,
            max_tokens: 4096,
            temperature: None,
            retry: RetryPolicy::default(),
            timeout: None,
            secrets: Vec::new(),
        }
    }
}

fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub run_id: String,
    pub trace_id: String,
    pub session_id: String,
    pub state: TerminalState,
    pub reason: TerminalReason,
    pub answer: Option<String>,
    pub basis: String,
    pub receipts: Vec<Receipt>,
    pub steps: u32,
    pub usage: Usage,
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Log(#[from] LogError),
}

/// The engine: a provider, a tool registry, a workspace and an approver.
pub struct Engine {
    provider: Arc<dyn ModelProvider>,
    registry: Arc<ToolRegistry>,
    tool_ctx: ToolContext,
    approver: Arc<dyn Approver>,
}

impl Engine {
    pub fn new(
        provider: Arc<dyn ModelProvider>,
        registry: Arc<ToolRegistry>,
        tool_ctx: ToolContext,
        approver: Arc<dyn Approver>,
    ) -> Self {
        Engine {
            provider,
            registry,
            tool_ctx,
            approver,
        }
    }

    /// Run `prompt` to a terminal state. Every transcript item, event and
    /// trace record goes to `log` before the next step acts on it; events
    /// also go to `observer` (a front end). `cancel` ends the run `cancelled`.
    pub async fn run(
        &self,
        prompt: &str,
        cfg: &RunConfig,
        log: &mut dyn RunLog,
        observer: &mut (dyn FnMut(&Event) + Send),
        cancel: CancellationToken,
    ) -> Result<RunOutcome, EngineError> {
        let tools = self.registry.specs();
        let system = base_system_prompt().to_string();
        let prefix_hash = prefix_hash(&system, &tools);
        let mut run = Run {
            engine: self,
            cfg,
            log,
            observer,
            trace_id: new_id(),
            seq: 0,
            items: Vec::new(),
            receipts: Vec::new(),
            usage: Usage::default(),
            steps: 0,
            last_answer: None,
            seen_call_ids: HashSet::new(),
            system,
            tools,
            prefix_hash,
            interrupt: Interrupter {
                cancel,
                deadline: cfg.timeout.map(|t| Instant::now() + t),
            },
        };
        run.drive(prompt).await
    }
}

/// sha256 over the system prompt and the serialized tool list (SPEC D5).
pub fn prefix_hash(system: &str, tools: &[ToolSpec]) -> String {
    let mut h = Sha256::new();
    h.update(system.as_bytes());
    h.update([0u8]);
    h.update(serde_json::to_vec(tools).unwrap_or_default());
    hex::encode(h.finalize())
}

#[derive(Debug, Clone, Copy)]
enum Interrupt {
    Cancelled,
    TimedOut,
}

struct Interrupter {
    cancel: CancellationToken,
    deadline: Option<Instant>,
}

impl Interrupter {
    async fn wait(&self) -> Interrupt {
        match self.deadline {
            Some(deadline) => tokio::select! {
                _ = self.cancel.cancelled() => Interrupt::Cancelled,
                _ = tokio::time::sleep_until(deadline) => Interrupt::TimedOut,
            },
            None => {
                self.cancel.cancelled().await;
                Interrupt::Cancelled
            }
        }
    }
}

enum ModelOutcome {
    Response(ModelResponse),
    Interrupted(Interrupt),
    Failed(String),
}

struct Run<'a> {
    engine: &'a Engine,
    cfg: &'a RunConfig,
    log: &'a mut dyn RunLog,
    observer: &'a mut (dyn FnMut(&Event) + Send),
    trace_id: String,
    seq: u64,
    items: Vec<TranscriptItem>,
    receipts: Vec<Receipt>,
    usage: Usage,
    steps: u32,
    last_answer: Option<String>,
    seen_call_ids: HashSet<String>,
    system: String,
    tools: Vec<ToolSpec>,
    prefix_hash: String,
    interrupt: Interrupter,
}

impl Run<'_> {
    async fn drive(&mut self, prompt: &str) -> Result<RunOutcome, EngineError> {
        let provider = &self.engine.provider;
        self.emit(EventBody::RunStarted {
            trace_id: self.trace_id.clone(),
            session_id: self.cfg.session_id.clone(),
            provider: provider.name().to_string(),
            model: provider.model().to_string(),
            contract: self.cfg.contract.clone(),
            loop_version: LOOP_VERSION.to_string(),
            prompt_version: PROMPT_VERSION.to_string(),
        })?;
        self.push(TranscriptItem::UserInput {
            text: self.redact(prompt),
        })?;

        let mut corrections = 0u32;
        let mut protocol_errors = 0u32;
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
                protocol_errors += 1;
                self.trace(TraceRecord::ProtocolViolation {
                    step,
                    kind,
                    raw: self.redact(&response.raw),
                })?;
                self.emit(EventBody::ProtocolError { step, kind, detail })?;
                self.push(TranscriptItem::HarnessMessage {
                    kind: HarnessMessageKind::ProtocolPlaceholder,
                    text: PROTOCOL_PLACEHOLDER.to_string(),
                })?;
                if protocol_errors >= self.cfg.max_protocol_errors {
                    return self.finish(
                        TerminalState::Failed,
                        TerminalReason::ProtocolError,
                        format!("{protocol_errors} protocol-breaking responses"),
                    );
                }
                continue;
            }

            if response.tool_calls.is_empty() {
                if response.finish == FinishKind::ToolUse {
                    let raw = response.raw_finish_reason.clone().unwrap_or_default();
                    self.emit(EventBody::ProtocolError {
                        step,
                        kind: ProtocolErrorKind::NoParsableToolCall,
                        detail: format!(
                            "finish reason `{raw}` signals tool use but no valid call could be parsed{}",
                            if response.parse_failures.is_empty() {
                                String::new()
                            } else {
                                format!(": {}", response.parse_failures.join("; "))
                            }
                        ),
                    })?;
                    return self.finish(
                        TerminalState::Failed,
                        TerminalReason::ProtocolError,
                        format!(
                            "the provider signalled tool use (`{raw}`) but sent no parsable call"
                        ),
                    );
                }
                if response.text.trim().is_empty() {
                    return self.finish(
                        TerminalState::Failed,
                        TerminalReason::ProtocolError,
                        "the model returned neither text nor a tool call".to_string(),
                    );
                }
                let text = self.redact(&response.text);
                self.push(TranscriptItem::AssistantOutput {
                    text: text.clone(),
                    reasoning: None,
                    phase: AssistantPhase::Answer,
                })?;
                self.last_answer = Some(text);
                let attempts: Vec<Attempt> = self.receipts.iter().map(Attempt::from).collect();
                match judge(&self.cfg.contract, &attempts) {
                    Judgement::Satisfied => {
                        let basis = self.satisfied_basis();
                        return self.finish(
                            TerminalState::Completed,
                            TerminalReason::ContractSatisfied,
                            basis,
                        );
                    }
                    Judgement::NoAttempt { missing } if corrections < self.cfg.max_corrections => {
                        corrections += 1;
                        let text = corrective_message(&missing, &self.tools_that_can_satisfy());
                        self.push(TranscriptItem::HarnessMessage {
                            kind: HarnessMessageKind::Corrective,
                            text: text.clone(),
                        })?;
                        self.emit(EventBody::CorrectiveInjected {
                            step,
                            missing,
                            text,
                        })?;
                    }
                    Judgement::NoAttempt { missing } => {
                        return self.finish(
                            TerminalState::Unverified,
                            TerminalReason::MissingReceipt,
                            format!(
                                "the contract needs {missing}; the model answered without it after {corrections} corrective turn(s)"
                            ),
                        );
                    }
                    Judgement::End {
                        state,
                        reason,
                        basis,
                    } => return self.finish(state, reason, basis),
                }
                continue;
            }

            if let Some(why) = self.run_calls(step, &response).await? {
                return self.finish_interrupted(why);
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

    /// A violation the wire format reported, else text imitating a tool
    /// result (unless quoted verbatim from a real tool output of this run).
    fn protocol_violation(&self, response: &ModelResponse) -> Option<(ProtocolErrorKind, String)> {
        if let Some(v) = &response.protocol_violation {
            return Some((v.kind, v.detail.clone()));
        }
        let real_outputs = self.items.iter().filter_map(|i| match i {
            TranscriptItem::ToolResult { output, .. } => Some(output.as_str()),
            _ => None,
        });
        forgery::detect_forged_observation(&response.text, real_outputs).map(|pattern| {
            (
                ProtocolErrorKind::ForgedObservation,
                format!(
                    "the response contains text imitating a tool result ({pattern}); nothing in it was executed or kept in history"
                ),
            )
        })
    }

    /// Log the response's commentary and calls (write-ahead), then execute
    /// the calls in order. Returns the interrupt if the run was stopped.
    async fn run_calls(
        &mut self,
        step: u32,
        response: &ModelResponse,
    ) -> Result<Option<Interrupt>, EngineError> {
        if !response.text.trim().is_empty() {
            let text = self.redact(&response.text);
            self.push(TranscriptItem::AssistantOutput {
                text: text.clone(),
                reasoning: None,
                phase: AssistantPhase::Commentary,
            })?;
            self.emit(EventBody::Progress { step, text })?;
        }
        let calls: Vec<ParsedCall> = response
            .tool_calls
            .iter()
            .map(|c| self.unique_call(c))
            .collect();
        for call in &calls {
            self.push(TranscriptItem::ToolCall {
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            })?;
        }
        for (i, call) in calls.iter().enumerate() {
            let interrupt = Interrupter {
                cancel: self.interrupt.cancel.clone(),
                deadline: self.interrupt.deadline,
            };
            let finished = tokio::select! {
                r = self.execute_call(step, call) => { r?; None }
                why = interrupt.wait() => Some(why),
            };
            if let Some(why) = finished {
                for pending in &calls[i..] {
                    self.record_refusal(
                        step,
                        pending,
                        ReceiptStatus::Interrupted,
                        "the run was stopped while this call was pending or in flight",
                    )?;
                }
                return Ok(Some(why));
            }
        }
        Ok(None)
    }

    /// Call ids must be unique within a run for pairing to mean anything;
    /// a missing or reused id gets a fresh one.
    fn unique_call(&mut self, call: &ParsedCall) -> ParsedCall {
        let mut id = call.id.clone();
        if id.is_empty() || self.seen_call_ids.contains(&id) {
            let base = if id.is_empty() {
                "call".to_string()
            } else {
                id
            };
            let mut n = self.seen_call_ids.len();
            loop {
                let candidate = format!("{base}_{n}");
                if !self.seen_call_ids.contains(&candidate) {
                    id = candidate;
                    break;
                }
                n += 1;
            }
        }
        self.seen_call_ids.insert(id.clone());
        ParsedCall {
            id,
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        }
    }

    async fn execute_call(&mut self, step: u32, call: &ParsedCall) -> Result<(), EngineError> {
        let registry = Arc::clone(&self.engine.registry);
        let prepared = match registry.prepare(&call.name, &call.arguments) {
            Ok(p) => p,
            Err(e) => {
                let reason = e.to_string();
                self.trace(TraceRecord::InvalidArguments {
                    call_id: call.id.clone(),
                    tool_name: call.name.clone(),
                    error: reason.clone(),
                })?;
                return self.record_refusal(step, call, e.status(), &reason);
            }
        };

        let (approved, decided_by, message) = match prepared.permission {
            Permission::Allow => (true, "policy".to_string(), None),
            Permission::Deny => (
                false,
                "policy".to_string(),
                Some(format!(
                    "tool `{}` is denied by the permission policy",
                    call.name
                )),
            ),
            Permission::Ask => {
                let request = ApprovalRequest {
                    call_id: call.id.clone(),
                    tool_name: call.name.clone(),
                    arguments: prepared.arguments.clone(),
                    reason: format!("tool `{}` requires approval", call.name),
                };
                self.emit(EventBody::ApprovalRequested {
                    call_id: request.call_id.clone(),
                    tool_name: request.tool_name.clone(),
                    arguments: request.arguments.clone(),
                    reason: request.reason.clone(),
                })?;
                let decision = self.engine.approver.decide(&request).await;
                self.emit(EventBody::ApprovalResolved {
                    call_id: call.id.clone(),
                    tool_name: call.name.clone(),
                    approved: decision.approved,
                    decided_by: decision.decided_by.clone(),
                })?;
                let message = (!decision.approved).then(|| {
                    let base = format!(
                        "approval for `{}` was denied ({})",
                        call.name, decision.decided_by
                    );
                    match decision.message {
                        Some(m) => format!("{base}: {m}"),
                        None => base,
                    }
                });
                (decision.approved, decision.decided_by, message)
            }
        };
        self.trace(TraceRecord::PermissionDecision {
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            permission: prepared.permission,
            approved,
            decided_by,
        })?;
        if !approved {
            let reason = message.unwrap_or_else(|| "refused".to_string());
            return self.record_refusal(step, call, ReceiptStatus::Denied, &reason);
        }

        self.emit(EventBody::ToolStarted {
            step,
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            effect: Some(prepared.effect),
            arguments: prepared.arguments.clone(),
        })?;
        let (output, mut receipt) = registry
            .execute(&call.id, &prepared, &self.engine.tool_ctx)
            .await;
        receipt.error = receipt.error.map(|e| self.redact(&e));
        let text = render::tool_result_text(receipt.status, &self.redact(&output.output));
        self.record_result(step, call, text, receipt)
    }

    fn record_refusal(
        &mut self,
        step: u32,
        call: &ParsedCall,
        status: ReceiptStatus,
        reason: &str,
    ) -> Result<(), EngineError> {
        let receipt = self.engine.registry.refusal_receipt(
            &call.id,
            &call.name,
            &call.arguments,
            status,
            reason,
        );
        let text = render::tool_result_text(status, reason);
        self.record_result(step, call, text, receipt)
    }

    fn record_result(
        &mut self,
        step: u32,
        call: &ParsedCall,
        text: String,
        receipt: Receipt,
    ) -> Result<(), EngineError> {
        self.push(TranscriptItem::ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            status: receipt.status,
            output: text.clone(),
            receipt: Some(receipt.clone()),
        })?;
        self.receipts.push(receipt.clone());
        self.emit(EventBody::ToolResult {
            step,
            call_id: call.id.clone(),
            tool_name: call.name.clone(),
            status: receipt.status,
            output_preview: preview(&text, 400),
            receipt,
        })
    }

    async fn call_model(&mut self, step: u32) -> Result<ModelOutcome, EngineError> {
        let normalized = pairing::normalize(&self.items);
        let request = ModelRequest {
            system: self.system.clone(),
            tools: self.tools.clone(),
            history: normalized.items,
            stream: self.cfg.stream,
            max_tokens: self.cfg.max_tokens,
            temperature: self.cfg.temperature,
            stop: Vec::new(),
        };
        let provider = Arc::clone(&self.engine.provider);
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            self.trace(TraceRecord::Request {
                step,
                attempt,
                provider: provider.name().to_string(),
                api_family: provider.api_family().to_string(),
                model: provider.model().to_string(),
                stream: request.stream,
                prefix_hash: self.prefix_hash.clone(),
                tool_names: self.tools.iter().map(|t| t.name.clone()).collect(),
                message_count: request.history.len(),
                pairing_notes: normalized.notes.clone(),
            })?;
            let result = tokio::select! {
                r = provider.complete(&request) => r,
                why = self.interrupt.wait() => return Ok(ModelOutcome::Interrupted(why)),
            };
            let error = match result {
                Ok(response) => {
                    self.record_response(step, &response)?;
                    return Ok(ModelOutcome::Response(response));
                }
                Err(e) => e,
            };
            let message = self.redact(&error.to_string());
            let retryable = error.is_retryable();
            self.trace(TraceRecord::ProviderError {
                step,
                attempt,
                error: message.clone(),
                retryable,
            })?;
            if !retryable || attempt > self.cfg.retry.max_retries {
                return Ok(ModelOutcome::Failed(message));
            }
            let delay = self.cfg.retry.delay(attempt, error.retry_after());
            self.emit(EventBody::ProviderRetry {
                step,
                attempt,
                delay_ms: delay.as_millis() as u64,
                error: message,
            })?;
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                why = self.interrupt.wait() => return Ok(ModelOutcome::Interrupted(why)),
            }
        }
    }

    fn record_response(&mut self, step: u32, response: &ModelResponse) -> Result<(), EngineError> {
        self.usage.add(response.usage);
        self.trace(TraceRecord::Response {
            step,
            raw_finish_reason: response.raw_finish_reason.clone(),
            text: self.redact(&response.text),
            parsed_calls: response
                .tool_calls
                .iter()
                .map(|c| format!("{} {}", c.id, c.name))
                .collect(),
            parse_failures: response.parse_failures.clone(),
            input_tokens: response.usage.input_tokens,
            output_tokens: response.usage.output_tokens,
        })?;
        self.trace(TraceRecord::RawOutput {
            step,
            raw: self.redact(&response.raw),
        })
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
            prompt_version: PROMPT_VERSION.to_string(),
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

    fn emit(&mut self, body: EventBody) -> Result<(), EngineError> {
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

    fn push(&mut self, item: TranscriptItem) -> Result<(), EngineError> {
        self.log.append(&LogEntry::Item { item: item.clone() })?;
        self.items.push(item);
        Ok(())
    }

    fn trace(&mut self, trace: TraceRecord) -> Result<(), EngineError> {
        self.log.append(&LogEntry::Trace { trace })?;
        Ok(())
    }

    /// Scrub configured secret values from text the run is about to keep.
    fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in self.cfg.secrets.iter().filter(|s| s.len() >= 4) {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), "[REDACTED]");
            }
        }
        out
    }
}

fn preview(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_honours_retry_after_and_is_capped() {
        let policy = RetryPolicy {
            max_retries: 5,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        };
        assert_eq!(policy.delay(1, None), Duration::from_millis(100));
        assert_eq!(policy.delay(3, None), Duration::from_millis(400));
        assert_eq!(policy.delay(9, None), Duration::from_secs(1));
        assert_eq!(
            policy.delay(1, Some(Duration::from_millis(250))),
            Duration::from_millis(250)
        );
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(90))),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn preview_cuts_on_char_boundaries() {
        assert_eq!(preview("héllo", 2), "hé…");
        assert_eq!(preview("hi", 5), "hi");
    }
}
