//! The runtime MCP connections live on.
//!
//! Engines are assembled by a synchronous builder, often from inside some
//! other async runtime (a current-thread one in tests, the CLI's
//! multi-thread one); connections outlive the call that made them. So
//! they get a small runtime of their own: work is spawned onto it and its
//! results awaited (or, during set-up, waited for) from anywhere, and
//! dropping it never blocks an async context.

use std::future::Future;
use std::sync::Arc;

/// A runtime for MCP clients, shared by every server of an engine.
#[derive(Debug)]
pub struct McpRuntime {
    runtime: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
}

impl McpRuntime {
    pub fn start() -> std::io::Result<Arc<Self>> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("attest-mcp")
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        Ok(Arc::new(McpRuntime {
            runtime: Some(runtime),
            handle,
        }))
    }

    /// Run `fut` on this runtime and await its result from any runtime.
    /// Dropping the returned future (a cancelled run) aborts `fut` too.
    pub(crate) async fn run<T, F>(&self, fut: F) -> Option<T>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let mut task = AbortOnDrop(self.handle.spawn(fut));
        (&mut task.0).await.ok()
    }

    /// Run `fut` on this runtime and wait for it, blocking the calling
    /// thread: for set-up from synchronous code, inside a runtime or not.
    pub(crate) fn block_on<T, F>(&self, fut: F) -> Option<T>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::channel();
        self.handle.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv().ok()
    }
}

struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Drop for McpRuntime {
    fn drop(&mut self) {
        // Never blocks, so it is safe to drop inside another runtime; the
        // servers' processes are killed as their handles drop.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
