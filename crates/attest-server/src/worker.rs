//! Workers: lease queued runs from the store and drive each with an engine
//! built for it (its workspace, the server's config and provider, an
//! approver that waits for the API). A lease is renewed while the run goes
//! on; a run whose lease was lost is cancelled here, and one whose lease
//! expired with its server is resumed from its log by the next worker,
//! never started again (SPEC C5).

use crate::api::SubmitRun;
use crate::config::workspace_dir;
use crate::metrics::TimedProvider;
use crate::state::AppState;
use attest::store::Lease;
use attest::{BuiltProvider, ContractKind, Engine, Event, RunRequest};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often an idle dispatcher looks at the queue without being woken.
const POLL: Duration = Duration::from_secs(1);

/// Lease and start runs while there is room, for as long as the server runs.
pub async fn dispatch(state: AppState, stop: CancellationToken) {
    loop {
        while state.active_runs() < state.cfg.max_concurrent_runs {
            let lease = state.store().lease_next(&state.owner, state.cfg.lease);
            match lease {
                Ok(Some(lease)) => {
                    let cancel = stop.child_token();
                    if let Ok(mut active) = state.active.lock() {
                        active.insert(lease.run_id.clone(), cancel.clone());
                    }
                    tokio::spawn(drive(state.clone(), lease, cancel));
                }
                Ok(None) => break,
                Err(e) => {
                    (state.env.notices)(&format!("cannot lease a run: {e}"));
                    break;
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = state.wake.notified() => {}
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}

/// Drive one leased run to its end, renewing the lease meanwhile.
async fn drive(state: AppState, lease: Lease, cancel: CancellationToken) {
    let renewal = {
        let state = state.clone();
        let (run_id, epoch, cancel) = (lease.run_id.clone(), lease.epoch, cancel.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(state.cfg.lease / 3).await;
                let kept = state
                    .store()
                    .renew_lease(&run_id, &state.owner, epoch, state.cfg.lease);
                if !matches!(kept, Ok(true)) {
                    // Another worker holds it now: stop writing to it.
                    cancel.cancel();
                    return;
                }
            }
        })
    };
    // Every append of this run is fenced by the lease: once another
    // worker takes it over, this one's writes are refused.
    state
        .log(&lease.run_id)
        .lock()
        .fence(&lease.run_id, &state.owner, lease.epoch);
    let outcome = run_leased(&state, &lease, cancel).await;
    renewal.abort();
    state.log(&lease.run_id).lock().unfence(&lease.run_id);
    let (settled, reason) = match &outcome {
        Ok(()) => ("finished", None),
        Err(e) => ("failed", Some(e.as_str())),
    };
    if let Err(e) = &outcome {
        (state.env.notices)(&format!("run {}: {e}", lease.run_id));
    }
    settle(&state, &lease, settled, reason).await;
    if let Ok(mut active) = state.active.lock() {
        active.remove(&lease.run_id);
    }
    state.hub.ended(&lease.run_id);
    state.wake.notify_one();
}

/// Attempts at settling a finished run's queue row.
const SETTLE_TRIES: u32 = 8;

/// Settle the run's queue row, retried with backoff (about 25 s in all): a
/// row left `leased` would hold its session's later runs until another
/// server took it over, and a server never takes over its own leases.
async fn settle(state: &AppState, lease: &Lease, settled: &str, reason: Option<&str>) {
    for attempt in 0..SETTLE_TRIES {
        let outcome = state
            .store()
            .settle(&lease.run_id, lease.epoch, settled, reason);
        match outcome {
            // Settled, or fenced: another worker holds the run now.
            Ok(_) => return,
            Err(e) if attempt + 1 == SETTLE_TRIES => {
                (state.env.notices)(&format!(
                    "run {}: its queue row could not be settled ({e}); another server, or this one after a restart, will take it over",
                    lease.run_id
                ));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100 << attempt)).await,
        }
    }
}

async fn run_leased(
    state: &AppState,
    lease: &Lease,
    cancel: CancellationToken,
) -> Result<(), String> {
    let request: SubmitRun = serde_json::from_value(lease.request.clone())
        .map_err(|e| format!("the stored request does not parse: {e}"))?;
    let (engine, timed) = engine_for(state, lease, &request)?;
    let run_id = lease.run_id.clone();
    let session_id = lease.session_id.clone();
    let hub_state = state.clone();
    let mut observer = move |e: &Event| {
        if !e.body.is_delta() {
            hub_state.hub.appended(&run_id, &session_id);
            crate::webhooks::observe(&hub_state, &session_id, e);
        }
    };
    let earlier = if lease.takeover {
        state.store().run(&lease.run_id).ok()
    } else {
        None
    };
    let result = match earlier {
        // A run that ended before its server died: nothing to do.
        Some(record) if !record.is_running() => return Ok(()),
        Some(_) => engine.resume(&lease.run_id, &mut observer, cancel).await,
        None => {
            let run = RunRequest {
                prompt: request.prompt.clone(),
                session: Some(lease.session_id.clone()),
                run_id: Some(lease.run_id.clone()),
                max_steps: request.max_steps,
                ..RunRequest::default()
            };
            engine.run_observed(run, &mut observer, cancel).await
        }
    };
    timed.run_ended();
    result.map(|_| ()).map_err(|e| e.to_string())
}

/// An engine for one run: the server's config, provider and store, the
/// run's workspace and contract, and an approver that waits for the API.
fn engine_for(
    state: &AppState,
    lease: &Lease,
    request: &SubmitRun,
) -> Result<(Engine, Arc<TimedProvider>), String> {
    let cfg = &state.cfg;
    let dir = workspace_dir(
        &cfg.workspaces_root,
        request.workspace.as_deref(),
        &lease.run_id,
    )?;
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("cannot create the workspace {}: {e}", dir.display()))?;
    let base = &state.provider;
    let timed = Arc::new(TimedProvider::new(
        Arc::clone(&base.provider),
        Arc::clone(&state.latency),
    ));
    let provider = BuiltProvider {
        provider: timed.clone(),
        label: base.label.clone(),
        secrets: base.secrets.clone(),
        hidden_env: base.hidden_env.clone(),
        resolved: base.resolved.clone(),
        learning: None,
    };
    let mut builder = Engine::builder()
        .config(cfg.file()?, cfg.note())
        .workspace(&dir)
        .built_provider(provider)
        .env(Arc::clone(&state.env.env))
        .tool_env_source(state.env.tool_env.iter().cloned())
        .store(state.log(&lease.run_id).clone())
        .approver(crate::approvals::for_run(state, &lease.session_id))
        .notices(Arc::clone(&state.env.notices));
    if let Some(t) = &state.telemetry {
        builder = builder.log_tap(t.tap());
    }
    if let Some(kind) = &request.expect {
        builder = builder.expect(kind.parse::<ContractKind>()?);
    }
    for tool in &request.required_tools {
        builder = builder.require_tool(tool);
    }
    let engine = builder.build().map_err(|e| e.to_string())?;
    Ok((engine, timed))
}
