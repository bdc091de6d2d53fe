//! `prompt_tail_state`: the latest state snapshot rendered at the tail of a
//! request (SPEC E3). Never written back into the transcript, so snapshots
//! do not accumulate.
//!
//! Overflow order (seed 003 P4): the goal, blocking failures and blocking
//! data limitations always stay (a long goal only as its start, where the
//! request carries it whole: [`TailBudget::max_goal_tokens`]); then the
//! newest source-backed facts; then failed paths (merged by fingerprint),
//! data limitations, open questions and next steps, each within its own
//! limit. Past the token budget the
//! lowest-priority items go first, and what was left out is counted on a
//! line of its own — never dropped without a trace.

use super::count_tokens;
use super::AgentState;
use attest_protocol::{AgentStateItem, StateItemType};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock, PoisonError};

/// Limits of the tail (defaults from seed 003 P4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailBudget {
    pub max_tokens: usize,
    pub max_confirmed_facts: usize,
    pub max_failed_paths: usize,
    pub max_data_limitations: usize,
    pub max_open_questions: usize,
    pub max_next_steps: usize,
    /// The most tokens of the goal shown, for a request that also carries
    /// the user's message whole: a long request is then not repeated in
    /// full (and uncached) at every step, and the tail keeps to its budget.
    /// `None` shows it whole: after a compaction the tail may be the only
    /// whole copy.
    pub max_goal_tokens: Option<usize>,
}

impl Default for TailBudget {
    fn default() -> Self {
        TailBudget {
            max_tokens: 800,
            max_confirmed_facts: 20,
            max_failed_paths: 10,
            max_data_limitations: 10,
            max_open_questions: 10,
            max_next_steps: 5,
            max_goal_tokens: None,
        }
    }
}

/// A rendered tail and what it cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailRender {
    pub text: String,
    /// The text's tokens, counted line by line (see [`tail_tokens`]).
    pub tokens: usize,
    /// Items left out for the per-type limits or the token budget.
    pub omitted: usize,
}

/// Tokens of a tail, counted in pieces split at line breaks and remembered
/// per piece: the tail is rendered before every request and keeps most of
/// its lines from one step to the next, so re-tokenizing it whole each step
/// was most of a step's cost. A piece ends after a `\n` that is followed by
/// a non-blank character: cl100k's pre-tokenizer never joins across such a
/// break (blank lines and indentation it does join), so the sum equals the
/// whole text's count.
pub fn tail_tokens(text: &str) -> usize {
    // A pure function's memo, shared by the runs of a process; bounded so
    // a long-lived server does not grow it without end. Tokenizing happens
    // outside the lock, and a poisoned lock is still a valid memo.
    static PIECES: OnceLock<Mutex<HashMap<String, usize>>> = OnceLock::new();
    const MAX_PIECES: usize = 4096;
    let memo = PIECES.get_or_init(Default::default);
    let pieces = line_pieces(text);
    let known: Vec<Option<usize>> = {
        let memo = memo.lock().unwrap_or_else(PoisonError::into_inner);
        pieces.iter().map(|p| memo.get(*p).copied()).collect()
    };
    let mut fresh = Vec::new();
    let total = pieces
        .iter()
        .zip(known)
        .map(|(piece, known)| {
            known.unwrap_or_else(|| {
                let n = count_tokens(piece);
                fresh.push((piece.to_string(), n));
                n
            })
        })
        .sum();
    if !fresh.is_empty() {
        let mut memo = memo.lock().unwrap_or_else(PoisonError::into_inner);
        if memo.len() + fresh.len() > MAX_PIECES {
            memo.clear();
        }
        memo.extend(fresh);
    }
    total
}

/// `text` cut after every `\n` whose next character is not whitespace.
fn line_pieces(text: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    for (i, _) in text.match_indices('\n') {
        let next = text[i + 1..].chars().next();
        if next.is_some_and(|c| !c.is_whitespace()) {
            pieces.push(&text[start..=i]);
            start = i + 1;
        }
    }
    if start < text.len() {
        pieces.push(&text[start..]);
    }
    pieces
}

/// First line of the tail. Worded as reference data, not as a message: small
/// models used to reply to it ("I cannot run state, maintained by …") or
/// repeat its lines as their answer (issue 12, hole 7).
pub const TAIL_HEADER: &str = "[attest] Reference data for your next step, kept by the harness from tool receipts (not a message to reply to; do not repeat it as your answer):";

/// Sections in priority order; the last ones give way first.
const SECTIONS: [(&str, Section); 7] = [
    ("Goal", Section::Goal),
    ("Blocking (must be resolved or reported)", Section::Blocking),
    ("Confirmed facts (from receipts)", Section::Facts),
    ("Failed paths", Section::Failed),
    ("Data limitations", Section::Limitations),
    ("Open questions", Section::Questions),
    (
        "Next step (the model's own plan, unverified)",
        Section::NextSteps,
    ),
];

/// Where an active item is shown; `SECTIONS` order, so a section is also
/// an index (`Section::Goal as usize` is 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Section {
    Goal,
    Blocking,
    Facts,
    Failed,
    Limitations,
    Questions,
    NextSteps,
}

