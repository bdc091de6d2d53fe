//! The floor under a step of `attest run` (issue 19): a client that does
//! only what no harness with a durable write-ahead log can skip, against
//! the same scripted model server as `scripts/bench-overhead.sh`.
//!
//! `step_floor TEMPLATE_DB STORE_DB URL DATA_DIR [CLIENT]`: replays, step by step,
//! the log entries of the one run stored in `TEMPLATE_DB` (a store that an
//! `attest run` of the same script wrote) into a new store at `STORE_DB`,
//! in the same transactions as attest writes them: for each response, one
//! commit before the tool runs (the call made durable) and one after it
//! (the result made durable before the next request). Between them it
//! reads the step's file from `DATA_DIR` (`fNNNN.txt`), as `read_file`
//! does. Each request is a body as long as attest's at that step would
//! roughly be (a growing message list), written with one blocking write;
//! each response is read whole and parsed as JSON. With CLIENT `blocking`
//! (the default) requests go out with one blocking write and responses
//! come back with blocking reads: there is no engine, no async runtime, no
//! HTTP library, no redaction, no checks, and the rest of a step is the
//! machine's (waking up, the socket, SQLite and the file system), which is
//! what the server's wire times then measure. CLIENT `tokio` does the same
//! on a current-thread tokio runtime (the event loop's share); CLIENT
//! `hyper` uses hyper's HTTP/1 connection alone on such a runtime, and
//! CLIENT `reqwest` attest's own HTTP stack (reqwest's client over hyper),
//! each adding its share. The
//! requests are not valid conversations (a tool message without its call
//! id), so the server's checks of them, which it writes after the run,
//! are not read.
//!
//! Prints one JSON line: the number of tool steps served and, per step,
//! the time (µs) from a response's last byte read to the first commit
//! returning, the file's read (the tool, which the benchmark subtracts
//! as it subtracts attest's tool time), and from the tool's end to the
//! request written (not for hyper and reqwest, which do not say when).

