//! Per-step provider cost: normalizing the transcript and building the body
//! (done on every model call), and parsing a streamed response. The body is
//! timed written whole (`*_whole`: `body_json`, as every request was built
//! before pieces were kept) and as the per-step path builds it (`*_kept`:
//! `GrowingNormalizer` and `body_json_kept` after an earlier request of the
//! run kept its normalization, pieces and leading messages; a real step adds
//! its one or two new items to that).

use attest_protocol::{AssistantPhase, EffectClass, ReceiptStatus, ToolSpec, TranscriptItem};
use attest_providers::fragments::Fragments;
use attest_providers::{anthropic, openai, pairing, shared_history, ModelRequest};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use serde_json::json;

fn tools() -> Vec<ToolSpec> {
    [
        "read_file",
        "write_file",
        "search",
        "run_command",
        "list_dir",
    ]
    .iter()
    .map(|name| ToolSpec {
        name: name.to_string(),
        description: format!("The {name} tool. ").repeat(8),
        parameters: json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Workspace-relative path."},
                "query": {"type": "string"}}, "required": ["path"]}),
        effect: EffectClass::Observe,
    })
    .collect()
}

/// About `n` items: a user turn, then rounds of commentary, two calls and
/// their results (1-2 KB of output each).
fn transcript(n: usize) -> Vec<TranscriptItem> {
    let mut items = vec![TranscriptItem::UserInput {
        text: "Find where the port is configured and fix it.".into(),
    }];
    let mut round = 0;
    while items.len() < n {
        items.push(TranscriptItem::AssistantOutput {
            text: format!("Step {round}: let me look at the next file and search for the setting."),
            reasoning: None,
            encrypted_reasoning: Vec::new(),
            phase: AssistantPhase::Commentary,
        });
        for k in 0..2 {
            items.push(TranscriptItem::ToolCall {
                call_id: format!("call_{round}_{k}"),
                name: "read_file".into(),
                arguments: format!(r#"{{"path":"src/module_{round}_{k}.rs"}}"#),
            });
        }
        for k in 0..2 {
            items.push(TranscriptItem::ToolResult {
                call_id: format!("call_{round}_{k}"),
                name: "read_file".into(),
                status: ReceiptStatus::Ok,
                output: "fn main() { let port = 8080; println!(\"{port}\"); }\n"
                    .repeat(20 + 10 * k),
                receipt: None,
            });
        }
        round += 1;
    }
    items.truncate(n);
    items
}

fn request(history: Vec<TranscriptItem>) -> ModelRequest {
    ModelRequest {
        system: "You are attest, an evidence-first agent. ".repeat(20),
        tools: tools().into(),
        history: shared_history(history),
        stream: true,
        max_tokens: 4096,
        temperature: Some(0.2),
        seed: None,
        stop: vec![],
        cache_key: None,
    }
}

fn bench_build(c: &mut Criterion) {
    let mut group = c.benchmark_group("normalize_and_build");
    type Whole = fn(&ModelRequest, &str) -> String;
    type Kept = fn(&ModelRequest, &str, &mut Fragments) -> attest_providers::fragments::KeptBody;
    let wires: [(&str, Whole, Kept); 2] = [
        ("openai", openai::body_json, openai::body_kept),
        ("anthropic", anthropic::body_json, anthropic::body_kept),
    ];
    for n in [10, 100, 500, 5_000] {
        let shared = shared_history(transcript(n));
        let base = request(vec![]);
        let normalized = |history: &[std::sync::Arc<TranscriptItem>]| ModelRequest {
            history: pairing::normalize_shared(history).items,
            ..base.clone()
        };
        for (wire, whole, kept_build) in wires {
            group.bench_with_input(BenchmarkId::new(format!("{wire}_whole"), n), &n, |b, _| {
                b.iter(|| black_box(whole(&normalized(&shared), wire)))
            });
            // The per-step path: an earlier request of the run kept its
            // pieces and leading messages, and its normalization.
            let mut kept = Fragments::default();
            let mut growing = pairing::GrowingNormalizer::default();
            let mut step = |kept: &mut Fragments| {
                let req = ModelRequest {
                    history: growing.normalize(&shared).items,
                    ..base.clone()
                };
                let body = kept_build(&req, wire, kept);
                // As the engine does: the history goes back to the normalizer.
                growing.give_back(req.history);
                body
            };
            step(&mut kept);
            group.bench_with_input(BenchmarkId::new(format!("{wire}_kept"), n), &n, |b, _| {
                b.iter(|| black_box(step(&mut kept)))
            });
        }
    }
    group.finish();
}

/// ~200 chunks: text deltas, then one call whose arguments arrive in 40 fragments.
fn openai_chunks() -> Vec<String> {
    let mut out: Vec<String> = (0..150)
        .map(|i| {
            json!({"choices": [{"index": 0, "delta": {"content": format!("word{i} ")}}]})
                .to_string()
        })
        .collect();
    out.push(
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1",
        "type": "function", "function": {"name": "write_file", "arguments": ""}}]}}]})
        .to_string(),
    );
    let args = format!(
        r#"{{"path":"src/main.rs","content":"{}"}}"#,
        "x".repeat(400)
    );
    for piece in args.as_bytes().chunks(args.len().div_ceil(40)) {
        let piece = String::from_utf8_lossy(piece);
        out.push(
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
            "function": {"arguments": piece}}]}}]})
            .to_string(),
        );
    }
    out.push(
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}).to_string(),
    );
    out.push(
        json!({"choices": [], "usage": {"prompt_tokens": 900, "completion_tokens": 200}})
            .to_string(),
    );
    out.push("[DONE]".into());
    out
}

