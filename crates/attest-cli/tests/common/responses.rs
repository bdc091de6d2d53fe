//! A scripted OpenAI Responses API server on loopback (`POST /v1/responses`,
//! streaming and not). It validates every request like the real service
//! with `store: false`: calls and outputs paired by `call_id`, no item ids,
//! reasoning only as encrypted content this server issued, known item
//! types and parameters only; anything else gets a 400 and is recorded as
//! a violation.

use super::{run_binary, test_config_home, Call, RunResult, TestWorkspace};
use serde_json::{json, Value};
use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// One scripted Responses turn.
#[derive(Debug, Clone)]
pub enum RTurn {
    /// A completed response. `reasoning` becomes a reasoning item with this
    /// summary (and an encrypted blob when the request asked for one).
    Reply {
        reasoning: Option<String>,
        text: String,
        calls: Vec<Call>,
    },
    /// `status: incomplete` with this reason: `text` delivered, then `cut`
    /// cut off halfway through its arguments.
    Incomplete {
        reason: &'static str,
        text: String,
        cut: Option<Call>,
    },
    /// The response failed with this error code (`response.failed` when
    /// streaming, a `status: failed` body when not).
    Failed { code: &'static str },
    /// A stream `error` event; not streaming, the HTTP error the code stands for.
    Error { code: &'static str },
    /// A stream that stops before its terminator.
    Broken { text: String, calls: Vec<Call> },
}

impl RTurn {
    pub fn text(text: &str) -> RTurn {
        RTurn::Reply {
            reasoning: None,
            text: text.into(),
            calls: vec![],
        }
    }
    pub fn calls(text: &str, calls: Vec<Call>) -> RTurn {
        RTurn::Reply {
            reasoning: None,
            text: text.into(),
            calls,
        }
    }
}

#[derive(Debug, Default)]
struct Recorded {
    requests: Vec<Value>,
    paths: Vec<String>,
    violations: Vec<String>,
    /// Encrypted reasoning this server handed out; only these come back.
    issued: HashSet<String>,
}

struct Responder {
    stream: bool,
    /// Send encrypted reasoning even when the request did not ask for it,
    /// to show the harness still does not send it back.
    always_encrypt: bool,
    turns: Mutex<VecDeque<RTurn>>,
    recorded: Arc<Mutex<Recorded>>,
}

impl Respond for Responder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let mut rec = self.recorded.lock().unwrap();
        rec.paths.push(request.url.path().to_string());
        let body: Value = match serde_json::from_slice(&request.body) {
            Ok(v) => v,
            Err(e) => {
                rec.violations
                    .push(format!("request body is not JSON: {e}"));
                return bad_request("bad json");
            }
        };
        let check = validate(&body, self.stream, &rec.issued);
        rec.requests.push(body.clone());
        if let Err(v) = check {
            rec.violations.push(v.clone());
            return bad_request(&v);
        }
        let Some(turn) = self.turns.lock().unwrap().pop_front() else {
            rec.violations
                .push("script exhausted: the harness made one call too many".into());
            return bad_request("script exhausted");
        };
        let encrypt = self.always_encrypt
            || body["include"]
                .as_array()
                .is_some_and(|i| i.iter().any(|v| v == "reasoning.encrypted_content"));
        let n = rec.requests.len();
        let (template, blob) = render(
            self.stream,
            &turn,
            encrypt.then(|| format!("enc-{n}-opaque")),
        );
        if let Some(blob) = blob {
            rec.issued.insert(blob);
        }
        template
    }
}

fn bad_request(message: &str) -> ResponseTemplate {
    ResponseTemplate::new(400).set_body_json(json!({"error": {
        "message": message, "type": "invalid_request_error", "param": null, "code": null}}))
}

/// A scripted Responses server on loopback.
pub struct ResponsesModel {
    pub server: MockServer,
    pub stream: bool,
    recorded: Arc<Mutex<Recorded>>,
}

impl ResponsesModel {
    pub async fn start(stream: bool, turns: Vec<RTurn>) -> ResponsesModel {
        Self::start_with(stream, turns, false).await
    }

    pub async fn start_with(
        stream: bool,
        turns: Vec<RTurn>,
        always_encrypt: bool,
    ) -> ResponsesModel {
        let server = MockServer::start().await;
        let recorded = Arc::new(Mutex::new(Recorded::default()));
        Mock::given(method("POST"))
            .respond_with(Responder {
                stream,
                always_encrypt,
                turns: Mutex::new(turns.into()),
                recorded: Arc::clone(&recorded),
            })
            .mount(&server)
            .await;
        ResponsesModel {
            server,
            stream,
            recorded,
        }
    }

