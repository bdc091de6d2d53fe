use super::*;
use attest_protocol::{Evidence, Receipt};

fn receipt(call: &str, tool: &str, status: ReceiptStatus, args_fp: &str) -> Receipt {
    let now = Utc::now();
    Receipt {
        call_id: call.into(),
        tool_name: tool.into(),
        effect: EffectClass::Observe,
        status,
        started_at: now,
        finished_at: now,
        input_fingerprint: args_fp.into(),
        evidence: Evidence {
            path: Some("config.toml".into()),
            sha256: (status == ReceiptStatus::Ok).then(|| "ab".repeat(32)),
            ..Evidence::default()
        },
        verification_status: if status == ReceiptStatus::Ok {
            VerificationStatus::Verified
        } else {
            VerificationStatus::NotApplicable
        },
        error: (status != ReceiptStatus::Ok).then(|| "upstream returned 503".into()),
    }
}

fn count(state: &AgentState, t: StateItemType) -> usize {
    state.active().filter(|i| i.item_type == t).count()
}

#[test]
fn confirmed_facts_need_a_source_and_never_come_from_the_model() {
    let mut state = AgentState::with_goal("find the port", "user_input");
    let mut fact = state.item(
        StateItemType::ConfirmedFact,
        "port is 8080",
        vec![],
        EvidenceType::Observed,
        ConfidenceLevel::High,
    );
    assert_eq!(state.add(fact.clone()), Err(StateError::FactWithoutSource));
    fact.source_refs = vec!["call_1".into()];
    fact.evidence_type = EvidenceType::ModelGenerated;
    assert_eq!(
        state.add(fact.clone()),
        Err(StateError::FactFromModel(EvidenceType::ModelGenerated))
    );
    fact.evidence_type = EvidenceType::Inferred;
    assert!(state.add(fact).is_err());
    // Commentary is never a fact.
    state.on_commentary("The port is surely 9999.", "step_1");
    assert_eq!(count(&state, StateItemType::ConfirmedFact), 0);
    assert_eq!(count(&state, StateItemType::NextStep), 1);
    let step = state
        .active()
        .find(|i| i.item_type == StateItemType::NextStep)
        .unwrap();
    assert_eq!(step.evidence_type, EvidenceType::ModelGenerated);
}

#[test]
fn receipts_become_facts_and_repeated_failures_merge_by_fingerprint() {
    let mut state = AgentState::with_goal("find the port", "user_input");
    for call in ["c1", "c2", "c3"] {
        state.on_receipt(
            &receipt(call, "fetch", ReceiptStatus::Error, "fp1"),
            "{}",
            true,
        );
    }
    let failed: Vec<_> = state
        .active()
        .filter(|i| i.item_type == StateItemType::FailedPath)
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].occurrences, 3);
    assert!(failed[0].blocking);
    // A success of the same call shape supersedes the failure (kept, not deleted).
    state.on_receipt(
        &receipt("c4", "fetch", ReceiptStatus::Ok, "fp1"),
        "{}",
        true,
    );
    assert_eq!(count(&state, StateItemType::FailedPath), 0);
    assert_eq!(count(&state, StateItemType::ConfirmedFact), 1);
    assert!(state
        .items()
        .iter()
        .any(|i| i.item_type == StateItemType::FailedPath && i.status == StateStatus::Superseded));
}

#[test]
fn overflow_keeps_goal_and_blocking_items_and_counts_what_it_left_out() {
    let mut state = AgentState::with_goal("produce the quarterly report", "user_input");
    state.on_receipt(
        &receipt("b1", "prices", ReceiptStatus::Timeout, "fpb"),
        "{}",
        true,
    );
    for i in 0..60 {
        state.on_receipt(
            &receipt(
                &format!("ok{i}"),
                "read_file",
                ReceiptStatus::Ok,
                &format!("fp{i}"),
            ),
            &format!("{{\"path\":\"notes/file-{i}-with-a-long-descriptive-name.md\"}}"),
            true,
        );
    }
    for i in 0..8 {
        state.on_commentary(&format!("I will next look at section {i} in detail."), "s");
    }
    let budget = TailBudget {
        max_tokens: 300,
        ..TailBudget::default()
    };
    let tail = render_tail(&state, &budget);
    assert!(tail.tokens <= 300, "{} tokens:\n{}", tail.tokens, tail.text);
    // Counted line by line, yet within a few tokens of the whole text's count.
    let whole = crate::state::count_tokens(&tail.text);
    assert!(
        tail.tokens.abs_diff(whole) <= 3,
        "{} vs {whole}",
        tail.tokens
    );
    assert_eq!(
        crate::state::tail_tokens(&tail.text),
        tail.tokens,
        "remembered"
    );
    assert!(tail.text.contains("Goal: produce the quarterly report"));
    assert!(
        tail.text.contains("prices {} ended timeout"),
        "{}",
        tail.text
    );
    assert!(tail.omitted > 40);
    assert!(tail.text.contains("omitted for length"));
    // The newest facts are the ones kept.
    assert!(tail.text.contains("file-59-"), "{}", tail.text);
    assert!(!tail.text.contains("file-0-"), "{}", tail.text);
}

