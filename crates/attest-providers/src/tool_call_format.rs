//! Tool calls that a model writes as text (SPEC D7): local models and any
//! model without a native tool-call channel.
//!
//! Accepted shapes, all naming an offered tool and carrying an arguments
//! JSON object:
//! - Hermes / Qwen tags: `<tool_call>{"name": …, "arguments": {…}}</tool_call>`,
//!   one or more;
//! - Llama 3 JSON after `<|python_tag|>`, where `parameters` may stand for
//!   `arguments` and `"type": "function"` may be added;
//! - the same JSON object in a Markdown code fence (```` ```json ````) or bare
//!   in the text, alone or as an array of calls.
//!
//! A `<think>…</think>` block is returned as reasoning. Text around the calls
//! is the content (commentary), trimmed.
//!
//! Anything that tries to be a call and is not a valid one — a tag whose
//! body is not a JSON object, an object naming a tool that is not offered,
//! arguments that are not an object, template placeholders, a tool
//! definition echoed back, duplicate keys — rejects the whole response with
//! a [`ProtocolViolation`] of kind `UnparsableAction`: nothing in it runs.
//! A call cut by the token limit is never returned; when complete calls
//! precede it they are kept and the cut one is noted in
//! [`TextToolCalls::dropped`]. JSON that does not try to be a call (no `name`,
//! or a `name` without `arguments`) is ordinary content.
//!
//! The parser is total: no panics on any input, and details quote at most
//! [`QUOTE_LIMIT`] characters of model text.

use crate::ProtocolViolation;
use attest_protocol::{ProtocolErrorKind, ToolSpec};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// Most characters of model text quoted in a violation's detail.
pub const QUOTE_LIMIT: usize = 60;

const CALL_OPEN: &str = "<tool_call>";
const CALL_CLOSE: &str = "</tool_call>";
const PYTHON_TAG: &str = "<|python_tag|>";
const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";

/// How the calls of a response were written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallSyntax {
    /// `<tool_call>` tags.
    HermesTags,
    /// JSON after `<|python_tag|>`.
    PythonTag,
    /// JSON objects in a code fence or bare in the text.
    Json,
}

/// One call found in the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextCall {
    pub name: String,
    /// The arguments object as compact JSON text.
    pub arguments: String,
}

/// A response that parsed: content, optional reasoning, and the calls.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TextToolCalls {
    /// Text outside the calls and the reasoning, trimmed.
    pub content: String,
    pub reasoning: Option<String>,
    pub calls: Vec<TextCall>,
    /// Set when `calls` is not empty.
    pub syntax: Option<CallSyntax>,
    /// Calls that were cut by the token limit and dropped.
    pub dropped: Vec<String>,
}

/// What the caller knows about how the text ended.
#[derive(Debug, Clone, Copy, Default)]
pub struct ParseOptions {
    /// The output was cut by the token limit (no stop token).
    pub truncated: bool,
    /// The prompt ended inside a `<think>` block, so the text starts in
    /// reasoning.
    pub reasoning_prefilled: bool,
}

/// Parse one response against the offered tools.
pub fn parse(
    text: &str,
    tools: &[ToolSpec],
    opts: ParseOptions,
) -> Result<TextToolCalls, ProtocolViolation> {
    let (reasoning, body) = split_reasoning(text, opts);
    // A marker inside a bare JSON call's string argument is data, not syntax.
    let marker = |m: &str| first_outside_json(body, m);
    let mut parsed = if marker(CALL_OPEN).is_some() || marker(CALL_CLOSE).is_some() {
        hermes(body, tools, opts)?
    } else if let Some(at) = marker(PYTHON_TAG) {
        python_tag(body, at, tools, opts)?
    } else {
        json_objects(body, tools, opts)?
    };
    parsed.reasoning = reasoning;
    Ok(parsed)
}

/// Reasoning (without its tags) and the rest.
fn split_reasoning(text: &str, opts: ParseOptions) -> (Option<String>, &str) {
    let reasoning_of = |s: &str| {
        let s = s.trim_start();
        let s = s.strip_prefix(THINK_OPEN).unwrap_or(s).trim();
        (!s.is_empty()).then(|| s.to_string())
    };
    if let Some(end) = text.find(THINK_CLOSE) {
        let rest = text.get(end + THINK_CLOSE.len()..).unwrap_or_default();
        return (reasoning_of(text.get(..end).unwrap_or_default()), rest);
    }
    if text.trim_start().starts_with(THINK_OPEN) || opts.reasoning_prefilled {
        // Reasoning that never ended: no content, no calls.
        return (reasoning_of(text), "");
    }
    (None, text)
}

