//! Anthropic Messages wire format (`POST /v1/messages`).

use crate::fragments::{messages_start, Fragments, KeptBody, KeptJson, KeptPrefix, Piece};
use crate::wire::{self, str_field, u64_field};
use crate::{FinishKind, ModelRequest, ModelResponse, ParsedCall, ProviderError};
use attest_protocol::{CallSource, HarnessMessageKind, ReceiptStatus, TranscriptItem, Usage};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// Build the request body. `req.history` must already be normalized.
/// Messages strictly alternate user / assistant: adjacent same-role content
/// is merged into one message, and in a user message the `tool_result`
/// blocks come first, in call order, as the API requires.
///
/// With a `cache_key`, the body carries prompt-cache breakpoints
/// ([`MAX_BREAKPOINTS`] at most): one after the system prompt (covering
/// the tools before it), one on the newest block before the state snapshot
/// (the part of the transcript that the next request repeats), and one at
/// the end of the previous user turn, where the previous request's
/// breakpoint was, so it is read back however many blocks this step added.
pub fn build_body(req: &ModelRequest, model: &str) -> Value {
    serde_json::to_value(body(req, model, messages(turns(req), &[]), None)).unwrap_or(Value::Null)
}

/// The request body as sent: the same JSON as [`build_body`], written in
/// one pass from borrowed data (the per-step path: no `Value` tree of the
/// whole history built and dropped each request).
pub fn body_json(req: &ModelRequest, model: &str) -> String {
    serde_json::to_string(&body(req, model, messages(turns(req), &[]), None)).unwrap_or_default()
}

/// [`body_json`] with each content block's JSON kept in `kept` and copied
/// from there by later requests that carry the same item (the per-step
/// path: see [`Fragments`]). Blocks that carry a breakpoint, which moves
/// from request to request, and the state snapshot are always written.
/// The run's leading messages are kept whole: a request that begins with
/// their items builds only the messages after them.
pub fn body_json_kept(req: &ModelRequest, model: &str, kept: &mut Fragments) -> String {
    body_kept(req, model, kept).to_json()
}

/// [`body_json_kept`] in pieces, the kept messages shared (what is sent).
pub fn body_kept(req: &ModelRequest, model: &str, kept: &mut Fragments) -> KeptBody {
    let mut prefix = kept.take_prefix(&req.history);
    let turns = match turns_after(req, &prefix) {
        Some(turns) => turns,
        None => {
            prefix = KeptPrefix::default();
            turns(req)
        }
    };
    kept.prune(turns.iter().map(|(_, blocks)| blocks.len()).sum());
    let cut = next_cut(req, &turns, &prefix);
    // One entry per block, in order.
    let json: Vec<_> = turns
        .iter()
        .flat_map(|(_, blocks)| blocks)
        .map(|(block, volatile)| kept.piece(keepable(req, block, *volatile)?, block))
        .collect();
    let messages = messages(turns, &json);
    let form = marks_last_tool(req) as u8;
    let tools = kept.tools(&req.tools, form, || tool_defs(req));
    let written =
        serde_json::to_string(&body(req, model, messages, tools.as_deref())).unwrap_or_default();
    let spliced = messages_start(&written).filter(|&at| prefix.fits_at(&written, at));
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
/// begins its last assistant message before any message that changes from
/// request to request (the state snapshot, a breakpoint, results whose
/// calls are not in the history yet) or holds an item only this request
/// has; and how many of `turns` come before it.
fn next_cut(req: &ModelRequest, turns: &[Turn<'_>], prefix: &KeptPrefix) -> Option<(usize, usize)> {
    let start = prefix.covers();
    let shared_until = req.history[start..]
        .iter()
        .position(|item| Arc::strong_count(item) == 1)
        .map_or(req.history.len(), |p| start + p);
    // A result is ordered by its call, which may come later in the run.
    let mut calls: HashSet<&str> = HashSet::new();
    let mut cut = None;
    for (t, (is_user, blocks)) in turns.iter().enumerate() {
        let first = blocks.first().and_then(|(block, _)| block.source)?;
        if first >= shared_until {
            break;
        }
        if !is_user && t > 0 {
            cut = Some((first, t));
        }
        calls.extend(blocks.iter().filter_map(|(block, _)| match block.kind {
            "tool_use" => block.id,
            _ => None,
        }));
        let changes = |(block, volatile): &(WireBlock<'_>, bool)| {
            *volatile
                || block.cache_control.is_some()
                || block
                    .tool_use_id
                    .is_some_and(|id| !calls.contains(id) && !prefix.has_call(id))
        };
        if blocks.iter().any(changes) {
            break;
        }
    }
    cut
}

/// The item a block is made from, where its JSON may be kept.
fn keepable<'a>(
    req: &'a ModelRequest,
    block: &WireBlock<'_>,
    volatile: bool,
) -> Option<&'a [Arc<TranscriptItem>]> {
    let i = block.source?;
    (!volatile && block.cache_control.is_none()).then(|| &req.history[i..=i])
}

