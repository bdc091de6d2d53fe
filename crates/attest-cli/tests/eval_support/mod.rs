//! Support for the eval tests: a stand-in for the engine that plays a
//! case's scripted responses without a model loop. It executes the data
//! tools of a boundary case through the same serving code the
//! `serve-fixture` command tool runs, writes receipts for them, and judges
//! the answer the way the group's switches say (receipt guard on: the
//! contract decides; off: any answer is done). It lets the scheduler,
//! grader, metrics and reports be tested end to end; the engine's own
//! runner replaces it in the product.
#![allow(dead_code)]

use async_trait::async_trait;
use attest_cli::eval::boundary::serve::{serve, Served};
use attest_cli::eval::boundary::ContextField;
use attest_cli::eval::expect::contract_backed;
use attest_cli::eval::record::{AttemptRecord, ToolCallRecord};
use attest_cli::eval::scheduler::{AttemptOutcome, AttemptRequest, AttemptRunner};
use attest_protocol::{
    EffectClass, Evidence, Receipt, ReceiptStatus, TerminalReason, TerminalState,
    VerificationStatus,
};
use chrono::{TimeZone, Utc};
use std::fmt::Write;

pub struct ScriptRunner;

fn field_of(tool: &str) -> Option<ContextField> {
    ContextField::ALL
        .into_iter()
        .find(|f| f.tool_name() == tool)
}

#[async_trait]
impl AttemptRunner for ScriptRunner {
    fn model_name(&self) -> String {
        "scripted (test runner)".into()
    }

    async fn run_attempt(&self, req: AttemptRequest) -> AttemptOutcome {
        let script = req
            .case
            .model
            .script_for(req.attempt)
            .expect("a scripted case");
        let t = Utc.with_ymd_and_hms(2026, 3, 16, 9, 0, 0).unwrap();
        let mut r = AttemptRecord::empty(req.attempt);
        r.run_id = Some(format!("run-{}-{}-{}", req.group, req.case.id, req.attempt));
        let mut trace = format!("run {}\n", r.run_id.as_ref().unwrap());
        for (step, response) in script.iter().enumerate() {
            for (i, call) in response.tool_calls.iter().enumerate() {
                let call_id = format!("call_{step}_{i}");
                let served = match (&req.case.boundary, field_of(&call.name)) {
                    (Some(b), Some(field)) => serve(&b.fixture, field, &call.arguments),
                    _ => Served::Failure(format!("unknown tool {}", call.name)),
                };
                let ok = matches!(served, Served::Data(_));
                let _ = writeln!(
                    trace,
                    "  tool {} {} -> {}",
                    call.name,
                    call.arguments,
                    match &served {
                        Served::Data(v) => v["data_status"].to_string(),
                        Served::Failure(line) => format!("failed: {line}"),
                    }
                );
                r.tool_calls.push(ToolCallRecord {
                    call_id: call_id.clone(),
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                });
                r.receipts.push(Receipt {
                    call_id,
                    tool_name: call.name.clone(),
                    effect: EffectClass::Observe,
                    status: if ok {
                        ReceiptStatus::Ok
                    } else {
                        ReceiptStatus::Error
                    },
                    started_at: t,
                    finished_at: t,
                    input_fingerprint: "0".repeat(64),
                    evidence: Evidence {
                        exit_code: Some(if ok { 0 } else { 1 }),
                        ..Evidence::default()
                    },
                    verification_status: if ok {
                        VerificationStatus::Verified
                    } else {
                        VerificationStatus::NotApplicable
                    },
                    error: None,
                });
            }
        }
        r.first_turn_tool_call = script.first().is_some_and(|s| !s.tool_calls.is_empty());
        r.steps = script.len() as u32;
        r.latency_ms = 40 * script.len() as u64;
        r.input_tokens = 300 * script.len() as u64;
        r.output_tokens = script.iter().map(|s| s.text.len() as u64 / 4).sum();
        r.answer = script.last().map(|s| s.text.clone());
        let backed = contract_backed(&req.case.contract, &r);
        let (state, reason) = if !req.switches.receipt_guard || backed {
            (TerminalState::Completed, TerminalReason::ContractSatisfied)
        } else {
            (TerminalState::Unverified, TerminalReason::MissingReceipt)
        };
        r.state = Some(state);
        r.reason = Some(reason);
        let _ = writeln!(trace, "  done: {state} ({reason})");
        r.trace_text = Some(trace);
        AttemptOutcome::Finished(Box::new(r))
    }
}

/// The repository's root (for the examples).
pub fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}
