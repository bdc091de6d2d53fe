//! The chat template from the GGUF (`tokenizer.chat_template`), rendered
//! with minijinja the way Hugging Face renders it (trim/lstrip blocks,
//! Python-style `tojson`, Python string methods, `raise_exception`).
//!
//! SPEC D7: what the template can express is detected, not assumed. A
//! template that takes `tools` gets them (Qwen2.5 renders its own `<tools>`
//! block and `<tool_call>` instructions); one that does not gets a tools
//! block in the system message instead, written here. Likewise assistant
//! tool calls and `tool` messages are rendered as `<tool_call>` /
//! `<tool_response>` text when the template has no place for them.

use crate::error::{LocalError, Result};
use attest_protocol::ToolSpec;
use minijinja::value::{Serde, Value, ValueKind};
use minijinja::{Environment, Error as JinjaError, ErrorKind};
use std::fmt::Write as _;

/// ChatML, for models whose GGUF carries no template.
const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// What a template can render natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TemplateCaps {
    /// Reads the `tools` variable.
    pub tools: bool,
    /// Renders `message.tool_calls` of assistant messages.
    pub tool_calls: bool,
    /// Renders messages of role `tool`.
    pub tool_role: bool,
}

/// One message as templates expect it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    /// Assistant tool calls: name and arguments (a JSON value; invalid JSON
    /// from the model is kept as a string).
    pub tool_calls: Vec<(String, serde_json::Value)>,
    /// For `tool` messages: the tool's name.
    pub name: Option<String>,
}

impl ChatMessage {
    pub fn new(role: &str, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.to_string(),
            content: content.into(),
            tool_calls: Vec::new(),
            name: None,
        }
    }
}

pub struct ChatTemplate {
    env: Environment<'static>,
    caps: TemplateCaps,
    bos: String,
    eos: String,
    /// Whether the template came from the model (false: built-in ChatML).
    pub from_model: bool,
}

impl ChatTemplate {
    /// `source` is `tokenizer.chat_template`; `None` falls back to ChatML.
    pub fn new(source: Option<&str>, bos: Option<&str>, eos: Option<&str>) -> Result<ChatTemplate> {
        let from_model = source.is_some();
        let source = source.unwrap_or(CHATML).to_string();
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| LocalError::Template(e.to_string()))?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<Value, JinjaError> {
                Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
            },
        );
        let caps = {
            let probe = env.template_from_str(&source).map_err(|e| {
                LocalError::Template(format!("the model's chat template does not parse: {e}"))
            })?;
            let vars = probe.undeclared_variables(false);
            TemplateCaps {
                tools: vars.contains("tools"),
                tool_calls: source.contains("tool_calls"),
                tool_role: source.contains("\"tool\"") || source.contains("'tool'"),
            }
        };
        env.add_template_owned("chat", source)
            .map_err(|e| LocalError::Template(e.to_string()))?;
        Ok(ChatTemplate {
            env,
            caps,
            bos: bos.unwrap_or_default().to_string(),
            eos: eos.unwrap_or_default().to_string(),
            from_model,
        })
    }

    pub fn caps(&self) -> TemplateCaps {
        self.caps
    }

    /// The prompt text for `messages` (the first may be a system message),
    /// ending with the generation prompt.
    pub fn render(&self, messages: &[ChatMessage], tools: &[ToolSpec]) -> Result<String> {
        let ctx = self.context(messages, tools);
        let tmpl = self
            .env
            .get_template("chat")
            .map_err(|e| LocalError::Template(e.to_string()))?;
        tmpl.render(ctx)
            .map_err(|e| LocalError::Template(format!("rendering the chat template failed: {e:#}")))
    }

    /// The variables the template is rendered with (`messages`, `tools`,
    /// `add_generation_prompt`, `bos_token`, `eos_token`), after what the
    /// template cannot express was rewritten as text.
    pub fn context(&self, messages: &[ChatMessage], tools: &[ToolSpec]) -> Value {
        let mut messages = messages.to_vec();
        let native_tools = self.caps.tools && !tools.is_empty();
        if !tools.is_empty() && !native_tools {
            let block = tools_block(tools);
            match messages.first_mut() {
                Some(m) if m.role == "system" => {
                    if !m.content.is_empty() {
                        m.content.push_str("\n\n");
                    }
                    m.content.push_str(&block);
                }
                _ => messages.insert(0, ChatMessage::new("system", block)),
            }
        }
        let messages = self.adapt(messages);
        let msgs: Vec<Value> = messages.iter().map(message_value).collect();
        let tool_values: Option<Vec<Value>> =
            native_tools.then(|| tools.iter().map(tool_value).collect());
        minijinja::context! {
            messages => msgs,
            tools => tool_values,
            add_generation_prompt => true,
            bos_token => self.bos.clone(),
            eos_token => self.eos.clone(),
        }
    }

    /// Rewrite what the template cannot express into text it can.
    fn adapt(&self, messages: Vec<ChatMessage>) -> Vec<ChatMessage> {
        let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len());
        for mut m in messages {
            if m.role == "assistant" && !m.tool_calls.is_empty() && !self.caps.tool_calls {
                for (name, args) in m.tool_calls.drain(..) {
                    if !m.content.is_empty() {
                        m.content.push('\n');
                    }
                    let _ = write!(
                        m.content,
                        "<tool_call>\n{}\n</tool_call>",
                        call_json(&name, &args)
                    );
                }
            }
            if m.role == "tool" && !self.caps.tool_role {
                let text = format!("<tool_response>\n{}\n</tool_response>", m.content);
                // Consecutive results share one user turn, as Qwen renders them.
                match out.last_mut() {
                    Some(prev)
                        if prev.role == "user" && prev.content.ends_with("</tool_response>") =>
                    {
                        prev.content.push('\n');
                        prev.content.push_str(&text);
                    }
                    _ => out.push(ChatMessage::new("user", text)),
                }
                continue;
            }
            out.push(m);
        }
        out
    }
}