// Fields are declared in the order `serde_json::Map` sorts keys, so the
// bytes equal those of the `Value` form (tests compare them).
#[derive(Serialize)]
struct Body<'a> {
    max_tokens: u32,
    messages: Vec<Message<'a>>,
    model: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<System<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Piece<'a, Vec<ToolDef<'a>>>>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum System<'a> {
    Plain(&'a str),
    Blocks([WireBlock<'a>; 1]),
}

#[derive(Serialize)]
struct ToolDef<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<Ephemeral>,
    description: &'a str,
    input_schema: &'a Value,
    name: &'a str,
}

#[derive(Serialize)]
struct Message<'a> {
    content: Vec<Piece<'a, WireBlock<'a>>>,
    role: &'static str,
}

/// One content block; which fields are set depends on its `type`.
#[derive(Serialize, Default)]
struct WireBlock<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<Ephemeral>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input: Option<Arguments<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    is_error: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_use_id: Option<&'a str>,
    #[serde(rename = "type")]
    kind: &'static str,
    /// The index of the history item the block is made from.
    #[serde(skip)]
    source: Option<usize>,
}

/// A call's arguments as its `tool_use` input: parsed when the block is
/// written (once, where its JSON is kept). Invalid arguments were already
/// answered with an error result; the API only accepts an object here.
struct Arguments<'a>(&'a str);

impl Serialize for Arguments<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match attest_protocol::json::parse_value(self.0) {
            Ok(object @ Value::Object(_)) => object.serialize(serializer),
            _ => serde_json::Map::new().serialize(serializer),
        }
    }
}

#[derive(Serialize, Clone, Copy)]
struct Ephemeral {
    #[serde(rename = "type")]
    kind: &'static str,
}

const EPHEMERAL: Ephemeral = Ephemeral { kind: "ephemeral" };

/// One message being assembled: its role and its blocks, each flagged when
/// it changes from request to request (the state snapshot).
type Turn<'a> = (bool, Vec<(WireBlock<'a>, bool)>);

/// The history's messages as role and blocks, results sorted and
/// breakpoints placed.
fn turns(req: &ModelRequest) -> Vec<Turn<'_>> {
    turns_after(req, &KeptPrefix::default()).unwrap_or_default()
}

