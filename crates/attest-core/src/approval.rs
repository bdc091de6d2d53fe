//! Approval of calls whose permission is `ask` (SPEC F3).

use async_trait::async_trait;

/// A pending approval, keyed by call id.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    pub call_id: String,
    /// The run the call belongs to.
    pub run_id: String,
    pub tool_name: String,
    /// Redacted, as logged.
    pub arguments: serde_json::Value,
    pub reason: String,
    /// The permission rule that asked, when one matched.
    pub rule: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalDecision {
    pub approved: bool,
    /// Who decided: `flag`, `user`, `timeout`, `non_interactive`, …
    pub decided_by: String,
    /// Optional message shown to the model with a denial.
    pub message: Option<String>,
    /// How the decision arrived: `terminal`, `api`, `webhook`; `None` for
    /// a decision the harness made itself (a flag, a timeout).
    pub via: Option<String>,
}

/// Decides approvals. The CLI's `--approval` flag, an interactive prompt and
/// (later) the HTTP API implement this.
#[async_trait]
pub trait Approver: Send + Sync {
    async fn decide(&self, request: &ApprovalRequest) -> ApprovalDecision;
}

/// Always answers the same way: non-interactive runs.
#[derive(Debug, Clone)]
pub struct StaticApprover {
    pub approve: bool,
    pub decided_by: String,
}

impl StaticApprover {
    /// The non-interactive default: deny.
    pub fn deny() -> Self {
        StaticApprover {
            approve: false,
            decided_by: "non_interactive".into(),
        }
    }
}

#[async_trait]
impl Approver for StaticApprover {
    async fn decide(&self, _request: &ApprovalRequest) -> ApprovalDecision {
        ApprovalDecision {
            approved: self.approve,
            decided_by: self.decided_by.clone(),
            message: None,
            via: None,
        }
    }
}

/// An approval waiting for its decision.
#[derive(Debug, Clone)]
pub struct PendingApproval {
    pub request: ApprovalRequest,
    pub requested_at: chrono::DateTime<chrono::Utc>,
}

/// Approvals waiting for a decision from somewhere else (a terminal, the
/// HTTP API, a signed webhook), keyed by run and call id (SPEC F3): call
/// ids are unique within a run only (a local model's `call_0_0`). The
/// engine's call blocks in [`Approver::decide`] until
/// [`PendingApprovals::resolve`] is called for its run and call, or the
/// timeout denies it.
pub struct PendingApprovals {
    timeout: std::time::Duration,
    waiting: std::sync::Mutex<std::collections::BTreeMap<CallKey, Waiting>>,
}

/// A call: its run id and call id.
type CallKey = (String, String);
/// A waiting approval and where its decision goes.
type Waiting = (
    PendingApproval,
    tokio::sync::oneshot::Sender<ApprovalDecision>,
);

impl PendingApprovals {
    pub fn new(timeout: std::time::Duration) -> Self {
        PendingApprovals {
            timeout,
            waiting: Default::default(),
        }
    }

    /// The approvals waiting now, oldest call id first.
    pub fn pending(&self) -> Vec<ApprovalRequest> {
        self.waiting().into_iter().map(|p| p.request).collect()
    }

    /// The approvals waiting now with when each was requested.
    pub fn waiting(&self) -> Vec<PendingApproval> {
        self.waiting
            .lock()
            .map(|w| w.values().map(|(p, _)| p.clone()).collect())
            .unwrap_or_default()
    }

    /// Decide the approval for `call_id` of `run_id`. False when none is
    /// waiting (already decided, timed out, or unknown).
    pub fn resolve(&self, run_id: &str, call_id: &str, decision: ApprovalDecision) -> bool {
        let key = (run_id.to_string(), call_id.to_string());
        let entry = self.waiting.lock().ok().and_then(|mut w| w.remove(&key));
        match entry {
            Some((_, tx)) => tx.send(decision).is_ok(),
            None => false,
        }
    }
}

#[async_trait]
impl Approver for PendingApprovals {
    async fn decide(&self, request: &ApprovalRequest) -> ApprovalDecision {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let pending = PendingApproval {
            request: request.clone(),
            requested_at: chrono::Utc::now(),
        };
        let key = (request.run_id.clone(), request.call_id.clone());
        if let Ok(mut w) = self.waiting.lock() {
            w.insert(key.clone(), (pending, tx));
        }
        let decision = tokio::time::timeout(self.timeout, rx).await;
        if let Ok(mut w) = self.waiting.lock() {
            w.remove(&key);
        }
        match decision {
            Ok(Ok(decision)) => decision,
            // Timed out, or the manager was dropped: deny (SPEC F3).
            _ => ApprovalDecision {
                approved: false,
                decided_by: "timeout".into(),
                message: None,
                via: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn request(id: &str) -> ApprovalRequest {
        ApprovalRequest {
            call_id: id.into(),
            run_id: "run_1".into(),
            tool_name: "shell".into(),
            arguments: serde_json::json!({"command": "touch x"}),
            reason: "ask".into(),
            rule: None,
        }
    }

    #[tokio::test]
    async fn pending_approvals_are_listed_by_call_id_and_resolved_from_elsewhere() {
        let manager = Arc::new(PendingApprovals::new(Duration::from_secs(5)));
        let waiting = {
            let m = Arc::clone(&manager);
            tokio::spawn(async move { m.decide(&request("call_7")).await })
        };
        while manager.pending().is_empty() {
            tokio::task::yield_now().await;
        }
        assert_eq!(manager.pending()[0].call_id, "call_7");
        assert!(!manager.resolve(
            "run_1",
            "call_unknown",
            ApprovalDecision {
                approved: true,
                decided_by: "api".into(),
                message: None,
                via: Some("api".into()),
            }
        ));
        assert!(!manager.resolve(
            "run_2",
            "call_7",
            ApprovalDecision {
                approved: true,
                decided_by: "api".into(),
                message: None,
                via: Some("api".into()),
            }
        ));
        assert!(manager.resolve(
            "run_1",
            "call_7",
            ApprovalDecision {
                approved: true,
                decided_by: "api".into(),
                message: None,
                via: Some("api".into()),
            }
        ));
        let decision = waiting.await.unwrap();
        assert!(decision.approved);
        assert_eq!(decision.decided_by, "api");
        assert!(manager.pending().is_empty());
    }

    #[tokio::test]
    async fn an_unanswered_approval_is_denied_at_the_timeout() {
        let manager = PendingApprovals::new(Duration::from_millis(20));
        let decision = manager.decide(&request("call_1")).await;
        assert!(!decision.approved);
        assert_eq!(decision.decided_by, "timeout");
        assert!(manager.pending().is_empty());
    }
}
