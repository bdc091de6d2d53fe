//! Declared compaction (SPEC E4): when the history sent to the model grows
//! past its budget, the older part is replaced by a factual summary whose
//! lines keep their source refs (call ids). This is an explicit transition:
//! a `Compaction` item with a `CacheResetPoint` goes to the log, the
//! replaced items are copied to the archive, and the `history` tool is
//! offered so the model can fetch any archived call's full result.
//! Call/result pairs are never split.

use super::run::Run;
use super::{prefix_digest, EngineError};
use crate::provider::pairing;
use crate::state::count_tokens;
use attest_protocol::{
    AssistantPhase, CacheResetPoint, CacheResetReason, HarnessMessageKind, LogEntry, ToolSpec,
    TranscriptItem,
};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};

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

/// The model's context window and when compaction starts (SPEC P2).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ContextWindow {
    /// Tokens the model accepts per request, prompt and output together.
    pub tokens: usize,
    /// Compact when a request would fill this fraction of the window
    /// (after the output reservation); default 0.8.
    pub trigger: f64,
}

impl ContextWindow {
    /// What an unknown model is assumed to have.
    pub const UNKNOWN_MODEL_TOKENS: usize = 128_000;
    pub const DEFAULT_TRIGGER: f64 = 0.8;

    pub fn new(tokens: usize) -> Self {
        ContextWindow {
            tokens,
            trigger: Self::DEFAULT_TRIGGER,
        }
    }
}

impl CompactionPolicy {
    /// Budgets sized from the model's window: the history may use the
    /// trigger fraction of the window less the output reservation and the
    /// prefix (system prompt and tools). The reservation is capped at a
    /// quarter of the window and the history keeps at least an eighth of
    /// the usable part, so a small window still leaves room to work.
    pub fn for_context_window(
        window: ContextWindow,
        output_reserve: usize,
        prefix_tokens: usize,
    ) -> Self {
        let trigger = window.trigger.clamp(0.05, 1.0);
        let usable = (window.tokens as f64 * trigger) as usize;
        let reserve = output_reserve.min(window.tokens / 4);
        let history = usable
            .saturating_sub(reserve)
            .saturating_sub(prefix_tokens)
            .max(usable / 8)
            .max(1);
        CompactionPolicy {
            history_budget_tokens: history,
            keep_recent_tokens: history / 3,
        }
    }
}

/// How a run's history budget is known: given, or derived from the
/// model's window once the prefix's tokens are counted.
#[derive(Debug)]
pub(super) enum CompactionBudget {
    Fixed(CompactionPolicy),
    Window {
        window: ContextWindow,
        output_reserve: usize,
        /// JSON bytes of the system prompt and the tool list: an upper
        /// bound of their tokens.
        prefix_bytes: usize,
        /// The policy with the prefix's real token count, taken the first
        /// time the history is too long for the byte bound to decide.
        exact: OnceLock<CompactionPolicy>,
    },
}

impl CompactionBudget {
    pub(super) fn new(
        window: Option<ContextWindow>,
        fixed: &CompactionPolicy,
        output_reserve: usize,
        prefix_bytes: usize,
    ) -> Self {
        match window {
            Some(window) => CompactionBudget::Window {
                window,
                output_reserve,
                prefix_bytes,
                exact: OnceLock::new(),
            },
            None => CompactionBudget::Fixed(fixed.clone()),
        }
    }

    /// A policy whose budget is at most the exact one's, known without
    /// tokenizing: the prefix counted as one token per byte.
    fn lower_bound(&self) -> CompactionPolicy {
        match self {
            CompactionBudget::Fixed(p) => p.clone(),
            CompactionBudget::Window {
                window,
                output_reserve,
                prefix_bytes,
                ..
            } => CompactionPolicy::for_context_window(*window, *output_reserve, *prefix_bytes),
        }
    }

    /// The exact policy; `prefix_tokens` is called at most once per run.
    fn exact(&self, prefix_tokens: impl FnOnce() -> usize) -> CompactionPolicy {
        match self {
            CompactionBudget::Fixed(p) => p.clone(),
            CompactionBudget::Window {
                window,
                output_reserve,
                exact,
                ..
            } => exact
                .get_or_init(|| {
                    CompactionPolicy::for_context_window(*window, *output_reserve, prefix_tokens())
                })
                .clone(),
        }
    }
}

/// What is kept of one transcript item when it is logged, so that no
/// request redoes it: its JSON bytes; its tokens, counted the first time a
/// budget needs them (most runs never do: their bytes stay under the
/// budget); and its request form, shared by every request that carries it.
pub(super) fn item_cache(item: &TranscriptItem) -> ItemCache {
    ItemCache {
        bytes: serde_json::to_string(item).map_or(0, |json| json.len()),
        tokens: OnceLock::new(),
        request_form: Arc::new(pairing::without_receipt(item)),
        summary_form: OnceLock::new(),
    }
}

