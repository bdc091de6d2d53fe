//! The Action of a text-protocol response: which tool, which arguments
//! (SPEC B1). Lenient in spelling, never in meaning.
//!
//! After `Action:` come
//! - a tool name and its arguments: `name[{…}]`, `name({…})`, `name{…}` or
//!   `name: {…}`; inside `[…]` and `(…)` the braces may be left out
//!   (`name(path: "a")`); or the name alone, with the arguments in an
//!   `Action Input:` section, on the next line, or none at all;
//! - or one whole call in a form of [`crate::tool_call_format`]
//!   (`{"name": …, "arguments": {…}}`, `<tool_call>…</tool_call>`, a fence).
//!
//! The name is an offered tool's, or a unique case-insensitive, `-`/`_`
//! variant of one. Arguments are JSON or relaxed JSON
//! ([`crate::relaxed_json`]) and must be exactly one object. What is not
//! one tool with one object — an unknown or ambiguous name, a second call,
//! arguments that are not an object — is an error whose detail ends with
//! the form to use.

use super::render;
use crate::relaxed_json::{self, bracketed_end};
use crate::tool_call_format::{self, is_placeholder, quote, ParseOptions};
use crate::ProtocolViolation;
use attest_protocol::{ProtocolErrorKind, ToolSpec};

/// The tool name and arguments (JSON object text) of an Action. Strict JSON
/// arguments are returned as written, relaxed ones as compact JSON.
///
/// An Action that does not parse as written but does once HTML entities
/// are decoded (`read_file[{&#34;path&#34;: …}]`) is that call: some
/// servers' chat templates HTML-escape the conversation (llama-cpp-python's
/// `chatml-function-calling`), and the model copies the escaped quotes.
pub(super) fn action_call(
    action: &str,
    input: Option<&str>,
    tools: &[ToolSpec],
) -> Result<(String, String), ProtocolViolation> {
    let as_written = parse_action(action, input, tools);
    if as_written.is_ok() {
        return as_written;
    }
    let decoded = html_decoded(action);
    let decoded_input = input.and_then(html_decoded);
    if decoded.is_none() && decoded_input.is_none() {
        return as_written;
    }
    let action = decoded.as_deref().unwrap_or(action);
    let input = decoded_input.as_deref().or(input);
    parse_action(action, input, tools).or(as_written)
}

/// `text` with the HTML entities a template escapes JSON with decoded, if
/// it has any.
fn html_decoded(text: &str) -> Option<String> {
    const ENTITIES: [(&str, &str); 8] = [
        ("&#34;", "\""),
        ("&quot;", "\""),
        ("&#39;", "'"),
        ("&#x27;", "'"),
        ("&apos;", "'"),
        ("&lt;", "<"),
        ("&gt;", ">"),
        // Last: `&amp;quot;` is the text `&quot;`, not a quote.
        ("&amp;", "&"),
    ];
    if !ENTITIES.iter().any(|(entity, _)| text.contains(entity)) {
        return None;
    }
    Some(
        ENTITIES
            .iter()
            .fold(text.to_string(), |t, (entity, plain)| {
                t.replace(entity, plain)
            }),
    )
}

