//! OpenAI Chat Completions wire format (also spoken by DeepSeek, Qwen, vLLM,
//! Ollama and most "OpenAI-compatible" servers).

use crate::fragments::{message_ends, messages_start, Fragments, KeptBody, KeptJson, Piece};
use crate::wire::{self, str_field, u64_field};
use crate::{FinishKind, ModelRequest, ModelResponse, ParsedCall, ProviderError};
use attest_protocol::{CallSource, HarnessMessageKind, TranscriptItem, Usage};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

/// Build the request body. `req.history` must already be normalized. The
/// body is a pure function of its inputs, and the system message and tools
/// do not depend on the history (SPEC D5: stable prefix for caching).
pub fn build_body(req: &ModelRequest, model: &str) -> Value {
    serde_json::to_value(body(req, model, None, None)).unwrap_or(Value::Null)
}

/// The request body as sent: the same JSON as [`build_body`], written in
/// one pass from borrowed data (no `Value` tree of the whole history built
/// and dropped on every request).
pub fn body_json(req: &ModelRequest, model: &str) -> String {
    serde_json::to_string(&body(req, model, None, None)).unwrap_or_default()
}

/// [`body_json`] with each message's JSON kept in `kept` and copied from
/// there by later requests that carry the same items (the per-step path:
/// see [`Fragments`]). The run's leading messages are kept whole: a request
/// that begins with their items builds only the messages after them.
pub fn body_json_kept(req: &ModelRequest, model: &str, kept: &mut Fragments) -> String {
    body_kept(req, model, kept).to_json()
}

/// [`body_json_kept`] in pieces, the kept messages shared (what is sent).
pub fn body_kept(req: &ModelRequest, model: &str, kept: &mut Fragments) -> KeptBody {
    let mut prefix = kept.take_prefix(&req.history);
    let start = prefix.covers();
    let messages = messages_from(&req.history, start);
    kept.prune(messages.len());
    let cut = next_cut(req, &messages, start);
    let json: Vec<_> = messages
        .iter()
        .map(|(range, message)| kept.piece(&req.history[range.clone()], message))
        .collect();
    let tools = kept.tools(&req.tools, 0, || tool_defs(req));
    let written =
        serde_json::to_string(&body(req, model, Some((messages, &json)), tools.as_deref()))
            .unwrap_or_default();
    // The system message comes first, then the kept ones.
    let spliced = messages_start(&written)
        .and_then(|at| Some(at + message_ends(&written[at..], 1)? + 1))
        .filter(|&at| prefix.fits_at(&written, at));
    // Never reached (a kept prefix is followed by its boundary item's
    // message); a body without its prefix is never sent.
    let Some(at) = spliced else {
        return body_json(req, model).into();
    };
    let runs = prefix.runs();
    if let Some((cut, count)) = cut {
        kept.extend_prefix(&mut prefix, &req.history, cut, &written, at, count);
    }
    kept.put_prefix(&req.history, prefix);
    KeptBody::spliced(written, at, runs)
}

/// Where the kept prefix can grow to after this request: the item that
/// begins the last message up to the first one holding the state snapshot
/// or an item only this request has (a synthetic result), that item being
/// neither; and how many of `messages` come before it.
fn next_cut(req: &ModelRequest, messages: &Messages<'_>, start: usize) -> Option<(usize, usize)> {
    let only_here = |item: &Arc<TranscriptItem>| {
        Arc::strong_count(item) == 1
            || matches!(
                &**item,
                TranscriptItem::HarnessMessage {
                    kind: HarnessMessageKind::StateSnapshot,
                    ..
                }
            )
    };
    let mut cut = None;
    for (m, (range, _)) in messages.iter().enumerate() {
        // The item that begins the next message is kept too.
        if only_here(&req.history[range.start]) {
            break;
        }
        if m > 0 {
            cut = Some((range.start, m));
        }
        if req.history[range.clone()].iter().any(only_here) {
            break;
        }
    }
    cut.filter(|&(at, _)| at > start)
}

// Fields are declared in the order `serde_json::Map` sorts keys, so the
// bytes equal those of the `Value` form (tests compare them).
#[derive(Serialize)]
struct Body<'a> {
    max_tokens: u32,
    messages: Vec<Piece<'a, Message<'a>>>,
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_cache_key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Piece<'a, Vec<ToolDef<'a>>>>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct ToolDef<'a> {
    function: FunctionDef<'a>,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct FunctionDef<'a> {
    description: &'a str,
    name: &'a str,
    parameters: &'a Value,
}

