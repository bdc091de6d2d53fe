//! Compare the GGUF tokenizer with reference ids: `tokcheck MODEL.gguf REF.json`
//! where REF.json is `[[text, [ids…]], …]` (e.g. from llama.cpp).
use attest_local::model::GgufFile;
use attest_local::tokenizer::GgufTokenizer;
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let g = GgufFile::open(args[1].as_ref())?;
    let tok = GgufTokenizer::from_gguf(&g)?;
    let refs: Vec<(String, Vec<u32>)> = serde_json::from_str(&std::fs::read_to_string(&args[2])?)?;
    let mut same = 0;
    for (text, want) in &refs {
        let got = tok.encode(text)?;
        if &got == want {
            same += 1;
        } else {
            println!("DIFF {text:?}\n  ours {got:?}\n  ref  {want:?}");
        }
        let back = tok.decode(&got)?;
        if &back != text {
            println!("ROUNDTRIP {text:?} -> {back:?}");
        }
    }
    println!("{same} of {} match", refs.len());
    Ok(())
}
