//! `attest serve`: runs over HTTP (SPEC J2), a front end on the `attest`
//! facade like the CLI. Runs are queued in the store and driven by
//! workers, each with an engine built for it by `Engine::builder()`;
//! their events are read back from the durable log for Server-Sent Events
//! whose ids are log positions, so `Last-Event-ID` resumes exactly, also
//! across a restart. Approvals decided over the API reach the engine
//! through the core's `Approver` trait. Bearer tokens with scopes, stored
//! hashed.
//!
//! Invariants: nothing here decides how a run ends (the engine does);
//! a stream sends only what is in the store; the provider, permissions,
//! sandbox and tools come from the server's config, never a request. The
//! only crate with HTTP server code; it reads no environment variables
//! and prints nothing (the CLI passes both in).

pub mod api;
pub mod approvals;
pub mod auth;
pub mod config;
pub mod error;
mod events;
mod extract;
pub mod hub;
pub mod metrics;
pub mod openapi;
mod routes;
pub mod state;
pub mod webhooks;
pub mod worker;

pub use config::ServerConfig;
pub use state::{AppState, ServerEnv};

use axum::routing::{get, post};
use axum::Router;
use std::net::SocketAddr;
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("refusing to listen on {0}, which is not a loopback address, without tokens: create one with `attest token create --config FILE --name NAME --scope runs:read,runs:write,approvals:write` first")]
    OpenToNetwork(String),
    #[error(transparent)]
    Api(#[from] error::ApiError),
    #[error("the server stopped: {0}")]
    Io(#[from] std::io::Error),
}

/// The routes, on `state`.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/runs", post(routes::submit_run).get(routes::list_runs))
        .route("/v1/runs/{id}", get(routes::get_run))
        .route("/v1/runs/{id}/cancel", post(routes::cancel_run))
        .route("/v1/runs/{id}/trace", get(routes::run_trace))
        .route("/v1/runs/{id}/events", get(events::run_events))
        .route("/v1/approvals", get(routes::list_approvals))
        .route("/v1/approvals/{call_id}", post(routes::decide_approval))
        .route("/v1/hooks/{adapter}", post(webhooks::receive))
        .route("/v1/sessions", get(routes::list_sessions))
        .route("/v1/sessions/{id}", get(routes::get_session))
        .route("/v1/sessions/{id}/events", get(events::session_events))
        .route("/healthz", get(routes::healthz))
        .route("/readyz", get(routes::readyz))
        .route("/metrics", get(routes::metrics))
        .route("/openapi.json", get(routes::openapi))
        .with_state(state)
}

/// Whether every address `listen` names is a loopback one.
fn is_loopback(addrs: &[SocketAddr]) -> bool {
    !addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback())
}

/// Bind `listen` (refusing a non-loopback address on a server without
/// tokens), then serve until `stop`. `on_listening` hears the bound
/// address once the socket is open.
pub async fn serve(
    state: AppState,
    listen: &str,
    stop: CancellationToken,
    on_listening: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: listen.to_string(),
            source,
        })?
        .collect();
    if !is_loopback(&addrs) && auth::active_tokens(state.store().as_ref())?.is_empty() {
        return Err(ServeError::OpenToNetwork(listen.to_string()));
    }
    let listener = tokio::net::TcpListener::bind(&addrs[..])
        .await
        .map_err(|source| ServeError::Bind {
            addr: listen.to_string(),
            source,
        })?;
    on_listening(listener.local_addr()?);
    let workers = tokio::spawn(worker::dispatch(state.clone(), stop.child_token()));
    let shutdown = stop.clone();
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await?;
    stop.cancel();
    let _ = workers.await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_addresses_count_as_loopback() {
        let local: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let v6: SocketAddr = "[::1]:8080".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert!(is_loopback(&[local, v6]));
        assert!(!is_loopback(&[local, any]));
        assert!(!is_loopback(&[]));
    }
}
