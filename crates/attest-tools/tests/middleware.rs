//! The middleware chain in front of the real built-in tools.

use async_trait::async_trait;
use attest_core::failure::{FailureInput, FailureTracker, FingerprintKey, RetryPolicy};
use attest_core::policy::{PermissionPolicy, PermissionsConfig};
use attest_core::tool::middleware::*;
use attest_core::tool::{ToolContext, ToolOutput, ToolRegistry, Workspace};
use attest_core::Redactor;
use attest_protocol::Permission;
use attest_protocol::{ErrorType, ReceiptStatus, TaskType};
use attest_tools::builtin_tools;
use chrono::Utc;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

fn registry() -> ToolRegistry {
    ToolRegistry::new(builtin_tools(None)).unwrap()
}

fn policy(config: serde_json::Value) -> Arc<PermissionPolicy> {
    let config: PermissionsConfig = serde_json::from_value(config).unwrap();
    Arc::new(PermissionPolicy::new(config).unwrap())
}

fn tracker() -> Arc<FailureTracker> {
    Arc::new(FailureTracker::new(
        FingerprintKey::from_bytes([9; 32]),
        Redactor::new(),
        RetryPolicy {
            retry_budget: 1,
            base_backoff: Duration::from_secs(60),
            max_backoff: Duration::from_secs(600),
        },
        TaskType::General,
    ))
}

/// Records what it saw and answers with a fixed decision.
struct Probe {
    name: &'static str,
    answer: MiddlewareDecision,
    seen: Arc<Mutex<Vec<String>>>,
    after: Arc<AtomicUsize>,
}

#[async_trait]
impl Middleware for Probe {
    fn name(&self) -> &str {
        self.name
    }

    async fn before(&self, call: &mut CallContext) -> MiddlewareDecision {
        self.seen
            .lock()
            .unwrap()
            .push(format!("{}:{}", self.name, call.tool()));
        call.note(self.name, "looked");
        self.answer.clone()
    }

    async fn after(&self, _call: &CallContext, _output: &ToolOutput) {
        self.after.fetch_add(1, Ordering::SeqCst);
    }
}

fn probe(
    name: &'static str,
    answer: MiddlewareDecision,
    seen: &Arc<Mutex<Vec<String>>>,
) -> Arc<Probe> {
    Arc::new(Probe {
        name,
        answer,
        seen: Arc::clone(seen),
        after: Arc::new(AtomicUsize::new(0)),
    })
}

fn ask(reason: &str) -> MiddlewareDecision {
    MiddlewareDecision::Ask {
        reason: reason.into(),
        rule: Some("r".into()),
    }
}

fn deny(reason: &str) -> MiddlewareDecision {
    MiddlewareDecision::Deny {
        reason: reason.into(),
    }
}

