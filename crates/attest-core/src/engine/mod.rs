//! The run loop. [`Engine::run`] drives a new run to a terminal state;
//! [`Engine::resume`] continues one from its log after a crash;
//! [`Engine::close_interrupted`] ends one whose process died without
//! calling the model again.
//!
//! Files: `run.rs` (the loop and the terminal decision), `calls.rs` (tool
//! call execution), `model.rs` (model calls, retries, protocol checks),
//! `deltas.rs` (live token deltas, redacted across their boundaries).

mod calls;
mod compaction;
mod deltas;
mod history_tool;
mod model;
mod run;
mod tool_progress;
mod tool_search;

pub use compaction::{CompactionPolicy, ContextWindow, SUMMARY_HEADER};
pub use history_tool::HISTORY_TOOL;
pub use tool_search::TOOL_SEARCH;

use crate::approval::Approver;
use crate::failure::FailureTracker;
use crate::log::{LogError, RunLog};
use crate::provider::{ModelProvider, TextSink};
use crate::tool::{ToolContext, ToolRegistry};
use attest_protocol::{
    CompletionContract, Event, Receipt, TerminalReason, TerminalState, ToolSpec, TranscriptItem,
    Usage,
};
use run::{Run, Start};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;
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
    pub trace_id: String,
    pub session_id: String,
    pub contract: CompletionContract,
    pub max_steps: u32,
    /// Corrective turns allowed when required receipts are missing (SPEC A4).
    pub max_corrections: u32,
    /// An ungrounded value in the answer (or no value from any tool output)
    /// ends the run `unverified` (`ungrounded_claim`) after one corrective
    /// turn (SPEC A9). Off: grounding is reported, never decisive.
    pub require_grounding: bool,
    /// Protocol-breaking responses tolerated before the run fails.
    pub max_protocol_errors: u32,
    pub stream: bool,
    pub max_tokens: u32,
    pub temperature: Option<f32>,
    /// Sampling seed sent with every request (`[provider] seed`; `attest
    /// eval` gives attempt i of every group the same one).
    pub seed: Option<u64>,
    pub retry: RetryPolicy,
    /// Wall-clock limit for the whole run.
    pub timeout: Option<Duration>,
    /// The one redactor of the run (SPEC F8), built where the secrets are
    /// known (the builder): it scrubs the configured secret values and
    /// anything shaped like a key from everything the run keeps, sends or
    /// shows — transcript, events, traces, live deltas, memory.
    pub redactor: crate::redact::Redactor,
    /// Earlier turns of the session, already reduced to evidence by
    /// [`crate::session_history`]. Sent before this run's items; not logged again.
    pub prior_history: Vec<TranscriptItem>,
    /// When and how far history is compacted (SPEC E4), unless
    /// `context_window` is set.
    pub compaction: CompactionPolicy,
    /// The model's context window: when set, compaction is sized from it,
    /// the prefix and `max_tokens` (SPEC P2), and `compaction` is not used.
    pub context_window: Option<ContextWindow>,
    /// Layers after the base prompt, in SPEC D1 order (`AGENTS.md`,
    /// `SOUL.md`, `USER.md`, skills catalog, memory). Loaded once per run so
    /// the prefix stays byte-identical (SPEC D5).
    pub context_layers: Vec<ContextLayer>,
    /// When repeated identical failures get a reminder, and when they end the run.
    pub doom_loop: DoomLoopLimits,
    /// Live display of streamed answer text (`attest chat`); not logged.
    pub text_sink: Option<TextSink>,
    /// Emit the model's response as it is generated: `progress` events with
    /// `delta: true`, redacted, to the observer only (never logged; they
    /// carry the `seq` of the last logged event). Works alongside `text_sink`.
    pub stream_progress: bool,
    /// What happens to the model's reasoning content (SPEC D6).
    pub reasoning: ReasoningPolicy,
    /// Compact the history before the first request (`/compact`).
    pub force_compaction: bool,
    /// With more tools than this, the rest are found through `tool_search`
    /// (SPEC D7); `None` offers every tool up front.
    pub defer_tools_after: Option<usize>,
    /// How the front end answers `ask` when nobody is asked (`deny`,
    /// `allow`), recorded in `run_resumed`; the approver decides.
    pub approval: Option<String>,
    /// Set only by `attest eval`: the group this run is an attempt of, whose
    /// switches may turn guarantees off (SPEC I2). `None`: everything on.
    pub eval_group: Option<attest_protocol::EvalGroup>,
}

