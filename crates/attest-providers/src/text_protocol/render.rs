//! What a text-protocol model is sent: the tool block appended to the system
//! prompt, and the canonical transcript rewritten as plain text turns in
//! which every `Observation:` is written by the harness (SPEC B1, C2).

use crate::pairing::{self, INTERRUPTED_OUTPUT};
use attest_protocol::{AssistantPhase, HarnessMessageKind, ToolSpec, TranscriptItem};

/// Version of the text below. Bump it whenever the wording changes, so
/// traces before and after can be told apart (SPEC B5).
pub const TEXT_PROTOCOL_VERSION: &str = "react-2026.11.1";

const INSTRUCTIONS: &str = "\
# Tool protocol

Tools are used through plain text in this exact format. Each response is ONE of two shapes.

To use a tool:
Thought: <your reasoning>
Action: tool_name[{\"argument\": \"value\"}]

To answer:
Thought: <your reasoning>
Final Answer: <your answer>

Rules:
- At most one Action per response. Its arguments are a single JSON object inside the square brackets, matching the tool's schema.
- After the Action line, stop writing. The harness runs the tool and replies with `Observation: <result>`.
- Never write an Observation, a tool result or a guess of one yourself: only the harness writes them. A response that does is discarded.
- Never put an Action and a Final Answer in the same response.
- Give the Final Answer only from Observations the harness actually returned.";

/// The tool block for the system prompt. Byte-identical for identical tool
/// lists (SPEC D5): fixed text, tools in the given order, compact JSON.
pub fn tool_block(tools: &[ToolSpec]) -> String {
    let mut out = String::from(INSTRUCTIONS);
    out.push_str("\n\n# Tools\n");
    if tools.is_empty() {
        out.push_str("\nNo tools are offered: reply with a Final Answer.\n");
        return out;
    }
    for tool in tools {
        // serde_json cannot fail on a Value; the fallback keeps this infallible.
        let schema = serde_json::to_string(&tool.parameters).unwrap_or_else(|_| "{}".into());
        out.push_str(&format!(
            "\n## {}\n{}\nArguments (JSON Schema): {}\n",
            tool.name,
            tool.description.trim(),
            schema
        ));
    }
    out
}

/// How a call is written back to the model: the same shape it must emit.
pub fn action_text(thought: &str, name: &str, arguments: &str) -> String {
    let action = format!("Action: {name}[{}]", arguments.trim());
    match thought.trim() {
        "" => action,
        thought => format!("Thought: {thought}\n{action}"),
    }
}

/// One call of `tool` in the shape the model must write, its required
/// arguments shown as `"..."` (a value to fill in, refused if copied).
pub fn action_example(tool: &ToolSpec) -> String {
    let required = tool
        .parameters
        .get("required")
        .and_then(serde_json::Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(serde_json::Value::as_str)
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let arguments: serde_json::Map<String, serde_json::Value> = required
        .into_iter()
        .map(|name| (name.to_string(), serde_json::Value::from("...")))
        .collect();
    action_text(
        "",
        &tool.name,
        &serde_json::Value::Object(arguments).to_string(),
    )
}

/// The harness's Observation for a tool result.
pub fn observation_text(output: &str) -> String {
    format!("Observation: {output}")
}

/// Rewrite the canonical transcript as text-only turns (no `ToolCall` or
/// `ToolResult` items; the inner provider is sent no tool schemas). Pairing
/// is normalized first, so every call has exactly one Observation.
///
/// - commentary + one call → one assistant `Thought: …\nAction: name[args]`,
///   then a harness `Observation: <output>`; several calls in one block become
///   consecutive Action/Observation pairs (the thought goes with the first);
/// - an answer → `Final Answer: <text>`, the shape the model wrote it in;
/// - user input and harness messages are kept as they are.
pub fn history<'a>(items: impl IntoIterator<Item = &'a TranscriptItem>) -> Vec<TranscriptItem> {
    let items = pairing::normalize(items).items;
    let mut out = Vec::with_capacity(items.len());
    let mut i = 0;
    while let Some(item) = items.get(i) {
        i += 1;
        match item {
            TranscriptItem::AssistantOutput {
                text,
                phase: AssistantPhase::Commentary,
                ..
            } => {
                if matches!(items.get(i), Some(TranscriptItem::ToolCall { .. })) {
                    i = call_block(&items, i, text, &mut out);
                } else {
                    out.push(assistant(format!("Thought: {}", text.trim()), item));
                }
            }
            TranscriptItem::AssistantOutput { text, .. } => {
                out.push(assistant(format!("Final Answer: {}", text.trim()), item));
            }
            TranscriptItem::ToolCall { .. } => i = call_block(&items, i - 1, "", &mut out),
            TranscriptItem::UserInput { .. } | TranscriptItem::HarnessMessage { .. } => {
                out.push(item.clone())
            }
            // Normalization leaves no stray results; terminals are not messages.
            TranscriptItem::ToolResult { .. }
            | TranscriptItem::Terminal { .. }
            | TranscriptItem::Compaction { .. } => {}
        }
    }
    out
}

/// Render the call block starting at `start` with its results; returns the
/// index after the block.
fn call_block(
    items: &[TranscriptItem],
    start: usize,
    thought: &str,
    out: &mut Vec<TranscriptItem>,
) -> usize {
    let mut end = start;
    while matches!(items.get(end), Some(TranscriptItem::ToolCall { .. })) {
        end += 1;
    }
    let calls = items.get(start..end).unwrap_or_default();
    let mut results_end = end;
    while matches!(
        items.get(results_end),
        Some(TranscriptItem::ToolResult { .. })
    ) {
        results_end += 1;
    }
    let results = items.get(end..results_end).unwrap_or_default();
    for (n, call) in calls.iter().enumerate() {
        let TranscriptItem::ToolCall {
            call_id,
            name,
            arguments,
        } = call
        else {
            continue;
        };
        let output = results
            .iter()
            .find_map(|r| match r {
                TranscriptItem::ToolResult {
                    call_id: id,
                    output,
                    ..
                } if id == call_id => Some(output.as_str()),
                _ => None,
            })
            .unwrap_or(INTERRUPTED_OUTPUT);
        out.push(TranscriptItem::AssistantOutput {
            text: action_text(if n == 0 { thought } else { "" }, name, arguments),
            reasoning: None,
            encrypted_reasoning: Vec::new(),
            phase: AssistantPhase::Commentary,
        });
        out.push(TranscriptItem::HarnessMessage {
            kind: HarnessMessageKind::Observation,
            text: observation_text(output),
        });
    }
    results_end
}

fn assistant(text: String, original: &TranscriptItem) -> TranscriptItem {
    let phase = match original {
        TranscriptItem::AssistantOutput { phase, .. } => *phase,
        _ => AssistantPhase::Answer,
    };
    TranscriptItem::AssistantOutput {
        text,
        reasoning: None,
        encrypted_reasoning: Vec::new(),
        phase,
    }
}