    /// Base URL as a user passes it: with `/v1`.
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.server.uri())
    }

    pub fn requests(&self) -> Vec<Value> {
        self.recorded.lock().unwrap().requests.clone()
    }

    pub fn paths(&self) -> Vec<String> {
        self.recorded.lock().unwrap().paths.clone()
    }

    pub fn issued(&self) -> HashSet<String> {
        self.recorded.lock().unwrap().issued.clone()
    }

    /// The `input` items of request `index`.
    pub fn input(&self, index: usize) -> Vec<Value> {
        self.requests()[index]["input"].as_array().unwrap().clone()
    }

    /// Panics if any request broke the rules or the script ran out.
    pub fn assert_valid(&self) {
        let rec = self.recorded.lock().unwrap();
        assert!(
            rec.violations.is_empty(),
            "requests violated the Responses rules: {:#?}",
            rec.violations
        );
    }

    /// Instructions and tools of every request are byte-identical (SPEC D5).
    pub fn assert_stable_prefix(&self) {
        let prefixes: Vec<String> = self
            .requests()
            .iter()
            .map(|r| format!("{}{}", r["instructions"], r["tools"]))
            .collect();
        for p in &prefixes {
            assert_eq!(p, &prefixes[0], "prefix changed between steps");
        }
    }
}

/// The `attest run --json` arguments against `model`.
pub fn run_args(model: &ResponsesModel, ws: &TestWorkspace, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "run",
        "--json",
        "--provider",
        "openai-responses",
        "--base-url",
        &model.base_url(),
        "--model",
        "gpt-test",
        "-C",
        &ws.path().display().to_string(),
        if model.stream {
            "--stream"
        } else {
            "--no-stream"
        },
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Run `attest run --json --provider openai-responses` against `model`.
pub async fn run_responses(
    model: &ResponsesModel,
    ws: &TestWorkspace,
    extra: &[&str],
) -> RunResult {
    run_binary(run_args(model, ws, extra), &[]).await
}

/// Start the run, SIGKILL it once a printed line contains `when`, and
/// return the lines it printed.
pub async fn run_and_kill(
    model: &ResponsesModel,
    ws: &TestWorkspace,
    extra: &[&str],
    when: &'static str,
) -> Vec<String> {
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("attest"))
        .args(run_args(model, ws, extra))
        .env("XDG_CONFIG_HOME", test_config_home())
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines = tokio::task::spawn_blocking(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            let hit = line.contains(when);
            lines.push(line);
            if hit {
                child.kill().unwrap();
                break;
            }
        }
        child.wait().unwrap();
        lines
    })
    .await
    .unwrap();
    lines
}

// ---- rendering ----