/// The messages of the items after `prefix` (all of them, with an empty
/// one): `None` where they would differ from those of a whole build, which
/// can only be through the prefix's items: a result ordered by a call among
/// them, or a breakpoint that belongs on the prefix's last user turn.
fn turns_after<'a>(req: &'a ModelRequest, prefix: &KeptPrefix) -> Option<Vec<Turn<'a>>> {
    let start = prefix.covers();
    // Position of each call, to put tool results in call order.
    let mut call_order: HashMap<&str, usize> = HashMap::new();
    let mut turns: Vec<Turn<'_>> = Vec::new();
    for (index, item) in req.history.iter().enumerate().skip(start) {
        let volatile = matches!(
            &**item,
            TranscriptItem::HarnessMessage {
                kind: HarnessMessageKind::StateSnapshot,
                ..
            }
        );
        let (is_user, block) = match &**item {
            TranscriptItem::UserInput { text } | TranscriptItem::HarnessMessage { text, .. } => {
                (true, text_block(text))
            }
            TranscriptItem::AssistantOutput { text, .. } => (false, text_block(text)),
            TranscriptItem::ToolCall {
                call_id,
                name,
                arguments,
            } => {
                if prefix.has_call(call_id) {
                    return None;
                }
                let n = call_order.len();
                call_order.entry(call_id).or_insert(n);
                let block = WireBlock {
                    id: Some(call_id),
                    input: Some(Arguments(arguments)),
                    name: Some(name),
                    kind: "tool_use",
                    ..WireBlock::default()
                };
                (false, Some(block))
            }
            TranscriptItem::ToolResult {
                call_id,
                status,
                output,
                ..
            } => {
                let block = WireBlock {
                    content: Some(output),
                    is_error: (*status != ReceiptStatus::Ok).then_some(true),
                    tool_use_id: Some(call_id),
                    kind: "tool_result",
                    ..WireBlock::default()
                };
                (true, Some(block))
            }
            TranscriptItem::Terminal { .. } | TranscriptItem::Compaction { .. } => continue,
        };
        // Empty text sends nothing; skipping it may join two same-role turns.
        let Some(block) = block else { continue };
        let block = WireBlock {
            source: Some(index),
            ..block
        };
        match turns.last_mut() {
            Some((last_is_user, blocks)) if *last_is_user == is_user => {
                blocks.push((block, volatile))
            }
            _ => turns.push((is_user, vec![(block, volatile)])),
        }
    }
    for (is_user, blocks) in &mut turns {
        if *is_user {
            let unknown =
                |b: &WireBlock<'_>| b.tool_use_id.is_some_and(|id| !call_order.contains_key(id));
            if start > 0 && blocks.iter().any(|(b, _)| unknown(b)) {
                return None;
            }
            // Stable: results first in call order, then text in transcript order.
            blocks.sort_by_key(|(b, _)| match b.tool_use_id {
                Some(id) => (0, call_order.get(id).copied().unwrap_or(usize::MAX)),
                None => (1, 0),
            });
        }
    }
    if req.cache_key.is_some() && !place_message_breakpoints(&mut turns) && start > 0 {
        return None;
    }
    Some(turns)
}

/// The messages of `turns` (as [`turns`] made them), each block written
/// from its kept JSON in `json` (one entry per block, in order) where there
/// is one.
fn messages<'a>(turns: Vec<Turn<'a>>, json: &'a [KeptJson]) -> Vec<Message<'a>> {
    let mut json = json.iter();
    turns
        .into_iter()
        .map(|(is_user, blocks)| Message {
            content: blocks
                .into_iter()
                .map(|(block, _)| match json.next() {
                    Some(Some(json)) => Piece::Kept(json),
                    _ => Piece::Fresh(block),
                })
                .collect(),
            role: if is_user { "user" } else { "assistant" },
        })
        .collect()
}

/// The body around `messages`; with `kept_tools`, the tool list's kept JSON.
fn body<'a>(
    req: &'a ModelRequest,
    model: &'a str,
    messages: Vec<Message<'a>>,
    kept_tools: Option<&'a RawValue>,
) -> Body<'a> {
    let caching = req.cache_key.is_some();
    let system = (!req.system.is_empty()).then(|| {
        if caching {
            System::Blocks([WireBlock {
                cache_control: Some(EPHEMERAL),
                text: Some(&req.system),
                kind: "text",
                ..WireBlock::default()
            }])
        } else {
            System::Plain(&req.system)
        }
    });
    Body {
        max_tokens: req.max_tokens,
        messages,
        model,
        stop_sequences: &req.stop,
        stream: req.stream.then_some(true),
        system,
        temperature: req.temperature.and_then(wire::temperature),
        tools: (!req.tools.is_empty()).then(|| match kept_tools {
            Some(json) => Piece::Kept(json),
            None => Piece::Fresh(tool_defs(req)),
        }),
    }
}

