//! Property tests of the pairing normalizer (SPEC C3).

use attest_protocol::{
    AssistantPhase, HarnessMessageKind, ReceiptStatus, TerminalReason, TerminalState,
    TranscriptItem,
};
use attest_providers::pairing::{normalize, normalize_shared, validate_strict, GrowingNormalizer};
use proptest::prelude::*;
use std::collections::HashMap;
use std::sync::Arc;

/// Ids come from a small pool so that duplicates and orphans are common.
fn id() -> impl Strategy<Value = String> {
    (0u8..8).prop_map(|n| format!("c{n}"))
}

fn item() -> impl Strategy<Value = TranscriptItem> {
    prop_oneof![
        1 => "[a-z]{0,6}".prop_map(|text| TranscriptItem::UserInput { text }),
        2 => ("[a-z]{0,6}", any::<bool>()).prop_map(|(text, answer)| TranscriptItem::AssistantOutput {
            text,
            reasoning: None,
            encrypted_reasoning: Vec::new(),
            phase: if answer { AssistantPhase::Answer } else { AssistantPhase::Commentary },
        }),
        4 => id().prop_map(|call_id| TranscriptItem::ToolCall {
            call_id,
            name: "read".into(),
            arguments: "{}".into(),
        }),
        4 => (id(), any::<bool>()).prop_map(|(call_id, ok)| TranscriptItem::ToolResult {
            call_id,
            name: "read".into(),
            status: if ok { ReceiptStatus::Ok } else { ReceiptStatus::Error },
            output: "out".into(),
            receipt: None,
        }),
        1 => Just(TranscriptItem::HarnessMessage {
            kind: HarnessMessageKind::Corrective,
            text: "missing evidence".into(),
        }),
        1 => Just(TranscriptItem::Terminal {
            state: TerminalState::Cancelled,
            reason: TerminalReason::UserCancelled,
            answer: None,
        }),
    ]
}

/// A sequence of items, with a random prefix and suffix cut off (as a crash
/// or a context window would).
fn transcript() -> impl Strategy<Value = Vec<TranscriptItem>> {
    (
        prop::collection::vec(item(), 0..40),
        any::<prop::sample::Index>(),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(items, a, b)| {
            let start = a.index(items.len() + 1);
            let end = start + b.index(items.len() - start + 1);
            items[start..end].to_vec()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn normalized_history_is_strictly_paired(items in transcript()) {
        let n = normalize(&items);
        prop_assert!(validate_strict(&n.items).is_ok(), "{:?}", validate_strict(&n.items));
        let has_terminal = n.items.iter().any(|i| matches!(i, TranscriptItem::Terminal { .. }));
        prop_assert!(!has_terminal);
    }

    #[test]
    fn normalize_is_idempotent(items in transcript()) {
        let once = normalize(&items);
        let twice = normalize(&once.items);
        prop_assert_eq!(&once.items, &twice.items);
        prop_assert!(twice.notes.is_empty(), "{:?}", twice.notes);
    }

    #[test]
    fn every_call_id_keeps_exactly_one_call_and_one_result(items in transcript()) {
        let n = normalize(&items);
        let mut counts: HashMap<&str, (usize, usize)> = HashMap::new();
        for item in &n.items {
            match item {
                TranscriptItem::ToolCall { call_id, .. } => counts.entry(call_id).or_default().0 += 1,
                TranscriptItem::ToolResult { call_id, .. } => counts.entry(call_id).or_default().1 += 1,
                _ => {}
            }
        }
        for item in &items {
            if let TranscriptItem::ToolCall { call_id, .. } = item {
                prop_assert_eq!(counts.get(call_id.as_str()).copied(), Some((1, 1)), "call {}", call_id);
            }
        }
        // Nothing else: no result survives without its call.
        prop_assert!(counts.values().all(|c| *c == (1, 1)));
    }

    #[test]
    fn valid_histories_pass_through_unchanged(items in transcript()) {
        if validate_strict(&items).is_ok() {
            let n = normalize(&items);
            let without_terminals: Vec<_> =
                items.into_iter().filter(|i| !matches!(i, TranscriptItem::Terminal { .. })).collect();
            prop_assert_eq!(n.items, without_terminals);
            prop_assert!(n.notes.is_empty());
        }
    }

    /// A growing history's requests normalized one after another, carrying
    /// over what was final, equal each one normalized whole; where a
    /// request's items are, from some point on, other allocations (another
    /// run, a compaction, a rewritten tail), only what still begins the
    /// history is carried over. Each request's items are given back as the
    /// engine does, except now and then (a failed call), which costs a fresh
    /// start and nothing else.
    #[test]
    fn growing_normalization_equals_normalizing_each_request_whole(
        items in prop::collection::vec(item(), 0..40),
        mut cuts in prop::collection::vec((0usize..41, any::<prop::sample::Index>()), 1..10),
    ) {
        cuts.sort_unstable_by_key(|(cut, _)| *cut);
        let items: Vec<Arc<TranscriptItem>> = items.into_iter().map(Arc::new).collect();
        let copies: Vec<Arc<TranscriptItem>> = items.iter().map(|i| Arc::new((**i).clone())).collect();
        let mut growing = GrowingNormalizer::default();
        for (step, (cut, split)) in cuts.iter().enumerate() {
            let cut = (*cut).min(items.len());
            // Mostly the same allocations throughout, as a run's requests.
            let split = if step % 3 == 2 { split.index(cut + 1) } else { cut };
            let history: Vec<Arc<TranscriptItem>> =
                items[..split].iter().chain(&copies[split..cut]).cloned().collect();
            let got = growing.normalize(&history);
            let whole = normalize_shared(&history);
            prop_assert_eq!(&got.notes, &whole.notes, "step {}", step);
            prop_assert_eq!(got.items.len(), whole.items.len());
            for (a, b) in got.items.iter().zip(&whole.items) {
                prop_assert_eq!(&**a, &**b, "step {}", step);
            }
            if step % 4 != 3 {
                growing.give_back(got.items);
            }
        }
    }
}
