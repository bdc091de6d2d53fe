//! Approval notifications (SPEC F3, J2): outbound webhooks on a run's
//! `approval_requested` and `done`, signed per Standard Webhooks and
//! retried with backoff, each attempt in the run's trace; and inbound
//! decisions at `POST /v1/hooks/{adapter}` (`generic`, `feishu`,
//! `slack`), each verified against its sender's signature, refused when
//! stale (> 5 min) or replayed (its delivery key is recorded in the
//! store, so a second server sharing it refuses it too). Card buttons
//! carry an approval token bound to the call id; an approval is decided
//! once, so a second use answers that it was already decided.
//!
//! Approvals are reached only through `AppState::pending_approvals` and
//! `AppState::decide_approval`.

mod feishu;
mod generic;
mod inbound;
mod outbound;
pub mod sign;
mod slack;

pub use inbound::{__path_receive, receive, HookDecision};
pub use outbound::observe;

use crate::api::{Decision, DecisionScope};
use crate::error::ApiError;
use attest::config::ServerSection;
use attest::core::PendingApproval;
use attest::EnvLookup;
use serde::{Deserialize, Serialize};
use sign::Secret;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Why a callback was refused.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// Forged, stale, replayed, or a token that does not fit the call.
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    BadRequest(String),
}

impl From<HookError> for ApiError {
    fn from(e: HookError) -> Self {
        match e {
            HookError::Unauthorized(m) => ApiError::Unauthorized(m),
            HookError::BadRequest(m) => ApiError::BadRequest(m),
        }
    }
}

/// What `[server.webhooks]` or `[server.hooks]` got wrong.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct WebhookConfigError(String);

/// What an outbound delivery's body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `{"type", "timestamp", "data"}` JSON.
    Standard,
    /// A Feishu/Lark interactive card message.
    Feishu,
    /// A Slack Block Kit message.
    Slack,
}

/// One `[[server.webhooks]]` entry, its secret read.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub url: String,
    /// For the trace: the host, never the path (it may hold a token).
    pub host: String,
    pub secret: Option<Secret>,
    pub events: Vec<String>,
    pub format: Format,
    pub max_attempts: u32,
}

/// The server's webhook settings, secrets read at start-up.
pub struct Webhooks {
    pub endpoints: Vec<Endpoint>,
    generic: Option<Secret>,
    feishu: Option<feishu::FeishuKeys>,
    slack: Option<String>,
    /// What a Slack `response_url` must start with to be followed.
    slack_response_prefix: String,
    action_key: Option<Vec<u8>>,
    client: reqwest::Client,
    /// The first retry's delay; doubled for each later one.
    pub backoff: Duration,
    window: Mutex<(Instant, u32)>,
}

/// Callbacks admitted per second; the rest get 429.
const CALLBACKS_PER_SECOND: u32 = 50;
/// Slack's `response_url`s live here.
const SLACK_RESPONSE_PREFIX: &str = "https://hooks.slack.com/";
const EVENTS: [&str; 2] = ["approval_requested", "done"];

impl Webhooks {
    /// No webhooks, no adapters.
    pub fn none() -> Webhooks {
        Webhooks {
            endpoints: Vec::new(),
            generic: None,
            feishu: None,
            slack: None,
            slack_response_prefix: SLACK_RESPONSE_PREFIX.into(),
            action_key: None,
            client: reqwest::Client::new(),
            backoff: Duration::from_secs(1),
            window: Mutex::new((Instant::now(), 0)),
        }
    }

