//! Bodies built from kept pieces (`body_json_kept`) are byte for byte the
//! bodies written whole (`body_json`), request after request of a growing
//! run, on both wire formats; a piece is reused only for the very items it
//! was made from, and a tool list's JSON only for the very list.

use attest_protocol::{
    AssistantPhase, EffectClass, HarnessMessageKind, ReceiptStatus, ToolSpec, TranscriptItem,
};
use attest_providers::fragments::Fragments;
use attest_providers::{anthropic, openai, ModelRequest};
use proptest::prelude::*;
use std::sync::Arc;

type Build = fn(&ModelRequest, &str, &mut Fragments) -> String;
type Whole = fn(&ModelRequest, &str) -> String;
const WIRES: [(Whole, Build); 2] = [
    (openai::body_json, openai::body_json_kept),
    (anthropic::body_json, anthropic::body_json_kept),
];

fn request(history: Vec<Arc<TranscriptItem>>, cache_key: Option<&str>) -> ModelRequest {
    ModelRequest {
        system: "You are attest.".into(),
        tools: Vec::new().into(),
        history,
        stream: false,
        max_tokens: 512,
        temperature: None,
        seed: None,
        stop: Vec::new(),
        cache_key: cache_key.map(str::to_string),
    }
}

fn call(id: &str, arguments: &str) -> TranscriptItem {
    TranscriptItem::ToolCall {
        call_id: id.into(),
        name: "read_file".into(),
        arguments: arguments.into(),
    }
}

fn result(id: &str, output: &str, status: ReceiptStatus) -> TranscriptItem {
    TranscriptItem::ToolResult {
        call_id: id.into(),
        name: "read_file".into(),
        status,
        output: output.into(),
        receipt: None,
    }
}

fn text(t: &str, phase: AssistantPhase) -> TranscriptItem {
    TranscriptItem::AssistantOutput {
        text: t.into(),
        reasoning: None,
        encrypted_reasoning: Vec::new(),
        phase,
    }
}

fn snapshot(step: usize) -> Arc<TranscriptItem> {
    Arc::new(TranscriptItem::HarnessMessage {
        kind: HarnessMessageKind::StateSnapshot,
        text: format!("[attest] state after step {step}"),
    })
}

/// Steps of a run as it grows: each request carries every item so far (the
/// same allocations) and a fresh state snapshot last.
fn steps(rounds: usize) -> Vec<Vec<Arc<TranscriptItem>>> {
    let mut items = vec![Arc::new(TranscriptItem::UserInput {
        text: "Read the files \"a\" and \\b\\.".into(),
    })];
    let mut out = Vec::new();
    for r in 0..rounds {
        if r % 2 == 0 {
            items.push(Arc::new(text(
                &format!("Round {r}."),
                AssistantPhase::Commentary,
            )));
        }
        // Two calls; the second's arguments are not an object.
        items.push(Arc::new(call(
            &format!("c{r}a"),
            r#"{"path": "a", "n": [1,2]}"#,
        )));
        items.push(Arc::new(call(&format!("c{r}b"), "not json")));
        // Results out of call order, one an error.
        items.push(Arc::new(result(
            &format!("c{r}b"),
            "no such file",
            ReceiptStatus::Error,
        )));
        items.push(Arc::new(result(
            &format!("c{r}a"),
            "port = 8080\n\u{1}",
            ReceiptStatus::Ok,
        )));
        let mut history = items.clone();
        history.push(snapshot(r));
        out.push(history);
    }
    out
}

#[test]
fn every_request_of_a_growing_run_equals_its_whole_body() {
    for cache_key in [None, Some("session-1")] {
        for (whole, kept_build) in WIRES {
            let mut kept = Fragments::default();
            for (step, history) in steps(12).into_iter().enumerate() {
                let req = request(history, cache_key);
                assert_eq!(
                    kept_build(&req, "m", &mut kept),
                    whole(&req, "m"),
                    "step {step}, cache key {cache_key:?}"
                );
            }
            assert!(!kept.is_empty(), "pieces were kept");
            let last = steps(12).pop().expect("a step");
            let req = request(last, cache_key);
            assert_eq!(kept_build(&req, "m", &mut kept), whole(&req, "m"));
        }
    }
}

fn tool(name: &str) -> ToolSpec {
    ToolSpec::new(
        name,
        format!("Does \"{name}\"."),
        EffectClass::Observe,
        serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    )
}

