//! OpenAI Responses API wire format (`POST {base_url}/responses`).
//!
//! The request's `input` is rebuilt from the canonical transcript on every
//! step, with `store: false`: the server keeps nothing, so nothing is
//! referenced by id. Calls and their outputs are paired by `call_id` alone;
//! output item ids (`fc_…`, `msg_…`) are never sent back. Reasoning text is
//! never sent back; encrypted reasoning is, only when asked for
//! ([`ResponsesOptions::encrypted_reasoning`]) and only as kept in the
//! transcript.

use crate::wire::{self, str_field, u64_field};
use crate::{FinishKind, ModelRequest, ModelResponse, ParsedCall, ProviderError};
use attest_protocol::{CallSource, TranscriptItem, Usage};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What `include` asks for to get reasoning back in a form that can be replayed.
const INCLUDE_ENCRYPTED_REASONING: &str = "reasoning.encrypted_content";

/// Failure codes of `response.failed` / `error` that are worth retrying.
const RETRYABLE_CODES: [&str; 3] = [
    "server_error",
    "rate_limit_exceeded",
    "vector_store_timeout",
];

/// How requests are built beyond the [`ModelRequest`] itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponsesOptions {
    /// Ask for `reasoning.encrypted_content` and pass the encrypted
    /// reasoning kept in the transcript back in `input`. Set when the
    /// reasoning policy keeps reasoning; otherwise reasoning never goes back.
    pub encrypted_reasoning: bool,
}

/// Build the request body. `req.history` must already be normalized. The
/// body is a pure function of its inputs; `instructions` and `tools` do not
/// depend on the history (SPEC D5). `req.stop` is not sent: the Responses
/// API has no stop sequences.
pub fn build_body(req: &ModelRequest, model: &str, opts: ResponsesOptions) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    if !req.system.is_empty() {
        body.insert("instructions".into(), json!(req.system));
    }
    body.insert(
        "input".into(),
        Value::Array(input_items(&req.history, opts)),
    );
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function", "name": t.name, "description": t.description,
                    "parameters": t.parameters, "strict": false,
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("max_output_tokens".into(), json!(req.max_tokens));
    if let Some(t) = req.temperature.and_then(wire::temperature) {
        body.insert("temperature".into(), t);
    }
    body.insert("store".into(), json!(false));
    if req.stream {
        body.insert("stream".into(), json!(true));
    }
    if opts.encrypted_reasoning {
        body.insert("include".into(), json!([INCLUDE_ENCRYPTED_REASONING]));
    }
    if let Some(key) = &req.cache_key {
        body.insert("prompt_cache_key".into(), json!(key));
    }
    Value::Object(body)
}

fn input_items(items: &[Arc<TranscriptItem>], opts: ResponsesOptions) -> Vec<Value> {
    let mut input = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match &**item {
            TranscriptItem::UserInput { text } | TranscriptItem::HarnessMessage { text, .. } => {
                input.push(json!({
                    "type": "message", "role": "user",
                    "content": [{"type": "input_text", "text": text}],
                }));
            }
            TranscriptItem::AssistantOutput {
                text,
                encrypted_reasoning,
                ..
            } => {
                // A reasoning item must be followed by the output it led to.
                let followed = !text.is_empty()
                    || matches!(
                        items.get(i + 1).map(|next| &**next),
                        Some(TranscriptItem::ToolCall { .. })
                    );
                if opts.encrypted_reasoning && followed {
                    for blob in encrypted_reasoning {
                        input.push(json!({
                            "type": "reasoning", "summary": [], "encrypted_content": blob,
                        }));
                    }
                }
                if !text.is_empty() {
                    input.push(json!({
                        "type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": text}],
                    }));
                }
            }
            TranscriptItem::ToolCall {
                call_id,
                name,
                arguments,
            } => input.push(json!({
                "type": "function_call", "call_id": call_id, "name": name, "arguments": arguments,
            })),
            TranscriptItem::ToolResult {
                call_id, output, ..
            } => input.push(json!({
                "type": "function_call_output", "call_id": call_id, "output": output,
            })),
            TranscriptItem::Terminal { .. } | TranscriptItem::Compaction { .. } => {}
        }
    }
    input
}