/// Whether the tool list ends the cached prefix: it carries the
/// breakpoint where there is no system prompt to carry it.
fn marks_last_tool(req: &ModelRequest) -> bool {
    req.cache_key.is_some() && req.system.is_empty()
}

/// The tool list in wire form.
fn tool_defs(req: &ModelRequest) -> Vec<ToolDef<'_>> {
    let mut tools: Vec<ToolDef<'_>> = req
        .tools
        .iter()
        .map(|t| ToolDef {
            cache_control: None,
            description: &t.description,
            input_schema: &t.parameters,
            name: &t.name,
        })
        .collect();
    if marks_last_tool(req) {
        if let Some(last) = tools.last_mut() {
            last.cache_control = Some(EPHEMERAL);
        }
    }
    tools
}

/// The most `cache_control` breakpoints the API accepts in one request.
pub const MAX_BREAKPOINTS: usize = 4;

/// Breakpoints in the messages: on the newest block before the first one
/// that changes every request, and on the last block of the user turn
/// before that block's message (the previous request's stable end).
/// Whether both were placed.
fn place_message_breakpoints(turns: &mut [Turn<'_>]) -> bool {
    // (message, block) of every block, in order, up to the first volatile one.
    let mut newest: Option<(usize, usize)> = None;
    'outer: for (m, (_, blocks)) in turns.iter().enumerate() {
        for (b, (_, volatile)) in blocks.iter().enumerate() {
            if *volatile {
                break 'outer;
            }
            newest = Some((m, b));
        }
    }
    let Some((m, b)) = newest else { return false };
    turns[m].1[b].0.cache_control = Some(EPHEMERAL);
    let previous = (0..m).rev().find(|&i| turns[i].0 && !turns[i].1.is_empty());
    match previous.and_then(|i| turns[i].1.last_mut()) {
        Some((block, _)) => {
            block.cache_control = Some(EPHEMERAL);
            true
        }
        None => false,
    }
}

/// The API rejects empty text blocks, so empty text sends nothing.
fn text_block(text: &str) -> Option<WireBlock<'_>> {
    (!text.is_empty()).then(|| WireBlock {
        text: Some(text),
        kind: "text",
        ..WireBlock::default()
    })
}

/// Map a raw `stop_reason` to its meaning.
pub fn finish_kind(reason: Option<&str>) -> FinishKind {
    match reason {
        Some("end_turn") | Some("stop_sequence") => FinishKind::Stop,
        Some("tool_use") => FinishKind::ToolUse,
        Some("max_tokens") => FinishKind::Length,
        Some("refusal") => FinishKind::ContentFilter,
        _ => FinishKind::Other,
    }
}

/// Parse a non-streaming response body.
pub fn parse_response(body: &str) -> Result<ModelResponse, ProviderError> {
    let v: Value = attest_protocol::json::parse_value(body)
        .map_err(|e| ProviderError::Decode(format!("invalid JSON: {e}")))?;
    if str_field(&v, "type") == Some("error") {
        return Err(ProviderError::Decode(wire::error_message(
            v.get("error").unwrap_or(&v),
        )));
    }
    let content = v
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| ProviderError::Decode("response has no content array".into()))?;
    let mut out = Parts::default();
    for (index, block) in content.iter().enumerate() {
        match str_field(block, "type") {
            Some("text") => out.text.push_str(str_field(block, "text").unwrap_or("")),
            Some("thinking") => out.push_reasoning(str_field(block, "thinking").unwrap_or("")),
            Some("tool_use") => {
                let input = block
                    .get("input")
                    .filter(|i| !i.is_null())
                    .map_or("{}".to_string(), Value::to_string);
                out.push_call(
                    index,
                    str_field(block, "id"),
                    str_field(block, "name"),
                    input,
                );
            }
            _ => {}
        }
    }
    let raw_finish_reason = str_field(&v, "stop_reason").map(str::to_string);
    Ok(out.into_response(
        raw_finish_reason,
        usage_of(v.get("usage")),
        body.to_string(),
    ))
}

