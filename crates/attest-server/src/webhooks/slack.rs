//! Slack: approval requests as Block Kit messages with Approve / Reject
//! buttons, and their `block_actions` callbacks verified by Slack's `v0`
//! request signing (`X-Slack-Signature: v0=<hex HMAC-SHA256 of
//! "v0:{X-Slack-Request-Timestamp}:{raw body}">` under the app's Signing
//! Secret; <https://api.slack.com/authentication/verifying-requests-from-slack>).

use super::sign::{constant_time_eq, fresh, hmac_hex};
use super::{ButtonValue, CallView, Decided, HookError, Inbound};
use axum::http::HeaderMap;
use serde_json::{json, Value};

/// Verify a request's signature and age.
pub fn verify(secret: &str, headers: &HeaderMap, body: &[u8], now: i64) -> Result<(), HookError> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| HookError::Unauthorized(format!("`{name}` is missing")))
    };
    let ts = header("x-slack-request-timestamp")?;
    let given = header("x-slack-signature")?;
    let expected = format!(
        "v0={}",
        hmac_hex(secret.as_bytes(), &[b"v0:", ts.as_bytes(), b":", body])
    );
    if !constant_time_eq(given.as_bytes(), expected.as_bytes()) {
        return Err(HookError::Unauthorized(
            "`X-Slack-Signature` does not match the body".into(),
        ));
    }
    let ts: i64 = ts.parse().map_err(|_| {
        HookError::Unauthorized("`X-Slack-Request-Timestamp` is not Unix seconds".into())
    })?;
    fresh(ts, now)
}

/// The decision a verified `block_actions` payload (`payload=<json>`,
/// form-encoded) carries.
pub fn parse(body: &[u8]) -> Result<Inbound, HookError> {
    let payload = form_urlencoded::parse(body)
        .find(|(k, _)| k == "payload")
        .map(|(_, v)| v.into_owned())
        .ok_or_else(|| HookError::BadRequest("no `payload` field in the form body".into()))?;
    let payload: Value = serde_json::from_str(&payload)
        .map_err(|e| HookError::BadRequest(format!("`payload` is not JSON: {e}")))?;
    if payload["type"] != "block_actions" {
        return Err(HookError::BadRequest(format!(
            "payload type {} is not `block_actions`",
            payload["type"]
        )));
    }
    let value = payload["actions"][0]["value"]
        .as_str()
        .ok_or_else(|| HookError::BadRequest("the action carries no value".into()))?;
    let button: ButtonValue = serde_json::from_str(value)
        .map_err(|e| HookError::BadRequest(format!("the button's value: {e}")))?;
    let user = &payload["user"];
    let who = user["username"]
        .as_str()
        .or(user["name"].as_str())
        .or(user["id"].as_str())
        .unwrap_or("unknown");
    Ok(Inbound::Decide {
        button,
        decided_by: format!("slack:{who}"),
        follow_up: payload["response_url"].as_str().map(str::to_string),
    })
}

fn summary(call: &CallView) -> String {
    format!(
        "*Approval needed:* `{}`\n*Rule:* {}\n*Run:* `{}`",
        call.tool, call.rule, call.run_id
    )
}

/// The Block Kit message asking for a decision.
pub fn request_message(call: &CallView, approve: &ButtonValue, reject: &ButtonValue) -> Value {
    let button = |text: &str, id: &str, style: &str, value: &ButtonValue| {
        json!({
            "type": "button",
            "action_id": id,
            "style": style,
            "text": {"type": "plain_text", "text": text},
            "value": serde_json::to_string(value).unwrap_or_default(),
        })
    };
    json!({
        "text": format!("Approval needed: {} (run {})", call.tool, call.run_id),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": summary(call)}},
            {"type": "section", "text": {"type": "mrkdwn", "text": format!("```{}```", call.arguments_text())}},
            {"type": "actions", "block_id": "attest_approval", "elements": [
                button("Approve", "attest_approve", "primary", approve),
                button("Reject", "attest_reject", "danger", reject),
            ]},
        ],
    })
}

/// The answer to a callback: the message as it reads once decided.
pub fn decided_message(call: Option<&CallView>, decided: &Decided) -> Value {
    let text = decided.text();
    let mut blocks = Vec::new();
    if let Some(call) = call {
        blocks.push(json!({"type": "section", "text": {"type": "mrkdwn", "text": summary(call)}}));
    }
    blocks.push(json!({"type": "context", "elements": [{"type": "mrkdwn", "text": text}]}));
    json!({"replace_original": true, "text": text, "blocks": blocks})
}

#[cfg(test)]
mod tests {
    use super::*;

    // Slack's own example from "Verifying requests from Slack".
    const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const TS: &str = "1531420618";
    const BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const SIGNATURE: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    fn headers(ts: &str, sig: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-slack-request-timestamp", ts.parse().unwrap());
        h.insert("x-slack-signature", sig.parse().unwrap());
        h
    }

    #[test]
    fn the_documented_example_verifies() {
        verify(SECRET, &headers(TS, SIGNATURE), BODY.as_bytes(), 1531420618).unwrap();
    }

    #[test]
    fn a_changed_body_a_wrong_secret_and_a_stale_request_are_refused() {
        let now = 1531420618;
        let refused = |secret: &str, h: HeaderMap, body: &str, now: i64| {
            matches!(
                verify(secret, &h, body.as_bytes(), now),
                Err(HookError::Unauthorized(_))
            )
        };
        assert!(refused(
            SECRET,
            headers(TS, SIGNATURE),
            &format!("{BODY}x"),
            now
        ));
        assert!(refused("another-secret", headers(TS, SIGNATURE), BODY, now));
        assert!(refused(SECRET, headers("1531420619", SIGNATURE), BODY, now));
        assert!(refused(SECRET, headers(TS, SIGNATURE), BODY, now + 301));
        assert!(refused(SECRET, HeaderMap::new(), BODY, now));
    }

    #[test]
    fn a_block_actions_payload_names_the_button_and_the_user() {
        let value = r#"{"call_id":"call_1","run_id":"run_1","decision":"allow","token":"t"}"#;
        let payload = json!({
            "type": "block_actions",
            "user": {"id": "U1", "username": "alice"},
            "actions": [{"action_id": "attest_approve", "value": value}],
            "response_url": "https://hooks.slack.com/actions/T1/1/abc",
        });
        let body: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", &payload.to_string())
            .finish();
        match parse(body.as_bytes()).unwrap() {
            Inbound::Decide {
                button,
                decided_by,
                follow_up,
            } => {
                assert_eq!(button.call_id, "call_1");
                assert_eq!(button.run_id.as_deref(), Some("run_1"));
                assert!(button.approved());
                assert_eq!(decided_by, "slack:alice");
                assert_eq!(
                    follow_up.as_deref(),
                    Some("https://hooks.slack.com/actions/T1/1/abc")
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse(b"payload=nope"),
            Err(HookError::BadRequest(_))
        ));
    }
}