/// Parse a non-streaming response body.
pub fn parse_response(body: &str) -> Result<ModelResponse, ProviderError> {
    let v: Value = attest_protocol::json::parse_value(body)
        .map_err(|e| ProviderError::Decode(format!("invalid JSON: {e}")))?;
    let error = v.get("error").filter(|e| !e.is_null());
    let output = v.get("output").and_then(Value::as_array);
    // An error body, or a response the service marked failed.
    if let Some(err) =
        error.filter(|_| output.is_none() || str_field(&v, "status") == Some("failed"))
    {
        return Err(failure(err));
    }
    let output =
        output.ok_or_else(|| ProviderError::Decode("response has no output array".into()))?;
    finish_response(&v, parse_items(output), body.to_string())
}

/// Text, calls and reasoning of a response's output items.
#[derive(Debug, Default)]
struct Parts {
    text: String,
    reasoning: Option<String>,
    encrypted_reasoning: Vec<String>,
    calls: Vec<ParsedCall>,
    failures: Vec<String>,
    /// A `function_call` item was present, parsable or not.
    saw_call: bool,
}

impl Parts {
    fn push_reasoning(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let r = self.reasoning.get_or_insert_with(String::new);
        if !r.is_empty() {
            r.push('\n');
        }
        r.push_str(text);
    }
}

fn parse_items(items: &[Value]) -> Parts {
    let mut out = Parts::default();
    for (index, item) in items.iter().enumerate() {
        match str_field(item, "type") {
            Some("message") => {
                for part in item
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let text = match str_field(part, "type") {
                        Some("output_text") => str_field(part, "text"),
                        // What the model said; the judge decides what it is worth.
                        Some("refusal") => str_field(part, "refusal"),
                        _ => None,
                    };
                    out.text.push_str(text.unwrap_or(""));
                }
            }
            Some("function_call") => {
                out.saw_call = true;
                let arguments = match item.get("arguments") {
                    Some(Value::String(s)) => s.clone(),
                    Some(v @ Value::Object(_)) => v.to_string(),
                    _ => "{}".to_string(),
                };
                let name = str_field(item, "name").filter(|n| !n.is_empty());
                if str_field(item, "status") == Some("incomplete") {
                    out.failures.push(format!(
                        "function call `{}` at output {index} was cut off before it completed (arguments: {})",
                        name.unwrap_or("?"),
                        wire::preview(&arguments)
                    ));
                    continue;
                }
                let Some(name) = name else {
                    out.failures.push(format!(
                        "function call at output {index} has no name (arguments: {})",
                        wire::preview(&arguments)
                    ));
                    continue;
                };
                // Paired by `call_id` only: the item `id` is never a call id.
                let id = str_field(item, "call_id")
                    .filter(|s| !s.is_empty())
                    .map_or_else(|| format!("call_{index}"), str::to_string);
                out.calls.push(ParsedCall {
                    id,
                    name: name.to_string(),
                    arguments,
                });
            }
            Some("reasoning") => {
                for key in ["summary", "content"] {
                    for part in item
                        .get(key)
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        out.push_reasoning(str_field(part, "text").unwrap_or(""));
                    }
                }
                if let Some(blob) = str_field(item, "encrypted_content").filter(|b| !b.is_empty()) {
                    out.encrypted_reasoning.push(blob.to_string());
                }
            }
            // Built-in tool items (web search, …) are never requested.
            _ => {}
        }
    }
    out
}