/// Total input tokens: uncached plus cache writes plus cache reads.
fn usage_of(usage: Option<&Value>) -> Usage {
    let u = usage.unwrap_or(&Value::Null);
    Usage {
        input_tokens: u64_field(u, "input_tokens")
            + u64_field(u, "cache_creation_input_tokens")
            + u64_field(u, "cache_read_input_tokens"),
        output_tokens: u64_field(u, "output_tokens"),
        cached_input_tokens: u64_field(u, "cache_read_input_tokens"),
        cache_creation_input_tokens: u64_field(u, "cache_creation_input_tokens"),
    }
}

/// The pieces of a response, from a body or a stream.
#[derive(Debug, Default)]
struct Parts {
    text: String,
    reasoning: Option<String>,
    calls: Vec<ParsedCall>,
    failures: Vec<String>,
}

impl Parts {
    fn push_reasoning(&mut self, r: &str) {
        self.reasoning.get_or_insert_with(String::new).push_str(r);
    }

    fn push_call(&mut self, index: usize, id: Option<&str>, name: Option<&str>, arguments: String) {
        match name.filter(|n| !n.is_empty()) {
            Some(name) => self.calls.push(ParsedCall {
                id: id
                    .filter(|i| !i.is_empty())
                    .map_or_else(|| format!("call_{index}"), str::to_string),
                name: name.to_string(),
                arguments,
            }),
            None => self.failures.push(format!(
                "tool_use block {index} has no name (input: {})",
                wire::preview(&arguments)
            )),
        }
    }

    fn into_response(
        self,
        raw_finish_reason: Option<String>,
        usage: Usage,
        raw: String,
    ) -> ModelResponse {
        ModelResponse {
            text: self.text,
            reasoning: self.reasoning,
            encrypted_reasoning: Vec::new(),
            tool_calls: self.calls,
            finish: finish_kind(raw_finish_reason.as_deref()),
            raw_finish_reason,
            usage,
            raw,
            parse_failures: self.failures,
            protocol_violation: None,
            call_source: CallSource::Native,
        }
    }
}

#[derive(Debug)]
enum Block {
    Text(String),
    Thinking(String),
    ToolUse {
        id: Option<String>,
        name: Option<String>,
        start_input: Option<Value>,
        json: String,
    },
    Other,
}

/// Accumulates a streamed response from its SSE `data:` payloads (each one
/// carries its event name in `type`).
#[derive(Debug, Default)]
pub struct StreamAccumulator {
    blocks: BTreeMap<u64, (Block, bool)>,
    stop_reason: Option<String>,
    usage: Usage,
    raw: Vec<String>,
    done: bool,
}

impl StreamAccumulator {
    pub fn new() -> Self {
        Self::default()
    }