#[test]
fn a_tool_list_is_written_once_per_list_and_a_changed_list_anew() {
    for cache_key in [None, Some("session-1")] {
        for system in ["You are attest.", ""] {
            for (whole, kept_build) in WIRES {
                let mut kept = Fragments::default();
                let first: Arc<[ToolSpec]> = vec![tool("read_file"), tool("grep")].into();
                let with = |history, tools: &Arc<[ToolSpec]>| ModelRequest {
                    system: system.into(),
                    tools: Arc::clone(tools),
                    ..request(history, cache_key)
                };
                for history in steps(4) {
                    let req = with(history, &first);
                    assert_eq!(kept_build(&req, "m", &mut kept), whole(&req, "m"));
                }
                assert_eq!(kept.tool_lists(), 1, "one list, written once");
                // A tool found by `tool_search`: a new list, in the next body.
                let found: Arc<[ToolSpec]> =
                    vec![tool("read_file"), tool("grep"), tool("weather")].into();
                let req = with(steps(5).pop().unwrap(), &found);
                let body = kept_build(&req, "m", &mut kept);
                assert_eq!(body, whole(&req, "m"));
                assert!(body.contains("\"weather\""), "{body}");
                // The same specs in another allocation, and back to the first.
                let copy: Arc<[ToolSpec]> = first.to_vec().into();
                for tools in [&copy, &first] {
                    let req = with(steps(6).pop().unwrap(), tools);
                    let body = kept_build(&req, "m", &mut kept);
                    assert_eq!(body, whole(&req, "m"));
                    assert!(!body.contains("\"weather\""), "{body}");
                }
                assert_eq!(kept.tool_lists(), 3);
                // No tools: no list at all.
                let req = with(steps(2).pop().unwrap(), &Arc::default());
                let body = kept_build(&req, "m", &mut kept);
                assert_eq!(body, whole(&req, "m"));
                assert!(!body.contains("\"tools\""), "{body}");
            }
        }
    }
}

#[test]
fn one_tool_list_sent_with_and_without_a_system_prompt_keeps_each_form() {
    // Without a system prompt, Anthropic's list carries the breakpoint.
    let mut kept = Fragments::default();
    let tools: Arc<[ToolSpec]> = vec![tool("read_file"), tool("grep")].into();
    for system in ["", "You are attest.", ""] {
        let req = ModelRequest {
            system: system.into(),
            tools: Arc::clone(&tools),
            ..request(steps(2).pop().unwrap(), Some("session-1"))
        };
        let body = anthropic::body_json_kept(&req, "m", &mut kept);
        assert_eq!(body, anthropic::body_json(&req, "m"));
    }
    assert_eq!(kept.tool_lists(), 2);
}

#[test]
fn kept_tool_lists_are_bounded_and_a_live_run_s_list_stays() {
    let mut kept = Fragments::default();
    let live: Arc<[ToolSpec]> = vec![tool("read_file")].into();
    let req = |tools: Arc<[ToolSpec]>| ModelRequest {
        tools,
        ..request(steps(1).pop().unwrap(), None)
    };
    openai::body_json_kept(&req(Arc::clone(&live)), "m", &mut kept);
    for n in 0..20 {
        openai::body_json_kept(&req(vec![tool(&format!("t{n}"))].into()), "m", &mut kept);
        assert!(kept.tool_lists() <= 8, "{}", kept.tool_lists());
    }
    assert!(kept.keeps_tools(&live), "the live list was still kept");
    let body = openai::body_json_kept(&req(Arc::clone(&live)), "m", &mut kept);
    assert!(body.contains("\"read_file\""), "{body}");
}

#[test]
fn a_growing_run_s_leading_messages_are_kept_whole_and_reused() {
    for cache_key in [None, Some("session-1")] {
        for (whole, kept_build) in WIRES {
            let mut kept = Fragments::default();
            let steps = steps(12);
            for (step, history) in steps.iter().enumerate() {
                let req = request(history.clone(), cache_key);
                let before = kept.prefix_covers(&req.history);
                assert_eq!(kept_build(&req, "m", &mut kept), whole(&req, "m"));
                if step >= 2 {
                    assert!(before > 0, "step {step}: no kept prefix was reused");
                }
                // Never past the snapshot, which the next request replaces.
                let covers = kept.prefix_covers(&req.history);
                assert!(
                    covers < req.history.len() - 1,
                    "step {step}: covers {covers} of {}",
                    req.history.len()
                );
            }
            // Another run's requests (other allocations) reuse nothing of it.
            let other = request(
                steps[11].iter().map(|i| Arc::new((**i).clone())).collect(),
                cache_key,
            );
            assert_eq!(kept.prefix_covers(&other.history), 0);
            assert_eq!(kept_build(&other, "m", &mut kept), whole(&other, "m"));
        }
    }
}

