//! Several `attest serve` processes on one PostgreSQL database, through
//! the real binary on loopback against a scripted model server: any
//! server works on any run, a server that dies is taken over without a
//! call executed twice, a paused worker's writes are fenced off, and an
//! approval waiting on one server is decided through another.

mod common;
#[path = "../../attest-store/tests/pg/mod.rs"]
mod pg;

use common::server::*;
use common::signing::{now, standard_headers};
use common::{MockModel, Turn, Variant, Wire};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const NO_STREAM: Variant = Variant {
    wire: Wire::OpenAi,
    stream: false,
};

/// A command tool that counts its executions in the run's workspace.
const COUNTER: &str = "[[tools]]\nname = \"bump\"\ndescription = \"Count one\"\n\
effect = \"mutate\"\npermission = \"allow\"\n\
command = [\"sh\", \"-c\", \"cat >/dev/null; echo x >> count.txt; printf '{\\\"counted\\\": true}'\"]\n";

/// Whether the request carries a tool result (the harness may add its
/// state after it).
fn after_tool(request: &Value) -> bool {
    request["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"))
}

/// A shared server directory: its config names the database (and the
/// rest of `[server]` after `extra`), then `tail` (tools, more tables).
fn cluster_dir(model: &MockModel, db: &pg::TestDb, extra: &str, tail: &str) -> ServerDir {
    let dir = ServerDir::new(
        model,
        &format!("database_url = \"{}\"\nlease_secs = 3\n{extra}", db.url),
    );
    if !tail.is_empty() {
        let mut text = std::fs::read_to_string(dir.config()).unwrap();
        text.push('\n');
        text.push_str(tail);
        std::fs::write(dir.config(), text).unwrap();
    }
    dir
}

/// The secret signed decisions to `/v1/hooks/generic` are checked with.
const HOOK_SECRET: &str = "whsec_YXR0ZXN0LWNsdXN0ZXItaG9vay1zZWNyZXQhIQ==";

fn start(dir: &ServerDir, db: &pg::TestDb) -> Server {
    // The URL on the command line wins over the file's (the same here).
    Server::start_env(
        dir,
        &["--database-url", &db.url],
        &[("ATTEST_TEST_HOOK_SECRET", HOOK_SECRET)],
    )
}

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

