//! An emulated provider prompt cache, so tests and benchmarks see the
//! usage a real service would report for the requests attest sends.
//!
//! A request is read as a sequence of segments (tools, system, then each
//! message block, without its `cache_control`). Anthropic caches the prefix
//! ending at each `cache_control` breakpoint and reads back the longest
//! cached prefix of a new request; OpenAI caches every message-boundary
//! prefix automatically. Tokens are bytes / 4.

use super::Wire;
use serde_json::Value;
use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};

#[derive(Debug, Default)]
pub struct PromptCache {
    prefixes: HashSet<u64>,
}

/// What one request cost, in tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheUsage {
    pub input: u64,
    pub read: u64,
    pub written: u64,
}

fn tokens(bytes: usize) -> u64 {
    bytes.div_ceil(4) as u64
}

/// (segment text, a breakpoint ends it).
fn segments(wire: Wire, body: &Value) -> Vec<(String, bool)> {
    let strip = |v: &Value| {
        let mut v = v.clone();
        let marked = v.get("cache_control").is_some();
        if let Some(o) = v.as_object_mut() {
            o.remove("cache_control");
        }
        (v.to_string(), marked)
    };
    let mut out = Vec::new();
    for t in body["tools"].as_array().into_iter().flatten() {
        out.push(strip(t));
    }
    match wire {
        Wire::Anthropic => {
            match &body["system"] {
                Value::Array(blocks) => out.extend(blocks.iter().map(strip)),
                Value::Null => {}
                other => out.push((other.to_string(), false)),
            }
            for m in body["messages"].as_array().into_iter().flatten() {
                out.push((m["role"].to_string(), false));
                match &m["content"] {
                    Value::Array(blocks) => out.extend(blocks.iter().map(strip)),
                    other => out.push((other.to_string(), false)),
                }
            }
        }
        Wire::OpenAi => {
            for m in body["messages"].as_array().into_iter().flatten() {
                // Every message boundary is cacheable.
                out.push((m.to_string(), true));
            }
        }
    }
    out
}

impl PromptCache {
    /// Serve one request: read the longest cached prefix, write the prefixes
    /// the request marks.
    pub fn serve(&mut self, wire: Wire, body: &Value) -> CacheUsage {
        let segs = segments(wire, body);
        let total: usize = segs.iter().map(|(s, _)| s.len()).sum();
        let mut hasher = DefaultHasher::new();
        let (mut bytes, mut read, mut last_mark) = (0usize, 0usize, 0usize);
        let mut marks = Vec::new();
        for (text, marked) in &segs {
            text.hash(&mut hasher);
            bytes += text.len();
            let h = hasher.finish();
            if self.prefixes.contains(&h) {
                read = bytes;
            }
            if *marked {
                marks.push(h);
                last_mark = bytes;
            }
        }
        self.prefixes.extend(marks);
        CacheUsage {
            input: tokens(total),
            read: tokens(read),
            written: tokens(last_mark.saturating_sub(read)),
        }
    }
}
