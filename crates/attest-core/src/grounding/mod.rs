//! Grounding (SPEC A9): each checkable value of a final answer — numbers
//! with their units, quoted strings, paths, URLs and domains, versions,
//! hashes, ports, identifiers in code spans — mapped to the calls whose
//! *output* contains it, to the user's prompt, or to earlier evidence of
//! the session. Pure: no I/O.
//!
//! The rule, also used by memory consolidation: a call grounds a value only
//! when its output contains the value and its own arguments do not (an
//! `echo` of the model's text proves nothing). The harness's own tools
//! (`tool_search`, `history`) ground nothing: their output is the harness's
//! text or a copy of calls that ground on their own.

mod extract;
#[cfg(test)]
mod proptests;
mod scan;
pub(crate) mod spans;
#[cfg(test)]
mod tests;

pub use extract::{checkable_values, found_in, Checkable};

use crate::engine::{HISTORY_TOOL, TOOL_SEARCH};
use attest_protocol::{
    CheckableKind, EffectClass, GroundedValue, Grounding, ReceiptStatus, TranscriptItem,
};
use std::collections::HashMap;

/// One tool call whose output can ground values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source<'a> {
    pub call_id: &'a str,
    pub tool_name: &'a str,
    /// What the model was shown (redacted, as logged).
    pub output: &'a str,
    /// The call's arguments as the model sent them.
    pub arguments: &'a str,
    /// Counts the harness measured: the receipt's match count and size.
    pub counts: Vec<u64>,
    /// The path the harness itself resolved and acted on (the receipt's
    /// `path`, for a call that succeeded): naming that file is grounded by
    /// the receipt, though the model chose it in its arguments.
    pub target: Option<&'a str>,
    /// An observation: the number of lines of its output counts too
    /// (`3 files` after a listing of three).
    pub observation: bool,
}

/// Everything an answer can be grounded in.
#[derive(Debug, Clone, Default)]
pub struct Evidence<'a> {
    /// Calls of this run.
    pub run: Vec<Source<'a>>,
    /// Calls of earlier runs of the session.
    pub session: Vec<Source<'a>>,
    /// What the user wrote: this run's prompt and earlier ones.
    pub prompts: Vec<&'a str>,
    /// The tools offered (naming one is not a claim about the world).
    pub tool_names: Vec<&'a str>,
}

