//! The pairing invariant (SPEC C3): every tool call is answered by exactly one
//! result before the conversation moves on. Providers reject histories that
//! break it, so requests are always built from [`normalize`]d items.
//!
//! The rule, exactly:
//! - `Terminal` and `Compaction` items are not messages: they are dropped, and they are
//!   invisible to pairing (a terminal between calls and results does not
//!   separate them).
//! - A *call block* is a maximal run of consecutive `ToolCall`s. Its *result
//!   block* is the maximal run of `ToolResult`s right after it.
//! - A result is valid only inside the result block of the call block that
//!   holds its call. The first valid result for a call is kept, in place;
//!   further results for the same call are dropped (noted).
//! - Any other result (unknown id, or arriving after other messages) is an
//!   orphan and is dropped (noted).
//! - A call left without a valid result gets a synthetic `Interrupted` result,
//!   appended after the block's kept results, in call order (noted).
//! - A call whose id was already used by an earlier call is dropped (noted):
//!   providers require unique call ids, and its result would be ambiguous.

use attest_protocol::{ReceiptStatus, TranscriptItem};
use std::borrow::Borrow;
use std::collections::HashSet;
use std::sync::Arc;

/// What the model is shown for a call that never returned.
pub const INTERRUPTED_OUTPUT: &str =
    "[attest] This call was interrupted before it returned a result; it did not complete.";

/// A history that satisfies [`validate_strict`], plus what was changed to get there.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalized<T = TranscriptItem> {
    pub items: Vec<T>,
    pub notes: Vec<String>,
}

/// Rewrite `items` so that the pairing invariant holds (see the module docs
/// for the exact rule). Idempotent; the input is never modified. Results
/// come out without their receipts: no wire format sends one (the model
/// sees the output), and copying every receipt of the history for each
/// request was a cost that grew with the run.
pub fn normalize<'a>(items: impl IntoIterator<Item = &'a TranscriptItem>) -> Normalized {
    normalize_with(items, without_receipt, |made| made)
}

/// [`normalize`] of shared items, as requests carry them: an item that
/// passes unchanged (one without a receipt) is passed on, not copied, so
/// that a run's requests share their items with it and with each other.
pub fn normalize_shared<'a>(
    items: impl IntoIterator<Item = &'a Arc<TranscriptItem>>,
) -> Normalized<Arc<TranscriptItem>> {
    normalize_with(items, shared_form, Arc::new)
}

/// A shared item as a request carries it: itself, or a copy without its
/// receipt.
fn shared_form(item: &Arc<TranscriptItem>) -> Arc<TranscriptItem> {
    match &**item {
        TranscriptItem::ToolResult {
            receipt: Some(_), ..
        } => Arc::new(without_receipt(item)),
        _ => Arc::clone(item),
    }
}

