//! The floor under a step of `attest run` (issue 19): a client that does
//! only what no harness with a durable write-ahead log can skip, against
//! the same scripted model server as `scripts/bench-overhead.sh`.
//!
//! `step_floor TEMPLATE_DB STORE_DB URL DATA_DIR`: replays, step by step,
//! the log entries of the one run stored in `TEMPLATE_DB` (a store that an
//! `attest run` of the same script wrote) into a new store at `STORE_DB`,
//! in the same transactions as attest writes them: for each response, one
//! commit before the tool runs (the call made durable) and one after it
//! (the result made durable before the next request). Between them it
//! reads the step's file from `DATA_DIR` (`fNNNN.txt`), as `read_file`
//! does. Each request is a body as long as attest's at that step would
//! roughly be (a growing message list), written with one blocking write;
//! each response is read whole and parsed as JSON. There is no engine, no
//! async runtime, no HTTP library, no redaction, no checks: the rest of a
//! step is the machine's (waking up, the socket, SQLite and the file
//! system), and that is what the server's wire times then measure. The
//! requests are not valid conversations (a tool message without its call
//! id), so the server's checks of them, which it writes after the run,
//! are not read.
//!
//! Prints one JSON line: the number of tool steps served and, per step,
//! the time (µs) from a response's last byte read to the first commit
//! returning, the file's read (the tool, which the benchmark subtracts
//! as it subtracts attest's tool time), and from the tool's end to the
//! request written.

use attest_protocol::{EventBody, LogEntry, TraceRecord};
use attest_store::{NewRun, SqliteStore, Store};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [template, store_path, url, data] = &args[..] else {
        eprintln!("usage: step_floor TEMPLATE_DB STORE_DB URL DATA_DIR");
        std::process::exit(2);
    };
    let batches = template_batches(template);
    let mut store = SqliteStore::open(std::path::Path::new(store_path)).expect("open the store");
    let run = "floor";
    store.ensure_session("floor-session").expect("session");
    store
        .begin_run(&NewRun {
            id: run.into(),
            session_id: "floor-session".into(),
            trace_id: "floor-trace".into(),
            prompt: "Read every file.".into(),
            settings: serde_json::json!({}),
            loop_version: "floor".into(),
            prompt_version: "floor".into(),
        })
        .expect("begin the run");

    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string();
    let stream = TcpStream::connect(&addr).expect("connect to the model server");
    stream.set_nodelay(true).ok();
    let mut reader = BufReader::new(stream.try_clone().expect("clone the socket"));
    let mut writer = stream;

    let mut batches = batches.into_iter();
    // What attest commits before its first request.
    store
        .append_all(run, &batches.next().unwrap_or_default())
        .expect("first commit");
    // About as long as attest's fixed part of a request (instructions,
    // the tool list, the state tail).
    let mut messages = vec![
        message("system", &"Reference text of a fixed length. ".repeat(170)),
        message("user", "Read every file."),
    ];
    send(&mut writer, &addr, &messages);
    let (mut to_commit, mut tool, mut to_request) = (Vec::new(), Vec::new(), Vec::new());
    let mut step = 0usize;
    loop {
        let response = receive(&mut reader);
        let read = Instant::now();
        let parsed: serde_json::Value =
            serde_json::from_slice(&response).expect("the response is JSON");
        let Some(before_tool) = batches.next() else {
            break;
        };
        store.append_all(run, &before_tool).expect("commit 1");
        to_commit.push(read.elapsed().as_micros() as u64);
        let Some(after_tool) = batches.next() else {
            // The answer: attest writes the run's end and stops.
            break;
        };
        let tool_start = Instant::now();
        let _ = std::fs::read_to_string(format!("{data}/f{step:04}.txt"));
        let tool_done = Instant::now();
        tool.push((tool_done - tool_start).as_micros() as u64);
        store.append_all(run, &after_tool).expect("commit 2");
        messages.push(serde_json::to_string(&parsed["choices"][0]["message"]).unwrap_or_default());
        messages.push(message("tool", &format!("port = {}", 8000 + step)));
        send(&mut writer, &addr, &messages);
        to_request.push(tool_done.elapsed().as_micros() as u64);
        step += 1;
    }
    println!(
        "{}",
        serde_json::json!({
            "steps": step,
            "to_commit_us": to_commit,
            "tool_us": tool,
            "to_request_us": to_request,
        })
    );
}

/// The template run's entries, cut where attest commits: after a step's
/// `tool_started` event (before the tool runs) and after each `request`
/// trace (before the model is asked).
fn template_batches(path: &str) -> Vec<Vec<LogEntry>> {
    let db =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("open the template store");
    let mut rows = db
        .prepare("SELECT body FROM entries ORDER BY id")
        .expect("query the template");
    let bodies: Vec<String> = rows
        .query_map([], |r| r.get(0))
        .expect("read the template")
        .collect::<Result<_, _>>()
        .expect("read the template");
    let mut batches = vec![Vec::new()];
    for body in bodies {
        let mut entry: LogEntry = serde_json::from_str(&body).expect("a template entry");
        // Stored raw outputs point at their artifact: replay the text.
        if let LogEntry::Trace {
            trace: TraceRecord::RawOutput { raw, .. },
        } = &mut entry
        {
            if let Some(id) = raw.strip_prefix("artifact:") {
                *raw = db
                    .query_row("SELECT body FROM artifacts WHERE id = ?1", [id], |r| {
                        r.get(0)
                    })
                    .expect("the raw output's artifact");
            }
        }
        let ends_batch = match &entry {
            LogEntry::Event { event } => matches!(event.body, EventBody::ToolStarted { .. }),
            LogEntry::Trace { trace } => matches!(trace, TraceRecord::Request { .. }),
            _ => false,
        };
        batches.last_mut().expect("a batch").push(entry);
        if ends_batch {
            batches.push(Vec::new());
        }
    }
    batches
}

fn message(role: &str, content: &str) -> String {
    serde_json::json!({"role": role, "content": content}).to_string()
}

fn send(out: &mut TcpStream, host: &str, messages: &[String]) {
    let body = format!(
        r#"{{"model":"bench-model","messages":[{}],"max_tokens":4096}}"#,
        messages.join(",")
    );
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    out.write_all(request.as_bytes())
        .expect("write the request");
}

/// One response's body (`content-length` framing, as the server sends).
fn receive(input: &mut BufReader<TcpStream>) -> Vec<u8> {
    let mut length = None;
    let mut line = String::new();
    loop {
        line.clear();
        let n = input.read_line(&mut line).expect("read a header");
        assert!(n > 0, "the server closed the connection");
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse::<usize>().ok();
            }
        }
    }
    let mut body = vec![0; length.expect("a content-length")];
    input.read_exact(&mut body).expect("read the body");
    body
}
