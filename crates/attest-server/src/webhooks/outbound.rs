//! Outbound deliveries: a run's `approval_requested` and `done`, to each
//! `[[server.webhooks]]` entry that asked for them, signed per Standard
//! Webhooks, and a Slack message's update once its approval is decided;
//! retried with exponential backoff on a network error, a 5xx, 408 or
//! 429, every attempt a `webhook_delivery` record in the run's trace
//! (host, event, webhook-id, status or error, attempt).

use super::{feishu, slack, ButtonValue, CallView, Endpoint, Format};
use crate::api::{Decision, DecisionScope};
use crate::state::AppState;
use attest::protocol::{LogEntry, TraceRecord};
use attest::{Event, EventBody};
use serde_json::{json, Value};
use std::time::Duration;

/// How long a delivery waits for the approval to be registered (the
/// event is emitted just before the engine asks): its rule is shown, and
/// a callback that answers at once finds it pending.
const PENDING_WAIT: Duration = Duration::from_secs(5);
/// The longest pause between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The observer hook: start the deliveries `event` calls for.
pub fn observe(state: &AppState, session_id: &str, event: &Event) {
    let kind = match &event.body {
        EventBody::ApprovalRequested { .. } => "approval_requested",
        EventBody::Done { .. } => "done",
        _ => return,
    };
    if !state
        .webhooks
        .endpoints
        .iter()
        .any(|e| e.events.iter().any(|k| k == kind))
    {
        return;
    }
    let (state, session_id, event) = (state.clone(), session_id.to_string(), event.clone());
    tokio::spawn(async move { deliver_event(state, session_id, kind, event).await });
}

/// What the event is about, for every format.
enum Subject {
    Approval(CallView),
    Done(Value),
}

async fn deliver_event(state: AppState, session_id: String, kind: &'static str, event: Event) {
    let subject = match &event.body {
        EventBody::ApprovalRequested { call_id, .. } => {
            match wait_for_pending(&state, &event.run_id, call_id).await {
                Some(call) => Subject::Approval(call),
                // Decided at once (a session grant): nobody needs asking.
                None => return,
            }
        }
        _ => {
            let v = serde_json::to_value(&event).unwrap_or_default();
            Subject::Done(json!({
                "run_id": event.run_id,
                "session_id": session_id,
                "state": v["state"],
                "reason": v["reason"],
                "basis": v["basis"],
                "answer": v["answer"],
            }))
        }
    };
    let deliveries = state
        .webhooks
        .endpoints
        .iter()
        .filter(|e| e.events.iter().any(|k| k == kind))
        .map(|endpoint| {
            let body = body_for(&state, endpoint.format, kind, &session_id, &subject);
            deliver(&state, endpoint, &event.run_id, kind, body)
        })
        .collect::<Vec<_>>();
    futures::future::join_all(deliveries).await;
}

/// Attempts at updating a decided approval's message.
const UPDATE_ATTEMPTS: u32 = 3;

/// Replace the message that asked for an approval with `message`, at the
/// `response_url` of a verified Slack callback — only where it starts with
/// the configured prefix (`[server.hooks] slack_response_url_prefix`): the
/// URL came in a request, and the server posts nowhere a request names.
pub fn update_message(state: &AppState, run_id: &str, url: &str, message: &Value) {
    let Some(host) = state.webhooks.follows(url) else {
        (state.env.notices)(&format!(
            "run {run_id}: a Slack callback's response_url is not under {}; \
             the message was not updated",
            state.webhooks.slack_response_prefix
        ));
        return;
    };
    let endpoint = Endpoint {
        url: url.to_string(),
        host,
        secret: None,
        events: Vec::new(),
        format: Format::Slack,
        max_attempts: UPDATE_ATTEMPTS,
    };
    let body = serde_json::to_vec(message).unwrap_or_default();
    let (state, run_id) = (state.clone(), run_id.to_string());
    tokio::spawn(async move {
        deliver(&state, &endpoint, &run_id, "approval_decided", body).await;
    });
}

