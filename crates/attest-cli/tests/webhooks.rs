//! Approval notifications through the real `attest serve` on loopback:
//! the signed `approval_requested` delivery reaches a receiver (retried
//! after a 500, both attempts in the run's trace), and decisions posted
//! to `/v1/hooks/{generic,slack,feishu}` with their senders' signatures
//! release the run, while forged, stale and replayed callbacks are
//! refused (401) and change nothing. The test signs with its own code,
//! not the server's.

mod common;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use common::server::{client, get_json, submit, wait_for_end, Server, ServerDir};
use common::signing::{hmac, now, standard_headers, whsec_key};
use common::{MockModel, Turn, Variant, Wire};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const NO_STREAM: Variant = Variant {
    wire: Wire::OpenAi,
    stream: false,
};

// Test secrets (none is real).
const OUT_SECRET: &str = "whsec_YXR0ZXN0LXRlc3Qtb3V0Ym91bmQtc2VjcmV0IQ==";
const IN_SECRET: &str = "whsec_YXR0ZXN0LXRlc3QtaW5ib3VuZC1zZWNyZXQhIQ==";
const FEISHU_KEY: &str = "feishu-test-encrypt-key";
const FEISHU_TOKEN: &str = "feishu-test-verification-token";
const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const ACTION_SECRET: &str = "attest-test-action-secret";

/// The secrets the test config names, as the server's environment.
const SECRETS: [(&str, &str); 6] = [
    ("ATTEST_TEST_OUT_SECRET", OUT_SECRET),
    ("ATTEST_TEST_IN_SECRET", IN_SECRET),
    ("ATTEST_TEST_FEISHU_KEY", FEISHU_KEY),
    ("ATTEST_TEST_FEISHU_TOKEN", FEISHU_TOKEN),
    ("ATTEST_TEST_SLACK_SECRET", SLACK_SECRET),
    ("ATTEST_TEST_ACTION_SECRET", ACTION_SECRET),
];

/// A server with hooks configured and an API token: the API wants the
/// bearer, the hooks never do.
struct HookServer {
    server: Server,
    /// Kept for as long as the server runs.
    _dir: ServerDir,
    workspaces: PathBuf,
    token: String,
}

fn config(model: &MockModel, receiver: &MockServer) -> String {
    format!(
        "[provider]\nname = \"openai\"\nbase_url = \"{}\"\nmodel = \"test-model\"\n\n\
         [run]\nstream = false\n\n[retry]\nmax_retries = 0\n\n\
         [server]\ndata_dir = \"data\"\nworkspaces_root = \"workspaces\"\napproval_timeout_secs = 120\n\n\
         [[server.webhooks]]\nurl = \"{r}/hook\"\nsecret_env = \"ATTEST_TEST_OUT_SECRET\"\n\
         events = [\"approval_requested\", \"done\"]\n\n\
         [[server.webhooks]]\nurl = \"{r}/feishu\"\nformat = \"feishu\"\n\n\
         [server.hooks]\ngeneric_secret_env = \"ATTEST_TEST_IN_SECRET\"\n\
         feishu_encrypt_key_env = \"ATTEST_TEST_FEISHU_KEY\"\n\
         feishu_verification_token_env = \"ATTEST_TEST_FEISHU_TOKEN\"\n\
         slack_signing_secret_env = \"ATTEST_TEST_SLACK_SECRET\"\n\
         slack_response_url_prefix = \"{r}/slack-response/\"\n\
         action_secret_env = \"ATTEST_TEST_ACTION_SECRET\"\n",
        model.base_url(),
        r = receiver.uri()
    )
}

fn start(config_text: &str) -> HookServer {
    let dir = ServerDir {
        dir: tempfile::tempdir().unwrap(),
    };
    std::fs::write(dir.config(), config_text).unwrap();
    let token = dir.token("ops", "runs:read,runs:write,approvals:read");
    let server = Server::start_env(&dir, &[], &SECRETS);
    HookServer {
        workspaces: dir.dir.path().join("workspaces"),
        server,
        _dir: dir,
        token,
    }
}

impl HookServer {
    async fn get(&self, p: &str) -> Value {
        get_json(&self.server, Some(&self.token), p).await
    }

    async fn submit(&self, workspace: &str) -> String {
        let v = submit(
            &self.server,
            Some(&self.token),
            json!({"prompt": "Create the file.", "workspace": workspace}),
        )
        .await;
        v["run_id"].as_str().unwrap().to_string()
    }

