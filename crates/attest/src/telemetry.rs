//! OpenTelemetry export (SPEC H3): a run's log, as it is appended, turned
//! into GenAI semantic-convention spans and sent over OTLP/HTTP
//! (protobuf): `invoke_agent attest` per run, `chat {model}` per model
//! call and `execute_tool {name}` per tool call under it, with `gen_ai.*`
//! attributes and attest's own facts under `attest.*`.
//!
//! The store stays authoritative; export is one-way. It reads what the
//! engine already logged (redacted texts: SPEC F8), never blocks a run
//! (spans go to a batch processor's bounded queue on its own thread and
//! are dropped when it is full) and never fails one (export errors are
//! the exporter's to swallow). Prompt, answer and tool contents are
//! attached only when `capture_content` is on.

use attest_protocol::{Event, EventBody, LogEntry, TraceRecord, TranscriptItem};
use opentelemetry::trace::{
    Span as _, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue, StringValue, Value};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, Span};
use opentelemetry_sdk::Resource;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// Receives each log entry of a run as it is appended (after the append
/// committed): the hook export is built on.
pub type LogTap = Arc<dyn Fn(&str, &LogEntry) + Send + Sync>;

/// How long one export request may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);

/// Where and what to export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// The OTLP/HTTP base endpoint (`http://collector:4318`); spans go to
    /// its `/v1/traces`.
    pub endpoint: String,
    /// Attach prompt, answer, tool arguments and results (redacted).
    pub capture_content: bool,
}

/// The GenAI conventions' switch for exporting contents.
pub const CAPTURE_CONTENT_ENV: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

impl TelemetryConfig {
    /// Export to `endpoint` (none, or a blank one: no export), with contents
    /// when `[telemetry] capture_content` or [`CAPTURE_CONTENT_ENV`]
    /// (`capture_env`, its value) says `true`.
    pub fn resolve(
        endpoint: Option<String>,
        capture_content: Option<bool>,
        capture_env: Option<&str>,
    ) -> Option<TelemetryConfig> {
        let endpoint = endpoint.filter(|e| !e.trim().is_empty())?;
        let capture_env = capture_env.is_some_and(|v| v.eq_ignore_ascii_case("true"));
        Some(TelemetryConfig {
            endpoint,
            capture_content: capture_content.unwrap_or(false) || capture_env,
        })
    }
}

/// Why export could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("OTLP export to {endpoint}: {reason}")]
pub struct TelemetryError {
    endpoint: String,
    reason: String,
}

/// The exporter and the spans of the runs in progress.
pub struct Telemetry {
    provider: SdkTracerProvider,
    state: Arc<Mutex<Spans>>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

impl Telemetry {
    pub fn start(config: &TelemetryConfig) -> Result<Telemetry, TelemetryError> {
        let fail = |reason: String| TelemetryError {
            endpoint: config.endpoint.clone(),
            reason,
        };
        let base = config.endpoint.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(fail(
                "the endpoint must start with http:// or https://".into(),
            ));
        }
        crate::mcp::install_crypto_provider();
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(format!("{base}/v1/traces"))
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| fail(e.to_string()))?;
        let resource = Resource::builder_empty()
            .with_service_name("attest")
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("attest");
        Ok(Telemetry {
            provider,
            state: Arc::new(Mutex::new(Spans {
                tracer,
                capture_content: config.capture_content,
                runs: HashMap::new(),
            })),
        })
    }

    /// The hook for [`EngineBuilder::log_tap`](crate::EngineBuilder::log_tap).
    pub fn tap(&self) -> LogTap {
        let state = Arc::clone(&self.state);
        Arc::new(move |run_id: &str, entry: &LogEntry| {
            if let Ok(mut spans) = state.lock() {
                spans.on_entry(run_id, entry);
            }
        })
    }

    /// Send what is queued and stop, waiting at most `timeout`; failures
    /// are dropped (export never fails a run).
    pub fn shutdown(&self, timeout: Duration) {
        let _ = self.provider.shutdown_with_timeout(timeout);
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.shutdown(EXPORT_TIMEOUT);
    }
}

