//! Scratch: per-step forward timing.
use attest_local::model::{GgufFile, Model};
use std::time::Instant;
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = std::path::Path::new(&args[1]);
    let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(40);
    let mut g = GgufFile::open(path)?;
    let mut m = Model::load(&mut g, path, Some(4096))?;
    let prompt: Vec<u32> = (0..64).map(|i| 100 + i).collect();
    let t = Instant::now();
    m.forward(&prompt, 0)?;
    eprintln!("prefill 64: {:?}", t.elapsed());
    let t = Instant::now();
    m.forward(&prompt, 0)?;
    eprintln!("prefill 64 again: {:?}", t.elapsed());
    let mut pos = 64;
    for i in 0..n {
        let t = Instant::now();
        m.forward(&[200 + i as u32], pos)?;
        pos += 1;
        if i < 5 || i % 10 == 0 { eprintln!("step {i}: {:?}", t.elapsed()); }
    }
    let mut f = std::fs::File::open(path)?;
    let ct = candle_core::quantized::gguf_file::Content::read(&mut f)?;
    let arch = g.meta_str("general.architecture").unwrap().to_string();
    let dev = candle_core::Device::Cpu;
    let input = candle_core::Tensor::new(prompt.as_slice(), &dev)?.unsqueeze(0)?;
    if arch == "llama" {
        let mut s = candle_transformers::models::quantized_llama::ModelWeights::from_gguf(ct, &mut f, &dev)?;
        let t = Instant::now(); s.forward(&input, 0)?; eprintln!("stock prefill 64: {:?}", t.elapsed());
        let t = Instant::now(); s.forward(&input, 0)?; eprintln!("stock prefill 64 again: {:?}", t.elapsed());
        for i in 0..n { let t = Instant::now(); s.forward(&candle_core::Tensor::new(&[200 + i as u32], &dev)?.unsqueeze(0)?, 64 + i)?; if i < 5 || i % 10 == 0 { eprintln!("stock step {i}: {:?}", t.elapsed()); } }
    } else {
        let mut s = candle_transformers::models::quantized_qwen2::ModelWeights::from_gguf(ct, &mut f, &dev)?;
        let t = Instant::now(); s.forward(&input, 0)?; eprintln!("stock prefill 64: {:?}", t.elapsed());
        let t = Instant::now(); s.forward(&input, 0)?; eprintln!("stock prefill 64 again: {:?}", t.elapsed());
        for i in 0..n { let t = Instant::now(); s.forward(&candle_core::Tensor::new(&[200 + i as u32], &dev)?.unsqueeze(0)?, 64 + i)?; if i < 5 || i % 10 == 0 { eprintln!("stock step {i}: {:?}", t.elapsed()); } }
    }
    Ok(())
}

#[allow(dead_code)]
fn unused() {}
