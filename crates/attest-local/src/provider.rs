//! [`LocalProvider`]: the embedded model as an [`attest_providers::ModelProvider`].
//!
//! The model lives on a worker thread of its own (inference is blocking and
//! CPU-bound; the async runtime is never blocked), running its tensor work
//! on a rayon pool of the configured size. Requests are rendered with the
//! model's chat template, tools included; the reply is parsed by
//! [`attest_providers::tool_call_format`]: calls in the model family's
//! formats become tool calls, anything that tries to be a call and is not a
//! valid one is reported as a protocol violation, and plain text is an
//! answer.

use crate::error::{LocalError, Result};
use crate::session::{Finish, GenerateParams, Generation, LoadOptions, LocalModel};
use crate::template::ChatMessage;
use crate::weights::WeightLoading;
use async_trait::async_trait;
use attest_protocol::{TranscriptItem, Usage};
use attest_providers::tool_call_format::{self, ParseOptions};
use attest_providers::{
    FinishKind, ModelProvider, ModelRequest, ModelResponse, ParsedCall, ProviderError, TextSink,
};
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Added to the system prompt when tools are offered. Small models tend to
/// repeat a call after its result arrives instead of answering.
pub const TOOL_RESULT_NOTE: &str = "When a tool response arrives, answer the user's question from it; do not repeat a call whose result you already have.";

/// Text that ends a generation besides the model's stop tokens: a model may
/// propose calls, never write their results.
pub const STOP_STRINGS: [&str; 2] = ["<tool_response>", "<|im_start|>"];

/// Settings of the local provider.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    pub model_path: PathBuf,
    /// Name reported as the model (default: the GGUF's `general.name`).
    pub model_name: Option<String>,
    /// Threads for inference (default: all available).
    pub threads: Option<usize>,
    /// Cap on the context length (default: the model's, at most 32768).
    pub max_context: Option<usize>,
    /// Cap on tokens generated per call, below the request's `max_tokens`.
    pub max_new_tokens: usize,
    /// Seed for sampling when a temperature is set.
    pub seed: u64,
    /// Directory of the on-disk prefix cache (`None`: off).
    pub prefix_cache_dir: Option<PathBuf>,
    /// Map the weights from the file (default) or read them.
    pub weights: WeightLoading,
}

impl LocalConfig {
    pub fn new(model_path: impl Into<PathBuf>) -> LocalConfig {
        LocalConfig {
            model_path: model_path.into(),
            model_name: None,
            threads: None,
            max_context: None,
            max_new_tokens: 1024,
            seed: 0x5eed,
            prefix_cache_dir: None,
            weights: WeightLoading::default(),
        }
    }
}

/// Figures of the last call, for benchmarks and tests.
#[derive(Debug, Clone)]
pub struct CallStats {
    pub generation: Generation,
    pub prompt_text_len: usize,
}

enum Work {
    Complete(Job),
    ClearCache,
}

struct Job {
    request: ModelRequest,
    cancel: Arc<AtomicBool>,
    /// Receives each piece of generated text as it is decoded.
    sink: Option<TextSink>,
    reply: tokio::sync::oneshot::Sender<Result<(Generation, bool)>>,
}

/// The embedded model.
pub struct LocalProvider {
    model_name: String,
    jobs: Mutex<mpsc::Sender<Work>>,
    next_call: AtomicU64,
    last: Arc<Mutex<Option<CallStats>>>,
    threads: usize,
    load_time: Duration,
    context_limit: usize,
    weights: WeightLoading,
}