#[derive(Serialize)]
struct Message<'a> {
    /// `None` is written as `null` (next to tool calls), never left out.
    content: Option<&'a str>,
    role: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<CallDef<'a>>,
}

#[derive(Serialize)]
struct CallDef<'a> {
    function: CallFunction<'a>,
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct CallFunction<'a> {
    arguments: &'a str,
    name: &'a str,
}

fn message<'a>(role: &'static str, content: &'a str) -> Message<'a> {
    Message {
        content: Some(content),
        role,
        tool_call_id: None,
        tool_calls: Vec::new(),
    }
}

/// The history's messages, each with the items it is made from.
type Messages<'a> = Vec<(Range<usize>, Message<'a>)>;

fn messages(items: &[Arc<TranscriptItem>]) -> Messages<'_> {
    messages_from(items, 0)
}

/// The messages of `items[start..]`; `start` begins a message.
fn messages_from(items: &[Arc<TranscriptItem>], start: usize) -> Messages<'_> {
    let mut messages = Vec::new();
    let mut i = start;
    while i < items.len() {
        let start = i;
        let message = match &*items[i] {
            TranscriptItem::UserInput { text } | TranscriptItem::HarnessMessage { text, .. } => {
                i += 1;
                message("user", text)
            }
            TranscriptItem::AssistantOutput { text, .. } => {
                let (calls, next) = tool_calls_from(items, i + 1);
                i = next;
                assistant_message(Some(text), calls)
            }
            TranscriptItem::ToolCall { .. } => {
                let (calls, next) = tool_calls_from(items, i);
                i = next;
                assistant_message(None, calls)
            }
            TranscriptItem::ToolResult {
                call_id, output, ..
            } => {
                i += 1;
                Message {
                    tool_call_id: Some(call_id),
                    ..message("tool", output)
                }
            }
            TranscriptItem::Terminal { .. } | TranscriptItem::Compaction { .. } => {
                i += 1;
                continue;
            }
        };
        messages.push((start..i, message));
    }
    messages
}

/// The body; with `kept`, the history's messages (as [`messages`] made
/// them) and the kept JSON of each, copied where there is one; with
/// `kept_tools`, the tool list's kept JSON.
fn body<'a>(
    req: &'a ModelRequest,
    model: &'a str,
    kept: Option<(Messages<'a>, &'a [KeptJson])>,
    kept_tools: Option<&'a RawValue>,
) -> Body<'a> {
    let mut pieces = vec![Piece::Fresh(message("system", &req.system))];
    match kept {
        Some((messages, json)) => pieces.extend(messages.into_iter().zip(json).map(
            |((_, message), json)| match json {
                Some(json) => Piece::Kept(json),
                None => Piece::Fresh(message),
            },
        )),
        None => pieces.extend(
            messages(&req.history)
                .into_iter()
                .map(|(_, message)| Piece::Fresh(message)),
        ),
    }
    Body {
        max_tokens: req.max_tokens,
        messages: pieces,
        model,
        // Routes the run's requests to the server holding their cached prefix.
        prompt_cache_key: req.cache_key.as_deref(),
        seed: req.seed,
        stop: &req.stop,
        stream: req.stream.then_some(true),
        stream_options: req.stream.then_some(StreamOptions {
            include_usage: true,
        }),
        temperature: req.temperature.and_then(wire::temperature),
        tools: (!req.tools.is_empty()).then(|| match kept_tools {
            Some(json) => Piece::Kept(json),
            None => Piece::Fresh(tool_defs(req)),
        }),
    }
}

/// The tool list in wire form.
fn tool_defs(req: &ModelRequest) -> Vec<ToolDef<'_>> {
    req.tools
        .iter()
        .map(|t| ToolDef {
            function: FunctionDef {
                description: &t.description,
                name: &t.name,
                parameters: &t.parameters,
            },
            kind: "function",
        })
        .collect()
}

