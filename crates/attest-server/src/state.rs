//! What every handler and worker shares.

use crate::approvals::ApprovalDesk;
use crate::approvals::{decision_json, pending_from};
use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::hub::Hub;
use crate::metrics::StepLatency;
use crate::webhooks::Webhooks;
use attest::core::PendingApproval;
use attest::store::{
    PgListener, PgStore, ServerStore, SqliteStore, Store, StoreError, APPROVALS_CHANNEL,
    EVENTS_CHANNEL, QUEUE_CHANNEL,
};
use attest::{ApprovalDecision, BuiltProvider, EnvLookup, Notices, SharedStore};
use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// What the front end hands the server: its environment and where
/// notices go (the server itself reads no environment and prints nothing).
pub struct ServerEnv {
    /// API keys and settings looked up by variable name.
    pub env: EnvLookup,
    /// The environment tool processes may draw from (allow-listed).
    pub tool_env: Vec<(OsString, OsString)>,
    pub notices: Notices,
}

/// The server: settings, the store (one connection for the API and the
/// queue, one for the engines' appends), and the parts runs share.
pub struct Inner {
    pub cfg: ServerConfig,
    queue: Mutex<Box<dyn ServerStore>>,
    /// The engines' store handles (each its own connection), a run's
    /// chosen by its id: PostgreSQL appends of different runs go in
    /// parallel instead of queueing behind one connection.
    logs: Vec<SharedStore>,
    pub hub: Hub,
    pub desk: Arc<ApprovalDesk>,
    pub latency: Arc<StepLatency>,
    /// Runs this server drives now, to cancel them.
    pub active: Mutex<HashMap<String, CancellationToken>>,
    /// Wakes the dispatcher: a run was queued or a run ended.
    pub wake: Notify,
    /// This process's name on the leases it holds.
    pub owner: String,
    pub provider: BuiltProvider,
    pub env: ServerEnv,
    /// PostgreSQL: what other servers do, as notifications.
    listener: Mutex<Option<PgListener>>,
    /// Outbound webhooks and the inbound adapters' secrets.
    pub webhooks: Webhooks,
    /// OTLP export of every run's spans, from the config's `[telemetry]`.
    pub telemetry: Option<attest::telemetry::Telemetry>,
}

#[derive(Clone)]
pub struct AppState(pub Arc<Inner>);

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl Inner {
    /// The API's store connection, for a few synchronous calls.
    pub fn store(&self) -> MutexGuard<'_, Box<dyn ServerStore>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Approvals waiting for a decision, on any server sharing the store.
    pub fn pending_approvals(&self) -> Vec<PendingApproval> {
        match self.store().pending_approvals() {
            Ok(pending) => pending.iter().map(pending_from).collect(),
            Err(e) => {
                (self.env.notices)(&format!("cannot list approvals: {e}"));
                Vec::new()
            }
        }
    }

    /// Decide the approval call `call_id` waits for (from the API or a
    /// signed callback), once; `None` when nothing waits for it. Call ids
    /// are unique within a run only: without `run_id`, a call id pending
    /// in several runs is a conflict. The worker is released here at once,
    /// or on its own server by the store.
    pub fn decide_approval(
        &self,
        run_id: Option<&str>,
        call_id: &str,
        decision: ApprovalDecision,
        for_session: bool,
    ) -> Result<Option<PendingApproval>, ApiError> {
        let run_id = match run_id {
            Some(run) => run.to_string(),
            None => {
                let runs: Vec<String> = self
                    .store()
                    .pending_approvals()?
                    .into_iter()
                    .filter(|a| a.call_id == call_id)
                    .map(|a| a.run_id)
                    .collect();
                match runs.as_slice() {
                    [] => return Ok(None),
                    [one] => one.clone(),
                    _ => {
                        return Err(ApiError::Conflict(format!(
                            "runs {} each wait on a call `{call_id}`; name the run with `run_id`",
                            runs.join(", ")
                        )))
                    }
                }
            }
        };
        let decided = self.store().decide_approval(
            &run_id,
            call_id,
            &decision_json(&decision),
            for_session,
        )?;
        if decided.is_some() {
            self.desk.release(&run_id, call_id, decision);
        }
        Ok(decided.as_ref().map(pending_from))
    }

    /// The store handle the engine of run `run_id` appends through.
    pub fn log(&self, run_id: &str) -> &SharedStore {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        run_id.hash(&mut h);
        &self.logs[(h.finish() % self.logs.len() as u64) as usize]
    }

    pub fn active_runs(&self) -> usize {
        self.active.lock().map(|a| a.len()).unwrap_or(0)
    }
}

/// Store connections for the engines' appends on PostgreSQL.
const LOG_CONNECTIONS: usize = 8;

/// Names a lease owner after this process: `<host>/<pid>/<nonce>`.
fn owner_name() -> String {
    format!(
        "{}/{}/{}",
        host_name(),
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty() && !h.contains('/'))
        .unwrap_or_else(|| "localhost".into())
}

