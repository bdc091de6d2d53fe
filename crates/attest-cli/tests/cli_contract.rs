//! The CLI contract around the loop: endpoints, keys, config, usage errors,
//! stdin prompts, the scripted provider and the bundled demo.

mod common;

use common::*;
use serde_json::json;

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[tokio::test]
async fn endpoints_and_auth_headers_follow_the_official_sdks_and_keys_never_reach_the_log() {
    const CANARY: &str = "sk-canary-7f3a9c1e5b";
    for v in [VARIANTS[0], VARIANTS[2]] {
        let ws = TestWorkspace::new();
        ws.write("leaked.txt", &format!("token={CANARY}\n"));
        let (read, shell) = (
            call("read_file", json!({"path": "leaked.txt"})),
            call(
                "shell",
                json!({"command": "echo \"key=$OPENAI_API_KEY$ANTHROPIC_API_KEY\""}),
            ),
        );
        let model = MockModel::start(
            v,
            vec![Turn::calls("", vec![read, shell]), Turn::text("ok")],
        )
        .await;
        let (provider, key_var, path) = match v.wire {
            Wire::OpenAi => ("openai", "OPENAI_API_KEY", "/v1/chat/completions"),
            Wire::Anthropic => ("anthropic", "ANTHROPIC_API_KEY", "/v1/messages"),
        };
        let args = s(&[
            "run",
            "--json",
            "--no-stream",
            "--approval",
            "allow",
            "--provider",
            provider,
            "--base-url",
            &model.base_url(),
            "--model",
            "m",
            "-C",
            &ws.path().display().to_string(),
            "hi",
        ]);
        let r = run_binary(args, &[(key_var, CANARY)]).await;
        model.assert_valid();
        assert_eq!(r.state(), "completed", "{}", r.describe());
        assert_eq!(model.paths(), vec![path, path]);
        let headers = &model.headers()[0];
        let find = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        match v.wire {
            Wire::OpenAi => assert_eq!(find("authorization"), Some(format!("Bearer {CANARY}"))),
            Wire::Anthropic => {
                assert_eq!(find("x-api-key").as_deref(), Some(CANARY));
                assert!(find("anthropic-version").is_some());
            }
        }
        assert!(
            !model.request_text(1).contains(CANARY),
            "the key reached the model"
        );
        let results = model.tool_results(1);
        assert!(results[0].1.contains("token=[REDACTED]"), "{results:?}");
        assert!(
            results[1].1.trim_end().ends_with("key="),
            "tools must not inherit the key: {results:?}"
        );
        let log_text = ws
            .log_entries()
            .iter()
            .map(|e| e.to_string())
            .collect::<String>();
        assert!(!log_text.contains(CANARY), "the key reached the run log");
        assert!(!r.stdout.contains(CANARY));
    }
}

#[tokio::test]
async fn custom_key_variable_and_env_base_url_are_honoured() {
    let v = VARIANTS[1];
    let ws = TestWorkspace::new();
    let model = MockModel::start(v, vec![Turn::text("hello")]).await;
    let args = s(&[
        "run",
        "--json",
        "--api-key-env",
        "MY_KEY",
        "-C",
        &ws.path().display().to_string(),
        "hi",
    ]);
    let url = model.base_url();
    let r = run_binary(
        args,
        &[
            ("MY_KEY", "k-123456"),
            ("ATTEST_PROVIDER", "openai"),
            ("ATTEST_MODEL", "m"),
            ("OPENAI_BASE_URL", &url),
        ],
    )
    .await;
    assert_eq!(r.state(), "completed", "{}", r.describe());
    let auth = model.headers()[0]
        .iter()
        .find(|(k, _)| k == "authorization")
        .cloned();
    assert_eq!(auth.map(|(_, v)| v), Some("Bearer k-123456".to_string()));
}