#[test]
fn per_type_limits_apply_even_under_the_token_budget() {
    let mut state = AgentState::with_goal("g", "u");
    for i in 0..30 {
        state.on_receipt(
            &receipt(&format!("c{i}"), "t", ReceiptStatus::Ok, &format!("f{i}")),
            "",
            false,
        );
    }
    let tail = render_tail(
        &state,
        &TailBudget {
            max_tokens: 100_000,
            ..TailBudget::default()
        },
    );
    assert_eq!(tail.text.matches("\n- ").count(), 20);
    assert_eq!(tail.omitted, 10);
    // The newest twenty, newest first.
    let at = |name: &str| tail.text.find(name).unwrap_or(usize::MAX);
    assert!(
        at("[c29]") < at("[c25]") && at("[c25]") < at("[c10]"),
        "{}",
        tail.text
    );
    assert!(
        at("[c10]") < usize::MAX && at("[c9]") == usize::MAX,
        "{}",
        tail.text
    );
}

#[test]
fn tail_tokens_equal_the_whole_texts_count_across_blank_lines_and_indents() {
    use crate::state::{count_tokens, tail_tokens};
    let texts = [
        "Fix the build.\n\nSteps:\n\n1. run tests\n2. fix\n\n\nThanks.",
        "a  \nb\n\t\tc\n  d]\n\n e\r\nf\r\n\r\ng",
        "结论：\n\n端口是 8080。\n- 来源：config.toml\n",
        "x\n\u{a0}y\n\u{2028}z\n",
        "\n\nleading\ntrailing\n\n",
        "",
    ];
    for text in texts {
        assert_eq!(tail_tokens(text), count_tokens(text), "{text:?}");
        assert_eq!(tail_tokens(text), count_tokens(text), "memo: {text:?}");
    }
    // A goal with paragraphs (the prompt, verbatim) is counted exactly.
    let mut state =
        AgentState::with_goal("Fix the build.\n\nThen:\n\n- run the tests", "user_input");
    state.on_commentary("I will next run the tests.", "s");
    let tail = render_tail(&state, &TailBudget::default());
    assert_eq!(tail.tokens, count_tokens(&tail.text), "{}", tail.text);
}

proptest::proptest! {
    #[test]
    fn tail_tokens_equal_the_whole_count_for_any_mix_of_breaks_and_blanks(
        text in "[a-zA-Z0-9 .,:;!?()\\[\\]{}\"'\\-_\t\r\n\u{a0}\u{2028}\u{3000}中文。，]{0,120}"
    ) {
        proptest::prop_assert_eq!(
            crate::state::tail_tokens(&text),
            crate::state::count_tokens(&text)
        );
    }
}

/// One thing that can happen to a run's state.
#[derive(Debug, Clone)]
enum Op {
    Receipt {
        tool: u8,
        args: u8,
        ok: bool,
        verified: bool,
        needed: bool,
    },
    Commentary(u8),
    MissingEvidence(u8),
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        6 => (0u8..3, 0u8..4, any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
            |(tool, args, ok, verified, needed)| Op::Receipt { tool, args, ok, verified, needed }
        ),
        1 => (0u8..3).prop_map(Op::Commentary),
        1 => (0u8..3).prop_map(Op::MissingEvidence),
    ]
}

proptest::proptest! {
    /// The index the tail reads (each section's active items, newest first;
    /// failed paths by fingerprint) says what a scan of every item says.
    #[test]
    fn the_active_index_agrees_with_a_scan_of_every_item(
        ops in proptest::collection::vec(op(), 0..60)
    ) {
        let mut state = AgentState::with_goal("read the config", "user_input");
        for (n, op) in ops.iter().enumerate() {
            match op {
                Op::Receipt { tool, args, ok, verified, needed } => {
                    let status = if *ok { ReceiptStatus::Ok } else { ReceiptStatus::Error };
                    let mut r = receipt(&format!("call_{n}"), &format!("tool{tool}"), status, &format!("fp{args}"));
                    if *ok && !*verified {
                        r.verification_status = VerificationStatus::MissingEvidence;
                    }
                    state.on_receipt(&r, &format!("args{args}"), *needed);
                }
                Op::Commentary(k) => state.on_commentary(&format!("plan {k}"), &format!("step_{n}")),
                Op::MissingEvidence(k) => state.on_missing_evidence(&format!("evidence {k}"), &format!("step_{n}")),
            }
        }
        for section in [
            Section::Goal, Section::Blocking, Section::Facts, Section::Failed,
            Section::Limitations, Section::Questions, Section::NextSteps,
        ] {
            let mut scanned: Vec<(usize, &AgentStateItem)> = state
                .items()
                .iter()
                .enumerate()
                .filter(|(_, i)| i.status == StateStatus::Active && Section::of(i) == section)
                .collect();
            // The tail's order before the index: newest first, a stable sort.
            scanned.sort_by(|(_, a), (_, b)| {
                b.updated_at.cmp(&a.updated_at).then_with(|| b.id.cmp(&a.id))
            });
            let scanned: Vec<&str> = scanned.iter().map(|(_, i)| i.id.as_str()).collect();
            let indexed: Vec<&str> = state.newest_in(section).map(|i| i.id.as_str()).collect();
            proptest::prop_assert_eq!(&indexed, &scanned, "section {:?}", section);
            proptest::prop_assert_eq!(state.active_in(section), scanned.len());
        }
        proptest::prop_assert_eq!(
            state.has_progress(),
            state.active().any(|i| i.item_type != StateItemType::Goal)
        );
        for i in state.active().filter(|i| i.fingerprint.is_some()) {
            let fp = i.fingerprint.as_deref().unwrap_or_default();
            let first = state.items().iter().position(|j| {
                j.status == StateStatus::Active && j.fingerprint.as_deref() == Some(fp)
            });
            proptest::prop_assert_eq!(state.active.with_fingerprint(fp).next(), first);
        }
    }
}

