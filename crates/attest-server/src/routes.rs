//! The handlers. Each checks its caller's scope first, then reads or
//! queues; none drives a run itself (the workers do).

use crate::api::*;
use crate::auth::{active_tokens, authorize, Caller};
use crate::config::workspace_dir;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};
use crate::state::AppState;
use attest::store::{QueuedRun, RunRecord, ServerStore, StoreError};
use attest::{ApprovalDecision, ContractKind, EventBody};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use std::collections::HashMap;

/// The caller, if its token carries `scope`.
pub fn authorized(state: &AppState, headers: &HeaderMap, scope: &str) -> Result<Caller, ApiError> {
    let tokens = active_tokens(state.store().as_ref())?;
    let header = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    authorize(&tokens, header, scope)
}

fn parse_body<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("invalid body: {e}")))
}

/// A run record with exactly this id (the store also matches prefixes).
fn exact_run(store: &dyn ServerStore, id: &str) -> Result<Option<RunRecord>, ApiError> {
    match store.run(id) {
        Ok(r) if r.id == id => Ok(Some(r)),
        Ok(_) | Err(StoreError::UnknownRun(_)) | Err(StoreError::AmbiguousRun(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Whether the store knows the session (it ran, or has runs queued).
pub fn session_known(state: &AppState, id: &str) -> Result<bool, ApiError> {
    let store = state.store();
    Ok(store.sessions()?.iter().any(|s| s.id == id) || !store.queue(Some(id))?.is_empty())
}

/// The run's view: the run's record once it started, its queue row before.
fn run_view(store: &dyn ServerStore, id: &str) -> Result<RunView, ApiError> {
    let queued = store.queued_run(id)?;
    let record = exact_run(store, id)?;
    if queued.is_none() && record.is_none() {
        return Err(ApiError::NotFound(format!("no run `{id}`")));
    }
    let mut view = RunView {
        run_id: id.to_string(),
        session_id: String::new(),
        state: "queued".into(),
        reason: None,
        basis: None,
        answer: None,
        steps: 0,
        trace_id: None,
        prompt: String::new(),
        created_at: String::new(),
        finished_at: None,
        receipts: Vec::new(),
        grounding: None,
    };
    if let Some(q) = &queued {
        view.session_id = q.session_id.clone();
        view.created_at = q.created_at.clone();
        view.prompt = q.request["prompt"].as_str().unwrap_or_default().to_string();
        if matches!(q.state.as_str(), "failed" | "cancelled") && record.is_none() {
            view.state = q.state.clone();
            view.reason = q.reason.clone();
        }
    }
    if let Some(r) = &record {
        view.session_id = r.session_id.clone();
        view.state = r.status.clone();
        view.reason = r.reason.clone();
        view.answer = r.answer.clone();
        view.steps = r.steps;
        view.trace_id = Some(r.trace_id.clone());
        view.prompt = r.prompt.clone();
        view.finished_at = r.finished_at.clone();
        if view.created_at.is_empty() {
            view.created_at = r.started_at.clone();
        }
        if !r.is_running() {
            let done = store
                .events_after(id, 0)?
                .into_iter()
                .rev()
                .find(|e| matches!(e.event.body, EventBody::Done { .. }));
            if let Some(done) = done {
                let value = serde_json::to_value(&done.event).unwrap_or_default();
                view.basis = value["basis"].as_str().map(str::to_string);
                view.receipts = value["receipts"].as_array().cloned().unwrap_or_default();
                view.grounding = value.get("grounding").filter(|g| !g.is_null()).cloned();
            }
        }
    }
    Ok(view)
}

/// Summaries of the queue's runs (newest first), from two reads.
fn summaries(store: &dyn ServerStore, session: Option<&str>) -> Result<Vec<RunSummary>, ApiError> {
    let records: HashMap<String, RunRecord> = store
        .runs(session)?
        .into_iter()
        .map(|r| (r.id.clone(), r))
        .collect();
    Ok(store
        .queue(session)?
        .into_iter()
        .map(|q| {
            let (state, reason, steps, finished_at) = match records.get(&q.run_id) {
                Some(r) => (
                    r.status.clone(),
                    r.reason.clone(),
                    r.steps,
                    r.finished_at.clone(),
                ),
                None if matches!(q.state.as_str(), "failed" | "cancelled") => {
                    (q.state.clone(), q.reason.clone(), 0, None)
                }
                None => ("queued".into(), None, 0, None),
            };
            RunSummary {
                run_id: q.run_id,
                session_id: q.session_id,
                state,
                reason,
                steps,
                created_at: q.created_at,
                finished_at,
            }
        })
        .collect())
}

/// Submit a run.
#[utoipa::path(
    post, path = "/v1/runs", tag = "runs",
    request_body = SubmitRun,
    params(("Idempotency-Key" = Option<String>, Header, description = "A retried submission with the same key returns the same run")),
    responses(
        (status = 202, description = "Queued", body = Submitted),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
    ),
    security(("bearer" = ["runs:write"]))
)]
pub async fn submit_run(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    authorized(&state, &headers, "runs:write")?;
    let mut request: SubmitRun = parse_body(&body)?;
    if request.prompt.trim().is_empty() {
        return Err(ApiError::BadRequest("`prompt` is empty".into()));
    }
    if let Some(kind) = &request.expect {
        kind.parse::<ContractKind>().map_err(ApiError::BadRequest)?;
    }
    if request.max_steps == Some(0) {
        return Err(ApiError::BadRequest(
            "`max_steps` must be at least 1".into(),
        ));
    }
    if let Some(session) = &request.session {
        if session.trim().is_empty() || session.len() > 200 {
            return Err(ApiError::BadRequest(
                "`session` must be 1 to 200 characters".into(),
            ));
        }
    }
    let run_id = attest::core::new_id();
    workspace_dir(
        &state.cfg.workspaces_root,
        request.workspace.as_deref(),
        &run_id,
    )
    .map_err(ApiError::BadRequest)?;
    let header_key = headers
        .get("idempotency-key")
        .map(|v| {
            v.to_str()
                .map(str::to_string)
                .map_err(|_| ApiError::BadRequest("Idempotency-Key is not text".into()))
        })
        .transpose()?;
    let key = header_key.or_else(|| request.idempotency_key.clone());
    request.idempotency_key = key.clone();
    let session_id = request.session.clone().unwrap_or_else(attest::core::new_id);
    let queued = QueuedRun {
        run_id,
        session_id,
        request: serde_json::to_value(&request).map_err(|e| ApiError::Internal(e.to_string()))?,
        idempotency_key: key,
    };
    let enqueued = state.store().enqueue(&queued)?;
    state.wake.notify_one();
    Ok((
        StatusCode::ACCEPTED,
        Json(Submitted {
            run_id: enqueued.run_id,
            session_id: enqueued.session_id,
        }),
    ))
}

/// A run: state, reason, basis, receipts, grounding.
#[utoipa::path(
    get, path = "/v1/runs/{id}", tag = "runs",
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, body = RunView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
    ),
    security(("bearer" = ["runs:read"]))
)]
pub async fn get_run(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<RunView>, ApiError> {
    authorized(&state, &headers, "runs:read")?;
    Ok(Json(run_view(state.store().as_ref(), &id)?))
}

/// Runs, newest first, a page at a time.
#[utoipa::path(
    get, path = "/v1/runs", tag = "runs",
    params(RunsQuery),
    responses(
        (status = 200, body = RunPage),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
    ),
    security(("bearer" = ["runs:read"]))
)]
pub async fn list_runs(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<RunsQuery>,
) -> Result<Json<RunPage>, ApiError> {
    authorized(&state, &headers, "runs:read")?;
    let limit = query.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::BadRequest("`limit` must be 1 to 500".into()));
    }
    let offset = match &query.cursor {
        None => 0,
        Some(c) => c
            .parse::<usize>()
            .map_err(|_| ApiError::BadRequest("`cursor` is not one this server gave".into()))?,
    };
    let all = summaries(state.store().as_ref(), query.session.as_deref())?;
    let matching: Vec<RunSummary> = all
        .into_iter()
        .filter(|r| query.state.as_ref().is_none_or(|s| &r.state == s))
        .collect();
    let end = (offset + limit as usize).min(matching.len());
    let runs = matching.get(offset..end).unwrap_or_default().to_vec();
    let next_cursor = (end < matching.len()).then(|| end.to_string());
    Ok(Json(RunPage { runs, next_cursor }))
}

