//! Approval of calls whose permission is `ask` (SPEC F3).

use async_trait::async_trait;

/// A pending approval, keyed by call id.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    pub call_id: String,
    pub tool_name: String,
    pub arguments: serde_json::Value,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalDecision {
    pub approved: bool,
    /// Who decided: `flag`, `user`, `timeout`, `non_interactive`, …
    pub decided_by: String,
    /// Optional message shown to the model with a denial.
    pub message: Option<String>,
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
        }
    }
}