/// `{"name": …, "arguments": …}` as a model writes it.
fn call_json(name: &str, args: &serde_json::Value) -> String {
    let mut s = String::from("{\"name\": ");
    py_json_serde(&mut s, &serde_json::Value::String(name.to_string()));
    s.push_str(", \"arguments\": ");
    py_json_serde(&mut s, args);
    s.push('}');
    s
}

/// The tools block for templates that do not render tools themselves: the
/// Hermes format (the one the parser reads best).
pub fn tools_block(tools: &[ToolSpec]) -> String {
    let mut s = String::from(
        "# Tools\n\nYou can call these functions. Their signatures are inside <tools></tools>:\n<tools>",
    );
    for t in tools {
        s.push('\n');
        s.push_str(&tojson_string(&tool_value(t)));
    }
    s.push_str(
        "\n</tools>\n\nTo call a function, reply with one JSON object naming it and giving its arguments, inside <tool_call></tool_call> tags, like this:\n<tool_call>\n{\"name\": \"the function's name\", \"arguments\": {\"the argument\": \"its value\"}}\n</tool_call>",
    );
    s
}

/// `{"type": "function", "function": {"name", "description", "parameters"}}`
/// in this key order (as Hugging Face passes tools to templates).
fn tool_value(t: &ToolSpec) -> Value {
    let function = Value::from_pairs([
        ("name", Value::from(t.name.clone())),
        ("description", Value::from(t.description.clone())),
        ("parameters", Value::from(Serde(&t.parameters))),
    ]);
    Value::from_pairs([("type", Value::from("function")), ("function", function)])
}

fn message_value(m: &ChatMessage) -> Value {
    let mut pairs: Vec<(&str, Value)> = vec![
        ("role", Value::from(m.role.clone())),
        ("content", Value::from(m.content.clone())),
    ];
    if !m.tool_calls.is_empty() {
        let calls: Vec<Value> = m
            .tool_calls
            .iter()
            .map(|(name, args)| {
                let function = Value::from_pairs([
                    ("name", Value::from(name.clone())),
                    ("arguments", Value::from(Serde(args))),
                ]);
                Value::from_pairs([("type", Value::from("function")), ("function", function)])
            })
            .collect();
        pairs.push(("tool_calls", Value::from(calls)));
    }
    if let Some(name) = &m.name {
        pairs.push(("name", Value::from(name.clone())));
    }
    Value::from_pairs(pairs)
}

/// `tojson` as Hugging Face defines it for chat templates: Python's
/// `json.dumps(x, ensure_ascii=False)` (separators `", "` and `": "`, key
/// order kept). `indent` is accepted and ignored.
fn tojson(
    value: Value,
    _kwargs: minijinja::value::Kwargs,
) -> std::result::Result<Value, JinjaError> {
    Ok(Value::from_safe_string(tojson_string(&value)))
}