/// The first occurrence of `marker` in `body` that is not inside a JSON
/// value starting earlier in the text.
fn first_outside_json(body: &str, marker: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(rel) = body.get(from..)?.find(marker) {
        let at = from + rel;
        if !inside_json_value(body, at) {
            return Some(at);
        }
        from = at + marker.len();
    }
    None
}

/// Whether `pos` lies inside a complete JSON object or array of `body`.
fn inside_json_value(body: &str, pos: usize) -> bool {
    let mut i = 0;
    while let Some(rel) = body.get(i..pos).and_then(|r| r.find(['{', '['])) {
        let start = i + rel;
        match leading_json(body.get(start..).unwrap_or_default()) {
            Leading::Value(_, len) if start + len > pos => return true,
            Leading::Value(_, len) => i = start + len,
            _ => i = start + 1,
        }
    }
    false
}

/// `<tool_call>` blocks; the text between them is content.
fn hermes(
    body: &str,
    tools: &[ToolSpec],
    opts: ParseOptions,
) -> Result<TextToolCalls, ProtocolViolation> {
    let mut out = TextToolCalls::default();
    let mut content = String::new();
    let mut rest = body;
    while let Some(open) = rest.find(CALL_OPEN) {
        let before = rest.get(..open).unwrap_or_default();
        if before.contains(CALL_CLOSE) {
            return Err(unparsable(format!(
                "a {CALL_CLOSE} without its {CALL_OPEN}"
            )));
        }
        content.push_str(before);
        let inner = rest
            .get(open + CALL_OPEN.len()..)
            .unwrap_or_default()
            .trim_start();
        match leading_json(inner) {
            Leading::Value(value, len) => {
                let tail = inner.get(len..).unwrap_or_default().trim_start();
                if let Some(after) = tail.strip_prefix(CALL_CLOSE) {
                    out.calls.extend(calls_of(&value, tools)?.ok_or_else(|| {
                        unparsable(format!(
                            "the {CALL_OPEN} body {} is not a call (expected {{\"name\": …, \"arguments\": {{…}}}})",
                            quote(inner.get(..len).unwrap_or_default())
                        ))
                    })?);
                    rest = after;
                } else if tail.is_empty() {
                    // Unclosed at the very end.
                    let calls = calls_of(&value, tools)?.ok_or_else(|| {
                        unparsable(format!(
                            "the {CALL_OPEN} body {} is not a call",
                            quote(inner)
                        ))
                    })?;
                    if opts.truncated {
                        out.dropped.push(format!(
                            "a call cut by the token limit before {CALL_CLOSE}: {}",
                            quote(inner)
                        ));
                    } else {
                        out.calls.extend(calls);
                    }
                    rest = "";
                } else {
                    return Err(unparsable(format!(
                        "text after the call JSON inside {CALL_OPEN}: {}",
                        quote(tail)
                    )));
                }
            }
            Leading::Incomplete if opts.truncated => {
                out.dropped
                    .push(format!("a call cut by the token limit: {}", quote(inner)));
                rest = "";
            }
            Leading::Incomplete => {
                return Err(unparsable(format!(
                    "the {CALL_OPEN} body ends before its JSON object does: {}",
                    quote(inner)
                )))
            }
            Leading::Invalid(why) => {
                return Err(unparsable(format!(
                    "the {CALL_OPEN} body is not a JSON object ({why}): {}",
                    quote(inner)
                )))
            }
        }
    }
    if rest.contains(CALL_CLOSE) {
        return Err(unparsable(format!(
            "a {CALL_CLOSE} without its {CALL_OPEN}"
        )));
    }
    content.push_str(rest);
    finish(out, content, CallSyntax::HermesTags)
}

