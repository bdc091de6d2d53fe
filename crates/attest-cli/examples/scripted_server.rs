//! The integration tests' scripted model server (`tests/common/`) as a
//! process, for `scripts/bench-overhead.sh`: it validates every request
//! like the real services and emulates their prompt cache.
//!
//! `scripted_server WIRE STREAM STEPS DIR`: WIRE is `openai` or
//! `anthropic`, STREAM `0` or `1`. It serves STEPS − 1 `read_file` calls
//! of `data/fNNNN.txt`, then an answer; writes `DIR/url` once listening,
//! and once the script is served `DIR/times.json` (per request: arrival
//! and response time, µs since the epoch) and `DIR/violations` (empty when
//! every request was valid).

#[path = "../tests/common/mod.rs"]
mod common;

use common::{MockModel, Turn, Variant, Wire};
use serde_json::json;
use std::time::Duration;

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
    let model = MockModel::start(variant, turns).await;
    std::fs::write(dir.join("url"), model.base_url()).expect("write url");
    while model.times().len() < steps {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The last response is handed back before it is written out.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let times: Vec<[u64; 2]> = model.times().iter().map(|&(a, b)| [a, b]).collect();
    std::fs::write(dir.join("times.json"), json!(times).to_string()).expect("write times");
    std::fs::write(dir.join("violations"), model.violations().join("\n"))
        .expect("write violations");
}
