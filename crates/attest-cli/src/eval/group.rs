//! The A/B groups of an eval (SPEC I2, seed 000 §11.2): the same model,
//! parameters, tools, fixture and history, with the harness's guarantees
//! switched on one at a time. The switches exist for eval only: the runner
//! sets them on the run's configuration, never through a flag of `run`.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    /// What a naive loop does: no invariant prompt, no receipt guard (any
    /// answer is accepted as done), model text that imitates a tool result
    /// kept in history, every memory candidate promoted.
    Baseline,
    /// The base invariant prompt only.
    Prompt,
    /// The receipt guard, protocol isolation and the memory gate, with the
    /// default prompt minus its invariants.
    Guards,
    /// Everything on: the product.
    Full,
}

/// What a group switches in the engine: the engine's own switches, set on
/// the run's configuration and recorded in its trace.
pub type GroupSwitches = attest_protocol::HarnessSwitches;

impl Group {
    pub const ALL: [Group; 4] = [Group::Baseline, Group::Prompt, Group::Guards, Group::Full];

    pub fn as_str(self) -> &'static str {
        match self {
            Group::Baseline => "baseline",
            Group::Prompt => "prompt",
            Group::Guards => "guards",
            Group::Full => "full",
        }
    }

    pub fn switches(self) -> GroupSwitches {
        let guards = matches!(self, Group::Guards | Group::Full);
        GroupSwitches {
            invariant_prompt: matches!(self, Group::Prompt | Group::Full),
            receipt_guard: guards,
            protocol_isolation: guards,
            memory_gate: guards,
        }
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Group {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Group::ALL
            .into_iter()
            .find(|g| g.as_str() == s)
            .ok_or_else(|| {
                format!("unknown group `{s}` (expected baseline, prompt, guards or full)")
            })
    }
}

/// Parse `--groups a,b,…`: known names, no repeats, in the order given.
pub fn parse_group_list(text: &str) -> Result<Vec<Group>, String> {
    let mut groups = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let g: Group = part.parse()?;
        if groups.contains(&g) {
            return Err(format!("group `{g}` is listed twice"));
        }
        groups.push(g);
    }
    if groups.is_empty() {
        return Err("no groups given".to_string());
    }
    Ok(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_group_switches_what_the_issue_says() {
        let b = Group::Baseline.switches();
        assert!(!b.invariant_prompt && !b.receipt_guard && !b.protocol_isolation && !b.memory_gate);
        let p = Group::Prompt.switches();
        assert!(p.invariant_prompt && !p.receipt_guard && !p.protocol_isolation);
        let g = Group::Guards.switches();
        assert!(!g.invariant_prompt && g.receipt_guard && g.protocol_isolation && g.memory_gate);
        let f = Group::Full.switches();
        assert!(f.invariant_prompt && f.receipt_guard && f.protocol_isolation && f.memory_gate);
    }

    #[test]
    fn group_lists_parse_with_clear_errors() {
        assert_eq!(
            parse_group_list("full, baseline").unwrap(),
            [Group::Full, Group::Baseline]
        );
        assert!(parse_group_list("ful")
            .unwrap_err()
            .contains("unknown group `ful`"));
        assert!(parse_group_list("full,full").unwrap_err().contains("twice"));
        assert!(parse_group_list(" , ").unwrap_err().contains("no groups"));
        for g in Group::ALL {
            assert_eq!(serde_json::to_value(g).unwrap(), g.as_str());
            assert_eq!(g.as_str().parse::<Group>().unwrap(), g);
        }
    }
}
