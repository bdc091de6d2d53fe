use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What an agent-state item is (SPEC E1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StateItemType {
    Goal,
    ConfirmedFact,
    OpenQuestion,
    FailedPath,
    DataLimitation,
    NextStep,
}

/// Where an item's content comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceType {
    /// The harness observed it (a receipt's evidence).
    Observed,
    /// Derived by the model from other items; not evidence.
    Inferred,
    /// The user said it.
    UserProvided,
    /// A tool reported it (its output).
    ToolReported,
    /// The model said it, with nothing behind it.
    ModelGenerated,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfidenceLevel {
    Unknown,
    Low,
    Medium,
    High,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StateStatus {
    Active,
    Superseded,
    Retracted,
}

/// One item of a run's explicit agent state (SPEC E1, seed 003 P4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentStateItem {
    pub id: String,
    pub item_type: StateItemType,
    pub content: String,
    /// Event ids, call ids or `user_input` refs the content rests on.
    pub source_refs: Vec<String>,
    pub evidence_type: EvidenceType,
    pub confidence_level: ConfidenceLevel,
    pub status: StateStatus,
    pub superseded_by: Option<String>,
    /// For failed paths: the failure fingerprint (repeats merge on it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// For failed paths and limitations: true when it blocks the goal.
    #[serde(default)]
    pub blocking: bool,
    /// How many times this item was seen (merged repeats).
    #[serde(default = "one")]
    pub occurrences: u32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

fn one() -> u32 {
    1
}

/// Why a cache reset point was declared (seed 003 P4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheResetReason {
    ManualCompaction,
    TokenBudgetCompaction,
    PromptBuilderVersionChange,
    ToolSchemaChange,
    StructuredSchemaChange,
    ProviderRouteChange,
    /// `--protocol auto` moved a model to the text protocol after runs
    /// without a native tool call.
    ProtocolSwitch,
}

/// A declared point where the cached prompt prefix is allowed to change
/// (SPEC E4). Compaction is an explicit state transition, never a silent
/// shortening of the prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheResetPoint {
    pub reason: CacheResetReason,
    pub prefix_hash_before: String,
    pub prefix_hash_after: String,
    /// Call ids and item refs of what was compacted (retrievable by the
    /// `history` tool).
    pub source_refs: Vec<String>,
    pub created_at: DateTime<Utc>,
}
