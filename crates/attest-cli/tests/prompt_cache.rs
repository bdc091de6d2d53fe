//! Provider prompt caching (issue 19), asserted on the requests the real
//! binary sends to the scripted model server: Anthropic `cache_control`
//! breakpoints (at most four, moved forward as the transcript grows),
//! OpenAI's `prompt_cache_key` from the session, and the cached input
//! tokens the (emulated) provider reports, per step in the trace and summed
//! on `done`.

mod common;

use common::validate::cache_breakpoints;
use common::*;
use serde_json::{json, Value};

fn traces(ws: &TestWorkspace, record: &str) -> Vec<Value> {
    ws.log_entries()
        .into_iter()
        .filter(|e| e["entry"] == "trace" && e["trace"]["record"] == record)
        .map(|e| e["trace"].clone())
        .collect()
}

/// `steps` reads of distinct files, then the answer.
async fn reading_run(
    v: Variant,
    ws: &TestWorkspace,
    steps: usize,
    extra: &[&str],
) -> (MockModel, RunResult) {
    reading_run_sized(v, ws, steps, 8, extra, "Collect the readings.").await
}

/// As [`reading_run`], each file `lines` lines of 27 bytes.
async fn reading_run_sized(
    v: Variant,
    ws: &TestWorkspace,
    steps: usize,
    lines: usize,
    extra: &[&str],
    prompt: &str,
) -> (MockModel, RunResult) {
    let mut turns = Vec::new();
    for i in 0..steps {
        let path = format!("data/f{i:02}.txt");
        ws.write(
            &path,
            &format!("file {i}: the reading was {}\n", 40 + i).repeat(lines),
        );
        turns.push(Turn::tool("read_file", json!({ "path": path })));
    }
    turns.push(Turn::text("All readings are in."));
    let model = MockModel::start(v, turns).await;
    let mut args = vec!["--expect", "observe", "--max-steps", "60"];
    args.extend_from_slice(extra);
    args.push(prompt);
    let r = run_attest(&model, ws, &args).await;
    model.assert_valid();
    assert_eq!(r.state(), "completed", "{v:?} {}", r.describe());
    (model, r)
}

/// (message index, block index) of every marked block in the messages.
fn marked_blocks(body: &Value) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (m, msg) in body["messages"].as_array().unwrap().iter().enumerate() {
        for (b, block) in msg["content"].as_array().into_iter().flatten().enumerate() {
            if block.get("cache_control").is_some() {
                out.push((m, b));
            }
        }
    }
    out
}