#[tokio::test]
async fn the_prompt_can_come_from_stdin() {
    let v = VARIANTS[1];
    let ws = TestWorkspace::new();
    let model = MockModel::start(v, vec![Turn::text("hello")]).await;
    let url = model.base_url();
    let wsp = ws.path().display().to_string();
    let out = tokio::task::spawn_blocking(move || {
        assert_cmd::Command::cargo_bin("attest")
            .unwrap()
            .args([
                "run",
                "--json",
                "--provider",
                "openai",
                "--base-url",
                &url,
                "--model",
                "m",
                "-C",
                &wsp,
                "-",
            ])
            .env("XDG_CONFIG_HOME", common::test_config_home())
            .write_stdin("Prompt from stdin")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(model.request_text(0).contains("Prompt from stdin"));
}

#[tokio::test]
async fn require_tool_demands_that_specific_receipt() {
    for v in [VARIANTS[1], VARIANTS[3]] {
        let ws = TestWorkspace::new();
        let model = MockModel::start(
            v,
            vec![
                Turn::tool("read_file", json!({"path": "config.toml"})),
                Turn::text("8080"),
                Turn::tool("grep", json!({"pattern": "port"})),
                Turn::text("8080, confirmed by grep"),
            ],
        )
        .await;
        let r = run_attest(&model, &ws, &["--require-tool", "grep", "Which port?"]).await;
        model.assert_valid();
        assert_eq!(r.state(), "completed", "{}", r.describe());
        assert_eq!(r.of_type("corrective_injected").len(), 1);
        assert!(model.request_text(2).contains("`grep`"));
    }
}

#[tokio::test]
async fn usage_and_configuration_errors_exit_2_without_events() {
    let ws = TestWorkspace::new();
    let wsp = ws.path().display().to_string();
    let cases: Vec<(Vec<String>, &str)> = vec![
        // With no provider configured the embedded model runs; a missing
        // model file is a configuration error.
        (
            s(&[
                "run",
                "--provider",
                "local",
                "--model-path",
                "/nonexistent/model.gguf",
                "-C",
                &wsp,
                "hi",
            ]),
            "does not exist",
        ),
        (
            s(&["run", "--provider", "openai", "-C", &wsp, "hi"]),
            "no model",
        ),
        (
            s(&["run", "--provider", "scripted", "-C", &wsp, "hi"]),
            "--script",
        ),
        (
            s(&[
                "run",
                "--provider",
                "openai",
                "--model",
                "m",
                "--expect",
                "maybe",
                "-C",
                &wsp,
                "hi",
            ]),
            "maybe",
        ),
        (
            s(&[
                "run",
                "--provider",
                "openai",
                "--model",
                "m",
                "--require-tool",
                "nope",
                "-C",
                &wsp,
                "hi",
            ]),
            "nope",
        ),
        (
            s(&[
                "run",
                "--provider",
                "openai",
                "--model",
                "m",
                "--config",
                "/nonexistent.toml",
                "-C",
                &wsp,
                "hi",
            ]),
            "does not exist",
        ),
        (
            s(&[
                "run",
                "--provider",
                "openai",
                "--model",
                "m",
                "-C",
                "/nonexistent-dir",
                "hi",
            ]),
            "workspace",
        ),
    ];
    for (args, needle) in cases {
        let r = run_binary(args.clone(), &[]).await;
        assert_eq!(r.code, 2, "{args:?}: {}", r.describe());
        assert!(r.stderr.contains(needle), "{args:?}: {}", r.stderr);
        assert!(r.events.is_empty());
    }

    ws.write("attest.toml", "[run]\nmax_stepz = 3\n");
    let r = run_binary(
        s(&[
            "run",
            "--provider",
            "openai",
            "--model",
            "m",
            "-C",
            &wsp,
            "hi",
        ]),
        &[],
    )
    .await;
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("invalid config file"), "{}", r.stderr);

    ws.write("attest.toml", "[[tools]]\nname = \"bad name!\"\ndescription = \"x\"\neffect = \"observe\"\ncommand = [\"true\"]\n");
    let r = run_binary(
        s(&[
            "run",
            "--provider",
            "openai",
            "--model",
            "m",
            "-C",
            &wsp,
            "hi",
        ]),
        &[],
    )
    .await;
    assert_eq!(r.code, 2, "{}", r.describe());
    assert!(r.stderr.contains("bad name!"), "{}", r.stderr);
}

#[tokio::test]
async fn scripted_provider_runs_the_bundled_demo_and_catches_the_fake_claim() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let ws = TestWorkspace::new();
    std::fs::copy(repo.join("Cargo.toml"), ws.path().join("Cargo.toml")).unwrap();
    let script = repo
        .join("examples/demo/fake-claim.yaml")
        .canonicalize()
        .unwrap();
    let args = s(&[
        "run",
        "--json",
        "--provider",
        "scripted",
        "--script",
        &script.display().to_string(),
        "--expect",
        "observe",
        "-C",
        &ws.path().display().to_string(),
        "What does Cargo.toml say this workspace contains?",
    ]);
    let r = run_binary(args, &[]).await;
    assert_eq!(r.code, 0, "{}", r.describe());
    assert_eq!(r.of_type("corrective_injected").len(), 1);
    assert_eq!(r.done()["receipts"][0]["tool_name"], "read_file");
    assert_eq!(r.done()["receipts"][0]["status"], "ok");
}

