//! Fuzzes the text-protocol (ReAct) parser: it must never panic, and nothing
//! it accepts may carry an `Observation:` line (SPEC B2).
#![no_main]

use attest_protocol::{EffectClass, ToolSpec};
use attest_providers::text_protocol::parser::{parse, ReactStep};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn tools() -> &'static [ToolSpec] {
    static TOOLS: OnceLock<Vec<ToolSpec>> = OnceLock::new();
    TOOLS.get_or_init(|| {
        vec![ToolSpec {
            name: "scan_term".into(),
            description: "Count a term.".into(),
            parameters: serde_json::json!({"type": "object"}),
            effect: EffectClass::Observe,
        }]
    })
}

/// Independent of the parser: a line that, after whitespace and Markdown
/// decoration, reads `observation` and then a colon.
fn has_observation_line(text: &str) -> bool {
    text.split(['\n', '\r']).any(|line| {
        let line = line
            .trim_start_matches(|c: char| c.is_whitespace() || "*_#>`-".contains(c))
            .to_lowercase();
        line.strip_prefix("observation").is_some_and(|rest| {
            rest.trim_start_matches(|c: char| c.is_whitespace() || c.is_ascii_digit())
                .starts_with(':')
        })
    })
}

fuzz_target!(|text: &str| {
    if let Ok(step) = parse(text, tools()) {
        assert!(!has_observation_line(text), "accepted an Observation: {text:?}");
        if let ReactStep::Action { tool, arguments, .. } = step {
            assert_eq!(tool, "scan_term");
            let value: serde_json::Value =
                serde_json::from_str(&arguments).expect("accepted arguments are JSON");
            assert!(value.is_object(), "accepted non-object arguments");
        }
    }
});
