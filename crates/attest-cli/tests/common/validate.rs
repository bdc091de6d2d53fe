//! Request validation as strict as the real services: roles, alternation,
//! and every tool call answered by exactly one result before anything else.

use super::Wire;
use serde_json::Value;
use std::collections::HashSet;

fn err<T>(msg: String) -> Result<T, String> {
    Err(msg)
}

pub fn openai_request(body: &Value, stream: bool) -> Result<(), String> {
    if body["model"].as_str().is_none() {
        return err("missing model".into());
    }
    if body["stream"].as_bool().unwrap_or(false) != stream {
        return err(format!(
            "stream flag {} but expected {stream}",
            body["stream"]
        ));
    }
    let msgs = body["messages"]
        .as_array()
        .ok_or("messages must be an array")?;
    if msgs.first().map(|m| &m["role"]) != Some(&Value::from("system")) {
        return err("first message must be the system prompt".into());
    }
    let mut seen_ids = HashSet::new();
    let mut pending: Vec<String> = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let role = m["role"]
            .as_str()
            .ok_or(format!("message {i} has no role"))?;
        if !pending.is_empty() && role != "tool" {
            return err(format!(
                "message {i} ({role}) arrives before results for calls {pending:?}"
            ));
        }
        match role {
            "system" if i == 0 => {}
            "user" => {
                if !m["content"].is_string() {
                    return err(format!("user message {i} content must be a string"));
                }
            }
            "assistant" => {
                let calls = m["tool_calls"].as_array();
                if m["content"].is_null() && calls.is_none_or(|c| c.is_empty()) {
                    return err(format!(
                        "assistant message {i} has neither content nor tool_calls"
                    ));
                }
                for c in calls.into_iter().flatten() {
                    let id = c["id"]
                        .as_str()
                        .ok_or(format!("tool call in message {i} has no id"))?;
                    if c["type"] != "function" || c["function"]["name"].as_str().is_none() {
                        return err(format!("tool call {id} malformed"));
                    }
                    if !c["function"]["arguments"].is_string() {
                        return err(format!("tool call {id} arguments must be a string"));
                    }
                    if !seen_ids.insert(id.to_string()) {
                        return err(format!("duplicate tool call id {id}"));
                    }
                    pending.push(id.to_string());
                }
            }
            "tool" => {
                let id = m["tool_call_id"]
                    .as_str()
                    .ok_or(format!("tool message {i} has no tool_call_id"))?;
                let Some(pos) = pending.iter().position(|p| p == id) else {
                    return err(format!(
                        "tool message {i} answers {id}, which is not an open call"
                    ));
                };
                pending.remove(pos);
                if !m["content"].is_string() {
                    return err(format!("tool message {i} content must be a string"));
                }
            }
            other => return err(format!("message {i} has invalid role {other}")),
        }
    }
    if !pending.is_empty() {
        return err(format!("calls {pending:?} have no results"));
    }
    if let Some(tools) = body.get("tools") {
        for t in tools.as_array().ok_or("tools must be an array")? {
            if t["type"] != "function"
                || t["function"]["name"].as_str().is_none()
                || !t["function"]["parameters"].is_object()
            {
                return err(format!("malformed tool {t}"));
            }
        }
    }
    Ok(())
}

pub fn anthropic_request(body: &Value, stream: bool) -> Result<(), String> {
    if body["model"].as_str().is_none() || body["max_tokens"].as_u64().is_none() {
        return err("model and max_tokens are required".into());
    }
    if body["stream"].as_bool().unwrap_or(false) != stream {
        return err(format!(
            "stream flag {} but expected {stream}",
            body["stream"]
        ));
    }
    let msgs = body["messages"]
        .as_array()
        .ok_or("messages must be an array")?;
    if msgs.is_empty() || msgs[0]["role"] != "user" {
        return err("messages must start with a user message".into());
    }
    let mut open: Vec<String> = Vec::new();
    let mut seen_ids = HashSet::new();
    for (i, m) in msgs.iter().enumerate() {
        let role = m["role"]
            .as_str()
            .ok_or(format!("message {i} has no role"))?;
        if i > 0 && msgs[i - 1]["role"] == m["role"] {
            return err(format!("messages {} and {i} are both {role}", i - 1));
        }
        let blocks: Vec<Value> = match &m["content"] {
            Value::String(s) => vec![serde_json::json!({"type": "text", "text": s})],
            Value::Array(a) => a.clone(),
            _ => return err(format!("message {i} content must be a string or an array")),
        };
        match role {
            "user" => {
                let mut answered = Vec::new();
                let mut seen_other = false;
                for b in &blocks {
                    if b["type"] == "tool_result" {
                        if seen_other {
                            return err(format!("message {i}: tool_result blocks must come first"));
                        }
                        answered.push(b["tool_use_id"].as_str().unwrap_or("").to_string());
                    } else {
                        seen_other = true;
                    }
                }
                let mut want = open.clone();
                want.sort();
                let mut got = answered.clone();
                got.sort();
                if want != got {
                    return err(format!(
                        "message {i} answers {answered:?} but open calls are {open:?}"
                    ));
                }
                open.clear();
            }
            "assistant" => {
                if !open.is_empty() {
                    return err(format!("assistant message {i} before results for {open:?}"));
                }
                if blocks.is_empty() {
                    return err(format!("assistant message {i} is empty"));
                }
                for b in &blocks {
                    if b["type"] == "tool_use" {
                        let id = b["id"].as_str().ok_or("tool_use without id")?;
                        if !b["input"].is_object() {
                            return err(format!("tool_use {id} input must be an object"));
                        }
                        if !seen_ids.insert(id.to_string()) {
                            return err(format!("duplicate tool_use id {id}"));
                        }
                        open.push(id.to_string());
                    }
                }
            }
            other => return err(format!("message {i} has invalid role {other}")),
        }
    }
    if !open.is_empty() {
        return err(format!("calls {open:?} have no results"));
    }
    if msgs.last().map(|m| &m["role"]) != Some(&Value::from("user")) {
        return err("the last message must be a user message".into());
    }
    let breakpoints = cache_breakpoints(body);
    if breakpoints > 4 {
        return err(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}."
        ));
    }
    Ok(())
}

/// Blocks marked with `cache_control` in an Anthropic request: tools,
/// system blocks and message blocks.
pub fn cache_breakpoints(body: &Value) -> usize {
    let marked = |v: &Value| v.get("cache_control").is_some();
    let tools = body["tools"].as_array().into_iter().flatten();
    let system = body["system"].as_array().into_iter().flatten();
    let blocks = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["content"].as_array().into_iter().flatten());
    tools
        .chain(system)
        .chain(blocks)
        .filter(|b| marked(b))
        .count()
}

/// (call id, content, is_error) of every tool result in a request.
pub fn tool_results(wire: Wire, body: &Value) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    for m in body["messages"].as_array().into_iter().flatten() {
        match wire {
            Wire::OpenAi if m["role"] == "tool" => out.push((
                m["tool_call_id"].as_str().unwrap_or("").into(),
                m["content"].as_str().unwrap_or("").into(),
                false,
            )),
            Wire::Anthropic => {
                for b in m["content"].as_array().into_iter().flatten() {
                    if b["type"] == "tool_result" {
                        let content = match &b["content"] {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        out.push((
                            b["tool_use_id"].as_str().unwrap_or("").into(),
                            content,
                            b["is_error"].as_bool().unwrap_or(false),
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    out
}