async fn wait_for_pending(state: &AppState, run_id: &str, call_id: &str) -> Option<CallView> {
    let deadline = tokio::time::Instant::now() + PENDING_WAIT;
    loop {
        if let Some(p) = state
            .pending_approvals()
            .iter()
            .find(|p| p.request.call_id == call_id && p.request.run_id == run_id)
        {
            return Some(CallView::from_pending(p));
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn button(state: &AppState, call: &CallView, decision: Decision) -> ButtonValue {
    ButtonValue {
        call_id: call.call_id.clone(),
        run_id: Some(call.run_id.clone()),
        decision,
        scope: DecisionScope::Once,
        token: state.webhooks.token(&call.run_id, &call.call_id),
        message: None,
    }
}

fn body_for(
    state: &AppState,
    format: Format,
    kind: &str,
    session_id: &str,
    subject: &Subject,
) -> Vec<u8> {
    let value = match (format, subject) {
        (Format::Standard, Subject::Approval(call)) => json!({
            "type": kind,
            "timestamp": now_rfc3339(),
            "data": {
                "run_id": call.run_id,
                "session_id": session_id,
                "call_id": call.call_id,
                "tool": call.tool,
                "arguments": call.arguments,
                "rule": call.rule,
            },
        }),
        (Format::Standard, Subject::Done(data)) => json!({
            "type": kind,
            "timestamp": now_rfc3339(),
            "data": data,
        }),
        (Format::Feishu, Subject::Approval(call)) => json!({
            "msg_type": "interactive",
            "card": feishu::request_card(
                call,
                &button(state, call, Decision::Allow),
                &button(state, call, Decision::Deny),
            ),
        }),
        (Format::Slack, Subject::Approval(call)) => slack::request_message(
            call,
            &button(state, call, Decision::Allow),
            &button(state, call, Decision::Deny),
        ),
        (Format::Feishu, Subject::Done(d)) => feishu::text_message(&done_text(d)),
        (Format::Slack, Subject::Done(d)) => json!({ "text": done_text(d) }),
    };
    serde_json::to_vec(&value).unwrap_or_default()
}

fn done_text(d: &Value) -> String {
    format!(
        "Run {} ended {} ({}): {}",
        d["run_id"].as_str().unwrap_or_default(),
        d["state"].as_str().unwrap_or_default(),
        d["reason"].as_str().unwrap_or_default(),
        d["basis"].as_str().unwrap_or_default()
    )
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Whether an answer is worth another attempt.
fn retryable(status: u16) -> bool {
    status >= 500 || status == 408 || status == 429
}

async fn deliver(state: &AppState, endpoint: &Endpoint, run_id: &str, kind: &str, body: Vec<u8>) {
    let hooks = &state.webhooks;
    // One id for every attempt: the receiver's replay protection sees
    // the retries of one delivery as one.
    let id = format!("msg_{}", uuid::Uuid::new_v4().simple());
    for attempt in 1..=endpoint.max_attempts {
        let ts = chrono::Utc::now().timestamp();
        let mut request = hooks
            .client
            .post(&endpoint.url)
            .header("content-type", "application/json")
            .header("webhook-id", &id)
            .header("webhook-timestamp", ts.to_string())
            .body(body.clone());
        if let Some(secret) = &endpoint.secret {
            request = request.header("webhook-signature", secret.sign(&id, ts, &body));
        }
        let (status, error) = match request.send().await {
            Ok(resp) => (Some(resp.status().as_u16()), None),
            // Without the URL: its path or query may hold a token.
            Err(e) => (None, Some(e.without_url().to_string())),
        };
        let delivered = status.is_some_and(|s| (200..300).contains(&s));
        let record = TraceRecord::WebhookDelivery {
            event: kind.to_string(),
            webhook_id: id.clone(),
            host: endpoint.host.clone(),
            attempt,
            status,
            error,
            delivered,
        };
        if let Err(e) = state
            .log(run_id)
            .lock()
            .append(run_id, &LogEntry::Trace { trace: record })
        {
            (state.env.notices)(&format!(
                "run {run_id}: cannot record a webhook delivery: {e}"
            ));
        }
        if delivered || status.is_some_and(|s| !retryable(s)) {
            return;
        }
        if attempt < endpoint.max_attempts {
            let pause = hooks.backoff.saturating_mul(1 << (attempt - 1).min(16));
            tokio::time::sleep(pause.min(MAX_BACKOFF)).await;
        }
    }
    (state.env.notices)(&format!(
        "run {run_id}: webhook {kind} to {} not delivered after {} attempt(s)",
        endpoint.host, endpoint.max_attempts
    ));
}
