//! Memory with provenance through the real binary (SPEC G1–G4): seed #24
//! end to end, receipt-backed facts and their staleness, secrets never
//! remembered, and the `attest memory` commands.

mod common;

use common::*;
use serde_json::{json, Value};

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn ws_arg(ws: &TestWorkspace) -> String {
    ws.path().display().to_string()
}

fn system_text(v: Variant, request: &Value) -> String {
    match v.wire {
        Wire::OpenAi => request["messages"][0]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        // Blocks (the last a prompt-cache breakpoint), or one string.
        Wire::Anthropic => match request["system"].as_array() {
            Some(blocks) => blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n\n"),
            None => request["system"].as_str().unwrap_or_default().to_string(),
        },
    }
}

/// `attest memory ARGS… -C WS`.
async fn memory(ws: &TestWorkspace, args: &[&str]) -> RunResult {
    let mut all = vec!["memory".to_string()];
    all.extend(args.iter().map(|a| a.to_string()));
    all.extend(["-C".to_string(), ws_arg(ws)]);
    run_binary(all, &[]).await
}

/// Every item, retracted ones included.
async fn items(ws: &TestWorkspace) -> Vec<Value> {
    let out = memory(ws, &["list", "--all", "--json"]).await;
    assert_eq!(out.code, 0, "{}", out.describe());
    serde_json::from_str::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn find<'a>(items: &'a [Value], content: &str) -> &'a Value {
    items
        .iter()
        .find(|i| i["content"] == content)
        .unwrap_or_else(|| panic!("no item `{content}` in {items:#?}"))
}

async fn trace_of(ws: &TestWorkspace, r: &RunResult) -> String {
    let run_id = r.done()["run_id"].as_str().unwrap().to_string();
    let out = run_binary(s(&["trace", &run_id, "-C", &ws_arg(ws)]), &[]).await;
    assert_eq!(out.code, 0, "{}", out.describe());
    out.stdout
}

const API_SKILL: &str = "---\nname: api\ndescription: \"The company API: base URL and authentication\"\n---\nThe API lives at api.right-example.com. Authenticate with a bearer token.\n";

/// Seed 000 #24: the model asserts a wrong domain without a tool call. It
/// must stay a candidate, never reach a later request as a fact, and lose
/// to the skill once there is one.
#[tokio::test]
async fn seed_24_an_asserted_domain_stays_a_candidate_and_the_skill_wins() {
    for v in [VARIANTS[0], VARIANTS[3]] {
        let ws = TestWorkspace::new();
        let load = Call {
            id: "call_skill".into(),
            name: "skill".into(),
            arguments: json!({"name": "api"}).to_string(),
        };
        let model = MockModel::start(
            v,
            vec![
                Turn::text("The API lives at api.wrong-example.com."),
                Turn::text("I do not know where the API lives."),
                Turn::calls("", vec![load]),
                Turn::text("The API lives at api.right-example.com."),
                Turn::text("It is api.right-example.com."),
            ],
        )
        .await;

        // Turn 1: an unbacked assertion, accepted as an answer (answer
        // contract) but remembered only as a candidate.
        let r1 = run_attest(&model, &ws, &["Where does the API live?"]).await;
        assert_eq!(r1.state(), "completed", "{}", r1.describe());
        let all = items(&ws).await;
        let wrong = find(&all, "The API lives at api.wrong-example.com.");
        assert_eq!(wrong["provenance"], "model_inference");
        assert_eq!(wrong["status"], "candidate");
        let t1 = trace_of(&ws, &r1).await;
        assert!(
            t1.contains("memory kept_candidate") && t1.contains("(model_inference)"),
            "{t1}"
        );
        assert!(t1.contains("no successful receipt"), "{t1}");
        assert!(!ws.path().join("MEMORY.md").exists(), "nothing active");

        // Turn 2 (a new session: memory is the only way it could carry
        // over): the wrong domain is nowhere in the request.
        let r2 = run_attest(&model, &ws, &["Which domain does the API use?"]).await;
        assert_eq!(r2.state(), "completed", "{}", r2.describe());
        let req2 = model.requests()[1].to_string();
        assert!(
            !req2.contains("wrong-example"),
            "presented as a fact: {req2}"
        );

        // The skill arrives: the catalog is in the prompt, the memory layer
        // (if any) does not carry the wrong domain, and the model's answer
        // from the loaded skill replaces the inference.
        // (Loading a skill is the harness's own bookkeeping: it satisfies
        // no evidence contract, so this turn asks for a plain answer.)
        ws.write("skills/api/SKILL.md", API_SKILL);
        let r3 = run_attest(&model, &ws, &["Which domain does the API use?"]).await;
        assert_eq!(r3.state(), "completed", "{}", r3.describe());
        let req3 = &model.requests()[2];
        let system3 = system_text(v, req3);
        assert!(system3.contains("# Skills"), "{system3}");
        assert!(
            system3.contains("- api: The company API: base URL and authentication"),
            "{system3}"
        );
        assert!(!req3.to_string().contains("wrong-example"), "{req3}");
        if let Some(at) = system3.find("# Memory") {
            assert!(
                system3[at..].contains("authoritative"),
                "the memory layer must defer to sources: {system3}"
            );
        }
        let all = items(&ws).await;
        assert_eq!(
            find(&all, "The API lives at api.wrong-example.com.")["status"],
            "retracted"
        );
        let right = find(&all, "The API lives at api.right-example.com.");
        assert_eq!(right["provenance"], "skill");
        assert_eq!(right["status"], "active");
        assert_eq!(right["source_ref"]["skill"], "api");
        let t3 = trace_of(&ws, &r3).await;
        assert!(
            t3.contains("memory promoted") && t3.contains("memory retracted"),
            "{t3}"
        );

        // Turn 4: the skill's fact is injected, labelled with the skill.
        let r4 = run_attest(&model, &ws, &["Where does the API live?"]).await;
        assert_eq!(r4.state(), "completed", "{}", r4.describe());
        let system4 = system_text(v, &model.requests()[4]);
        assert!(
            system4.contains("- The API lives at api.right-example.com (from skill `api` on "),
            "{system4}"
        );
        assert!(!model.requests()[4].to_string().contains("wrong-example"));
        let memory_at = system4.find("# Memory").unwrap();
        assert!(
            system4.find("# Skills").unwrap() < memory_at,
            "SPEC D1 order"
        );
        model.assert_valid();
    }
}