#[tokio::test]
async fn anthropic_requests_carry_at_most_four_breakpoints_moved_forward() {
    for v in VARIANTS.into_iter().filter(|v| v.wire == Wire::Anthropic) {
        let ws = TestWorkspace::new();
        let (model, r) = reading_run(v, &ws, 6, &[]).await;
        let requests = model.requests();
        assert_eq!(requests.len(), 7);
        let mut newest_before: Option<String> = None;
        for (k, body) in requests.iter().enumerate() {
            let n = cache_breakpoints(body);
            assert!((1..=4).contains(&n), "{v:?} request {k}: {n} breakpoints");
            // The system prompt (after the tools) ends the stable prefix.
            let system = body["system"].as_array().expect("system as blocks");
            assert_eq!(
                system.last().unwrap()["cache_control"],
                json!({"type": "ephemeral"})
            );
            if k == 0 {
                continue;
            }
            // The newest breakpoint sits on this step's tool result, not on
            // the state snapshot after it, which changes every request.
            let marks = marked_blocks(body);
            let &(m, b) = marks.last().unwrap();
            let block = &body["messages"][m]["content"][b];
            assert_eq!(block["type"], "tool_result", "{v:?} request {k}: {block}");
            let id = block["tool_use_id"].as_str().unwrap().to_string();
            let last_call = model.tool_results(k).last().unwrap().0.clone();
            assert_eq!(id, last_call, "{v:?} request {k}");
            // It moved forward, and the previous request's stays marked so
            // that prefix is read back.
            if let Some(previous) = &newest_before {
                assert_ne!(&id, previous, "{v:?} request {k} did not move");
                let earlier: Vec<&Value> = marks[..marks.len() - 1]
                    .iter()
                    .map(|&(m, b)| &body["messages"][m]["content"][b])
                    .collect();
                assert!(
                    earlier
                        .iter()
                        .any(|b| b["tool_use_id"] == previous.as_str()),
                    "{v:?} request {k}: {earlier:?}"
                );
            }
            newest_before = Some(id);
        }
        // Cache reads are recorded per step and summed on done.
        let responses = traces(&ws, "response");
        let per_step: u64 = responses
            .iter()
            .map(|t| t["cached_input_tokens"].as_u64().unwrap_or(0))
            .sum();
        let usage = &r.done()["usage"];
        assert!(per_step > 0, "{v:?}: nothing read from the cache");
        assert_eq!(usage["cached_input_tokens"], per_step, "{v:?}");
        assert!(
            responses[0]["cache_creation_input_tokens"]
                .as_u64()
                .unwrap()
                > 0
        );
        // `attest trace` shows the hit rate.
        let run_id = r.done()["run_id"].as_str().unwrap().to_string();
        let ws_arg = ws.path().display().to_string();
        let trace = run_binary(
            ["trace", run_id.as_str(), "-C", ws_arg.as_str()]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            &[],
        )
        .await;
        let input = usage["input_tokens"].as_u64().unwrap();
        let expected = format!(
            "prompt cache: {per_step} of {input} input tokens read from cache over 7 response(s), hit rate {:.1}%",
            per_step as f64 * 100.0 / input as f64
        );
        assert!(
            trace.stdout.contains(&expected),
            "{expected}\n{}",
            trace.stdout
        );
    }
}

#[tokio::test]
async fn openai_requests_carry_the_sessions_prompt_cache_key() {
    for v in VARIANTS.into_iter().filter(|v| v.wire == Wire::OpenAi) {
        let ws = TestWorkspace::new();
        let (model, r) = reading_run(v, &ws, 3, &[]).await;
        let requests = model.requests();
        let keys: Vec<&Value> = requests.iter().map(|b| &b["prompt_cache_key"]).collect();
        let key = keys[0].as_str().expect("a prompt_cache_key").to_string();
        assert!(key.starts_with("attest-") && key.len() <= 64, "{key}");
        assert!(keys.iter().all(|k| *k == keys[0]), "{v:?}: {keys:?}");
        assert!(r.done()["usage"]["cached_input_tokens"].as_u64().unwrap() > 0);

        // A later run of the same session shares the key; a new session does not.
        let session = r.events[0]["session_id"].as_str().unwrap().to_string();
        let (same, _) = reading_run(v, &ws, 1, &["--session", &session]).await;
        assert_eq!(same.requests()[0]["prompt_cache_key"], key.as_str());
        let (other, _) = reading_run(v, &ws, 1, &[]).await;
        assert_ne!(other.requests()[0]["prompt_cache_key"], key.as_str());
    }
}

#[tokio::test]
async fn prompt_cache_off_sends_no_hints() {
    for v in [VARIANTS[0], VARIANTS[3]] {
        let ws = TestWorkspace::new();
        ws.append_config("[provider]\nprompt_cache = false\n");
        let (model, _) = reading_run(v, &ws, 2, &[]).await;
        for body in model.requests() {
            assert!(body.get("prompt_cache_key").is_none(), "{v:?}: {body}");
            assert_eq!(cache_breakpoints(&body), 0, "{v:?}: {body}");
        }
    }
}

/// A request's state tail as the wire carries it, with its text: its last
/// message (OpenAI) or that message's last block (Anthropic); `None` for a
/// request without one.
fn tail_of(body: &Value) -> Option<(&Value, &str)> {
    let last = body["messages"].as_array()?.last()?;
    let (segment, text) = match &last["content"] {
        Value::Array(blocks) => (blocks.last()?, &blocks.last()?["text"]),
        text => (last, text),
    };
    let text = text.as_str()?;
    text.starts_with("[attest] Reference data")
        .then_some((segment, text))
}

