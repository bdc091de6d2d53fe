//! Tool calls left in the content of a native-protocol response (SPEC J4).
//!
//! OpenAI-compatible servers (llama.cpp, Ollama, vLLM, LM Studio) pass a
//! model's call through as text when their chat template does not map the
//! model's call syntax. When a response has no native calls and its whole
//! content — after trimming, optionally in one code fence or in
//! `<tool_call>` tags, the forms [`crate::tool_call_format`] reads — is one
//! or more well-formed calls to offered tools, those become the response's
//! calls, marked [`CallSource::Content`]; the engine then validates,
//! authorizes and records them like any other. JSON inside prose never
//! becomes a call. Content shaped like a call that is not a valid one (an
//! unknown tool, arguments that are not an object) is a protocol violation.
//!
//! The HTTP provider applies this to both wire formats; `[provider]
//! content_tool_calls = "off"` turns it off.

use crate::tool_call_format::{self, ParseOptions};
use crate::{FinishKind, ModelResponse, ParsedCall, ProtocolViolation};
use attest_protocol::{CallSource, ToolSpec};
use serde::Deserialize;

/// Whether calls written in the content are read (`[provider]
/// content_tool_calls`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContentToolCalls {
    #[default]
    Auto,
    Off,
}

/// Turn a content made only of calls into the response's calls; `fresh_id`
/// names each one.
pub fn adopt(
    response: &mut ModelResponse,
    tools: &[ToolSpec],
    mut fresh_id: impl FnMut() -> String,
) {
    if tools.is_empty() || !response.tool_calls.is_empty() || response.protocol_violation.is_some()
    {
        return;
    }
    let content = response.text.trim();
    if !is_call_shaped(content) {
        return;
    }
    let opts = ParseOptions {
        truncated: response.finish == FinishKind::Length,
        reasoning_prefilled: false,
    };
    match tool_call_format::parse(content, tools, opts) {
        Ok(parsed) if !parsed.calls.is_empty() && parsed.content.is_empty() => {
            response.tool_calls = parsed
                .calls
                .into_iter()
                .map(|call| ParsedCall {
                    id: fresh_id(),
                    name: call.name,
                    arguments: call.arguments,
                })
                .collect();
            response.text = String::new();
            if let Some(thought) = parsed.reasoning {
                response.reasoning = Some(match response.reasoning.take() {
                    Some(before) => format!("{before}\n{thought}"),
                    None => thought,
                });
            }
            response.parse_failures.extend(parsed.dropped);
            response.finish = FinishKind::ToolUse;
            response.call_source = CallSource::Content;
        }
        // Data, or calls with prose around them: the content stays text.
        Ok(_) => {}
        Err(violation) => {
            response.protocol_violation = Some(ProtocolViolation {
                kind: violation.kind,
                detail: format!(
                    "the content is written as a tool call but is not a valid one: {}",
                    violation.detail
                ),
            })
        }
    }
}

/// Whether the trimmed content starts and ends like a call form, so that
/// prose is never read as one.
fn is_call_shaped(content: &str) -> bool {
    let starts = ["{", "[", "```", "<tool_call>", "<|python_tag|>", "<think>"]
        .iter()
        .any(|s| content.starts_with(s));
    let ends = ["}", "]", "```", "</tool_call>"]
        .iter()
        .any(|s| content.ends_with(s));
    starts && ends
}

#[cfg(test)]
mod tests {
    use super::*;
    use attest_protocol::{EffectClass, ProtocolErrorKind, Usage};
    use serde_json::json;

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "read_file".into(),
            description: String::new(),
            parameters: json!({"type": "object"}),
            effect: EffectClass::Observe,
        }]
    }

    fn answer(text: &str) -> ModelResponse {
        ModelResponse {
            text: text.into(),
            reasoning: None,
            encrypted_reasoning: vec![],
            tool_calls: vec![],
            finish: FinishKind::Stop,
            raw_finish_reason: Some("stop".into()),
            usage: Usage::default(),
            raw: String::new(),
            parse_failures: vec![],
            protocol_violation: None,
            call_source: CallSource::Native,
        }
    }

    fn adopted(text: &str) -> ModelResponse {
        let mut r = answer(text);
        let mut n = 0;
        adopt(&mut r, &tools(), || {
            n += 1;
            format!("c{n}")
        });
        r
    }

    #[test]
    fn whole_content_calls_become_calls() {
        for text in [
            "{\"name\": \"read_file\", \"arguments\": {\"path\": \"config.toml\"}}",
            "  ```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"config.toml\"}}\n```\n",
            "<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"config.toml\"}}\n</tool_call>",
            "[{\"type\": \"function\", \"function\": {\"name\": \"read_file\", \"arguments\": {\"path\": \"config.toml\"}}}]",
        ] {
            let r = adopted(text);
            assert_eq!(r.call_source, CallSource::Content, "{text:?}");
            assert_eq!(r.finish, FinishKind::ToolUse);
            assert_eq!(r.text, "");
            assert_eq!(
                r.tool_calls,
                vec![ParsedCall {
                    id: "c1".into(),
                    name: "read_file".into(),
                    arguments: r#"{"path":"config.toml"}"#.into(),
                }]
            );
        }
        let two = adopted(
            "<tool_call>{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}</tool_call>\n<tool_call>{\"name\": \"read_file\", \"arguments\": {\"path\": \"b\"}}</tool_call>",
        );
        assert_eq!(two.tool_calls.len(), 2);
        assert_eq!(two.tool_calls[1].id, "c2");
    }

    #[test]
    fn prose_and_data_stay_text() {
        for text in [
            "I would call {\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}} next.",
            "Here:\n```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n```",
            "```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n```\nThat is the call.",
            "{\"name\": \"attest\", \"version\": \"0.1.0\"}",
            "[1, 2, 3]",
            "The port is 8080.",
        ] {
            let r = adopted(text);
            assert!(r.tool_calls.is_empty(), "{text:?}");
            assert_eq!(r.text, text);
            assert_eq!(r.call_source, CallSource::Native);
            assert!(r.protocol_violation.is_none(), "{text:?}");
        }
    }

    #[test]
    fn a_broken_whole_content_call_is_a_violation() {
        let r = adopted("{\"name\": \"delete_everything\", \"arguments\": {}}");
        let v = r.protocol_violation.expect("a violation");
        assert_eq!(v.kind, ProtocolErrorKind::UnparsableAction);
        assert!(v.detail.contains("not an offered tool"), "{}", v.detail);
        assert!(r.tool_calls.is_empty());
    }

    #[test]
    fn native_calls_and_no_tools_leave_the_response_alone() {
        let call = "{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}";
        let mut r = answer(call);
        adopt(&mut r, &[], || "x".into());
        assert!(r.tool_calls.is_empty());
        let mut r = answer(call);
        r.tool_calls.push(ParsedCall {
            id: "n1".into(),
            name: "read_file".into(),
            arguments: "{}".into(),
        });
        adopt(&mut r, &tools(), || "x".into());
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].id, "n1");
        assert_eq!(r.text, call);
    }
}