/// Whether the process that named itself `owner` is known to be gone: only
/// a process on this host can be looked up; another host's leases run out
/// by themselves.
fn owner_gone(owner: &str, me: &str) -> bool {
    if owner == me {
        return false;
    }
    let mut parts = owner.split('/');
    let (Some(host), Some(pid)) = (parts.next(), parts.next()) else {
        return false;
    };
    if host != host_name() {
        return false;
    }
    match pid.parse::<u32>() {
        Ok(pid) if pid == std::process::id() => true,
        Ok(pid) => !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        Err(_) => false,
    }
}

/// Open the configured store: PostgreSQL when a database URL is set, the
/// embedded SQLite file otherwise.
pub fn open_store(cfg: &ServerConfig) -> Result<Box<dyn ServerStore>, StoreError> {
    Ok(match &cfg.database_url {
        Some(url) => Box::new(PgStore::connect(url)?),
        None => Box::new(SqliteStore::open(&cfg.store_path())?),
    })
}

/// Where the store is, for people (never a password).
pub fn store_label(cfg: &ServerConfig) -> String {
    match &cfg.database_url {
        Some(url) => attest::store::shown_url(url),
        None => cfg.store_path().display().to_string(),
    }
}

impl AppState {
    /// Open the store and take over the leases of servers that are gone;
    /// on PostgreSQL, listen for what other servers do.
    pub fn open(
        cfg: ServerConfig,
        provider: BuiltProvider,
        env: ServerEnv,
    ) -> Result<AppState, ApiError> {
        let file = cfg.file().map_err(ApiError::Config)?;
        let webhooks = Webhooks::from_config(&file.server, &env.env)
            .map_err(|e| ApiError::Config(format!("{e}{}", cfg.note())))?;
        let unavailable = |e: StoreError| ApiError::Unavailable(e.to_string());
        let mut queue = open_store(&cfg).map_err(unavailable)?;
        let handles = if cfg.database_url.is_some() {
            LOG_CONNECTIONS
        } else {
            // One writer at a time in SQLite anyway.
            1
        };
        let logs = (0..handles)
            .map(|_| {
                let log: Box<dyn Store> = open_store(&cfg)?;
                Ok(SharedStore::from_box(log))
            })
            .collect::<Result<Vec<_>, StoreError>>()
            .map_err(unavailable)?;
        let owner = owner_name();
        let expired = queue.expire_leases(&|o| owner_gone(o, &owner))?;
        if expired > 0 {
            (env.notices)(&format!(
                "{expired} run(s) were left by a server that stopped; resuming them from their logs"
            ));
        }
        let desk = Arc::new(ApprovalDesk::new(cfg.approval_timeout));
        let url = cfg.database_url.clone();
        let telemetry = start_telemetry(&file.telemetry, &env);
        let state = AppState(Arc::new(Inner {
            cfg,
            queue: Mutex::new(queue),
            logs,
            hub: Hub::default(),
            desk,
            latency: Arc::new(StepLatency::default()),
            active: Mutex::default(),
            wake: Notify::new(),
            owner,
            provider,
            env,
            webhooks,
            listener: Mutex::new(None),
            telemetry,
        }));
        if let Some(url) = url {
            let listener = listen(&url, Arc::downgrade(&state.0)).map_err(unavailable)?;
            *state.listener.lock().unwrap_or_else(|p| p.into_inner()) = Some(listener);
        }
        Ok(state)
    }
}

/// OTLP export as the config's `[telemetry]` says (contents also with the
/// GenAI conventions' `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`);
/// a bad endpoint is a notice: export never stops the server or a run.
fn start_telemetry(
    section: &attest::config::TelemetrySection,
    env: &ServerEnv,
) -> Option<attest::telemetry::Telemetry> {
    use attest::telemetry::{TelemetryConfig, CAPTURE_CONTENT_ENV};
    let config = TelemetryConfig::resolve(
        section.otlp_endpoint.clone(),
        section.capture_content,
        (env.env)(CAPTURE_CONTENT_ENV).as_deref(),
    )?;
    match attest::telemetry::Telemetry::start(&config) {
        Ok(t) => Some(t),
        Err(e) => {
            (env.notices)(&format!("{e}; spans are not exported"));
            None
        }
    }
}

/// What other servers sharing the database do reaches this one: a queued
/// or settled run wakes the dispatcher, an appended event wakes its
/// streams, a decided approval releases its worker if it waits here.
fn listen(url: &str, state: Weak<Inner>) -> Result<PgListener, StoreError> {
    PgListener::spawn(
        url,
        &[QUEUE_CHANNEL, EVENTS_CHANNEL, APPROVALS_CHANNEL],
        move |channel, payload| {
            let Some(inner) = state.upgrade() else {
                return;
            };
            match channel {
                QUEUE_CHANNEL => inner.wake.notify_one(),
                EVENTS_CHANNEL => {
                    if let Some((run, session)) = payload.split_once(' ') {
                        inner.hub.appended(run, session);
                    }
                }
                APPROVALS_CHANNEL => {
                    if let Some((run, call)) = payload.split_once(' ') {
                        crate::approvals::deliver(&inner, run, call);
                    }
                }
                // Reconnected: anything may have been missed.
                _ => inner.wake.notify_one(),
            }
        },
    )
}
