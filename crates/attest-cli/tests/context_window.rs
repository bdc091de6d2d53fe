//! Compaction sized from the model's context window (issue 19, SPEC P2),
//! through the real binary against the scripted model server: a long run
//! compacts within the window, and a call whose result was compacted away
//! runs again instead of being refused as "already returned".

mod common;

use common::*;
use serde_json::{json, Value};

const STEPS: usize = 120;

/// Files the long run reads, each a few hundred bytes.
fn write_files(ws: &TestWorkspace) {
    ws.write("notes.txt", "the deploy key rotates every 90 days\n");
    for i in 0..STEPS {
        let body: String = (0..6)
            .map(|l| format!("file {i} line {l}: measurements of sensor {i}.{l} were nominal\n"))
            .collect();
        ws.write(&format!("data/f{i:03}.txt"), &body);
    }
}

#[tokio::test]
async fn a_long_run_compacts_within_the_window_and_rereads_what_was_archived() {
    for v in VARIANTS {
        let ws = TestWorkspace::new();
        write_files(&ws);
        ws.append_config("[provider]\ncontext_window = 16000\nmax_tokens = 1024\n");
        // Step 1 reads notes.txt, steps 2..=118 read a new file each, step
        // 119 reads notes.txt again, step 120 answers.
        let first = call("read_file", json!({"path": "notes.txt"}));
        let again = call("read_file", json!({"path": "notes.txt"}));
        let (first_id, again_id) = (first.id.clone(), again.id.clone());
        let mut turns = vec![Turn::calls("", vec![first])];
        for i in 0..STEPS - 3 {
            turns.push(Turn::tool(
                "read_file",
                json!({"path": format!("data/f{i:03}.txt")}),
            ));
        }
        turns.push(Turn::calls("", vec![again]));
        turns.push(Turn::text("The deploy key rotates every 90 days."));
        let model = MockModel::start(v, turns).await;
        let r = run_attest(
            &model,
            &ws,
            &[
                "--expect",
                "observe",
                "--max-steps",
                "120",
                "How often does the deploy key rotate?",
            ],
        )
        .await;
        model.assert_valid();
        assert_eq!(r.code, 0, "{v:?} {}", r.describe());
        assert_eq!(r.state(), "completed", "{v:?}");
        assert_eq!(r.reason(), "contract_satisfied");
        assert!(
            !r.stderr.contains("is not known"),
            "a configured window needs no note: {}",
            r.stderr
        );

        let compactions = r.of_type("compacted");
        assert!(!compactions.is_empty(), "{v:?}: the run never compacted");
        // Compaction starts from the window: 80% of 16,000 less the 1,024
        // reserved for output and the prefix, never the old fixed 24,000.
        for c in &compactions {
            let before = c["history_tokens_before"].as_u64().unwrap();
            assert!(before < 12_800 - 1_024, "{v:?}: compacted at {before}");
        }

        // Every call ran: none was refused as already answered.
        let receipts = r.done()["receipts"].as_array().unwrap();
        assert_eq!(receipts.len(), STEPS - 1, "{v:?}");
        assert!(
            receipts.iter().all(|r| r["status"] == "ok"),
            "{v:?}: {:?}",
            receipts
                .iter()
                .filter(|r| r["status"] != "ok")
                .collect::<Vec<_>>()
        );
        let rerun = receipts.iter().find(|r| r["call_id"] == again_id.as_str());
        assert_eq!(rerun.unwrap()["tool_name"], "read_file");

        // The last request carries the second read's real result, and tells
        // the model why it ran again; the first read's result is not in it.
        let last = model.requests().len() - 1;
        let results = model.tool_results(last);
        let (_, text, is_error) = results
            .iter()
            .find(|(id, _, _)| id == &again_id)
            .unwrap_or_else(|| panic!("{v:?}: no result of {again_id}"));
        assert!(!is_error);
        assert!(
            text.starts_with(&format!(
                "[attest] the result of the identical call {first_id} was compacted out"
            )),
            "{v:?}: {text}"
        );
        assert!(text.contains("rotates every 90 days"), "{v:?}: {text}");
        assert!(results.iter().all(|(id, _, _)| id != &first_id));
        // Requests stayed within the window after each compaction: a
        // generous bytes-per-token bound on the whole body.
        for (i, body) in model.requests().iter().enumerate() {
            let bytes = body.to_string().len();
            assert!(bytes < 16_000 * 4, "{v:?}: request {i} is {bytes} bytes");
        }
    }
}

#[tokio::test]
async fn an_unknown_model_gets_128k_with_a_note_and_a_repeat_still_in_view_is_refused() {
    let v = VARIANTS[0];
    let ws = TestWorkspace::new();
    ws.write("notes.txt", "the deploy key rotates every 90 days\n");
    let model = MockModel::start(
        v,
        vec![
            Turn::tool("read_file", json!({"path": "notes.txt"})),
            Turn::tool("read_file", json!({"path": "notes.txt"})),
            Turn::text("Every 90 days."),
        ],
    )
    .await;
    let r = run_attest(&model, &ws, &["--expect", "observe", "How often?"]).await;
    model.assert_valid();
    assert_eq!(r.state(), "completed", "{}", r.describe());
    let notes: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains("context window"))
        .collect();
    assert_eq!(
        notes,
        ["attest: the context window of model `test-model` is not known; assuming 128000 tokens (set [provider] context_window)"]
    );
    assert!(r.of_type("compacted").is_empty());
    // The first result is still in the request: the repeat is refused.
    let statuses: Vec<&Value> = r.done()["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["status"])
        .collect();
    assert_eq!(statuses, [&json!("ok"), &json!("skipped")]);
    let results = model.tool_results(2);
    assert!(
        results[1].1.contains("already returned its result"),
        "{results:?}"
    );
}
