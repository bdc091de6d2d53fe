//! Shared test helpers and consolidation tests across the memory modules.

use super::*;
use attest_protocol::{
    EffectClass, Evidence, Receipt, ReceiptStatus, TerminalState, TranscriptItem,
    VerificationStatus,
};

pub(crate) fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

pub(crate) fn item(
    content: &str,
    provenance: MemoryProvenance,
    status: MemoryStatus,
) -> MemoryItem {
    MemoryItem {
        id: item_id(content),
        content: content.into(),
        kind: MemoryKind::ProjectFact,
        provenance,
        source_ref: MemorySourceRef::default(),
        verified_at: None,
        expires_at: None,
        confidence: ConfidenceLevel::Medium,
        conflict_policy: if provenance.is_unverified() {
            ConflictPolicy::RetractOnConflict
        } else {
            ConflictPolicy::DeferToSource
        },
        status,
        created_at: now(),
        updated_at: now(),
    }
}

/// A tool result with its receipt; `path` gives it file evidence (with a
/// hash derived from the output, so a different output is a different file).
pub(crate) fn tool_result(
    call_id: &str,
    tool: &str,
    output: &str,
    ok: bool,
    path: Option<&str>,
) -> TranscriptItem {
    let status = if ok {
        ReceiptStatus::Ok
    } else {
        ReceiptStatus::Error
    };
    TranscriptItem::ToolResult {
        call_id: call_id.into(),
        name: tool.into(),
        status,
        output: output.into(),
        receipt: Some(Box::new(Receipt {
            call_id: call_id.into(),
            tool_name: tool.into(),
            effect: EffectClass::Observe,
            status,
            started_at: now(),
            finished_at: now(),
            input_fingerprint: "f".into(),
            evidence: Evidence {
                path: path.map(String::from),
                sha256: path.map(|_| crate::text::sha256_hex(output.as_bytes())),
                exit_code: path.is_none().then_some(0),
                ..Default::default()
            },
            verification_status: if ok {
                VerificationStatus::Verified
            } else {
                VerificationStatus::NotApplicable
            },
            error: None,
        })),
    }
}

fn run<'a>(items: &'a [TranscriptItem], answer: Option<&'a str>) -> RunSummary<'a> {
    RunSummary {
        run_id: "run-1",
        items,
        state: TerminalState::Completed,
        answer,
    }
}

fn api_skill() -> crate::context::skills::SkillMeta {
    crate::context::skills::SkillMeta {
        name: "api".into(),
        description: "The company API: base URL and authentication".into(),
        path: "skills/api/SKILL.md".into(),
        sha256: "00".repeat(32),
    }
}

#[test]
fn seed_24_a_wrong_domain_from_the_model_stays_a_candidate_and_a_skill_retracts_it() {
    let items = [TranscriptItem::UserInput {
        text: "Where does the API live?".into(),
    }];
    let answer = "The API lives at api.wrong-example.com.";
    let c = consolidate(
        &run(&items, Some(answer)),
        &[],
        &[],
        &Redactor::new(),
        now(),
    );
    assert_eq!(c.upserts.len(), 1);
    let it = &c.upserts[0];
    assert_eq!(it.provenance, MemoryProvenance::ModelInference);
    assert_eq!(it.status, MemoryStatus::Candidate);
    assert_eq!(c.decisions[0].decision, MemoryDecision::KeptCandidate);
    assert!(
        c.decisions[0]
            .reason
            .contains("domain `api.wrong-example.com`"),
        "{:?}",
        c.decisions
    );
    // Never injected, whatever the prompt.
    let layer = memory_layer(
        &c.upserts,
        "Where does the API live?",
        &[],
        now(),
        &RetrievalLimits::default(),
    );
    assert_eq!(layer.text, "");

    // The next run (any run) in a workspace with a matching skill retracts it.
    let later = [TranscriptItem::UserInput {
        text: "hello".into(),
    }];
    let c2 = consolidate(
        &run(&later, Some("Hi.")),
        &c.upserts,
        &[api_skill()],
        &Redactor::new(),
        now(),
    );
    assert_eq!(c2.upserts.len(), 1);
    assert_eq!(c2.upserts[0].status, MemoryStatus::Retracted);
    assert_eq!(
        c2.decisions.last().map(|d| d.decision),
        Some(MemoryDecision::Retracted)
    );
    assert!(c2.decisions.last().unwrap().reason.contains("skill `api`"));
}

