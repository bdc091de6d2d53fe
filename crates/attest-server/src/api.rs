//! The HTTP wire types: what requests carry and responses return. The
//! OpenAPI document (`/openapi.json`, committed as `docs/openapi.json`) is
//! generated from these and the handlers, so a change here is a visible
//! diff there.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// `POST /v1/runs`. The provider, permissions, sandbox and tools are the
/// server's, never the request's.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitRun {
    /// The task.
    pub prompt: String,
    /// The evidence the run must produce: `answer`, `observe`, `mutate` or
    /// `deliver` (default: the server's `[run] expect`).
    #[serde(default)]
    pub expect: Option<String>,
    /// Tools the run must have a satisfying receipt of.
    #[serde(default)]
    pub required_tools: Vec<String>,
    /// Continue this session (default: a new one).
    #[serde(default)]
    pub session: Option<String>,
    /// A directory under the server's `workspaces_root` (created if
    /// missing); default: a fresh directory for this run.
    #[serde(default)]
    pub workspace: Option<String>,
    /// Step budget (default: the server's).
    #[serde(default)]
    #[schema(minimum = 1)]
    pub max_steps: Option<u32>,
    /// A retried submission with the same key returns the same run (the
    /// `Idempotency-Key` header does the same).
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// The answer to a submission.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Submitted {
    pub run_id: String,
    pub session_id: String,
}

/// A run as the server knows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunView {
    pub run_id: String,
    pub session_id: String,
    /// `queued`, `running`, or a terminal state (`completed`, `unverified`,
    /// `incomplete`, `failed`, `cancelled`).
    pub state: String,
    /// Why it ended (`contract_satisfied`, `max_steps`, …).
    pub reason: Option<String>,
    /// The plain-language basis of the terminal decision.
    pub basis: Option<String>,
    /// The model's last answer.
    pub answer: Option<String>,
    pub steps: u32,
    pub trace_id: Option<String>,
    pub prompt: String,
    pub created_at: String,
    pub finished_at: Option<String>,
    /// The receipts the decision was made from.
    #[schema(value_type = Vec<Object>)]
    pub receipts: Vec<serde_json::Value>,
    /// Where the final answer's values came from, when the run recorded it.
    #[schema(value_type = Option<Object>)]
    pub grounding: Option<serde_json::Value>,
}

/// A run in a list.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunSummary {
    pub run_id: String,
    pub session_id: String,
    pub state: String,
    pub reason: Option<String>,
    pub steps: u32,
    pub created_at: String,
    pub finished_at: Option<String>,
}

/// One page of runs, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunPage {
    pub runs: Vec<RunSummary>,
    /// Pass as `cursor` for the next page; absent on the last.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RunsQuery {
    /// Only runs of this session.
    pub session: Option<String>,
    /// Only runs in this state.
    pub state: Option<String>,
    /// Page size (1–500, default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    /// From a previous page's `next_cursor`.
    pub cursor: Option<String>,
}

/// A run's stored log: transcript items, events and trace records in order
/// (raw model outputs as artifact references).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TraceView {
    pub run_id: String,
    pub trace_id: String,
    /// `intact`, `unchained` or `broken: …` (the log's hash chain).
    pub chain: String,
    #[schema(value_type = Vec<Object>)]
    pub entries: Vec<serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only these event types, comma-separated (`final,done` for a channel
    /// that shows outcomes only).
    pub kinds: Option<String>,
}

#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ApprovalsQuery {
    /// `pending` (the default; the only state kept).
    pub state: Option<String>,
}

/// An approval waiting for a decision.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PendingApprovalView {
    pub call_id: String,
    pub run_id: String,
    pub tool: String,
    /// The call's arguments, redacted.
    #[schema(value_type = Object)]
    pub arguments: serde_json::Value,
    /// The permission rule that asked, or why approval is needed.
    pub rule: String,
    pub requested_at: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Allow,
    Deny,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecisionScope {
    /// This call only.
    #[default]
    Once,
    /// This call and later calls of the same tool in the run's session.
    Session,
}

/// `POST /v1/approvals/{call_id}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecideApproval {
    pub decision: Decision,
    #[serde(default)]
    pub scope: DecisionScope,
    /// Shown to the model with a denial.
    #[serde(default)]
    pub message: Option<String>,
    /// The run whose call this is: needed only when several runs wait on
    /// the same call id (call ids are unique within a run).
    #[serde(default)]
    pub run_id: Option<String>,
}

/// What a decision did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ApprovalDecided {
    pub call_id: String,
    pub run_id: String,
    pub approved: bool,
    pub decided_by: String,
}

/// A session and its runs.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionView {
    pub session_id: String,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    pub runs: u32,
    pub last_state: Option<String>,
}

/// A session with its runs, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionDetail {
    pub session_id: String,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    pub last_state: Option<String>,
    pub runs: Vec<RunSummary>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
}

/// Every error answer.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: String,
}
