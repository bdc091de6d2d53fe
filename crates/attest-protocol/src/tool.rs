use crate::EffectClass;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What a model is told about a tool. The order and serialization of a run's
/// tool specs never change between steps (SPEC D5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
    pub effect: EffectClass,
}

impl ToolSpec {
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        effect: EffectClass,
        parameters: serde_json::Value,
    ) -> Self {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters,
            effect,
        }
    }
}

/// A permission decision for a tool call (SPEC F2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    #[default]
    Allow,
    Ask,
    Deny,
}

impl Permission {
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Allow => "allow",
            Permission::Ask => "ask",
            Permission::Deny => "deny",
        }
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Permission {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "allow" => Ok(Permission::Allow),
            "ask" => Ok(Permission::Ask),
            "deny" => Ok(Permission::Deny),
            other => Err(format!(
                "unknown permission `{other}` (expected allow, ask or deny)"
            )),
        }
    }
}
