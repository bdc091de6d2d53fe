//! The OpenAPI document, generated from the handlers and the wire types.
//! `docs/openapi.json` is this document, committed; a test fails when the
//! two differ.

use crate::api::*;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "attest serve",
        description = "Runs over HTTP: event streams that resume exactly, approvals from anywhere, tokens with scopes."
    ),
    paths(
        crate::routes::submit_run,
        crate::routes::list_runs,
        crate::routes::get_run,
        crate::routes::cancel_run,
        crate::routes::run_trace,
        crate::events::run_events,
        crate::routes::list_approvals,
        crate::routes::decide_approval,
        crate::webhooks::receive,
        crate::routes::list_sessions,
        crate::routes::get_session,
        crate::events::session_events,
        crate::routes::healthz,
        crate::routes::readyz,
        crate::routes::metrics,
        crate::routes::openapi,
    ),
    components(schemas(
        SubmitRun, Submitted, RunView, RunSummary, RunPage, TraceView, PendingApprovalView,
        Decision, DecisionScope, DecideApproval, ApprovalDecided, SessionView, SessionDetail,
        Health, ErrorBody, crate::webhooks::HookDecision
    )),
    modifiers(&BearerAuth)
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The document `/openapi.json` serves.
pub fn document() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    // The version is the API's, not the crate's: it changes with the wire.
    doc.info.version = "1".to_string();
    doc
}

/// The document as committed in `docs/openapi.json`.
pub fn document_json() -> String {
    let mut text = serde_json::to_string_pretty(&document()).unwrap_or_default();
    text.push('\n');
    text
}