    /// True once `message_stop` has been seen; later payloads are ignored.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The answer text received so far (for live display only).
    pub fn text_so_far(&self) -> String {
        self.blocks
            .values()
            .filter_map(|(b, _)| match b {
                Block::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Consume one event's `data:` payload.
    pub fn push(&mut self, data: &str) -> Result<(), ProviderError> {
        if self.done {
            return Ok(());
        }
        self.raw.push(data.to_string());
        let v: Value = attest_protocol::json::parse_value(data)
            .map_err(|e| ProviderError::Decode(format!("invalid JSON in stream event: {e}")))?;
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        match str_field(&v, "type") {
            Some("message_start") => {
                self.usage = usage_of(v.get("message").and_then(|m| m.get("usage")));
            }
            Some("content_block_start") => {
                let cb = v.get("content_block").unwrap_or(&Value::Null);
                let text = |k| str_field(cb, k).unwrap_or("").to_string();
                let block = match str_field(cb, "type") {
                    Some("text") => Block::Text(text("text")),
                    Some("thinking") => Block::Thinking(text("thinking")),
                    Some("tool_use") => Block::ToolUse {
                        id: str_field(cb, "id").map(str::to_string),
                        name: str_field(cb, "name").map(str::to_string),
                        start_input: cb.get("input").cloned(),
                        json: String::new(),
                    },
                    _ => Block::Other,
                };
                self.blocks.insert(index, (block, false));
            }
            Some("content_block_delta") => {
                let d = v.get("delta").unwrap_or(&Value::Null);
                match (self.blocks.get_mut(&index), str_field(d, "type")) {
                    (Some((Block::Text(t), _)), Some("text_delta")) => {
                        t.push_str(str_field(d, "text").unwrap_or(""))
                    }
                    (Some((Block::Thinking(t), _)), Some("thinking_delta")) => {
                        t.push_str(str_field(d, "thinking").unwrap_or(""))
                    }
                    (Some((Block::ToolUse { json, .. }, _)), Some("input_json_delta")) => {
                        json.push_str(str_field(d, "partial_json").unwrap_or(""))
                    }
                    _ => {}
                }
            }
            Some("content_block_stop") => {
                if let Some((_, stopped)) = self.blocks.get_mut(&index) {
                    *stopped = true;
                }
            }
            Some("message_delta") => {
                if let Some(r) = v.get("delta").and_then(|d| str_field(d, "stop_reason")) {
                    self.stop_reason = Some(r.to_string());
                }
                if let Some(u) = v.get("usage") {
                    // Counts here are cumulative, so they replace rather than add.
                    if u.get("output_tokens").is_some() {
                        self.usage.output_tokens = u64_field(u, "output_tokens");
                    }
                    if u.get("input_tokens").is_some() {
                        let input = usage_of(Some(u));
                        self.usage.input_tokens = input.input_tokens;
                        self.usage.cached_input_tokens = input.cached_input_tokens;
                        self.usage.cache_creation_input_tokens = input.cache_creation_input_tokens;
                    }
                }
            }
            Some("message_stop") => self.done = true,
            Some("error") => return Err(stream_error(v.get("error").unwrap_or(&v))),
            _ => {} // ping and event types added later
        }
        Ok(())
    }

    /// The assembled response; an error unless `message_stop` was seen. A
    /// tool_use block that never reached `content_block_stop` is reported as a
    /// parse failure, never as a call.
    pub fn finish(self) -> Result<ModelResponse, ProviderError> {
        if !self.done {
            return Err(ProviderError::IncompleteStream(format!(
                "no message_stop after {} events",
                self.raw.len()
            )));
        }
        let mut out = Parts::default();
        for (index, (block, stopped)) in self.blocks {
            match block {
                Block::Text(t) => out.text.push_str(&t),
                Block::Thinking(t) => out.push_reasoning(&t),
                Block::ToolUse {
                    id,
                    name,
                    start_input,
                    json,
                } => {
                    let arguments = if !json.is_empty() {
                        json
                    } else {
                        match start_input {
                            Some(v @ Value::Object(_))
                                if v.as_object().is_some_and(|o| !o.is_empty()) =>
                            {
                                v.to_string()
                            }
                            _ => "{}".to_string(),
                        }
                    };
                    if stopped {
                        out.push_call(index as usize, id.as_deref(), name.as_deref(), arguments);
                    } else {
                        out.failures.push(format!(
                            "tool_use block {index} never completed (input: {})",
                            wire::preview(&arguments)
                        ));
                    }
                }
                Block::Other => {}
            }
        }
        Ok(out.into_response(self.stop_reason, self.usage, self.raw.join("\n")))
    }
}

/// Overload and server errors mid-stream are worth retrying; others are not.
fn stream_error(err: &Value) -> ProviderError {
    let message = format!("error event: {}", wire::error_message(err));
    match str_field(err, "type") {
        Some("overloaded_error" | "api_error" | "rate_limit_error" | "timeout_error") => {
            ProviderError::IncompleteStream(message)
        }
        _ => ProviderError::Decode(message),
    }
}
