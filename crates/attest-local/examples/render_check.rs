//! Scratch: our rendering of a multi-turn conversation with tools, and the
//! template context as JSON (to render with Python's jinja2 for comparison).
//! `render_check MODEL.gguf OUT_PREFIX`
use attest_local::model::GgufFile;
use attest_local::template::{ChatMessage, ChatTemplate};
use serde_json::json;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let g = GgufFile::open(args[1].as_ref()).unwrap();
    let t = ChatTemplate::new(g.meta_str("tokenizer.chat_template"), None, None).unwrap();
    let tools: Vec<_> = attest_tools::builtin_tools(None)
        .iter()
        .map(|t| t.spec().clone())
        .collect();
    let mut call = ChatMessage::new("assistant", "Let me read it.");
    call.tool_calls
        .push(("read_file".into(), json!({"path": "Cargo.toml"})));
    call.tool_calls
        .push(("grep".into(), json!({"pattern": "name", "path": "."})));
    let mut r1 = ChatMessage::new("tool", "[package]\nname = \"demo\"");
    r1.name = Some("read_file".into());
    let mut r2 = ChatMessage::new("tool", "Cargo.toml:2:name = \"demo\"");
    r2.name = Some("grep".into());
    let msgs = vec![
        ChatMessage::new("system", "You are an agent. Café ☕."),
        ChatMessage::new("user", "What is the package called?"),
        call,
        r1,
        r2,
        ChatMessage::new("assistant", "It is called demo."),
        ChatMessage::new("user", "Thanks"),
    ];
    std::fs::write(
        format!("{}.ours.txt", args[2]),
        t.render(&msgs, &tools).unwrap(),
    )
    .unwrap();
    std::fs::write(
        format!("{}.ctx.json", args[2]),
        serde_json::to_string(&t.context(&msgs, &tools)).unwrap(),
    )
    .unwrap();
}
