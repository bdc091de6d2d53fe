//! `attest serve` through the real binary on loopback, against the scripted
//! model server: runs submitted over HTTP stream their stored events over
//! SSE (resuming exactly with Last-Event-ID, also across SIGKILL and a
//! restart), approvals are decided over the API, and every endpoint checks
//! its bearer token and scope.

mod common;

use common::server::*;
use common::{MockModel, Turn, Variant, Wire};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const NO_STREAM: Variant = Variant {
    wire: Wire::OpenAi,
    stream: false,
};

#[tokio::test]
async fn a_run_streams_to_done_and_last_event_id_resumes_exactly_across_sigkill_and_restart() {
    let model = MockModel::start(
        NO_STREAM,
        vec![
            Turn::tool("read_file", json!({"path": "config.toml"})),
            // The server is killed while this response is on its way.
            Turn::Delayed {
                delay: Duration::from_secs(4),
                turn: Box::new(Turn::text("lost with the server")),
            },
            Turn::text("The port is 8080."),
        ],
    )
    .await;
    let dir = ServerDir::new(&model, "");
    let ws = dir.workspace("proj");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("config.toml"), "port = 8080\n").unwrap();
    let server = Server::start(&dir);
    let submitted = submit(
        &server,
        None,
        json!({"prompt": "Which port does config.toml set?", "expect": "observe", "workspace": "proj"}),
    )
    .await;
    let run_id = submitted["run_id"].as_str().unwrap().to_string();
    let url = server.url(&format!("/v1/runs/{run_id}/events"));

    // Two subscribers at once, up to the tool's result.
    let until_result = |m: &[Sse]| types(&events(m)).iter().any(|t| t == "tool_result");
    let (a, b) = tokio::join!(
        read_sse(&url, None, None, until_result),
        read_sse(&url, None, None, until_result)
    );
    let (a, b) = (events(&a), events(&b));
    assert_eq!(a, b, "two subscribers see the same sequence");
    for (id, event) in &a {
        assert_eq!(
            *id,
            event["seq"].as_i64().unwrap(),
            "id: is the event's seq"
        );
        assert_eq!(event["run_id"], run_id.as_str());
    }
    assert_eq!(types(&a)[0], "run_started");
    let seen_before_kill = a.clone();
    let last_before = a.last().unwrap().0;

    // SIGKILL while the second model call is in flight (the mock has it,
    // and holds its answer back); restart.
    let deadline = Instant::now() + Duration::from_secs(30);
    while model.requests().len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the second model call never came"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.kill();
    let server = Server::start(&dir);
    let url = server.url(&format!("/v1/runs/{run_id}/events"));
    let rest = events(&read_sse(&url, None, Some(last_before), |_| false).await);
    assert!(!rest.is_empty());
    assert!(
        rest.iter().all(|(id, _)| *id > last_before),
        "nothing repeated"
    );
    let mut all = seen_before_kill.clone();
    all.extend(rest.clone());
    let ids: Vec<i64> = all.iter().map(|(id, _)| *id).collect();
    let expected: Vec<i64> = (1..=ids.len() as i64).collect();
    assert_eq!(
        ids,
        expected,
        "nothing lost, nothing repeated: {:?}",
        types(&all)
    );
    let kinds = types(&rest);
    assert!(kinds.contains(&"run_resumed".to_string()), "{kinds:?}");
    assert_eq!(kinds.last().unwrap(), "done");
    let done = &rest.last().unwrap().1;
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["answer"], "The port is 8080.");

    // From the middle again, after the restart: exactly the later events.
    let middle = all[all.len() / 2].0;
    let later = events(&read_sse(&url, None, Some(middle), |_| false).await);
    assert_eq!(later, all[all.len() / 2 + 1..].to_vec());
    // A channel that shows outcomes only.
    let outcomes = events(
        &read_sse(
            &server.url(&format!("/v1/runs/{run_id}/events?kinds=final,done")),
            None,
            None,
            |_| false,
        )
        .await,
    );
    assert_eq!(types(&outcomes), vec!["final", "done"]);

    // The run's view and trace.
    let run = wait_for_end(&server, None, &run_id).await;
    assert_eq!(run["state"], "completed");
    assert_eq!(run["reason"], "contract_satisfied", "{run}");
    assert_eq!(run["receipts"][0]["tool_name"], "read_file", "{run}");
    assert!(!run["basis"].as_str().unwrap().is_empty());
    let trace = get_json(&server, None, &format!("/v1/runs/{run_id}/trace")).await;
    assert_eq!(trace["chain"], "intact", "{trace}");
    // The model was asked three times: the lost request was asked again.
    assert_eq!(model.requests().len(), 3);
    model.assert_valid();

    // The session's stream carries the same events and stays open with
    // heartbeats.
    let session = submitted["session_id"].as_str().unwrap();
    let messages = read_sse(
        &server.url(&format!("/v1/sessions/{session}/events")),
        None,
        None,
        |m| m.iter().any(|x| matches!(x, Sse::Comment(_))),
    )
    .await;
    let session_events = events(&messages);
    assert_eq!(
        session_events
            .iter()
            .map(|(_, e)| e.clone())
            .collect::<Vec<_>>(),
        all.iter().map(|(_, e)| e.clone()).collect::<Vec<_>>()
    );
    assert!(messages.contains(&Sse::Comment("heartbeat".into())));
    // Session ids are log positions: resuming from one gives the rest.
    let third = session_events[2].0;
    let resumed = events(
        &read_sse(
            &server.url(&format!("/v1/sessions/{session}/events")),
            None,
            Some(third),
            |m| m.iter().any(|x| matches!(x, Sse::Comment(_))),
        )
        .await,
    );
    assert_eq!(resumed, session_events[3..].to_vec());
}

