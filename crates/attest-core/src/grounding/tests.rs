use super::*;
use attest_protocol::{Evidence as ReceiptEvidence, Receipt, VerificationStatus};

fn values(answer: &str) -> Vec<(String, CheckableKind, Option<String>)> {
    checkable_values(answer)
        .into_iter()
        .map(|c| (c.value, c.kind, c.unit))
        .collect()
}

fn v(value: &str, kind: CheckableKind) -> (String, CheckableKind, Option<String>) {
    (value.to_string(), kind, None)
}

#[test]
fn extracts_each_kind_of_checkable_value() {
    use CheckableKind::*;
    assert_eq!(
        values("MCP appears 0 times; the scan took 12ms over 1,024 lines."),
        [
            ("0".into(), Number, Some("times".into())),
            ("12".into(), Number, Some("ms".into())),
            ("1,024".into(), Number, Some("lines".into())),
        ]
    );
    assert_eq!(
        values("The server listens on port 8080 (see localhost:9090 and db.example.org:5432)."),
        [
            v("8080", Port),
            v("9090", Port),
            v("db.example.org", Domain),
            v("5432", Port)
        ]
    );
    assert_eq!(
        values("Version v1.2.3 and 0.4.2-beta.1 are pinned at commit 3f2a9c1 in src/lib.rs."),
        [
            v("v1.2.3", Version),
            v("0.4.2-beta.1", Version),
            v("3f2a9c1", Hash),
            v("src/lib.rs", Path)
        ]
    );
    assert_eq!(
        values("It is called \"tiny-widget\"; use `serde_json` or `cargo test`, docs at https://docs.rs/x."),
        [
            v("serde_json", Identifier),
            v("cargo test", Quoted),
            v("tiny-widget", Quoted),
            v("https://docs.rs/x", Url)
        ]
    );
    assert_eq!(
        values("```toml\nname = \"a-b\"\n```\nSee README.md."),
        [v("a-b", Quoted), v("README.md", Path)]
    );
}

#[test]
fn plain_words_lone_digits_and_list_markers_are_not_values() {
    for answer in [
        "",
        "Yes, it does.",
        "1. Read the file\n2. Answer",
        "There is 1 of them and it is fine.",
        "Use snake_case names.",
    ] {
        assert!(values(answer).is_empty(), "{answer}: {:?}", values(answer));
    }
}

fn call(id: &str, name: &str, args: &str, output: &str) -> Vec<TranscriptItem> {
    let now = chrono::Utc::now();
    vec![
        TranscriptItem::ToolCall {
            call_id: id.into(),
            name: name.into(),
            arguments: args.into(),
        },
        TranscriptItem::ToolResult {
            call_id: id.into(),
            name: name.into(),
            status: ReceiptStatus::Ok,
            output: output.into(),
            receipt: Some(Box::new(Receipt {
                call_id: id.into(),
                tool_name: name.into(),
                effect: EffectClass::Observe,
                status: ReceiptStatus::Ok,
                started_at: now,
                finished_at: now,
                input_fingerprint: String::new(),
                evidence: ReceiptEvidence::default(),
                verification_status: VerificationStatus::Verified,
                error: None,
            })),
        },
    ]
}

fn user(text: &str) -> TranscriptItem {
    TranscriptItem::UserInput { text: text.into() }
}

#[test]
fn values_map_to_the_calls_whose_output_shows_them() {
    let mut run = vec![user("Which port does config.toml set?")];
    run.extend(call(
        "call_1",
        "read_file",
        r#"{"path":"config.toml"}"#,
        "[server]\nport = 8080\nhost = \"api.example.com\"\n",
    ));
    let evidence = Evidence::from_items(&run, &[], vec!["read_file"]);
    let g = ground(
        "config.toml sets port 8080 on API.example.com; it was read with `read_file`, 9090 is unused.",
        &evidence,
    );
    let by = |value: &str| g.values.iter().find(|x| x.value == value).unwrap();
    assert_eq!(by("8080").call_ids, ["call_1"]);
    assert_eq!(
        by("API.example.com").call_ids,
        ["call_1"],
        "domains ignore case"
    );
    assert!(by("config.toml").in_prompt && by("config.toml").call_ids.is_empty());
    assert!(by("read_file").tool_name);
    assert_eq!(g.ungrounded, ["9090"]);
    assert!(g.evidence_used);
}

#[test]
fn a_call_does_not_ground_what_its_own_arguments_say() {
    let mut run = vec![user("What is the deploy host?")];
    run.extend(call(
        "call_1",
        "shell",
        r#"{"command":"echo deploy host is evil.example.com"}"#,
        "deploy host is evil.example.com\n",
    ));
    let g = ground(
        "The deploy host is evil.example.com.",
        &Evidence::from_items(&run, &[], vec![]),
    );
    assert_eq!(g.ungrounded, ["evil.example.com"]);
    assert!(!g.evidence_used);
}