/// `--stream-tokens`: the model's response as it streams in, as `progress`
/// events with `"delta": true` — live only (not in the run log), carrying
/// the seq of the stored event before them. Off by default for HTTP
/// providers, so their event stream stays as it was.
#[tokio::test]
async fn stream_tokens_shows_http_deltas_live_and_only_when_asked() {
    fn deltas(r: &RunResult) -> Vec<&serde_json::Value> {
        r.events.iter().filter(|e| e["delta"] == true).collect()
    }
    fn turns() -> Vec<Turn> {
        vec![
            Turn::calls(
                "Let me read the config.",
                vec![call("read_file", json!({"path": "config.toml"}))],
            ),
            Turn::text("config.toml configures port 8080."),
        ]
    }
    for v in STREAM_VARIANTS {
        let ws = TestWorkspace::new();
        let model = MockModel::start(v, turns()).await;
        let r = run_attest(
            &model,
            &ws,
            &["--stream-tokens", "--expect", "observe", "Which port?"],
        )
        .await;
        model.assert_valid();
        assert_eq!(r.state(), "completed", "{v:?} {}", r.describe());
        let d = deltas(&r);
        assert!(!d.is_empty(), "{v:?} no delta events: {}", r.describe());
        assert!(d.iter().all(|e| e["type"] == "progress"));
        let text_of = |step: u64| -> String {
            d.iter()
                .filter(|e| e["step"] == step)
                .map(|e| e["text"].as_str().unwrap())
                .collect()
        };
        assert_eq!(text_of(1), "Let me read the config.", "{v:?}");
        assert_eq!(text_of(2), "config.toml configures port 8080.", "{v:?}");
        // Each step's deltas come before that step's events.
        let position =
            |pred: &dyn Fn(&serde_json::Value) -> bool| r.events.iter().position(pred).unwrap();
        let last_delta_1 = r
            .events
            .iter()
            .rposition(|e| e["delta"] == true && e["step"] == 1)
            .unwrap();
        assert!(last_delta_1 < position(&|e| e["type"] == "tool_started"));
        let last_delta = r.events.iter().rposition(|e| e["delta"] == true).unwrap();
        assert!(last_delta < position(&|e| e["type"] == "final"));
        // Stored events keep 1, 2, 3… without gaps; a delta repeats the seq
        // of the event before it, and none is in the run log.
        let mut seq = 0;
        for e in &r.events {
            if e["delta"] == true {
                assert_eq!(e["seq"], seq, "{e}");
            } else {
                seq += 1;
                assert_eq!(e["seq"], seq, "{e}");
                assert!(e.get("delta").is_none(), "{e}");
            }
        }
        let stored: Vec<serde_json::Value> = ws
            .log_entries()
            .into_iter()
            .filter(|e| e["entry"] == "event")
            .collect();
        assert_eq!(stored.len() as u64, seq, "{stored:?}");
        assert!(stored.iter().all(|e| e["event"].get("delta").is_none()));

        // Without the flag (and with it turned off again): no deltas, the
        // event stream exactly as before.
        for extra in [&[][..], &["--stream-tokens", "--no-stream-tokens"][..]] {
            let ws = TestWorkspace::new();
            let model = MockModel::start(v, turns()).await;
            let mut args = extra.to_vec();
            args.extend(["--expect", "observe", "Which port?"]);
            let r = run_attest(&model, &ws, &args).await;
            assert_eq!(r.state(), "completed", "{v:?} {}", r.describe());
            assert!(deltas(&r).is_empty(), "{v:?} {extra:?}: {}", r.describe());
            for (i, e) in r.events.iter().enumerate() {
                assert_eq!(e["seq"], (i + 1) as u64);
            }
        }
    }

    // Human output: the deltas inline on stderr, not one line each.
    let v = STREAM_VARIANTS[0];
    let ws = TestWorkspace::new();
    let model = MockModel::start(v, turns()).await;
    let r = run_attest_human(
        &model,
        &ws,
        &["--stream-tokens", "--expect", "observe", "Which port?"],
    )
    .await;
    assert_eq!(r.code, 0, "{}", r.describe());
    assert!(
        r.stderr
            .contains("config.toml configures port 8080.\nattest: completed"),
        "{}",
        r.describe()
    );
    assert!(!r.stderr.contains("  … config.toml"), "{}", r.describe());
    assert_eq!(r.stdout.trim(), "config.toml configures port 8080.");
}