/// Llama 3: content, `<|python_tag|>`, then one call object (or an array).
fn python_tag(
    body: &str,
    at: usize,
    tools: &[ToolSpec],
    opts: ParseOptions,
) -> Result<TextToolCalls, ProtocolViolation> {
    let mut out = TextToolCalls::default();
    let content = body.get(..at).unwrap_or_default().to_string();
    let after = body
        .get(at + PYTHON_TAG.len()..)
        .unwrap_or_default()
        .trim_start();
    match leading_json(after) {
        Leading::Value(value, len) => {
            let tail = after.get(len..).unwrap_or_default();
            if !tail.trim().is_empty() {
                return Err(unparsable(format!(
                    "text after the call JSON behind {PYTHON_TAG}: {}",
                    quote(tail.trim())
                )));
            }
            out.calls = calls_of(&value, tools)?.ok_or_else(|| {
                unparsable(format!(
                    "the JSON behind {PYTHON_TAG} is not a call: {}",
                    quote(after)
                ))
            })?;
        }
        Leading::Incomplete if opts.truncated => {
            out.dropped
                .push(format!("a call cut by the token limit: {}", quote(after)));
        }
        Leading::Incomplete | Leading::Invalid(_) => {
            return Err(unparsable(format!(
                "no call JSON behind {PYTHON_TAG}: {}",
                quote(after)
            )))
        }
    }
    finish(out, content, CallSyntax::PythonTag)
}

/// Call objects in code fences or bare in the text. JSON that does not try
/// to be a call stays content.
fn json_objects(
    body: &str,
    tools: &[ToolSpec],
    opts: ParseOptions,
) -> Result<TextToolCalls, ProtocolViolation> {
    let mut out = TextToolCalls::default();
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while let Some(rel) = body.get(i..).and_then(|r| r.find(['{', '['])) {
        let start = i + rel;
        let src = body.get(start..).unwrap_or_default();
        match leading_json(src) {
            Leading::Value(value, len) => {
                if let Some(calls) = calls_of(&value, tools)? {
                    out.calls.extend(calls);
                    spans.push(fenced_span(body, start, start + len));
                }
                // Skip the whole value: objects nested in it are not calls.
                i = start + len;
            }
            Leading::Incomplete if looks_like_call_start(src) => {
                if !opts.truncated {
                    return Err(unparsable(format!(
                        "a call whose JSON never closes: {}",
                        quote(src)
                    )));
                }
                out.dropped
                    .push(format!("a call cut by the token limit: {}", quote(src)));
                spans.push((start, body.len()));
                break;
            }
            Leading::Invalid(why) if looks_like_call(src) => {
                return Err(unparsable(format!(
                    "a call whose JSON does not parse ({why}): {}",
                    quote(src)
                )));
            }
            Leading::Incomplete | Leading::Invalid(_) => i = start + 1,
        }
    }
    let mut content = String::new();
    let mut at = 0;
    for (s, e) in spans {
        content.push_str(body.get(at..s).unwrap_or_default());
        at = e;
    }
    content.push_str(body.get(at..).unwrap_or_default());
    finish(out, content, CallSyntax::Json)
}

fn finish(
    mut out: TextToolCalls,
    content: String,
    syntax: CallSyntax,
) -> Result<TextToolCalls, ProtocolViolation> {
    if out.calls.is_empty() && !out.dropped.is_empty() {
        return Err(unparsable(format!(
            "the output was cut by the token limit inside a tool call ({})",
            out.dropped.join("; ")
        )));
    }
    out.content = content.trim().to_string();
    if !out.calls.is_empty() {
        out.syntax = Some(syntax);
    }
    Ok(out)
}

/// `{"name"` at the start, possibly after whitespace: a call being written.
fn looks_like_call_start(src: &str) -> bool {
    let rest = src.trim_start();
    let rest = rest.strip_prefix('[').map_or(rest, str::trim_start);
    rest.strip_prefix('{')
        .map(str::trim_start)
        .is_some_and(|r| r.starts_with("\"name\"") || r.starts_with("\"type\""))
}

/// An object that names something and carries arguments within its first
/// few hundred bytes: it tries to be a call, whether or not it parses.
fn looks_like_call(src: &str) -> bool {
    if !looks_like_call_start(src) {
        return false;
    }
    let mut end = src.len().min(400);
    while !src.is_char_boundary(end) {
        end -= 1;
    }
    let head = src.get(..end).unwrap_or_default();
    head.contains("\"arguments\"") || head.contains("\"parameters\"")
}

/// Widen a call's span to a code fence that holds nothing else.
fn fenced_span(body: &str, start: usize, end: usize) -> (usize, usize) {
    let before = body.get(..start).unwrap_or_default();
    let Some(fence_open) = before.rfind("```") else {
        return (start, end);
    };
    let opener = before.get(fence_open + 3..).unwrap_or_default();
    let lang_ok = opener
        .trim()
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !lang_ok || !opener.contains('\n') && !opener.trim().is_empty() {
        return (start, end);
    }
    let after = body.get(end..).unwrap_or_default();
    let trimmed = after.trim_start();
    match trimmed.strip_prefix("```") {
        Some(rest) => (fence_open, body.len() - rest.len()),
        None => (start, end),
    }
}