fn parse_action(
    action: &str,
    input: Option<&str>,
    tools: &[ToolSpec],
) -> Result<(String, String), ProtocolViolation> {
    let action = action.trim_start();
    if is_whole_call(action) {
        return whole_call(action, input, tools);
    }
    // Decoration of the name (`` `read_file`[…] ``, `**read_file**`).
    let action = action.trim_start_matches(['`', '*']);
    let name_len = action
        .find(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.')))
        .unwrap_or(action.len());
    let (name, rest) = action.split_at(name_len);
    let tool = resolve(name, tools)?;
    let fail = |why: String| unparsable(why, Some(tool));
    // Closing decoration of the name (`` `read_file`[…] ``) and blanks.
    let rest = rest.trim_start_matches(['`', '*', ' ', '\t']);
    let (object, after) = match rest.chars().next() {
        Some('[' | '(') => {
            let end = bracketed_end(rest).map_err(|why| fail(format!("the arguments {why}")))?;
            let inner = rest.get(1..end - 1).unwrap_or_default().trim();
            (
                wrapped_object(inner).map_err(fail)?,
                rest.get(end..).unwrap_or_default(),
            )
        }
        Some('{') => leading_object(rest).map_err(fail)?,
        Some(':') => {
            let src = rest.get(1..).unwrap_or_default().trim_start();
            if !src.starts_with('{') {
                return Err(fail("after `name:` comes no `{…}` object".to_string()));
            }
            leading_object(src).map_err(fail)?
        }
        Some('\n') | None => {
            // The name alone: arguments follow on the next line, in an
            // Action Input, or there are none.
            let next = rest.trim_start();
            let next = skip_fence_opening(next);
            return match (input, next.starts_with('{')) {
                (Some(_), true) => Err(fail(
                    "the Action has arguments both under its name and in an Action Input"
                        .to_string(),
                )),
                (Some(src), false) => {
                    let (object, _) = leading_object(skip_fence_opening(src.trim_start()))
                        .map_err(|why| fail(format!("in the Action Input: {why}")))?;
                    Ok((tool.name.clone(), arguments(&object, tool)?))
                }
                (None, true) => {
                    let (object, _) = leading_object(next).map_err(fail)?;
                    Ok((tool.name.clone(), arguments(&object, tool)?))
                }
                (None, false) => Ok((tool.name.clone(), "{}".to_string())),
            };
        }
        Some(_) => {
            let line = rest.split('\n').next().unwrap_or_default();
            return Err(fail(format!(
                "after the tool name comes {}, which is not its arguments",
                quote(line.trim())
            )));
        }
    };
    if input.is_some() {
        return Err(fail(
            "the Action has both bracketed arguments and an Action Input".to_string(),
        ));
    }
    if let Some(other) = second_call(after, tools) {
        return Err(violation(
            ProtocolErrorKind::MultipleActions,
            format!(
                "the Action names a second tool call ({}); one Action calls one tool",
                quote(&other)
            ),
            Some(tool),
        ));
    }
    Ok((tool.name.clone(), arguments(&object, tool)?))
}

/// `{"name": …}`, `[{…}]`, `<tool_call>` or a code fence: a whole call.
fn is_whole_call(action: &str) -> bool {
    let compact: String = action
        .chars()
        .filter(|c| !c.is_whitespace())
        .take(8)
        .collect();
    compact.starts_with("{\"")
        || compact.starts_with("[{")
        || action.starts_with("<tool_call>")
        || action.starts_with("```")
}

fn whole_call(
    action: &str,
    input: Option<&str>,
    tools: &[ToolSpec],
) -> Result<(String, String), ProtocolViolation> {
    if input.is_some() {
        return Err(unparsable(
            "the Action is a whole call and also has an Action Input".to_string(),
            None,
        ));
    }
    let parsed = tool_call_format::parse(action, tools, ParseOptions::default())
        .map_err(|v| unparsable(v.detail, None))?;
    match parsed.calls.as_slice() {
        [call] => Ok((call.name.clone(), call.arguments.clone())),
        [] => Err(unparsable(
            format!("the Action holds {} and no call", quote(action.trim())),
            None,
        )),
        calls => Err(violation(
            ProtocolErrorKind::MultipleActions,
            format!(
                "the Action holds {} calls; one Action calls one tool",
                calls.len()
            ),
            None,
        )),
    }
}

/// The offered tool `name` means: itself, else its only case-insensitive,
/// `-`/`_` variant.
fn resolve<'t>(name: &str, tools: &'t [ToolSpec]) -> Result<&'t ToolSpec, ProtocolViolation> {
    if let Some(tool) = tools.iter().find(|t| t.name == name) {
        return Ok(tool);
    }
    let fold = |s: &str| s.to_lowercase().replace('-', "_");
    let wanted = fold(name);
    let matches: Vec<&ToolSpec> = tools.iter().filter(|t| fold(&t.name) == wanted).collect();
    match matches.as_slice() {
        [tool] => Ok(tool),
        [] => {
            let offered: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
            Err(unparsable(
                format!(
                    "the Action names {}, which is not an offered tool (offered: {})",
                    quote(name),
                    if offered.is_empty() {
                        "none".to_string()
                    } else {
                        quote(&offered.join(", "))
                    }
                ),
                None,
            ))
        }
        several => {
            let names: Vec<&str> = several.iter().map(|t| t.name.as_str()).collect();
            Err(unparsable(
                format!(
                    "the Action names {}, which could be any of {}; use the exact name",
                    quote(name),
                    quote(&names.join(", "))
                ),
                None,
            ))
        }
    }
}

