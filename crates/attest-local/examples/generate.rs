//! `cargo run --release -p attest-local --example generate -- MODEL.gguf "prompt" [max_new]`:
//! one chat turn, greedy, with timing.
use attest_local::template::ChatMessage;
use attest_local::{GenerateParams, LoadOptions, LocalModel};
use std::sync::atomic::AtomicBool;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: generate MODEL.gguf PROMPT [MAX_NEW]")?;
    let prompt = args.get(2).cloned().unwrap_or_else(|| "Say hello.".into());
    let max_new: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(64);
    let mut m = LocalModel::load(path.as_ref(), &LoadOptions::default())?;
    eprintln!("loaded {} in {:?}: {:?}", m.name, m.load_time, m.config());
    let text = match prompt.strip_prefix("RAW:") {
        Some(raw) => raw.to_string(),
        None => m.render(&[ChatMessage::new("user", prompt)], &[])?,
    };
    let ids = m.tokenize(&text)?;
    eprintln!("prompt: {} tokens {:?}\n{:?}", ids.len(), text, ids);
    let g = m.generate(
        &ids,
        &GenerateParams {
            max_new_tokens: max_new,
            ..Default::default()
        },
        &mut |t| eprint!("{t}"),
        &AtomicBool::new(false),
    )?;
    eprintln!();
    println!("{}", g.text);
    eprintln!(
        "finish {:?}; load {:.3} s; prompt {} tok in {:?} ({:.1} tok/s); gen {} tok in {:?} ({:.1} tok/s)",
        g.finish,
        m.load_time.as_secs_f64(),
        g.evaluated_tokens,
        g.prompt_time,
        g.prompt_tps(),
        g.generated_tokens,
        g.generation_time,
        g.generation_tps()
    );
    Ok(())
}