/// Tokens of a request's state tail as the emulated cache counts them
/// (JSON bytes / 4); 0 without one.
fn tail_tokens(body: &Value) -> u64 {
    tail_of(body).map_or(0, |(segment, _)| {
        segment.to_string().len().div_ceil(4) as u64
    })
}

/// The share of input tokens inside a prefix the provider has cached, over
/// a 50-step run, for both wire formats: printed for tiny results (216
/// bytes, where the state tail resent after them weighs most) and
/// file-sized ones (2 KB), where it must reach the 90%. Each step
/// reads back at least everything the step before it read.
///
/// Also printed, and at least 90% at either size: the share before the
/// state tail, which is the part of each request inside a cacheable prefix
/// (marked on Anthropic's wire, automatic on OpenAI's). The difference is
/// each step's newest call and result, cached by that step's request and
/// read back by the next.
#[tokio::test]
async fn a_fifty_step_run_keeps_its_input_in_a_cached_prefix() {
    for v in [VARIANTS[0], VARIANTS[2]] {
        for lines in [8, 76] {
            let ws = TestWorkspace::new();
            let (model, r) =
                reading_run_sized(v, &ws, 49, lines, &[], "Collect the readings.").await;
            let usage = &r.done()["usage"];
            let input = usage["input_tokens"].as_u64().unwrap();
            let cached = usage["cached_input_tokens"].as_u64().unwrap();
            let share = cached as f64 / input as f64;
            let tails: u64 = model.requests().iter().map(tail_tokens).sum();
            println!(
                "{v:?}, results of {} bytes: {cached} of {input} input tokens cached ({:.1}%); \
                 {:.1}% before the state tail",
                lines * 27,
                share * 100.0,
                100.0 - tails as f64 * 100.0 / input as f64
            );
            assert!(
                tails > 0 && tails * 10 <= input,
                "{v:?}: tails {tails} of {input}"
            );
            let reads: Vec<u64> = traces(&ws, "response")
                .iter()
                .map(|t| t["cached_input_tokens"].as_u64().unwrap_or(0))
                .collect();
            assert!(reads[1] > 0, "{v:?}: {reads:?}");
            assert!(reads.windows(2).all(|w| w[1] >= w[0]), "{v:?}: {reads:?}");
            if lines > 8 {
                assert!(share >= 0.9, "{v:?}: {:.1}%", share * 100.0);
            }
        }
    }
}

/// A request of about 1,300 tokens (SPEC E3): the tail repeats only its
/// first 200 tokens while the request carries it whole, so it is sent
/// whole once per request, inside the cached prefix, not again after the
/// newest result. Every tail keeps to its 800-token budget.
#[tokio::test]
async fn a_long_request_is_not_repeated_whole_in_every_tail() {
    let prompt = format!(
        "Collect the readings. {}",
        "Report each file's reading on its own line, in file order, and say which files you could not read. "
            .repeat(60)
    );
    for v in [VARIANTS[0], VARIANTS[2]] {
        let ws = TestWorkspace::new();
        let (model, r) = reading_run_sized(v, &ws, 49, 8, &[], &prompt).await;
        let usage = &r.done()["usage"];
        let input = usage["input_tokens"].as_u64().unwrap();
        let cached = usage["cached_input_tokens"].as_u64().unwrap();
        let requests = model.requests();
        let tails: Vec<&str> = requests
            .iter()
            .filter_map(|body| tail_of(body).map(|(_, text)| text))
            .collect();
        assert_eq!(tails.len(), 49);
        for tail in tails {
            assert!(
                tail.contains("Goal: Collect the readings. Report each"),
                "{tail}"
            );
            assert!(
                tail.contains("the whole request is the user's message above"),
                "{tail}"
            );
            assert!(!tail.contains(prompt.trim()));
            assert!(attest_core::state::count_tokens(tail) <= 800);
        }
        println!(
            "{v:?}, a request of {} bytes: {cached} of {input} input tokens cached ({:.1}%)",
            prompt.len(),
            cached as f64 * 100.0 / input as f64
        );
    }
}