/// Cancel a run: a queued one never starts; a running one ends `cancelled`.
#[utoipa::path(
    post, path = "/v1/runs/{id}/cancel", tag = "runs",
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 202, description = "Cancelled, or cancelling", body = RunView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, description = "The run already ended", body = ErrorBody),
    ),
    security(("bearer" = ["runs:write"]))
)]
pub async fn cancel_run(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
) -> Result<(StatusCode, Json<RunView>), ApiError> {
    authorized(&state, &headers, "runs:write")?;
    let view = run_view(state.store().as_ref(), &id)?;
    if view.state != "queued" && view.state != "running" {
        return Err(ApiError::Conflict(format!(
            "run `{id}` already ended ({})",
            view.state
        )));
    }
    if state.store().cancel_queued(&id)? {
        let view = run_view(state.store().as_ref(), &id)?;
        state.hub.ended(&id);
        return Ok((StatusCode::ACCEPTED, Json(view)));
    }
    let token = state.active.lock().ok().and_then(|a| a.get(&id).cloned());
    match token {
        Some(token) => {
            token.cancel();
            Ok((StatusCode::ACCEPTED, Json(view)))
        }
        // Leased, but its worker has not registered it yet (or it just
        // ended): the caller may try again.
        None => Err(ApiError::Conflict(format!(
            "run `{id}` is being started or has just ended; try again"
        ))),
    }
}