struct Spans {
    tracer: SdkTracer,
    capture_content: bool,
    runs: HashMap<String, RunSpans>,
}

#[derive(Default)]
struct RunSpans {
    /// The `invoke_agent` span, as the parent of the others.
    root: Option<Context>,
    prompt: Option<String>,
    /// Open `chat` spans by step.
    chats: HashMap<u32, Span>,
    /// Open `execute_tool` spans by call id.
    tools: HashMap<String, Span>,
    /// Permission decisions logged before their call's span started.
    decisions: HashMap<String, Vec<KeyValue>>,
}

/// A serde enum's wire name (`completed`, `missing_evidence`).
fn wire_name<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn system_time(event: &Event) -> SystemTime {
    event.ts.into()
}

/// A message list in the GenAI conventions' JSON form.
fn messages(role: &str, content: &str) -> String {
    serde_json::json!([{"role": role, "parts": [{"type": "text", "content": content}]}]).to_string()
}

impl Spans {
    fn on_entry(&mut self, run_id: &str, entry: &LogEntry) {
        let capture = self.capture_content;
        match entry {
            LogEntry::Item {
                item: TranscriptItem::UserInput { text },
            } => {
                let run = self.runs.entry(run_id.to_string()).or_default();
                // The prompt may be logged before or after the run starts.
                match (&run.root, capture) {
                    (Some(root), true) if run.prompt.is_none() => root.span().set_attribute(
                        KeyValue::new("gen_ai.input.messages", messages("user", text)),
                    ),
                    _ => {}
                }
                if run.prompt.is_none() {
                    run.prompt = Some(text.clone());
                }
            }
            LogEntry::Event { event } => self.on_event(run_id, event),
            LogEntry::Trace { trace } => self.on_trace(run_id, trace, capture),
            _ => {}
        }
    }

