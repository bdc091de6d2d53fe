use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What a tool does to the world. Every tool declares one (SPEC F5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectClass {
    /// Reads state without changing it (read a file, search, query).
    Observe,
    /// Changes local state (write a file, run a command).
    Mutate,
    /// Sends something outside (a message, a publication, an external write).
    Deliver,
    /// The harness's own bookkeeping (`tool_search`, `history`, `skill`):
    /// proves nothing about the world, so it satisfies no contract.
    Internal,
}

impl EffectClass {
    pub fn as_str(self) -> &'static str {
        match self {
            EffectClass::Observe => "observe",
            EffectClass::Mutate => "mutate",
            EffectClass::Deliver => "deliver",
            EffectClass::Internal => "internal",
        }
    }
}

impl fmt::Display for EffectClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EffectClass {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "observe" => Ok(EffectClass::Observe),
            "mutate" => Ok(EffectClass::Mutate),
            "deliver" => Ok(EffectClass::Deliver),
            other => Err(format!(
                "unknown effect class `{other}` (expected observe, mutate or deliver)"
            )),
        }
    }
}

/// The kind of completion a caller asks for (SPEC A2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ContractKind {
    /// A plain answer; no evidence needed.
    #[default]
    Answer,
    /// The answer must rest on at least one observation receipt.
    Observe,
    /// A mutation must have been executed.
    Mutate,
    /// A delivery must have been executed and carry its evidence.
    Deliver,
}

impl ContractKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ContractKind::Answer => "answer",
            ContractKind::Observe => "observe",
            ContractKind::Mutate => "mutate",
            ContractKind::Deliver => "deliver",
        }
    }

    /// The effect class whose receipt this contract needs, if any.
    pub fn required_effect(self) -> Option<EffectClass> {
        match self {
            ContractKind::Answer => None,
            ContractKind::Observe => Some(EffectClass::Observe),
            ContractKind::Mutate => Some(EffectClass::Mutate),
            ContractKind::Deliver => Some(EffectClass::Deliver),
        }
    }
}

impl fmt::Display for ContractKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ContractKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "answer" => Ok(ContractKind::Answer),
            "observe" => Ok(ContractKind::Observe),
            "mutate" => Ok(ContractKind::Mutate),
            "deliver" => Ok(ContractKind::Deliver),
            other => Err(format!(
                "unknown contract `{other}` (expected answer, observe, mutate or deliver)"
            )),
        }
    }
}

/// A completion contract declared by the caller: which receipts must exist
/// before a run may end `completed`. Keyword detection never decides this.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct CompletionContract {
    pub kind: ContractKind,
    /// Tools that must each have a satisfying receipt (`--require-tool`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_tools: Vec<String>,
}

impl CompletionContract {
    pub fn new(kind: ContractKind) -> Self {
        CompletionContract {
            kind,
            required_tools: Vec::new(),
        }
    }

    /// True when the contract needs any evidence at all.
    pub fn needs_evidence(&self) -> bool {
        self.kind != ContractKind::Answer || !self.required_tools.is_empty()
    }

    /// Whether a receipt of a tool with `effect` counts toward this contract's
    /// effect requirement. Mutating tools (a shell command) also observe, so
    /// they count for `observe`; `deliver` needs a deliver tool; the
    /// harness's own (`internal`) tools count for nothing.
    pub fn effect_counts(&self, effect: EffectClass) -> bool {
        match self.kind {
            ContractKind::Answer => false,
            ContractKind::Observe => matches!(effect, EffectClass::Observe | EffectClass::Mutate),
            ContractKind::Mutate => effect == EffectClass::Mutate,
            ContractKind::Deliver => effect == EffectClass::Deliver,
        }
    }
}