/// The response from its final object (status, usage) and its parts.
fn finish_response(
    response: &Value,
    parts: Parts,
    raw: String,
) -> Result<ModelResponse, ProviderError> {
    let status = str_field(response, "status");
    let (finish, raw_finish_reason) = match status {
        Some("failed") => {
            return Err(failure(response.get("error").unwrap_or(&Value::Null)));
        }
        Some("cancelled") => {
            return Err(ProviderError::Failed {
                message: "the response was cancelled".into(),
                retryable: false,
            })
        }
        Some("incomplete") => {
            let reason = response
                .get("incomplete_details")
                .and_then(|d| str_field(d, "reason"));
            let finish = match reason {
                Some("max_output_tokens") => FinishKind::Length,
                Some("content_filter") => FinishKind::ContentFilter,
                _ => FinishKind::Other,
            };
            (finish, Some(reason.unwrap_or("incomplete").to_string()))
        }
        Some("completed") | None => {
            let finish = if parts.saw_call {
                FinishKind::ToolUse
            } else {
                FinishKind::Stop
            };
            (finish, status.map(str::to_string))
        }
        Some(other) => {
            return Err(ProviderError::Decode(format!(
                "response is not finished (status `{}`)",
                wire::preview(other)
            )))
        }
    };
    Ok(ModelResponse {
        text: parts.text,
        reasoning: parts.reasoning,
        encrypted_reasoning: parts.encrypted_reasoning,
        tool_calls: parts.calls,
        finish,
        raw_finish_reason,
        usage: usage_of(response.get("usage")),
        raw,
        parse_failures: parts.failures,
        protocol_violation: None,
        call_source: CallSource::Native,
    })
}

/// A failure the service reported; retryable for server and rate errors.
fn failure(err: &Value) -> ProviderError {
    let code = str_field(err, "code").or_else(|| str_field(err, "type"));
    ProviderError::Failed {
        message: wire::error_message(err),
        retryable: code.is_some_and(|c| RETRYABLE_CODES.contains(&c)),
    }
}

fn usage_of(usage: Option<&Value>) -> Usage {
    let u = usage.unwrap_or(&Value::Null);
    Usage {
        input_tokens: u64_field(u, "input_tokens"),
        output_tokens: u64_field(u, "output_tokens"),
        cached_input_tokens: u
            .get("input_tokens_details")
            .map_or(0, |d| u64_field(d, "cached_tokens")),
        cache_creation_input_tokens: 0,
    }
}

/// One output item as it streams in.
#[derive(Debug, Default)]
struct Slot {
    /// The item as `response.output_item.added` announced it.
    added: Option<Value>,
    /// The item as `response.output_item.done` delivered it: the only
    /// form a call is ever taken from.
    done: Option<Value>,
    text: String,
    arguments: String,
    reasoning: String,
}

impl Slot {
    /// The item: as delivered, else what arrived of it, marked incomplete
    /// (so a call that never finished is a parse failure, never a call).
    fn item(&self) -> Option<Value> {
        if let Some(done) = &self.done {
            return Some(done.clone());
        }
        let added = self.added.as_ref().unwrap_or(&Value::Null);
        let kind = str_field(added, "type").or(if !self.arguments.is_empty() {
            Some("function_call")
        } else if !self.text.is_empty() {
            Some("message")
        } else if !self.reasoning.is_empty() {
            Some("reasoning")
        } else {
            None
        })?;
        Some(match kind {
            "function_call" => json!({
                "type": "function_call", "status": "incomplete",
                "name": str_field(added, "name"), "call_id": str_field(added, "call_id"),
                "arguments": self.arguments,
            }),
            "message" => json!({
                "type": "message", "status": "incomplete",
                "content": [{"type": "output_text", "text": self.text}],
            }),
            // No encrypted content: a half-received reasoning item cannot be replayed.
            "reasoning" => json!({
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": self.reasoning}],
            }),
            _ => return None,
        })
    }
}

/// Accumulates a streamed response from its SSE `data:` payloads (each
/// carries its event name in `type`). The stream's terminator is
/// `response.completed` or `response.incomplete`; `response.failed` and
/// `error` fail the call.
#[derive(Debug, Default)]
pub struct StreamAccumulator {
    slots: BTreeMap<u64, Slot>,
    /// The final response object, once the terminator has arrived.
    terminal: Option<Value>,
    raw: Vec<String>,
}

impl StreamAccumulator {
    pub fn new() -> Self {
        Self::default()
    }

    /// True once `response.completed` / `response.incomplete` has been
    /// seen; later payloads are ignored.
    pub fn is_done(&self) -> bool {
        self.terminal.is_some()
    }

    /// The answer text received so far (for live display only).
    pub fn text_so_far(&self) -> String {
        self.slots.values().map(|s| s.text.as_str()).collect()
    }

