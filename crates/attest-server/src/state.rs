//! What every handler and worker shares.

use crate::approvals::ApprovalDesk;
use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::hub::Hub;
use crate::metrics::StepLatency;
use crate::webhooks::Webhooks;
use attest::core::PendingApproval;
use attest::store::{ServerStore, SqliteStore};
use attest::{ApprovalDecision, BuiltProvider, EnvLookup, Notices, SharedStore};
use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::{Arc, Mutex, MutexGuard};
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
    pub log: SharedStore,
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
    /// Outbound webhooks and the inbound adapters' secrets.
    pub webhooks: Webhooks,
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

    /// Approvals waiting for a decision.
    pub fn pending_approvals(&self) -> Vec<PendingApproval> {
        self.desk.waiting()
    }

    /// Decide the approval `call_id` waits for (from the API or a signed
    /// callback); `None` when nothing waits for it.
    pub fn decide_approval(
        &self,
        call_id: &str,
        decision: ApprovalDecision,
        for_session: bool,
    ) -> Result<Option<PendingApproval>, ApiError> {
        Ok(self.desk.resolve(call_id, decision, for_session))
    }

    pub fn active_runs(&self) -> usize {
        self.active.lock().map(|a| a.len()).unwrap_or(0)
    }
}

/// Names a lease owner after this process: `pid:<pid>:<nonce>`.
fn owner_name() -> String {
    format!(
        "pid:{}:{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

/// Whether the process that named itself `owner` is gone.
fn owner_gone(owner: &str, me: &str) -> bool {
    if owner == me {
        return false;
    }
    let pid = owner
        .strip_prefix("pid:")
        .and_then(|rest| rest.split(':').next())
        .and_then(|p| p.parse::<u32>().ok());
    match pid {
        Some(pid) if pid == std::process::id() => true,
        Some(pid) => !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        None => false,
    }
}

impl AppState {
    /// Open the store and take over the leases of servers that are gone.
    pub fn open(
        cfg: ServerConfig,
        provider: BuiltProvider,
        env: ServerEnv,
    ) -> Result<AppState, ApiError> {
        let file = cfg.file().map_err(ApiError::Config)?;
        let webhooks = Webhooks::from_config(&file.server, &env.env)
            .map_err(|e| ApiError::Config(format!("{e}{}", cfg.note())))?;
        let path = cfg.store_path();
        let open = || SqliteStore::open(&path).map_err(|e| ApiError::Unavailable(e.to_string()));
        let mut queue = open()?;
        let log = SharedStore::new(open()?);
        let owner = owner_name();
        let expired = queue.expire_leases(&|o| owner_gone(o, &owner))?;
        if expired > 0 {
            (env.notices)(&format!(
                "{expired} run(s) were left by a server that stopped; resuming them from their logs"
            ));
        }
        let desk = Arc::new(ApprovalDesk::new(cfg.approval_timeout));
        Ok(AppState(Arc::new(Inner {
            cfg,
            queue: Mutex::new(Box::new(queue)),
            log,
            hub: Hub::default(),
            desk,
            latency: Arc::new(StepLatency::default()),
            active: Mutex::default(),
            wake: Notify::new(),
            owner,
            provider,
            env,
            webhooks,
        })))
    }
}

/// Open the server's store (for `attest token`).
pub fn open_store(cfg: &ServerConfig) -> Result<SqliteStore, attest::store::StoreError> {
    SqliteStore::open(&cfg.store_path())
}
