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
#[cfg(test)]
mod tests;

pub use extract::{checkable_values, found_in, Checkable};

use crate::engine::{HISTORY_TOOL, TOOL_SEARCH};
use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
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
    /// Counts the harness measured: the receipt's match count and size,
    /// and for an observation the number of non-empty lines of its output
    /// (`3 files` after a listing of three).
    pub counts: Vec<u64>,
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
                if let Some(r) = receipt {
                    counts.extend(r.evidence.match_count);
                    counts.extend(r.evidence.size_bytes);
                    if r.effect == EffectClass::Observe {
                        counts.push(output.lines().filter(|l| !l.trim().is_empty()).count() as u64);
                    }
                }
                Some(Source {
                    call_id,
                    tool_name: name,
                    output,
                    arguments: arguments.get(call_id.as_str()).copied().unwrap_or(""),
                    counts,
                })
            }
            _ => None,
        })
        .collect()
}

/// Whether `source` grounds `value`: its output shows it (or the harness
/// counted it) and its own arguments do not.
pub fn grounds(value: &Checkable, source: &Source<'_>) -> bool {
    (found_in(value, source.output) || counted(value, &source.counts))
        && !found_in(value, source.arguments)
}

fn counted(value: &Checkable, counts: &[u64]) -> bool {
    value.kind == CheckableKind::Number
        && value
            .value
            .replace(',', "")
            .parse::<u64>()
            .is_ok_and(|n| counts.contains(&n))
}

/// Map each checkable value of `answer` to where it is found.
pub fn ground(answer: &str, evidence: &Evidence<'_>) -> Grounding {
    let values = checkable_values(answer);
    let mut mapped: Vec<GroundedValue> = values
        .iter()
        .map(|c| GroundedValue {
            value: c.value.clone(),
            kind: c.kind,
            unit: c.unit.clone(),
            call_ids: Vec::new(),
            session_call_ids: Vec::new(),
            in_prompt: evidence.prompts.iter().any(|p| found_in(c, p)),
            tool_name: evidence.tool_names.contains(&c.value.as_str()),
        })
        .collect();
    if !values.is_empty() {
        let matcher = Matcher::new(&values);
        for (sources, session) in [(&evidence.run, false), (&evidence.session, true)] {
            for source in sources {
                for i in matcher.grounded_by(&values, source) {
                    let ids = if session {
                        &mut mapped[i].session_call_ids
                    } else {
                        &mut mapped[i].call_ids
                    };
                    ids.push(source.call_id.to_string());
                }
            }
        }
    }
    Grounding::from_values(mapped)
}

/// Every needle of every value in one automaton: each output is scanned
/// once, whatever the number of values (50 outputs of 10 KB in well under
/// a millisecond; `benches/grounding.rs`).
struct Matcher {
    automaton: Option<AhoCorasick>,
    /// Pattern index → (value index, needle).
    patterns: Vec<(usize, String)>,
}

impl Matcher {
    fn new(values: &[Checkable]) -> Self {
        let patterns: Vec<(usize, String)> = values
            .iter()
            .enumerate()
            .flat_map(|(i, c)| {
                extract::needles(c)
                    .into_iter()
                    .filter(|n| !n.is_empty())
                    .map(move |n| (i, n))
            })
            .collect();
        let automaton = AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::Standard)
            .build(patterns.iter().map(|(_, n)| n.as_str()))
            .ok();
        Matcher {
            automaton,
            patterns,
        }
    }

    /// Indices of the values `source` grounds.
    fn grounded_by(&self, values: &[Checkable], source: &Source<'_>) -> Vec<usize> {
        let mut found = vec![false; values.len()];
        let mut left = values.len();
        match &self.automaton {
            Some(ac) => {
                let hay = source.output;
                for m in ac.find_overlapping_iter(hay) {
                    let (i, needle) = &self.patterns[m.pattern().as_usize()];
                    if found[*i] {
                        continue;
                    }
                    let kind = values[*i].kind;
                    let exact = extract::case_insensitive(kind)
                        || hay.get(m.start()..m.end()) == Some(needle.as_str());
                    if exact && extract::stands_alone(kind, needle, hay, m.start(), m.end()) {
                        found[*i] = true;
                        left -= 1;
                        if left == 0 {
                            break;
                        }
                    }
                }
            }
            // Unreachable for patterns this short; fall back to the plain rule.
            None => {
                for (i, c) in values.iter().enumerate() {
                    found[i] = found_in(c, source.output);
                }
            }
        }
        (0..values.len())
            .filter(|&i| {
                (found[i] || counted(&values[i], &source.counts))
                    && !found_in(&values[i], source.arguments)
            })
            .collect()
    }
}
