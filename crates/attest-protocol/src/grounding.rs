use serde::{Deserialize, Serialize};

/// What kind of checkable value an answer names (SPEC A9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckableKind {
    /// A number, with its unit when one follows (`0 hits`, `12 ms`).
    Number,
    /// A string in double or typographic quotes.
    Quoted,
    Path,
    Url,
    Domain,
    /// A version (`v1.2.3`, `0.4.2`, `1.2.0-beta.1`).
    Version,
    /// A hex digest or commit id.
    Hash,
    /// A network port (`port 8080`, `localhost:8080`).
    Port,
    /// An identifier in a code span (`` `serde_json` ``).
    Identifier,
}

impl CheckableKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckableKind::Number => "number",
            CheckableKind::Quoted => "quoted",
            CheckableKind::Path => "path",
            CheckableKind::Url => "url",
            CheckableKind::Domain => "domain",
            CheckableKind::Version => "version",
            CheckableKind::Hash => "hash",
            CheckableKind::Port => "port",
            CheckableKind::Identifier => "identifier",
        }
    }
}

/// One checkable value of an answer and where it was found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroundedValue {
    /// The value as checked (`0`, `config.toml`).
    pub value: String,
    pub kind: CheckableKind,
    /// The unit that followed a number in the answer (`hits`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// Calls of this run whose output contains the value (and whose own
    /// arguments do not).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub call_ids: Vec<String>,
    /// Calls of earlier runs of the session whose output contains it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub session_call_ids: Vec<String>,
    /// The user wrote it (this run's prompt or an earlier one of the session).
    #[serde(default, skip_serializing_if = "is_false")]
    pub in_prompt: bool,
    /// It names an offered tool.
    #[serde(default, skip_serializing_if = "is_false")]
    pub tool_name: bool,
}

impl GroundedValue {
    /// Found somewhere the model did not write it.
    pub fn is_grounded(&self) -> bool {
        !self.call_ids.is_empty()
            || !self.session_call_ids.is_empty()
            || self.in_prompt
            || self.tool_name
    }

    /// Found in a receipt's output (this run's or the session's).
    pub fn from_evidence(&self) -> bool {
        !self.call_ids.is_empty() || !self.session_call_ids.is_empty()
    }
}

/// How an answer's checkable values map to the run's evidence (SPEC A9).
/// Reported on `done` and in the trace; decisive only under
/// `require_grounding`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grounding {
    /// Every checkable value of the answer, in order of appearance.
    pub values: Vec<GroundedValue>,
    /// The values found nowhere (as `value`, with the unit when there is one).
    pub ungrounded: Vec<String>,
    /// True when at least one value comes from a receipt's output.
    pub evidence_used: bool,
}

impl Grounding {
    /// Build from the mapped values: the summary fields follow from them.
    pub fn from_values(values: Vec<GroundedValue>) -> Self {
        let ungrounded = values
            .iter()
            .filter(|v| !v.is_grounded())
            .map(GroundedValue::label)
            .collect();
        let evidence_used = values.iter().any(GroundedValue::from_evidence);
        Grounding {
            values,
            ungrounded,
            evidence_used,
        }
    }
}

impl GroundedValue {
    /// `0 hits`, `config.toml`: the value with its unit.
    pub fn label(&self) -> String {
        match &self.unit {
            Some(unit) => format!("{} {unit}", self.value),
            None => self.value.clone(),
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_follows_from_the_values_and_round_trips() {
        let v = |value: &str, calls: &[&str], in_prompt: bool| GroundedValue {
            value: value.into(),
            kind: CheckableKind::Number,
            unit: Some("hits".into()),
            call_ids: calls.iter().map(|c| c.to_string()).collect(),
            session_call_ids: vec![],
            in_prompt,
            tool_name: false,
        };
        let g = Grounding::from_values(vec![v("3", &["call_1"], false), v("0", &[], false)]);
        assert_eq!(g.ungrounded, ["0 hits"]);
        assert!(g.evidence_used);
        let g = Grounding::from_values(vec![v("3", &[], true)]);
        assert!(g.ungrounded.is_empty());
        assert!(!g.evidence_used, "the prompt is not evidence");
        let json = serde_json::to_value(&g).unwrap();
        assert_eq!(json["values"][0]["in_prompt"], true);
        assert!(json["values"][0].get("call_ids").is_none(), "{json}");
        let back: Grounding = serde_json::from_value(json).unwrap();
        assert_eq!(back, g);
    }
}
