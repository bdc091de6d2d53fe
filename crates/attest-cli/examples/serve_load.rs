//! Load for `attest serve`, for `docs/benchmarks.md` (not a test): RUNS
//! runs of STEPS steps each (STEPS − 1 `read_file` calls, then an answer)
//! submitted at once to SERVERS `attest serve` processes sharing one store,
//! against the tests' scripted model server answering every request after
//! DELAY_MS. Prints one line of JSON: wall time, throughput, the servers'
//! own p50/p99 harness time per step (`/metrics`) and peak RSS.
//!
//! `serve_load RUNS STEPS SERVERS DELAY_MS [DATABASE_URL]`: without a URL
//! the servers share one SQLite store (use SERVERS = 1 there).
//! Build first (`cargo build --release -p attest-cli --bin attest
//! --example serve_load`) and name the binary the servers run:
//! `CARGO_BIN_EXE_attest=target/release/attest target/release/examples/serve_load …`.

#[path = "../tests/common/mod.rs"]
mod common;

use common::server::{client, submit, Server, ServerDir};
use common::{MockModel, Turn, Variant, Wire};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn tool_results(request: &Value) -> usize {
    request["messages"]
        .as_array()
        .map(|m| m.iter().filter(|m| m["role"] == "tool").count())
        .unwrap_or(0)
}

/// Peak resident set (VmHWM) of a process, in kB.
fn peak_rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 4 {
        eprintln!("usage: serve_load RUNS STEPS SERVERS DELAY_MS [DATABASE_URL]");
        std::process::exit(2);
    }
    let runs: usize = args[0].parse().expect("RUNS");
    let steps: usize = args[1].parse().expect("STEPS");
    let servers: usize = args[2].parse().expect("SERVERS");
    let delay = Duration::from_millis(args[3].parse().expect("DELAY_MS"));
    let database = args.get(4).cloned();

    let model = MockModel::reactive(
        Variant {
            wire: Wire::OpenAi,
            stream: false,
        },
        move |request| {
            let done = tool_results(request);
            let turn = if done + 1 >= steps {
                Turn::text("Every file was read.")
            } else {
                Turn::tool("read_file", json!({"path": format!("f{done}.txt")}))
            };
            Turn::Delayed {
                delay,
                turn: Box::new(turn),
            }
        },
    )
    .await;
    let extra = match &database {
        Some(url) => format!("database_url = \"{url}\"\nmax_concurrent_runs = {runs}\n"),
        None => format!("max_concurrent_runs = {runs}\n"),
    };
    let dir = ServerDir::new(&model, &extra);
    let procs: Vec<Server> = (0..servers).map(|_| Server::start(&dir)).collect();
    let started = Instant::now();
    let pending: Vec<_> = (0..runs)
        .map(|i| {
            submit(
                &procs[i % servers],
                None,
                json!({"prompt": "Read the files.", "max_steps": steps + 2}),
            )
        })
        .collect();
    futures::future::join_all(pending).await;
    // Done when the queue says so.
    let open_runs = |text: &str| {
        ["queued", "running"]
            .iter()
            .filter_map(|state| metric(text, &format!("attest_runs{{state=\"{state}\"}}")))
            .sum::<f64>()
    };
    let completed = loop {
        let text = client()
            .get(procs[0].url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if open_runs(&text) == 0.0 {
            break metric(&text, "attest_runs{state=\"completed\"}").unwrap_or(0.0) as usize;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let wall = started.elapsed().as_secs_f64();
    let mut per_server = Vec::new();
    for p in &procs {
        let text = client()
            .get(p.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        per_server.push(json!({
            "p50_ms": metric(&text, "attest_step_latency_quantile_seconds{quantile=\"0.5\"}").map(|s| s * 1e3),
            "p99_ms": metric(&text, "attest_step_latency_quantile_seconds{quantile=\"0.99\"}").map(|s| s * 1e3),
            "steps": metric(&text, "attest_step_latency_seconds_count"),
            "peak_rss_mb": peak_rss_kb(p.child.id()) as f64 / 1024.0,
        }));
    }
    println!(
        "{}",
        json!({
            "runs": runs,
            "steps": steps,
            "servers": servers,
            "model_delay_ms": delay.as_millis() as u64,
            "store": if database.is_some() { "postgres" } else { "sqlite" },
            "completed": completed,
            "wall_s": wall,
            "runs_per_s": runs as f64 / wall,
            "steps_per_s": (runs * steps) as f64 / wall,
            "servers_metrics": per_server,
        })
    );
    let violations = model.violations();
    if !violations.is_empty() {
        eprintln!("model saw invalid requests: {violations:?}");
        std::process::exit(1);
    }
}
