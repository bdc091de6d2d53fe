//! One PostgreSQL connection on a thread of its own. The `postgres` client
//! drives its own small runtime and must not be called from inside an
//! async task, yet the [`crate::Store`] trait is synchronous and called
//! from the engine's tasks; so every call is sent here as a job and the
//! caller waits for its answer. A lost connection is re-opened on the
//! next job.

use crate::StoreError;
use postgres::types::ToSql;
use postgres::{Client, GenericClient, NoTls, Row, Statement};
use std::collections::HashMap;
use std::sync::mpsc;

type Job = Box<dyn FnOnce(&mut Slot) + Send>;

/// The worker thread's connection, opened lazily and re-opened when lost.
struct Slot {
    url: String,
    client: Option<Client>,
    prepared: Prepared,
}

impl Slot {
    fn client(&mut self) -> Result<(&mut Client, &mut Prepared), StoreError> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            // Statements belong to the connection they were prepared on.
            self.prepared.0.clear();
            self.client = Some(connect(&self.url)?);
        }
        let client = self.client.as_mut().expect("connected above");
        Ok((client, &mut self.prepared))
    }
}

/// The statements of the hot paths (appends, leases), prepared once per
/// connection: a text statement costs a parse and plan in the server and a
/// round trip of its own each time it runs.
#[derive(Default)]
pub(crate) struct Prepared(HashMap<&'static str, Statement>);

impl Prepared {
    /// `sql` prepared on this connection (inside a transaction or not).
    pub(crate) fn get(
        &mut self,
        c: &mut impl GenericClient,
        sql: &'static str,
    ) -> Result<Statement, postgres::Error> {
        if let Some(statement) = self.0.get(sql) {
            return Ok(statement.clone());
        }
        let statement = c.prepare(sql)?;
        self.0.insert(sql, statement.clone());
        Ok(statement)
    }

    /// `c.execute` of `sql`, prepared.
    pub(crate) fn execute(
        &mut self,
        c: &mut impl GenericClient,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, postgres::Error> {
        let statement = self.get(c, sql)?;
        c.execute(&statement, params)
    }

    /// `c.query_one` of `sql`, prepared.
    pub(crate) fn query_one(
        &mut self,
        c: &mut impl GenericClient,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, postgres::Error> {
        let statement = self.get(c, sql)?;
        c.query_one(&statement, params)
    }

    /// `c.query_opt` of `sql`, prepared.
    pub(crate) fn query_opt(
        &mut self,
        c: &mut impl GenericClient,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, postgres::Error> {
        let statement = self.get(c, sql)?;
        c.query_opt(&statement, params)
    }

    /// `c.query` of `sql`, prepared.
    pub(crate) fn query(
        &mut self,
        c: &mut impl GenericClient,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error> {
        let statement = self.get(c, sql)?;
        c.query(&statement, params)
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
            prepared: Prepared::default(),
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
        self.call_prepared(|c, _| f(c))
    }

    /// [`Conn::call`] with the connection's prepared statements.
    pub(crate) fn call_prepared<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Client, &mut Prepared) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        let (tx, rx) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |slot| {
            let result = slot.client().and_then(|(c, prepared)| f(c, prepared));
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