/// A fact backed by a receipt is promoted and injected with its source;
/// once the file changes, `verify` marks it stale and it is no longer
/// presented as current.
#[tokio::test]
async fn a_receipt_backed_fact_is_injected_with_provenance_until_its_file_changes() {
    let v = VARIANTS[1];
    let ws = TestWorkspace::new();
    let read = call("read_file", json!({"path": "config.toml"}));
    let read_id = read.id.clone();
    let model = MockModel::start(
        v,
        vec![
            Turn::calls("", vec![read]),
            Turn::text("The port is 8080."),
            Turn::text("Memory says 8080."),
            Turn::text("I would have to read config.toml."),
        ],
    )
    .await;
    let r1 = run_attest(
        &model,
        &ws,
        &["--expect", "observe", "Which port does the server use?"],
    )
    .await;
    assert_eq!(r1.state(), "completed", "{}", r1.describe());
    let all = items(&ws).await;
    let fact = find(&all, "The port is 8080.");
    assert_eq!(fact["provenance"], "tool_receipt");
    assert_eq!(fact["status"], "active");
    assert_eq!(fact["source_ref"]["call_id"], read_id.as_str());
    assert_eq!(fact["source_ref"]["path"], "config.toml");
    let sha = fact["source_ref"]["sha256"].as_str().unwrap().to_string();
    assert_eq!(sha.len(), 64);
    let projection = std::fs::read_to_string(ws.path().join("MEMORY.md")).unwrap();
    assert!(
        projection.starts_with("<!-- Generated by attest"),
        "{projection}"
    );
    assert!(
        projection.contains("- The port is 8080. _(from a tool result on "),
        "{projection}"
    );

    let r2 = run_attest(&model, &ws, &["Which port does the server listen on?"]).await;
    assert_eq!(r2.state(), "completed", "{}", r2.describe());
    let system2 = system_text(v, &model.requests()[2]);
    assert!(
        system2.contains(&format!(
            "- The port is 8080 (from a tool result on {} (config.toml, sha256 {}…))",
            chrono_today(),
            &sha[..8]
        )),
        "{system2}"
    );
    assert!(trace_of(&ws, &r2).await.contains("memory injected"));

    ws.write("config.toml", "[server]\nport = 9090\n");
    let out = memory(&ws, &["verify"]).await;
    assert_eq!(out.code, 0, "{}", out.describe());
    assert!(
        out.stdout.contains("stale") && out.stdout.contains("config.toml changed"),
        "{}",
        out.stdout
    );
    let all = items(&ws).await;
    assert_eq!(find(&all, "The port is 8080.")["status"], "stale");
    let projection = std::fs::read_to_string(ws.path().join("MEMORY.md")).unwrap();
    assert!(
        !projection.contains("8080"),
        "stale is not current: {projection}"
    );

    let r3 = run_attest(&model, &ws, &["Which port does the server listen on?"]).await;
    assert_eq!(r3.state(), "completed", "{}", r3.describe());
    let request3 = model.requests()[3].to_string();
    assert!(
        !request3.contains("8080"),
        "stale value presented: {request3}"
    );
    let system3 = system_text(v, &model.requests()[3]);
    assert!(
        system3.contains("config.toml has changed since. Read config.toml"),
        "{system3}"
    );
    assert!(trace_of(&ws, &r3).await.contains("memory deferred"));
    model.assert_valid();
}

