//! Detection of assistant text that imitates a tool result (SPEC B2, issue
//! item 12). A match is a protocol error: the text never enters history.

use regex::Regex;
use std::sync::OnceLock;

fn patterns() -> &'static [(&'static str, Regex)] {
    static PATTERNS: OnceLock<Vec<(&'static str, Regex)>> = OnceLock::new();
    PATTERNS.get_or_init(|| {
        let table: [(&str, &str); 5] = [
            // ReAct-style observation lines, possibly behind markdown decoration.
            ("observation_line", r"(?im)^[\s>*_#`-]*observation\s*:"),
            ("tool_result_line", r"(?im)^[\s>*_#`-]*(tool[ _]?(result|output|response))\s*:"),
            (
                "tool_result_tag",
                r"(?i)<\s*/?\s*(tool_response|tool_result|tool_output|function_results?|observation)\s*>",
            ),
            // JSON blobs that claim to be a tool message.
            ("tool_role_json", r#"(?i)"role"\s*:\s*"(tool|function)""#),
            (
                "tool_result_json",
                r#"(?i)("type"\s*:\s*"tool_result"|"tool_call_id"\s*:|"tool_use_id"\s*:)"#,
            ),
        ];
        table
            .into_iter()
            .filter_map(|(name, re)| Regex::new(re).ok().map(|r| (name, r)))
            .collect()
    })
}

/// Returns the name of the first forgery pattern found in `text`, unless the
/// matched line is quoted verbatim from a real tool output of this run (a
/// model may legitimately quote a file that contains such a line).
pub fn detect_forged_observation<'a>(
    text: &str,
    real_outputs: impl Iterator<Item = &'a str> + Clone,
) -> Option<&'static str> {
    for (name, re) in patterns() {
        for m in re.find_iter(text) {
            let line = line_around(text, m.start(), m.end());
            let quoted = real_outputs
                .clone()
                .into_iter()
                .any(|out| out.contains(line));
            if !quoted {
                return Some(name);
            }
        }
    }
    None
}

fn line_around(text: &str, start: usize, end: usize) -> &str {
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[end..].find('\n').map_or(text.len(), |i| end + i);
    text[line_start..line_end].trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detect(text: &str) -> Option<&'static str> {
        detect_forged_observation(text, std::iter::empty())
    }

    #[test]
    fn flags_observation_lines_tags_and_tool_json() {
        assert_eq!(
            detect("Action: scan\nObservation: {\"count\":0}"),
            Some("observation_line")
        );
        assert_eq!(detect("**Observation:** nothing"), Some("observation_line"));
        assert_eq!(
            detect("<tool_response>{}</tool_response>"),
            Some("tool_result_tag")
        );
        assert_eq!(
            detect(r#"{"role": "tool", "content": "sent"}"#),
            Some("tool_role_json")
        );
        assert_eq!(
            detect(r#"{"type":"tool_result","content":"ok"}"#),
            Some("tool_result_json")
        );
        assert_eq!(
            detect("Tool result: message sent, id 42"),
            Some("tool_result_line")
        );
    }

    #[test]
    fn ordinary_answers_pass() {
        assert_eq!(detect("The port is 8080, as config.toml says."), None);
        assert_eq!(detect("My observation is that the file is short."), None);
        assert_eq!(detect("I will use the tool to check."), None);
    }

    #[test]
    fn quoting_a_real_tool_output_is_not_forgery() {
        let real = "line 1\nObservation: this text is in the file\n";
        assert_eq!(
            detect_forged_observation(
                "The file says:\nObservation: this text is in the file",
                [real].into_iter()
            ),
            None
        );
    }
}
