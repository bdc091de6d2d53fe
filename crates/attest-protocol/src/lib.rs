//! Serde types shared by every attest crate.
//!
//! This crate is the vocabulary of attest: what a run is asked to prove
//! ([`CompletionContract`]), what a tool execution leaves behind ([`Receipt`]),
//! the canonical transcript a run appends to ([`TranscriptItem`]), the events a
//! front end sees ([`Event`]), the audit records a trace keeps ([`TraceRecord`])
//! and how a run ends ([`TerminalState`], [`TerminalReason`]).
//!
//! Invariants: plain data only. No I/O, no async, no knowledge of providers,
//! tools, stores or front ends. Every type round-trips through JSON, and the
//! JSON shapes are a public contract (see `docs/events.md`).

mod contract;
mod eval;
mod event;
mod failure;
mod grounding;
pub mod json;
mod log_entry;
mod memory;
mod receipt;
mod state;
mod terminal;
pub mod timestamp;
mod tool;
mod trace;
mod transcript;

pub use contract::{CompletionContract, ContractKind, EffectClass};
pub use eval::{EvalGroup, HarnessSwitches};
pub use event::{Event, EventBody, ProtocolErrorKind, ResumedWith, Usage};
pub use failure::{
    Availability, DataImpact, DataQuality, DataSource, DataStatus, ErrorType, Freshness, HintCode,
    Provenance, RetrievalStatus, TaskType, ToolFailure,
};
pub use grounding::{CheckableKind, GroundedValue, Grounding};
pub use log_entry::LogEntry;
pub use memory::{
    ConflictPolicy, MemoryDecision, MemoryItem, MemoryKind, MemoryProvenance, MemorySourceRef,
    MemoryStatus,
};
pub use receipt::{ChangeKind, Evidence, PathChange, Receipt, ReceiptStatus, VerificationStatus};
pub use state::{
    AgentStateItem, CacheResetPoint, CacheResetReason, ConfidenceLevel, EvidenceType,
    StateItemType, StateStatus,
};
pub use terminal::{TerminalReason, TerminalState};
pub use tool::{Permission, ToolSpec};
pub use trace::{CallSource, ContextSource, TraceRecord};
pub use transcript::{AssistantPhase, HarnessMessageKind, TranscriptItem};

/// Version of the run loop's semantics. Bump when the loop's decisions change,
/// so traces from before and after can be told apart (SPEC B5).
pub const LOOP_VERSION: &str = "loop-2026.12.1";