#[test]
fn a_receipt_backed_fact_is_promoted_with_call_path_and_hash() {
    let items = [
        TranscriptItem::UserInput {
            text: "Which port?".into(),
        },
        tool_result(
            "call_1",
            "read_file",
            "[server]\nport = 8080\n",
            true,
            Some("config.toml"),
        ),
    ];
    let c = consolidate(
        &run(&items, Some("The port is 8080.")),
        &[],
        &[],
        &Redactor::new(),
        now(),
    );
    let it = &c.upserts[0];
    assert_eq!(
        (it.provenance, it.status),
        (MemoryProvenance::ToolReceipt, MemoryStatus::Active)
    );
    assert_eq!(it.source_ref.call_id.as_deref(), Some("call_1"));
    assert_eq!(it.source_ref.path.as_deref(), Some("config.toml"));
    assert!(it.source_ref.sha256.is_some());
    assert_eq!(it.source_ref.run_id.as_deref(), Some("run-1"));
    assert_eq!(it.verified_at, Some(now()));
    assert_eq!(c.decisions[0].decision, MemoryDecision::Promoted);
}

#[test]
fn user_statements_are_promoted_and_secrets_rejected() {
    const CANARY: &str = "sk-canary-memory-5d1e9b7a";
    let items = [TranscriptItem::UserInput {
        text: format!("Remember that my key is {CANARY}. I prefer short answers."),
    }];
    let c = consolidate(&run(&items, Some("OK.")), &[], &[], &Redactor::new(), now());
    assert_eq!(c.upserts.len(), 1, "{:?}", c.upserts);
    assert_eq!(c.upserts[0].content, "I prefer short answers.");
    assert_eq!(c.upserts[0].provenance, MemoryProvenance::UserExplicit);
    assert_eq!(c.upserts[0].status, MemoryStatus::Active);
    let rejected = &c.decisions[0];
    assert_eq!(rejected.decision, MemoryDecision::Rejected);
    assert!(
        !format!("{c:?}").contains(CANARY),
        "the canary leaked: {c:?}"
    );
}

#[test]
fn a_newer_tool_result_retracts_an_inference_and_marks_an_active_item_stale() {
    let wrong = item(
        "The API lives at api.wrong-example.com.",
        MemoryProvenance::ModelInference,
        MemoryStatus::Candidate,
    );
    let old = item(
        "The API lives at api.old-example.com.",
        MemoryProvenance::ToolReceipt,
        MemoryStatus::Active,
    );
    let items = [tool_result(
        "c9",
        "skill",
        "Base: api.right-example.com",
        true,
        Some("skills/api/SKILL.md"),
    )];
    let c = consolidate(
        &run(&items, Some("The API lives at api.right-example.com.")),
        &[wrong.clone(), old.clone()],
        &[],
        &Redactor::new(),
        now(),
    );
    let find = |id: &str| c.upserts.iter().find(|i| i.id == id).unwrap();
    let right = &c.upserts[0];
    assert_eq!(
        (right.provenance, right.status),
        (MemoryProvenance::Skill, MemoryStatus::Active)
    );
    assert_eq!(find(&wrong.id).status, MemoryStatus::Retracted);
    assert_eq!(find(&old.id).status, MemoryStatus::Stale);
    assert!(c
        .decisions
        .iter()
        .any(|d| d.decision == MemoryDecision::Retracted && d.reason.contains("skill c9")));
}

#[test]
fn reading_a_changed_source_file_marks_its_items_stale() {
    let mut old = item(
        "The port is 8080.",
        MemoryProvenance::ToolReceipt,
        MemoryStatus::Active,
    );
    old.source_ref.path = Some("config.toml".into());
    old.source_ref.sha256 = Some("aa".repeat(32));
    let items = [tool_result(
        "c2",
        "read_file",
        "port = 9090",
        true,
        Some("config.toml"),
    )];
    let c = consolidate(
        &run(&items, Some("Done.")),
        &[old.clone()],
        &[],
        &Redactor::new(),
        now(),
    );
    assert_eq!(c.upserts.len(), 1);
    assert_eq!(c.upserts[0].status, MemoryStatus::Stale);
    assert_eq!(c.decisions[0].decision, MemoryDecision::MarkedStale);
}