/// The object inside `[…]` or `(…)`, braces optional.
fn wrapped_object(inner: &str) -> Result<String, String> {
    if inner.is_empty() {
        return Ok("{}".to_string());
    }
    if inner.starts_with('{') {
        let (object, rest) = leading_object(inner)?;
        if !rest.trim().is_empty() {
            return Err(format!(
                "hold more than one object (then {})",
                quote(rest.trim())
            ));
        }
        return Ok(object);
    }
    Ok(format!("{{{inner}}}"))
}

/// The `{…}` at the start of `src` and the text after it.
fn leading_object(src: &str) -> Result<(String, &str), String> {
    let end = bracketed_end(src).map_err(|why| format!("the arguments {why}"))?;
    Ok((
        src.get(..end).unwrap_or_default().to_string(),
        src.get(end..).unwrap_or_default(),
    ))
}

/// The arguments as JSON text, once they parse to one object without
/// copied placeholders.
fn arguments(object: &str, tool: &ToolSpec) -> Result<String, ProtocolViolation> {
    let parsed = relaxed_json::object(object).map_err(|why| {
        unparsable(
            format!("the arguments of {} {why}", quote(&tool.name)),
            Some(tool),
        )
    })?;
    if let Some((key, value)) = parsed.object.iter().find(|(k, v)| is_placeholder(k, v)) {
        return Err(unparsable(
            format!(
                "the argument {} of {} is a placeholder: {}",
                quote(key),
                quote(&tool.name),
                quote(&value.to_string())
            ),
            Some(tool),
        ));
    }
    Ok(if parsed.strict {
        object.to_string()
    } else {
        serde_json::Value::Object(parsed.object).to_string()
    })
}

/// Text after the arguments that calls another offered tool, if any.
fn second_call(after: &str, tools: &[ToolSpec]) -> Option<String> {
    let mut rest = after;
    while let Some(start) = rest.find(|c: char| c.is_alphanumeric() || c == '_') {
        let word = &rest[start..];
        let len = word
            .find(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.')))
            .unwrap_or(word.len());
        let (name, tail) = word.split_at(len);
        let opens = tail
            .trim_start_matches([' ', '\t', '`'])
            .starts_with(['[', '(', '{']);
        if opens && resolve(name, tools).is_ok() {
            return Some(name.to_string());
        }
        rest = tail;
    }
    None
}

/// Skips a Markdown code-fence opening (```` ```json ````).
fn skip_fence_opening(src: &str) -> &str {
    match src.strip_prefix("```") {
        Some(rest) => rest
            .find('\n')
            .and_then(|nl| rest.get(nl + 1..))
            .unwrap_or(""),
        None => src.trim_start_matches('`'),
    }
}

fn unparsable(detail: String, tool: Option<&ToolSpec>) -> ProtocolViolation {
    violation(ProtocolErrorKind::UnparsableAction, detail, tool)
}

/// A violation whose detail ends with the form to use.
fn violation(
    kind: ProtocolErrorKind,
    detail: String,
    tool: Option<&ToolSpec>,
) -> ProtocolViolation {
    let form = match tool {
        Some(tool) => render::action_example(tool),
        None => "Action: tool_name[{\"argument\": \"value\"}]".to_string(),
    };
    ProtocolViolation {
        kind,
        detail: format!("{detail}; write exactly one tool call as `{form}`"),
    }
}