/// How reasoning content ("thinking") is kept (SPEC D6). Reasoning text is
/// never sent back to a provider: OpenAI-compatible servers such as DeepSeek
/// reject it in input, and Anthropic requires signed thinking blocks attest
/// does not replay. The one exception is provider-encrypted reasoning (the
/// Responses API's `encrypted_content`), kept and passed back under `Keep`
/// only. The policy decides what the transcript (and so budgets, traces and
/// compaction) holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReasoningPolicy {
    /// Drop it (default): the answer and the receipts are what count.
    #[default]
    Strip,
    /// Keep it whole in the transcript.
    Keep,
    /// Keep its last `max_tokens` tokens.
    Budget { max_tokens: usize },
}

impl ReasoningPolicy {
    /// Whether provider-encrypted reasoning is kept (and so passed back).
    /// Only under `Keep`: an opaque blob cannot be cut to a budget.
    pub fn keeps_encrypted(self) -> bool {
        matches!(self, ReasoningPolicy::Keep)
    }

    /// The reasoning to store for one response under this policy.
    pub fn apply(self, reasoning: Option<&str>) -> Option<String> {
        let text = reasoning.filter(|r| !r.trim().is_empty())?;
        match self {
            ReasoningPolicy::Strip => None,
            ReasoningPolicy::Keep => Some(text.to_string()),
            ReasoningPolicy::Budget { max_tokens } => {
                if crate::state::within_tokens(text, max_tokens) {
                    return Some(text.to_string());
                }
                // Keep the end: the conclusion is where reasoning lands.
                let mut start = text.len();
                for (i, _) in text.char_indices().rev() {
                    if crate::state::count_tokens(&text[i..]) > max_tokens {
                        break;
                    }
                    start = i;
                }
                Some(format!(
                    "[earlier reasoning cut to {max_tokens} tokens] {}",
                    &text[start..]
                ))
            }
        }
    }
}

/// Doom-loop thresholds (SPEC F10, seed 004).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DoomLoopLimits {
    /// Consecutive identical failures before the reminder (default 3).
    pub threshold: u32,
    /// Further identical failures after the reminder before the run ends (default 2).
    pub extra_repeats: u32,
}

impl Default for DoomLoopLimits {
    fn default() -> Self {
        DoomLoopLimits {
            threshold: 3,
            extra_repeats: 2,
        }
    }
}

/// One layer of the system prompt after the base invariants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextLayer {
    pub name: String,
    pub text: String,
    /// Cut to its budget.
    pub truncated: bool,
}

impl RunConfig {
    pub fn new(contract: CompletionContract) -> Self {
        RunConfig {
            run_id: new_id(),
            trace_id: new_id(),
            session_id: new_id(),
            contract,
            max_steps: 20,
            max_corrections: 1,
            require_grounding: false,
            max_protocol_errors: 3,
            stream: true,
            max_tokens: 4096,
            temperature: None,
            seed: None,
            retry: RetryPolicy::default(),
            timeout: None,
            redactor: crate::redact::Redactor::new(),
            prior_history: Vec::new(),
            compaction: CompactionPolicy::default(),
            context_window: None,
            context_layers: Vec::new(),
            doom_loop: DoomLoopLimits::default(),
            text_sink: None,
            stream_progress: false,
            reasoning: ReasoningPolicy::default(),
            force_compaction: false,
            defer_tools_after: Some(24),
            approval: None,
            eval_group: None,
        }
    }

    /// What this run leaves on: its eval group's switches, else everything.
    pub fn switches(&self) -> attest_protocol::HarnessSwitches {
        self.eval_group
            .as_ref()
            .map(|g| g.switches)
            .unwrap_or_default()
    }
}

/// A fresh random id (32 hex digits).
pub fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// What a run's log says so far, for [`Engine::resume`] and
/// [`Engine::close_interrupted`].
#[derive(Debug, Clone)]
pub struct ResumeState {
    /// The run's own transcript items, in order.
    pub items: Vec<TranscriptItem>,
    /// The last event sequence number written.
    pub last_seq: u64,
    /// Model calls already made.
    pub steps: u32,
    /// The log holds the run's `done` event: it ended.
    pub done: bool,
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
    #[error("run {0} has already ended; nothing to resume")]
    AlreadyEnded(String),
    #[error("the compaction archive is unavailable (a thread panicked while holding it)")]
    Archive,
}

/// Something that receives each event as it happens (a front end).
pub type Observer<'a> = &'a mut (dyn FnMut(&Event) + Send);