    /// Consume one event's `data:` payload.
    pub fn push(&mut self, data: &str) -> Result<(), ProviderError> {
        if self.is_done() {
            return Ok(());
        }
        self.raw.push(data.to_string());
        let v: Value = attest_protocol::json::parse_value(data)
            .map_err(|e| ProviderError::Decode(format!("invalid JSON in stream event: {e}")))?;
        let index = v.get("output_index").and_then(Value::as_u64).unwrap_or(0);
        let delta = || str_field(&v, "delta").unwrap_or("");
        match str_field(&v, "type") {
            Some("response.output_item.added") => {
                self.slots.entry(index).or_default().added = v.get("item").cloned();
            }
            Some("response.output_item.done") => {
                self.slots.entry(index).or_default().done = v.get("item").cloned();
            }
            Some("response.output_text.delta" | "response.refusal.delta") => {
                self.slots.entry(index).or_default().text.push_str(delta());
            }
            Some("response.function_call_arguments.delta") => {
                self.slots
                    .entry(index)
                    .or_default()
                    .arguments
                    .push_str(delta());
            }
            Some("response.function_call_arguments.done") => {
                if let Some(all) = str_field(&v, "arguments") {
                    self.slots.entry(index).or_default().arguments = all.to_string();
                }
            }
            Some("response.reasoning_summary_text.delta" | "response.reasoning_text.delta") => {
                self.slots
                    .entry(index)
                    .or_default()
                    .reasoning
                    .push_str(delta());
            }
            Some(kind @ ("response.completed" | "response.incomplete")) => {
                let mut response = v.get("response").cloned().unwrap_or_else(|| json!({}));
                if let Some(obj) = response.as_object_mut() {
                    let status = kind.trim_start_matches("response.");
                    obj.entry("status").or_insert_with(|| json!(status));
                }
                self.terminal = Some(response);
            }
            Some("response.failed") => {
                let response = v.get("response").unwrap_or(&Value::Null);
                return Err(failure(response.get("error").unwrap_or(response)));
            }
            Some("error") => return Err(failure(v.get("error").unwrap_or(&v))),
            _ => {} // created, in_progress, content parts, events added later
        }
        Ok(())
    }

    /// The assembled response; an error unless the terminator was seen,
    /// so a half-received call is never returned.
    pub fn finish(self) -> Result<ModelResponse, ProviderError> {
        let Some(terminal) = self.terminal else {
            return Err(ProviderError::IncompleteStream(format!(
                "no response.completed after {} events",
                self.raw.len()
            )));
        };
        // Items as streamed; a server that streams none may still list them at the end.
        let items: Vec<Value> = if self.slots.is_empty() {
            terminal
                .get("output")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        } else {
            self.slots.values().filter_map(Slot::item).collect()
        };
        finish_response(&terminal, parse_items(&items), self.raw.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_codes_decide_retries() {
        let e = failure(&json!({"code": "server_error", "message": "boom"}));
        assert!(e.is_retryable(), "{e}");
        let e = failure(&json!({"code": "rate_limit_exceeded", "message": "slow down"}));
        assert!(e.is_retryable());
        let e = failure(&json!({"code": "invalid_prompt", "message": "no"}));
        assert!(!e.is_retryable());
        assert!(e.to_string().contains("invalid_prompt: no"), "{e}");
        assert!(!failure(&Value::Null).is_retryable());
    }

    #[test]
    fn reasoning_text_joins_summary_and_content_parts() {
        let parts = parse_items(&[json!({
            "type": "reasoning", "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "first"}, {"type": "summary_text", "text": "second"}],
            "content": [{"type": "reasoning_text", "text": "raw"}],
            "encrypted_content": "gAAA"
        })]);
        assert_eq!(parts.reasoning.as_deref(), Some("first\nsecond\nraw"));
        assert_eq!(parts.encrypted_reasoning, vec!["gAAA".to_string()]);
        assert!(!parts.saw_call);
    }

    #[test]
    fn a_call_is_never_identified_by_its_item_id() {
        let parts = parse_items(&[json!({
            "type": "function_call", "id": "fc_1", "name": "read_file", "arguments": "{}"
        })]);
        assert_eq!(parts.calls[0].id, "call_0");
    }
}