/// The date labels use (UTC).
fn chrono_today() -> String {
    chrono::Utc::now().format("%Y-%m-%d").to_string()
}

/// The run's memory decisions, as JSON text.
async fn memory_decisions(ws: &TestWorkspace, r: &RunResult) -> String {
    let run_id = r.done()["run_id"].as_str().unwrap().to_string();
    let out = run_binary(s(&["trace", &run_id, "--json", "-C", &ws_arg(ws)]), &[]).await;
    let doc: Value = serde_json::from_str(&out.stdout).unwrap();
    let decisions: Vec<&Value> = doc["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["trace"]["record"] == "memory_decision")
        .collect();
    serde_json::to_string(&decisions).unwrap()
}

fn run_args(model: &MockModel, ws: &TestWorkspace, prompt: &str) -> Vec<String> {
    s(&[
        "run",
        "--json",
        "--provider",
        "openai",
        "--base-url",
        &model.base_url(),
        "--model",
        "m",
        "--no-stream",
        "-C",
        &ws_arg(ws),
        prompt,
    ])
}

fn store_bytes_contain(ws: &TestWorkspace, needle: &str) -> Option<String> {
    for suffix in ["", "-wal", "-shm"] {
        let path = ws.path().join(format!(".attest/attest.db{suffix}"));
        if let Ok(bytes) = std::fs::read(&path) {
            if String::from_utf8_lossy(&bytes).contains(needle) {
                return Some(path.display().to_string());
            }
        }
    }
    None
}

/// Secrets never become memory: a configured key is scrubbed before
/// anything is stored, and a key-shaped value the user asks to remember is
/// refused by memory itself — while the harmless statement beside it is
/// remembered.
#[tokio::test]
async fn secrets_in_user_statements_never_become_memory() {
    const CONFIGURED: &str = "sk-canary-configured-7c1e4a9b";
    const UNCONFIGURED: &str = "sk-canary-unconfigured-4f2a9c81";
    let ws = TestWorkspace::new();
    let model = MockModel::start(
        VARIANTS[0],
        vec![
            Turn::text("Noted."),
            Turn::text("Noted."),
            Turn::text("I have no key on record."),
        ],
    )
    .await;
    let r1 = run_binary(
        run_args(
            &model,
            &ws,
            &format!("Remember that my key is {CONFIGURED}. I prefer short answers."),
        ),
        &[("OPENAI_API_KEY", CONFIGURED)],
    )
    .await;
    assert_eq!(r1.state(), "completed", "{}", r1.describe());
    let r2 = run_binary(
        run_args(
            &model,
            &ws,
            &format!("Remember that my backup key is {UNCONFIGURED}."),
        ),
        &[],
    )
    .await;
    assert_eq!(r2.state(), "completed", "{}", r2.describe());
    let r3 = run_binary(run_args(&model, &ws, "What is my backup key?"), &[]).await;
    assert_eq!(r3.state(), "completed", "{}", r3.describe());

    let all = items(&ws).await;
    assert_eq!(
        find(&all, "I prefer short answers.")["provenance"],
        "user_explicit"
    );
    let memory_json = serde_json::to_string(&all).unwrap();
    let projection = std::fs::read_to_string(ws.path().join("MEMORY.md")).unwrap();
    // The prompts themselves are in the run log (the engine scrubs only
    // configured keys); what memory traces about them is redacted.
    let t1 = memory_decisions(&ws, &r1).await;
    let t2 = memory_decisions(&ws, &r2).await;
    assert!(
        t1.contains("\"rejected\"") && t2.contains("\"rejected\""),
        "{t1}\n{t2}"
    );
    for canary in [CONFIGURED, UNCONFIGURED] {
        assert!(!memory_json.contains(canary), "{memory_json}");
        assert!(!projection.contains(canary), "{projection}");
        assert!(!t1.contains(canary) && !t2.contains(canary));
        // The next run is a new session: only memory could carry it.
        assert!(
            !model.requests()[2].to_string().contains(canary),
            "{canary} reached a later request"
        );
    }
    assert!(!memory_json.contains("REDACTED"), "{memory_json}");
    // The configured key is scrubbed from everything the run stores.
    assert_eq!(store_bytes_contain(&ws, CONFIGURED), None);
    assert!(!model.request_text(0).contains(CONFIGURED));
    model.assert_valid();
}

/// `import` makes legacy candidates; `promote` lets the user vouch; hand
/// edits of MEMORY.md are imported only after confirmation; `retract`
/// withdraws.
#[tokio::test]
async fn memory_commands_import_promote_sync_and_retract() {
    let ws = TestWorkspace::new();
    let legacy = ws.write(
        "old-memory.md",
        "# Old memory\n- The API lives at api.legacy-example.com\n- token = sk-canary-legacy-5b8d2f7e91\n",
    );
    let out = memory(&ws, &["import", &legacy.display().to_string()]).await;
    assert_eq!(out.code, 0, "{}", out.describe());
    assert!(out.stdout.contains("imported 1 item(s)"), "{}", out.stdout);
    assert!(out.stdout.contains("refused"), "{}", out.stdout);
    assert!(!out.stdout.contains("sk-canary-legacy"), "{}", out.stdout);
    let all = items(&ws).await;
    assert_eq!(all.len(), 1, "{all:#?}");
    let item = find(&all, "The API lives at api.legacy-example.com");
    assert_eq!(item["provenance"], "legacy_unverified");
    assert_eq!(item["status"], "candidate");
    let id = item["id"].as_str().unwrap().to_string();

    // A legacy candidate is never injected.
    let model =
        MockModel::start(VARIANTS[0], vec![Turn::text("Not sure."), Turn::text("ok")]).await;
    let r = run_attest(&model, &ws, &["Where does the API live?"]).await;
    assert_eq!(r.state(), "completed", "{}", r.describe());
    assert!(!model.requests()[0].to_string().contains("legacy-example"));

    let out = memory(&ws, &["show", &id[..8]]).await;
    assert!(
        out.stdout.contains("legacy_unverified") && out.stdout.contains("import of old-memory.md"),
        "{}",
        out.stdout
    );
    let out = memory(&ws, &["promote", &id[..8]]).await;
    assert_eq!(out.code, 0, "{}", out.describe());
    let all = items(&ws).await;
    let item = find(&all, "The API lives at api.legacy-example.com");
    assert_eq!(item["provenance"], "user_explicit");
    assert_eq!(item["status"], "active");
    let md = ws.path().join("MEMORY.md");
    let projection = std::fs::read_to_string(&md).unwrap();
    assert!(
        projection.contains("api.legacy-example.com _(vouched for by the user on "),
        "{projection}"
    );

    // A hand edit: imported only with confirmation (no terminal here).
    std::fs::write(&md, format!("{projection}- I prefer tabs over spaces.\n")).unwrap();
    let out = memory(&ws, &["sync"]).await;
    assert_eq!(out.code, 2, "{}", out.describe());
    assert!(out.stderr.contains("--yes"), "{}", out.stderr);
    assert!(
        !serde_json::to_string(&items(&ws).await)
            .unwrap()
            .contains("tabs"),
        "imported without confirmation"
    );
    // A run does not overwrite the pending edit.
    let r = run_attest(&model, &ws, &["hello"]).await;
    assert_eq!(r.state(), "completed", "{}", r.describe());
    assert!(std::fs::read_to_string(&md)
        .unwrap()
        .contains("I prefer tabs over spaces."));

    let out = memory(&ws, &["sync", "--yes"]).await;
    assert_eq!(out.code, 0, "{}", out.describe());
    let all = items(&ws).await;
    let tabs = find(&all, "I prefer tabs over spaces.");
    assert_eq!(tabs["provenance"], "user_explicit");
    assert_eq!(tabs["status"], "active");
    assert_eq!(tabs["kind"], "preference");
    let projection = std::fs::read_to_string(&md).unwrap();
    assert!(
        projection.contains("- I prefer tabs over spaces. _(stated by the user on "),
        "{projection}"
    );

    let out = memory(&ws, &["retract", tabs["id"].as_str().unwrap()]).await;
    assert_eq!(out.code, 0, "{}", out.describe());
    assert!(!std::fs::read_to_string(&md).unwrap().contains("tabs"));
    let out = memory(&ws, &["list"]).await;
    assert!(
        !out.stdout.contains("tabs"),
        "retracted items are listed only with --all"
    );
    let out = memory(&ws, &["show", "mem-nope"]).await;
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("no memory item matches"),
        "{}",
        out.stderr
    );
}