impl<'a> Evidence<'a> {
    /// From this run's items and the session's earlier ones.
    pub fn from_items(
        run: &'a [TranscriptItem],
        session: &'a [TranscriptItem],
        tool_names: Vec<&'a str>,
    ) -> Self {
        let prompts = session
            .iter()
            .chain(run)
            .filter_map(|i| match i {
                TranscriptItem::UserInput { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        Evidence {
            run: sources(run),
            session: sources(session),
            prompts,
            tool_names,
        }
    }
}

/// The calls in `items` whose tool ran (`ok` or `error`) and is not one of
/// the harness's own, each with its arguments.
pub fn sources(items: &[TranscriptItem]) -> Vec<Source<'_>> {
    let arguments: HashMap<&str, &str> = items
        .iter()
        .filter_map(|i| match i {
            TranscriptItem::ToolCall {
                call_id, arguments, ..
            } => Some((call_id.as_str(), arguments.as_str())),
            _ => None,
        })
        .collect();
    items
        .iter()
        .filter_map(|item| match item {
            TranscriptItem::ToolResult {
                call_id,
                name,
                status: ReceiptStatus::Ok | ReceiptStatus::Error,
                output,
                receipt,
            } if name != TOOL_SEARCH && name != HISTORY_TOOL => {
                let mut counts = Vec::new();
                let target = receipt
                    .as_ref()
                    .filter(|r| r.status == ReceiptStatus::Ok)
                    .and_then(|r| r.evidence.path.as_deref());
                if let Some(r) = receipt {
                    counts.extend(r.evidence.match_count);
                    counts.extend(r.evidence.size_bytes);
                }
                Some(Source {
                    call_id,
                    tool_name: name,
                    output,
                    arguments: arguments.get(call_id.as_str()).copied().unwrap_or(""),
                    counts,
                    target,
                    observation: receipt
                        .as_ref()
                        .is_some_and(|r| r.effect == EffectClass::Observe),
                })
            }
            _ => None,
        })
        .collect()
}

/// Whether `source` grounds `value`: its output shows it (or the harness
/// counted it) and its own arguments do not.
pub fn grounds(value: &Checkable, source: &Source<'_>) -> bool {
    (found_in(value, source.output) || counted(value, source, &mut None))
        && !found_in(value, source.arguments)
}

/// `value` is the path the source's receipt acted on.
fn is_target(value: &Checkable, source: &Source<'_>) -> bool {
    fn clean(p: &str) -> &str {
        p.trim_start_matches("./").trim_end_matches('/')
    }
    value.kind == CheckableKind::Path
        && source
            .target
            .is_some_and(|t| clean(t) == clean(&value.value))
}

/// Whether the harness counted `value` for `source`: a count on its
/// receipt, or for an observation the number of lines of its output
/// (`lines` caches it: counting is a pass over the output).
fn counted(value: &Checkable, source: &Source<'_>, lines: &mut Option<u64>) -> bool {
    counted_as(count_of(value), source, lines)
}

/// The count a value states, if it is a whole number (`1,024` → 1024).
fn count_of(value: &Checkable) -> Option<u64> {
    if value.kind != CheckableKind::Number {
        return None;
    }
    value.value.replace(',', "").parse::<u64>().ok()
}

fn counted_as(count: Option<u64>, source: &Source<'_>, lines: &mut Option<u64>) -> bool {
    let Some(n) = count else {
        return false;
    };
    source.counts.contains(&n)
        || (source.observation && n == *lines.get_or_insert_with(|| line_count(source.output)))
}

/// Lines of `text`, a last one without its newline included (0 when empty).
fn line_count(text: &str) -> u64 {
    let newlines = text.bytes().filter(|&b| b == b'\n').count() as u64;
    newlines + u64::from(!text.is_empty() && !text.ends_with('\n'))
}

/// Map each checkable value of `answer` to where it is found.
pub fn ground(answer: &str, evidence: &Evidence<'_>) -> Grounding {
    let values = checkable_values(answer);
    let matcher = Matcher::new(&values);
    let mut in_prompt = vec![false; values.len()];
    for prompt in &evidence.prompts {
        for (i, found) in matcher.found_in(&values, prompt).into_iter().enumerate() {
            in_prompt[i] |= found;
        }
    }
    let mut mapped: Vec<GroundedValue> = values
        .iter()
        .zip(in_prompt)
        .map(|(c, in_prompt)| GroundedValue {
            value: c.value.clone(),
            kind: c.kind,
            unit: c.unit.clone(),
            call_ids: Vec::new(),
            session_call_ids: Vec::new(),
            in_prompt,
            tool_name: evidence.tool_names.contains(&c.value.as_str()),
            acted_on: evidence.run.iter().any(|s| is_target(c, s)),
        })
        .collect();
    if !values.is_empty() {
        for (sources, session) in [(&evidence.run, false), (&evidence.session, true)] {
            // Which sources ground each value, then each list built once
            // at its size (a value can be in every output).
            let mut by_value: Vec<Vec<u32>> = vec![Vec::new(); values.len()];
            for (s, source) in sources.iter().enumerate() {
                for i in matcher.grounded_by(&values, source) {
                    by_value[i].push(s as u32);
                }
            }
            for (value, grounding) in mapped.iter_mut().zip(by_value) {
                let ids = if session {
                    &mut value.session_call_ids
                } else {
                    &mut value.call_ids
                };
                ids.reserve_exact(grounding.len());
                ids.extend(
                    grounding
                        .iter()
                        .map(|&s| sources[s as usize].call_id.to_string()),
                );
            }
        }
    }
    Grounding::from_values(mapped)
}

/// Every needle of every value, found in one pass over a text's words
/// (`scan.rs`; `benches/grounding.rs`).
struct Matcher {
    index: scan::WordIndex,
    /// Each value's [`count_of`].
    counts: Vec<Option<u64>>,
}

impl Matcher {
    fn new(values: &[Checkable]) -> Self {
        let needles: Vec<(usize, CheckableKind, String)> = values
            .iter()
            .enumerate()
            .flat_map(|(i, c)| {
                extract::needles(c)
                    .into_iter()
                    .filter(|n| !n.is_empty())
                    .map(move |n| (i, c.kind, n))
            })
            .collect();
        Matcher {
            index: scan::WordIndex::new(needles.iter().map(|(i, k, n)| (*i, *k, n.as_str()))),
            counts: values.iter().map(count_of).collect(),
        }
    }

    /// Which values occur in `text`.
    fn found_in(&self, values: &[Checkable], text: &str) -> Vec<bool> {
        let mut found = vec![false; values.len()];
        self.index.find(text, &mut found);
        found
    }

    /// Indices of the values `source` grounds.
    fn grounded_by(&self, values: &[Checkable], source: &Source<'_>) -> Vec<usize> {
        let found = self.found_in(values, source.output);
        let echoed = self.found_in(values, source.arguments);
        let mut lines = None;
        (0..values.len())
            .filter(|&i| (found[i] || counted_as(self.counts[i], source, &mut lines)) && !echoed[i])
            .collect()
    }
}