#[tokio::test]
async fn chain_runs_in_order_and_the_first_deny_stops_it() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let reg = registry()
        .with_middleware(probe("a", MiddlewareDecision::Continue, &seen))
        .with_middleware(probe("b", deny("no"), &seen))
        .with_middleware(probe("c", MiddlewareDecision::Continue, &seen));
    assert_eq!(reg.middleware_names(), ["a", "b", "c"]);
    let call = reg.prepare("read_file", r#"{"path": "x"}"#).unwrap();
    let outcome = reg.check("c1", &call).await;
    assert_eq!(*seen.lock().unwrap(), ["a:read_file", "b:read_file"]);
    match &outcome {
        ChainOutcome::Denied(d) => {
            assert_eq!(d.reason, "no");
            assert_eq!(d.middleware, "b");
            assert_eq!(d.context().call_id(), "c1");
            assert_eq!(d.context().notes.len(), 2);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(outcome.permission(), Permission::Deny);
}

#[tokio::test]
async fn an_ask_is_kept_but_a_later_deny_wins() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let reg = registry()
        .with_middleware(probe("a", ask("please"), &seen))
        .with_middleware(probe("b", ask("me too"), &seen));
    let call = reg.prepare("read_file", r#"{"path": "x"}"#).unwrap();
    match reg.check("c1", &call).await {
        ChainOutcome::NeedsApproval(p) => {
            assert_eq!(p.reason, "please");
            assert_eq!(p.rule.as_deref(), Some("r"));
            assert_eq!(p.middleware, "a");
        }
        other => panic!("{other:?}"),
    }
    let reg = registry()
        .with_middleware(probe("a", ask("please"), &seen))
        .with_middleware(probe("b", deny("never"), &seen));
    assert!(matches!(reg.check("c1", &call).await, ChainOutcome::Denied(d) if d.reason == "never"));
}

#[tokio::test]
async fn without_middleware_the_registry_permission_decides() {
    let reg = registry();
    let read = reg.prepare("read_file", r#"{"path": "x"}"#).unwrap();
    assert!(matches!(
        reg.check("c", &read).await,
        ChainOutcome::Allowed(_)
    ));
    let write = reg
        .prepare("write_file", r#"{"path": "x", "content": ""}"#)
        .unwrap();
    assert!(matches!(
        reg.check("c", &write).await,
        ChainOutcome::NeedsApproval(_)
    ));
    let mut reg = registry();
    reg.set_permission("read_file", Permission::Deny);
    let read = reg.prepare("read_file", r#"{"path": "x"}"#).unwrap();
    assert!(matches!(
        reg.check("c", &read).await,
        ChainOutcome::Denied(_)
    ));
}

#[tokio::test]
async fn cleared_calls_run_and_after_hooks_see_them() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.txt"), "hello").unwrap();
    let ctx = ToolContext::new(Workspace::new(dir.path()).unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let p = probe("a", ask("approve?"), &seen);
    let after = Arc::clone(&p.after);
    let reg = registry().with_middleware(p);
    let call = reg.prepare("read_file", r#"{"path": "f.txt"}"#).unwrap();
    let ChainOutcome::NeedsApproval(pending) = reg.check("c9", &call).await else {
        panic!("expected an ask");
    };
    // The approver said yes.
    let clearance = pending.approve();
    assert_eq!(clearance.context().call_id(), "c9");
    let (out, receipt) = reg.execute_cleared(clearance, &ctx).await;
    assert!(out.success);
    assert_eq!(out.output, "hello");
    assert_eq!(receipt.call_id, "c9");
    assert_eq!(after.load(Ordering::SeqCst), 1);
    // Rejecting gives a denial attributed to the approval.
    let ChainOutcome::NeedsApproval(pending) = reg.check("c10", &call).await else {
        panic!("expected an ask");
    };
    let denial = pending.reject("user said no");
    assert_eq!(denial.middleware, "approval");
    assert_eq!(denial.context().tool(), "read_file");
}

#[tokio::test]
async fn standard_chain_redacts_decides_and_budgets() {
    let tr = tracker();
    let redactor = Arc::new(Redactor::new().with_secrets(["hunter2-secret"]));
    let pol = policy(json!({"shell": {"rules": [{"match": "git status*", "decision": "allow"}]}}));
    let mut reg = registry();
    for m in standard_chain(redactor, pol, Arc::clone(&tr)) {
        reg.push_middleware(m);
    }
    assert_eq!(
        reg.middleware_names(),
        ["redact_arguments", "permission_policy", "retry_budget"]
    );

    let allowed = reg
        .prepare("shell", r#"{"command": "git status"}"#)
        .unwrap();
    let outcome = reg.check("c1", &allowed).await;
    assert!(matches!(outcome, ChainOutcome::Allowed(_)), "{outcome:?}");
    let decision = outcome.context().policy.clone().unwrap();
    assert_eq!(decision.permission, Permission::Allow);
    assert_eq!(
        decision.matched_rule.as_deref(),
        Some("config rule `git status*` for `shell`")
    );

    let secret = reg
        .prepare("shell", r#"{"command": "echo hunter2-secret && rm -rf /"}"#)
        .unwrap();
    let outcome = reg.check("c2", &secret).await;
    let ChainOutcome::Denied(d) = &outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(d.middleware, "permission_policy");
    assert!(
        d.reason
            .starts_with("denied by the permission policy: part 2 of 2"),
        "{}",
        d.reason
    );
    // Events and traces get the redacted copy.
    let logged = outcome.context().arguments_for_log().to_string();
    assert!(!logged.contains("hunter2"), "{logged}");
    assert!(outcome
        .context()
        .arguments()
        .to_string()
        .contains("hunter2"));

    let make = reg.prepare("shell", r#"{"command": "make"}"#).unwrap();
    assert!(matches!(
        reg.check("c3", &make).await,
        ChainOutcome::NeedsApproval(_)
    ));

    // Two identical failures spend a budget of one retry: refused.
    for _ in 0..2 {
        tr.record_failure(
            FailureInput {
                tool_name: "shell",
                provider: &make.provider,
                error_type: ErrorType::NonZeroExit,
                raw_reason: "make: *** No rule to make target",
                arguments: &make.arguments,
                source: make.source,
                affected_fields: vec![],
            },
            Utc::now(),
        );
    }
    let outcome = reg.check("c4", &make).await;
    let ChainOutcome::Denied(d) = &outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(d.middleware, "retry_budget");
    assert_eq!(
        d.context().failure_fingerprint,
        Some(tr.recent(1)[0].failure_fingerprint.clone())
    );
    assert!(
        d.reason.contains("already failed 2 times (non_zero_exit"),
        "{}",
        d.reason
    );
    assert!(
        d.reason.contains("retry budget of 1 is spent"),
        "{}",
        d.reason
    );
    // A success elsewhere does not lift it; a success of this call does.
    tr.record_success("shell", &make.provider, &make.arguments);
    assert!(matches!(
        reg.check("c5", &make).await,
        ChainOutcome::NeedsApproval(_)
    ));
}

#[tokio::test]
async fn retry_budget_lifts_after_the_backoff() {
    let tr = tracker();
    let call = registry().prepare("read_file", r#"{"path": "x"}"#).unwrap();
    let t0 = Utc::now();
    for _ in 0..2 {
        tr.record_failure(
            FailureInput {
                tool_name: "read_file",
                provider: "local",
                error_type: ErrorType::ToolError,
                raw_reason: "boom",
                arguments: &call.arguments,
                source: call.source,
                affected_fields: vec![],
            },
            t0,
        );
    }
    let early = RetryBudget::new(Arc::clone(&tr)).with_clock(move || t0);
    let late =
        RetryBudget::new(Arc::clone(&tr)).with_clock(move || t0 + chrono::Duration::hours(1));
    let mut ctx = CallContext::new("c", &call);
    assert!(matches!(
        early.before(&mut ctx).await,
        MiddlewareDecision::Deny { .. }
    ));
    assert_eq!(late.before(&mut ctx).await, MiddlewareDecision::Continue);
}

#[tokio::test]
async fn refused_calls_never_run() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry().with_middleware(Arc::new(PolicyMiddleware::new(policy(json!({})))));
    let call = reg
        .prepare("shell", r#"{"command": "touch marker && sudo true"}"#)
        .unwrap();
    let outcome = reg.check("c", &call).await;
    assert!(matches!(outcome, ChainOutcome::Denied(_)));
    // The engine records a refusal receipt; nothing ran.
    let receipt = reg.refusal_receipt(
        "c",
        "shell",
        r#"{"command": "x"}"#,
        ReceiptStatus::Denied,
        "no",
    );
    assert_eq!(receipt.status, ReceiptStatus::Denied);
    assert!(!dir.path().join("marker").exists());
}