/// Collect the run of `ToolCall`s starting at `start`; returns them in wire
/// form and the index after the run.
fn tool_calls_from(items: &[Arc<TranscriptItem>], start: usize) -> (Vec<CallDef<'_>>, usize) {
    let mut calls = Vec::new();
    let mut i = start;
    while let Some(TranscriptItem::ToolCall {
        call_id,
        name,
        arguments,
    }) = items.get(i).map(|item| &**item)
    {
        calls.push(CallDef {
            function: CallFunction { arguments, name },
            id: call_id,
            kind: "function",
        });
        i += 1;
    }
    (calls, i)
}

fn assistant_message<'a>(text: Option<&'a String>, calls: Vec<CallDef<'a>>) -> Message<'a> {
    let content = if calls.is_empty() {
        Some(text.map_or("", String::as_str))
    } else {
        // Null rather than "" next to tool calls: some servers reject empty content.
        text.filter(|t| !t.is_empty()).map(String::as_str)
    };
    Message {
        content,
        role: "assistant",
        tool_call_id: None,
        tool_calls: calls,
    }
}

/// Map a raw `finish_reason` to its meaning.
pub fn finish_kind(reason: Option<&str>) -> FinishKind {
    match reason {
        Some("stop") => FinishKind::Stop,
        Some("tool_calls") | Some("function_call") => FinishKind::ToolUse,
        Some("length") => FinishKind::Length,
        Some("content_filter") => FinishKind::ContentFilter,
        _ => FinishKind::Other,
    }
}

/// Parse a non-streaming response body.
pub fn parse_response(body: &str) -> Result<ModelResponse, ProviderError> {
    let v: Value = attest_protocol::json::parse_value(body)
        .map_err(|e| ProviderError::Decode(format!("invalid JSON: {e}")))?;
    if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
        return Err(ProviderError::Decode(wire::error_message(err)));
    }
    let choice = v
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| ProviderError::Decode("response has no choices".into()))?;
    let message = choice.get("message").unwrap_or(&Value::Null);
    let mut parts = CallParts::default();
    for (index, call) in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        parts.merge(index as u64, call);
    }
    let (tool_calls, parse_failures) = parts.finish();
    let raw_finish_reason = str_field(choice, "finish_reason").map(str::to_string);
    Ok(ModelResponse {
        text: content_text(message.get("content")),
        reasoning: reasoning_of(message),
        encrypted_reasoning: Vec::new(),
        tool_calls,
        finish: finish_kind(raw_finish_reason.as_deref()),
        raw_finish_reason,
        usage: usage_of(v.get("usage")),
        raw: body.to_string(),
        parse_failures,
        protocol_violation: None,
        call_source: CallSource::Native,
    })
}

/// `content` is usually a string, sometimes an array of `{type:"text", text}` parts.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts.iter().filter_map(|p| str_field(p, "text")).collect(),
        _ => String::new(),
    }
}

/// DeepSeek and Qwen send `reasoning_content`; OpenRouter and some others `reasoning`.
fn reasoning_of(message: &Value) -> Option<String> {
    str_field(message, "reasoning_content")
        .or_else(|| str_field(message, "reasoning"))
        .map(str::to_string)
}

fn usage_of(usage: Option<&Value>) -> Usage {
    let usage = usage.unwrap_or(&Value::Null);
    Usage {
        input_tokens: u64_field(usage, "prompt_tokens"),
        output_tokens: u64_field(usage, "completion_tokens"),
        cached_input_tokens: usage
            .get("prompt_tokens_details")
            .map_or(0, |d| u64_field(d, "cached_tokens")),
        cache_creation_input_tokens: 0,
    }
}

/// Tool calls assembled by index, from one message or from stream fragments.
#[derive(Debug, Default)]
struct CallParts {
    calls: BTreeMap<u64, PartCall>,
}

#[derive(Debug, Default)]
struct PartCall {
    id: Option<String>,
    name: Option<String>,
    arguments: String,
    saw_arguments: bool,
}

