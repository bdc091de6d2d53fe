//! `--protocol auto` that learns (issue 20): per model and endpoint, whether
//! native tool calls ever arrive. A model behind an OpenAI-compatible server
//! that answered two runs without a single native call while tools were
//! offered (llama.cpp's `chatml-function-calling` with a small model, say) is
//! given the text protocol from the next run on. The record lives in a small
//! JSON file in the user's cache; a model that once made a native call is
//! never switched.

use attest_protocol::{CallSource, TraceRecord};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The trace records [`ProtocolMemory::learn`] reads.
pub const LEARNED_FROM: [&str; 2] = ["request", "response"];

/// Runs without a native call (tools offered) before the switch.
pub const RUNS_BEFORE_SWITCH: u32 = 2;

/// What is known of one model at one endpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtocolRecord {
    /// Runs that offered tools and got no native call.
    pub runs_without_native_calls: u32,
    /// A native call arrived at least once.
    pub native_calls_seen: bool,
}

impl ProtocolRecord {
    pub fn prefers_text(&self) -> bool {
        !self.native_calls_seen && self.runs_without_native_calls >= RUNS_BEFORE_SWITCH
    }
}

/// The file of records, keyed `model @ endpoint`.
#[derive(Debug, Clone)]
pub struct ProtocolMemory {
    path: PathBuf,
}

impl ProtocolMemory {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        ProtocolMemory { path: path.into() }
    }

    pub fn key(model: &str, endpoint: &str) -> String {
        format!("{model} @ {endpoint}")
    }

    fn read_all(&self) -> BTreeMap<String, ProtocolRecord> {
        std::fs::read_to_string(&self.path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }

    pub fn get(&self, key: &str) -> ProtocolRecord {
        self.read_all().remove(key).unwrap_or_default()
    }

    /// Fold one native-protocol run's request and response traces into the
    /// record. Best effort: a cache that cannot be written only means no
    /// learning.
    pub fn learn(&self, key: &str, traces: &[TraceRecord]) -> Option<ProtocolRecord> {
        let offered = traces.iter().any(
            |t| matches!(t, TraceRecord::Request { tool_names, .. } if !tool_names.is_empty()),
        );
        let native = traces.iter().any(|t| {
            matches!(
                t,
                TraceRecord::Response {
                    call_source: Some(CallSource::Native),
                    ..
                }
            )
        });
        if !offered {
            return None;
        }
        let mut all = self.read_all();
        let record = all.entry(key.to_string()).or_default();
        if native {
            record.native_calls_seen = true;
        } else {
            record.runs_without_native_calls = record.runs_without_native_calls.saturating_add(1);
        }
        let record = record.clone();
        self.write_all(&all).ok()?;
        Some(record)
    }

    fn write_all(&self, all: &BTreeMap<String, ProtocolRecord>) -> std::io::Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        tmp.write_all(serde_json::to_string_pretty(all)?.as_bytes())?;
        tmp.persist(&self.path).map_err(|e| e.error)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Built from JSON so the tests keep to the fields that matter here.
    fn request(tools: &[&str]) -> TraceRecord {
        serde_json::from_value(serde_json::json!({
            "record": "request", "step": 1, "attempt": 1, "provider": "openai",
            "api_family": "openai_chat", "model": "m", "stream": false, "prefix_hash": "",
            "tool_names": tools, "message_count": 1, "max_tokens": 1}))
        .unwrap()
    }

    fn response(source: Option<CallSource>) -> TraceRecord {
        serde_json::from_value(serde_json::json!({
            "record": "response", "step": 1, "raw_finish_reason": null, "text": "",
            "parsed_calls": [], "call_source": source, "input_tokens": 0, "output_tokens": 0}))
        .unwrap()
    }

    #[test]
    fn two_runs_without_native_calls_switch_and_one_native_call_never_does() {
        let dir = tempfile::tempdir().unwrap();
        let memory = ProtocolMemory::new(dir.path().join("protocols.json"));
        let key = ProtocolMemory::key("qwen", "http://127.0.0.1:8000/v1/chat/completions");
        let no_native = [request(&["read_file"]), response(Some(CallSource::Content))];
        assert!(!memory.learn(&key, &no_native).unwrap().prefers_text());
        // A run that offered no tools says nothing.
        assert!(memory
            .learn(&key, &[request(&[]), response(None)])
            .is_none());
        assert!(memory.learn(&key, &no_native).unwrap().prefers_text());
        assert!(memory.get(&key).prefers_text());

        let other = ProtocolMemory::key("gpt", "https://api.openai.com/v1/chat/completions");
        memory.learn(
            &other,
            &[request(&["read_file"]), response(Some(CallSource::Native))],
        );
        memory.learn(&other, &no_native);
        memory.learn(&other, &no_native);
        assert!(!memory.get(&other).prefers_text());
    }
}