#[test]
fn retracted_items_come_back_only_by_the_users_word() {
    let mut gone = item(
        "I prefer tabs.",
        MemoryProvenance::UserExplicit,
        MemoryStatus::Retracted,
    );
    gone.kind = MemoryKind::Preference;
    let items = [TranscriptItem::UserInput { text: "ok".into() }];
    let c = consolidate(
        &run(&items, Some("I prefer tabs.")),
        &[gone.clone()],
        &[],
        &Redactor::new(),
        now(),
    );
    assert!(c.upserts.is_empty());
    let items = [TranscriptItem::UserInput {
        text: "I prefer tabs.".into(),
    }];
    let c = consolidate(&run(&items, None), &[gone], &[], &Redactor::new(), now());
    assert_eq!(c.upserts[0].status, MemoryStatus::Active);
}

#[test]
fn an_unaccepted_answer_is_only_an_inference_even_with_a_matching_receipt() {
    let items = [
        tool_result("c1", "read_file", "port = 8080", true, Some("config.toml")),
        TranscriptItem::AssistantOutput {
            text: "The port is 8080.".into(),
            reasoning: None,
            encrypted_reasoning: Vec::new(),
            phase: attest_protocol::AssistantPhase::Answer,
        },
    ];
    let summary = RunSummary {
        state: TerminalState::Unverified,
        ..run(&items, None)
    };
    let c = consolidate(&summary, &[], &[], &Redactor::new(), now());
    assert_eq!(c.upserts[0].provenance, MemoryProvenance::ModelInference);
    assert_eq!(c.upserts[0].status, MemoryStatus::Candidate);
}

#[test]
fn repeating_an_active_fact_without_a_receipt_changes_nothing() {
    let mut active = item(
        "The port is 8080.",
        MemoryProvenance::ToolReceipt,
        MemoryStatus::Active,
    );
    active.source_ref.path = Some("config.toml".into());
    let items = [TranscriptItem::UserInput {
        text: "port?".into(),
    }];
    let c = consolidate(
        &run(&items, Some("The port is 8080.")),
        &[active],
        &[],
        &Redactor::new(),
        now(),
    );
    assert!(c.upserts.is_empty());
    assert_eq!(c.decisions[0].decision, MemoryDecision::Rejected);
}

#[test]
fn promotion_by_the_user_and_hand_written_and_legacy_items() {
    let cand = item(
        "The API lives at api.x.com.",
        MemoryProvenance::ModelInference,
        MemoryStatus::Candidate,
    );
    let p = promote_by_user(&cand, now());
    assert_eq!(
        (p.provenance, p.status),
        (MemoryProvenance::UserExplicit, MemoryStatus::Active)
    );
    assert!(p
        .source_ref
        .note
        .as_deref()
        .unwrap()
        .contains("was candidate model_inference"));
    assert_eq!(p.id, cand.id);
    let u = user_item("I prefer tabs", "MEMORY.md edit", &Redactor::new(), now()).unwrap();
    assert_eq!(
        (u.provenance, u.status, u.kind),
        (
            MemoryProvenance::UserExplicit,
            MemoryStatus::Active,
            MemoryKind::Preference
        )
    );
    let l = legacy_item(
        "The API lives at api.x.com",
        "old.md",
        &Redactor::new(),
        now(),
    )
    .unwrap();
    assert_eq!(
        (l.provenance, l.status),
        (MemoryProvenance::LegacyUnverified, MemoryStatus::Candidate)
    );
    assert!(legacy_item(
        "token: sk-canary-memory-5d1e9b7a",
        "old.md",
        &Redactor::new(),
        now()
    )
    .is_err());
    assert_eq!(item_id("The port is 8080."), item_id("the  port is 8080"));
    assert_eq!(preview(&"x".repeat(300)).chars().count(), 121);
}