    fn on_event(&mut self, run_id: &str, event: &Event) {
        let capture = self.capture_content;
        let at = system_time(event);
        match &event.body {
            EventBody::RunStarted {
                trace_id,
                session_id,
                provider,
                model,
                contract,
                ..
            } => {
                let mut attributes = vec![
                    KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                    KeyValue::new("gen_ai.agent.name", "attest"),
                    KeyValue::new("gen_ai.provider.name", provider.clone()),
                    KeyValue::new("gen_ai.request.model", model.clone()),
                    KeyValue::new("gen_ai.conversation.id", session_id.clone()),
                    KeyValue::new("attest.run_id", run_id.to_string()),
                    KeyValue::new("attest.trace_id", trace_id.clone()),
                    KeyValue::new("attest.contract.kind", wire_name(&contract.kind)),
                ];
                let run = self.runs.entry(run_id.to_string()).or_default();
                if capture {
                    if let Some(prompt) = &run.prompt {
                        attributes.push(KeyValue::new(
                            "gen_ai.input.messages",
                            messages("user", prompt),
                        ));
                    }
                }
                let span = self
                    .tracer
                    .span_builder("invoke_agent attest")
                    .with_kind(SpanKind::Internal)
                    .with_start_time(at)
                    .with_attributes(attributes)
                    .start(&self.tracer);
                run.root = Some(Context::new().with_span(span));
            }
            EventBody::ToolStarted {
                call_id,
                tool_name,
                effect,
                arguments,
                ..
            } => {
                let Some(parent) = self.runs.get(run_id).and_then(|r| r.root.clone()) else {
                    return;
                };
                let mut attributes = vec![
                    KeyValue::new("gen_ai.operation.name", "execute_tool"),
                    KeyValue::new("gen_ai.tool.name", tool_name.clone()),
                    KeyValue::new("gen_ai.tool.call.id", call_id.clone()),
                ];
                if let Some(effect) = effect {
                    attributes.push(KeyValue::new("attest.effect", wire_name(effect)));
                }
                if capture {
                    attributes.push(KeyValue::new(
                        "gen_ai.tool.call.arguments",
                        arguments.to_string(),
                    ));
                }
                let run = self.runs.entry(run_id.to_string()).or_default();
                attributes.extend(run.decisions.remove(call_id).unwrap_or_default());
                let span = self
                    .tracer
                    .span_builder(format!("execute_tool {tool_name}"))
                    .with_kind(SpanKind::Internal)
                    .with_start_time(at)
                    .with_attributes(attributes)
                    .start_with_context(&self.tracer, &parent);
                run.tools.insert(call_id.clone(), span);
            }
            EventBody::ToolResult {
                call_id,
                tool_name,
                status,
                output_preview,
                receipt,
                ..
            } => {
                let Some(run) = self.runs.get_mut(run_id) else {
                    return;
                };
                let mut span = match run.tools.remove(call_id) {
                    Some(span) => span,
                    // Refused before it ran: a span of its own, still.
                    None => {
                        let Some(parent) = run.root.clone() else {
                            return;
                        };
                        let mut attributes = vec![
                            KeyValue::new("gen_ai.operation.name", "execute_tool"),
                            KeyValue::new("gen_ai.tool.name", tool_name.clone()),
                            KeyValue::new("gen_ai.tool.call.id", call_id.clone()),
                            KeyValue::new("attest.effect", wire_name(&receipt.effect)),
                        ];
                        attributes.extend(run.decisions.remove(call_id).unwrap_or_default());
                        self.tracer
                            .span_builder(format!("execute_tool {tool_name}"))
                            .with_kind(SpanKind::Internal)
                            .with_start_time(SystemTime::from(receipt.started_at))
                            .with_attributes(attributes)
                            .start_with_context(&self.tracer, &parent)
                    }
                };
                let status_name = wire_name(status);
                span.set_attribute(KeyValue::new("attest.receipt.status", status_name.clone()));
                span.set_attribute(KeyValue::new(
                    "attest.evidence.kind",
                    evidence_kinds(&receipt.evidence),
                ));
                if capture {
                    span.set_attribute(KeyValue::new(
                        "gen_ai.tool.call.result",
                        output_preview.clone(),
                    ));
                }
                if status_name != "ok" {
                    span.set_attribute(KeyValue::new("error.type", status_name.clone()));
                    span.set_status(Status::error(status_name));
                }
                span.end_with_timestamp(at);
            }
            EventBody::Done {
                state,
                reason,
                answer,
                receipts,
                steps,
                usage,
                grounding,
                ..
            } => {
                let Some(mut run) = self.runs.remove(run_id) else {
                    return;
                };
                let open = run.chats.drain().map(|(_, s)| s);
                for mut span in open.chain(run.tools.drain().map(|(_, s)| s)) {
                    span.set_status(Status::error("the run ended first"));
                    span.end_with_timestamp(at);
                }
                let Some(root) = run.root.take() else { return };
                let span = root.span();
                let ok = receipts
                    .iter()
                    .filter(|r| wire_name(&r.status) == "ok")
                    .count() as i64;
                let attributes = [
                    KeyValue::new("attest.terminal.state", wire_name(state)),
                    KeyValue::new("attest.terminal.reason", wire_name(reason)),
                    KeyValue::new("attest.steps", i64::from(*steps)),
                    KeyValue::new("gen_ai.usage.input_tokens", usage.input_tokens as i64),
                    KeyValue::new("gen_ai.usage.output_tokens", usage.output_tokens as i64),
                    KeyValue::new("attest.receipts", receipts.len() as i64),
                    KeyValue::new("attest.receipts.ok", ok),
                    KeyValue::new("attest.receipts.failed", receipts.len() as i64 - ok),
                ];
                for kv in attributes {
                    span.set_attribute(kv);
                }
                // How the answer's values map to the evidence (SPEC A9).
                if let Some(g) = grounding {
                    span.set_attribute(KeyValue::new(
                        "attest.grounding.values",
                        g.values.len() as i64,
                    ));
                    span.set_attribute(KeyValue::new(
                        "attest.grounding.ungrounded",
                        g.ungrounded.len() as i64,
                    ));
                    span.set_attribute(KeyValue::new(
                        "attest.grounding.evidence_used",
                        g.evidence_used,
                    ));
                }
                if capture {
                    if let Some(answer) = answer {
                        span.set_attribute(KeyValue::new(
                            "gen_ai.output.messages",
                            messages("assistant", answer),
                        ));
                    }
                }
                if wire_name(state) != "completed" {
                    span.set_status(Status::error(wire_name(reason)));
                }
                span.end_with_timestamp(at);
            }
            _ => {}
        }
    }

