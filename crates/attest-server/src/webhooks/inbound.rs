//! `POST /v1/hooks/{adapter}`: a signed decision from outside. No bearer
//! token: the sender's signature is the authentication. The order is
//! fixed so that a refused callback changes nothing: size and rate, then
//! the signature and the timestamp, then the button's approval token,
//! then the delivery key (a replay is refused), and only then the
//! decision.

use super::{feishu, generic, outbound, slack, CallView, Decided, HookError, Inbound};
use crate::api::{ApprovalDecided, ErrorBody};
use crate::error::ApiError;
use crate::extract::ApiPath;
use crate::state::AppState;
use attest::ApprovalDecision;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sha2::{Digest, Sha256};

/// Callbacks are small; anything larger is refused unread.
const MAX_BODY: usize = 64 * 1024;

fn signature_key(adapter: &str, headers: &HeaderMap, name: &str) -> String {
    // The signature covers the timestamp and body (and Feishu's nonce):
    // an identical replay has the same one. Its hash is the key, so the
    // store never holds a signature.
    let sig = headers
        .get(name)
        .map(|v| v.as_bytes().to_vec())
        .unwrap_or_default();
    format!("{adapter}:{}", hex::encode(Sha256::digest(&sig)))
}

/// Decide a pending approval from a signed callback. No bearer token:
/// the sender's signature is the authentication.
#[utoipa::path(
    post, path = "/v1/hooks/{adapter}", tag = "approvals",
    params(
        ("adapter" = String, Path, description = "`generic` (Standard Webhooks signature), `feishu` (card.action.trigger, X-Lark-Signature) or `slack` (block_actions, X-Slack-Signature v0)"),
        ("webhook-id" = Option<String>, Header, description = "generic: the delivery id; a second delivery with the same id is refused"),
        ("webhook-timestamp" = Option<String>, Header, description = "generic: Unix seconds, within 5 minutes of the server's clock"),
        ("webhook-signature" = Option<String>, Header, description = "generic: `v1,<base64 HMAC-SHA256 of id.timestamp.body>`, space-separated when several"),
        ("X-Lark-Request-Timestamp" = Option<String>, Header, description = "feishu"),
        ("X-Lark-Request-Nonce" = Option<String>, Header, description = "feishu"),
        ("X-Lark-Signature" = Option<String>, Header, description = "feishu: hex SHA-256 of timestamp + nonce + Encrypt Key + body"),
        ("X-Slack-Request-Timestamp" = Option<String>, Header, description = "slack"),
        ("X-Slack-Signature" = Option<String>, Header, description = "slack: `v0=<hex HMAC-SHA256 of v0:timestamp:body>`"),
    ),
    request_body(content = HookDecision, description = "generic: this JSON, signed with webhook-id / webhook-timestamp / webhook-signature; feishu: the card callback (JSON, optionally {\"encrypt\": …}); slack: the form-encoded `payload`"),
    responses(
        (status = 200, description = "generic: the decision; feishu: a toast and the decided card; slack: the decided message (also when it was already decided)", body = Object),
        (status = 400, body = ErrorBody),
        (status = 401, description = "Forged, stale (more than 5 min), replayed, or an approval token that does not fit the call: nothing changed", body = ErrorBody),
        (status = 404, description = "This adapter is not configured", body = ErrorBody),
        (status = 409, description = "generic: nothing waits for this call (already decided)", body = ErrorBody),
        (status = 429, body = ErrorBody),
    )
)]
pub async fn receive(
    State(state): State<AppState>,
    ApiPath(adapter): ApiPath<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let hooks = &state.webhooks;
    if !hooks.admit() {
        return Err(ApiError::TooManyRequests(
            "too many callbacks this second; try again".into(),
        ));
    }
    if body.len() > MAX_BODY {
        return Err(ApiError::BadRequest(format!(
            "the body is larger than {MAX_BODY} bytes"
        )));
    }
    let now = chrono::Utc::now().timestamp();
    let not_configured =
        || ApiError::NotFound(format!("the `{adapter}` adapter is not configured"));
    let (key, inbound) = match adapter.as_str() {
        "generic" => {
            let secret = hooks.generic.as_ref().ok_or_else(not_configured)?;
            let (id, inbound) = generic::parse(secret, &headers, &body, now)?;
            (format!("generic:{id}"), inbound)
        }
        "slack" => {
            let secret = hooks.slack.as_ref().ok_or_else(not_configured)?;
            slack::verify(secret, &headers, &body, now)?;
            let key = signature_key("slack", &headers, "x-slack-signature");
            (key, slack::parse(&body)?)
        }
        "feishu" => {
            let keys = hooks.feishu.as_ref().ok_or_else(not_configured)?;
            let inbound = feishu::parse(keys, &headers, &body, now)?;
            if let Inbound::Challenge(answer) = inbound {
                return Ok(Json(answer).into_response());
            }
            (
                signature_key("feishu", &headers, "x-lark-signature"),
                inbound,
            )
        }
        _ => return Err(not_configured()),
    };
    let Inbound::Decide {
        button,
        decided_by,
        follow_up,
    } = inbound
    else {
        return Err(ApiError::BadRequest("nothing to decide".into()));
    };
    if adapter != "generic" && !hooks.token_fits(&button) {
        return Err(HookError::Unauthorized(
            "the button's approval token does not fit this call".into(),
        )
        .into());
    }
    if !state.store().first_delivery(&key, chrono::Utc::now())? {
        return Err(HookError::Unauthorized(
            "this callback was already received (a replay): nothing changed".into(),
        )
        .into());
    }
    // A call id names a call within one run: the button's run, when it
    // carries one, picks which.
    let call = state
        .pending_approvals()
        .iter()
        .find(|p| {
            p.request.call_id == button.call_id
                && button
                    .run_id
                    .as_ref()
                    .is_none_or(|run| *run == p.request.run_id)
        })
        .map(CallView::from_pending);
    let approved = button.approved();
    let decision = ApprovalDecision {
        approved,
        decided_by: decided_by.clone(),
        message: button.message.clone(),
        via: Some("webhook".into()),
    };
    let pending = state.decide_approval(
        button.run_id.as_deref(),
        &button.call_id,
        decision,
        button.scope == crate::api::DecisionScope::Session,
    )?;
    let decided = match &pending {
        Some(_) => Decided::Now {
            approved,
            by: decided_by.clone(),
        },
        None => Decided::Already,
    };
    Ok(match adapter.as_str() {
        "generic" => match pending {
            Some(p) => Json(ApprovalDecided {
                call_id: button.call_id,
                run_id: p.request.run_id,
                approved,
                decided_by,
            })
            .into_response(),
            None => {
                return Err(ApiError::Conflict(format!(
                    "no approval is pending for `{}`: it was already decided (or never asked); nothing changed",
                    button.call_id
                )))
            }
        },
        "feishu" => Json(feishu::decided_response(call.as_ref(), &decided)).into_response(),
        _ => {
            let message = slack::decided_message(call.as_ref(), &decided);
            // Slack ignores a block_actions answer's body: the message that
            // asked is updated through the callback's response_url.
            if let (Some(url), Some(pending)) = (follow_up, &pending) {
                outbound::update_message(&state, &pending.request.run_id, &url, &message);
            }
            Json(message).into_response()
        }
    })
}

pub use generic::HookDecision;
