//! Redaction of the texts one tool step scrubs (SPEC F8, issue 19): a
//! call's arguments, a provider's raw response, a small tool output; and
//! of long outputs — source code, Chinese prose, an encoded blob — where a
//! scan's cost per byte shows.

use attest_core::redact::Redactor;
use criterion::{criterion_group, criterion_main, Criterion};

const ARGUMENTS: &str = r#"{"path":"data/f0001.txt"}"#;
const RAW: &str = r#"{"choices":[{"finish_reason":"tool_calls","index":0,"message":{"content":null,"role":"assistant","tool_calls":[{"function":{"arguments":"{\"path\":\"data/f0001.txt\"}","name":"read_file"},"id":"call_1","type":"function"}]}}],"created":0,"id":"chatcmpl-test","model":"test-model","object":"chat.completion","usage":{"completion_tokens":7,"prompt_tokens":1136,"prompt_tokens_details":{"cached_tokens":250},"total_tokens":1143}}"#;
const OUTPUT: &str = "port = 8001\n";

fn long_texts() -> Vec<(&'static str, String)> {
    let code = include_str!("../src/engine/run.rs");
    let code = code[..code.len().min(16 * 1024)].to_string();
    let chinese = "证据优先的智能体运行时：模型只提出调用，由运行时执行并记录回执。\n".repeat(180);
    let blob: String = (0..16 * 1024)
        .map(|i| b"Aa0+/Zz9QqRr7xYy"[(i * 7 + i / 3) % 16] as char)
        .collect();
    vec![
        ("code_16k", code),
        ("chinese_16k", chinese),
        ("blob_16k", blob),
    ]
}

fn redact(c: &mut Criterion) {
    let redactor = Redactor::new().with_secrets(["sk-bench-secret-value-0123456789"]);
    let mut group = c.benchmark_group("redact");
    for (name, text) in [
        ("arguments", ARGUMENTS),
        ("raw_response", RAW),
        ("tool_output", OUTPUT),
    ] {
        group.bench_function(name, |b| b.iter(|| redactor.redact_to(text, usize::MAX)));
    }
    for (name, text) in long_texts() {
        group.bench_function(name, |b| b.iter(|| redactor.redact_to(&text, usize::MAX)));
    }
    group.finish();
}

criterion_group!(benches, redact);
criterion_main!(benches);
