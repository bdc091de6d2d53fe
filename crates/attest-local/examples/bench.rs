//! Benchmark of the embedded model through the provider: a multi-step run
//! (question → tool call → result → answer → follow-up) with prefix reuse,
//! then the last step again with the cache cleared.
//!
//! cargo run --release -p attest-local --example bench -- [MODEL.gguf|known-id] [THREADS]
use attest_local::fetch::{ensure_model, known_model, FetchOptions, QWEN25_CODER_1_5B};
use attest_local::{LocalConfig, LocalProvider};
use attest_protocol::{AssistantPhase, ReceiptStatus, TranscriptItem};
use attest_providers::{ModelProvider, ModelRequest, ModelResponse};
use std::path::PathBuf;

const SYSTEM: &str = "You are an agent working through tools that a harness executes for you.\nTool results returned by the harness are the only source of truth about files, commands and other external state. Before you say that you read or checked something, call the tool that does it and use its result. Never write tool results yourself.";

fn request(history: &[TranscriptItem]) -> ModelRequest {
    ModelRequest {
        system: std::env::var("BENCH_SYSTEM").unwrap_or_else(|_| SYSTEM.into()),
        tools: attest_tools::builtin_tools(None)
            .iter()
            .map(|t| t.spec().clone())
            .collect(),
        history: attest_core::provider::shared_history(history.to_vec()),
        stream: false,
        max_tokens: 256,
        temperature: None,
        seed: None,
        stop: vec![],
        cache_key: None,
    }
}

fn row(label: &str, p: &LocalProvider, r: &ModelResponse) {
    let g = p.last_call().expect("stats").generation;
    println!(
        "| {label} | {} | {} | {} | {:.2} | {:.1} | {} | {:.2} | {:.1} | {} |",
        g.prompt_tokens,
        g.reused_tokens,
        g.evaluated_tokens,
        g.prompt_time.as_secs_f64(),
        g.prompt_tps(),
        g.generated_tokens,
        g.generation_time.as_secs_f64(),
        g.generation_tps(),
        if let Some(v) = &r.protocol_violation {
            format!("VIOLATION {:?} {} raw={}", v.kind, v.detail, r.raw)
        } else if r.tool_calls.is_empty() {
            format!("answer: {:?}", r.text.chars().take(60).collect::<String>())
        } else {
            format!(
                "call {} {}",
                r.tool_calls[0].name, r.tool_calls[0].arguments
            )
        }
    );
}

fn add_response(history: &mut Vec<TranscriptItem>, r: &ModelResponse, file: &str) {
    let phase = if r.tool_calls.is_empty() {
        AssistantPhase::Answer
    } else {
        AssistantPhase::Commentary
    };
    history.push(TranscriptItem::AssistantOutput {
        text: r.text.clone(),
        reasoning: None,
        encrypted_reasoning: Vec::new(),
        phase,
    });
    for c in &r.tool_calls {
        history.push(TranscriptItem::ToolCall {
            call_id: c.id.clone(),
            name: c.name.clone(),
            arguments: c.arguments.clone(),
        });
    }
    for c in &r.tool_calls {
        history.push(TranscriptItem::ToolResult {
            call_id: c.id.clone(),
            name: c.name.clone(),
            status: ReceiptStatus::Ok,
            output: file.to_string(),
            receipt: None,
        });
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path: PathBuf = match args.get(1) {
        Some(a) if std::path::Path::new(a).is_file() => a.into(),
        Some(a) => ensure_model(
            known_model(a).ok_or("unknown model")?,
            &FetchOptions::from_env(&|v| std::env::var(v).ok()),
        )?,
        None => ensure_model(
            &QWEN25_CODER_1_5B,
            &FetchOptions::from_env(&|v| std::env::var(v).ok()),
        )?,
    };
    let mut cfg = LocalConfig::new(path);
    cfg.threads = args.get(2).and_then(|s| s.parse().ok());
    let p = LocalProvider::load(cfg)?;
    println!(
        "model {} loaded in {:.2} s, {} threads",
        p.model(),
        p.load_time().as_secs_f64(),
        p.threads()
    );
    println!("| step | prompt tok | reused | evaluated | prompt s | prompt tok/s | generated | gen s | gen tok/s | result |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let file = "[package]\nname = \"attest-demo\"\nversion = \"0.3.1\"\nedition = \"2021\"\n\n[dependencies]\nserde = \"1\"\n";
    let q = std::env::var("BENCH_QUESTION")
        .unwrap_or_else(|_| "Read Cargo.toml and tell me the package name.".into());
    let mut h = vec![TranscriptItem::UserInput { text: q }];
    // Warm-up: the first forward pass repacks the weights; not counted.
    let r = p.complete(&request(&h)).await?;
    row("1 (cold, incl. repack)", &p, &r);
    if std::env::var("BENCH_ONE").is_ok() {
        return Ok(());
    }
    let r = p.complete(&request(&h)).await?;
    row("1 again (cached)", &p, &r);
    add_response(&mut h, &r, file);
    let r = p.complete(&request(&h)).await?;
    row("2 (after tool result)", &p, &r);
    add_response(&mut h, &r, file);
    h.push(TranscriptItem::UserInput {
        text: "And which version is it?".into(),
    });
    let r = p.complete(&request(&h)).await?;
    row("3 (follow-up)", &p, &r);
    add_response(&mut h, &r, file);
    let r = p.complete(&request(&h)).await?;
    row("4 (after tool result)", &p, &r);
    p.clear_cache();
    let r = p.complete(&request(&h)).await?;
    row("4 again, cache cleared", &p, &r);
    Ok(())
}
