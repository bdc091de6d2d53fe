//! Context assembly per request at 100 / 1,000 / 5,000 transcript items:
//! cross-turn history reduction, pairing normalization, the state tail and
//! the OpenAI request body — the harness's own work before each model call;
//! and the state tail one step renders.

use attest_core::session_history;
use attest_core::state::{count_tokens, render_tail, AgentState, TailBudget};
use attest_protocol::{
    AssistantPhase, EffectClass, Evidence, Receipt, ReceiptStatus, ToolSpec, TranscriptItem,
    VerificationStatus,
};
use attest_providers::{openai, pairing, ModelRequest};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

fn receipt(i: usize) -> Receipt {
    let now = chrono::Utc::now();
    Receipt {
        call_id: format!("c{i}"),
        tool_name: "read_file".into(),
        effect: EffectClass::Observe,
        status: ReceiptStatus::Ok,
        started_at: now,
        finished_at: now,
        input_fingerprint: format!("{i:064}"),
        evidence: Evidence {
            path: Some(format!("src/file_{i}.rs")),
            sha256: Some("ab".repeat(32)),
            size_bytes: Some(1200),
            ..Evidence::default()
        },
        verification_status: VerificationStatus::Verified,
        error: None,
    }
}

/// `n` items: a user turn every 20 items, else commentary + call + result.
fn transcript(n: usize) -> Vec<TranscriptItem> {
    let mut items = Vec::with_capacity(n);
    let mut i = 0;
    while items.len() < n {
        if i % 7 == 0 {
            items.push(TranscriptItem::UserInput {
                text: format!("Question {i}: what does file {i} do?"),
            });
        }
        items.push(TranscriptItem::AssistantOutput {
            text: "Let me read it.".into(),
            reasoning: None,
            encrypted_reasoning: Vec::new(),
            phase: AssistantPhase::Commentary,
        });
        items.push(TranscriptItem::ToolCall {
            call_id: format!("c{i}"),
            name: "read_file".into(),
            arguments: format!(r#"{{"path":"src/file_{i}.rs"}}"#),
        });
        items.push(TranscriptItem::ToolResult {
            call_id: format!("c{i}"),
            name: "read_file".into(),
            status: ReceiptStatus::Ok,
            output: "fn main() { println!(\"hello\"); }\n".repeat(30),
            receipt: Some(Box::new(receipt(i))),
        });
        i += 1;
    }
    items.truncate(n);
    items
}

fn tools() -> Vec<ToolSpec> {
    (0..6)
        .map(|i| ToolSpec {
            name: format!("tool_{i}"),
            description: "A tool with a short description.".into(),
            parameters: serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
            effect: EffectClass::Observe,
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("context_assembly");
    let tools = tools();
    for n in [100usize, 1_000, 5_000] {
        let items = transcript(n);
        let mut state = AgentState::with_goal("Explain the project", "user_input");
        for item in &items {
            if let TranscriptItem::ToolResult {
                receipt: Some(r), ..
            } = item
            {
                state.on_receipt(r, "{}", true);
            }
        }
        group.bench_with_input(BenchmarkId::from_parameter(n), &items, |b, items| {
            b.iter(|| {
                let history = session_history(std::slice::from_ref(items));
                let mut normalized = pairing::normalize(&history);
                let tail = render_tail(&state, &TailBudget::default());
                normalized.items.push(TranscriptItem::HarnessMessage {
                    kind: attest_protocol::HarnessMessageKind::StateSnapshot,
                    text: tail.text,
                });
                let request = ModelRequest {
                    system: "system".into(),
                    tools: tools.clone().into(),
                    history: attest_core::provider::shared_history(normalized.items),
                    stream: true,
                    max_tokens: 4096,
                    temperature: None,
                    seed: None,
                    stop: Vec::new(),
                    cache_key: None,
                };
                openai::body_json(&request, "m").len()
            })
        });
    }
    group.finish();
}

/// Token accounting per step (SPEC D6, P1): counting the whole history
/// again, as every step once did, against counting only the new item and
/// summing the per-item counts kept since.
fn bench_tokens(c: &mut Criterion) {
    let mut group = c.benchmark_group("token_accounting");
    for n in [10usize, 100, 500, 5_000] {
        let items = transcript(n);
        let counts: Vec<usize> = items
            .iter()
            .map(|i| count_tokens(&serde_json::to_string(i).unwrap()))
            .collect();
        let newest = items.last().unwrap().clone();
        group.bench_with_input(BenchmarkId::new("whole_history", n), &items, |b, items| {
            b.iter(|| count_tokens(&serde_json::to_string(items).unwrap()))
        });
        group.bench_with_input(
            BenchmarkId::new("per_item_cached", n),
            &counts,
            |b, counts| {
                b.iter(|| {
                    count_tokens(&serde_json::to_string(&newest).unwrap())
                        + counts.iter().sum::<usize>()
                })
            },
        );
    }
    group.finish();
}

/// The state tail each step renders (SPEC E3), from a state of `facts`
/// confirmed facts: one more receipt, then the render. Up to 20 facts the
/// tail grows with each; past that it shows the newest 20 and counts the
/// rest. (At 500 the figure includes a copy a run does not make: the
/// cloned state's item list is full, so the new fact reallocates it.)
fn bench_tail(c: &mut Criterion) {
    let mut group = c.benchmark_group("tail_per_step");
    for facts in [5usize, 20, 500] {
        let mut state = AgentState::with_goal("Explain the project", "user_input");
        for i in 0..facts {
            state.on_receipt(&receipt(i), "\"src/file.rs\"", true);
        }
        // A receipt no iteration saw before: its fact line (and the count
        // of those left out) are new text to tokenize, as in a run.
        let mut next = 1_000_000;
        group.bench_function(BenchmarkId::from_parameter(facts), |b| {
            b.iter_batched_ref(
                || {
                    next += 1;
                    (state.clone(), receipt(next))
                },
                |(state, receipt)| {
                    state.on_receipt(receipt, "\"src/file.rs\"", true);
                    render_tail(state, &TailBudget::default()).tokens
                },
                criterion::BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, bench, bench_tokens, bench_tail);
criterion_main!(benches);
