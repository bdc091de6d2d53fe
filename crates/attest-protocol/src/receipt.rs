use crate::EffectClass;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptStatus {
    /// The tool ran and reported success.
    Ok,
    /// The tool ran and reported failure.
    Error,
    /// The tool exceeded its time limit.
    Timeout,
    /// Arguments were unparsable or failed schema validation; the tool did not run.
    InvalidArguments,
    /// A permission rule or approval decision refused the call; the tool did not run.
    Denied,
    /// The call was in flight when the run stopped (cancel, crash).
    Interrupted,
    /// The model named a tool that is not offered.
    UnknownTool,
    /// An identical observe call already has a successful result in this
    /// run; it was not executed again.
    Skipped,
}

impl ReceiptStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ReceiptStatus::Ok => "ok",
            ReceiptStatus::Error => "error",
            ReceiptStatus::Timeout => "timeout",
            ReceiptStatus::InvalidArguments => "invalid_arguments",
            ReceiptStatus::Denied => "denied",
            ReceiptStatus::Interrupted => "interrupted",
            ReceiptStatus::UnknownTool => "unknown_tool",
            ReceiptStatus::Skipped => "skipped",
        }
    }

    /// True when the tool actually ran and failed (as opposed to never running).
    pub fn is_execution_failure(self) -> bool {
        matches!(self, ReceiptStatus::Error | ReceiptStatus::Timeout)
    }
}

/// Whether a receipt carries the evidence its tool declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerificationStatus {
    /// Successful, and the declared evidence is present.
    Verified,
    /// Successful by exit status, but the declared evidence is absent
    /// (e.g. a deliver tool returned no message id). Does not satisfy a contract.
    MissingEvidence,
    /// The call did not succeed; nothing to verify.
    NotApplicable,
    /// A mutating call ran and succeeded but changed nothing (a file written
    /// with the content it had, a command that created, modified and deleted
    /// no workspace path). Satisfies no mutate contract.
    NoEffect,
}

/// How a workspace path changed during a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Created,
    Modified,
    Deleted,
}

/// One workspace path a command created, modified or deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathChange {
    /// Relative to the workspace root, `/`-separated.
    pub path: String,
    pub change: ChangeKind,
    /// sha256 of the content after the call, for a created or modified
    /// regular file small enough to hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// Evidence a receipt carries. Which fields are set depends on the tool.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// True when an observation found that the thing does not exist: an
    /// absence observed is still an observation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub absent: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_count: Option<u64>,
    /// The workspace paths a command created, modified or deleted, from a
    /// metadata snapshot (size, mtime, ctime, inode) before and after it.
    /// Present (maybe empty) only when a snapshot was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<Vec<PathChange>>,
    /// True when the snapshot stopped at its entry limit: paths past it
    /// were not compared, or more changes were found than are listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_truncated: Option<bool>,
}

/// An execution receipt (SPEC A3): written by the harness, never by the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    pub call_id: String,
    pub tool_name: String,
    pub effect: EffectClass,
    pub status: ReceiptStatus,
    #[serde(serialize_with = "crate::timestamp::serialize")]
    pub started_at: DateTime<Utc>,
    #[serde(serialize_with = "crate::timestamp::serialize")]
    pub finished_at: DateTime<Utc>,
    /// sha256 of the canonical (sorted-key) JSON arguments.
    pub input_fingerprint: String,
    pub evidence: Evidence,
    pub verification_status: VerificationStatus,
    /// Why the call failed or was refused, sanitized; absent on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Receipt {
    /// A receipt counts as evidence only when the tool ran, succeeded and its
    /// declared evidence is present.
    pub fn is_satisfying(&self) -> bool {
        self.status == ReceiptStatus::Ok && self.verification_status == VerificationStatus::Verified
    }

    pub fn duration_ms(&self) -> i64 {
        (self.finished_at - self.started_at).num_milliseconds()
    }
}