fn usage() -> Value {
    json!({"input_tokens": 11, "input_tokens_details": {"cached_tokens": 5},
           "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 18})
}

fn reasoning_item(n: usize, summary: &str, blob: Option<&str>) -> Value {
    let mut item = json!({"type": "reasoning", "id": format!("rs_{n}"),
                          "summary": [{"type": "summary_text", "text": summary}]});
    if let Some(blob) = blob {
        item["encrypted_content"] = json!(blob);
    }
    item
}

fn message_item(text: &str, status: &str) -> Value {
    json!({"type": "message", "id": "msg_1", "role": "assistant", "status": status,
           "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn call_item(n: usize, c: &Call, arguments: &str, status: &str) -> Value {
    // The item id differs from the call id, as on the real service.
    json!({"type": "function_call", "id": format!("fc_{n}"), "call_id": c.id, "name": c.name,
           "arguments": arguments, "status": status})
}

fn response(status: &str, output: Vec<Value>) -> Value {
    json!({"id": "resp_test", "object": "response", "created_at": 0, "model": "gpt-test",
           "status": status, "error": null, "incomplete_details": null, "output": output,
           "store": false, "usage": usage()})
}

fn half(s: &str) -> &str {
    let mut mid = s.len() / 2;
    while !s.is_char_boundary(mid) {
        mid += 1;
    }
    &s[..mid]
}

/// Streamed events for `items` (each delivered whole unless it is `cut`).
struct Events(Vec<Value>);

impl Events {
    fn new() -> Events {
        Events(vec![json!({"type": "response.created",
            "response": {"id": "resp_test", "status": "in_progress", "output": []}})])
    }

    fn item(&mut self, index: usize, item: &Value, cut: bool) {
        let mut added = item.clone();
        added["status"] = json!("in_progress");
        match item["type"].as_str().unwrap() {
            "message" => {
                added["content"] = json!([]);
                self.push(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
                let text = item["content"][0]["text"].as_str().unwrap();
                let first = half(text);
                for delta in [first, &text[first.len()..]] {
                    self.push(
                        json!({"type": "response.output_text.delta", "output_index": index,
                                     "content_index": 0, "item_id": item["id"], "delta": delta}),
                    );
                }
            }
            "function_call" => {
                added["arguments"] = json!("");
                self.push(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
                let args = item["arguments"].as_str().unwrap();
                let first = half(args);
                self.push(
                    json!({"type": "response.function_call_arguments.delta", "output_index": index,
                                 "item_id": item["id"], "delta": first}),
                );
                if cut {
                    return;
                }
                self.push(
                    json!({"type": "response.function_call_arguments.delta", "output_index": index,
                                 "item_id": item["id"], "delta": &args[first.len()..]}),
                );
                self.push(
                    json!({"type": "response.function_call_arguments.done", "output_index": index,
                                 "item_id": item["id"], "arguments": args}),
                );
            }
            _ => {
                self.push(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
            }
        }
        if !cut {
            self.push(
                json!({"type": "response.output_item.done", "output_index": index, "item": item}),
            );
        }
    }

    fn push(&mut self, mut event: Value) {
        event["sequence_number"] = json!(self.0.len());
        self.0.push(event);
    }

    fn template(self) -> ResponseTemplate {
        let body: String = self
            .0
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
            .collect();
        ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")
    }
}

/// The response for `turn`, and the encrypted blob it handed out.
fn render(stream: bool, turn: &RTurn, blob: Option<String>) -> (ResponseTemplate, Option<String>) {
    match turn {
        RTurn::Reply {
            reasoning,
            text,
            calls,
        } => {
            let mut output = Vec::new();
            let mut issued = None;
            if let Some(summary) = reasoning {
                output.push(reasoning_item(0, summary, blob.as_deref()));
                issued = blob;
            }
            if !text.is_empty() {
                output.push(message_item(text, "completed"));
            }
            for (n, c) in calls.iter().enumerate() {
                output.push(call_item(n, c, &c.arguments, "completed"));
            }
            (finished(stream, "completed", None, output, None), issued)
        }
        RTurn::Incomplete { reason, text, cut } => {
            let mut output = Vec::new();
            if !text.is_empty() {
                output.push(message_item(text, "completed"));
            }
            (
                finished(stream, "incomplete", Some(reason), output, cut.as_ref()),
                None,
            )
        }
        RTurn::Failed { code } => {
            let error = json!({"code": code, "message": format!("scripted failure {code}")});
            if stream {
                let mut ev = Events::new();
                let mut failed = response("failed", vec![]);
                failed["error"] = error;
                ev.push(json!({"type": "response.failed", "response": failed}));
                (ev.template(), None)
            } else {
                let mut body = response("failed", vec![]);
                body["error"] = error;
                (ResponseTemplate::new(200).set_body_json(body), None)
            }
        }
        RTurn::Error { code } => {
            let message = format!("scripted error {code}");
            if stream {
                let mut ev = Events::new();
                ev.push(json!({"type": "error", "code": code, "message": message, "param": null}));
                (ev.template(), None)
            } else {
                let status = match *code {
                    "rate_limit_exceeded" => 429,
                    "server_error" => 500,
                    _ => 400,
                };
                let body = json!({"error": {"message": message, "type": code, "param": null, "code": code}});
                (ResponseTemplate::new(status).set_body_json(body), None)
            }
        }
        RTurn::Broken { text, calls } => {
            assert!(stream, "a broken stream needs a streaming variant");
            let mut ev = Events::new();
            let mut index = 0;
            if !text.is_empty() {
                ev.item(index, &message_item(text, "completed"), false);
                index += 1;
            }
            for (n, c) in calls.iter().enumerate() {
                ev.item(index + n, &call_item(n, c, &c.arguments, "completed"), true);
            }
            (ev.template(), None)
        }
    }
}

/// A finished (completed or incomplete) response, as a body or a stream;
/// an incomplete one gives its reason and may end inside the call `cut`.
fn finished(
    stream: bool,
    status: &str,
    reason: Option<&str>,
    output: Vec<Value>,
    cut: Option<&Call>,
) -> ResponseTemplate {
    let mut all = output.clone();
    let n = output.len();
    all.extend(cut.map(|c| call_item(n, c, half(&c.arguments), "incomplete")));
    let mut body = response(status, all);
    if let Some(reason) = reason {
        body["incomplete_details"] = json!({"reason": reason});
    }
    if !stream {
        return ResponseTemplate::new(200).set_body_json(body);
    }
    let mut ev = Events::new();
    for (i, item) in output.iter().enumerate() {
        ev.item(i, item, false);
    }
    if let Some(c) = cut {
        ev.item(n, &call_item(n, c, &c.arguments, "in_progress"), true);
    }
    let kind = if status == "completed" {
        "response.completed"
    } else {
        "response.incomplete"
    };
    ev.push(json!({"type": kind, "response": body}));
    ev.template()
}

// ---- validation ----

const PARAMETERS: [&str; 26] = [
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_output_tokens",
    "max_tool_calls",
    "temperature",
    "top_p",
    "top_logprobs",
    "store",
    "stream",
    "stream_options",
    "include",
    "reasoning",
    "text",
    "metadata",
    "previous_response_id",
    "truncation",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "service_tier",
    "background",
    "prompt",
];

const INCLUDABLE: [&str; 7] = [
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
    "message.input_image.image_url",
    "file_search_call.results",
    "web_search_call.action.sources",
    "code_interpreter_call.outputs",
    "computer_call_output.output.image_url",
];

fn err<T>(msg: String) -> Result<T, String> {
    Err(msg)
}

/// Check a request body as the real service does (with `store: false`).
pub fn validate(body: &Value, stream: bool, issued: &HashSet<String>) -> Result<(), String> {
    let obj = body.as_object().ok_or("body must be an object")?;
    for key in obj.keys() {
        if !PARAMETERS.contains(&key.as_str()) {
            return err(format!("Unknown parameter: '{key}'."));
        }
    }
    if !body["model"].is_string() {
        return err("Missing required parameter: 'model'.".into());
    }
    if body["stream"].as_bool().unwrap_or(false) != stream {
        return err(format!(
            "stream flag {} but expected {stream}",
            body["stream"]
        ));
    }
    if body.get("store").is_some_and(|s| !s.is_boolean()) {
        return err("Invalid type for 'store': expected a boolean.".into());
    }
    if body.get("instructions").is_some_and(|s| !s.is_string()) {
        return err("Invalid type for 'instructions': expected a string.".into());
    }
    if let Some(n) = body.get("max_output_tokens") {
        if n.as_u64().is_none_or(|n| n < 16) {
            return err(format!(
                "Invalid 'max_output_tokens': integer below minimum value 16 ({n})."
            ));
        }
    }
    if let Some(t) = body.get("temperature") {
        if t.as_f64().is_none_or(|t| !(0.0..=2.0).contains(&t)) {
            return err(format!("Invalid 'temperature': {t}."));
        }
    }
    for inc in body
        .get("include")
        .map(|i| i.as_array().ok_or("include must be an array"))
        .transpose()?
        .into_iter()
        .flatten()
    {
        if !inc.as_str().is_some_and(|s| INCLUDABLE.contains(&s)) {
            return err(format!("Invalid value for 'include': {inc}."));
        }
    }
    for (i, t) in body
        .get("tools")
        .map(|t| t.as_array().ok_or("tools must be an array"))
        .transpose()?
        .into_iter()
        .flatten()
        .enumerate()
    {
        let name_ok = t["name"].as_str().is_some_and(|n| {
            !n.is_empty()
                && n.len() <= 64
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        });
        if t["type"] != "function" || !name_ok || !t["parameters"].is_object() {
            return err(format!("Invalid tool at 'tools[{i}]': {t}"));
        }
        if t.get("strict").is_some_and(|s| !s.is_boolean())
            || t.get("description").is_some_and(|d| !d.is_string())
        {
            return err(format!("Invalid tool at 'tools[{i}]': {t}"));
        }
    }
    let store = body["store"].as_bool().unwrap_or(true);
    let input = body["input"]
        .as_array()
        .ok_or("Missing required parameter: 'input'.")?;
    let mut seen_calls: HashSet<String> = HashSet::new();
    let mut answered: HashSet<String> = HashSet::new();
    // Calls still waiting for their output, in order.
    let mut open: Vec<String> = Vec::new();
    for (i, item) in input.iter().enumerate() {
        let at = format!("input[{i}]");
        if !item.is_object() {
            return err(format!("Invalid '{at}': expected an object."));
        }
        if let Some(id) = item.get("id") {
            if !store {
                return err(format!(
                    "Item with id {id} not found. Items are not persisted when `store` is set to false."
                ));
            }
        }
        let kind = match item["type"].as_str() {
            Some(k) => k,
            None if item.get("role").is_some() => "message",
            None => return err(format!("Missing required parameter: '{at}.type'.")),
        };
        if matches!(kind, "message" | "reasoning") {
            if let Some(call) = open.first() {
                return err(format!("No tool output found for function call {call}."));
            }
        }
        match kind {
            "message" => message(item, &at)?,
            "function_call" => {
                let call_id = call_id(item, &at)?;
                if !item["name"].is_string() {
                    return err(format!("Missing required parameter: '{at}.name'."));
                }
                if !item["arguments"].is_string() {
                    return err(format!("Invalid type for '{at}.arguments': expected a string."));
                }
                if !seen_calls.insert(call_id.clone()) {
                    return err(format!("Duplicate function call with call_id {call_id}."));
                }
                open.push(call_id);
            }
            "function_call_output" => {
                let call_id = call_id(item, &at)?;
                if !seen_calls.contains(&call_id) {
                    return err(format!(
                        "No tool call found for function call output with call_id {call_id}."
                    ));
                }
                if !answered.insert(call_id.clone()) {
                    return err(format!("Duplicate function call output for call_id {call_id}."));
                }
                open.retain(|c| c != &call_id);
                if !(item["output"].is_string() || item["output"].is_array()) {
                    return err(format!("Invalid type for '{at}.output'."));
                }
            }
            "reasoning" => {
                if !item["summary"].is_array() {
                    return err(format!("Missing required parameter: '{at}.summary'."));
                }
                let Some(blob) = item["encrypted_content"].as_str() else {
                    return err(format!(
                        "'{at}': a reasoning item needs its encrypted_content when `store` is false."
                    ));
                };
                if !issued.contains(blob) {
                    return err(format!("'{at}.encrypted_content' could not be decrypted."));
                }
                let next = &input.get(i + 1).unwrap_or(&Value::Null);
                let follows = next["type"] == "function_call"
                    || (next["type"] == "message" && next["role"] == "assistant");
                if !follows {
                    return err(format!(
                        "Item '{at}' of type 'reasoning' was provided without its required following item."
                    ));
                }
            }
            other => {
                return err(format!(
                    "Invalid value: '{other}'. Supported values are: 'message', 'reasoning', 'function_call', and 'function_call_output'."
                ))
            }
        }
    }
    if let Some(call) = open.first() {
        return err(format!("No tool output found for function call {call}."));
    }
    Ok(())
}

fn call_id(item: &Value, at: &str) -> Result<String, String> {
    match item["call_id"].as_str() {
        Some(id) if !id.is_empty() => Ok(id.to_string()),
        _ => err(format!("Missing required parameter: '{at}.call_id'.")),
    }
}

fn message(item: &Value, at: &str) -> Result<(), String> {
    let role = item["role"]
        .as_str()
        .ok_or(format!("Missing required parameter: '{at}.role'."))?;
    let allowed: &[&str] = match role {
        "user" | "system" | "developer" => &["input_text", "input_image", "input_file"],
        "assistant" => &["output_text", "refusal"],
        other => return err(format!("Invalid value for '{at}.role': '{other}'.")),
    };
    match &item["content"] {
        Value::String(_) => Ok(()),
        Value::Array(parts) => {
            for (j, p) in parts.iter().enumerate() {
                let t = p["type"].as_str().unwrap_or("");
                if !allowed.contains(&t) {
                    return err(format!(
                        "Invalid value: '{t}' at '{at}.content[{j}]'. Supported values are: {allowed:?}."
                    ));
                }
                if matches!(t, "input_text" | "output_text") && !p["text"].is_string() {
                    return err(format!(
                        "Missing required parameter: '{at}.content[{j}].text'."
                    ));
                }
            }
            Ok(())
        }
        _ => err(format!("Missing required parameter: '{at}.content'.")),
    }
}
