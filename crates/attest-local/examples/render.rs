//! Scratch: print the rendered prompt of the bench's first step.
use attest_local::template::ChatTemplate;
use attest_local::model::GgufFile;
use attest_protocol::TranscriptItem;
use attest_providers::ModelRequest;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let g = GgufFile::open(args[1].as_ref()).unwrap();
    let t = ChatTemplate::new(g.meta_str("tokenizer.chat_template"), None, None).unwrap();
    let req = ModelRequest { system: args.get(2).cloned().unwrap_or("You are an agent.".into()), tools: attest_tools::builtin_tools().iter().map(|t| t.spec().clone()).collect(),
        history: vec![TranscriptItem::UserInput { text: "What does Cargo.toml say this package is called?".into() }], stream: false, max_tokens: 10, temperature: None, stop: vec![] };
    print!("{}", t.render(&attest_local::provider::messages_of(&req), &req.tools).unwrap());
}