/// The one implementation of the rule, for owned and shared items: `keep`
/// gives the output form of an item that stays, `made` that of a
/// synthetic (interrupted) result.
fn normalize_with<'a, T: Borrow<TranscriptItem> + 'a, O>(
    items: impl IntoIterator<Item = &'a T>,
    keep: impl Fn(&'a T) -> O,
    made: impl Fn(TranscriptItem) -> O,
) -> Normalized<O> {
    let mut seen_calls: HashSet<&str> = HashSet::new();
    let mut out = Normalized {
        items: Vec::new(),
        notes: Vec::new(),
    };
    scan(
        items.into_iter().enumerate(),
        |_, id| seen_calls.insert(id),
        keep,
        made,
        &mut out,
    );
    out
}

/// Where a scan can resume: everything it wrote for the input before
/// `input` is final, whatever follows (no call block is open there).
#[derive(Debug, Clone, Copy)]
struct Resume {
    input: usize,
    items: usize,
    notes: usize,
}

/// Applies the rule to `items` (each with its input position), appending to
/// `out`; `first_use(position, id)` tells whether a call id is new (and
/// records it). Returns the last point where a later scan could resume.
fn scan<'a, T: Borrow<TranscriptItem> + 'a, O>(
    items: impl IntoIterator<Item = (usize, &'a T)>,
    mut first_use: impl FnMut(usize, &'a str) -> bool,
    keep: impl Fn(&'a T) -> O,
    made: impl Fn(TranscriptItem) -> O,
    out: &mut Normalized<O>,
) -> Option<Resume> {
    let visible: Vec<(usize, &T)> = items
        .into_iter()
        .filter(|(_, i)| {
            !matches!(
                (*i).borrow(),
                TranscriptItem::Terminal { .. } | TranscriptItem::Compaction { .. }
            )
        })
        .collect();
    let notes = &mut out.notes;
    let out = &mut out.items;
    let mut resume = None;
    let mut i = 0;
    while i < visible.len() {
        resume = Some(Resume {
            input: visible[i].0,
            items: out.len(),
            notes: notes.len(),
        });
        match visible[i].1.borrow() {
            TranscriptItem::ToolCall { .. } => {
                // Calls of this block: (id, name, answered).
                let mut block: Vec<(&str, &str, bool)> = Vec::new();
                while let Some((at, TranscriptItem::ToolCall { call_id, name, .. })) =
                    visible.get(i).map(|(at, v)| (*at, (*v).borrow()))
                {
                    if first_use(at, call_id) {
                        block.push((call_id, name, false));
                        out.push(keep(visible[i].1));
                    } else {
                        notes.push(format!("dropped a repeated tool call with id `{call_id}`"));
                    }
                    i += 1;
                }
                while let Some(TranscriptItem::ToolResult { call_id, .. }) =
                    visible.get(i).map(|(_, v)| (*v).borrow())
                {
                    match block.iter_mut().find(|(id, _, _)| id == call_id) {
                        Some((_, _, answered)) if !*answered => {
                            *answered = true;
                            out.push(keep(visible[i].1));
                        }
                        Some(_) => {
                            notes.push(format!("dropped a duplicate result for call `{call_id}`"))
                        }
                        None => {
                            notes.push(format!("dropped an orphan result for call `{call_id}`"))
                        }
                    }
                    i += 1;
                }
                for (id, name, _) in block.iter().filter(|(_, _, answered)| !answered) {
                    notes.push(format!("added an interrupted result for call `{id}`"));
                    out.push(made(interrupted_result(id, name)));
                }
            }
            TranscriptItem::ToolResult { call_id, .. } => {
                notes.push(format!("dropped an orphan result for call `{call_id}`"));
                i += 1;
            }
            _ => {
                out.push(keep(visible[i].1));
                i += 1;
            }
        }
    }
    resume
}

/// [`normalize_shared`] for the requests of one growing history: what was
/// final in the previous request's normalization (everything before its
/// last open call block) is carried over while the history still begins
/// with the same items, so a step normalizes only what is new, not the
/// whole run again.
///
/// The final part is lent to the request rather than copied: a request
/// whose history [`GrowingNormalizer::give_back`] returns costs no
/// reference counting per item, neither to build nor to drop.
#[derive(Debug, Default)]
pub struct GrowingNormalizer {
    /// The inputs whose normalization is final (held: the same allocations
    /// are the same items).
    inputs: Vec<Arc<TranscriptItem>>,
    done: Normalized<Arc<TranscriptItem>>,
    /// While `done.items` is lent out: how many of the request's items are
    /// final.
    lent: Option<usize>,
    /// The items of the final part made here (synthetic results), held so
    /// that, like the run's own items, a request is never their only holder:
    /// providers keep no JSON of an item only one request holds.
    made: Vec<Arc<TranscriptItem>>,
    /// Call ids among `inputs`.
    calls: HashSet<String>,
    /// Call ids the last request added past `inputs`, taken back before
    /// the next one.
    tentative: Vec<String>,
}

impl<T> Default for Normalized<T> {
    fn default() -> Self {
        Normalized {
            items: Vec::new(),
            notes: Vec::new(),
        }
    }
}

impl GrowingNormalizer {
    /// `normalize_shared(items)`, built on the final part of the previous
    /// call's.
    pub fn normalize(&mut self, items: &[Arc<TranscriptItem>]) -> Normalized<Arc<TranscriptItem>> {
        let continues = self.inputs.len() <= items.len()
            && self
                .inputs
                .iter()
                .zip(items)
                .all(|(a, b)| Arc::ptr_eq(a, b));
        // Lent and never given back: the final part is gone; start over.
        if !continues || self.lent.is_some() {
            *self = Self::default();
        }
        for id in self.tentative.drain(..) {
            self.calls.remove(&id);
        }
        let from = self.inputs.len();
        let mut out = Normalized {
            items: std::mem::take(&mut self.done.items),
            notes: self.done.notes.clone(),
        };
        let was_settled = out.items.len();
        let mut settled_items = was_settled;
        let mut added: Vec<(usize, String)> = Vec::new();
        let calls = &mut self.calls;
        let resume = scan(
            items[from..]
                .iter()
                .enumerate()
                .map(|(i, item)| (from + i, item)),
            |at, id| {
                let first = calls.insert(id.to_string());
                if first {
                    added.push((at, id.to_string()));
                }
                first
            },
            shared_form,
            Arc::new,
            &mut out,
        );
        let settled = resume.map_or(from, |r| r.input);
        if let Some(r) = resume.filter(|r| r.input > from) {
            self.inputs.extend(items[from..r.input].iter().cloned());
            settled_items = r.items;
            self.done
                .notes
                .extend(out.notes[self.done.notes.len()..r.notes].iter().cloned());
        }
        // Inputs are held by the caller too; what only `out` holds was made here.
        self.made.extend(
            out.items[was_settled..settled_items]
                .iter()
                .filter(|item| Arc::strong_count(item) == 1)
                .cloned(),
        );
        self.lent = Some(settled_items);
        self.tentative = added
            .into_iter()
            .filter(|(at, _)| *at >= settled)
            .map(|(_, id)| id)
            .collect();
        out
    }

    /// Take back the items the last [`GrowingNormalizer::normalize`] lent,
    /// as it returned them (anything added must be removed first). Not
    /// giving them back is safe: the next call normalizes from scratch.
    pub fn give_back(&mut self, mut items: Vec<Arc<TranscriptItem>>) {
        match self.lent.take() {
            Some(settled) if items.len() >= settled => {
                items.truncate(settled);
                self.done.items = items;
            }
            _ => *self = Self::default(),
        }
    }
}

/// A copy of `item`; a result's copy leaves its receipt out (the form a
/// request carries it in).
pub fn without_receipt(item: &TranscriptItem) -> TranscriptItem {
    match item {
        TranscriptItem::ToolResult {
            call_id,
            name,
            status,
            output,
            receipt: _,
        } => TranscriptItem::ToolResult {
            call_id: call_id.clone(),
            name: name.clone(),
            status: *status,
            output: output.clone(),
            receipt: None,
        },
        other => other.clone(),
    }
}

/// The synthetic result given to a call that never returned.
pub fn interrupted_result(call_id: &str, name: &str) -> TranscriptItem {
    TranscriptItem::ToolResult {
        call_id: call_id.to_string(),
        name: name.to_string(),
        status: ReceiptStatus::Interrupted,
        output: INTERRUPTED_OUTPUT.to_string(),
        receipt: None,
    }
}

/// Check the pairing invariant without changing anything. `Terminal` items
/// are ignored, as in [`normalize`]. The error names the first violation.
pub fn validate_strict<T: Borrow<TranscriptItem>>(items: &[T]) -> Result<(), String> {
    let visible: Vec<(usize, &TranscriptItem)> = items
        .iter()
        .map(Borrow::borrow)
        .enumerate()
        .filter(|(_, i)| {
            !matches!(
                i,
                TranscriptItem::Terminal { .. } | TranscriptItem::Compaction { .. }
            )
        })
        .collect();
    let mut seen_calls: HashSet<&str> = HashSet::new();
    let mut i = 0;
    while i < visible.len() {
        let (pos, item) = visible[i];
        match item {
            TranscriptItem::ToolCall { .. } => {
                let mut block: Vec<(&str, bool)> = Vec::new();
                while let Some((pos, TranscriptItem::ToolCall { call_id, .. })) = visible.get(i) {
                    if !seen_calls.insert(call_id) {
                        return Err(format!("item {pos}: call id `{call_id}` is used twice"));
                    }
                    block.push((call_id, false));
                    i += 1;
                }
                while let Some((pos, TranscriptItem::ToolResult { call_id, .. })) = visible.get(i) {
                    match block.iter_mut().find(|(id, _)| id == call_id) {
                        Some((_, answered)) if !*answered => *answered = true,
                        Some(_) => {
                            return Err(format!("item {pos}: second result for call `{call_id}`"))
                        }
                        None => {
                            return Err(format!(
                                "item {pos}: result for `{call_id}` answers no call of the block before it"
                            ))
                        }
                    }
                    i += 1;
                }
                if let Some((id, _)) = block.iter().find(|(_, answered)| !answered) {
                    return Err(format!("call `{id}` has no result before the next message"));
                }
            }
            TranscriptItem::ToolResult { call_id, .. } => {
                return Err(format!(
                    "item {pos}: result for `{call_id}` does not follow its call"
                ));
            }
            _ => i += 1,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use attest_protocol::{AssistantPhase, TerminalReason, TerminalState};

    fn call(id: &str) -> TranscriptItem {
        TranscriptItem::ToolCall {
            call_id: id.into(),
            name: "read".into(),
            arguments: "{}".into(),
        }
    }
    fn result(id: &str) -> TranscriptItem {
        TranscriptItem::ToolResult {
            call_id: id.into(),
            name: "read".into(),
            status: ReceiptStatus::Ok,
            output: format!("out {id}"),
            receipt: None,
        }
    }
    fn user(t: &str) -> TranscriptItem {
        TranscriptItem::UserInput { text: t.into() }
    }
    fn assistant(t: &str) -> TranscriptItem {
        TranscriptItem::AssistantOutput {
            text: t.into(),
            reasoning: None,
            encrypted_reasoning: Vec::new(),
            phase: AssistantPhase::Commentary,
        }
    }

    #[test]
    fn shared_items_that_pass_unchanged_are_passed_on_not_copied() {
        let items: Vec<Arc<TranscriptItem>> = [user("q"), call("a"), call("b"), result("b")]
            .into_iter()
            .map(Arc::new)
            .collect();
        let n = normalize_shared(&items);
        let owned: Vec<TranscriptItem> = items.iter().map(|i| (**i).clone()).collect();
        let expected = normalize(&owned);
        assert_eq!(
            n.items.iter().map(|i| (**i).clone()).collect::<Vec<_>>(),
            expected.items
        );
        assert_eq!(n.notes, expected.notes);
        for (kept, original) in n.items.iter().zip(&items) {
            assert!(Arc::ptr_eq(kept, original), "{kept:?} was copied");
        }
        // `b` is answered and `a` is not: its synthetic result is new.
        assert_eq!(n.items.len(), 5);
        assert!(matches!(
            &*n.items[4],
            TranscriptItem::ToolResult { call_id, status: ReceiptStatus::Interrupted, .. } if call_id == "a"
        ));
    }

    #[test]
    fn results_come_out_without_their_receipts() {
        let now = chrono::Utc::now();
        let receipt = attest_protocol::Receipt {
            call_id: "a".into(),
            tool_name: "read".into(),
            effect: attest_protocol::EffectClass::Observe,
            status: ReceiptStatus::Ok,
            started_at: now,
            finished_at: now,
            input_fingerprint: "fp".into(),
            evidence: attest_protocol::Evidence::default(),
            verification_status: attest_protocol::VerificationStatus::Verified,
            error: None,
        };
        let with_receipt = TranscriptItem::ToolResult {
            call_id: "a".into(),
            name: "read".into(),
            status: ReceiptStatus::Ok,
            output: "out a".into(),
            receipt: Some(Box::new(receipt)),
        };
        let n = normalize(&[call("a"), with_receipt.clone()]);
        assert_eq!(n.items, vec![call("a"), result("a")]);
        assert!(n.notes.is_empty());
        let shared = normalize_shared(&[Arc::new(call("a")), Arc::new(with_receipt)]);
        assert_eq!(*shared.items[1], result("a"));
    }

    #[test]
    fn well_formed_history_is_unchanged() {
        let items = vec![
            user("hi"),
            assistant("look"),
            call("a"),
            call("b"),
            result("b"),
            result("a"),
            user("x"),
        ];
        let n = normalize(&items);
        assert_eq!(n.items, items);
        assert!(n.notes.is_empty());
        assert!(validate_strict(&items).is_ok());
    }

    #[test]
    fn missing_result_is_synthesized_after_existing_results() {
        let items = vec![user("hi"), call("a"), call("b"), result("b"), user("next")];
        let n = normalize(&items);
        assert_eq!(
            n.items,
            vec![
                user("hi"),
                call("a"),
                call("b"),
                result("b"),
                interrupted_result("a", "read"),
                user("next")
            ]
        );
        assert_eq!(n.notes.len(), 1);
        assert!(validate_strict(&items).is_err());
    }

    #[test]
    fn late_duplicate_and_orphan_results_are_dropped() {
        let items = vec![
            call("a"),
            result("a"),
            result("a"),
            result("zzz"),
            user("u"),
            result("a"),
        ];
        let n = normalize(&items);
        assert_eq!(n.items, vec![call("a"), result("a"), user("u")]);
        assert_eq!(n.notes.len(), 3);
    }

    #[test]
    fn terminal_items_are_dropped_and_do_not_split_blocks() {
        let term = TranscriptItem::Terminal {
            state: TerminalState::Cancelled,
            reason: TerminalReason::UserCancelled,
            answer: None,
        };
        let items = vec![call("a"), term.clone(), result("a"), term];
        assert!(validate_strict(&items).is_ok());
        assert_eq!(normalize(&items).items, vec![call("a"), result("a")]);
    }

    #[test]
    fn repeated_call_id_is_dropped() {
        let items = vec![call("a"), result("a"), call("a"), result("a")];
        let n = normalize(&items);
        assert_eq!(n.items, vec![call("a"), result("a")]);
        assert!(validate_strict(&items).is_err());
    }

    #[test]
    fn a_growing_history_carries_its_settled_part_over_and_normalizes_only_the_rest() {
        let mut items: Vec<Arc<TranscriptItem>> = vec![Arc::new(user("q"))];
        let mut growing = GrowingNormalizer::default();
        for round in 0..50 {
            let id = format!("c{round}");
            items.push(Arc::new(call(&id)));
            // The call's result is not in yet: an interrupted one stands in.
            let open = growing.normalize(&items);
            assert_eq!(open.items, normalize_shared(&items).items);
            growing.give_back(open.items);
            items.push(Arc::new(result(&id)));
            items.push(Arc::new(assistant("next")));
            let n = growing.normalize(&items);
            assert_eq!(n.items, normalize_shared(&items).items);
            // Everything before the last message is settled, and the
            // settled outputs are the same allocations as the request's.
            assert_eq!(growing.inputs.len(), items.len() - 1);
            let request = n.items.clone();
            growing.give_back(n.items);
            assert_eq!(growing.done.items.len(), request.len() - 1);
            // The next request carries the settled part over: the same
            // allocations as this request's, not a normalization anew.
            let next = growing.normalize(&items);
            assert!(next.items[..request.len() - 1]
                .iter()
                .zip(&request)
                .all(|(a, b)| Arc::ptr_eq(a, b)));
            growing.give_back(next.items);
            // A request that was not given back costs a fresh start, not a
            // wrong history.
            if round % 7 == 3 {
                let lost = growing.normalize(&items);
                assert_eq!(lost.items, normalize_shared(&items).items);
            }
        }
        assert!(growing.tentative.is_empty());
        // A result made here for an unanswered call, once final, is held by
        // the normalizer as well as the request (providers keep the JSON of
        // shared items only).
        let mut open = vec![Arc::new(call("lost")), Arc::new(assistant("moved on"))];
        open.extend([
            Arc::new(call("c")),
            Arc::new(result("c")),
            Arc::new(assistant("done")),
        ]);
        let mut fresh = GrowingNormalizer::default();
        let n = fresh.normalize(&open);
        assert_eq!(n.items, normalize_shared(&open).items);
        let made = &n.items[1];
        assert!(matches!(&**made, TranscriptItem::ToolResult { call_id, .. } if call_id == "lost"));
        assert_eq!(Arc::strong_count(made), 2);
        // A repeated id after the settled part is still a repeat.
        items.push(Arc::new(call("c3")));
        let n = growing.normalize(&items);
        assert_eq!(n.notes, vec!["dropped a repeated tool call with id `c3`"]);
    }
}
