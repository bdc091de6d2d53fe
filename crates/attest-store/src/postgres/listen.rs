//! `LISTEN` on a connection of its own, on a thread of its own: each
//! notification is handed to a callback. Notifications only wake readers
//! (what they read is in the tables), so a connection lost and re-opened
//! is reported as one call with an empty channel name: "anything may have
//! changed".

use super::conn::connect;
use crate::StoreError;
use postgres::fallible_iterator::FallibleIterator;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the thread looks up from waiting, to notice it should stop.
const TICK: Duration = Duration::from_millis(250);
/// How long to wait before re-opening a lost connection.
const RETRY: Duration = Duration::from_secs(1);

/// A running listener; dropping it stops the thread.
pub struct PgListener {
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for PgListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgListener").finish_non_exhaustive()
    }
}

impl PgListener {
    /// Listen on `channels` of the database at `url`; `on(channel,
    /// payload)` runs on the listener's thread for every notification.
    /// The first connection is made before this returns.
    pub fn spawn(
        url: &str,
        channels: &[&str],
        on: impl Fn(&str, &str) + Send + 'static,
    ) -> Result<PgListener, StoreError> {
        let listen: String = channels
            .iter()
            .map(|c| format!("LISTEN \"{}\";", c.replace('"', "")))
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        let url = url.to_string();
        let stopping = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("attest-listen".into())
            .spawn(move || {
                let mut ready = Some(ready_tx);
                while !stopping.load(Ordering::Relaxed) {
                    let mut client = match connect(&url).and_then(|mut c| {
                        c.batch_execute(&listen)?;
                        Ok(c)
                    }) {
                        Ok(c) => c,
                        Err(e) => {
                            if let Some(tx) = ready.take() {
                                let _ = tx.send(Err(e));
                                return;
                            }
                            std::thread::sleep(RETRY);
                            continue;
                        }
                    };
                    match ready.take() {
                        Some(tx) => {
                            let _ = tx.send(Ok(()));
                        }
                        None => on("", ""),
                    }
                    'connected: while !stopping.load(Ordering::Relaxed) && !client.is_closed() {
                        let mut notes = client.notifications();
                        let mut waiting = notes.timeout_iter(TICK);
                        loop {
                            match waiting.next() {
                                Ok(Some(n)) => on(n.channel(), n.payload()),
                                Ok(None) => break,
                                // Lost: re-open and say so.
                                Err(_) => break 'connected,
                            }
                        }
                    }
                    std::thread::sleep(RETRY.min(TICK));
                }
            })
            .map_err(|e| StoreError::Postgres(e.to_string()))?;
        ready_rx
            .recv()
            .map_err(|_| StoreError::Postgres("the listener thread stopped".into()))??;
        Ok(PgListener { stop })
    }
}

impl Drop for PgListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