fn anthropic_events() -> Vec<String> {
    let mut out = vec![
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 900, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ];
    out.extend((0..150).map(|i| {
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": format!("word{i} ")}})
    }));
    out.push(json!({"type": "content_block_stop", "index": 0}));
    out.push(json!({"type": "content_block_start", "index": 1,
        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "write_file", "input": {}}}));
    let args = format!(
        r#"{{"path":"src/main.rs","content":"{}"}}"#,
        "x".repeat(400)
    );
    for piece in args.as_bytes().chunks(args.len().div_ceil(40)) {
        let piece = String::from_utf8_lossy(piece);
        out.push(json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": piece}}));
    }
    out.push(json!({"type": "content_block_stop", "index": 1}));
    out.push(json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 200}}));
    out.push(json!({"type": "message_stop"}));
    out.into_iter().map(|v| v.to_string()).collect()
}

/// Number of calls parsed from a whole OpenAI stream (0 on error).
fn parse_openai(chunks: &[String]) -> usize {
    let mut acc = openai::StreamAccumulator::new();
    for ch in chunks {
        if acc.push(ch).is_err() {
            return 0;
        }
    }
    acc.finish().map_or(0, |r| r.tool_calls.len())
}

fn parse_anthropic(events: &[String]) -> usize {
    let mut acc = anthropic::StreamAccumulator::new();
    for ev in events {
        if acc.push(ev).is_err() {
            return 0;
        }
    }
    acc.finish().map_or(0, |r| r.tool_calls.len())
}

fn bench_stream(c: &mut Criterion) {
    let mut group = c.benchmark_group("parse_stream");
    let chunks = openai_chunks();
    // Guard against benchmarking a fixture that fails early.
    assert_eq!(parse_openai(&chunks), 1, "fixture must parse to one call");
    group.bench_function(format!("openai_{}_chunks", chunks.len()), |b| {
        b.iter(|| black_box(parse_openai(&chunks)))
    });
    let events = anthropic_events();
    assert_eq!(
        parse_anthropic(&events),
        1,
        "fixture must parse to one call"
    );
    group.bench_function(format!("anthropic_{}_events", events.len()), |b| {
        b.iter(|| black_box(parse_anthropic(&events)))
    });
    group.finish();
}

criterion_group!(benches, bench_build, bench_stream);
criterion_main!(benches);
