//! Renders scripted turns as real OpenAI / Anthropic responses.

use super::prompt_cache::CacheUsage;
use super::{Call, Turn, Variant, Wire};
use serde_json::{json, Value};
use wiremock::ResponseTemplate;

pub fn render(variant: Variant, turn: &Turn, usage: CacheUsage) -> ResponseTemplate {
    match turn {
        Turn::Delayed { delay, turn } => render(variant, turn, usage).set_delay(*delay),
        Turn::Status { code, retry_after } => {
            let mut t = ResponseTemplate::new(*code)
                .set_body_json(json!({"error": {"message": format!("scripted status {code}"), "type": "server_error"}}));
            if let Some(secs) = retry_after {
                t = t.insert_header("retry-after", *secs);
            }
            t
        }
        Turn::ErrorBody { code, body } => {
            ResponseTemplate::new(*code).set_body_raw(body.clone().into_bytes(), "application/json")
        }
        Turn::Reply {
            text,
            calls,
            finish,
        } => {
            let finish = finish
                .map(str::to_string)
                .unwrap_or_else(|| default_finish(variant.wire, calls));
            match (variant.wire, variant.stream) {
                (Wire::OpenAi, false) => ResponseTemplate::new(200)
                    .set_body_json(openai_body(text, calls, &finish, usage)),
                (Wire::OpenAi, true) => sse(openai_chunks(text, calls, &finish, true, usage)),
                (Wire::Anthropic, false) => ResponseTemplate::new(200)
                    .set_body_json(anthropic_body(text, calls, &finish, usage)),
                (Wire::Anthropic, true) => sse(anthropic_events(text, calls, &finish, true, usage)),
            }
        }
        Turn::BrokenStream { text, calls } => match variant.wire {
            Wire::OpenAi => sse(openai_chunks(text, calls, "tool_calls", false, usage)),
            Wire::Anthropic => sse(anthropic_events(text, calls, "tool_use", false, usage)),
        },
    }
}

fn default_finish(wire: Wire, calls: &[Call]) -> String {
    match (wire, calls.is_empty()) {
        (Wire::OpenAi, true) => "stop",
        (Wire::OpenAi, false) => "tool_calls",
        (Wire::Anthropic, true) => "end_turn",
        (Wire::Anthropic, false) => "tool_use",
    }
    .into()
}

fn sse(events: Vec<String>) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(events.concat(), "text/event-stream")
}

/// Usage as OpenAI reports it.
fn openai_usage(u: CacheUsage) -> Value {
    json!({"prompt_tokens": u.input, "completion_tokens": 7, "total_tokens": u.input + 7,
           "prompt_tokens_details": {"cached_tokens": u.read}})
}

/// Usage as Anthropic reports it: `input_tokens` is the uncached part.
fn anthropic_usage(u: CacheUsage, output: u64) -> Value {
    json!({"input_tokens": u.input.saturating_sub(u.read + u.written), "output_tokens": output,
           "cache_read_input_tokens": u.read, "cache_creation_input_tokens": u.written})
}

fn openai_body(text: &str, calls: &[Call], finish: &str, usage: CacheUsage) -> Value {
    let mut message = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
    if !calls.is_empty() {
        message["tool_calls"] = calls
            .iter()
            .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
            .collect();
    }
    json!({
        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": "test-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": openai_usage(usage)
    })
}

fn split_half(s: &str) -> (&str, &str) {
    let mut mid = s.len() / 2;
    while !s.is_char_boundary(mid) {
        mid += 1;
    }
    s.split_at(mid)
}

fn openai_chunks(
    text: &str,
    calls: &[Call],
    finish: &str,
    terminate: bool,
    usage: CacheUsage,
) -> Vec<String> {
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0, "model": "test-model",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let mut out = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    if !text.is_empty() {
        let (a, b) = split_half(text);
        out.push(chunk(json!({"content": a}), Value::Null));
        out.push(chunk(json!({"content": b}), Value::Null));
    }
    for (i, c) in calls.iter().enumerate() {
        out.push(chunk(
            json!({"tool_calls": [{"index": i, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}}]}),
            Value::Null,
        ));
        let (a, b) = split_half(&c.arguments);
        for part in [a, b] {
            out.push(chunk(
                json!({"tool_calls": [{"index": i, "function": {"arguments": part}}]}),
                Value::Null,
            ));
        }
    }
    if !terminate {
        return out;
    }
    out.push(chunk(json!({}), json!(finish)));
    out.push(format!(
        "data: {}\n\n",
        json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "choices": [],
               "usage": openai_usage(usage)})
    ));
    out.push("data: [DONE]\n\n".into());
    out
}

fn tool_input(arguments: &str) -> Value {
    serde_json::from_str(arguments).expect("Anthropic non-streamed tool input must be JSON")
}

fn anthropic_body(text: &str, calls: &[Call], finish: &str, usage: CacheUsage) -> Value {
    let mut content = Vec::new();
    if !text.is_empty() {
        content.push(json!({"type": "text", "text": text}));
    }
    for c in calls {
        content.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": tool_input(&c.arguments)}));
    }
    json!({
        "id": "msg_test", "type": "message", "role": "assistant", "model": "test-model",
        "content": content, "stop_reason": finish, "stop_sequence": null,
        "usage": anthropic_usage(usage, 7)
    })
}

fn anthropic_events(
    text: &str,
    calls: &[Call],
    finish: &str,
    terminate: bool,
    usage: CacheUsage,
) -> Vec<String> {
    let ev = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut out = vec![ev(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_test", "type": "message", "role": "assistant",
               "model": "test-model", "content": [], "stop_reason": null, "usage": anthropic_usage(usage, 1)}}),
    )];
    let mut index = 0;
    if !text.is_empty() {
        out.push(ev("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})));
        let (a, b) = split_half(text);
        for part in [a, b] {
            out.push(ev("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": part}})));
        }
        out.push(ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    out.push(ev("ping", json!({"type": "ping"})));
    for c in calls {
        out.push(ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": c.id, "name": c.name, "input": {}}}),
        ));
        let (a, b) = split_half(&c.arguments);
        for part in [a, b] {
            out.push(ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": part}}),
            ));
        }
        if !terminate {
            return out;
        }
        out.push(ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    if !terminate {
        return out;
    }
    out.push(ev(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": finish, "stop_sequence": null}, "usage": {"output_tokens": 7}}),
    ));
    out.push(ev("message_stop", json!({"type": "message_stop"})));
    out
}
