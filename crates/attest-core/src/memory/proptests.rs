//! Property: no sequence of turns promotes a model inference to `active`
//! without a receipt or a user statement (SPEC G2).

use super::tests::{now, tool_result};
use super::*;
use attest_protocol::{TerminalState, TranscriptItem};
use proptest::prelude::*;
use std::collections::BTreeMap;

const VALUES: [&str; 4] = ["api.a-example.com", "api.b-example.com", "8080", "9090"];

fn fact(v: &str) -> String {
    if v.chars().all(|c| c.is_ascii_digit()) {
        format!("The port is {v}.")
    } else {
        format!("The API lives at {v}.")
    }
}

#[derive(Debug, Clone)]
struct Turn {
    /// 0: nothing, 1: a question, 2: "remember that <fact>", 3: a preference.
    user: (u8, usize),
    /// (succeeded, shows the value, which value, tool).
    receipts: Vec<(bool, bool, usize, u8)>,
    answer: Option<usize>,
    state: u8,
}

fn turn() -> impl Strategy<Value = Turn> {
    (
        (0u8..4, 0usize..4),
        prop::collection::vec((any::<bool>(), any::<bool>(), 0usize..4, 0u8..3), 0..3),
        prop::option::of(0usize..4),
        0u8..3,
    )
        .prop_map(|(user, receipts, answer, state)| Turn {
            user,
            receipts,
            answer,
            state,
        })
}

fn items_of(t: &Turn, n: usize) -> Vec<TranscriptItem> {
    let mut items = Vec::new();
    let text = match t.user {
        (1, _) => Some("Where does the API live and which port?".to_string()),
        (2, v) => Some(format!("Remember that {}", fact(VALUES[v]).to_lowercase())),
        (3, _) => Some("I prefer short answers.".to_string()),
        _ => None,
    };
    if let Some(text) = text {
        items.push(TranscriptItem::UserInput { text });
    }
    for (i, (ok, shows, v, tool)) in t.receipts.iter().enumerate() {
        let output = if *shows {
            format!("value = {}", VALUES[*v])
        } else {
            "nothing relevant here".to_string()
        };
        let (tool, path) = match tool {
            0 => ("read_file", Some("config.toml")),
            1 => ("shell", None),
            _ => ("skill", Some("skills/api/SKILL.md")),
        };
        items.push(tool_result(&format!("c{n}_{i}"), tool, &output, *ok, path));
    }
    items
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn no_inference_becomes_active_without_a_receipt_or_a_user_statement(
        turns in prop::collection::vec(turn(), 1..8)
    ) {
        let mut pool: BTreeMap<String, MemoryItem> = BTreeMap::new();
        // Every (content id, backing) the turns could justify.
        let mut stated: Vec<String> = Vec::new();
        let mut shown: Vec<(String, String)> = Vec::new(); // (call id, output)
        for (n, t) in turns.iter().enumerate() {
            let items = items_of(t, n);
            let state = match t.state {
                0 => TerminalState::Completed,
                1 => TerminalState::Unverified,
                _ => TerminalState::Failed,
            };
            let answer = t.answer.map(|v| fact(VALUES[v]));
            let summary = RunSummary {
                run_id: "r",
                items: &items,
                state,
                answer: answer.as_deref().filter(|_| state == TerminalState::Completed),
            };
            let existing: Vec<MemoryItem> = pool.values().cloned().collect();
            let c = consolidate(&summary, &existing, &[], &Redactor::new(), now());
            for item in &items {
                match item {
                    TranscriptItem::UserInput { text } => {
                        stated.extend(user_statements(text).iter().map(|p| item_id(&p.content)));
                    }
                    TranscriptItem::ToolResult { call_id, output, status, .. }
                        if *status == attest_protocol::ReceiptStatus::Ok =>
                    {
                        shown.push((call_id.clone(), output.clone()));
                    }
                    _ => {}
                }
            }
            for d in &c.decisions {
                prop_assert!(
                    !(d.decision == MemoryDecision::Promoted && d.provenance.is_unverified()),
                    "promoted an unverified item: {d:?}"
                );
            }
            for item in c.upserts {
                pool.insert(item.id.clone(), item);
            }
            for item in pool.values().filter(|i| i.status == MemoryStatus::Active) {
                match item.provenance {
                    MemoryProvenance::UserExplicit => {
                        prop_assert!(stated.contains(&item.id), "active user item nobody stated: {item:?}");
                        let risky: Vec<Value> = distinctive_values(&item.content)
                            .into_iter()
                            .filter(|v| v.kind.is_risky())
                            .collect();
                        if !risky.is_empty() {
                            let call = item.source_ref.call_id.as_deref();
                            prop_assert!(
                                shown.iter().any(|(id, out)| Some(id.as_str()) == call
                                    && risky.iter().all(|v| appears_in(v, out))),
                                "a user-stated domain became active without a receipt: {item:?}"
                            );
                        }
                    }
                    MemoryProvenance::ToolReceipt | MemoryProvenance::Skill => {
                        let call = item.source_ref.call_id.as_deref();
                        let values = distinctive_values(&item.content);
                        prop_assert!(
                            shown.iter().any(|(id, out)| Some(id.as_str()) == call
                                && values.iter().all(|v| appears_in(v, out))),
                            "a receipt item without a receipt showing its values: {item:?}"
                        );
                    }
                    other => prop_assert!(false, "active {other:?} item: {item:?}"),
                }
            }
        }
    }
}
