//! Declared compaction (SPEC E4): when the history sent to the model grows
//! past its budget, the older part is replaced by a factual summary whose
//! lines keep their source refs (call ids). This is an explicit transition:
//! a `Compaction` item with a `CacheResetPoint` goes to the log, the
//! replaced items are copied to the archive, and the `history` tool is
//! offered so the model can fetch any archived call's full result.
//! Call/result pairs are never split.

use super::run::Run;
use super::{prefix_hash, EngineError};
use crate::state::count_tokens;
use attest_protocol::{
    AssistantPhase, CacheResetPoint, CacheResetReason, HarnessMessageKind, LogEntry, TranscriptItem,
};
use std::collections::{HashMap, HashSet};

/// Token budgets for the history part of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionPolicy {
    /// Compact when the history (earlier turns + this run) exceeds this.
    pub history_budget_tokens: usize,
    /// How much recent history to keep verbatim when compacting.
    pub keep_recent_tokens: usize,
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        CompactionPolicy {
            history_budget_tokens: 24_000,
            keep_recent_tokens: 8_000,
        }
    }
}

/// First line of every compaction summary.
pub const SUMMARY_HEADER: &str = "[attest] Summary of earlier history, compacted at a declared reset point. Every line names its source; the full originals are archived: call the `history` tool with a call id to read one.";

impl Run<'_> {
    /// The latest compaction of this run, if any: (index, covers, summary).
    pub(super) fn latest_compaction(&self) -> Option<(usize, usize, &str)> {
        self.items
            .iter()
            .enumerate()
            .rev()
            .find_map(|(i, item)| match item {
                TranscriptItem::Compaction {
                    covers, summary, ..
                } => Some((i, *covers, summary.as_str())),
                _ => None,
            })
    }

    /// What requests are built from: earlier turns and this run's items, or
    /// after a compaction, its summary and the items it did not cover.
    pub(super) fn request_history(&self) -> Vec<TranscriptItem> {
        match self.latest_compaction() {
            Some((_, covers, summary)) => {
                let mut out = vec![TranscriptItem::HarnessMessage {
                    kind: HarnessMessageKind::CompactionSummary,
                    text: summary.to_string(),
                }];
                out.extend(
                    self.items[covers.min(self.items.len())..]
                        .iter()
                        .filter(|i| !matches!(i, TranscriptItem::Compaction { .. }))
                        .cloned(),
                );
                out
            }
            None => self
                .cfg
                .prior_history
                .iter()
                .chain(&self.items)
                .cloned()
                .collect(),
        }
    }

    /// The prefix the cache can reuse: system, tools and any compaction
    /// summary. It changes only at a declared reset point.
    pub(super) fn current_prefix_hash(&self) -> String {
        let mut system = self.system.clone();
        if let Some((_, _, summary)) = self.latest_compaction() {
            system.push('\u{0}');
            system.push_str(summary);
        }
        prefix_hash(&system, &self.visible_tools())
    }

    /// Compact if the history is over budget (or `force`). Returns whether
    /// a compaction happened.
    pub(super) fn maybe_compact(&mut self, step: u32, force: bool) -> Result<bool, EngineError> {
        let policy = self.cfg.compaction.clone();
        let history = self.request_history();
        let tokens = count_tokens(&serde_json::to_string(&history).unwrap_or_default());
        if !force && tokens <= policy.history_budget_tokens {
            return Ok(false);
        }
        let start = self.latest_compaction().map_or(0, |(_, covers, _)| covers);
        let Some(cut) = self.cut_point(start, policy.keep_recent_tokens) else {
            return Ok(false);
        };
        let before = self.current_prefix_hash();
        let prior: &[TranscriptItem] = match self.latest_compaction() {
            Some(_) => &[],
            None => &self.cfg.prior_history,
        };
        let run_part = &self.items[start..cut];
        let previous = self.latest_compaction().map(|(_, _, s)| s.to_string());
        let summary = summarize(
            previous.as_deref(),
            prior,
            run_part,
            policy.history_budget_tokens / 4,
        );
        let covered: Vec<TranscriptItem> = prior.iter().chain(run_part).cloned().collect();
        let source_refs: Vec<String> = covered
            .iter()
            .filter_map(|i| match i {
                TranscriptItem::ToolCall { call_id, .. } => Some(call_id.clone()),
                _ => None,
            })
            .collect();
        for item in &covered {
            self.archive_item(item)?;
        }
        self.compacted = true;
        let mut reset_point = CacheResetPoint {
            reason: if force {
                CacheResetReason::ManualCompaction
            } else {
                CacheResetReason::TokenBudgetCompaction
            },
            prefix_hash_before: before,
            prefix_hash_after: String::new(),
            source_refs,
            created_at: chrono::Utc::now(),
        };
        // The hash after includes the new summary and the `history` tool.
        self.items.push(TranscriptItem::Compaction {
            reset_point: reset_point.clone(),
            summary: summary.clone(),
            covers: cut,
        });
        reset_point.prefix_hash_after = self.current_prefix_hash();
        self.items.pop();
        let archived = covered.len();
        self.push(TranscriptItem::Compaction {
            reset_point: reset_point.clone(),
            summary,
            covers: cut,
        })?;
        self.emit(attest_protocol::EventBody::Compacted {
            step,
            reset_point,
            archived_items: archived,
            history_tokens_before: tokens,
        })?;
        Ok(true)
    }

    /// The largest index in `start..len` where history can be cut without
    /// splitting a call from its result, keeping at most `keep_recent`
    /// tokens after it. `None` when no cut covers anything new.
    fn cut_point(&self, start: usize, keep_recent: usize) -> Option<usize> {
        let mut tail_tokens = 0usize;
        let mut best = None;
        // Before any compaction, earlier turns alone are worth covering.
        let lowest = if self.latest_compaction().is_none() && !self.cfg.prior_history.is_empty() {
            start
        } else {
            start + 1
        };
        for i in (lowest..self.items.len()).rev() {
            tail_tokens += count_tokens(&serde_json::to_string(&self.items[i]).unwrap_or_default());
            if tail_tokens > keep_recent {
                break;
            }
            if self.is_clean_boundary(i) {
                best = Some(i);
            }
        }
        best.or_else(|| {
            // Even the newest block is over the keep budget: cut just before it.
            (lowest..self.items.len())
                .rev()
                .find(|&i| self.is_clean_boundary(i))
        })
    }

    /// No call before `i` is waiting for a result at or after `i`, and `i`
    /// does not start with a result.
    fn is_clean_boundary(&self, i: usize) -> bool {
        if matches!(self.items[i], TranscriptItem::ToolResult { .. }) {
            return false;
        }
        let mut open: HashSet<&str> = HashSet::new();
        for item in &self.items[..i] {
            match item {
                TranscriptItem::ToolCall { call_id, .. } => {
                    open.insert(call_id);
                }
                TranscriptItem::ToolResult { call_id, .. } => {
                    open.remove(call_id.as_str());
                }
                _ => {}
            }
        }
        open.is_empty()
    }

    fn archive_item(&mut self, item: &TranscriptItem) -> Result<(), EngineError> {
        if let TranscriptItem::ToolCall { call_id, .. }
        | TranscriptItem::ToolResult { call_id, .. } = item
        {
            self.archive
                .lock()
                .map_err(|_| EngineError::Archive)?
                .entry(call_id.clone())
                .or_default()
                .push(item.clone());
        }
        self.log.append(&LogEntry::Archive { item: item.clone() })?;
        Ok(())
    }
}