    fn on_trace(&mut self, run_id: &str, trace: &TraceRecord, capture: bool) {
        let now = SystemTime::now();
        let Some(run) = self.runs.get_mut(run_id) else {
            return;
        };
        match trace {
            TraceRecord::Request {
                step,
                attempt,
                provider,
                model,
                max_tokens,
                ..
            } => {
                let Some(parent) = run.root.clone() else {
                    return;
                };
                let span = self
                    .tracer
                    .span_builder(format!("chat {model}"))
                    .with_kind(SpanKind::Client)
                    .with_start_time(now)
                    .with_attributes([
                        KeyValue::new("gen_ai.operation.name", "chat"),
                        KeyValue::new("gen_ai.provider.name", provider.clone()),
                        KeyValue::new("gen_ai.request.model", model.clone()),
                        KeyValue::new("gen_ai.request.max_tokens", i64::from(*max_tokens)),
                        KeyValue::new("attest.step", i64::from(*step)),
                        KeyValue::new("attest.attempt", i64::from(*attempt)),
                    ])
                    .start_with_context(&self.tracer, &parent);
                run.chats.insert(*step, span);
            }
            TraceRecord::Response {
                step,
                raw_finish_reason,
                text,
                input_tokens,
                output_tokens,
                ..
            } => {
                let Some(mut span) = run.chats.remove(step) else {
                    return;
                };
                let reasons: Vec<StringValue> = raw_finish_reason
                    .iter()
                    .map(|r| StringValue::from(r.clone()))
                    .collect();
                span.set_attribute(KeyValue::new(
                    "gen_ai.response.finish_reasons",
                    Value::Array(reasons.into()),
                ));
                span.set_attribute(KeyValue::new(
                    "gen_ai.usage.input_tokens",
                    *input_tokens as i64,
                ));
                span.set_attribute(KeyValue::new(
                    "gen_ai.usage.output_tokens",
                    *output_tokens as i64,
                ));
                if capture && !text.is_empty() {
                    span.set_attribute(KeyValue::new(
                        "gen_ai.output.messages",
                        messages("assistant", text),
                    ));
                }
                span.end_with_timestamp(now);
            }
            TraceRecord::ProviderError { step, error, .. } => {
                if let Some(mut span) = run.chats.remove(step) {
                    span.set_attribute(KeyValue::new("error.type", "provider_error"));
                    span.set_status(Status::error(error.clone()));
                    span.end_with_timestamp(now);
                }
            }
            TraceRecord::PermissionDecision {
                call_id,
                permission,
                approved,
                decided_by,
                ..
            } => {
                let attributes = vec![
                    KeyValue::new("attest.permission", wire_name(permission)),
                    KeyValue::new("attest.permission.approved", *approved),
                    KeyValue::new("attest.permission.decided_by", decided_by.clone()),
                ];
                match run.tools.get_mut(call_id) {
                    Some(span) => {
                        for kv in attributes {
                            span.set_attribute(kv);
                        }
                    }
                    None => {
                        run.decisions
                            .entry(call_id.clone())
                            .or_default()
                            .extend(attributes);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Which evidence a receipt carries, as field names (`path,sha256`).
fn evidence_kinds(evidence: &attest_protocol::Evidence) -> String {
    let value = serde_json::to_value(evidence).unwrap_or_default();
    value
        .as_object()
        .map(|o| o.keys().cloned().collect::<Vec<_>>().join(","))
        .unwrap_or_default()
}
