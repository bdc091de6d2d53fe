//! Fuzzes the one forgery detector (`attest_providers::forgery`): it must
//! never panic; with no real outputs it must flag every plain
//! `Observation:` line; and real outputs may only exempt, never add a hit.
//! The input is the response text, then a NUL, then one real tool output.
#![no_main]

use attest_core::detect_forged_observation;
use libfuzzer_sys::fuzz_target;

/// Independent of the detector: a line that, after whitespace and Markdown
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

fuzz_target!(|data: &[u8]| {
    let Ok(data) = std::str::from_utf8(data) else {
        return;
    };
    let (text, output) = data.split_once('\0').unwrap_or((data, ""));
    let alone = detect_forged_observation(text, []);
    if has_observation_line(text) {
        assert!(alone.is_some(), "missed an Observation line: {text:?}");
    }
    let quoted = detect_forged_observation(text, [output]);
    if quoted.is_some() {
        assert!(alone.is_some(), "a real output added a hit: {text:?} / {output:?}");
    }
});