/// A factual summary: user requests, each call with its outcome and
/// evidence (by call id), and the answers earlier turns accepted. No model
/// narration, and none of this run's answers (they were not accepted, or
/// the run would have ended).
///
/// The summary has its own budget (`max_tokens`): past it the oldest lines
/// give way to a count, so repeated compaction cannot grow it without bound
/// (the originals stay archived and retrievable by call id).
fn summarize(
    previous: Option<&str>,
    prior: &[TranscriptItem],
    run_part: &[TranscriptItem],
    max_tokens: usize,
) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut omitted = 0usize;
    if let Some(prev) = previous {
        for line in prev.lines().skip(1) {
            match parse_omitted(line) {
                Some(n) => omitted += n,
                None => lines.push(line.to_string()),
            }
        }
    }
    let run_items = run_part
        .iter()
        .filter(|i| !matches!(i, TranscriptItem::AssistantOutput { .. }));
    let mut calls: HashMap<&str, (&str, &str)> = HashMap::new();
    for item in prior.iter().chain(run_items) {
        match item {
            TranscriptItem::UserInput { text } => {
                lines.push(format!("- user asked: {}", clip(text, 300)))
            }
            TranscriptItem::ToolCall {
                call_id,
                name,
                arguments,
            } => {
                calls.insert(call_id, (name, arguments));
            }
            TranscriptItem::ToolResult {
                call_id,
                status,
                output,
                receipt,
                ..
            } => {
                let (name, args) = calls.get(call_id.as_str()).copied().unwrap_or(("?", ""));
                let evidence = receipt
                    .as_ref()
                    .map(|r| serde_json::to_string(&r.evidence).unwrap_or_default())
                    .unwrap_or_default();
                lines.push(format!(
                    "- [{call_id}] {name} {} → {}{} {}",
                    clip(args, 120),
                    status.as_str(),
                    if evidence.is_empty() || evidence == "{}" {
                        String::new()
                    } else {
                        format!(" {evidence}")
                    },
                    clip(output, 160)
                ));
            }
            TranscriptItem::AssistantOutput {
                text,
                phase: AssistantPhase::Answer,
                ..
            } => {
                lines.push(format!("- answer given: {}", clip(text, 300)));
            }
            _ => {}
        }
    }
    // Drop the oldest lines until the summary fits its budget.
    let mut start = 0;
    let mut total: usize = lines.iter().map(|l| count_tokens(l) + 1).sum();
    while total + count_tokens(SUMMARY_HEADER) > max_tokens && start < lines.len() {
        total -= count_tokens(&lines[start]) + 1;
        start += 1;
    }
    omitted += start;
    let mut out = vec![SUMMARY_HEADER.to_string()];
    if omitted > 0 {
        out.push(format!(
            "{OMITTED_PREFIX}{omitted} older entries are archived but not listed here)"
        ));
    }
    out.extend(lines.drain(start..));
    out.join("\n")
}

const OMITTED_PREFIX: &str = "- (";

/// The count on an "N older entries" line of an earlier summary.
fn parse_omitted(line: &str) -> Option<usize> {
    let rest = line.strip_prefix(OMITTED_PREFIX)?;
    let (n, tail) = rest.split_once(' ')?;
    tail.starts_with("older entries")
        .then(|| n.parse().ok())
        .flatten()
}

fn clip(text: &str, max: usize) -> String {
    let flat = text.replace('\n', " ");
    match flat.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}