/// A run's stored log: transcript, events, trace records.
#[utoipa::path(
    get, path = "/v1/runs/{id}/trace", tag = "runs",
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, body = TraceView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
    ),
    security(("bearer" = ["runs:read"]))
)]
pub async fn run_trace(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<TraceView>, ApiError> {
    authorized(&state, &headers, "runs:read")?;
    let store = state.store();
    let record = exact_run(store.as_ref(), &id)?.ok_or_else(|| {
        ApiError::NotFound(format!("run `{id}` has no trace (it has not started)"))
    })?;
    let chain = match store.verify_chain(&id)? {
        attest::store::ChainVerdict::Intact { .. } => "intact".to_string(),
        attest::store::ChainVerdict::Unchained { .. } => "unchained".to_string(),
        attest::store::ChainVerdict::Broken(b) => format!("broken: {b}"),
    };
    let entries = store
        .entries(&id)?
        .iter()
        .map(|e| serde_json::to_value(e).unwrap_or_default())
        .collect();
    Ok(Json(TraceView {
        run_id: record.id,
        trace_id: record.trace_id,
        chain,
        entries,
    }))
}

/// Approvals waiting for a decision.
#[utoipa::path(
    get, path = "/v1/approvals", tag = "approvals",
    params(ApprovalsQuery),
    responses(
        (status = 200, body = Vec<PendingApprovalView>),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
    ),
    security(("bearer" = ["approvals:read"]))
)]
pub async fn list_approvals(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<ApprovalsQuery>,
) -> Result<Json<Vec<PendingApprovalView>>, ApiError> {
    authorized(&state, &headers, "approvals:read")
        .or_else(|_| authorized(&state, &headers, "approvals:write"))?;
    if query.state.as_deref().is_some_and(|s| s != "pending") {
        return Err(ApiError::BadRequest(
            "`state`: only `pending` approvals are kept (decided ones are in each run's events)"
                .into(),
        ));
    }
    Ok(Json(
        state
            .pending_approvals()
            .into_iter()
            .map(|p| PendingApprovalView {
                call_id: p.request.call_id,
                run_id: p.request.run_id,
                tool: p.request.tool_name,
                arguments: p.request.arguments,
                rule: p.request.rule.unwrap_or(p.request.reason),
                requested_at: p
                    .requested_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            })
            .collect(),
    ))
}