/// Sizes of the history a request carries ([`Run::build_request_history`]),
/// kept as it grows.
#[derive(Debug, Default)]
pub(super) struct HistorySize {
    /// Bytes, as [`ItemCache::bytes`] measures its items.
    pub(super) bytes: usize,
    /// Tokens, once counted: the total and how many of the run's items it
    /// has seen.
    tokens: Option<(usize, usize)>,
}

#[derive(Debug, Clone)]
pub(super) struct ItemCache {
    pub(super) bytes: usize,
    tokens: OnceLock<usize>,
    /// The item as requests carry it (no receipt).
    pub(super) request_form: Arc<TranscriptItem>,
    /// For a compaction: its summary as the harness message requests start
    /// with, made once (every later request shares it).
    summary_form: OnceLock<Arc<TranscriptItem>>,
}

impl ItemCache {
    /// The summary message of `compaction`, the item this is the cache of.
    fn summary_form(&self, compaction: &str) -> Arc<TranscriptItem> {
        Arc::clone(
            self.summary_form
                .get_or_init(|| Arc::new(summary_message(compaction))),
        )
    }

    /// Tokens of `item`, the item this is the size of; counted once.
    pub(super) fn tokens(&self, item: &TranscriptItem) -> usize {
        *self
            .tokens
            .get_or_init(|| count_tokens(&serde_json::to_string(item).unwrap_or_default()))
    }
}

/// A compaction's summary as the message requests start with.
fn summary_message(summary: &str) -> TranscriptItem {
    TranscriptItem::HarnessMessage {
        kind: HarnessMessageKind::CompactionSummary,
        text: summary.to_string(),
    }
}

/// Bytes of a JSON array of items of these sizes, as `serde_json` writes it.
pub(super) fn array_bytes(sizes: &[ItemCache]) -> usize {
    json_array_bytes(sizes.len(), sizes.iter().map(|s| s.bytes).sum())
}

/// Bytes of a JSON array of `count` items of `sum` bytes in all.
pub(super) fn json_array_bytes(count: usize, sum: usize) -> usize {
    2 + sum + count.saturating_sub(1)
}

/// First line of every compaction summary.
pub const SUMMARY_HEADER: &str = "[attest] Summary of earlier history, compacted at a declared reset point. Every line names its source; the full originals are archived: call the `history` tool with a call id to read one.";