    async fn pending(&self) -> Vec<String> {
        self.get("/v1/approvals")
            .await
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["call_id"].as_str().unwrap().to_string())
            .collect()
    }

    async fn wait_for_end(&self, run_id: &str) -> Value {
        wait_for_end(&self.server, Some(&self.token), run_id).await
    }

    async fn hook(&self, adapter: &str, headers: &[(&str, String)], body: &str) -> (u16, Value) {
        let mut req = client()
            .post(self.server.url(&format!("/v1/hooks/{adapter}")))
            .body(body.to_string());
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }
}

/// The receiver's requests to `p`, waiting until `until` holds.
async fn received(
    receiver: &MockServer,
    p: &str,
    until: impl Fn(&[wiremock::Request]) -> bool,
) -> Vec<wiremock::Request> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got: Vec<wiremock::Request> = receiver
            .received_requests()
            .await
            .unwrap()
            .into_iter()
            .filter(|r| r.url.path() == p)
            .collect();
        if until(&got) {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "the receiver did not get {p}: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn header(r: &wiremock::Request, name: &str) -> String {
    r.headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name}"))
        .to_str()
        .unwrap()
        .to_string()
}

fn json_body(r: &wiremock::Request) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

/// The Feishu card delivered for `call_id`, and its Approve button's value.
async fn card_button(receiver: &MockServer, call_id: &str) -> (Value, Value) {
    let cards = received(receiver, "/feishu", |rs| {
        rs.iter().any(|r| {
            r.body
                .windows(call_id.len())
                .any(|w| w == call_id.as_bytes())
        })
    })
    .await;
    let card = cards
        .iter()
        .map(json_body)
        .find(|b| b["card"].to_string().contains(call_id))
        .unwrap();
    let approve = card["card"]["elements"][2]["actions"][0]["value"].clone();
    assert_eq!(approve["decision"], "allow", "{card}");
    (card, approve)
}

