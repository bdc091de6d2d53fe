//! Redaction that holds (SPEC F8): canary secrets planted in the
//! environment (the API key), the config, a tool's output, a provider's
//! error body and the model's own text never appear in what attest sends
//! to the model, in the store's bytes (database and WAL), in the trace, or
//! on stderr and stdout — only the API key, in its Authorization header.

mod common;

use common::*;
use serde_json::json;

const ENV_KEY: &str = "canary-env-key-7f3a9b2c1d4e";
const CONFIG_SECRET: &str = "canary-config-secret-91ab";
const TOOL_SECRET: &str = "canary tool secret words";
const PROVIDER_SECRET: &str = "canary-provider-body-55de";
const MODEL_SECRET: &str = "sk-canaryMODEL1234567890abcdefgh";
const MODEL_PHRASE: &str = "correct horse battery staple";

fn everything_written(ws: &TestWorkspace) -> String {
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(ws.path().join(".attest"))
        .unwrap()
        .flatten()
    {
        bytes.extend(std::fs::read(entry.path()).unwrap_or_default());
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A call whose arguments carry `secret` and do not parse (Anthropic's
/// non-streamed tool input is always an object: there, a wrong type).
fn malformed_quoting(variant: Variant, secret: &str) -> Call {
    if variant.wire == Wire::Anthropic && !variant.stream {
        call("read_file", json!({"path": [secret]}))
    } else {
        raw_call("read_file", &format!(r#"{{"path": "{secret}""#))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_secrets_are_scrubbed_from_requests_store_trace_and_output() {
    for variant in VARIANTS {
        let ws = TestWorkspace::new();
        // A secret in config: a command tool's setting that the tool prints.
        ws.append_config(&format!(
            "[[tools]]\nname = \"deploy_status\"\ndescription = \"Status of the deploy\"\neffect = \"observe\"\ncommand = [\"sh\", \"-c\", \"cat >/dev/null; printf '{{\\\"status\\\": \\\"ok\\\", \\\"token\\\": \\\"{CONFIG_SECRET}\\\"}}'\"]\n"
        ));
        ws.write(
            "creds.txt",
            &format!("db = prod\npassword = \"{TOOL_SECRET}\"\n"),
        );
        let model = MockModel::start(
            variant,
            vec![
                Turn::tool("read_file", json!({"path": "creds.txt"})),
                // The provider echoes a secret (and the key) in an error body.
                Turn::ErrorBody {
                    code: 500,
                    body: format!(
                        r#"{{"error": {{"message": "upstream failed: token={PROVIDER_SECRET} key {ENV_KEY}"}}}}"#
                    ),
                },
                Turn::tool("deploy_status", json!({})),
                // Malformed arguments quoting the key: their parse-failure
                // preview (or, where the wire always sends an object, the
                // schema error quoting the value) goes to the trace.
                Turn::calls("", vec![malformed_quoting(variant, ENV_KEY)]),
                // A schema violation whose error message quotes the value.
                Turn::tool("read_file", json!({"path": {"secret": MODEL_SECRET}})),
                Turn::text(&format!(
                    "Done. The key is {MODEL_SECRET} and the config says {{\"password\": \"{MODEL_PHRASE}\"}}; the env key is {ENV_KEY}."
                )),
            ],
        )
        .await;
        let r = run_attest_env(
            &model,
            &ws,
            &[
                "--expect",
                "observe",
                "What do creds.txt and the deploy status say?",
            ],
            &[("OPENAI_API_KEY", ENV_KEY), ("ANTHROPIC_API_KEY", ENV_KEY)],
        )
        .await;
        assert_eq!(r.code, 0, "{}", r.describe());
        model.assert_valid();
        // Both bad calls were refused (so their texts were written).
        let refused = r.done()["receipts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|rc| rc["status"] == "invalid_arguments")
            .count();
        assert_eq!(refused, 2, "{variant:?}: {}", r.done());

        let trace = run_binary(
            vec![
                "trace".into(),
                "-C".into(),
                ws.path().display().to_string(),
                "--json".into(),
                r.events.last().unwrap()["run_id"].as_str().unwrap().into(),
            ],
            &[],
        )
        .await;
        assert_eq!(trace.code, 0, "{}", trace.describe());
        let raw_trace = run_binary(
            vec![
                "trace".into(),
                "-C".into(),
                ws.path().display().to_string(),
                "--raw".into(),
                r.events.last().unwrap()["run_id"].as_str().unwrap().into(),
            ],
            &[],
        )
        .await;

        let requests = serde_json::to_string(&model.requests()).unwrap();
        let places = [
            ("requests", requests),
            ("store bytes", everything_written(&ws)),
            ("trace", trace.stdout.clone()),
            ("raw trace", raw_trace.stdout.clone()),
            ("stdout", r.stdout.clone()),
            ("stderr", r.stderr.clone()),
        ];
        for (place, text) in &places {
            for canary in [
                ENV_KEY,
                CONFIG_SECRET,
                TOOL_SECRET,
                PROVIDER_SECRET,
                MODEL_SECRET,
                MODEL_PHRASE,
            ] {
                assert!(
                    !text.contains(canary),
                    "{variant:?}: `{canary}` reached the {place}"
                );
            }
            // Nor any word of the multi-word values.
            for word in ["horse battery", "tool secret"] {
                assert!(
                    !text.contains(word),
                    "{variant:?}: `{word}` reached the {place}"
                );
            }
        }
        // The key did authenticate the requests, in their header only.
        assert!(model.headers().iter().all(|h| h
            .iter()
            .any(|(k, v)| (k == "authorization" || k == "x-api-key") && v.contains(ENV_KEY))));
        // And the scrubbed places still say what happened.
        assert!(places[2].1.contains("[REDACTED]"), "{}", places[2].1);
    }
}
