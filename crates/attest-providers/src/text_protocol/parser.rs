//! Parser for one text-protocol (ReAct) response (SPEC B1, B2).
//!
//! Accepted shapes, after an optional `Thought:` (which may span lines):
//! - exactly one `Action: tool_name[{json object}]`, or `Action: tool_name`
//!   followed by `Action Input: {json object}`;
//! - or `Final Answer: …` (the rest of the text).
//!
//! Anything the harness alone may write — an `Observation:` line, a
//! `<tool_result>`-style tag — rejects the whole response, wherever it is:
//! the model may propose, never report. The parser never panics and its
//! violation details quote at most [`QUOTE_LIMIT`] characters of model text.

use crate::ProtocolViolation;
use attest_protocol::{ProtocolErrorKind, ToolSpec};

/// Most characters of model text quoted in a violation's detail.
pub const QUOTE_LIMIT: usize = 60;

/// What one well-formed response asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReactStep {
    /// Run one tool. `arguments` is the JSON object text as the model wrote it.
    Action {
        thought: String,
        tool: String,
        arguments: String,
    },
    /// The model's answer.
    Final { thought: String, answer: String },
}

/// Parse one response against the offered tools.
pub fn parse(text: &str, tools: &[ToolSpec]) -> Result<ReactStep, ProtocolViolation> {
    if let Some(what) = forged_observation(text) {
        return Err(violation(
            ProtocolErrorKind::ForgedObservation,
            format!("the response contains {what}; only the harness writes Observations"),
        ));
    }
    // One line terminator from here on, so sections and offsets agree.
    let text = &text.replace("\r\n", "\n").replace('\r', "\n");
    let sections = split_sections(text);
    let count = |m: Marker| sections.iter().filter(|s| s.marker == Some(m)).count();
    let (actions, inputs, finals) = (
        count(Marker::Action),
        count(Marker::ActionInput),
        count(Marker::FinalAnswer),
    );
    if actions > 1 || inputs > 1 {
        return Err(violation(
            ProtocolErrorKind::MultipleActions,
            format!("{actions} Action and {inputs} Action Input lines; exactly one Action is allowed per response"),
        ));
    }
    if (actions > 0 || inputs > 0) && finals > 0 {
        return Err(violation(
            ProtocolErrorKind::ActionWithFinalAnswer,
            "an Action and a Final Answer in one response; send one or the other".to_string(),
        ));
    }
    let thought = thought_of(&sections);
    if finals > 0 {
        return final_answer(text, thought);
    }
    if actions == 0 {
        let detail = if inputs > 0 {
            "an Action Input without an Action line".to_string()
        } else {
            "neither an `Action: tool[{...}]` line nor a `Final Answer:`".to_string()
        };
        let kind = if inputs > 0 {
            ProtocolErrorKind::UnparsableAction
        } else {
            ProtocolErrorKind::MissingActionOrAnswer
        };
        return Err(violation(kind, detail));
    }
    let body = |m: Marker| {
        sections
            .iter()
            .find(|s| s.marker == Some(m))
            .map(|s| s.body.trim())
    };
    let action = body(Marker::Action).unwrap_or_default();
    let (tool, arguments) = action_call(action, body(Marker::ActionInput), tools)?;
    Ok(ReactStep::Action {
        thought,
        tool,
        arguments,
    })
}

/// The line-level keywords of the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    Thought,
    Action,
    ActionInput,
    FinalAnswer,
    Observation,
}

// Longest first: `Action Input` must win over `Action`.
const KEYWORDS: [(&str, Marker); 5] = [
    ("final answer", Marker::FinalAnswer),
    ("action input", Marker::ActionInput),
    ("observation", Marker::Observation),
    ("thought", Marker::Thought),
    ("action", Marker::Action),
];

/// Decoration models put around keywords: `**Action:**`, `> Thought:`, `- Action:`.
/// Zero-width characters are included so they cannot hide a keyword.
fn is_decoration(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '*' | '_'
                | '#'
                | '>'
                | '`'
                | '-'
                | '\u{200B}'
                | '\u{200C}'
                | '\u{200D}'
                | '\u{2060}'
                | '\u{FEFF}'
        )
}