/// Polls `/v1/approvals` until one is pending.
async fn pending_approval(server: &Server, token: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let list = get_json(server, Some(token), "/v1/approvals?state=pending").await;
        if let Some(first) = list.as_array().unwrap().first() {
            return first.clone();
        }
        assert!(Instant::now() < deadline, "no approval was requested");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn decide(server: &Server, token: &str, call_id: &str, body: Value) -> reqwest::Response {
    client()
        .post(server.url(&format!("/v1/approvals/{call_id}")))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap()
}

fn resolved(events: &[(i64, Value)]) -> Value {
    events
        .iter()
        .map(|(_, e)| e)
        .find(|e| e["type"] == "approval_resolved")
        .cloned()
        .expect("an approval_resolved event")
}

#[tokio::test]
async fn approvals_are_listed_and_decided_over_the_api_and_a_timeout_denies() {
    let model = MockModel::start(
        NO_STREAM,
        vec![
            Turn::tool("shell", json!({"command": "touch allowed.txt"})),
            Turn::text("Created it."),
            Turn::tool("shell", json!({"command": "touch denied.txt"})),
            Turn::text("It was refused."),
            Turn::tool("shell", json!({"command": "touch late.txt"})),
            Turn::text("Nobody answered."),
        ],
    )
    .await;
    // Long enough that a loaded machine's decisions are never overtaken by
    // the timeout, which is tried on a server of its own below.
    let dir = ServerDir::new(&model, "approval_timeout_secs = 300\n");
    let scopes = "runs:read,runs:write,approvals:read,approvals:write";
    let alice = dir.token("alice", scopes);
    let server = Server::start(&dir);
    let run =
        |workspace: &'static str| json!({"prompt": "Create the file.", "workspace": workspace});

    // Allowed: the command runs.
    let first = submit(&server, Some(&alice), run("allow")).await;
    let run_id = first["run_id"].as_str().unwrap();
    let pending = pending_approval(&server, &alice).await;
    assert_eq!(pending["run_id"], run_id);
    assert_eq!(pending["tool"], "shell");
    assert_eq!(pending["arguments"]["command"], "touch allowed.txt");
    assert!(!pending["rule"].as_str().unwrap().is_empty(), "{pending}");
    assert!(pending["requested_at"].as_str().unwrap().starts_with("20"));
    let call_id = pending["call_id"].as_str().unwrap();
    assert!(
        !dir.workspace("allow").join("allowed.txt").exists(),
        "nothing runs before the decision"
    );
    let resp = decide(
        &server,
        &alice,
        call_id,
        json!({"decision": "allow", "scope": "once"}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let decided: Value = resp.json().await.unwrap();
    assert_eq!(decided["decided_by"], "alice");
    let all = run_events(&server, Some(&alice), run_id).await;
    let resolution = resolved(&all);
    assert_eq!(resolution["approved"], true);
    assert_eq!(resolution["decided_by"], "alice");
    assert_eq!(resolution["via"], "api");
    assert!(resolution["ts"].as_str().is_some());
    assert!(dir.workspace("allow").join("allowed.txt").exists());
    // Decided once: deciding again finds nothing pending.
    let again = decide(&server, &alice, call_id, json!({"decision": "deny"})).await;
    assert_eq!(again.status(), 404);

    // Denied with a message: the command never ran, the model was told.
    let second = submit(&server, Some(&alice), run("deny")).await;
    let run_id = second["run_id"].as_str().unwrap();
    let pending = pending_approval(&server, &alice).await;
    assert_eq!(pending["arguments"]["command"], "touch denied.txt");
    let resp = decide(
        &server,
        &alice,
        pending["call_id"].as_str().unwrap(),
        json!({"decision": "deny", "message": "not on a Friday"}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let done = wait_for_end(&server, Some(&alice), run_id).await;
    let all = run_events(&server, Some(&alice), run_id).await;
    assert_eq!(resolved(&all)["approved"], false);
    assert!(!dir.workspace("deny").join("denied.txt").exists(), "{done}");
    let results = model.tool_results(3);
    assert!(results[0].1.contains("not on a Friday"), "{results:?}");
    assert!(!types(&all).contains(&"tool_started".to_string()));

    // Nobody decides: the timeout denies.
    let dir = ServerDir::new(&model, "approval_timeout_secs = 2\n");
    let alice = dir.token("alice", scopes);
    let server = Server::start(&dir);
    let third = submit(&server, Some(&alice), run("late")).await;
    let run_id = third["run_id"].as_str().unwrap();
    wait_for_end(&server, Some(&alice), run_id).await;
    let all = run_events(&server, Some(&alice), run_id).await;
    assert!(types(&all).contains(&"approval_requested".to_string()));
    let resolution = resolved(&all);
    assert_eq!(resolution["approved"], false);
    assert_eq!(resolution["decided_by"], "timeout");
    assert!(!dir.workspace("late").join("late.txt").exists());
    let list = get_json(&server, Some(&alice), "/v1/approvals").await;
    assert_eq!(list, json!([]));
    model.assert_valid();
}

#[tokio::test]
async fn every_endpoint_checks_the_token_and_its_scope() {
    let model = MockModel::start(NO_STREAM, vec![Turn::text("Hello.")]).await;
    let dir = ServerDir::new(&model, "");
    let reader = dir.token("reader", "runs:read");
    let writer = dir.token("writer", "runs:write,approvals:write");
    let server = Server::start(&dir);
    // (method, path, the scope it needs)
    let endpoints = [
        ("POST", "/v1/runs", "runs:write"),
        ("GET", "/v1/runs", "runs:read"),
        ("GET", "/v1/runs/r1", "runs:read"),
        ("POST", "/v1/runs/r1/cancel", "runs:write"),
        ("GET", "/v1/runs/r1/trace", "runs:read"),
        ("GET", "/v1/runs/r1/events", "runs:read"),
        ("GET", "/v1/approvals", "approvals:read"),
        ("POST", "/v1/approvals/c1", "approvals:write"),
        ("GET", "/v1/sessions", "runs:read"),
        ("GET", "/v1/sessions/s1", "runs:read"),
        ("GET", "/v1/sessions/s1/events", "runs:read"),
        ("GET", "/metrics", "runs:read"),
    ];
    let send = |method: &str, path: &str, token: Option<&str>| {
        let mut req = match method {
            "POST" => client()
                .post(server.url(path))
                .json(&json!({"prompt": "hi", "decision": "allow"})),
            _ => client().get(server.url(path)),
        };
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    for (method, path, scope) in endpoints {
        let none = send(method, path, None).await.unwrap();
        assert_eq!(none.status(), 401, "{method} {path} without a token");
        assert_eq!(none.headers()["www-authenticate"], "Bearer");
        let body: Value = none.json().await.unwrap();
        assert!(body["error"].is_string());
        let wrong = send(method, path, Some("attest_not-a-token"))
            .await
            .unwrap();
        assert_eq!(wrong.status(), 401, "{method} {path} with a wrong token");
        let (lacking, having) = if scope == "runs:read" {
            (&writer, &reader)
        } else {
            (&reader, &writer)
        };
        let missing = send(method, path, Some(lacking)).await.unwrap();
        assert_eq!(missing.status(), 403, "{method} {path} without {scope}");
        if scope != "approvals:read" {
            let allowed = send(method, path, Some(having)).await.unwrap();
            assert!(
                allowed.status() != 401 && allowed.status() != 403,
                "{method} {path} with {scope}: {}",
                allowed.status()
            );
        }
    }
    // Probes and the document need no token.
    for path in ["/healthz", "/readyz", "/openapi.json"] {
        let resp = client().get(server.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
    }
    // A revoked token is refused at once.
    let out = attest(&[
        "token",
        "revoke",
        "--config",
        dir.config().to_str().unwrap(),
        "reader",
    ]);
    assert!(out.status.success());
    let resp = send("GET", "/v1/runs", Some(&reader)).await.unwrap();
    assert_eq!(resp.status(), 401);
    let list = attest(&["token", "list", "--config", dir.config().to_str().unwrap()]);
    let listed = String::from_utf8(list.stdout).unwrap();
    assert!(
        listed.contains("reader") && listed.contains("revoked"),
        "{listed}"
    );
    assert!(!listed.contains(&reader), "tokens are never shown again");
    // Only the hash is stored.
    let db = std::fs::read(dir.dir.path().join("data/server.db")).unwrap();
    assert!(!String::from_utf8_lossy(&db).contains(&writer));
}

#[test]
fn a_non_loopback_listen_address_without_tokens_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("server.toml");
    std::fs::write(
        &config,
        "[provider]\nname = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n",
    )
    .unwrap();
    let out = attest(&[
        "serve",
        "--listen",
        "0.0.0.0:0",
        "--config",
        config.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not a loopback address"), "{stderr}");
}

#[tokio::test]
async fn idempotent_submission_sessions_health_and_metrics() {
    let model = MockModel::start(
        NO_STREAM,
        vec![Turn::text("First answer."), Turn::text("Second answer.")],
    )
    .await;
    let dir = ServerDir::new(&model, "");
    let server = Server::start(&dir);
    let body = json!({"prompt": "Say hello."});
    let post = |key: &'static str| {
        client()
            .post(server.url("/v1/runs"))
            .header("Idempotency-Key", key)
            .json(&body)
            .send()
    };
    let first: Value = post("k-1").await.unwrap().json().await.unwrap();
    let retried: Value = post("k-1").await.unwrap().json().await.unwrap();
    assert_eq!(first, retried, "a retried POST returns the same run");
    let run_id = first["run_id"].as_str().unwrap();
    let session = first["session_id"].as_str().unwrap();
    wait_for_end(&server, None, run_id).await;
    // The same session continues with a second run.
    let second = submit(
        &server,
        None,
        json!({"prompt": "Again.", "session": session}),
    )
    .await;
    assert_eq!(second["session_id"], session);
    wait_for_end(&server, None, second["run_id"].as_str().unwrap()).await;
    assert_eq!(model.requests().len(), 2, "the retried POST ran nothing");
    // The second run was sent the first one's answer as history.
    assert!(model.request_text(1).contains("First answer."));

    let detail = get_json(&server, None, &format!("/v1/sessions/{session}")).await;
    assert_eq!(detail["runs"].as_array().unwrap().len(), 2, "{detail}");
    let sessions = get_json(&server, None, "/v1/sessions").await;
    assert!(sessions
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["session_id"] == session && s["runs"] == 2));
    let page = get_json(
        &server,
        None,
        &format!("/v1/runs?session={session}&limit=1"),
    )
    .await;
    assert_eq!(page["runs"].as_array().unwrap().len(), 1);
    let cursor = page["next_cursor"].as_str().unwrap();
    let next = get_json(
        &server,
        None,
        &format!("/v1/runs?session={session}&limit=1&cursor={cursor}"),
    )
    .await;
    assert_eq!(next["runs"][0]["run_id"], run_id, "newest first");
    assert!(next["next_cursor"].is_null());
    let completed = get_json(&server, None, "/v1/runs?state=completed").await;
    assert_eq!(completed["runs"].as_array().unwrap().len(), 2);

    assert_eq!(get_json(&server, None, "/healthz").await["status"], "ok");
    assert_eq!(get_json(&server, None, "/readyz").await["status"], "ok");
    // A run's `done` is stored before its worker counts it out, so the
    // gauges are read until they have caught up.
    let expected = [
        "attest_runs{state=\"completed\"} 2",
        "attest_active_runs 0",
        "attest_approvals_pending 0",
        "attest_step_latency_seconds_count 2",
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = client()
            .get(server.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if expected.iter().all(|line| metrics.contains(line)) {
            break;
        }
        assert!(Instant::now() < deadline, "{expected:?} in {metrics}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A workspace outside the root is refused.
    for bad in ["../escape", "/etc"] {
        let resp = client()
            .post(server.url("/v1/runs"))
            .json(&json!({"prompt": "x", "workspace": bad}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{bad}");
    }
    let unknown = client()
        .get(server.url("/v1/runs/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
}

#[tokio::test]
async fn a_queued_or_running_run_can_be_cancelled() {
    let model = MockModel::start(
        NO_STREAM,
        // Far longer than a loaded machine takes to send the cancel.
        vec![Turn::Delayed {
            delay: Duration::from_secs(120),
            turn: Box::new(Turn::text("too late")),
        }],
    )
    .await;
    let dir = ServerDir::new(&model, "");
    let server = Server::start(&dir);
    let run = submit(&server, None, json!({"prompt": "Think slowly."})).await;
    let run_id = run["run_id"].as_str().unwrap();
    // Wait until the model call is in flight, then cancel.
    let deadline = Instant::now() + Duration::from_secs(20);
    while model.requests().is_empty() {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let resp = client()
        .post(server.url(&format!("/v1/runs/{run_id}/cancel")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 202);
    let done = wait_for_end(&server, None, run_id).await;
    assert_eq!(done["state"], "cancelled", "{done}");
    let again = client()
        .post(server.url(&format!("/v1/runs/{run_id}/cancel")))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 409);
}

#[tokio::test]
async fn two_runs_waiting_on_the_same_call_id_are_decided_apart() {
    // Both runs' calls are named `call_1`, as a local model names its
    // calls alike in every run: an approval is a run's call, not a call id.
    // (The scripted provider's script is shared: each model call takes the
    // next entry, whichever run makes it.)
    let dir = tempfile::tempdir().unwrap();
    let call =
        "- tool_calls: [{ id: call_1, name: shell, arguments: { command: \"touch made.txt\" } }]\n";
    std::fs::write(
        dir.path().join("script.yaml"),
        format!("{call}{call}- text: \"Made it.\"\n- text: \"Not made.\"\n"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("server.toml"),
        format!(
            "[provider]\nname = \"scripted\"\nscript = \"{}\"\n\n\
             [server]\ndata_dir = \"data\"\nworkspaces_root = \"workspaces\"\napproval_timeout_secs = 60\n",
            dir.path().join("script.yaml").display()
        ),
    )
    .unwrap();
    let server_dir = ServerDir { dir };
    let server = Server::start(&server_dir);
    let first = submit(
        &server,
        None,
        json!({"prompt": "Make it.", "workspace": "one"}),
    )
    .await;
    // The second run starts once the first waits, so each gets a call.
    let deadline = Instant::now() + Duration::from_secs(30);
    while get_json(&server, None, "/v1/approvals")
        .await
        .as_array()
        .unwrap()
        .is_empty()
    {
        assert!(Instant::now() < deadline, "the first run never waited");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let second = submit(
        &server,
        None,
        json!({"prompt": "Make it.", "workspace": "two"}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let pending = loop {
        let list = get_json(&server, None, "/v1/approvals").await;
        if list.as_array().unwrap().len() == 2 {
            break list;
        }
        assert!(Instant::now() < deadline, "both runs never waited: {list}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(pending[0]["call_id"], pending[1]["call_id"]);
    let call_id = pending[0]["call_id"].as_str().unwrap();
    let ambiguous = client()
        .post(server.url(&format!("/v1/approvals/{call_id}")))
        .json(&json!({"decision": "allow"}))
        .send()
        .await
        .unwrap();
    assert_eq!(ambiguous.status(), 409);
    let body: Value = ambiguous.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("run_id"), "{body}");
    // Nothing was decided by the ambiguous request.
    assert_eq!(
        get_json(&server, None, "/v1/approvals")
            .await
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let first_id = first["run_id"].as_str().unwrap();
    let resp = client()
        .post(server.url(&format!("/v1/approvals/{call_id}")))
        .json(&json!({"decision": "allow", "run_id": first_id}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let run = wait_for_end(&server, None, first_id).await;
    assert_eq!(run["state"], "completed", "{run}");
    assert!(server_dir.workspace("one").join("made.txt").exists());
    // The other run still waits, untouched.
    let left = get_json(&server, None, "/v1/approvals").await;
    assert_eq!(left.as_array().unwrap().len(), 1, "{left}");
    assert_eq!(left[0]["run_id"], second["run_id"]);
    assert!(!server_dir.workspace("two").join("made.txt").exists());
    let resp = client()
        .post(server.url(&format!("/v1/approvals/{call_id}")))
        .json(&json!({"decision": "deny"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.status(),
        200,
        "one run waits now: the call id names it"
    );
    let run = wait_for_end(&server, None, second["run_id"].as_str().unwrap()).await;
    assert_eq!(run["receipts"][0]["status"], "denied", "{run}");
    assert!(!server_dir.workspace("two").join("made.txt").exists());
}
