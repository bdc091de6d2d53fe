use crate::ConfidenceLevel;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What a memory item is about (SPEC G1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryKind {
    /// How the user wants things done ("I prefer short answers").
    Preference,
    /// A choice the user or project made ("we use PostgreSQL").
    Decision,
    /// A fact about the project (a port, a host, a path).
    ProjectFact,
    /// How to do something (a command, a sequence of steps).
    Procedure,
    /// A fact about the user ("my name is Ada").
    UserFact,
}

impl MemoryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryKind::Preference => "preference",
            MemoryKind::Decision => "decision",
            MemoryKind::ProjectFact => "project_fact",
            MemoryKind::Procedure => "procedure",
            MemoryKind::UserFact => "user_fact",
        }
    }
}

/// Where a memory item's content comes from. Decides what it may become:
/// only what the user said or what a receipt shows can be `active`
/// (SPEC G2, seed 000 §9.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryProvenance {
    /// The user stated it (in a prompt, a confirmed `MEMORY.md` edit, or by
    /// `attest memory promote`).
    UserExplicit,
    /// Read from a workspace file, with its hash.
    WorkspaceFile,
    /// Read from a loaded skill, with the skill file's hash.
    Skill,
    /// Its distinctive value appears in a successful tool result.
    ToolReceipt,
    /// The model said it; nothing backs it.
    ModelInference,
    /// Imported from an older memory file or database; nothing backs it.
    LegacyUnverified,
}

impl MemoryProvenance {
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryProvenance::UserExplicit => "user_explicit",
            MemoryProvenance::WorkspaceFile => "workspace_file",
            MemoryProvenance::Skill => "skill",
            MemoryProvenance::ToolReceipt => "tool_receipt",
            MemoryProvenance::ModelInference => "model_inference",
            MemoryProvenance::LegacyUnverified => "legacy_unverified",
        }
    }

    /// True for provenances that nothing verifiable backs.
    pub fn is_unverified(self) -> bool {
        matches!(
            self,
            MemoryProvenance::ModelInference | MemoryProvenance::LegacyUnverified
        )
    }
}

/// Lifecycle of a memory item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryStatus {
    /// Stored, never injected as a fact.
    Candidate,
    /// May be injected, with its provenance.
    Active,
    /// Its source changed since it was recorded; never injected as current.
    /// `attest memory verify` makes it active again if the source returns
    /// to the recorded version.
    Stale,
    /// Withdrawn (by the user, or by a conflicting authoritative source).
    Retracted,
}

impl MemoryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryStatus::Candidate => "candidate",
            MemoryStatus::Active => "active",
            MemoryStatus::Stale => "stale",
            MemoryStatus::Retracted => "retracted",
        }
    }
}

impl std::str::FromStr for MemoryStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "candidate" => MemoryStatus::Candidate,
            "active" => MemoryStatus::Active,
            "stale" => MemoryStatus::Stale,
            "retracted" => MemoryStatus::Retracted,
            other => return Err(format!("unknown memory status `{other}`")),
        })
    }
}

/// What happens when an authoritative source (a skill, a current file, a
/// tool result) disagrees with the item (SPEC G3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConflictPolicy {
    /// The source wins; the item is marked stale for review and the model
    /// is pointed at the source.
    DeferToSource,
    /// The source wins and the item is retracted (unverified provenances).
    RetractOnConflict,
}

/// What a memory item rests on. Which fields are set depends on the
/// provenance: a call id and file hash for a receipt, a skill name and hash
/// for a skill, a note for user statements and imports.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemorySourceRef {
    /// The run the item was extracted from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The tool call whose receipt backs the item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// Workspace-relative path of the file the receipt read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// sha256 of that file (or skill file) when it was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The skill whose body backs the item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skill: Option<String>,
    /// The distinctive values found verbatim in the receipt's output.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    /// Free-form origin: "user_input", "MEMORY.md edit", "import of FILE",
    /// "promoted by the user".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One durable memory item (SPEC G1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryItem {
    pub id: String,
    /// Already redacted; never holds a secret.
    pub content: String,
    pub kind: MemoryKind,
    pub provenance: MemoryProvenance,
    pub source_ref: MemorySourceRef,
    /// When the source last confirmed the item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified_at: Option<DateTime<Utc>>,
    /// After this, the item is no longer retrieved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    pub confidence: ConfidenceLevel,
    pub conflict_policy: ConflictPolicy,
    pub status: MemoryStatus,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// What consolidation, verification or retrieval did with an item; traced
/// with its reason (SPEC G2, H1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryDecision {
    /// Stored (or updated) as active.
    Promoted,
    /// Stored as a candidate: never injected as a fact.
    KeptCandidate,
    /// Not stored at all (a secret, nothing durable, already retracted).
    Rejected,
    /// Withdrawn because an authoritative source disagrees.
    Retracted,
    /// Its source changed; no longer injected as current.
    MarkedStale,
    /// Its source still matches; verification time refreshed.
    Verified,
    /// Put into the request's memory layer as a fact, with provenance.
    Injected,
    /// Put into the memory layer only as a pointer to its authoritative
    /// source (stale, or covered by a skill).
    Deferred,
}

impl MemoryDecision {
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryDecision::Promoted => "promoted",
            MemoryDecision::KeptCandidate => "kept_candidate",
            MemoryDecision::Rejected => "rejected",
            MemoryDecision::Retracted => "retracted",
            MemoryDecision::MarkedStale => "marked_stale",
            MemoryDecision::Verified => "verified",
            MemoryDecision::Injected => "injected",
            MemoryDecision::Deferred => "deferred",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_round_trips_and_names_are_snake_case() {
        let t = DateTime::parse_from_rfc3339("2026-11-30T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let item = MemoryItem {
            id: "mem-1".into(),
            content: "The port is 8080.".into(),
            kind: MemoryKind::ProjectFact,
            provenance: MemoryProvenance::ToolReceipt,
            source_ref: MemorySourceRef {
                call_id: Some("call_1".into()),
                path: Some("config.toml".into()),
                sha256: Some("9a37".into()),
                values: vec!["8080".into()],
                ..Default::default()
            },
            verified_at: Some(t),
            expires_at: None,
            confidence: ConfidenceLevel::High,
            conflict_policy: ConflictPolicy::DeferToSource,
            status: MemoryStatus::Active,
            created_at: t,
            updated_at: t,
        };
        let json = serde_json::to_value(&item).unwrap();
        assert_eq!(json["provenance"], "tool_receipt");
        assert_eq!(json["kind"], "project_fact");
        assert_eq!(json["status"], "active");
        assert_eq!(json["conflict_policy"], "defer_to_source");
        assert!(json["source_ref"].get("skill").is_none());
        let back: MemoryItem = serde_json::from_value(json).unwrap();
        assert_eq!(back, item);
        for p in [
            MemoryProvenance::UserExplicit,
            MemoryProvenance::LegacyUnverified,
        ] {
            assert_eq!(serde_json::to_value(p).unwrap(), p.as_str());
        }
        assert_eq!(
            serde_json::to_value(MemoryDecision::KeptCandidate).unwrap(),
            "kept_candidate"
        );
        assert_eq!("stale".parse::<MemoryStatus>(), Ok(MemoryStatus::Stale));
        assert!("x".parse::<MemoryStatus>().is_err());
    }
}
