//! The read-only `history` tool (SPEC E4): after a compaction, the model
//! can fetch the full original of any archived call by its call id.

use crate::tool::{Tool, ToolContext, ToolOutput};
use async_trait::async_trait;
use attest_protocol::{EffectClass, Evidence, Permission, ToolSpec, TranscriptItem};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub const HISTORY_TOOL: &str = "history";

/// Archived originals by call id (the call, then its result).
pub(super) type Archive = Arc<Mutex<HashMap<String, Vec<TranscriptItem>>>>;

pub(super) struct HistoryTool {
    spec: ToolSpec,
    archive: Archive,
}

impl HistoryTool {
    pub(super) fn new(archive: Archive) -> Self {
        HistoryTool {
            spec: history_spec(),
            archive,
        }
    }
}

pub(super) fn history_spec() -> ToolSpec {
    ToolSpec {
        name: HISTORY_TOOL.to_string(),
        description: "Read the full original of a call that was compacted out of the conversation: its arguments and complete result. Give the call id shown in the history summary.".to_string(),
        parameters: serde_json::json!({
            "type": "object",
            "properties": {"call_id": {"type": "string", "description": "The call id, e.g. call_12"}},
            "required": ["call_id"],
            "additionalProperties": false
        }),
        effect: EffectClass::Internal,
    }
}

#[async_trait]
impl Tool for HistoryTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn default_permission(&self) -> Permission {
        Permission::Allow
    }

    async fn execute(&self, args: serde_json::Value, _ctx: &ToolContext) -> ToolOutput {
        let Some(call_id) = args.get("call_id").and_then(|v| v.as_str()) else {
            return ToolOutput::error("`call_id` is required");
        };
        let found = match self.archive.lock() {
            Ok(archive) => archive.get(call_id).cloned(),
            Err(_) => return ToolOutput::error("the archive is unavailable"),
        };
        let Some(items) = found else {
            return ToolOutput::error(format!(
                "no archived call `{call_id}`; only calls listed in the history summary are archived"
            ));
        };
        let mut out = Vec::new();
        for item in items {
            match item {
                TranscriptItem::ToolCall {
                    name, arguments, ..
                } => out.push(format!("call {call_id}: {name} {arguments}")),
                TranscriptItem::ToolResult { status, output, .. } => {
                    out.push(format!("result ({}):\n{output}", status.as_str()))
                }
                _ => {}
            }
        }
        ToolOutput::ok(
            out.join("\n"),
            Evidence {
                artifact_ref: Some(format!("archive:{call_id}")),
                ..Evidence::default()
            },
        )
    }
}