/// How many sections there are.
pub(super) const SECTION_COUNT: usize = SECTIONS.len();

impl Section {
    /// The one section that shows `item` while it is active.
    pub(super) fn of(item: &AgentStateItem) -> Section {
        use StateItemType as T;
        match item.item_type {
            T::Goal => Section::Goal,
            T::FailedPath | T::DataLimitation if item.blocking => Section::Blocking,
            T::ConfirmedFact => Section::Facts,
            T::FailedPath => Section::Failed,
            T::DataLimitation => Section::Limitations,
            T::OpenQuestion => Section::Questions,
            T::NextStep => Section::NextSteps,
        }
    }

    fn limit(self, b: &TailBudget) -> usize {
        match self {
            Section::Goal | Section::Blocking => usize::MAX,
            Section::Facts => b.max_confirmed_facts,
            Section::Failed => b.max_failed_paths,
            Section::Limitations => b.max_data_limitations,
            Section::Questions => b.max_open_questions,
            Section::NextSteps => b.max_next_steps,
        }
    }

    /// Whether the token budget may drop items of this section.
    fn droppable(self) -> bool {
        !matches!(self, Section::Goal | Section::Blocking)
    }
}

/// An item's line, `- content (N times) [refs]`, written onto `out`.
fn push_line(out: &mut String, item: &AgentStateItem) {
    out.push_str("- ");
    out.push_str(&item.content);
    if item.occurrences > 1 {
        let _ = write!(out, " ({} times)", item.occurrences);
    }
    out.push_str(" [");
    for (i, source) in item.source_refs.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(source);
    }
    out.push(']');
}

/// Render the active state within `budget`.
pub fn render_tail(state: &AgentState, budget: &TailBudget) -> TailRender {
    // Newest first within each section, cut to the per-type limit: the
    // state keeps each section's active items in that order, so a long
    // run's hundreds of facts are counted, not visited.
    let mut omitted = 0;
    let mut sections: Vec<(&str, Section, Vec<&AgentStateItem>)> = SECTIONS
        .iter()
        .map(|(title, section)| {
            let limit = section.limit(budget);
            let held = state.active_in(*section);
            omitted += held.saturating_sub(limit);
            let items = state.newest_in(*section).take(limit).collect();
            (*title, *section, items)
        })
        .collect();
    let goal = sections[Section::Goal as usize]
        .2
        .first()
        .map(|item| goal_text(&item.content, budget.max_goal_tokens));
    let goal = goal.as_deref();
    let mut text = compose(&sections, goal, omitted);
    // Over budget: drop the oldest item of the lowest-priority section that
    // may give way. Each text is counted once, and the count that ends the
    // loop is the one returned; a text of no more bytes than the budget has
    // no more tokens, so it is counted only at the end.
    let counted = loop {
        let counted = (text.len() > budget.max_tokens).then(|| tail_tokens(&text));
        if counted.is_none_or(|tokens| tokens <= budget.max_tokens) {
            break counted;
        }
        let Some((_, _, items)) = sections
            .iter_mut()
            .rev()
            .find(|(_, s, items)| s.droppable() && !items.is_empty())
        else {
            break counted;
        };
        items.pop();
        omitted += 1;
        text = compose(&sections, goal, omitted);
    };
    TailRender {
        tokens: counted.unwrap_or_else(|| tail_tokens(&text)),
        text,
        omitted,
    }
}

/// Said after a goal cut short, where the request carries it whole.
pub const GOAL_CUT_NOTE: &str = "… (cut here; the whole request is the user's message above)";

/// The goal as the tail shows it: whole, or its start within `cap` tokens
/// and [`GOAL_CUT_NOTE`].
fn goal_text(goal: &str, cap: Option<usize>) -> std::borrow::Cow<'_, str> {
    // No more bytes than `cap` is no more tokens than `cap`.
    let Some(cap) = cap.filter(|&cap| goal.len() > cap) else {
        return goal.into();
    };
    // Bytes first (a long request is never tokenized whole), then cut in
    // proportion to the tokens over: a cut or two.
    let mut start = crate::text::truncate_str(goal, cap * 6).0;
    loop {
        let tokens = tail_tokens(start);
        if tokens <= cap {
            break;
        }
        let shorter = (start.len() * cap / tokens).min(start.len() - 1);
        start = crate::text::truncate_str(start, shorter).0;
    }
    if start.len() == goal.len() {
        return goal.into();
    }
    format!("{}{GOAL_CUT_NOTE}", start.trim_end()).into()
}

fn compose(
    sections: &[(&str, Section, Vec<&AgentStateItem>)],
    goal: Option<&str>,
    omitted: usize,
) -> String {
    let mut out = String::from(TAIL_HEADER);
    for (title, section, items) in sections {
        if items.is_empty() {
            continue;
        }
        if *section == Section::Goal {
            out.push_str("\nGoal: ");
            out.push_str(goal.unwrap_or(&items[0].content));
            continue;
        }
        let _ = write!(out, "\n{title}:");
        for item in items {
            out.push('\n');
            push_line(&mut out, item);
        }
    }
    if omitted > 0 {
        let _ = write!(
            out,
            "\n({omitted} older item(s) omitted for length; they remain in the run's trace.)"
        );
    }
    out
}
