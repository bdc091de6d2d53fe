//! One PostgreSQL connection on a thread of its own. The `postgres` client
//! drives its own small runtime and must not be called from inside an
//! async task, yet the [`crate::Store`] trait is synchronous and called
//! from the engine's tasks; so every call is sent here as a job and the
//! caller waits for its answer. A lost connection is re-opened on the
//! next job.

use crate::StoreError;
use postgres::{Client, NoTls};
use std::sync::mpsc;

type Job = Box<dyn FnOnce(&mut Slot) + Send>;

/// The worker thread's connection, opened lazily and re-opened when lost.
struct Slot {
    url: String,
    client: Option<Client>,
}

impl Slot {
    fn client(&mut self) -> Result<&mut Client, StoreError> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = Some(connect(&self.url)?);
        }
        Ok(self.client.as_mut().expect("connected above"))
    }
}

pub(crate) fn connect(url: &str) -> Result<Client, StoreError> {
    Client::connect(url, NoTls).map_err(|e| StoreError::Open {
        path: shown(url),
        reason: describe(&e),
    })
}

/// A connection whose calls run on its own thread.
pub(crate) struct Conn {
    jobs: mpsc::Sender<Job>,
}

impl Conn {
    /// Start the thread and connect (an error names the database, never
    /// its password).
    pub(crate) fn open(url: &str) -> Result<Conn, StoreError> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let mut slot = Slot {
            url: url.to_string(),
            client: None,
        };
        std::thread::Builder::new()
            .name("attest-postgres".into())
            .spawn(move || {
                for job in queue {
                    job(&mut slot);
                }
            })
            .map_err(|e| StoreError::Open {
                path: shown(url),
                reason: e.to_string(),
            })?;
        let conn = Conn { jobs };
        conn.call(|_| Ok(()))?;
        Ok(conn)
    }

    /// Run `f` on the connection and wait for its result.
    pub(crate) fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Client) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        let (tx, rx) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |slot| {
            let result = slot.client().and_then(f);
            let _ = tx.send(result);
        });
        let gone = || StoreError::Postgres("the connection thread stopped".into());
        self.jobs.send(job).map_err(|_| gone())?;
        rx.recv().map_err(|_| gone())?
    }
}

/// A database URL without its password, for messages.
pub(crate) fn shown(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}@{}", &url[..scheme + 3], &url[at + 1..])
        }
        _ => url.to_string(),
    }
}

/// A PostgreSQL error with the server's message, when it sent one.
pub(crate) fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}

impl From<postgres::Error> for StoreError {
    fn from(e: postgres::Error) -> Self {
        StoreError::Postgres(describe(&e))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_shown_url_keeps_the_user_and_drops_the_password() {
        assert_eq!(
            super::shown("postgres://alice:s3cret@db:5432/attest"),
            "postgres://alice@db:5432/attest"
        );
        assert_eq!(
            super::shown("postgres://127.0.0.1/test"),
            "postgres://127.0.0.1/test"
        );
    }
}