/// What a value is: not a call (`None`), calls, or a broken call (error).
fn calls_of(value: &Value, tools: &[ToolSpec]) -> Result<Option<Vec<TextCall>>, ProtocolViolation> {
    match value {
        Value::Array(items) if !items.is_empty() => {
            let mut calls = Vec::new();
            let mut any_call = false;
            for item in items {
                match call_of(item, tools)? {
                    Some(c) => {
                        any_call = true;
                        calls.push(c);
                    }
                    None if any_call => {
                        return Err(unparsable(format!(
                            "an array of calls holds something else: {}",
                            quote(&item.to_string())
                        )))
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some(calls))
        }
        Value::Object(_) => Ok(call_of(value, tools)?.map(|c| vec![c])),
        _ => Ok(None),
    }
}

/// Keys a call object may have besides its name and arguments.
const CALL_EXTRA_KEYS: [&str; 2] = ["type", "id"];

fn call_of(value: &Value, tools: &[ToolSpec]) -> Result<Option<TextCall>, ProtocolViolation> {
    let Some(obj) = value.as_object() else {
        return Ok(None);
    };
    // OpenAI's shape: {"type": "function", "function": {...}}.
    if !obj.contains_key("name") {
        return match obj.get("function") {
            Some(inner @ Value::Object(f)) if f.contains_key("name") => {
                if let Some(k) = obj
                    .keys()
                    .find(|k| !matches!(k.as_str(), "function" | "type" | "id"))
                {
                    return Err(unparsable(format!("unexpected key {} in a call", quote(k))));
                }
                call_of(inner, tools)
            }
            _ => Ok(None),
        };
    }
    let args = match (obj.get("arguments"), obj.get("parameters")) {
        (Some(_), Some(_)) => {
            return Err(unparsable(
                "a call with both `arguments` and `parameters`".to_string(),
            ))
        }
        (Some(a), None) | (None, Some(a)) => a,
        // A `name` without arguments is data, not a call.
        (None, None) => return Ok(None),
    };
    let name = match obj.get("name") {
        Some(Value::String(n)) => n.as_str(),
        Some(other) => {
            return Err(unparsable(format!(
                "the call's name is not a string: {}",
                quote(&other.to_string())
            )))
        }
        None => return Ok(None),
    };
    if let Some(key) = obj.keys().find(|k| {
        !matches!(k.as_str(), "name" | "arguments" | "parameters")
            && !CALL_EXTRA_KEYS.contains(&k.as_str())
    }) {
        let what = if key == "description" {
            "looks like a tool definition, not a call"
        } else {
            "is not a call"
        };
        return Err(unparsable(format!(
            "an object naming {} {what} (unexpected key {})",
            quote(name),
            quote(key)
        )));
    }
    if let Some(t) = obj.get("type") {
        if t != "function" {
            return Err(unparsable(format!(
                "a call of type {} (expected \"function\")",
                quote(&t.to_string())
            )));
        }
    }
    if !tools.iter().any(|t| t.name == name) {
        let offered: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        return Err(unparsable(format!(
            "the call names {}, which is not an offered tool (offered: {})",
            quote(name),
            if offered.is_empty() {
                "none".to_string()
            } else {
                quote(&offered.join(", "))
            }
        )));
    }
    let Value::Object(arg_map) = args else {
        return Err(unparsable(format!(
            "the arguments of {} are not a JSON object: {}",
            quote(name),
            quote(&args.to_string())
        )));
    };
    if let Some((key, v)) = arg_map.iter().find(|(k, v)| is_placeholder(k, v)) {
        return Err(unparsable(format!(
            "the argument {} of {} is a placeholder: {}",
            quote(key),
            quote(name),
            quote(&v.to_string())
        )));
    }
    Ok(Some(TextCall {
        name: name.to_string(),
        arguments: Value::Object(arg_map.clone()).to_string(),
    }))
}

/// Template placeholders copied instead of a value: `"<path>"`, `"{path}"`,
/// `"<args-json-object>"`, `"..."`.
pub(crate) fn is_placeholder(key: &str, value: &Value) -> bool {
    let Value::String(s) = value else {
        return false;
    };
    let s = s.trim();
    let inner = s
        .strip_prefix('<')
        .and_then(|r| r.strip_suffix('>'))
        .or_else(|| s.strip_prefix("{{").and_then(|r| r.strip_suffix("}}")))
        .or_else(|| s.strip_prefix('{').and_then(|r| r.strip_suffix('}')))
        .map(str::trim);
    match inner {
        Some(name) => {
            name.eq_ignore_ascii_case(key)
                || matches!(
                    name,
                    "args-json-object" | "function-name" | "arguments" | "value"
                )
        }
        None => matches!(s, "..." | "…"),
    }
}

/// One JSON value at the start of `src`.
enum Leading {
    /// The value and its length in bytes.
    Value(Value, usize),
    /// The text ends inside the value.
    Incomplete,
    Invalid(String),
}

fn leading_json(src: &str) -> Leading {
    let mut values = serde_json::Deserializer::from_str(src).into_iter::<StrictValue>();
    match values.next() {
        Some(Ok(StrictValue(v))) => Leading::Value(v, values.byte_offset()),
        Some(Err(e)) if e.is_eof() => Leading::Incomplete,
        Some(Err(e)) => Leading::Invalid(format!("line {}, column {}: {e}", e.line(), e.column())),
        None => Leading::Incomplete,
    }
}

/// A JSON value that refuses duplicate object keys (a client could keep
/// either value, so such a call is ambiguous).
pub(crate) struct StrictValue(pub(crate) Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number that is not finite"))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(StrictValue(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!("duplicate key `{key}`")));
            }
            let StrictValue(v) = map.next_value()?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

fn unparsable(detail: String) -> ProtocolViolation {
    ProtocolViolation {
        kind: ProtocolErrorKind::UnparsableAction,
        detail,
    }
}

/// Model text for a detail: at most [`QUOTE_LIMIT`] characters, escaped.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::from("`");
    let mut chars = s.chars();
    let mut n = 0;
    for c in chars.by_ref() {
        out.extend(c.escape_debug());
        n += 1;
        if n >= QUOTE_LIMIT {
            break;
        }
    }
    if chars.next().is_some() {
        out.push('…');
    }
    out.push('`');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use attest_protocol::EffectClass;
    use serde_json::json;

    fn tools() -> Vec<ToolSpec> {
        ["read_file", "grep", "get_time"]
            .iter()
            .map(|n| ToolSpec {
                name: n.to_string(),
                description: String::new(),
                parameters: json!({"type": "object"}),
                effect: EffectClass::Observe,
            })
            .collect()
    }

    fn ok(text: &str) -> TextToolCalls {
        parse(text, &tools(), ParseOptions::default()).unwrap_or_else(|v| panic!("{v:?}"))
    }

    fn err(text: &str) -> String {
        match parse(text, &tools(), ParseOptions::default()) {
            Ok(p) => panic!("expected a violation, got {p:?}"),
            Err(v) => {
                assert_eq!(v.kind, ProtocolErrorKind::UnparsableAction);
                v.detail
            }
        }
    }

    fn call(name: &str, args: Value) -> TextCall {
        TextCall {
            name: name.into(),
            arguments: args.to_string(),
        }
    }

    #[test]
    fn hermes_tags_with_commentary() {
        let p = ok("Let me look.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"Cargo.toml\"}}\n</tool_call>");
        assert_eq!(p.content, "Let me look.");
        assert_eq!(
            p.calls,
            vec![call("read_file", json!({"path": "Cargo.toml"}))]
        );
        assert_eq!(p.syntax, Some(CallSyntax::HermesTags));
    }

    #[test]
    fn two_tagged_calls_and_markers_inside_strings() {
        let p = ok("<tool_call>{\"name\": \"grep\", \"arguments\": {\"pattern\": \"</tool_call>\"}}</tool_call><tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>");
        assert_eq!(p.calls.len(), 2);
        assert_eq!(p.calls[0], call("grep", json!({"pattern": "</tool_call>"})));
        assert_eq!(p.content, "");
    }

    #[test]
    fn fenced_json_call_removes_the_fence_from_content() {
        let p = ok("I will read it.\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"Cargo.toml\"}}\n```\n");
        assert_eq!(p.content, "I will read it.");
        assert_eq!(
            p.calls,
            vec![call("read_file", json!({"path": "Cargo.toml"}))]
        );
        assert_eq!(p.syntax, Some(CallSyntax::Json));
    }

    #[test]
    fn bare_json_call_and_array_of_calls() {
        let p = ok("{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}");
        assert_eq!(p.calls.len(), 1);
        let p = ok("[{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}, {\"name\": \"get_time\", \"arguments\": {}}]");
        assert_eq!(p.calls.len(), 2);
    }

    #[test]
    fn llama_parameters_key_and_python_tag() {
        let p = ok("<|python_tag|>{\"type\": \"function\", \"name\": \"grep\", \"parameters\": {\"pattern\": \"x\"}}");
        assert_eq!(p.calls, vec![call("grep", json!({"pattern": "x"}))]);
        assert_eq!(p.syntax, Some(CallSyntax::PythonTag));
    }

    #[test]
    fn json_that_is_not_a_call_is_content() {
        for text in [
            "{\"name\": \"attest\", \"version\": \"0.1.0\"}",
            "{\"parameters\": {}}",
            "{} is empty",
            "The package is called `attest` [1].",
            "```toml\n[package]\nname = \"attest\"\n```",
        ] {
            let p = ok(text);
            assert!(p.calls.is_empty(), "{text}");
            assert_eq!(p.content, text.trim());
        }
    }

    #[test]
    fn unknown_tools_placeholders_and_bad_arguments_are_violations() {
        assert!(err("{\"name\": \"delete_everything\", \"arguments\": {}}")
            .contains("not an offered tool"));
        assert!(err("<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>").contains("not a JSON object"));
        assert!(
            err("{\"name\": \"read_file\", \"arguments\": {\"path\": \"<path>\"}}")
                .contains("placeholder")
        );
        assert!(
            err("{\"name\": \"read_file\", \"arguments\": \"{\\\"path\\\": \\\"a\\\"}\"}")
                .contains("not a JSON object")
        );
        assert!(err("{\"name\": \"read_file\", \"description\": \"Read a file\", \"parameters\": {\"type\": \"object\"}}").contains("tool definition"));
        assert!(err("<tool_call>not json</tool_call>").contains("not a JSON object"));
        assert!(err("<tool_call>{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\", \"path\": \"b\"}}</tool_call>").contains("duplicate"));
        assert!(err("done </tool_call>").contains("without"));
    }

    #[test]
    fn truncation_drops_the_cut_call_and_keeps_complete_ones() {
        let cut = ParseOptions {
            truncated: true,
            ..Default::default()
        };
        let v = parse(
            "<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"pa",
            &tools(),
            cut,
        )
        .unwrap_err();
        assert!(v.detail.contains("token limit"), "{}", v.detail);
        let p = parse(
            "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"grep\", \"argu",
            &tools(),
            cut,
        )
        .unwrap();
        assert_eq!(p.calls.len(), 1);
        assert_eq!(p.dropped.len(), 1);
        // Not cut: an unclosed tag holding a whole call is a call.
        let p = ok("<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}");
        assert_eq!(p.calls.len(), 1);
    }

    #[test]
    fn a_call_whose_json_is_broken_is_a_violation_not_content() {
        // `\o` is not a JSON escape.
        let text = "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n```\nThen:\n```json\n{\"name\": \"parse\", \"arguments\": {\"content\": \"\\opt\"}}\n```";
        assert!(err(text).contains("does not parse"));
        assert!(
            err("{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"")
                .contains("never closes")
        );
        // Braces in prose are not calls.
        assert!(ok("Use {braces} and {\"name\": x} freely").calls.is_empty());
    }

    #[test]
    fn markers_inside_a_bare_call_are_data() {
        let p = ok(
            "{\"name\": \"grep\", \"arguments\": {\"pattern\": \"<|python_tag|> or <tool_call>\"}}",
        );
        assert_eq!(
            p.calls,
            vec![call(
                "grep",
                json!({"pattern": "<|python_tag|> or <tool_call>"})
            )]
        );
    }

    #[test]
    fn reasoning_is_split_off() {
        let p = ok("<think>\nneed the file\n</think>\n\n<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>");
        assert_eq!(p.reasoning.as_deref(), Some("need the file"));
        assert_eq!(p.calls.len(), 1);
        let p = ok("<think>still thinking");
        assert_eq!(p.reasoning.as_deref(), Some("still thinking"));
        assert_eq!(p.content, "");
    }

    #[test]
    fn never_panics_on_odd_input() {
        for text in [
            "",
            "{",
            "[",
            "<tool_call>",
            "</think>",
            "```",
            "```json\n{",
            "\u{0}{\"name\"",
            "<|python_tag|>",
            "{\"name\": 1, \"arguments\": {}}",
        ] {
            let _ = parse(text, &tools(), ParseOptions::default());
            let _ = parse(
                text,
                &tools(),
                ParseOptions {
                    truncated: true,
                    reasoning_prefilled: true,
                },
            );
        }
    }
}