#[test]
fn equal_items_in_other_allocations_are_written_anew_and_right() {
    for (whole, kept_build) in WIRES {
        let mut kept = Fragments::default();
        let first = vec![
            Arc::new(TranscriptItem::UserInput { text: "one".into() }),
            Arc::new(text("first answer", AssistantPhase::Answer)),
        ];
        kept_build(&request(first.clone(), None), "m", &mut kept);
        // Another run: its first item a different allocation with other
        // text, its second the same text in another allocation.
        let other = vec![
            Arc::new(TranscriptItem::UserInput { text: "two".into() }),
            Arc::new(text("first answer", AssistantPhase::Answer)),
        ];
        let req = request(other, None);
        let body = kept_build(&req, "m", &mut kept);
        assert_eq!(body, whole(&req, "m"));
        assert!(
            body.contains("\"two\"") && !body.contains("\"one\""),
            "{body}"
        );
        drop(first);
    }
}

#[test]
fn pieces_of_dropped_runs_are_pruned_once_past_the_bound_and_live_ones_stay() {
    let mut kept = Fragments::default();
    // A live run: its items are held (by its engine, here by the test).
    let live = vec![Arc::new(TranscriptItem::UserInput {
        text: "live".into(),
    })];
    openai::body_json_kept(&request(live.clone(), None), "m", &mut kept);
    for run in 0..400 {
        let items = vec![Arc::new(TranscriptItem::UserInput {
            text: format!("run {run}"),
        })];
        openai::body_json_kept(&request(items.clone(), None), "m", &mut kept);
        assert!(kept.is_kept(&items), "kept while its run holds it");
        // The run is over: only the cache holds its items.
    }
    assert!(
        kept.len() <= 300,
        "{} pieces kept for 400 finished one-item runs",
        kept.len()
    );
    assert!(kept.is_kept(&live), "the live run's piece was pruned");
}

#[test]
fn pieces_only_the_request_holds_are_not_kept() {
    let mut kept = Fragments::default();
    let logged = Arc::new(TranscriptItem::UserInput { text: "q".into() });
    let req = request(vec![Arc::clone(&logged), snapshot(0)], None);
    openai::body_json_kept(&req, "m", &mut kept);
    assert!(kept.is_kept(std::slice::from_ref(&logged)));
    assert_eq!(
        kept.len(),
        1,
        "the snapshot, written for this request only, is not kept"
    );
}

