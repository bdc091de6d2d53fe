//! The `generic` adapter: a decision posted by any sender that holds the
//! Standard Webhooks secret (`[server.hooks] generic_secret_env`), signed
//! like the server's own deliveries.

use super::sign::Secret;
use super::{ButtonValue, HookError, Inbound};
use crate::api::{Decision, DecisionScope};
use axum::http::HeaderMap;
use serde::Deserialize;

/// The body of a generic decision.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HookDecision {
    pub call_id: String,
    /// The run the call belongs to; when given, a call of another run
    /// with the same id is not decided (409).
    #[serde(default)]
    pub run_id: Option<String>,
    pub decision: Decision,
    #[serde(default)]
    pub scope: DecisionScope,
    /// Shown to the model with a denial.
    #[serde(default)]
    pub message: Option<String>,
    /// Who decided, as the run's `approval_resolved` names them (default
    /// `webhook`).
    #[serde(default)]
    pub decided_by: Option<String>,
}

/// Verify the three `webhook-*` headers; the delivery id for replay
/// protection and the decision.
pub fn parse(
    secret: &Secret,
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
) -> Result<(String, Inbound), HookError> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| HookError::Unauthorized(format!("`{name}` is missing")))
    };
    let id = header("webhook-id")?;
    secret.verify(
        id,
        header("webhook-timestamp")?,
        header("webhook-signature")?,
        body,
        now,
    )?;
    let d: HookDecision = serde_json::from_slice(body)
        .map_err(|e| HookError::BadRequest(format!("invalid body: {e}")))?;
    let decided_by = d
        .decided_by
        .filter(|s| !s.trim().is_empty() && s.len() <= 200)
        .unwrap_or_else(|| "webhook".into());
    Ok((
        id.to_string(),
        Inbound::Decide {
            button: ButtonValue {
                call_id: d.call_id,
                run_id: d.run_id,
                decision: d.decision,
                scope: d.scope,
                token: None,
                message: d.message,
            },
            decided_by,
            follow_up: None,
        },
    ))
}