#[tokio::test]
async fn signed_callbacks_release_runs_and_forged_stale_and_replayed_ones_change_nothing() {
    let model = MockModel::start(
        NO_STREAM,
        vec![
            Turn::tool("shell", json!({"command": "touch generic.txt"})),
            Turn::text("Created it."),
            Turn::tool("shell", json!({"command": "touch slack.txt"})),
            Turn::text("Created it."),
            Turn::tool("shell", json!({"command": "touch feishu.txt"})),
            Turn::text("Created it."),
        ],
    )
    .await;
    let receiver = MockServer::start().await;
    // The first delivery fails: it is retried with the same id.
    Mock::given(method("POST"))
        .and(path("/hook"))
        .respond_with(ResponseTemplate::new(500))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&receiver)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&receiver)
        .await;
    let server = start(&config(&model, &receiver));

    // 1. generic: the signed delivery names the call.
    let run_id = server.submit("generic").await;
    let hooks = received(&receiver, "/hook", |rs| rs.len() >= 2).await;
    let (first, second) = (&hooks[0], &hooks[1]);
    assert_eq!(header(first, "webhook-id"), header(second, "webhook-id"));
    for r in [first, second] {
        let content = format!(
            "{}.{}.{}",
            header(r, "webhook-id"),
            header(r, "webhook-timestamp"),
            String::from_utf8_lossy(&r.body)
        );
        let expected = format!(
            "v1,{}",
            B64.encode(hmac(&whsec_key(OUT_SECRET), content.as_bytes()))
        );
        assert_eq!(header(r, "webhook-signature"), expected);
    }
    let delivery = json_body(second);
    assert_eq!(delivery["type"], "approval_requested");
    assert_eq!(delivery["data"]["run_id"], run_id.as_str());
    assert_eq!(delivery["data"]["tool"], "shell");
    assert_eq!(
        delivery["data"]["arguments"]["command"],
        "touch generic.txt"
    );
    assert!(!delivery["data"]["rule"].as_str().unwrap().is_empty());
    let call_id = delivery["data"]["call_id"].as_str().unwrap().to_string();
    assert_eq!(server.pending().await, vec![call_id.clone()]);

    let allow = json!({"call_id": call_id, "decision": "allow", "decided_by": "alice"}).to_string();
    let file = server.workspaces.join("generic/generic.txt");
    // Forged: signed with another secret.
    let forged = standard_headers(OUT_SECRET, "msg_forged", now(), &allow);
    assert_eq!(server.hook("generic", &forged, &allow).await.0, 401);
    // Stale: correctly signed, six minutes old.
    let stale = standard_headers(IN_SECRET, "msg_stale", now() - 360, &allow);
    assert_eq!(server.hook("generic", &stale, &allow).await.0, 401);
    // A body changed after signing.
    let tampered = standard_headers(IN_SECRET, "msg_tampered", now(), &allow);
    let deny = allow.replace("allow", "deny");
    assert_eq!(server.hook("generic", &tampered, &deny).await.0, 401);
    assert_eq!(
        server.pending().await,
        vec![call_id.clone()],
        "still waiting"
    );
    assert!(!file.exists(), "nothing ran");

    // Call ids repeat across runs: a decision naming another run decides nothing.
    let elsewhere =
        json!({"call_id": call_id, "run_id": "another-run", "decision": "allow"}).to_string();
    let signed = standard_headers(IN_SECRET, "msg_elsewhere", now(), &elsewhere);
    assert_eq!(server.hook("generic", &signed, &elsewhere).await.0, 409);
    assert_eq!(
        server.pending().await,
        vec![call_id.clone()],
        "still waiting"
    );
    assert!(!file.exists(), "nothing ran");

    let allow =
        json!({"call_id": call_id, "run_id": run_id, "decision": "allow", "decided_by": "alice"})
            .to_string();
    let signed = standard_headers(IN_SECRET, "msg_decision_1", now(), &allow);
    let (status, decided) = server.hook("generic", &signed, &allow).await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["approved"], true);
    assert_eq!(decided["run_id"], run_id.as_str());
    let run = server.wait_for_end(&run_id).await;
    assert_eq!(run["state"], "completed", "{run}");
    assert!(file.exists(), "the approved command ran");
    assert_eq!(run["receipts"][0]["tool_name"], "shell", "{run}");
    // Replayed: the same delivery again.
    let (status, body) = server.hook("generic", &signed, &allow).await;
    assert_eq!(status, 401, "{body}");
    assert!(body["error"].as_str().unwrap().contains("replay"), "{body}");
    // A new, valid delivery for the decided call: 409, nothing changes.
    let late = standard_headers(IN_SECRET, "msg_decision_2", now(), &deny);
    assert_eq!(server.hook("generic", &late, &deny).await.0, 409);

    // `done` is delivered too; every attempt is in the trace, no secret.
    let done = received(&receiver, "/hook", |rs| {
        rs.iter().any(|r| json_body(r)["type"] == "done")
    })
    .await;
    let done = done
        .iter()
        .map(json_body)
        .find(|b| b["type"] == "done")
        .unwrap();
    assert_eq!(done["data"]["run_id"], run_id.as_str());
    assert_eq!(done["data"]["state"], "completed");
    let trace = server.get(&format!("/v1/runs/{run_id}/trace")).await;
    let deliveries: Vec<&Value> = trace["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["trace"])
        .filter(|t| t["record"] == "webhook_delivery" && t["event"] == "approval_requested")
        .filter(|t| t["host"] == "127.0.0.1")
        .collect();
    let attempts: Vec<(u64, u64)> = deliveries
        .iter()
        .filter(|t| t["webhook_id"] == header(first, "webhook-id").as_str())
        .map(|t| {
            (
                t["attempt"].as_u64().unwrap(),
                t["status"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(attempts, vec![(1, 500), (2, 200)], "{deliveries:?}");
    let text = trace.to_string();
    for secret in [
        OUT_SECRET,
        &OUT_SECRET[6..],
        &header(second, "webhook-signature")[3..],
    ] {
        assert!(
            !text.contains(secret),
            "the trace holds a secret or signature"
        );
    }
    let chain = trace["chain"].as_str().unwrap();
    assert_eq!(chain, "intact", "appended deliveries keep the hash chain");
    let resolved: Vec<&Value> = trace["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["event"])
        .filter(|e| e["type"] == "approval_resolved")
        .collect();
    assert_eq!(resolved.len(), 1, "decided once: {resolved:?}");
    assert_eq!(resolved[0]["via"], "webhook");
    assert_eq!(resolved[0]["decided_by"], "alice");
    assert_eq!(resolved[0]["approved"], true);

    // 2. slack: the button's token comes from the card; v0 signature.
    let run_id = server.submit("slack").await;
    let delivery = received(&receiver, "/hook", |rs| {
        rs.iter()
            .any(|r| json_body(r)["data"]["run_id"] == run_id.as_str())
    })
    .await;
    let call_id = delivery
        .iter()
        .map(json_body)
        .find(|b| b["data"]["run_id"] == run_id.as_str())
        .unwrap()["data"]["call_id"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, approve) = card_button(&receiver, &call_id).await;
    // A replayed generic delivery id cannot decide this call either.
    let deny = json!({"call_id": call_id, "decision": "deny"}).to_string();
    let replayed_id = standard_headers(IN_SECRET, "msg_decision_1", now(), &deny);
    assert_eq!(server.hook("generic", &replayed_id, &deny).await.0, 401);
    let slack_body = |value: &Value| {
        let payload = json!({
            "type": "block_actions",
            "user": {"id": "U1", "username": "alice"},
            "actions": [{"action_id": "attest_approve", "value": value.to_string()}],
            "response_url": format!("{}/slack-response/T1/1", receiver.uri()),
        });
        format!(
            "payload={}",
            payload
                .to_string()
                .bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                        (b as char).to_string()
                    }
                    _ => format!("%{b:02X}"),
                })
                .collect::<String>()
        )
    };
    let slack_headers = |body: &str, ts: i64, secret: &str| {
        let sig = hex::encode(hmac(
            secret.as_bytes(),
            format!("v0:{ts}:{body}").as_bytes(),
        ));
        vec![
            (
                "content-type",
                "application/x-www-form-urlencoded".to_string(),
            ),
            ("x-slack-request-timestamp", ts.to_string()),
            ("x-slack-signature", format!("v0={sig}")),
        ]
    };
    let mut wrong_token = approve.clone();
    wrong_token["token"] = json!("0".repeat(64));
    let body = slack_body(&wrong_token);
    assert_eq!(
        server
            .hook("slack", &slack_headers(&body, now(), SLACK_SECRET), &body)
            .await
            .0,
        401
    );
    let body = slack_body(&approve);
    assert_eq!(
        server
            .hook(
                "slack",
                &slack_headers(&body, now(), "not-the-secret"),
                &body
            )
            .await
            .0,
        401
    );
    assert_eq!(
        server
            .hook(
                "slack",
                &slack_headers(&body, now() - 400, SLACK_SECRET),
                &body
            )
            .await
            .0,
        401
    );
    assert_eq!(
        server.pending().await,
        vec![call_id.clone()],
        "still waiting"
    );
    let signed = slack_headers(&body, now(), SLACK_SECRET);
    let (status, answer) = server.hook("slack", &signed, &body).await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer["text"]
            .as_str()
            .unwrap()
            .contains("Approved by slack:alice"),
        "{answer}"
    );
    assert_eq!(
        server.hook("slack", &signed, &body).await.0,
        401,
        "replayed"
    );
    let run = server.wait_for_end(&run_id).await;
    assert_eq!(run["state"], "completed", "{run}");
    assert!(server.workspaces.join("slack/slack.txt").exists());
    // Slack ignores the answer's body: the message that asked is replaced
    // through the callback's response_url, and the attempt is traced.
    let updates = received(&receiver, "/slack-response/T1/1", |rs| !rs.is_empty()).await;
    assert_eq!(updates.len(), 1);
    let update = json_body(&updates[0]);
    assert_eq!(update["replace_original"], true, "{update}");
    assert!(
        update["text"]
            .as_str()
            .unwrap()
            .contains("Approved by slack:alice"),
        "{update}"
    );
    let trace = server.get(&format!("/v1/runs/{run_id}/trace")).await;
    assert!(
        trace["entries"].as_array().unwrap().iter().any(|e| {
            let t = &e["trace"];
            t["record"] == "webhook_delivery"
                && t["event"] == "approval_decided"
                && t["delivered"] == true
        }),
        "{trace}"
    );
    // The same button again (a new request): already decided, nothing changes.
    let again = slack_headers(&body, now() + 1, SLACK_SECRET);
    let (status, answer) = server.hook("slack", &again, &body).await;
    assert_eq!(status, 200);
    assert!(
        answer["text"].as_str().unwrap().contains("already decided"),
        "{answer}"
    );

    // 3. feishu: a card.action.trigger callback, answered with the decided card.
    let run_id = server.submit("feishu").await;
    let delivery = received(&receiver, "/hook", |rs| {
        rs.iter()
            .any(|r| json_body(r)["data"]["run_id"] == run_id.as_str())
    })
    .await;
    let call_id = delivery
        .iter()
        .map(json_body)
        .find(|b| b["data"]["run_id"] == run_id.as_str())
        .unwrap()["data"]["call_id"]
        .as_str()
        .unwrap()
        .to_string();
    let (card, approve) = card_button(&receiver, &call_id).await;
    assert_eq!(card["msg_type"], "interactive");
    let shown = card["card"].to_string();
    assert!(
        shown.contains("touch feishu.txt") && shown.contains("shell"),
        "{shown}"
    );
    let callback = json!({
        "schema": "2.0",
        "header": {"event_id": "ev_1", "token": FEISHU_TOKEN, "create_time": "1", "event_type": "card.action.trigger", "tenant_key": "t", "app_id": "cli_1"},
        "event": {"operator": {"open_id": "ou_bob"}, "token": "c-1", "action": {"tag": "button", "value": approve}},
    })
    .to_string();
    let feishu_headers = |body: &str, ts: i64, key: &str| {
        let nonce = "n0nce";
        let sig = hex::encode(Sha256::digest(format!("{ts}{nonce}{key}{body}").as_bytes()));
        vec![
            ("content-type", "application/json".to_string()),
            ("x-lark-request-timestamp", ts.to_string()),
            ("x-lark-request-nonce", nonce.to_string()),
            ("x-lark-signature", sig),
        ]
    };
    assert_eq!(
        server
            .hook(
                "feishu",
                &feishu_headers(&callback, now(), "wrong-key"),
                &callback
            )
            .await
            .0,
        401
    );
    assert_eq!(
        server
            .hook(
                "feishu",
                &feishu_headers(&callback, now() - 400, FEISHU_KEY),
                &callback
            )
            .await
            .0,
        401
    );
    assert_eq!(
        server.pending().await,
        vec![call_id.clone()],
        "still waiting"
    );
    let signed = feishu_headers(&callback, now(), FEISHU_KEY);
    let (status, answer) = server.hook("feishu", &signed, &callback).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["card"]["type"], "raw");
    assert_eq!(
        answer["card"]["data"]["header"]["title"]["content"],
        "Approved: shell"
    );
    assert!(answer["toast"]["content"]
        .as_str()
        .unwrap()
        .contains("feishu:ou_bob"));
    assert_eq!(
        server.hook("feishu", &signed, &callback).await.0,
        401,
        "replayed"
    );
    let run = server.wait_for_end(&run_id).await;
    assert_eq!(run["state"], "completed", "{run}");
    assert!(server.workspaces.join("feishu/feishu.txt").exists());
    // Feishu's URL check: answered with the challenge when the token fits.
    let check =
        json!({"challenge": "ch-1", "token": FEISHU_TOKEN, "type": "url_verification"}).to_string();
    let (status, answer) = server
        .hook(
            "feishu",
            &[("content-type", "application/json".into())],
            &check,
        )
        .await;
    assert_eq!((status, answer), (200, json!({"challenge": "ch-1"})));
    let check = check.replace(FEISHU_TOKEN, "guess");
    assert_eq!(server.hook("feishu", &[], &check).await.0, 401);
    // An adapter that is not one is 404; garbage is 4xx, never 5xx.
    assert_eq!(server.hook("teams", &[], "{}").await.0, 404);
    assert_eq!(server.hook("slack", &[], "\u{0}").await.0, 401);
    assert_eq!(server.hook("feishu", &[], "not json").await.0, 400);
    model.assert_valid();
}

#[test]
fn a_missing_secret_variable_stops_the_server_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("server.toml");
    std::fs::write(
        &file,
        "[provider]\nname = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\n\
         [server]\ndata_dir = \"data\"\n[[server.webhooks]]\nurl = \"http://127.0.0.1:9/hook\"\nsecret_env = \"ATTEST_TEST_UNSET_SECRET\"\n",
    )
    .unwrap();
    let out = Command::new(assert_cmd::cargo::cargo_bin("attest"))
        .env("XDG_CONFIG_HOME", common::test_config_home())
        .env_remove("ATTEST_TEST_UNSET_SECRET")
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ATTEST_TEST_UNSET_SECRET, which is not set"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
