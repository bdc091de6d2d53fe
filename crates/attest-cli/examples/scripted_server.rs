//! The integration tests' scripted model server (`tests/common/`) as a
//! process, for `scripts/bench-overhead.sh`: it validates every request
//! like the real services.
//!
//! `scripted_server WIRE STREAM STEPS DIR`: WIRE is `openai` or
//! `anthropic`, STREAM `0` or `1`. It serves STEPS − 1 `read_file` calls
//! of `data/fNNNN.txt`, then an answer; writes `DIR/url` once listening,
//! and once the script is served `DIR/times.json` (per request: arrival
//! and response time, µs since the epoch), `DIR/wire_times.json` (per
//! request: its first byte in and the start of the write that put its
//! response's last bytes out, as a forwarding socket in front of the model
//! server saw them) and
//! `DIR/violations` (empty when every request was valid).
//!
//! It answers each request from the script at once and checks the bodies
//! it kept once the last one is served, so that its time to answer does not
//! grow with the history; its usage then estimates the prompt cache from
//! the bytes a body shares with the one before. With
//! `ATTEST_BENCH_CHECK_INLINE=1` it checks each request before answering,
//! and emulates the prompt cache as the tests' server does: that takes it
//! about 0.3 ms at the first of 500 steps and 4 to 5 ms at the last.
//!
//! The model server reads a request whole before it answers, so its
//! arrival time includes moving the body across loopback; the forwarding
//! socket tells when attest put the request on the wire. Requests of one
//! run come one at a time, so the first byte from attest after a response
//! begins the next request.
//!
//! With `ATTEST_BENCH_MODEL_LATENCY_MS=T` in its environment the forwarding
//! socket holds each response until T ms after its request's first byte
//! (or sends it at once if the model server took longer): a model whose
//! time to answer is the same at every step, and longer than the loopback
//! round trip. `A..B` instead goes from A ms at the first request to B
//! at the last, in equal steps: an idle time that grows while the history
//! stays short.

#[path = "../tests/common/mod.rs"]
mod common;

use common::{Checks, MockModel, Turn, Variant, Wire};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn epoch_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// What the forwarding socket saw: each request's first byte in, each
/// response's last byte out (µs since the epoch), and which came last.
#[derive(Default)]
struct WireTimes {
    first_in: Vec<u64>,
    last_out: Vec<u64>,
    answering: bool,
}

/// The model's time to answer, from `ATTEST_BENCH_MODEL_LATENCY_MS` (`T`
/// or `A..B`, in ms) and the number of requests; [`Latency::micros`] gives
/// request `k`'s.
#[derive(Clone, Copy)]
struct Latency {
    first: f64,
    last: f64,
    steps: usize,
}

impl Latency {
    fn from_env(steps: usize) -> Option<Latency> {
        let spec = std::env::var("ATTEST_BENCH_MODEL_LATENCY_MS").ok()?;
        let ms = |s: &str| -> f64 {
            s.trim()
                .parse()
                .expect("ATTEST_BENCH_MODEL_LATENCY_MS is T or A..B, in ms")
        };
        let (first, last) = match spec.split_once("..") {
            Some((a, b)) => (ms(a), ms(b)),
            None => (ms(&spec), ms(&spec)),
        };
        Some(Latency { first, last, steps })
    }

    fn micros(self, k: usize) -> u64 {
        let along = k as f64 / self.steps.saturating_sub(1).max(1) as f64;
        ((self.first + (self.last - self.first) * along) * 1000.0) as u64
    }
}