/// Decide a pending approval; the run waiting on it continues.
#[utoipa::path(
    post, path = "/v1/approvals/{call_id}", tag = "approvals",
    params(("call_id" = String, Path, description = "The call waiting for approval")),
    request_body = DecideApproval,
    responses(
        (status = 200, body = ApprovalDecided),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, description = "Nothing waits for this call id", body = ErrorBody),
        (status = 409, description = "Several runs wait on this call id: name the run with `run_id`", body = ErrorBody),
    ),
    security(("bearer" = ["approvals:write"]))
)]
pub async fn decide_approval(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiPath(call_id): ApiPath<String>,
    body: Bytes,
) -> Result<Json<ApprovalDecided>, ApiError> {
    let caller = authorized(&state, &headers, "approvals:write")?;
    let request: DecideApproval = parse_body(&body)?;
    let approved = request.decision == Decision::Allow;
    let decision = ApprovalDecision {
        approved,
        decided_by: caller.name.clone(),
        message: request.message.clone(),
        via: Some("api".into()),
    };
    let pending = state
        .decide_approval(
            request.run_id.as_deref(),
            &call_id,
            decision,
            request.scope == DecisionScope::Session,
        )?
        .ok_or_else(|| ApiError::NotFound(format!("no approval is pending for `{call_id}`")))?;
    Ok(Json(ApprovalDecided {
        call_id,
        run_id: pending.request.run_id,
        approved,
        decided_by: caller.name,
    }))
}

/// Sessions, most recently active first.
#[utoipa::path(
    get, path = "/v1/sessions", tag = "sessions",
    responses(
        (status = 200, body = Vec<SessionView>),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
    ),
    security(("bearer" = ["runs:read"]))
)]
pub async fn list_sessions(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Vec<SessionView>>, ApiError> {
    authorized(&state, &headers, "runs:read")?;
    let sessions = state.store().sessions()?;
    Ok(Json(
        sessions
            .into_iter()
            .map(|s| SessionView {
                session_id: s.id,
                created_at: Some(s.created_at),
                updated_at: Some(s.updated_at),
                runs: s.runs,
                last_state: s.last_status,
            })
            .collect(),
    ))
}

/// A session and its runs.
#[utoipa::path(
    get, path = "/v1/sessions/{id}", tag = "sessions",
    params(("id" = String, Path, description = "The session's id")),
    responses(
        (status = 200, body = SessionDetail),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
    ),
    security(("bearer" = ["runs:read"]))
)]
pub async fn get_session(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SessionDetail>, ApiError> {
    authorized(&state, &headers, "runs:read")?;
    let store = state.store();
    let record = store.sessions()?.into_iter().find(|s| s.id == id);
    let runs = summaries(store.as_ref(), Some(&id))?;
    if record.is_none() && runs.is_empty() {
        return Err(ApiError::NotFound(format!("no session `{id}`")));
    }
    Ok(Json(SessionDetail {
        session_id: id,
        created_at: record.as_ref().map(|s| s.created_at.clone()),
        updated_at: record.as_ref().map(|s| s.updated_at.clone()),
        last_state: runs.first().map(|r| r.state.clone()),
        runs,
    }))
}

/// The server is up.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// The store answers.
#[utoipa::path(
    get, path = "/readyz", tag = "health",
    responses((status = 200, body = Health), (status = 503, body = ErrorBody))
)]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    state
        .store()
        .ping()
        .map_err(|e| ApiError::Unavailable(e.to_string()))?;
    Ok(Json(Health {
        status: "ok".into(),
    }))
}

/// Prometheus text: runs by state, active runs, step latency, approvals pending.
#[utoipa::path(
    get, path = "/metrics", tag = "health",
    responses(
        (status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain", body = String),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
    ),
    security(("bearer" = ["runs:read"]))
)]
pub async fn metrics(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    authorized(&state, &headers, "runs:read")?;
    let by_state = {
        let store = state.store();
        let mut counts: std::collections::BTreeMap<String, u64> = Default::default();
        for run in summaries(store.as_ref(), None)? {
            *counts.entry(run.state).or_default() += 1;
        }
        counts.into_iter().collect()
    };
    let text = crate::metrics::render(&crate::metrics::Snapshot {
        runs_by_state: by_state,
        active_runs: state.active_runs() as u64,
        approvals_pending: state.pending_approvals().len() as u64,
        step_latency: &state.latency,
    });
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    ))
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "health", responses((status = 200, description = "The OpenAPI document", body = Object)))]
pub async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(crate::openapi::document())
}
