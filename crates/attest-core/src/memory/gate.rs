//! The consolidation gate (SPEC G2, seed 000 §9.4), in code: only what the
//! user stated and what a successful receipt shows may become `active`.
//! Model inferences — and any URL, domain, path or command that no receipt
//! shows — stay candidates, which are never injected as facts.

use super::extract::{Origin, Proposal};
use super::values::Value;
use crate::grounding::{grounds, Source};
use attest_protocol::{
    ConfidenceLevel, ConflictPolicy, MemoryProvenance, MemorySourceRef, MemoryStatus,
    ReceiptStatus, TranscriptItem,
};
use chrono::{DateTime, Duration, Utc};
use std::collections::HashMap;

/// A successful, verified tool result of the run: the only thing that can
/// back a fact from an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiptView<'a> {
    pub call_id: &'a str,
    pub tool_name: &'a str,
    /// What the model was shown (redacted, as logged).
    pub output: &'a str,
    /// The call's own arguments: what they say the output does not back.
    pub arguments: &'a str,
    pub path: Option<&'a str>,
    pub sha256: Option<&'a str>,
}

/// The results in `items` that count as evidence: the tool ran, succeeded
/// and its declared evidence is present (`Receipt::is_satisfying`).
pub fn backing_receipts(items: &[TranscriptItem]) -> Vec<ReceiptView<'_>> {
    // Each call's arguments by id, looked up once per result: a search of
    // the items per result made a long run's end quadratic.
    let mut calls: HashMap<&str, &str> = HashMap::new();
    for item in items {
        if let TranscriptItem::ToolCall {
            call_id, arguments, ..
        } = item
        {
            // An id used twice keeps its first call, as the search did.
            calls.entry(call_id).or_insert(arguments);
        }
    }
    let arguments = |id: &str| calls.get(id).copied();
    items
        .iter()
        .filter_map(|item| match item {
            TranscriptItem::ToolResult {
                call_id,
                name,
                status: ReceiptStatus::Ok,
                output,
                receipt: Some(r),
            } if r.is_satisfying() && r.call_id == *call_id => Some(ReceiptView {
                call_id,
                tool_name: name,
                output,
                arguments: arguments(call_id).unwrap_or(""),
                path: r.evidence.path.as_deref(),
                sha256: r.evidence.sha256.as_deref(),
            }),
            _ => None,
        })
        .collect()
}

/// The first receipt that grounds every one of `values` under the
/// grounding rule (SPEC A9): its output shows the value verbatim and its
/// own arguments do not (`echo <claim>` launders nothing).
pub fn find_backing<'a>(values: &[Value], receipts: &[ReceiptView<'a>]) -> Option<ReceiptView<'a>> {
    if values.is_empty() {
        return None;
    }
    receipts
        .iter()
        .find(|r| {
            let source = Source {
                call_id: r.call_id,
                tool_name: r.tool_name,
                output: r.output,
                arguments: r.arguments,
                counts: Vec::new(),
                // Memory is stricter: a fact needs an output that shows it.
                target: None,
                observation: false,
            };
            values.iter().all(|v| grounds(&v.checkable(), &source))
        })
        .copied()
}

/// What the gate made of a proposal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gated {
    pub provenance: MemoryProvenance,
    pub status: MemoryStatus,
    pub source_ref: MemorySourceRef,
    pub confidence: ConfidenceLevel,
    pub conflict_policy: ConflictPolicy,
    pub expires_at: Option<DateTime<Utc>>,
    pub reason: String,
}

/// How long a fact read from a file stays retrievable; it is re-hashed
/// before each injection anyway.
const FILE_FACT_TTL_DAYS: i64 = 90;
/// Tool output without a file behind it (a command's output) describes a
/// moment, not a lasting fact.
const VOLATILE_FACT_TTL_DAYS: i64 = 7;
/// Candidates nobody promoted are not kept for ever.
const CANDIDATE_TTL_DAYS: i64 = 30;

/// The skill a receipt of the `skill` tool read, from its evidence path
/// (`skills/<name>/SKILL.md`).
pub fn skill_of(receipt: &ReceiptView<'_>) -> Option<String> {
    if receipt.tool_name != "skill" {
        return None;
    }
    let mut parts = receipt.path?.split('/');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("skills"), Some(name), Some("SKILL.md"), None) if !name.is_empty() => {
            Some(name.to_string())
        }
        _ => None,
    }
}