fn item() -> impl Strategy<Value = TranscriptItem> {
    let id = "[a-c]";
    let words = "[ -~\u{e9}\u{1}\"\\\\]{0,12}";
    prop_oneof![
        words.prop_map(|t| TranscriptItem::UserInput { text: t }),
        (words, any::<bool>()).prop_map(|(t, answer)| text(
            &t,
            if answer {
                AssistantPhase::Answer
            } else {
                AssistantPhase::Commentary
            }
        )),
        (
            id,
            prop_oneof![
                Just("{}"),
                Just(r#"{"b":1,"a":[2]}"#),
                Just("[1]"),
                Just("x")
            ]
        )
            .prop_map(|(id, args)| call(&id, args)),
        (id, words, any::<bool>()).prop_map(|(id, out, ok)| result(
            &id,
            &out,
            if ok {
                ReceiptStatus::Ok
            } else {
                ReceiptStatus::Error
            }
        )),
        words.prop_map(|t| TranscriptItem::HarnessMessage {
            kind: HarnessMessageKind::Reminder,
            text: t,
        }),
    ]
}

proptest! {
    /// A growing run of any items (unnormalized too), each request
    /// carrying every item so far and a snapshot or not, reusing the kept
    /// prefix where it can: every body is the whole body.
    #[test]
    fn growing_runs_built_from_kept_prefixes_equal_whole_bodies(
        items in proptest::collection::vec(item(), 0..40),
        mut cuts in proptest::collection::vec((0usize..40, any::<bool>()), 1..12),
        cached in any::<bool>(),
    ) {
        cuts.sort_by_key(|&(cut, _)| cut);
        let items: Vec<Arc<TranscriptItem>> = items.into_iter().map(Arc::new).collect();
        for (whole, kept_build) in WIRES {
            let mut kept = Fragments::default();
            for (step, &(cut, with_snapshot)) in cuts.iter().enumerate() {
                let mut history = items[..cut.min(items.len())].to_vec();
                if with_snapshot {
                    history.push(snapshot(step));
                }
                let req = request(history, cached.then_some("k"));
                prop_assert_eq!(kept_build(&req, "m", &mut kept), whole(&req, "m"));
            }
        }
    }

    /// Whatever the items (unnormalized too), every prefix of a run, with a
    /// snapshot or not, is the whole body when built from what the earlier
    /// prefixes kept.
    #[test]
    fn kept_bodies_equal_whole_bodies(
        items in proptest::collection::vec(item(), 0..24),
        cuts in proptest::collection::vec((0usize..24, any::<bool>(), any::<bool>()), 1..6),
    ) {
        let items: Vec<Arc<TranscriptItem>> = items.into_iter().map(Arc::new).collect();
        for (whole, kept_build) in WIRES {
            let mut kept = Fragments::default();
            for (step, &(cut, with_snapshot, cached)) in cuts.iter().enumerate() {
                let mut history = items[..cut.min(items.len())].to_vec();
                if with_snapshot {
                    history.push(snapshot(step));
                }
                let req = request(history, cached.then_some("k"));
                prop_assert_eq!(kept_build(&req, "m", &mut kept), whole(&req, "m"));
            }
        }
    }
}

#[test]
fn a_long_run_s_body_shares_its_kept_messages_in_few_pieces() {
    type Parts = fn(&ModelRequest, &str, &mut Fragments) -> attest_providers::fragments::KeptBody;
    let wires: [(Whole, Parts); 2] = [
        (openai::body_json, openai::body_kept),
        (anthropic::body_json, anthropic::body_kept),
    ];
    for (whole, parts) in wires {
        let mut kept = Fragments::default();
        let mut previous: Vec<(usize, usize)> = Vec::new();
        let (mut sent, mut fresh) = (0usize, 0usize);
        for (step, history) in steps(200).into_iter().enumerate() {
            let req = request(history, None);
            let body = parts(&req, "m", &mut kept);
            assert_eq!(body.to_json(), whole(&req, "m"), "step {step}");
            sent += body.len();
            let pieces = body.into_parts();
            // Few pieces: the kept runs halve in size from oldest to newest.
            assert!(pieces.len() <= 24, "step {step}: {} pieces", pieces.len());
            let at = |p: &bytes::Bytes| (p.as_ptr() as usize, p.len());
            // Bytes of kept runs the request before did not already hold.
            let runs = &pieces[1..pieces.len() - 1];
            fresh += (runs.iter())
                .filter(|p| p.len() > 1 && !previous.contains(&at(p)))
                .map(|p| p.len())
                .sum::<usize>();
            previous = runs.iter().map(at).collect();
        }
        // Copying the kept messages into every body would make this about
        // the whole of what was sent.
        assert!(fresh * 10 < sent, "{fresh} of {sent} bytes copied anew");
    }
}

/// A kept prefix's items lose their pieces: the prefix holds their
/// messages whole, so a long run keeps pieces only of its newest items,
/// not every message twice. A request that no longer begins with the
/// prefix (one after a compaction, carrying the newest items after a
/// summary) writes them anew, and its body is still the whole body.
#[test]
fn pieces_a_kept_prefix_covers_are_not_kept_twice() {
    for (whole, kept_build) in WIRES {
        let mut kept = Fragments::default();
        let steps = steps(40);
        // The run's items; each snapshot only its own request holds.
        let mut last = steps.last().expect("a step").clone();
        last.pop();
        for history in steps {
            let req = request(history, None);
            assert_eq!(kept_build(&req, "m", &mut kept), whole(&req, "m"));
        }
        let covered = kept.prefix_covers(&last);
        assert!(covered > 150, "the prefix covers {covered} items");
        // Pieces of the newest items only (with the covered items' pieces
        // left in, 121 of them here).
        assert!(
            kept.len() <= 8,
            "{} pieces kept beside a prefix of {covered} of {} items",
            kept.len(),
            last.len()
        );
        let mut compacted = vec![Arc::new(TranscriptItem::HarnessMessage {
            kind: HarnessMessageKind::CompactionSummary,
            text: "[attest] Summary of earlier history.".into(),
        })];
        compacted.extend(last[last.len() - 20..].iter().cloned());
        for step in [100, 101] {
            let mut history = compacted.clone();
            history.push(snapshot(step));
            let req = request(history, None);
            assert_eq!(kept_build(&req, "m", &mut kept), whole(&req, "m"));
        }
    }
}
