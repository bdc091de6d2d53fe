//! Scratch: compare our logits with candle-transformers' stock model.
use attest_local::model::{GgufFile, Model};
use attest_local::tokenizer::GgufTokenizer;
use candle_core::{Device, Tensor};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = std::path::Path::new(&args[1]);
    let text = args.get(2).cloned().unwrap_or("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n".into());
    let mut g = GgufFile::open(path)?;
    let tok = GgufTokenizer::from_gguf(&g)?;
    let ids = tok.encode(&text)?;
    println!("ids {:?}", &ids);
    let arch = g.meta_str("general.architecture").unwrap().to_string();
    let mut ours = Model::load(&mut g, path, Some(4096))?;
    let a = ours.forward(&ids, 0)?;
    let mut f = std::fs::File::open(path)?;
    let ct = candle_core::quantized::gguf_file::Content::read(&mut f)?;
    let input = Tensor::new(ids.as_slice(), &Device::Cpu)?.unsqueeze(0)?;
    let b: Vec<f32> = if arch == "llama" {
        let mut m = candle_transformers::models::quantized_llama::ModelWeights::from_gguf(ct, &mut f, &Device::Cpu)?;
        m.forward(&input, 0)?.flatten_all()?.to_vec1()?
    } else {
        let mut m = candle_transformers::models::quantized_qwen2::ModelWeights::from_gguf(ct, &mut f, &Device::Cpu)?;
        m.forward(&input, 0)?.flatten_all()?.to_vec1()?
    };
    let n: usize = std::env::var("GREEDY").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    if n > 0 {
        let argmax = |v: &[f32]| v.iter().enumerate().fold((0usize, f32::MIN), |x, (i, &v)| if v > x.1 { (i, v) } else { x }).0 as u32;
        let mut ours_ids = vec![argmax(&a)];
        let mut pos = ids.len();
        for _ in 1..n { let l = ours.forward(&[*ours_ids.last().unwrap()], pos)?; pos += 1; ours_ids.push(argmax(&l)); }
        let mut f2 = std::fs::File::open(path)?;
        let ct2 = candle_core::quantized::gguf_file::Content::read(&mut f2)?;
        let mut stock_ids = vec![];
        if arch == "llama" {
            let mut m = candle_transformers::models::quantized_llama::ModelWeights::from_gguf(ct2, &mut f2, &Device::Cpu)?;
            let mut l = m.forward(&input, 0)?.flatten_all()?.to_vec1::<f32>()?;
            let mut pos = ids.len();
            for _ in 0..n { let t = argmax(&l); stock_ids.push(t); l = m.forward(&Tensor::new(&[t], &Device::Cpu)?.unsqueeze(0)?, pos)?.flatten_all()?.to_vec1()?; pos += 1; }
        } else {
            let mut m = candle_transformers::models::quantized_qwen2::ModelWeights::from_gguf(ct2, &mut f2, &Device::Cpu)?;
            let mut l = m.forward(&input, 0)?.flatten_all()?.to_vec1::<f32>()?;
            let mut pos = ids.len();
            for _ in 0..n { let t = argmax(&l); stock_ids.push(t); l = m.forward(&Tensor::new(&[t], &Device::Cpu)?.unsqueeze(0)?, pos)?.flatten_all()?.to_vec1()?; pos += 1; }
        }
        println!("ours : {:?}", tok.decode(&ours_ids)?);
        println!("stock: {:?}", tok.decode(&stock_ids)?);
    }
    let am = a.iter().enumerate().fold((0, f32::MIN), |x, (i, &v)| if v > x.1 { (i, v) } else { x });
    let bm = b.iter().enumerate().fold((0, f32::MIN), |x, (i, &v)| if v > x.1 { (i, v) } else { x });
    let maxdiff = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    println!("ours argmax {:?} {:?}; stock argmax {:?} {:?}; max |diff| {maxdiff}", am, tok.decode(&[am.0 as u32])?, bm, tok.decode(&[bm.0 as u32])?);
    Ok(())
}