impl Run<'_> {
    /// The latest compaction of this run, if any: (index, covers, summary).
    pub(super) fn latest_compaction(&self) -> Option<(usize, usize, &str)> {
        let i = self.compaction_at?;
        match self.items.get(i)? {
            TranscriptItem::Compaction {
                covers, summary, ..
            } => Some((i, *covers, summary.as_str())),
            _ => None,
        }
    }

    /// What requests are built from: earlier turns and this run's items, or
    /// after a compaction, its summary and the items it did not cover; each
    /// item in its shared request form. Built when the run starts and at a
    /// compaction; in between the run grows it item by item
    /// (`Run::request_forms`), so a step copies nothing.
    pub(super) fn build_request_history(&self) -> Vec<Arc<TranscriptItem>> {
        let forms = |caches: &[ItemCache]| -> Vec<Arc<TranscriptItem>> {
            caches.iter().map(|c| Arc::clone(&c.request_form)).collect()
        };
        match self.latest_compaction() {
            Some((index, covers, summary)) => {
                let summary = match self.item_caches.get(index) {
                    Some(cache) => cache.summary_form(summary),
                    None => Arc::new(summary_message(summary)),
                };
                let mut out = vec![summary];
                let rest = covers.min(self.items.len());
                out.extend(
                    self.item_caches
                        .get(rest..)
                        .unwrap_or_default()
                        .iter()
                        .filter(|c| !matches!(*c.request_form, TranscriptItem::Compaction { .. }))
                        .map(|c| Arc::clone(&c.request_form)),
                );
                out
            }
            None => {
                let mut out = forms(&self.prior_caches);
                out.extend(forms(&self.item_caches));
                out
            }
        }
    }

    /// Rebuild the kept request history and its sizes from the run's items
    /// (when the run starts and at a compaction).
    pub(super) fn reset_request_history(&mut self) {
        self.request_forms = self.build_request_history();
        self.history_size = HistorySize {
            bytes: self.request_history_sum(|size, _| size.bytes),
            tokens: None,
        };
    }

    /// Tokens of [`Run::build_request_history`], from per-item counts each
    /// taken at most once, summed once: later calls add the items logged
    /// since (a step never visits the whole history).
    pub(super) fn request_history_tokens(&mut self) -> usize {
        let len = self.items.len();
        let total = match self.history_size.tokens {
            None => self.request_history_sum(|size, item| size.tokens(item)),
            Some((total, counted)) => total + self.items_sum(counted, |s, i| s.tokens(i)),
        };
        self.history_size.tokens = Some((total, len));
        debug_assert_eq!(total, self.request_history_sum(|s, i| s.tokens(i)));
        total
    }

    /// `measure` summed over the items [`Run::build_request_history`] is built
    /// from (a compaction item stands for its summary).
    fn request_history_sum(&self, measure: impl Fn(&ItemCache, &TranscriptItem) -> usize) -> usize {
        match self.latest_compaction() {
            Some((index, covers, _)) => {
                measure(&self.item_caches[index], &self.items[index])
                    + self.items_sum(covers, measure)
            }
            None => {
                self.prior_caches
                    .iter()
                    .zip(&self.cfg.prior_history)
                    .map(|(size, item)| measure(size, item))
                    .sum::<usize>()
                    + self.items_sum(0, measure)
            }
        }
    }

    /// `measure` summed over the run's items from `from` on that requests
    /// carry (a compaction item is not one: its summary stands first).
    fn items_sum(
        &self,
        from: usize,
        measure: impl Fn(&ItemCache, &TranscriptItem) -> usize,
    ) -> usize {
        (from.min(self.items.len())..self.items.len())
            .filter(|&i| !matches!(self.items[i], TranscriptItem::Compaction { .. }))
            .map(|i| measure(&self.item_caches[i], &self.items[i]))
            .sum()
    }

    /// Whether the result of `call_id` (a call of this run) is still in the
    /// requests, rather than compacted into the archive.
    pub(super) fn result_in_request(&self, call_id: &str) -> bool {
        let Some((_, covers, _)) = self.latest_compaction() else {
            return true;
        };
        self.items[covers.min(self.items.len())..]
            .iter()
            .any(|i| matches!(i, TranscriptItem::ToolResult { call_id: id, .. } if id == call_id))
    }

    /// The prefix the cache can reuse: system, tools and any compaction
    /// summary. It changes only at a declared reset point.
    /// Cached: it is hashed again only when the compaction or the tool set
    /// it depends on changed.
    pub(super) fn current_prefix_hash(&mut self) -> String {
        let tools = self.visible_tools();
        self.prefix_of(&tools).0
    }

    /// The prefix hash with exactly `tools` (the ones a request is sent),
    /// and their serialized size in bytes.
    pub(super) fn prefix_of(&mut self, tools: &Arc<[ToolSpec]>) -> (String, usize) {
        let compaction = self.latest_compaction().map(|(i, _, _)| i);
        // The run hands out one list while its tool set is unchanged.
        if let Some(((cached_compaction, cached_tools), prefix)) = &self.prefix_cache {
            if *cached_compaction == compaction && Arc::ptr_eq(cached_tools, tools) {
                return prefix.clone();
            }
        }
        let key = (compaction, Arc::clone(tools));
        let mut system = self.system.clone();
        if let Some((_, _, summary)) = self.latest_compaction() {
            system.push('\u{0}');
            system.push_str(summary);
        }
        let prefix = prefix_digest(&system, tools);
        self.prefix_cache = Some((key, prefix.clone()));
        prefix
    }

    /// Compact if the history is over budget (or `force`). Returns whether
    /// a compaction happened.
    pub(super) fn maybe_compact(&mut self, step: u32, force: bool) -> Result<bool, EngineError> {
        // Bytes bound tokens from above: a history whose bytes fit the
        // smallest budget the prefix could leave needs no tokenizing.
        debug_assert_eq!(
            self.history_size.bytes,
            self.request_history_sum(|size, _| size.bytes)
        );
        if !force && self.history_size.bytes <= self.compaction.lower_bound().history_budget_tokens
        {
            return Ok(false);
        }
        let policy = self.compaction.exact(|| {
            count_tokens(&self.system)
                + count_tokens(&serde_json::to_string(&self.tools).unwrap_or_default())
        });
        let tokens = self.request_history_tokens();
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
        let before_at = self.compaction_at.replace(self.items.len() - 1);
        reset_point.prefix_hash_after = self.current_prefix_hash();
        self.items.pop();
        self.compaction_at = before_at;
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
            tail_tokens += self.item_caches[i].tokens(&self.items[i]);
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
