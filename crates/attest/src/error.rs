//! The facade's one error type.

use attest_core::EngineError;
use attest_store::StoreError;

/// Why an engine could not be built or a run could not be driven. A run
/// that ends badly (`failed`, `unverified`, …) is not an error: it is a
/// [`RunOutcome`](crate::RunOutcome) with that state.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad settings: an unknown provider, a missing model, a tool that does
    /// not exist, an invalid `[permissions]` table, …
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    ConfigFile(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Memory could not be read or written; a run is never stopped by it.
    #[error("{0}")]
    Memory(String),
    /// The run cannot be resumed or continued as asked (it ended, another
    /// process holds it, its session has a run in progress, …).
    #[error("{0}")]
    Run(String),
}

impl Error {
    pub(crate) fn config(msg: impl Into<String>) -> Self {
        Error::Config(msg.into())
    }
}