impl LocalProvider {
    /// Load the model on a new worker thread and wait until it is ready.
    /// Blocking (seconds); a missing or corrupt file is an error here.
    pub fn load(cfg: LocalConfig) -> Result<LocalProvider> {
        let threads = cfg
            .threads
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("attest-local-{i}"))
            .build()
            .map_err(|e| LocalError::Inference(format!("thread pool: {e}")))?;
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(String, Duration, usize)>>();
        let (job_tx, job_rx) = mpsc::channel::<Work>();
        let last: Arc<Mutex<Option<CallStats>>> = Arc::new(Mutex::new(None));
        let last_w = Arc::clone(&last);
        let cfg_w = cfg.clone();
        std::thread::Builder::new()
            .name("attest-local-model".into())
            .spawn(move || {
                let loaded = pool.install(|| {
                    LocalModel::load(
                        &cfg_w.model_path,
                        &LoadOptions {
                            max_context: cfg_w.max_context,
                            prefix_cache_dir: cfg_w.prefix_cache_dir.clone(),
                            weights: cfg_w.weights,
                        },
                    )
                });
                let mut model = match loaded {
                    Ok(m) => {
                        let _ = ready_tx.send(Ok((
                            m.name.clone(),
                            m.load_time,
                            m.config().context_limit,
                        )));
                        m
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                while let Ok(work) = job_rx.recv() {
                    let job = match work {
                        Work::Complete(job) => job,
                        Work::ClearCache => {
                            model.clear_cache();
                            continue;
                        }
                    };
                    if job.cancel.load(Ordering::Relaxed) {
                        let _ = job.reply.send(Err(LocalError::Cancelled));
                        continue;
                    }
                    let result = pool.install(|| run_job(&mut model, &cfg_w, &job));
                    if let Ok((generation, _)) = &result {
                        if let Ok(mut l) = last_w.lock() {
                            *l = Some(CallStats {
                                generation: generation.clone(),
                                prompt_text_len: 0,
                            });
                        }
                    }
                    let _ = job.reply.send(result);
                }
            })
            .map_err(|e| LocalError::Inference(format!("cannot start the model thread: {e}")))?;
        let (name, load_time, context_limit) = ready_rx
            .recv()
            .map_err(|_| LocalError::WorkerGone("the model thread ended while loading".into()))??;
        Ok(LocalProvider {
            model_name: cfg.model_name.clone().unwrap_or(name),
            jobs: Mutex::new(job_tx),
            next_call: AtomicU64::new(1),
            last,
            threads,
            weights: cfg.weights,
            load_time,
            context_limit,
        })
    }

    /// Figures of the last completed call.
    pub fn last_call(&self) -> Option<CallStats> {
        self.last.lock().ok().and_then(|l| l.clone())
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Whether the weights were mapped from the file or read.
    pub fn weights(&self) -> WeightLoading {
        self.weights
    }

    pub fn load_time(&self) -> Duration {
        self.load_time
    }

    pub fn context_limit(&self) -> usize {
        self.context_limit
    }

    /// Drop the KV cache: the next call evaluates its whole prompt (the
    /// prefix store is not read for it).
    pub fn clear_cache(&self) {
        if let Ok(jobs) = self.jobs.lock() {
            let _ = jobs.send(Work::ClearCache);
        }
    }

    fn fresh_call_id(&self) -> String {
        format!("local_{}", self.next_call.fetch_add(1, Ordering::Relaxed))
    }

    /// One call on the worker thread; generated text goes to `sink` as it
    /// is decoded.
    async fn call(
        &self,
        request: &ModelRequest,
        sink: Option<TextSink>,
    ) -> Result<ModelResponse, ProviderError> {
        let cancel = Arc::new(AtomicBool::new(false));
        let _guard = CancelOnDrop(Arc::clone(&cancel));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job = Job {
            request: request.clone(),
            cancel,
            sink,
            reply: tx,
        };
        {
            let jobs = self
                .jobs
                .lock()
                .map_err(|_| provider_error(LocalError::WorkerGone("lock poisoned".into())))?;
            jobs.send(Work::Complete(job)).map_err(|_| {
                provider_error(LocalError::WorkerGone("the model thread has ended".into()))
            })?;
        }
        let (generation, prefilled) = rx
            .await
            .map_err(|_| {
                provider_error(LocalError::WorkerGone(
                    "no reply from the model thread".into(),
                ))
            })?
            .map_err(provider_error)?;
        Ok(response_of(
            &generation,
            prefilled,
            request,
            &self.model_name,
            || self.fresh_call_id(),
        ))
    }
}

/// Sets the flag when the caller stops waiting (the engine's future is
/// dropped on cancel or timeout), so the worker stops generating.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The conversation for the template: system prompt (with the note), then
/// the history with calls grouped under their assistant message.
pub fn messages_of(request: &ModelRequest) -> Vec<ChatMessage> {
    let mut system = request.system.clone();
    if !request.tools.is_empty() {
        if !system.is_empty() {
            system.push_str("\n\n");
        }
        system.push_str(TOOL_RESULT_NOTE);
    }
    let mut out = vec![ChatMessage::new("system", system)];
    let items: Vec<&TranscriptItem> = request.history.iter().map(|item| &**item).collect();
    let mut i = 0;
    while i < items.len() {
        match items[i] {
            TranscriptItem::UserInput { text } | TranscriptItem::HarnessMessage { text, .. } => {
                out.push(ChatMessage::new("user", text.clone()));
                i += 1;
            }
            TranscriptItem::AssistantOutput { text, .. } => {
                let mut m = ChatMessage::new("assistant", text.clone());
                i += 1;
                while let Some(TranscriptItem::ToolCall {
                    name, arguments, ..
                }) = items.get(i).copied()
                {
                    m.tool_calls
                        .push((name.clone(), arguments_value(arguments)));
                    i += 1;
                }
                out.push(m);
            }
            TranscriptItem::ToolCall { .. } => {
                let mut m = ChatMessage::new("assistant", "");
                while let Some(TranscriptItem::ToolCall {
                    name, arguments, ..
                }) = items.get(i).copied()
                {
                    m.tool_calls
                        .push((name.clone(), arguments_value(arguments)));
                    i += 1;
                }
                out.push(m);
            }
            TranscriptItem::ToolResult { name, output, .. } => {
                let mut m = ChatMessage::new("tool", output.clone());
                m.name = Some(name.clone());
                out.push(m);
                i += 1;
            }
            // Terminal markers and compaction records are not sent (the
            // normalizer turns a compaction into a harness message).
            _ => i += 1,
        }
    }
    out
}

fn arguments_value(raw: &str) -> serde_json::Value {
    serde_json::from_str(raw).unwrap_or_else(|_| serde_json::Value::String(raw.to_string()))
}

/// Render, tokenize and generate on the worker thread. The bool says whether
/// the prompt ended inside a `<think>` block.
fn run_job(model: &mut LocalModel, cfg: &LocalConfig, job: &Job) -> Result<(Generation, bool)> {
    let req = &job.request;
    let prompt = model.render(&messages_of(req), &req.tools)?;
    let prefilled = prompt.trim_end().ends_with("<think>");
    let tokens = model.tokenize(&prompt)?;
    let mut stop: Vec<String> = req.stop.clone();
    for s in STOP_STRINGS {
        if !stop.iter().any(|x| x == s) {
            stop.push(s.to_string());
        }
    }
    let params = GenerateParams {
        max_new_tokens: (req.max_tokens as usize).clamp(1, cfg.max_new_tokens.max(1)),
        temperature: req.temperature,
        stop,
        seed: req.seed.unwrap_or(cfg.seed),
    };
    // `generate` passes whole characters only (a character split over
    // tokens waits for its last byte), and the pieces add up to the
    // generation's text.
    let mut on_text = |t: &str| {
        if let Some(s) = &job.sink {
            (s.0)(t)
        }
    };
    let generation = model.generate(&tokens, &params, &mut on_text, &job.cancel)?;
    Ok((generation, prefilled))
}

/// Turn a generation into the response the engine expects.
pub fn response_of(
    generation: &Generation,
    prefilled: bool,
    request: &ModelRequest,
    model_name: &str,
    mut call_id: impl FnMut() -> String,
) -> ModelResponse {
    let truncated = generation.finish == Finish::Length;
    let raw_finish = if truncated { "length" } else { "stop" };
    let raw = json!({
        "model": model_name,
        "text": generation.text,
        "finish_reason": raw_finish,
        "stop": match &generation.finish { Finish::Stop(s) => Some(s.clone()), Finish::Length => None },
        "usage": {
            "prompt_tokens": generation.prompt_tokens,
            "reused_prompt_tokens": generation.reused_tokens,
            "evaluated_prompt_tokens": generation.evaluated_tokens,
            "completion_tokens": generation.generated_tokens,
        },
        "timing_ms": {
            "prompt": generation.prompt_time.as_millis() as u64,
            "generation": generation.generation_time.as_millis() as u64,
        },
    })
    .to_string();
    let usage = Usage {
        input_tokens: generation.prompt_tokens as u64,
        output_tokens: generation.generated_tokens as u64,
        ..Usage::default()
    };
    let mut out = ModelResponse {
        text: String::new(),
        reasoning: None,
        encrypted_reasoning: Vec::new(),
        tool_calls: Vec::new(),
        finish: if truncated {
            FinishKind::Length
        } else {
            FinishKind::Stop
        },
        raw_finish_reason: Some(raw_finish.to_string()),
        usage,
        raw,
        parse_failures: Vec::new(),
        protocol_violation: None,
        call_source: attest_protocol::CallSource::Native,
    };
    let opts = ParseOptions {
        truncated,
        reasoning_prefilled: prefilled,
    };
    match tool_call_format::parse(&generation.text, &request.tools, opts) {
        Ok(parsed) => {
            out.text = parsed.content;
            out.reasoning = parsed.reasoning;
            out.parse_failures = parsed.dropped;
            if !parsed.calls.is_empty() {
                out.finish = FinishKind::ToolUse;
                out.raw_finish_reason = Some("tool_calls".into());
                out.tool_calls = parsed
                    .calls
                    .into_iter()
                    .map(|c| ParsedCall {
                        id: call_id(),
                        name: c.name,
                        arguments: c.arguments,
                    })
                    .collect();
            }
        }
        Err(violation) => out.protocol_violation = Some(violation),
    }
    out
}

fn provider_error(e: LocalError) -> ProviderError {
    // None of these is helped by retrying the same request.
    ProviderError::Decode(format!("local model: {e}"))
}

#[async_trait]
impl ModelProvider for LocalProvider {
    fn name(&self) -> &str {
        "local"
    }

    fn api_family(&self) -> &str {
        "local_gguf"
    }

    fn model(&self) -> &str {
        &self.model_name
    }

    fn context_window(&self) -> Option<usize> {
        Some(self.context_limit)
    }

    async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ProviderError> {
        self.call(request, None).await
    }

    /// Every piece of generated text goes to `sink` as it is decoded: the
    /// raw response, tool-call syntax included.
    async fn complete_streaming(
        &self,
        request: &ModelRequest,
        sink: &TextSink,
    ) -> Result<ModelResponse, ProviderError> {
        self.call(request, Some(sink.clone())).await
    }
}
