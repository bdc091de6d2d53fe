//! Harness-owned prompt text. Versioned: any change bumps [`PROMPT_VERSION`]
//! so traces before and after can be told apart (SPEC B5).

/// Version of the base prompt and the harness messages below.
pub const PROMPT_VERSION: &str = "prompt-2026.12.1";

/// The base prompt's first line: what an agent is, without the evidence
/// rules. An eval group without the invariant prompt gets this alone
/// (`HarnessSwitches::invariant_prompt`).
macro_rules! preamble {
    () => {
        "You are an agent working through tools that a harness executes for you."
    };
}
const PREAMBLE: &str = preamble!();

/// The base invariant prompt (SPEC D2). Not overridable by workspace files.
const BASE_PROMPT: &str = concat!(
    preamble!(),
    "
Evidence rules:
- Tool results returned by the harness are the only source of truth about files, commands, messages and other external state. Your plans and narration are not actions.
- Before you say that you read, changed, ran, tested, searched, sent or otherwise checked something, call the tool that does it and use its result. If you have no such result, say plainly that it is not verified.
- Never write tool results, observations or tool output yourself; only the harness writes them.
- A failed, refused or interrupted tool call is not a completed action: report the failure instead of guessing.
- Treat remembered context as unverified unless it has a current source. When a listed skill clearly matches the task, load it with the `skill` tool before relying on its domain facts (URLs, hosts, commands)."
);

/// The system prompt for a run: the base invariants. Byte-identical for every
/// step of a run (SPEC D5).
pub fn base_system_prompt() -> &'static str {
    BASE_PROMPT
}

/// The base prompt of a run: the invariants, or for an eval group that
/// switches them off, the preamble alone.
pub fn base_prompt_for(invariants: bool) -> &'static str {
    if invariants {
        BASE_PROMPT
    } else {
        PREAMBLE
    }
}

/// Stands in history for a response that broke the protocol (SPEC B3). The
/// offending text is kept only in the audit trace.
pub const PROTOCOL_PLACEHOLDER: &str = "[attest] Your previous response broke the protocol and was omitted. Respond again with a tool call or a final answer. Never write tool results or Observations yourself: only the harness writes them.";

/// First line of every corrective turn (SPEC A4).
pub const CORRECTIVE_PREFIX: &str = "[attest] Evidence check:";

/// Sent once when the final answer was cut off by the output token limit.
pub const CONTINUATION_MESSAGE: &str =
    "[attest] Your answer was cut off by the output token limit. \
Continue it exactly where it stopped, without repeating what you already wrote.";

/// A corrective user message naming the missing evidence and, when known,
/// the exact syntax of a call under the active protocol
/// (`ModelProvider::call_syntax`).
pub fn corrective_message(
    missing: &str,
    tool_names: &[String],
    call_syntax: Option<&str>,
) -> String {
    let tools = if tool_names.is_empty() {
        "no suitable tool is offered".to_string()
    } else {
        format!(
            "offered tools that can provide it: {}",
            tool_names.join(", ")
        )
    };
    let how = call_syntax
        .map(|s| format!(", written as {s}"))
        .unwrap_or_default();
    format!(
        "{CORRECTIVE_PREFIX} this task requires {missing}, and no tool call has produced it ({tools}). \
Call the appropriate tool now{how}, or say plainly that you cannot. Do not claim results you have not obtained from a tool."
    )
}

/// First line of the one corrective turn `require_grounding` allows (SPEC A9).
pub const GROUNDING_PREFIX: &str = "[attest] Grounding check:";

/// A corrective turn naming the answer's ungrounded values, or saying that
/// it used no tool output at all.
pub fn grounding_corrective(ungrounded: &[String]) -> String {
    if ungrounded.is_empty() {
        return format!(
            "{GROUNDING_PREFIX} your answer uses no value from the tool results of this run. \
Answer the request from what the tools returned, naming the values they showed, or say plainly that you could not find it."
        );
    }
    let values: Vec<String> = ungrounded.iter().map(|v| format!("`{v}`")).collect();
    format!(
        "{GROUNDING_PREFIX} your answer names {} that no tool output of this run, the user's request or earlier evidence shows. \
Check them with a tool call and answer from its result, or say plainly that they are not verified.",
        values.join(", ")
    )
}

/// First line of the corrective turn after a response that repeated the
/// harness's own text instead of answering (issue 12, hole 7).
pub const OWN_ANSWER_PREFIX: &str = "[attest] Answer check:";

/// The corrective turn after a response that repeated harness text.
pub fn own_answer_corrective() -> String {
    format!(
        "{OWN_ANSWER_PREFIX} your last response repeated text the harness wrote (its reference data or its messages) instead of answering. \
Answer the user's request in your own words, from the tool results."
    )
}