/// The engine: a provider, a tool registry, a workspace and an approver.
pub struct Engine {
    provider: Arc<dyn ModelProvider>,
    registry: Arc<ToolRegistry>,
    tool_ctx: ToolContext,
    approver: Arc<dyn Approver>,
    /// Structured failures, fingerprints and retry budgets (SPEC F6, F9).
    failures: Option<Arc<FailureTracker>>,
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
            failures: None,
        }
    }

    /// Record tool failures in `tracker` (the same one the registry's
    /// retry-budget middleware reads): failures reach the model as
    /// structured `ToolFailure`s with fingerprints, repeats aggregated.
    pub fn with_failure_tracker(mut self, tracker: Arc<FailureTracker>) -> Self {
        self.failures = Some(tracker);
        self
    }

    /// The prompt version stamped on this engine's runs: the harness's own,
    /// plus the provider's when it adds prompt text (text protocol).
    pub fn prompt_version(&self) -> String {
        match self.provider.prompt_version() {
            Some(v) => format!("{}+{v}", crate::PROMPT_VERSION),
            None => crate::PROMPT_VERSION.to_string(),
        }
    }

    /// Run `prompt` to a terminal state. Every transcript item, event and
    /// trace record goes to `log` before the next step acts on it; events
    /// also go to `observer`. `cancel` ends the run `cancelled`.
    pub async fn run(
        &self,
        prompt: &str,
        cfg: &RunConfig,
        log: &mut dyn RunLog,
        observer: Observer<'_>,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, EngineError> {
        Run::new(self, cfg, log, observer, cancel, Vec::new(), 0, 0)
            .drive(Start::Prompt(prompt))
            .await
    }

    /// Continue a run from its log (SPEC C5): calls left without a result
    /// are recorded as interrupted — never re-executed — and the model is
    /// asked again with the evidence the log holds.
    pub async fn resume(
        &self,
        state: ResumeState,
        cfg: &RunConfig,
        log: &mut dyn RunLog,
        observer: Observer<'_>,
        cancel: CancellationToken,
    ) -> Result<RunOutcome, EngineError> {
        ensure_not_ended(&state, cfg)?;
        Run::new(
            self,
            cfg,
            log,
            observer,
            cancel,
            state.items,
            state.last_seq,
            state.steps,
        )
        .drive(Start::Resume)
        .await
    }

    /// End a run whose process died, without another model call: pending
    /// calls are recorded as interrupted and the run ends `failed`,
    /// reason `interrupted`.
    pub async fn close_interrupted(
        &self,
        state: ResumeState,
        cfg: &RunConfig,
        log: &mut dyn RunLog,
        observer: Observer<'_>,
    ) -> Result<RunOutcome, EngineError> {
        ensure_not_ended(&state, cfg)?;
        Run::new(
            self,
            cfg,
            log,
            observer,
            CancellationToken::new(),
            state.items,
            state.last_seq,
            state.steps,
        )
        .drive(Start::Close)
        .await
    }
}

/// A run is over once its `done` is logged. A verdict without one (a
/// crash in between) is closed by the run itself, with that verdict.
fn ensure_not_ended(state: &ResumeState, cfg: &RunConfig) -> Result<(), EngineError> {
    if state.done {
        return Err(EngineError::AlreadyEnded(cfg.run_id.clone()));
    }
    Ok(())
}

/// sha256 over the system prompt and the serialized tool list (SPEC D5).
pub fn prefix_hash(system: &str, tools: &[ToolSpec]) -> String {
    prefix_digest(system, tools).0
}

/// [`prefix_hash`], and the serialized tool list's size in bytes.
pub(crate) fn prefix_digest(system: &str, tools: &[ToolSpec]) -> (String, usize) {
    let tools_json = serde_json::to_vec(tools).unwrap_or_default();
    let mut h = Sha256::new();
    h.update(system.as_bytes());
    h.update([0u8]);
    h.update(&tools_json);
    (hex::encode(h.finalize()), tools_json.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_policy_strips_keeps_or_budgets() {
        let long = "step ".repeat(400) + "so the answer is 42";
        assert_eq!(ReasoningPolicy::Strip.apply(Some("x")), None);
        assert_eq!(
            ReasoningPolicy::Keep.apply(Some("why")).as_deref(),
            Some("why")
        );
        let cut = ReasoningPolicy::Budget { max_tokens: 20 }
            .apply(Some(&long))
            .unwrap();
        assert!(cut.ends_with("so the answer is 42"), "{cut}");
        assert!(crate::state::count_tokens(&cut) < 40, "{cut}");
        assert_eq!(ReasoningPolicy::Keep.apply(Some("  ")), None);
        // Encrypted reasoning is opaque: kept whole under Keep, else not at all.
        assert!(ReasoningPolicy::Keep.keeps_encrypted());
        assert!(!ReasoningPolicy::Strip.keeps_encrypted());
        assert!(!ReasoningPolicy::Budget { max_tokens: 20 }.keeps_encrypted());
    }

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
}
