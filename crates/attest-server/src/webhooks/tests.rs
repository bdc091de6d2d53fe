use super::*;
use attest::config::{HooksSection, WebhookEntry};
use std::sync::Arc;

fn env(vars: &[(&str, &str)]) -> EnvLookup {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Arc::new(move |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
}

const WHSEC: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn webhook(format: Option<&str>, secret_env: Option<&str>) -> WebhookEntry {
    WebhookEntry {
        url: "http://127.0.0.1:9/hook".into(),
        secret_env: secret_env.map(str::to_string),
        format: format.map(str::to_string),
        ..WebhookEntry::default()
    }
}

fn error(server: &ServerSection, vars: &[(&str, &str)]) -> String {
    match Webhooks::from_config(server, &env(vars)) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn missing_variables_and_bad_values_are_named_at_start_up() {
    let mut server = ServerSection {
        webhooks: vec![webhook(None, Some("HOOK_SECRET"))],
        ..ServerSection::default()
    };
    assert!(error(&server, &[]).contains("HOOK_SECRET, which is not set"));
    assert!(error(&server, &[("HOOK_SECRET", "whsec_!!")]).contains("base64"));
    let ok = Webhooks::from_config(&server, &env(&[("HOOK_SECRET", WHSEC)])).unwrap();
    assert_eq!(ok.endpoints[0].host, "127.0.0.1");
    assert_eq!(ok.endpoints[0].events, vec!["approval_requested"]);

    server.webhooks = vec![webhook(None, None)];
    assert!(error(&server, &[]).contains("needs `secret_env`"));
    server.webhooks = vec![webhook(Some("teams"), Some("HOOK_SECRET"))];
    assert!(error(&server, &[("HOOK_SECRET", WHSEC)]).contains("\"teams\""));
    let mut odd = webhook(None, Some("HOOK_SECRET"));
    odd.events = Some(vec!["run_started".into()]);
    server.webhooks = vec![odd];
    assert!(error(&server, &[("HOOK_SECRET", WHSEC)]).contains("run_started"));
    let mut bad_url = webhook(None, Some("HOOK_SECRET"));
    bad_url.url = "file:///etc/passwd".into();
    server.webhooks = vec![bad_url];
    assert!(error(&server, &[("HOOK_SECRET", WHSEC)]).contains("http(s)"));
}

#[test]
fn cards_need_the_action_secret_and_feishu_needs_its_encrypt_key() {
    let server = ServerSection {
        webhooks: vec![webhook(Some("slack"), None)],
        ..ServerSection::default()
    };
    assert!(error(&server, &[]).contains("action_secret_env is required"));
    let server = ServerSection {
        hooks: HooksSection {
            feishu_verification_token_env: Some("FS_TOKEN".into()),
            action_secret_env: Some("ACTION".into()),
            ..HooksSection::default()
        },
        ..ServerSection::default()
    };
    assert!(error(&server, &[("FS_TOKEN", "t"), ("ACTION", "a")])
        .contains("needs feishu_encrypt_key_env"));
}

#[test]
fn config_keys_are_checked_by_name() {
    let text = "[server]\n[[server.webhooks]]\nurl = \"http://x\"\nsecret = \"whsec_x\"\n";
    let err = toml::from_str::<attest::config::ConfigFile>(text).unwrap_err();
    assert!(err.to_string().contains("unknown field `secret`"), "{err}");
    let text = "[server.hooks]\nslack_secret_env = \"X\"\n";
    assert!(toml::from_str::<attest::config::ConfigFile>(text).is_err());
}

fn with_action_key() -> Webhooks {
    Webhooks {
        action_key: Some(b"server secret".to_vec()),
        ..Webhooks::none()
    }
}

#[test]
fn an_approval_token_fits_only_its_call_in_its_run() {
    let hooks = with_action_key();
    let token = hooks.token("run_1", "call_1").unwrap();
    let button = |run: &str, call: &str, token: Option<&str>| ButtonValue {
        call_id: call.into(),
        run_id: Some(run.into()),
        decision: Decision::Allow,
        scope: DecisionScope::Once,
        token: token.map(str::to_string),
        message: None,
    };
    assert!(hooks.token_fits(&button("run_1", "call_1", Some(&token))));
    assert!(!hooks.token_fits(&button("run_1", "call_2", Some(&token))));
    // Call ids repeat across runs: another run's call_1 does not fit.
    assert!(!hooks.token_fits(&button("run_2", "call_1", Some(&token))));
    assert!(!hooks.token_fits(&button("run_1", "call_1", None)));
    assert!(!hooks.token_fits(&button("run_1", "call_1", Some("0000"))));
    assert!(!Webhooks::none().token_fits(&button("run_1", "call_1", Some(&token))));
}

fn call() -> CallView {
    CallView {
        run_id: "run_1".into(),
        call_id: "call_1".into(),
        tool: "shell".into(),
        arguments: serde_json::json!({"command": "rm -rf build", "api_key": "[REDACTED]"}),
        rule: "shell: ask".into(),
    }
}

fn buttons() -> (ButtonValue, ButtonValue) {
    let b = |decision| ButtonValue {
        call_id: "call_1".into(),
        run_id: Some("run_1".into()),
        decision,
        scope: DecisionScope::Once,
        token: Some("tok".into()),
        message: None,
    };
    (b(Decision::Allow), b(Decision::Deny))
}

#[test]
fn the_feishu_card_shows_tool_arguments_rule_and_two_buttons() {
    let (approve, reject) = buttons();
    insta::assert_json_snapshot!(
        "feishu_request_card",
        feishu::request_card(&call(), &approve, &reject)
    );
    let decided = Decided::Now {
        approved: true,
        by: "feishu:ou_1".into(),
    };
    insta::assert_json_snapshot!(
        "feishu_decided",
        feishu::decided_response(Some(&call()), &decided)
    );
}

#[test]
fn the_slack_message_shows_tool_arguments_rule_and_two_buttons() {
    let (approve, reject) = buttons();
    insta::assert_json_snapshot!(
        "slack_request_message",
        slack::request_message(&call(), &approve, &reject)
    );
    let value: ButtonValue = serde_json::from_str(
        slack::request_message(&call(), &approve, &reject)["blocks"][2]["elements"][1]["value"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert!(!value.approved());
    assert_eq!(value.token.as_deref(), Some("tok"));
}

#[test]
fn callbacks_beyond_the_per_second_budget_are_refused() {
    let hooks = Webhooks::none();
    for _ in 0..CALLBACKS_PER_SECOND {
        assert!(hooks.admit());
    }
    assert!(!hooks.admit());
}

#[test]
fn a_slack_response_url_is_followed_only_under_the_configured_prefix() {
    let hooks = Webhooks::none();
    assert_eq!(
        hooks
            .follows("https://hooks.slack.com/actions/T1/2/abc")
            .as_deref(),
        Some("hooks.slack.com")
    );
    for refused in [
        "http://hooks.slack.com/actions/T1/2/abc",
        "https://hooks.slack.com.evil.example/actions",
        "https://evil.example/https://hooks.slack.com/",
        "https://hooks.slack.com:8443/actions",
        "not a url",
    ] {
        assert_eq!(hooks.follows(refused), None, "{refused}");
    }
    let server = ServerSection {
        hooks: HooksSection {
            slack_response_url_prefix: Some("http://127.0.0.1:9/slack/".into()),
            ..HooksSection::default()
        },
        ..ServerSection::default()
    };
    let local = Webhooks::from_config(&server, &env(&[])).unwrap();
    assert!(local.follows("http://127.0.0.1:9/slack/T1/1").is_some());
    assert!(local.follows("http://127.0.0.1:9/other/T1/1").is_none());
    assert!(local
        .follows("https://hooks.slack.com/actions/T1/2/abc")
        .is_none());
    for bad in ["ftp://127.0.0.1/slack/", "http://127.0.0.1:9/slack", "nope"] {
        let server = ServerSection {
            hooks: HooksSection {
                slack_response_url_prefix: Some(bad.into()),
                ..HooksSection::default()
            },
            ..ServerSection::default()
        };
        assert!(
            error(&server, &[]).contains("slack_response_url_prefix"),
            "{bad}"
        );
    }
}