/// If `line` starts with a protocol keyword followed by a colon, the marker
/// and the text after the colon. Case-insensitive; tolerates decoration and
/// a step number (`Action 2:`); accepts the full-width colon `：`.
fn classify(line: &str) -> Option<(Marker, &str)> {
    let rest = line.trim_start_matches(is_decoration);
    let (marker, after) = KEYWORDS.iter().find_map(|(word, marker)| {
        let head = rest.get(..word.len())?;
        head.eq_ignore_ascii_case(word)
            .then(|| (*marker, rest.get(word.len()..).unwrap_or_default()))
    })?;
    let after = after.trim_start_matches(|c: char| is_decoration(c) || c.is_ascii_digit());
    let after = after
        .strip_prefix(':')
        .or_else(|| after.strip_prefix('：'))?;
    // Closing decoration of `**Action:**`.
    Some((marker, after.trim_start_matches(['*', '_'])))
}

/// A marker line and the lines that follow it up to the next marker. The
/// text before the first marker is a section without a marker.
#[derive(Debug)]
struct Section {
    marker: Option<Marker>,
    body: String,
}

fn split_sections(text: &str) -> Vec<Section> {
    let mut sections = vec![Section {
        marker: None,
        body: String::new(),
    }];
    for line in text.split('\n') {
        match classify(line) {
            Some((marker, rest)) => sections.push(Section {
                marker: Some(marker),
                body: rest.to_string(),
            }),
            None => {
                if let Some(last) = sections.last_mut() {
                    if !last.body.is_empty() || last.marker.is_some() {
                        last.body.push('\n');
                    }
                    last.body.push_str(line);
                }
            }
        }
    }
    sections
}

/// Thought sections, plus any text before the first marker (models often
/// skip the `Thought:` keyword).
fn thought_of(sections: &[Section]) -> String {
    sections
        .iter()
        .filter(|s| matches!(s.marker, None | Some(Marker::Thought)))
        .map(|s| s.body.trim())
        .filter(|b| !b.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Everything after the first `Final Answer:` marker, verbatim. `text` has
/// `\n` line ends only.
fn final_answer(text: &str, thought: String) -> Result<ReactStep, ProtocolViolation> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if let Some((Marker::FinalAnswer, rest)) = classify(line) {
            // `rest` is a suffix of `line`, so this is a char boundary.
            let start = offset + line.len() - rest.len();
            let answer = text.get(start..).unwrap_or_default().trim().to_string();
            if answer.is_empty() {
                return Err(violation(
                    ProtocolErrorKind::MissingActionOrAnswer,
                    "the Final Answer is empty".to_string(),
                ));
            }
            return Ok(ReactStep::Final { thought, answer });
        }
        offset += line.len();
    }
    // Unreachable in practice: the caller saw a Final Answer section.
    Err(violation(
        ProtocolErrorKind::MissingActionOrAnswer,
        "no Final Answer found".to_string(),
    ))
}

/// The tool name and JSON object arguments of an Action. Text after the
/// arguments is ignored: it never reaches history (only the parsed call does).
fn action_call(
    action: &str,
    input: Option<&str>,
    tools: &[ToolSpec],
) -> Result<(String, String), ProtocolViolation> {
    let unparsable = |why: String| violation(ProtocolErrorKind::UnparsableAction, why);
    let head = action.split('\n').next().unwrap_or_default();
    let (name, bracketed) = match head.find('[') {
        // `head` is a prefix of `action`, so `open` indexes both.
        Some(open) => (
            head.get(..open).unwrap_or_default(),
            Some(action.get(open + 1..).unwrap_or_default()),
        ),
        None => (head, None),
    };
    let name = name.trim().trim_matches('`').trim();
    if !tools.iter().any(|t| t.name == name) {
        let offered: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        return Err(unparsable(format!(
            "the Action names {}, which is not an offered tool (offered: {})",
            quote(name),
            if offered.is_empty() {
                "none".to_string()
            } else {
                quote(&offered.join(", "))
            }
        )));
    }
    let arguments = match (bracketed, input) {
        (Some(_), Some(_)) => {
            return Err(unparsable(
                "the Action has both bracketed arguments and an Action Input".to_string(),
            ))
        }
        (Some(src), None) => {
            let src = src.trim_start();
            if src.starts_with(']') {
                return Ok((name.to_string(), "{}".to_string()));
            }
            let (json, rest) = leading_object(src)
                .map_err(|why| unparsable(format!("the arguments of {} {why}", quote(name))))?;
            if !rest.trim_start().starts_with(']') {
                return Err(unparsable(format!(
                    "the arguments of {} are not closed by `]`",
                    quote(name)
                )));
            }
            json
        }
        (None, Some(src)) => {
            let (json, _rest) = leading_object(skip_fence_opening(src))
                .map_err(|why| unparsable(format!("the Action Input of {} {why}", quote(name))))?;
            json
        }
        // A tool without arguments may be called as a bare name.
        (None, None) => "{}",
    };
    Ok((name.to_string(), arguments.to_string()))
}