async fn all_ended(
    server: &Server,
    token: Option<&str>,
    ids: &[String],
    within: Duration,
) -> Vec<Value> {
    let deadline = Instant::now() + within;
    loop {
        let mut runs = Vec::new();
        for id in ids {
            runs.push(get_json(server, token, &format!("/v1/runs/{id}")).await);
        }
        if runs
            .iter()
            .all(|r| !matches!(r["state"].as_str(), Some("queued" | "running")))
        {
            return runs;
        }
        let open: Vec<&Value> = runs
            .iter()
            .filter(|r| matches!(r["state"].as_str(), Some("queued" | "running")))
            .collect();
        assert!(
            Instant::now() < deadline,
            "{} runs did not end, e.g. {}",
            open.len(),
            open[0]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_killed_server_s_runs_are_finished_by_the_other_without_any_call_executed_twice() {
    let db = pg::TestDb::new();
    let model = MockModel::reactive(NO_STREAM, |request| {
        let turn = if after_tool(request) {
            Turn::text("Counted.")
        } else {
            Turn::tool("bump", json!({}))
        };
        Turn::Delayed {
            delay: Duration::from_millis(300),
            turn: Box::new(turn),
        }
    })
    .await;
    let dir = cluster_dir(&model, &db, "", COUNTER);
    let a = start(&dir, &db);
    let b = start(&dir, &db);

    let mut ids = Vec::new();
    for i in 0..40 {
        let body = json!({"prompt": "Count one.", "workspace": format!("w{i:02}")});
        let submitted = submit(&a, None, body).await;
        ids.push(submitted["run_id"].as_str().unwrap().to_string());
    }
    // Watch one run on A's stream until it has begun.
    let watched = ids[0].clone();
    let first = events(
        &read_sse(
            &a.url(&format!("/v1/runs/{watched}/events")),
            None,
            None,
            |m| !events(m).is_empty(),
        )
        .await,
    );
    let last_seen = first.last().unwrap().0;

    // Kill A once some calls have run and while runs are in flight.
    let deadline = Instant::now() + Duration::from_secs(30);
    while (0..40)
        .filter(|i| {
            dir.workspace(&format!("w{i:02}"))
                .join("count.txt")
                .exists()
        })
        .count()
        < 5
    {
        assert!(Instant::now() < deadline, "no tool ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.kill();

    // B's stream continues A's exactly.
    let rest = events(
        &read_sse(
            &b.url(&format!("/v1/runs/{watched}/events")),
            None,
            Some(last_seen),
            |_| false,
        )
        .await,
    );
    let mut all = first.clone();
    all.extend(rest);
    let ids_seen: Vec<i64> = all.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        ids_seen,
        (1..=all.len() as i64).collect::<Vec<_>>(),
        "nothing lost or repeated: {:?}",
        types(&all)
    );
    assert_eq!(types(&all).last().unwrap(), "done");

    let runs = all_ended(&b, None, &ids, Duration::from_secs(90)).await;
    let mut taken_over = 0;
    for (i, run) in runs.iter().enumerate() {
        let id = run["run_id"].as_str().unwrap();
        let count = lines(&dir.workspace(&format!("w{i:02}")).join("count.txt"));
        assert!(count <= 1, "run {id}: the call ran {count} times");
        let receipts: Vec<&Value> = run["receipts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["tool_name"] == "bump" && r["status"] == "ok")
            .collect();
        // A call whose result was recorded ran once; one interrupted by
        // the kill has no ok receipt and was never run again.
        assert!(receipts.len() <= count, "run {id}: {run}");
        let trace = get_json(&b, None, &format!("/v1/runs/{id}/trace")).await;
        assert_eq!(trace["chain"], "intact", "{trace}");
        let resumed = trace["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"]["type"] == "run_resumed");
        if resumed {
            taken_over += 1;
        } else {
            // Never interrupted: the call ran, the answer came.
            assert_eq!(run["state"], "completed", "{run}");
            assert_eq!(count, 1, "run {id}");
        }
    }
    assert!(taken_over > 0, "the kill interrupted no run");
    model.assert_valid();
}

#[tokio::test]
async fn a_paused_worker_whose_lease_was_taken_over_cannot_write_to_the_run() {
    let db = pg::TestDb::new();
    let slow = "[[tools]]\nname = \"slow_bump\"\ndescription = \"Count one, slowly\"\n\
effect = \"mutate\"\npermission = \"allow\"\ntimeout_ms = 60000\n\
command = [\"sh\", \"-c\", \"cat >/dev/null; echo started > started.txt; sleep 6; echo x >> count.txt; printf '{\\\"counted\\\": true}'\"]\n";
    let model = MockModel::reactive(NO_STREAM, |request| {
        if after_tool(request) {
            Turn::text("Done counting.")
        } else {
            Turn::tool("slow_bump", json!({}))
        }
    })
    .await;
    let dir = cluster_dir(&model, &db, "", slow);
    let a = start(&dir, &db);
    let submitted = submit(&a, None, json!({"prompt": "Count.", "workspace": "w"})).await;
    let run_id = submitted["run_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !dir.workspace("w").join("started.txt").exists() {
        assert!(Instant::now() < deadline, "the tool never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A stalls mid-call; B takes the run over once A's lease runs out.
    a.signal("STOP");
    let b = start(&dir, &db);
    let ended = all_ended(
        &b,
        None,
        std::slice::from_ref(&run_id),
        Duration::from_secs(60),
    )
    .await;
    let trace = get_json(&b, None, &format!("/v1/runs/{run_id}/trace")).await;
    let before = trace["entries"].as_array().unwrap().len();
    assert!(
        trace["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"]["type"] == "run_resumed"),
        "{trace}"
    );

    // A wakes up: its tool finishes, but nothing it writes lands.
    a.signal("CONT");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !a.stderr_text().contains("was taken over") {
        assert!(
            Instant::now() < deadline,
            "A never noticed: {}",
            a.stderr_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = get_json(&b, None, &format!("/v1/runs/{run_id}/trace")).await;
    assert_eq!(
        after["entries"].as_array().unwrap().len(),
        before,
        "{after}"
    );
    assert_eq!(after["chain"], "intact");
    let run = get_json(&b, None, &format!("/v1/runs/{run_id}")).await;
    assert_eq!(run, ended[0], "the run is as B left it");
    // The interrupted call was never run again.
    assert!(lines(&dir.workspace("w").join("count.txt")) <= 1);
    assert!(!run["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["status"] == "ok"));
}

/// Decide `call_id` over `server`'s API; the status.
async fn decide(server: &Server, token: &str, call_id: &str, decision: &str) -> u16 {
    client()
        .post(server.url(&format!("/v1/approvals/{call_id}")))
        .bearer_auth(token)
        .json(&json!({"decision": decision}))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn an_approval_waiting_on_one_server_is_decided_through_another_s_api_and_signed_callback() {
    let db = pg::TestDb::new();
    let model = MockModel::reactive(NO_STREAM, |request| {
        if after_tool(request) {
            Turn::text("Created it.")
        } else {
            Turn::tool("shell", json!({"command": "touch approved.txt"}))
        }
    })
    .await;
    let dir = cluster_dir(
        &model,
        &db,
        "approval_timeout_secs = 60\n",
        "[server.hooks]\ngeneric_secret_env = \"ATTEST_TEST_HOOK_SECRET\"\n",
    );
    let alice = dir.token_with(
        "alice",
        "runs:read,runs:write,approvals:read,approvals:write",
        &["--database-url", &db.url],
    );
    let a = start(&dir, &db);
    let submitted = submit(
        &a,
        Some(&alice),
        json!({"prompt": "Create it.", "workspace": "w"}),
    )
    .await;
    let run_id = submitted["run_id"].as_str().unwrap().to_string();
    // Only A runs: the run waits there. B lists and decides it.
    let b = start(&dir, &db);
    let deadline = Instant::now() + Duration::from_secs(30);
    let pending = loop {
        let list = get_json(&b, Some(&alice), "/v1/approvals").await;
        if let Some(first) = list.as_array().unwrap().first() {
            break first.clone();
        }
        assert!(Instant::now() < deadline, "no approval reached B");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(pending["run_id"], run_id.as_str());
    assert_eq!(pending["arguments"]["command"], "touch approved.txt");
    assert!(!dir.workspace("w").join("approved.txt").exists());
    let call_id = pending["call_id"].as_str().unwrap();
    assert_eq!(decide(&b, &alice, call_id, "allow").await, 200);
    let run = all_ended(
        &a,
        Some(&alice),
        std::slice::from_ref(&run_id),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(run[0]["state"], "completed", "{}", run[0]);
    assert!(dir.workspace("w").join("approved.txt").exists());
    // Decided once, on every server.
    assert_eq!(decide(&a, &alice, call_id, "deny").await, 404);
    let resolved = run_events(&b, Some(&alice), &run_id).await;
    let resolution = resolved
        .iter()
        .find(|(_, e)| e["type"] == "approval_resolved")
        .expect("approval_resolved")
        .1
        .clone();
    assert_eq!(resolution["approved"], true);
    assert_eq!(resolution["decided_by"], "alice");

    // A second run waits on A; a signed callback to B decides it.
    let submitted = submit(
        &a,
        Some(&alice),
        json!({"prompt": "Create it.", "workspace": "w2"}),
    )
    .await;
    let run_id = submitted["run_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let call_id = loop {
        let list = get_json(&b, Some(&alice), "/v1/approvals").await;
        if let Some(p) = list
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["run_id"] == run_id.as_str())
        {
            break p["call_id"].as_str().unwrap().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "the second approval never reached B"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let body =
        json!({"call_id": call_id, "run_id": run_id, "decision": "allow", "decided_by": "bob"})
            .to_string();
    let hook = |headers: Vec<(&'static str, String)>| {
        let mut req = client().post(b.url("/v1/hooks/generic")).body(body.clone());
        for (k, v) in headers {
            req = req.header(k, v);
        }
        req.send()
    };
    let forged = standard_headers(
        "whsec_bm90LXRoZS1zZXJ2ZXJzLXNlY3JldC1hdC1hbGwhIQ==",
        "msg_forged",
        now(),
        &body,
    );
    assert_eq!(hook(forged).await.unwrap().status(), 401);
    let stale = standard_headers(HOOK_SECRET, "msg_stale", now() - 600, &body);
    assert_eq!(hook(stale).await.unwrap().status(), 401);
    assert!(
        !dir.workspace("w2").join("approved.txt").exists(),
        "refused callbacks decide nothing"
    );
    let signed = standard_headers(HOOK_SECRET, "msg_cluster_1", now(), &body);
    assert_eq!(hook(signed.clone()).await.unwrap().status(), 200);
    let run = all_ended(
        &a,
        Some(&alice),
        std::slice::from_ref(&run_id),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(run[0]["state"], "completed", "{}", run[0]);
    assert!(dir.workspace("w2").join("approved.txt").exists());
    // The same delivery replayed: refused.
    assert_eq!(hook(signed).await.unwrap().status(), 401);
}