use attest_protocol::{EventBody, LogEntry, TraceRecord};
use attest_store::{NewRun, SqliteStore, Store};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (template, store_path, url, data, client) = match &args[..] {
        [t, s, u, d] => (t, s, u, d, "blocking"),
        [t, s, u, d, c] => (t, s, u, d, c.as_str()),
        _ => {
            eprintln!(
                "usage: step_floor TEMPLATE_DB STORE_DB URL DATA_DIR [blocking|tokio|hyper|reqwest]"
            );
            std::process::exit(2);
        }
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

    let mut wire: Box<dyn Wire> = match client {
        "blocking" => Box::new(Blocking::connect(url)),
        "tokio" => Box::new(Tokio::connect(url)),
        "reqwest" => Box::new(Reqwest::new(url)),
        "hyper" => Box::new(Hyper::connect(url)),
        other => {
            eprintln!("unknown client `{other}`: `blocking`, `tokio`, `hyper` or `reqwest`");
            std::process::exit(2);
        }
    };

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
    let (mut response, _) = wire.exchange(request_body(&messages));
    let (mut to_commit, mut tool, mut to_request) = (Vec::new(), Vec::new(), Vec::new());
    let mut step = 0usize;
    loop {
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
        let (next, written) = wire.exchange(request_body(&messages));
        if let Some(written) = written {
            to_request.push((written - tool_done).as_micros() as u64);
        }
        response = next;
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
    let template = SqliteStore::open(std::path::Path::new(path)).expect("open the template store");
    let runs = template.runs(None).expect("the template's runs");
    let [run] = &runs[..] else {
        panic!("the template store holds {} runs, not one", runs.len());
    };
    let raw_outputs: std::collections::HashMap<String, String> = template
        .artifacts(&run.id)
        .expect("the template's artifacts")
        .into_iter()
        .map(|a| (format!("artifact:{}", a.id), a.body))
        .collect();
    let mut batches = vec![Vec::new()];
    for mut entry in template.entries(&run.id).expect("the template's entries") {
        // Stored raw outputs point at their artifact: replay the text.
        if let LogEntry::Trace {
            trace: TraceRecord::RawOutput { raw, .. },
        } = &mut entry
        {
            if let Some(text) = raw_outputs.get(raw.as_str()) {
                *raw = text.clone();
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

fn request_body(messages: &[String]) -> String {
    format!(
        r#"{{"model":"bench-model","messages":[{}],"max_tokens":4096}}"#,
        messages.join(",")
    )
}

/// A request out and its response's body back.
trait Wire {
    /// The response's body, and when the request was written if the
    /// client can tell.
    fn exchange(&mut self, body: String) -> (Vec<u8>, Option<Instant>);
}

/// `host:port` of an `http://` URL.
fn host_of(url: &str) -> String {
    url.trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string()
}

/// An HTTP/1.1 request by hand.
fn http_request(host: &str, body: &str) -> String {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Reading a response's head one line at a time: `Some(length)` once
/// the blank line ends it (the server frames bodies by `content-length`).
#[derive(Default)]
struct Head {
    length: Option<usize>,
}

impl Head {
    fn line(&mut self, line: &str) -> Option<usize> {
        let header = line.trim_end();
        if header.is_empty() {
            return Some(self.length.expect("a content-length"));
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                self.length = value.trim().parse().ok();
            }
        }
        None
    }
}

/// Blocking writes and reads on one socket.
struct Blocking {
    host: String,
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Blocking {
    fn connect(url: &str) -> Self {
        let host = host_of(url);
        let stream = TcpStream::connect(&host).expect("connect to the model server");
        stream.set_nodelay(true).ok();
        Blocking {
            host,
            reader: BufReader::new(stream.try_clone().expect("clone the socket")),
            writer: stream,
        }
    }
}

impl Wire for Blocking {
    fn exchange(&mut self, body: String) -> (Vec<u8>, Option<Instant>) {
        let request = http_request(&self.host, &body);
        self.writer
            .write_all(request.as_bytes())
            .expect("write the request");
        let written = Instant::now();
        let (mut head, mut line) = (Head::default(), String::new());
        let length = loop {
            line.clear();
            let n = self.reader.read_line(&mut line).expect("read a header");
            assert!(n > 0, "the server closed the connection");
            if let Some(length) = head.line(&line) {
                break length;
            }
        };
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).expect("read the body");
        (body, Some(written))
    }
}

/// A current-thread tokio runtime, as attest runs on.
fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A socket to the model server on tokio, without Nagle's delay.
async fn connect(host: &str) -> tokio::net::TcpStream {
    let stream = tokio::net::TcpStream::connect(host)
        .await
        .expect("connect to the model server");
    stream.set_nodelay(true).ok();
    stream
}

/// The same requests and reads on a current-thread tokio runtime: what
/// the event loop adds, without hyper and reqwest.
struct Tokio {
    runtime: tokio::runtime::Runtime,
    host: String,
    stream: tokio::io::BufReader<tokio::net::TcpStream>,
}

impl Tokio {
    fn connect(url: &str) -> Self {
        let runtime = current_thread();
        let host = host_of(url);
        let stream = runtime.block_on(connect(&host));
        Tokio {
            runtime,
            host,
            stream: tokio::io::BufReader::new(stream),
        }
    }
}

impl Wire for Tokio {
    fn exchange(&mut self, body: String) -> (Vec<u8>, Option<Instant>) {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
        let request = http_request(&self.host, &body);
        let stream = &mut self.stream;
        self.runtime.block_on(async {
            stream
                .get_mut()
                .write_all(request.as_bytes())
                .await
                .expect("write the request");
            let written = Instant::now();
            let (mut head, mut line) = (Head::default(), String::new());
            let length = loop {
                line.clear();
                let n = stream.read_line(&mut line).await.expect("read a header");
                assert!(n > 0, "the server closed the connection");
                if let Some(length) = head.line(&line) {
                    break length;
                }
            };
            let mut body = vec![0; length];
            stream.read_exact(&mut body).await.expect("read the body");
            (body, Some(written))
        })
    }
}

/// attest's HTTP stack: reqwest (hyper) on a current-thread tokio runtime.
struct Reqwest {
    runtime: tokio::runtime::Runtime,
    client: reqwest::Client,
    endpoint: reqwest::Url,
}

impl Reqwest {
    fn new(url: &str) -> Self {
        let base = url.trim_end_matches('/');
        Reqwest {
            runtime: current_thread(),
            client: reqwest::Client::new(),
            endpoint: reqwest::Url::parse(&format!("{base}/chat/completions"))
                .expect("the server's URL"),
        }
    }
}

impl Wire for Reqwest {
    fn exchange(&mut self, body: String) -> (Vec<u8>, Option<Instant>) {
        let request = self
            .client
            .post(self.endpoint.clone())
            .header("content-type", "application/json")
            .body(body);
        let body = self.runtime.block_on(async {
            let response = request.send().await.expect("send the request");
            response.bytes().await.expect("read the response")
        });
        (body.to_vec(), None)
    }
}

/// hyper's HTTP/1 connection alone, on a current-thread tokio runtime:
/// hyper's share without reqwest's client (its pool and layers).
struct Hyper {
    runtime: tokio::runtime::Runtime,
    host: String,
    sender: hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>,
}

impl Hyper {
    fn connect(url: &str) -> Self {
        let runtime = current_thread();
        let host = host_of(url);
        let sender = runtime.block_on(async {
            let stream = connect(&host).await;
            let (sender, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                    .await
                    .expect("an HTTP/1 connection");
            tokio::spawn(conn);
            sender
        });
        Hyper {
            runtime,
            host,
            sender,
        }
    }
}

impl Wire for Hyper {
    fn exchange(&mut self, body: String) -> (Vec<u8>, Option<Instant>) {
        use http_body_util::BodyExt;
        let request = hyper::Request::post("/v1/chat/completions")
            .header("host", &self.host)
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(body)))
            .expect("a request");
        let sender = &mut self.sender;
        let body = self.runtime.block_on(async {
            sender.ready().await.expect("the connection is open");
            let response = sender
                .send_request(request)
                .await
                .expect("send the request");
            response
                .into_body()
                .collect()
                .await
                .expect("read the response")
                .to_bytes()
        });
        (body.to_vec(), None)
    }
}