#[test]
fn a_lone_string_argument_is_quoted_alone_and_neither_its_path_nor_a_hash_is_repeated() {
    use super::handoff::summary;
    assert_eq!(summary(r#"{"path":"config.toml"}"#), r#""config.toml""#);
    // Control characters stay escaped: a line stays one line.
    assert_eq!(summary(r#"{"command":"ls\nrm x"}"#), r#""ls\nrm x""#);
    for kept in [
        r#"{"path":"config.toml","pattern":"port"}"#,
        r#"{"count":3}"#,
        "not json",
    ] {
        assert_eq!(summary(kept), kept);
    }
    assert!(summary(&format!(r#"{{"path":"{}"}}"#, "a".repeat(300))).ends_with('…'));

    let mut state = AgentState::with_goal("find the port", "user_input");
    let ok = receipt("c1", "read_file", ReceiptStatus::Ok, "fp1");
    state.on_receipt(&ok, &summary(r#"{"path":"config.toml"}"#), true);
    // The evidence path differs from what the call named: it is shown.
    let mut moved = receipt("c2", "read_file", ReceiptStatus::Ok, "fp2");
    moved.evidence.path = Some("config.toml".into());
    state.on_receipt(&moved, &summary(r#"{"path":"./config.toml"}"#), true);
    // No hash either: twelve hex digits cost about as many tokens as the
    // rest of the line, and the receipt keeps the whole digest.
    let tail = render_tail(&state, &TailBudget::default()).text;
    assert!(
        tail.contains("- read_file \"config.toml\": completed [c1]"),
        "{tail}"
    );
    assert!(
        tail.contains("- read_file \"./config.toml\": path config.toml [c2]"),
        "{tail}"
    );
}

/// A long request as the goal: with a goal cap (the request carries the
/// user's message whole) the tail shows its start within the cap and says
/// it was cut, and stays within its own budget; without one, whole.
#[test]
fn a_long_goal_is_cut_to_its_cap_only_when_asked() {
    let english = "Please refactor the parser module and keep every test green. ".repeat(100);
    let cjk = "请重构解析模块并保持所有测试通过。".repeat(100);
    let capped = TailBudget {
        max_goal_tokens: Some(200),
        ..TailBudget::default()
    };
    for goal in [english.as_str(), cjk.as_str()] {
        let mut state = AgentState::with_goal(goal, "user_input");
        state.on_receipt(
            &receipt("c1", "read_file", ReceiptStatus::Ok, "fp"),
            "\"config.toml\"",
            true,
        );
        let tail = render_tail(&state, &capped);
        let line = tail.text.lines().find(|l| l.starts_with("Goal: ")).unwrap();
        let shown = line
            .strip_prefix("Goal: ")
            .and_then(|l| l.strip_suffix(GOAL_CUT_NOTE))
            .unwrap_or_else(|| panic!("not cut: {line}"));
        assert!(goal.starts_with(shown), "{shown}");
        let shown_tokens = count_tokens(shown);
        assert!((160..=200).contains(&shown_tokens), "{shown_tokens} tokens");
        assert!(tail.tokens <= 800, "{} tokens", tail.tokens);
        assert!(
            tail.text.contains("read_file \"config.toml\""),
            "{}",
            tail.text
        );

        let whole = render_tail(&state, &TailBudget::default());
        assert!(whole.text.contains(&format!("Goal: {}", goal.trim())));
        assert!(!whole.text.contains(GOAL_CUT_NOTE));
    }
    // A goal within the cap is shown as it is.
    let mut state = AgentState::with_goal("Which port?", "user_input");
    state.on_receipt(
        &receipt("c1", "read_file", ReceiptStatus::Ok, "fp"),
        "\"a\"",
        true,
    );
    assert!(render_tail(&state, &capped)
        .text
        .contains("\nGoal: Which port?\n"));
}
