//! Deferred tool discovery (SPEC D7): with a large tool set, only the first
//! tools are offered up front; the rest are found with `tool_search`, which
//! returns matching tools with their schemas and makes them callable from
//! the next request on. The tool list change is a declared cache reset.

use crate::tool::{Tool, ToolContext, ToolOutput};
use async_trait::async_trait;
use attest_protocol::{EffectClass, Evidence, Permission, ToolSpec};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

pub const TOOL_SEARCH: &str = "tool_search";

/// Names of deferred tools found so far.
pub(super) type Activated = Arc<Mutex<BTreeSet<String>>>;

pub(super) struct ToolSearchTool {
    spec: ToolSpec,
    deferred: Vec<ToolSpec>,
    activated: Activated,
}

impl ToolSearchTool {
    pub(super) fn new(deferred: Vec<ToolSpec>, activated: Activated) -> Self {
        ToolSearchTool {
            spec: tool_search_spec(deferred.len()),
            deferred,
            activated,
        }
    }
}

pub(super) fn tool_search_spec(deferred: usize) -> ToolSpec {
    ToolSpec {
        name: TOOL_SEARCH.to_string(),
        description: format!(
            "Find more tools: {deferred} further tools are available but not loaded. Describe what you need; matching tools are returned with their parameters and can be called from your next step."
        ),
        parameters: serde_json::json!({
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What the tool should do, in a few words"}},
            "required": ["query"],
            "additionalProperties": false
        }),
        effect: EffectClass::Internal,
    }
}

/// Words of `text`, lowercased, for overlap scoring.
fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 2)
        .map(str::to_lowercase)
        .collect()
}

/// Deferred tools ranked by how many query words their name and
/// description share; ties keep registry order.
pub(super) fn search<'a>(deferred: &'a [ToolSpec], query: &str, limit: usize) -> Vec<&'a ToolSpec> {
    let wanted = words(query);
    let mut scored: Vec<(usize, usize, &ToolSpec)> = deferred
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let have = words(&format!(
                "{} {}",
                spec.name.replace('_', " "),
                spec.description
            ));
            (wanted.intersection(&have).count(), i, spec)
        })
        .filter(|(score, _, _)| *score > 0)
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().take(limit).map(|(_, _, s)| s).collect()
}

#[async_trait]
impl Tool for ToolSearchTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn default_permission(&self) -> Permission {
        Permission::Allow
    }

    async fn execute(&self, args: serde_json::Value, _ctx: &ToolContext) -> ToolOutput {
        let query = args
            .get("query")
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        let found = search(&self.deferred, query, 5);
        if let Ok(mut activated) = self.activated.lock() {
            activated.extend(found.iter().map(|s| s.name.clone()));
        }
        let count = found.len() as u64;
        let text = if found.is_empty() {
            "no matching tools; try other words".to_string()
        } else {
            found
                .iter()
                .map(|s| {
                    format!(
                        "{}: {}\n  parameters: {}",
                        s.name, s.description, s.parameters
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        ToolOutput::ok(
            text,
            Evidence {
                match_count: Some(count),
                ..Evidence::default()
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, description: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters: serde_json::json!({"type": "object"}),
            effect: EffectClass::Observe,
        }
    }

    #[test]
    fn ranks_by_word_overlap() {
        let tools = vec![
            spec("send_email", "Send an email message"),
            spec("fetch_weather", "Fetch the weather forecast for a city"),
            spec("weather_alerts", "List weather alerts"),
        ];
        let found: Vec<&str> = search(&tools, "weather forecast for Paris", 5)
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(found, ["fetch_weather", "weather_alerts"]);
        assert!(search(&tools, "zzz", 5).is_empty());
    }
}
