//! Approvals decided over HTTP or by signed callbacks (SPEC F3), on any
//! server sharing the store. The store holds each approval a run waits
//! for and its one decision; the worker whose run waits blocks on the
//! core's [`PendingApprovals`] and is released when the decision is
//! written here (at once), announced by the store (another server: a
//! PostgreSQL notification), or found by its own poll (a missed
//! notification). Nobody deciding within the timeout denies. A decision
//! with scope `session` also allows later calls of that tool in the
//! session, on every server.

use crate::state::{AppState, Inner};
use async_trait::async_trait;
use attest::core::{PendingApproval, PendingApprovals};
use attest::store::ApprovalRecord;
use attest::{ApprovalDecision, ApprovalRequest, Approver};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// How often a waiting worker looks for a decision it was not told of.
const POLL: Duration = Duration::from_millis(500);

/// This server's waiting workers, by call id.
pub struct ApprovalDesk {
    waiting: PendingApprovals,
}

impl ApprovalDesk {
    pub fn new(timeout: Duration) -> Self {
        ApprovalDesk {
            waiting: PendingApprovals::new(timeout),
        }
    }

    /// Release the worker waiting here for `call_id`, if there is one.
    pub fn release(&self, call_id: &str, decision: ApprovalDecision) -> bool {
        self.waiting.resolve(call_id, decision)
    }
}

pub fn request_json(r: &ApprovalRequest) -> Value {
    json!({
        "call_id": r.call_id,
        "run_id": r.run_id,
        "tool_name": r.tool_name,
        "arguments": r.arguments,
        "reason": r.reason,
        "rule": r.rule,
    })
}

fn text(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_default().to_string()
}

pub fn request_from(v: &Value) -> ApprovalRequest {
    ApprovalRequest {
        call_id: text(v, "call_id"),
        run_id: text(v, "run_id"),
        tool_name: text(v, "tool_name"),
        arguments: v["arguments"].clone(),
        reason: text(v, "reason"),
        rule: v["rule"].as_str().map(str::to_string),
    }
}

pub fn decision_json(d: &ApprovalDecision) -> Value {
    json!({
        "approved": d.approved,
        "decided_by": d.decided_by,
        "message": d.message,
        "via": d.via,
    })
}

pub fn decision_from(v: &Value) -> ApprovalDecision {
    ApprovalDecision {
        approved: v["approved"].as_bool() == Some(true),
        decided_by: text(v, "decided_by"),
        message: v["message"].as_str().map(str::to_string),
        via: v["via"].as_str().map(str::to_string),
    }
}

/// A stored approval as the API shows it.
pub fn pending_from(record: &ApprovalRecord) -> PendingApproval {
    PendingApproval {
        request: request_from(&record.request),
        requested_at: chrono::DateTime::parse_from_rfc3339(&record.requested_at)
            .map(|t| t.with_timezone(&chrono::Utc))
            .unwrap_or_else(|_| chrono::Utc::now()),
    }
}

/// The store says `call_id` was decided (a notification, a poll): release
/// its worker here, if it waits here.
pub fn deliver(inner: &Inner, call_id: &str) {
    let decided = inner.store().approval(call_id).ok().flatten();
    if let Some(decision) = decided.and_then(|a| a.decision) {
        inner.desk.release(call_id, decision_from(&decision));
    }
}

/// The approver for one run of `session_id`.
pub fn for_run(state: &AppState, session_id: &str) -> Arc<dyn Approver> {
    Arc::new(RunApprover {
        state: state.clone(),
        session_id: session_id.to_string(),
    })
}

struct RunApprover {
    state: AppState,
    session_id: String,
}

#[async_trait]
impl Approver for RunApprover {
    async fn decide(&self, request: &ApprovalRequest) -> ApprovalDecision {
        let state = &self.state;
        let granted = state
            .store()
            .session_grant(&self.session_id, &request.tool_name);
        if matches!(granted, Ok(true)) {
            return ApprovalDecision {
                approved: true,
                decided_by: "session".into(),
                message: None,
                via: Some("api".into()),
            };
        }
        let record = ApprovalRecord {
            call_id: request.call_id.clone(),
            run_id: request.run_id.clone(),
            session_id: self.session_id.clone(),
            tool_name: request.tool_name.clone(),
            request: request_json(request),
            owner: state.owner.clone(),
            requested_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            decision: None,
            for_session: false,
            decided_at: None,
        };
        if let Err(e) = state.store().request_approval(&record) {
            (state.env.notices)(&format!(
                "cannot record the approval of call {}: {e}; denying it",
                request.call_id
            ));
            return ApprovalDecision {
                approved: false,
                decided_by: "store_unavailable".into(),
                message: None,
                via: None,
            };
        }
        let poll = {
            let state = state.clone();
            let call_id = request.call_id.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(POLL).await;
                    deliver(&state, &call_id);
                }
            })
        };
        let decision = state.desk.waiting.decide(request).await;
        poll.abort();
        // A timeout is written as the decision, unless one got in first:
        // then that one stands, here as in the store.
        let written =
            state
                .store()
                .decide_approval(&request.call_id, &decision_json(&decision), false);
        match written {
            Ok(None) => state
                .store()
                .approval(&request.call_id)
                .ok()
                .flatten()
                .and_then(|a| a.decision)
                .map(|d| decision_from(&d))
                .unwrap_or(decision),
            _ => decision,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_decisions_survive_their_stored_form() {
        let request = ApprovalRequest {
            call_id: "c1".into(),
            run_id: "r1".into(),
            tool_name: "shell".into(),
            arguments: json!({"command": "rm -rf build"}),
            reason: "shell asks".into(),
            rule: Some("shell: ask".into()),
        };
        let back = request_from(&request_json(&request));
        assert_eq!(back.call_id, "c1");
        assert_eq!(back.arguments, request.arguments);
        assert_eq!(back.rule.as_deref(), Some("shell: ask"));
        let decision = ApprovalDecision {
            approved: true,
            decided_by: "alice".into(),
            message: Some("ok".into()),
            via: Some("webhook".into()),
        };
        assert_eq!(decision_from(&decision_json(&decision)), decision);
    }
}
