//! Parser for one text-protocol (ReAct) response (SPEC B1, B2).
//!
//! Accepted shapes, after an optional `Thought:` (which may span lines):
//! - exactly one `Action:` naming one tool with one arguments object, in
//!   any of the spellings of `text_protocol::action` (`tool_name[{json object}]`
//!   is the one the prompt teaches), or `Action: tool_name` followed by
//!   `Action Input: {json object}`;
//! - or `Final Answer: …` (the rest of the text).
//!
//! Anything the harness alone may write — an `Observation:` line, a
//! `<tool_result>`-style tag, in any spelling [`attest_core::detect_forged_observation`] reads —
//! rejects the whole response, wherever it is: the model may propose, never
//! report. The leniency is for the Action only. The parser never panics and
//! its violation details quote at most [`QUOTE_LIMIT`] characters of model
//! text.

use super::action::action_call;
use crate::ProtocolViolation;
use attest_core::detect_forged_observation;
use attest_protocol::{ProtocolErrorKind, ToolSpec};

/// Most characters of model text quoted in a violation's detail.
pub use crate::tool_call_format::QUOTE_LIMIT;

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

/// Parse one response against the offered tools, with no tool output to
/// quote.
pub fn parse(text: &str, tools: &[ToolSpec]) -> Result<ReactStep, ProtocolViolation> {
    parse_quoting(text, tools, [])
}

/// Parse one response against the offered tools; a faithful quote of one
/// of `real_outputs` (the run's tool outputs) is not a forgery
/// ([`attest_core::detect_forged_observation`]).
pub fn parse_quoting<'a>(
    text: &str,
    tools: &[ToolSpec],
    real_outputs: impl IntoIterator<Item = &'a str>,
) -> Result<ReactStep, ProtocolViolation> {
    if let Some(forgery) = detect_forged_observation(text, real_outputs) {
        return Err(violation(
            ProtocolErrorKind::ForgedObservation,
            format!(
                "the response contains {}; only the harness writes Observations",
                forgery.describe()
            ),
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

fn violation(kind: ProtocolErrorKind, detail: String) -> ProtocolViolation {
    ProtocolViolation { kind, detail }
}