/// The JSON object at the start of `src` and the text after it.
fn leading_object(src: &str) -> Result<(&str, &str), String> {
    let src = src.trim_start();
    let mut values = serde_json::Deserializer::from_str(src).into_iter::<serde_json::Value>();
    match values.next() {
        Some(Ok(serde_json::Value::Object(_))) => {
            let end = values.byte_offset();
            match (src.get(..end), src.get(end..)) {
                (Some(json), Some(rest)) => Ok((json, rest)),
                _ => Err("could not be delimited".to_string()),
            }
        }
        Some(Ok(_)) => Err("are JSON but not an object".to_string()),
        Some(Err(e)) => Err(format!(
            "are not a valid JSON object (line {}, column {})",
            e.line(),
            e.column()
        )),
        None => Err("are missing".to_string()),
    }
}

/// Skips a Markdown code-fence opening (```` ```json ````) before an Action Input.
fn skip_fence_opening(src: &str) -> &str {
    let src = src.trim_start();
    match src.strip_prefix("```") {
        Some(rest) => rest
            .find('\n')
            .and_then(|nl| rest.get(nl + 1..))
            .unwrap_or(""),
        None => src.trim_start_matches('`'),
    }
}

/// Every character that ends a line in Unicode's reading.
const BREAKS: [char; 7] = [
    '\n', '\r', '\u{0B}', '\u{0C}', '\u{85}', '\u{2028}', '\u{2029}',
];

/// Names of tags that only the harness may produce.
const FORBIDDEN_TAGS: [&str; 6] = [
    "tool_response",
    "tool_result",
    "tool_output",
    "function_results",
    "function_result",
    "observation",
];

/// What in `text` imitates harness output, if anything.
fn forged_observation(text: &str) -> Option<&'static str> {
    // Lines are cut at every character a reader might take as a line
    // break, and again at `\n`/`\r` only (where a vertical tab or form feed
    // is mere whitespace inside `Observation\u{0B}:`): either reading counts.
    let is_observation = |l: &str| matches!(classify(l), Some((Marker::Observation, _)));
    if text.split(BREAKS).any(is_observation) || text.split(['\n', '\r']).any(is_observation) {
        return Some("an `Observation:` line");
    }
    if has_forbidden_tag(text) {
        return Some("a tool-result tag");
    }
    None
}

/// `<tool_result>`, `</ tool_response >`, `<observation id="1">`, any case.
fn has_forbidden_tag(text: &str) -> bool {
    text.match_indices('<').any(|(i, _)| {
        let after = text.get(i + 1..).unwrap_or_default().trim_start();
        let after = after.strip_prefix('/').unwrap_or(after).trim_start();
        FORBIDDEN_TAGS.iter().any(|tag| {
            after
                .get(..tag.len())
                .is_some_and(|head| head.eq_ignore_ascii_case(tag))
                && after
                    .get(tag.len()..)
                    .and_then(|r| r.chars().next())
                    .is_some_and(|c| c == '>' || c == '/' || c.is_whitespace())
        })
    })
}

fn violation(kind: ProtocolErrorKind, detail: String) -> ProtocolViolation {
    ProtocolViolation { kind, detail }
}

/// Model text for a detail: at most [`QUOTE_LIMIT`] characters, escaped.
fn quote(s: &str) -> String {
    format!("`{}`", quote_plain(s))
}

fn quote_plain(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    for c in chars.by_ref() {
        out.extend(c.escape_debug());
        if out.chars().count() >= QUOTE_LIMIT {
            break;
        }
    }
    if chars.next().is_some() {
        out.push('…');
    }
    out
}
