//! The JSON text of the types a step writes, and the JSON values it
//! parses, made by this crate's own functions.
//!
//! Why here: serde's code is generic, and a release build without
//! link-time optimization compiles a copy of it into each crate that
//! serializes or parses a type. A step writes its log entries from the
//! store, its events from the command line's `--json` output and JSON
//! values from the engine, and parses values in the providers and the
//! engine; done here, the binary holds one copy of each, and a step runs
//! less code (`scripts/bench-footprint.sh`).

use crate::{Event, LogEntry, Receipt};

impl LogEntry {
    /// The entry's compact JSON text, as run logs store it.
    #[inline(never)]
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string(self)
    }
}

impl Event {
    /// The event's compact JSON text (a `--json` line, a stream's item).
    #[inline(never)]
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string(self)
    }
}

impl Receipt {
    /// The receipt's compact JSON text.
    #[inline(never)]
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string(self)
    }
}

/// `text` parsed as a JSON value: `serde_json::from_str`, in one copy for
/// the providers' responses and the engine's arguments alike.
#[inline(never)]
pub fn parse_value(text: &str) -> serde_json::Result<serde_json::Value> {
    serde_json::from_str(text)
}

/// A JSON value's compact text: the same as its `Display`, without
/// `Display`'s second copy of serde_json's writer (for `fmt::Write`).
#[inline(never)]
pub fn value_text(value: &serde_json::Value) -> String {
    // Serializing a `Value` cannot fail: its map keys are strings.
    serde_json::to_string(value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_text_is_the_values_display() {
        let values = [
            serde_json::json!(null),
            serde_json::json!(-1.5e300),
            serde_json::json!("quote \" backslash \\ control \u{1} line\n é 😀"),
            serde_json::json!({"b": [1, true, {"z": null, "a": "x"}], "a": {}}),
            serde_json::json!([]),
        ];
        for value in values {
            assert_eq!(value_text(&value), value.to_string());
        }
    }
}
