//! Approvals decided over HTTP (SPEC F3). The engine blocks in
//! [`Approver::decide`] on the core's [`PendingApprovals`] until a
//! decision arrives through the API or the timeout denies; a decision with
//! scope `session` also allows later calls of that tool in the session.

use async_trait::async_trait;
use attest::core::{PendingApproval, PendingApprovals};
use attest::{ApprovalDecision, ApprovalRequest, Approver};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The server's approvals: pending ones by call id, and the tools a
/// session allowed for good.
pub struct ApprovalDesk {
    pending: PendingApprovals,
    /// `(session id, tool)` pairs allowed with scope `session`.
    session_grants: Mutex<HashSet<(String, String)>>,
    /// Call id → session id, for the grants.
    sessions: Mutex<std::collections::HashMap<String, String>>,
}

impl ApprovalDesk {
    pub fn new(timeout: Duration) -> Self {
        ApprovalDesk {
            pending: PendingApprovals::new(timeout),
            session_grants: Mutex::default(),
            sessions: Mutex::default(),
        }
    }

    pub fn waiting(&self) -> Vec<PendingApproval> {
        self.pending.waiting()
    }

    /// Decide `call_id`; `None` when nothing waits for it.
    pub fn resolve(
        &self,
        call_id: &str,
        decision: ApprovalDecision,
        for_session: bool,
    ) -> Option<PendingApproval> {
        let pending = self
            .pending
            .waiting()
            .into_iter()
            .find(|p| p.request.call_id == call_id)?;
        if for_session && decision.approved {
            let session = self
                .sessions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(call_id)
                .cloned();
            if let Some(session) = session {
                self.session_grants
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert((session, pending.request.tool_name.clone()));
            }
        }
        self.pending.resolve(call_id, decision).then_some(pending)
    }

    /// The approver for one run of `session_id`.
    pub fn for_run(self: &Arc<Self>, session_id: &str) -> Arc<dyn Approver> {
        Arc::new(RunApprover {
            desk: Arc::clone(self),
            session_id: session_id.to_string(),
        })
    }
}

struct RunApprover {
    desk: Arc<ApprovalDesk>,
    session_id: String,
}

#[async_trait]
impl Approver for RunApprover {
    async fn decide(&self, request: &ApprovalRequest) -> ApprovalDecision {
        let granted = self
            .desk
            .session_grants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&(self.session_id.clone(), request.tool_name.clone()));
        if granted {
            return ApprovalDecision {
                approved: true,
                decided_by: "session".into(),
                message: None,
                via: Some("api".into()),
            };
        }
        self.desk
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(request.call_id.clone(), self.session_id.clone());
        let decision = self.desk.pending.decide(request).await;
        self.desk
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&request.call_id);
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(call_id: &str, run_id: &str) -> ApprovalRequest {
        ApprovalRequest {
            call_id: call_id.into(),
            run_id: run_id.into(),
            tool_name: "shell".into(),
            arguments: serde_json::json!({"command": "rm -rf build"}),
            reason: "shell asks".into(),
            rule: None,
        }
    }

    fn allow() -> ApprovalDecision {
        ApprovalDecision {
            approved: true,
            decided_by: "alice".into(),
            message: None,
            via: Some("api".into()),
        }
    }

    #[tokio::test]
    async fn a_session_grant_allows_the_next_call_of_that_tool_in_the_session_only() {
        let desk = Arc::new(ApprovalDesk::new(Duration::from_secs(5)));
        let approver = desk.for_run("s1");
        let first = {
            let approver = Arc::clone(&approver);
            tokio::spawn(async move { approver.decide(&request("c1", "r1")).await })
        };
        while desk.waiting().is_empty() {
            tokio::task::yield_now().await;
        }
        assert_eq!(desk.waiting()[0].request.run_id, "r1");
        assert!(desk.resolve("c1", allow(), true).is_some());
        assert!(first.await.unwrap().approved);
        let second = approver.decide(&request("c2", "r2")).await;
        assert!(second.approved);
        assert_eq!(second.decided_by, "session");
        // Another session still asks.
        let other = {
            let approver = desk.for_run("s2");
            tokio::spawn(async move { approver.decide(&request("c3", "r3")).await })
        };
        while desk.waiting().is_empty() {
            tokio::task::yield_now().await;
        }
        assert_eq!(desk.waiting()[0].request.call_id, "c3");
        let deny = ApprovalDecision {
            approved: false,
            ..allow()
        };
        assert!(desk.resolve("c3", deny, false).is_some());
        assert!(!other.await.unwrap().approved);
        assert!(desk.resolve("unknown", allow(), false).is_none());
    }
}
