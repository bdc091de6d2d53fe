//! Model calls: request assembly from the transcript, retries with
//! backoff, interruption, and the protocol checks on each response.

use super::compaction::{array_bytes, json_array_bytes};
use super::deltas::DeltaStream;
use super::run::Run;
use super::EngineError;
use crate::forgery;
use crate::provider::{ModelRequest, ModelResponse, TextSink};
use crate::state::{render_tail, TailBudget};
use attest_protocol::{
    CacheResetPoint, CacheResetReason, ContextSource, EventBody, HarnessMessageKind,
    ProtocolErrorKind, TraceRecord, TranscriptItem,
};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Copy)]
pub(super) enum Interrupt {
    Cancelled,
    TimedOut,
}

/// Resolves when the run is cancelled or its deadline passes.
pub(super) struct Interrupter {
    pub(super) cancel: CancellationToken,
    pub(super) deadline: Option<Instant>,
}

impl Interrupter {
    pub(super) async fn wait(&self) -> Interrupt {
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

// One per model call, matched at once: boxing the response buys nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum ModelOutcome {
    Response(ModelResponse),
    Interrupted(Interrupt),
    Failed(String),
}

/// The most tokens of the goal a tail shows while the request carries the
/// user's message whole: the gist, a quarter of the tail's budget.
const GOAL_TOKENS_WITH_REQUEST: usize = 200;

impl Run<'_> {
    /// The state tail's budget (SPEC E3): the defaults; until a compaction
    /// the goal, also the run's own user message, is shown only in part.
    pub(super) fn tail_budget(&self) -> TailBudget {
        TailBudget {
            max_goal_tokens: self
                .latest_compaction()
                .is_none()
                .then_some(GOAL_TOKENS_WITH_REQUEST),
            ..TailBudget::default()
        }
    }