    /// Read `[server.webhooks]` and `[server.hooks]`, looking the secrets
    /// up in `env`: an unset variable or a bad value is an error here, at
    /// start-up, never at the first delivery.
    pub fn from_config(
        server: &ServerSection,
        env: &EnvLookup,
    ) -> Result<Webhooks, WebhookConfigError> {
        let err = |m: String| WebhookConfigError(m);
        let read =
            |key: &str, var: &Option<String>| -> Result<Option<String>, WebhookConfigError> {
                let Some(var) = var else { return Ok(None) };
                match env(var).filter(|v| !v.trim().is_empty()) {
                    Some(v) => Ok(Some(v.trim().to_string())),
                    None => Err(err(format!(
                        "{key} names the environment variable {var}, which is not set"
                    ))),
                }
            };
        let mut endpoints = Vec::new();
        for (i, entry) in server.webhooks.iter().enumerate() {
            let at = format!("[[server.webhooks]] #{} ({})", i + 1, entry.url);
            let url = reqwest::Url::parse(&entry.url)
                .map_err(|e| err(format!("{at}: `url` is not a URL: {e}")))?;
            if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
                return Err(err(format!("{at}: `url` must be http(s)://host/…")));
            }
            let format = match entry.format.as_deref().unwrap_or("standard") {
                "standard" => Format::Standard,
                "feishu" => Format::Feishu,
                "slack" => Format::Slack,
                other => {
                    return Err(err(format!(
                        "{at}: `format` {other:?} is not standard, feishu or slack"
                    )))
                }
            };
            let secret = read(&format!("{at}: `secret_env`"), &entry.secret_env)?
                .map(|s| Secret::parse(&s))
                .transpose()
                .map_err(|e| err(format!("{at}: the secret in `secret_env` {e}")))?;
            if format == Format::Standard && secret.is_none() {
                return Err(err(format!(
                    "{at}: a standard webhook needs `secret_env` (a whsec_… secret)"
                )));
            }
            let events = entry
                .events
                .clone()
                .unwrap_or_else(|| vec!["approval_requested".into()]);
            if events.is_empty() {
                return Err(err(format!("{at}: `events` is empty")));
            }
            if let Some(bad) = events.iter().find(|e| !EVENTS.contains(&e.as_str())) {
                return Err(err(format!(
                    "{at}: event {bad:?} is not approval_requested or done"
                )));
            }
            let max_attempts = entry.max_attempts.unwrap_or(5);
            if !(1..=20).contains(&max_attempts) {
                return Err(err(format!("{at}: `max_attempts` must be 1 to 20")));
            }
            endpoints.push(Endpoint {
                host: url.host_str().unwrap_or_default().to_string(),
                url: entry.url.clone(),
                secret,
                events,
                format,
                max_attempts,
            });
        }
        let hooks = &server.hooks;
        let generic = read(
            "[server.hooks] generic_secret_env",
            &hooks.generic_secret_env,
        )?
        .map(|s| Secret::parse(&s))
        .transpose()
        .map_err(|e| {
            err(format!(
                "[server.hooks] the secret in generic_secret_env {e}"
            ))
        })?;
        let encrypt_key = read(
            "[server.hooks] feishu_encrypt_key_env",
            &hooks.feishu_encrypt_key_env,
        )?;
        let verification_token = read(
            "[server.hooks] feishu_verification_token_env",
            &hooks.feishu_verification_token_env,
        )?;
        let feishu =
            match (encrypt_key, verification_token) {
                (Some(encrypt_key), verification_token) => Some(feishu::FeishuKeys {
                    encrypt_key,
                    verification_token,
                }),
                (None, Some(_)) => return Err(err(
                    "[server.hooks] feishu_verification_token_env needs feishu_encrypt_key_env: \
                     Feishu signs callbacks with the Encrypt Key"
                        .into(),
                )),
                (None, None) => None,
            };
        let slack = read(
            "[server.hooks] slack_signing_secret_env",
            &hooks.slack_signing_secret_env,
        )?;
        let slack_response_prefix = match &hooks.slack_response_url_prefix {
            Some(prefix) => {
                let url = reqwest::Url::parse(prefix).map_err(|e| {
                    err(format!(
                        "[server.hooks] slack_response_url_prefix is not a URL: {e}"
                    ))
                })?;
                if !matches!(url.scheme(), "http" | "https")
                    || url.host_str().is_none()
                    || !prefix.ends_with('/')
                {
                    return Err(err(
                        "[server.hooks] slack_response_url_prefix must be http(s)://host/…/, \
                         ending in `/`"
                            .into(),
                    ));
                }
                prefix.clone()
            }
            None => SLACK_RESPONSE_PREFIX.into(),
        };
        let action_key = read("[server.hooks] action_secret_env", &hooks.action_secret_env)?
            .map(String::into_bytes);
        let cards = endpoints.iter().any(|e| e.format != Format::Standard);
        if (cards || feishu.is_some() || slack.is_some()) && action_key.is_none() {
            return Err(err(
                "[server.hooks] action_secret_env is required with a feishu or slack webhook \
                 or adapter: it keys the approval tokens in the cards' buttons"
                    .into(),
            ));
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| err(format!("cannot build the webhook client: {e}")))?;
        Ok(Webhooks {
            endpoints,
            generic,
            feishu,
            slack,
            slack_response_prefix,
            action_key,
            client,
            ..Webhooks::none()
        })
    }

    /// The approval token for `call_id`'s buttons.
    /// The approval token for the buttons of `call_id` in `run_id` (call
    /// ids repeat across runs, so the run is bound in too).
    fn token(&self, run_id: &str, call_id: &str) -> Option<String> {
        let key = self.action_key.as_ref()?;
        Some(sign::hmac_hex(
            key,
            &[
                b"attest-approval:",
                run_id.as_bytes(),
                b"\0",
                call_id.as_bytes(),
            ],
        ))
    }

    fn token_fits(&self, button: &ButtonValue) -> bool {
        let run_id = button.run_id.as_deref().unwrap_or_default();
        match (self.token(run_id, &button.call_id), button.token.as_deref()) {
            (Some(expected), Some(given)) => {
                sign::constant_time_eq(expected.as_bytes(), given.as_bytes())
            }
            _ => false,
        }
    }

    /// Whether a Slack `response_url` is one to post the decided message
    /// to: the configured prefix's scheme, host and port, under its path.
    /// Gives the host, for the trace.
    fn follows(&self, url: &str) -> Option<String> {
        let prefix = reqwest::Url::parse(&self.slack_response_prefix).ok()?;
        let url = reqwest::Url::parse(url).ok()?;
        let same_origin = url.scheme() == prefix.scheme()
            && url.host_str() == prefix.host_str()
            && url.port_or_known_default() == prefix.port_or_known_default();
        (same_origin && url.path().starts_with(prefix.path()))
            .then(|| url.host_str().unwrap_or_default().to_string())
    }

    /// Count one callback against this second's budget.
    fn admit(&self) -> bool {
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        if w.0.elapsed() >= Duration::from_secs(1) {
            *w = (Instant::now(), 0);
        }
        w.1 += 1;
        w.1 <= CALLBACKS_PER_SECOND
    }
}