impl CallParts {
    /// Id and name come from the first fragment that has them (some servers
    /// repeat the name in every fragment); arguments are concatenated.
    fn merge(&mut self, index: u64, fragment: &Value) {
        let call = self.calls.entry(index).or_default();
        if call.id.is_none() {
            call.id = str_field(fragment, "id")
                .filter(|s| !s.is_empty())
                .map(str::to_string);
        }
        let function = fragment.get("function").unwrap_or(&Value::Null);
        if call.name.is_none() {
            call.name = str_field(function, "name")
                .filter(|s| !s.is_empty())
                .map(str::to_string);
        }
        match function.get("arguments") {
            Some(Value::String(s)) => {
                call.arguments.push_str(s);
                call.saw_arguments = true;
            }
            // A few servers send the arguments as an object rather than a string.
            Some(v @ Value::Object(_)) => {
                call.arguments.push_str(&v.to_string());
                call.saw_arguments = true;
            }
            _ => {}
        }
    }

    fn finish(self) -> (Vec<ParsedCall>, Vec<String>) {
        let mut calls = Vec::new();
        let mut failures = Vec::new();
        for (index, part) in self.calls {
            let Some(name) = part.name else {
                failures.push(format!(
                    "tool call at index {index} has no function name (arguments: {})",
                    wire::preview(&part.arguments)
                ));
                continue;
            };
            // A call with no arguments at all is a call without parameters.
            let arguments = if part.saw_arguments {
                part.arguments
            } else {
                "{}".to_string()
            };
            calls.push(ParsedCall {
                id: part.id.unwrap_or_else(|| format!("call_{index}")),
                name,
                arguments,
            });
        }
        (calls, failures)
    }
}

/// Accumulates a streamed response from its SSE `data:` payloads.
#[derive(Debug, Default)]
pub struct StreamAccumulator {
    text: String,
    reasoning: Option<String>,
    calls: CallParts,
    finish_reason: Option<String>,
    usage: Usage,
    raw: Vec<String>,
    done: bool,
}

impl StreamAccumulator {
    pub fn new() -> Self {
        Self::default()
    }

    /// True once `[DONE]` has been seen; later payloads are ignored.
    /// The answer text received so far (for live display only).
    pub fn text_so_far(&self) -> String {
        self.text.clone()
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Consume one `data:` payload. An error object in the stream fails the
    /// call as an incomplete stream (it is retryable: servers send these when
    /// they break off mid-answer).
    pub fn push(&mut self, data: &str) -> Result<(), ProviderError> {
        if self.done {
            return Ok(());
        }
        self.raw.push(data.to_string());
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let v: Value = attest_protocol::json::parse_value(data)
            .map_err(|e| ProviderError::Decode(format!("invalid JSON in stream chunk: {e}")))?;
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            return Err(ProviderError::IncompleteStream(format!(
                "error in stream: {}",
                wire::error_message(err)
            )));
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.usage = usage_of(Some(u));
        }
        // Only the first choice is used; `n` is never set above 1.
        let Some(choice) = v.get("choices").and_then(Value::as_array).and_then(|c| {
            c.iter()
                .find(|ch| ch.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        }) else {
            return Ok(());
        };
        if let Some(reason) = str_field(choice, "finish_reason") {
            self.finish_reason = Some(reason.to_string());
        }
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(t) = str_field(delta, "content") {
            self.text.push_str(t);
        }
        if let Some(r) =
            str_field(delta, "reasoning_content").or_else(|| str_field(delta, "reasoning"))
        {
            self.reasoning.get_or_insert_with(String::new).push_str(r);
        }
        for (pos, frag) in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            // A missing index falls back to the fragment's position in this chunk.
            let index = frag
                .get("index")
                .and_then(Value::as_u64)
                .unwrap_or(pos as u64);
            self.calls.merge(index, frag);
        }
        Ok(())
    }

    /// The assembled response; an error unless `[DONE]` was seen, so a
    /// half-received call is never returned.
    pub fn finish(self) -> Result<ModelResponse, ProviderError> {
        if !self.done {
            return Err(ProviderError::IncompleteStream(format!(
                "no [DONE] after {} chunks",
                self.raw.len()
            )));
        }
        let (tool_calls, parse_failures) = self.calls.finish();
        Ok(ModelResponse {
            text: self.text,
            reasoning: self.reasoning,
            encrypted_reasoning: Vec::new(),
            tool_calls,
            finish: finish_kind(self.finish_reason.as_deref()),
            raw_finish_reason: self.finish_reason,
            usage: self.usage,
            raw: self.raw.join("\n"),
            parse_failures,
            protocol_violation: None,
            call_source: CallSource::Native,
        })
    }
}