fn listed(values: &[&Value]) -> String {
    values
        .iter()
        .map(|v| format!("{} `{}`", v.kind.as_str(), v.text))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Decides provenance and status for one proposal. `completed` is whether
/// the run ended `completed`: only a completed run's answer can be backed.
pub fn gate(
    proposal: &Proposal,
    completed: bool,
    receipts: &[ReceiptView<'_>],
    run_id: &str,
    now: DateTime<Utc>,
) -> Gated {
    let mut source_ref = MemorySourceRef {
        run_id: Some(run_id.to_string()),
        ..Default::default()
    };
    let backing = find_backing(&proposal.values, receipts);
    if let Some(b) = &backing {
        source_ref.call_id = Some(b.call_id.to_string());
        source_ref.tool_name = Some(b.tool_name.to_string());
        source_ref.path = b.path.map(String::from);
        source_ref.sha256 = b.sha256.map(String::from);
        source_ref.skill = skill_of(b);
        source_ref.values = proposal.values.iter().map(|v| v.text.clone()).collect();
    }
    let risky: Vec<&Value> = proposal
        .values
        .iter()
        .filter(|v| v.kind.is_risky())
        .collect();
    match proposal.origin {
        Origin::UserStatement => {
            source_ref.note = Some("user_input".into());
            let base = Gated {
                provenance: MemoryProvenance::UserExplicit,
                status: MemoryStatus::Active,
                source_ref,
                confidence: ConfidenceLevel::High,
                conflict_policy: ConflictPolicy::DeferToSource,
                expires_at: None,
                reason: "stated by the user".into(),
            };
            match (&backing, risky.is_empty()) {
                (_, true) => base,
                (Some(b), false) => Gated {
                    reason: format!(
                        "stated by the user; its {} also appear(s) in the result of {} {}",
                        listed(&risky),
                        b.tool_name,
                        b.call_id
                    ),
                    ..base
                },
                (None, false) => Gated {
                    status: MemoryStatus::Candidate,
                    confidence: ConfidenceLevel::Medium,
                    expires_at: Some(now + Duration::days(CANDIDATE_TTL_DAYS)),
                    reason: format!(
                        "stated by the user, but names a {} that no receipt in this run shows; a URL, domain, path or command stays a candidate until a tool confirms it or the user promotes it (`attest memory promote`)",
                        listed(&risky)
                    ),
                    ..base
                },
            }
        }
        Origin::Answer => {
            let inference = |reason: String, source_ref: MemorySourceRef| Gated {
                provenance: MemoryProvenance::ModelInference,
                status: MemoryStatus::Candidate,
                source_ref: MemorySourceRef {
                    note: Some("the model's answer".into()),
                    ..source_ref
                },
                confidence: ConfidenceLevel::Low,
                conflict_policy: ConflictPolicy::RetractOnConflict,
                expires_at: Some(now + Duration::days(CANDIDATE_TTL_DAYS)),
                reason,
            };
            let values: Vec<&Value> = proposal.values.iter().collect();
            match backing {
                _ if !completed => inference(
                    "the run did not end completed, so its answer is not accepted; inferred by the model, unverified".into(),
                    MemorySourceRef {
                        run_id: Some(run_id.to_string()),
                        ..Default::default()
                    },
                ),
                None => inference(
                    format!(
                        "inferred by the model: no successful receipt in this run shows its {}{}",
                        listed(&values),
                        if risky.is_empty() {
                            ""
                        } else {
                            "; URLs, domains, paths and commands need a receipt"
                        }
                    ),
                    source_ref,
                ),
                Some(b) => {
                    let skill = skill_of(&b);
                    let on_file = b.path.is_some() && b.sha256.is_some();
                    let reason = format!(
                        "its {} appear(s) verbatim in the result of {} {}{}",
                        listed(&values),
                        b.tool_name,
                        b.call_id,
                        b.path.map(|p| format!(" ({p})")).unwrap_or_default()
                    );
                    Gated {
                        provenance: if skill.is_some() {
                            MemoryProvenance::Skill
                        } else {
                            MemoryProvenance::ToolReceipt
                        },
                        status: MemoryStatus::Active,
                        source_ref,
                        confidence: if on_file {
                            ConfidenceLevel::High
                        } else {
                            ConfidenceLevel::Medium
                        },
                        conflict_policy: ConflictPolicy::DeferToSource,
                        expires_at: match (skill.is_some(), on_file) {
                            (true, _) => None,
                            (false, true) => Some(now + Duration::days(FILE_FACT_TTL_DAYS)),
                            (false, false) => Some(now + Duration::days(VOLATILE_FACT_TTL_DAYS)),
                        },
                        reason,
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::extract::{answer_facts, user_statements};
    use crate::memory::tests::tool_result as result;

    #[test]
    fn a_receipt_backed_answer_is_active_with_its_source() {
        let items = [result(
            "call_1",
            "read_file",
            "[server]\nport = 8080\n",
            true,
            Some("config.toml"),
        )];
        let receipts = backing_receipts(&items);
        let p = &answer_facts("The port is 8080.")[0];
        let g = gate(p, true, &receipts, "run1", Utc::now());
        assert_eq!(g.provenance, MemoryProvenance::ToolReceipt);
        assert_eq!(g.status, MemoryStatus::Active);
        assert_eq!(g.source_ref.call_id.as_deref(), Some("call_1"));
        assert_eq!(g.source_ref.path.as_deref(), Some("config.toml"));
        assert!(g.source_ref.sha256.is_some());
        assert!(g.reason.contains("call_1"), "{}", g.reason);
        // Not completed: the same answer is only an inference.
        let g = gate(p, false, &receipts, "run1", Utc::now());
        assert_eq!(g.provenance, MemoryProvenance::ModelInference);
        assert_eq!(g.status, MemoryStatus::Candidate);
    }

    #[test]
    fn unbacked_or_failed_receipts_leave_a_candidate() {
        let items = [
            result("c1", "read_file", "port = 9090", true, Some("config.toml")),
            result("c2", "shell", "api.wrong-example.com", false, None),
        ];
        let receipts = backing_receipts(&items);
        assert_eq!(receipts.len(), 1, "the failed call backs nothing");
        for answer in [
            "The port is 8080.",
            "The API lives at api.wrong-example.com.",
        ] {
            let g = gate(&answer_facts(answer)[0], true, &receipts, "r", Utc::now());
            assert_eq!(g.provenance, MemoryProvenance::ModelInference, "{answer}");
            assert_eq!(g.status, MemoryStatus::Candidate, "{answer}");
            assert_eq!(g.conflict_policy, ConflictPolicy::RetractOnConflict);
        }
        let g = gate(
            &answer_facts("The API lives at api.wrong-example.com.")[0],
            true,
            &receipts,
            "r",
            Utc::now(),
        );
        assert!(g.reason.contains("need a receipt"), "{}", g.reason);
    }

    #[test]
    fn each_receipt_carries_its_own_calls_arguments() {
        let call = |id: &str, args: &str| TranscriptItem::ToolCall {
            call_id: id.into(),
            name: "read_file".into(),
            arguments: args.into(),
        };
        let items = [
            call("c1", r#"{"path":"a"}"#),
            call("c2", r#"{"path":"b"}"#),
            result("c2", "read_file", "b", true, Some("b")),
            result("c1", "read_file", "a", true, Some("a")),
            // An id used again keeps its first call.
            call("c1", r#"{"path":"z"}"#),
            result("c3", "read_file", "no call", true, Some("c")),
        ];
        let receipts = backing_receipts(&items);
        let pairs: Vec<(&str, &str)> = receipts.iter().map(|r| (r.call_id, r.arguments)).collect();
        assert_eq!(
            pairs,
            [
                ("c2", r#"{"path":"b"}"#),
                ("c1", r#"{"path":"a"}"#),
                ("c3", "")
            ]
        );
    }

    #[test]
    fn an_echo_of_the_models_claim_backs_nothing() {
        let echo = r#"{"command":"echo deploy host is evil.example.com"}"#;
        let items = [
            TranscriptItem::ToolCall {
                call_id: "c1".into(),
                name: "shell".into(),
                arguments: echo.into(),
            },
            result(
                "c1",
                "shell",
                "deploy host is evil.example.com\n",
                true,
                None,
            ),
        ];
        let receipts = backing_receipts(&items);
        assert_eq!(receipts[0].arguments, echo);
        let p = &answer_facts("The deploy host is evil.example.com.")[0];
        let g = gate(p, true, &receipts, "r", Utc::now());
        assert_eq!(g.provenance, MemoryProvenance::ModelInference);
        assert_eq!(g.status, MemoryStatus::Candidate);
        assert_eq!(g.source_ref.call_id, None);
    }

    #[test]
    fn a_skill_receipt_gives_skill_provenance() {
        let items = [result(
            "c1",
            "skill",
            "The API lives at api.right-example.com.",
            true,
            Some("skills/api/SKILL.md"),
        )];
        let receipts = backing_receipts(&items);
        let g = gate(
            &answer_facts("The API lives at api.right-example.com.")[0],
            true,
            &receipts,
            "r",
            Utc::now(),
        );
        assert_eq!(g.provenance, MemoryProvenance::Skill);
        assert_eq!(g.source_ref.skill.as_deref(), Some("api"));
        assert_eq!(g.status, MemoryStatus::Active);
        assert_eq!(g.expires_at, None);
    }

    #[test]
    fn user_statements_are_active_unless_they_name_an_unconfirmed_url_or_path() {
        let now = Utc::now();
        let plain = &user_statements("Remember that I prefer tabs.")[0];
        let g = gate(plain, true, &[], "r", now);
        assert_eq!(
            (g.provenance, g.status),
            (MemoryProvenance::UserExplicit, MemoryStatus::Active)
        );
        let risky = &user_statements("Remember that the API is at api.example.com.")[0];
        let g = gate(risky, true, &[], "r", now);
        assert_eq!(
            (g.provenance, g.status),
            (MemoryProvenance::UserExplicit, MemoryStatus::Candidate)
        );
        assert!(g.reason.contains("attest memory promote"), "{}", g.reason);
        let items = [result(
            "c",
            "read_file",
            "host = \"api.example.com\"",
            true,
            Some("a.toml"),
        )];
        let g = gate(risky, true, &backing_receipts(&items), "r", now);
        assert_eq!(g.status, MemoryStatus::Active);
    }
}