/// What a card button (or a generic callback) says.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ButtonValue {
    pub call_id: String,
    /// The run the call belongs to (call ids repeat across runs); when
    /// given, a call of another run is not decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    pub decision: Decision,
    #[serde(default)]
    pub scope: DecisionScope,
    /// The approval token (required from `feishu` and `slack`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Shown to the model with a denial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl ButtonValue {
    pub fn approved(&self) -> bool {
        self.decision == Decision::Allow
    }
}

/// A verified callback.
#[derive(Debug)]
pub enum Inbound {
    /// Answer this (Feishu's URL check); nothing is decided.
    Challenge(serde_json::Value),
    Decide {
        button: ButtonValue,
        decided_by: String,
        /// Where the message that asked is updated once decided (Slack's
        /// `response_url`): the callback's answer does not change it.
        follow_up: Option<String>,
    },
}

/// An approval as cards show it.
#[derive(Debug, Clone)]
pub struct CallView {
    pub run_id: String,
    pub call_id: String,
    pub tool: String,
    /// Redacted, as logged.
    pub arguments: serde_json::Value,
    pub rule: String,
}

impl CallView {
    pub fn from_pending(p: &PendingApproval) -> CallView {
        CallView {
            run_id: p.request.run_id.clone(),
            call_id: p.request.call_id.clone(),
            tool: p.request.tool_name.clone(),
            arguments: p.request.arguments.clone(),
            rule: p.request.rule.clone().unwrap_or(p.request.reason.clone()),
        }
    }

    /// The arguments for a card: pretty JSON, cut to fit a message.
    pub fn arguments_text(&self) -> String {
        let text = serde_json::to_string_pretty(&self.arguments).unwrap_or_default();
        if text.chars().count() <= 1500 {
            return text;
        }
        let cut: String = text.chars().take(1500).collect();
        format!("{cut}…")
    }
}

/// What a callback did.
#[derive(Debug, Clone)]
pub enum Decided {
    Now {
        approved: bool,
        by: String,
    },
    /// Nothing waited for the call: decided before (or never asked).
    Already,
}

impl Decided {
    pub fn title(&self) -> &'static str {
        match self {
            Decided::Now { approved: true, .. } => "Approved",
            Decided::Now {
                approved: false, ..
            } => "Rejected",
            Decided::Already => "Already decided",
        }
    }

    pub fn text(&self) -> String {
        match self {
            Decided::Now { approved, by } => {
                format!(
                    "{} by {by}",
                    if *approved { "Approved" } else { "Rejected" }
                )
            }
            Decided::Already => "This approval was already decided; nothing changed.".into(),
        }
    }
}

#[cfg(test)]
mod tests;