/// Forwards every connection on `listener` to `upstream`, timing the turns
/// and holding each response until its `latency` after its request began.
async fn forward(
    listener: TcpListener,
    upstream: String,
    times: Arc<Mutex<WireTimes>>,
    latency: Option<Latency>,
) {
    while let Ok((client, _)) = listener.accept().await {
        let Ok(server) = TcpStream::connect(&upstream).await else {
            continue;
        };
        let (client_read, mut client_write) = client.into_split();
        let (mut server_read, mut server_write) = server.into_split();
        let inbound = Arc::clone(&times);
        tokio::spawn(async move {
            let mut buf = vec![0u8; 1 << 16];
            // Timed when bytes are there to read, not after a read that
            // copies up to 64 KiB of them: a large request would look later.
            while client_read.readable().await.is_ok() {
                let arrived = epoch_micros();
                let n = match client_read.try_read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    Err(_) => break,
                };
                {
                    let mut t = inbound.lock().unwrap();
                    if t.answering || t.first_in.is_empty() {
                        t.answering = false;
                        t.first_in.push(arrived);
                    }
                }
                if server_write.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        });
        let outbound = Arc::clone(&times);
        tokio::spawn(async move {
            let mut buf = vec![0u8; 1 << 16];
            while let Ok(n @ 1..) = server_read.read(&mut buf).await {
                // The first bytes of an answer: when its request began, and which.
                let asked = {
                    let t = outbound.lock().unwrap();
                    let at = t.first_in.last().copied();
                    at.filter(|_| !t.answering)
                        .map(|at| (at, t.first_in.len() - 1))
                };
                if let (Some(latency), Some((at, k))) = (latency, asked) {
                    let wait = (at + latency.micros(k)).saturating_sub(epoch_micros());
                    // A thread's sleep: tokio's timer rounds up to whole ms.
                    let hold = move || std::thread::sleep(Duration::from_micros(wait));
                    tokio::task::spawn_blocking(hold).await.expect("sleep");
                }
                // Timed before the write: attest may wake on this CPU and
                // run before the write returns to this task, and a time
                // taken after it would hide that part of attest's step.
                // This counts the write's own few µs to attest instead.
                let sent = epoch_micros();
                if client_write.write_all(&buf[..n]).await.is_err() {
                    break;
                }
                let mut t = outbound.lock().unwrap();
                if t.answering {
                    *t.last_out.last_mut().expect("answering has a slot") = sent;
                } else {
                    t.answering = true;
                    t.last_out.push(sent);
                }
            }
        });
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [wire, stream, steps, dir] = &args[..] else {
        eprintln!("usage: scripted_server openai|anthropic 0|1 STEPS DIR");
        std::process::exit(2);
    };
    let wire = match wire.as_str() {
        "openai" => Wire::OpenAi,
        "anthropic" => Wire::Anthropic,
        other => panic!("unknown wire {other}"),
    };
    let steps: usize = steps.parse().expect("STEPS is a number");
    let dir = std::path::PathBuf::from(dir);
    let mut turns: Vec<Turn> = (0..steps.saturating_sub(1))
        .map(|i| Turn::tool("read_file", json!({"path": format!("data/f{i:04}.txt")})))
        .collect();
    turns.push(Turn::text("Every file was read."));
    let variant = Variant {
        wire,
        stream: stream == "1",
    };
    let checks = match std::env::var_os("ATTEST_BENCH_CHECK_INLINE") {
        Some(v) if v == "1" => Checks::Inline,
        _ => Checks::AfterRun,
    };
    let model = MockModel::start_lean(variant, turns, checks).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let front = listener.local_addr().expect("address").to_string();
    let upstream = model.server.address().to_string();
    let wire_times = Arc::new(Mutex::new(WireTimes::default()));
    let latency = Latency::from_env(steps);
    tokio::spawn(forward(
        listener,
        upstream.clone(),
        Arc::clone(&wire_times),
        latency,
    ));
    let url = model.base_url().replace(&upstream, &front);
    std::fs::write(dir.join("url"), url).expect("write url");
    while model.times().len() < steps {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The last response is handed back before it is written out.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let times: Vec<[u64; 2]> = model.times().iter().map(|&(a, b)| [a, b]).collect();
    std::fs::write(dir.join("times.json"), json!(times).to_string()).expect("write times");
    let wire: Vec<[u64; 2]> = {
        let t = wire_times.lock().unwrap();
        t.first_in
            .iter()
            .zip(&t.last_out)
            .map(|(&a, &b)| [a, b])
            .collect()
    };
    std::fs::write(dir.join("wire_times.json"), json!(wire).to_string()).expect("write wire times");
    model.check_after_run();
    std::fs::write(dir.join("violations"), model.violations().join("\n"))
        .expect("write violations");
}