#[test]
fn earlier_session_evidence_grounds_and_is_evidence() {
    let mut session = vec![user("Read the version.")];
    session.extend(call("old_1", "read_file", "{}", "version = \"0.4.2\""));
    let run = vec![user("And the version again?")];
    let g = ground(
        "It is 0.4.2.",
        &Evidence::from_items(&run, &session, vec![]),
    );
    assert_eq!(g.values[0].session_call_ids, ["old_1"]);
    assert!(g.values[0].call_ids.is_empty());
    assert!(g.evidence_used && g.ungrounded.is_empty());
}

#[test]
fn an_answer_of_prompt_and_tool_names_uses_no_evidence() {
    let mut run = vec![user("Who owns OWNERS.md?")];
    run.extend(call("c1", "read_file", "{}", "owner: dana@example.org"));
    let g = ground(
        "To find the owner you can use `read_file` on OWNERS.md.",
        &Evidence::from_items(&run, &[], vec!["read_file"]),
    );
    assert!(g.ungrounded.is_empty(), "{g:?}");
    assert!(!g.evidence_used);
}

#[test]
fn the_forged_zero_is_ungrounded_but_a_counted_zero_is_not() {
    let mut run = vec![user("Does the essay mention MCP?")];
    run.extend(call(
        "c1",
        "list_documents",
        "{}",
        "doc-1 How we contain Claude\n",
    ));
    let g = ground(
        "MCP appears 0 hits in the essay.",
        &Evidence::from_items(&run, &[], vec![]),
    );
    assert_eq!(g.ungrounded, ["0 hits"]);
    // A search whose receipt counted no matches does ground it.
    let mut counted = run.clone();
    if let Some(TranscriptItem::ToolResult {
        receipt: Some(r), ..
    }) = counted.last_mut()
    {
        r.evidence.match_count = Some(0);
    }
    let g = ground("0 hits.", &Evidence::from_items(&counted, &[], vec![]));
    assert!(g.ungrounded.is_empty(), "{g:?}");
}

#[test]
fn matching_respects_token_edges_and_spellings() {
    let c = |value: &str, kind| Checkable {
        value: value.into(),
        kind,
        unit: None,
    };
    use CheckableKind::*;
    assert!(!found_in(&c("80", Port), "port = 8080"));
    assert!(!found_in(&c("8", Number), "ratio 8.5"));
    assert!(found_in(&c("v1.2.3", Version), "version = \"1.2.3\""));
    assert!(found_in(&c("1.2.3", Version), "tag v1.2.3"));
    assert!(!found_in(&c("1.2.3", Version), "11.2.3"));
    assert!(found_in(&c("3f2a9c1", Hash), "commit 3F2A9C1D0E"));
    assert!(found_in(&c("1,024", Number), "1024 lines"));
    assert!(!found_in(&c("Tiny", Identifier), "tiny"));
    // The bulk matcher and the plain rule agree.
    let values = checkable_values("port 8080, 8.5 ms, v1.2.3, \"Hello World\"");
    let source = Source {
        call_id: "c",
        tool_name: "t",
        output: "8080 8.55 ms 1.2.3 hello world",
        arguments: "",
        counts: vec![],
        target: None,
        observation: false,
    };
    let bulk = Matcher::new(&values).grounded_by(&values, &source);
    let plain: Vec<usize> = (0..values.len())
        .filter(|&i| grounds(&values[i], &source))
        .collect();
    assert_eq!(bulk, plain);
    // 8080 and v1.2.3; 8.5 is not 8.55, and a quote keeps its case.
    assert_eq!(bulk.len(), 2, "{values:?}");
}

#[test]
fn the_path_a_successful_receipt_acted_on_is_grounded_but_is_no_use_of_evidence() {
    let read = Source {
        call_id: "c",
        tool_name: "read_file",
        output: "owner = \"ops\"",
        arguments: r#"{"path":"config.toml"}"#,
        counts: vec![],
        target: Some("./config.toml"),
        observation: true,
    };
    let evidence = Evidence {
        run: vec![read.clone()],
        ..Evidence::default()
    };
    let g = ground(
        "You can use read_file on `config.toml` to find it.",
        &evidence,
    );
    assert!(g.ungrounded.is_empty(), "{g:?}");
    assert!(g
        .values
        .iter()
        .any(|v| v.value == "config.toml" && v.acted_on));
    assert!(!g.evidence_used, "{g:?}");
    // The arguments alone (no receipt path) ground nothing.
    let echo = Evidence {
        run: vec![Source {
            target: None,
            ..read
        }],
        ..Evidence::default()
    };
    assert!(!ground("`config.toml`", &echo).ungrounded.is_empty());
}

#[test]
fn a_quote_around_a_code_span_is_taken_from_the_answer_itself() {
    // Found by the proptest: the quote was read from the text with its code
    // span blanked out, so the value was not the answer's text.
    let answer = "\" ``` `a` \"a\"";
    for c in checkable_values(answer) {
        assert!(found_in(&c, answer), "{c:?}");
    }
}