    pub(super) async fn call_model(&mut self, step: u32) -> Result<ModelOutcome, EngineError> {
        let forced = self.cfg.force_compaction && self.latest_compaction().is_none();
        let compacted_now = self.maybe_compact(step, forced)?;
        let tools = self.visible_tools();
        let (prefix_hash, tools_bytes) = self.prefix_of(&tools);
        // Any other change of the prefix (tools found by tool_search) is
        // declared too, so a cache miss is never unexplained (SPEC D5, E4).
        if let Some(previous) = self.last_prefix.replace(prefix_hash.clone()) {
            if previous != prefix_hash && !compacted_now {
                self.trace(TraceRecord::CacheReset {
                    step,
                    reset_point: CacheResetPoint {
                        reason: CacheResetReason::ToolSchemaChange,
                        prefix_hash_before: previous,
                        prefix_hash_after: prefix_hash.clone(),
                        source_refs: tools.iter().map(|t| t.name.clone()).collect(),
                        created_at: chrono::Utc::now(),
                    },
                })?;
            }
        }
        debug_assert!(
            (self.request_forms.iter().map(Arc::as_ptr))
                .eq(self.build_request_history().iter().map(Arc::as_ptr)),
            "the kept request history drifted from the run's items"
        );
        let mut normalized = self.normalizer.normalize(&self.request_forms);
        // The state snapshot goes last and is never logged (SPEC E3).
        let tail = self
            .state
            .has_progress()
            .then(|| render_tail(&self.state, &self.tail_budget()));
        let mut snapshot_at = None;
        if let Some(tail) = &tail {
            let snapshot = Arc::new(TranscriptItem::HarnessMessage {
                kind: HarnessMessageKind::StateSnapshot,
                text: tail.text.clone(),
            });
            // A fresh reminder stays the latest user-role message (SPEC F10).
            let at = match normalized.items.last().map(|i| &**i) {
                Some(TranscriptItem::HarnessMessage {
                    kind: HarnessMessageKind::Reminder,
                    ..
                }) => normalized.items.len() - 1,
                _ => normalized.items.len(),
            };
            normalized.items.insert(at, snapshot);
            snapshot_at = Some(at);
        }
        let compacted = self
            .latest_compaction()
            .map(|(_, covers, summary)| (covers, summary.len()));
        let mut context_sources = vec![source(
            "base_prompt",
            1,
            crate::prompt::base_prompt_for(self.cfg.switches().invariant_prompt).len(),
        )];
        for layer in &self.cfg.context_layers {
            let mut s = source(&layer.name, 1, layer.text.len());
            s.truncated = layer.truncated;
            context_sources.push(s);
        }
        context_sources.push(source("tools", tools.len(), tools_bytes));
        match compacted {
            Some((covers, summary_bytes)) => {
                let mut summary = source("compaction_summary", 1, summary_bytes);
                summary.truncated = true;
                context_sources.push(summary);
                let rest = &self.item_caches[covers.min(self.items.len())..];
                context_sources.push(source("run_transcript", rest.len(), array_bytes(rest)));
            }
            None => {
                // From the kept sums: a step does not walk the history.
                let run_bytes = self.history_size.bytes.saturating_sub(self.prior_bytes);
                debug_assert_eq!(
                    json_array_bytes(self.items.len(), run_bytes),
                    array_bytes(&self.item_caches)
                );
                context_sources.push(source(
                    "session_history",
                    self.cfg.prior_history.len(),
                    json_array_bytes(self.prior_caches.len(), self.prior_bytes),
                ));
                context_sources.push(source(
                    "run_transcript",
                    self.items.len(),
                    json_array_bytes(self.items.len(), run_bytes),
                ));
            }
        }
        if let Some(tail) = &tail {
            context_sources.push(ContextSource {
                name: "tail_state".to_string(),
                items: 1,
                bytes: tail.text.len(),
                truncated: tail.omitted > 0,
            });
        }
        let request = ModelRequest {
            system: self.system.clone(),
            tools,
            history: normalized.items,
            stream: self.cfg.stream,
            max_tokens: self.cfg.max_tokens,
            temperature: self.cfg.temperature,
            seed: self.cfg.seed,
            stop: Vec::new(),
            cache_key: Some(self.cache_key.clone()),
        };
        let provider = Arc::clone(&self.engine.provider);
        // Live text (progress events, the chat's display) is redacted
        // across delta boundaries before anyone sees it, like everything the
        // run keeps (SPEC F8).
        let streaming = self.cfg.stream_progress || self.cfg.text_sink.is_some();
        let (delta_tx, mut delta_rx) = mpsc::unbounded_channel::<String>();
        // Deltas go through a channel: the sink may be called on another
        // thread (the local model's), events are emitted from this task.
        let sink = streaming.then(|| {
            TextSink(Arc::new(move |text: &str| {
                let _ = delta_tx.send(text.to_string());
            }))
        });
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
                prefix_hash: prefix_hash.clone(),
                tool_names: request.tools.iter().map(|t| t.name.clone()).collect(),
                message_count: request.history.len(),
                max_tokens: request.max_tokens,
                temperature: request.temperature,
                context_sources: context_sources.clone(),
                pairing_notes: normalized.notes.clone(),
            })?;
            // Write-ahead: every result is durable before the model sees it.
            // Its events are shown once the request is on its way.
            self.commit()?;
            let mut deltas = DeltaStream::default();
            let result = {
                let call = async {
                    match &sink {
                        Some(sink) => provider.complete_streaming(&request, sink).await,
                        None => provider.complete(&request).await,
                    }
                };
                let mut call = std::pin::pin!(call);
                let mut unshown = true;
                loop {
                    tokio::select! {
                        biased;
                        r = &mut call => break r,
                        () = std::future::ready(()), if unshown => {
                            // The call has handed the request to its
                            // connection; let that task write it first.
                            unshown = false;
                            tokio::task::yield_now().await;
                            self.show_committed();
                        }
                        Some(text) = delta_rx.recv(), if streaming => {
                            self.show_deltas(step, &mut deltas, text, &mut delta_rx);
                        }
                        why = self.interrupt.wait() => return Ok(ModelOutcome::Interrupted(why)),
                    }
                }
            };
            self.show_committed();
            // What streamed before the call returned comes before the
            // events of its response.
            if streaming {
                self.show_deltas(step, &mut deltas, String::new(), &mut delta_rx);
                let held = deltas.finish(&|t: &str| self.redact(t));
                if let Some(text) = held {
                    self.show_live(step, text);
                }
            }
            let error = match result {
                Ok(response) => {
                    self.record_response(step, &response)?;
                    // The normalizer's part of the history goes back to it,
                    // without the snapshot (see `GrowingNormalizer`).
                    let mut history = request.history;
                    if let Some(at) = snapshot_at {
                        history.remove(at);
                    }
                    self.normalizer.give_back(history);
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
            self.flush()?;
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                why = self.interrupt.wait() => return Ok(ModelOutcome::Interrupted(why)),
            }
        }
    }

    /// Show `text` and whatever else is pending as one delta event (live
    /// only, redacted; see [`DeltaStream`]).
    fn show_deltas(
        &mut self,
        step: u32,
        deltas: &mut DeltaStream,
        mut text: String,
        pending: &mut mpsc::UnboundedReceiver<String>,
    ) {
        while let Ok(more) = pending.try_recv() {
            text.push_str(&more);
        }
        if text.is_empty() {
            return;
        }
        if let Some(text) = deltas.push(&text, &|t: &str| self.redact(t)) {
            self.show_live(step, text);
        }
    }

    /// Redacted live text to the display sink and, when asked for, as a
    /// `progress` delta event (observer only, never logged).
    fn show_live(&mut self, step: u32, text: String) {
        if let Some(sink) = &self.cfg.text_sink {
            (sink.0)(&text);
        }
        if self.cfg.stream_progress {
            self.emit_live(EventBody::Progress {
                step,
                text,
                delta: true,
            });
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
            call_source: (!response.tool_calls.is_empty()).then_some(response.call_source),
            // Previews of malformed calls quote the model's arguments.
            parse_failures: response
                .parse_failures
                .iter()
                .map(|f| self.redact(f))
                .collect(),
            input_tokens: response.usage.input_tokens,
            output_tokens: response.usage.output_tokens,
            cached_input_tokens: response.usage.cached_input_tokens,
            cache_creation_input_tokens: response.usage.cache_creation_input_tokens,
        })?;
        self.trace(TraceRecord::RawOutput {
            step,
            raw: self.redact_raw(response),
        })
    }

    /// A violation the wire format reported, else text imitating a tool
    /// result (unless quoted verbatim from a real tool output of this run).
    pub(super) fn protocol_violation(
        &self,
        response: &ModelResponse,
    ) -> Option<(ProtocolErrorKind, String)> {
        if let Some(v) = &response.protocol_violation {
            return Some((v.kind, v.detail.clone()));
        }
        let real_outputs = self.items.iter().filter_map(|i| match i {
            TranscriptItem::ToolResult { output, .. } => Some(output.as_str()),
            _ => None,
        });
        forgery::detect_forged_observation(&response.text, real_outputs).map(|forgery| {
            (
                ProtocolErrorKind::ForgedObservation,
                format!(
                    "the response contains {} ({forgery}); nothing in it was executed or kept in history",
                    forgery.describe()
                ),
            )
        })
    }
}

fn source(name: &str, items: usize, bytes: usize) -> ContextSource {
    ContextSource {
        name: name.to_string(),
        items,
        bytes,
        truncated: false,
    }
}