fn tojson_string(value: &Value) -> String {
    let mut out = String::new();
    py_json(&mut out, value);
    out
}

fn py_json(out: &mut String, v: &Value) {
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => match (v.as_i64(), f64::try_from(v.clone())) {
            (Some(i), _) if !v.to_string().contains(['.', 'e', 'E']) => {
                let _ = write!(out, "{i}");
            }
            (_, Ok(f)) => py_float(out, f),
            _ => out.push_str(&v.to_string()),
        },
        ValueKind::String => push_json_str(out, v.as_str().unwrap_or_default()),
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            if let Ok(iter) = v.try_iter() {
                for (i, item) in iter.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    py_json(out, &item);
                }
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            if let Ok(keys) = v.try_iter() {
                for (i, key) in keys.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    push_json_str(out, &key.to_string());
                    out.push_str(": ");
                    py_json(out, &v.get_item(&key).unwrap_or_default());
                }
            }
            out.push('}');
        }
        _ => push_json_str(out, &v.to_string()),
    }
}

/// The same for serde values (assistant tool-call arguments rendered as text).
fn py_json_serde(out: &mut String, v: &serde_json::Value) {
    py_json(out, &Value::from(Serde(v)));
}

fn py_float(out: &mut String, f: f64) {
    if !f.is_finite() {
        out.push_str(if f.is_nan() {
            "NaN"
        } else if f > 0.0 {
            "Infinity"
        } else {
            "-Infinity"
        });
    } else if f == f.trunc() && f.abs() < 1e16 {
        let _ = write!(out, "{f:.1}");
    } else {
        let _ = write!(out, "{f}");
    }
}

fn push_json_str(out: &mut String, s: &str) {
    // serde_json escapes exactly what json.dumps(ensure_ascii=False) does.
    out.push_str(&serde_json::Value::String(s.to_string()).to_string());
}

#[cfg(test)]
mod tests {
    use super::*;
    use attest_protocol::EffectClass;
    use serde_json::json;

    fn read_file() -> ToolSpec {
        ToolSpec {
            name: "read_file".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
            effect: EffectClass::Observe,
        }
    }

    #[test]
    fn tojson_is_python_style_and_keeps_key_order() {
        let v = tool_value(&read_file());
        let s = tojson_string(&v);
        assert!(s.starts_with("{\"type\": \"function\", \"function\": {\"name\": \"read_file\", \"description\": \"Read a file\", \"parameters\": {"), "{s}");
        assert!(s.contains("\"required\": [\"path\"]"), "{s}");
        assert_eq!(
            tojson_string(&Value::from(Serde(
                json!({"a": 1.5, "b": "é\n", "c": null, "d": true})
            ))),
            "{\"a\": 1.5, \"b\": \"é\\n\", \"c\": null, \"d\": true}"
        );
    }

    #[test]
    fn chatml_fallback_puts_tools_into_the_system_message() {
        let t = ChatTemplate::new(None, None, None).unwrap();
        assert_eq!(
            t.caps(),
            TemplateCaps {
                tools: false,
                tool_calls: false,
                tool_role: false
            }
        );
        let mut asst = ChatMessage::new("assistant", "");
        asst.tool_calls
            .push(("read_file".into(), json!({"path": "a"})));
        let tool = ChatMessage {
            name: Some("read_file".into()),
            ..ChatMessage::new("tool", "hello")
        };
        let out = t
            .render(
                &[
                    ChatMessage::new("system", "Be brief."),
                    ChatMessage::new("user", "Read a"),
                    asst,
                    tool,
                ],
                &[read_file()],
            )
            .unwrap();
        assert!(
            out.starts_with("<|im_start|>system\nBe brief.\n\n# Tools\n"),
            "{out}"
        );
        assert!(out.contains("<|im_start|>assistant\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}\n</tool_call><|im_end|>"), "{out}");
        assert!(
            out.contains("<|im_start|>user\n<tool_response>\nhello\n</tool_response><|im_end|>"),
            "{out}"
        );
        assert!(out.ends_with("<|im_start|>assistant\n"), "{out}");
    }

    #[test]
    fn template_errors_are_errors() {
        assert!(ChatTemplate::new(Some("{% for %}"), None, None).is_err());
        let t =
            ChatTemplate::new(Some("{{ raise_exception('no system role') }}"), None, None).unwrap();
        let e = t.render(&[ChatMessage::new("user", "x")], &[]).unwrap_err();
        assert!(e.to_string().contains("no system role"), "{e}");
    }
}
