//! What a run was started with, stored beside it so `attest resume` can
//! rebuild the same engine and keep the same contract (SPEC A10). Never
//! holds a secret: the API key is stored by its variable's name only.

use crate::provider::ProviderSpec;
use attest_protocol::CompletionContract;
use serde::{Deserialize, Serialize};
use std::str::FromStr;

/// The answer to `ask` when nobody is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    #[default]
    Deny,
    Allow,
}

impl ApprovalMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalMode::Deny => "deny",
            ApprovalMode::Allow => "allow",
        }
    }
}

impl FromStr for ApprovalMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "deny" => Ok(ApprovalMode::Deny),
            "allow" => Ok(ApprovalMode::Allow),
            _ => Err(format!(
                "unknown approval mode `{s}` (expected deny or allow)"
            )),
        }
    }
}

/// The resolved settings of a run. The JSON shape is what earlier versions
/// stored (`provider`, `base_url`, `model`, … at the top level), so their
/// runs still resume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    #[serde(flatten)]
    pub provider: ProviderSpec,
    pub contract: CompletionContract,
    pub max_steps: u32,
    pub max_corrections: u32,
    /// Absent in runs stored before grounding existed.
    #[serde(default)]
    pub require_grounding: bool,
    pub stream: bool,
    pub approval: ApprovalMode,
    pub timeout_secs: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{ProtocolMode, ProviderKind};

    #[test]
    fn reads_what_earlier_versions_stored() {
        let stored = serde_json::json!({
            "provider": "openai", "base_url": "http://127.0.0.1:1/v1", "model": "m",
            "api_key_env": "OPENAI_API_KEY", "script": null, "protocol": "auto",
            "contract": {"kind": "observe"}, "max_steps": 7, "max_corrections": 1,
            "stream": true, "approval": "deny", "timeout_secs": null
        });
        let s: RunSettings = serde_json::from_value(stored).unwrap();
        assert_eq!(s.provider.kind, Some(ProviderKind::Openai));
        assert_eq!(s.provider.protocol, Some(ProtocolMode::Auto));
        assert_eq!(s.max_steps, 7);
        let back = serde_json::to_value(&s).unwrap();
        assert_eq!(back["provider"], "openai");
    }
}
