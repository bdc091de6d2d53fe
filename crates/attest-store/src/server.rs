//! What `attest serve` keeps beside the runs: the run queue with leases,
//! bearer tokens (hashed), and the event log read back by position for
//! Server-Sent Events.
//!
//! The queue is lease-shaped so that several workers (and, with a
//! PostgreSQL backend, several servers) fit without rework: a worker leases
//! a queued run with an epoch, renews the lease while it drives the run,
//! and finishes it with the same epoch; a lease that expires is taken over
//! by another owner with the next epoch (never by its own, whose drive is
//! only late), and the taker is told so ([`Lease::takeover`]) so it
//! resumes the run from its log instead of starting it again.

use crate::sqlite::{now, stamp, write_tx};
use crate::{SqliteStore, Store, StoreError};
use attest_protocol::{Event, LogEntry};
use chrono::{DateTime, Utc};
use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A run submitted to the server, before any worker took it.
#[derive(Debug, Clone)]
pub struct QueuedRun {
    pub run_id: String,
    pub session_id: String,
    /// The request as submitted (prompt, contract, workspace, …).
    pub request: serde_json::Value,
    /// A retried submission with this key gets the same run.
    pub idempotency_key: Option<String>,
}

/// What [`ServerStore::enqueue`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    pub run_id: String,
    pub session_id: String,
    /// False when the idempotency key named a run submitted before.
    pub created: bool,
}

/// A run a worker holds: drive it, renew the lease, finish it with `epoch`.
#[derive(Debug, Clone)]
pub struct Lease {
    pub run_id: String,
    pub session_id: String,
    pub request: serde_json::Value,
    pub epoch: i64,
    /// The run was leased before and that lease expired: its log may hold
    /// a partial run, to be resumed (never started again).
    pub takeover: bool,
}

/// A queue row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueRecord {
    pub run_id: String,
    pub session_id: String,
    /// `queued`, `leased`, `finished`, `failed` or `cancelled`.
    pub state: String,
    pub reason: Option<String>,
    pub request: serde_json::Value,
    pub lease_owner: Option<String>,
    pub lease_epoch: i64,
    pub created_at: String,
}

impl QueueRecord {
    /// Whether no worker will touch this run again.
    pub fn is_settled(&self) -> bool {
        matches!(self.state.as_str(), "finished" | "failed" | "cancelled")
    }
}

/// A token to record: its hash, never the token.
#[derive(Debug, Clone)]
pub struct NewToken {
    pub id: String,
    pub name: String,
    pub hash: String,
    pub scopes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenRecord {
    pub id: String,
    pub name: String,
    pub hash: String,
    pub scopes: Vec<String>,
    pub created_at: String,
    pub revoked_at: Option<String>,
}

/// An event with its position in the durable log: the run's own sequence
/// number is `event.seq`; `position` orders events across the runs of a
/// session (the entry's row id, increasing in commit order because one
/// run of a session is driven at a time).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub position: i64,
    pub event: Event,
}

/// An approval a run waits for, as any server sharing the store sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    pub call_id: String,
    pub run_id: String,
    pub session_id: String,
    pub tool_name: String,
    /// The approval request as the engine made it (redacted arguments,
    /// reason, rule), as JSON.
    pub request: serde_json::Value,
    /// The lease owner whose worker waits for it.
    pub owner: String,
    pub requested_at: String,
    /// The decision as JSON, once there is one.
    pub decision: Option<serde_json::Value>,
    /// The decision also allows later calls of the tool in the session.
    pub for_session: bool,
    pub decided_at: Option<String>,
}

/// The server's side of the store. Implemented by [`SqliteStore`]; a
/// PostgreSQL backend implements the same operations (leases with
/// `FOR UPDATE SKIP LOCKED`, the epoch as the fence of every append).
pub trait ServerStore: Store {
    /// Queue a run. With an idempotency key seen before, nothing is queued
    /// and the earlier run is returned.
    fn enqueue(&mut self, run: &QueuedRun) -> Result<Enqueued, StoreError>;
    /// Lease the oldest queued run whose session has no leased run, or a
    /// leased run whose lease expired (a takeover, with the next epoch) and
    /// that another owner held: an owner's own expired lease is its drive
    /// running late, not a dead one.
    fn lease_next(&mut self, owner: &str, lease: Duration) -> Result<Option<Lease>, StoreError>;
    /// Extend a lease; false when it is no longer this owner's at `epoch`.
    fn renew_lease(
        &mut self,
        run_id: &str,
        owner: &str,
        epoch: i64,
        lease: Duration,
    ) -> Result<bool, StoreError>;
    /// Settle a leased run (`finished`, or `failed` with a reason when it
    /// could not be started); false when the lease moved on.
    fn settle(
        &mut self,
        run_id: &str,
        epoch: i64,
        state: &str,
        reason: Option<&str>,
    ) -> Result<bool, StoreError>;
    /// Cancel a run no worker has taken yet; false when it was taken.
    fn cancel_queued(&mut self, run_id: &str) -> Result<bool, StoreError>;
    /// Let the leases of owners that are gone expire now (a restarted
    /// server takes their runs over at once).
    fn expire_leases(&mut self, owner_gone: &dyn Fn(&str) -> bool) -> Result<usize, StoreError>;
    fn queued_run(&self, run_id: &str) -> Result<Option<QueueRecord>, StoreError>;
    /// Queue rows, newest first, optionally of one session.
    fn queue(&self, session_id: Option<&str>) -> Result<Vec<QueueRecord>, StoreError>;
    /// A run's events with a sequence number above `after_seq`, in order.
    fn events_after(&self, run_id: &str, after_seq: u64) -> Result<Vec<StoredEvent>, StoreError>;
    /// The events of a session's runs at positions above `after`, in order.
    fn session_events_after(
        &self,
        session_id: &str,
        after: i64,
    ) -> Result<Vec<StoredEvent>, StoreError>;
    fn add_token(&mut self, token: &NewToken) -> Result<(), StoreError>;
    /// Every token, revoked ones included, oldest first.
    fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError>;
    /// Revoke the tokens with this id or name; how many were revoked.
    fn revoke_token(&mut self, id_or_name: &str) -> Result<usize, StoreError>;
    /// Whether the store answers (readiness).
    fn ping(&self) -> Result<(), StoreError>;
    /// Record a signed callback's delivery key (`adapter:id`), received at
    /// `now`: true the first time, false for a replay (by any server
    /// sharing the store). Keys older than [`DELIVERY_KEYS_KEPT`] are
    /// dropped on the way, so the table does not grow without end.
    fn first_delivery(&mut self, key: &str, now: DateTime<Utc>) -> Result<bool, StoreError>;

    /// Record an approval a run now waits for (`decision` unset).
    fn request_approval(&mut self, approval: &ApprovalRecord) -> Result<(), StoreError>;
    /// Approvals with no decision yet, oldest first.
    fn pending_approvals(&self) -> Result<Vec<ApprovalRecord>, StoreError>;
    /// The approval of call `call_id` of run `run_id` (call ids are unique
    /// within a run only).
    fn approval(&self, run_id: &str, call_id: &str) -> Result<Option<ApprovalRecord>, StoreError>;
    /// Write the decision of a pending approval, once: `None` when there
    /// is no such approval or it was decided already (nothing changes).
    /// An approval `for_session` also grants the tool to its session.
    fn decide_approval(
        &mut self,
        run_id: &str,
        call_id: &str,
        decision: &serde_json::Value,
        for_session: bool,
    ) -> Result<Option<ApprovalRecord>, StoreError>;
    /// Whether the session allowed the tool for good.
    fn session_grant(&self, session_id: &str, tool_name: &str) -> Result<bool, StoreError>;
}

/// How long a callback's delivery key is kept: well past the five minutes
/// every adapter allows a callback's signed timestamp to be off by, so a
/// replay is refused by its key until its timestamp alone refuses it.
pub const DELIVERY_KEYS_KEPT: chrono::Duration = chrono::Duration::hours(1);

fn expiry(lease: Duration) -> String {
    let until = chrono::Utc::now()
        + chrono::Duration::from_std(lease).unwrap_or_else(|_| chrono::Duration::seconds(30));
    stamp(until)
}

fn queue_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<QueueRecord> {
    let request: String = r.get("request")?;
    Ok(QueueRecord {
        run_id: r.get("run_id")?,
        session_id: r.get("session_id")?,
        state: r.get("state")?,
        reason: r.get("reason")?,
        request: serde_json::from_str(&request).unwrap_or(serde_json::Value::Null),
        lease_owner: r.get("lease_owner")?,
        lease_epoch: r.get("lease_epoch")?,
        created_at: r.get("created_at")?,
    })
}

impl SqliteStore {
    fn stored_events(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let rows: Vec<(i64, String)> = stmt
            .query_map(params, |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        let mut out = Vec::with_capacity(rows.len());
        for (position, body) in rows {
            if let LogEntry::Event { event } = serde_json::from_str(&body)? {
                out.push(StoredEvent { position, event });
            }
        }
        Ok(out)
    }
}

impl ServerStore for SqliteStore {
    fn enqueue(&mut self, run: &QueuedRun) -> Result<Enqueued, StoreError> {
        let tx = write_tx(&self.conn)?;
        if let Some(key) = &run.idempotency_key {
            let earlier = tx
                .query_row(
                    "SELECT run_id, session_id FROM server_runs WHERE idempotency_key = ?1",
                    [key],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            if let Some((run_id, session_id)) = earlier {
                return Ok(Enqueued {
                    run_id,
                    session_id,
                    created: false,
                });
            }
        }
        tx.execute(
            "INSERT INTO server_runs (run_id, session_id, request, state, idempotency_key, created_at)
             VALUES (?1, ?2, ?3, 'queued', ?4, ?5)",
            params![
                run.run_id,
                run.session_id,
                run.request.to_string(),
                run.idempotency_key,
                now()
            ],
        )?;
        tx.commit()?;
        Ok(Enqueued {
            run_id: run.run_id.clone(),
            session_id: run.session_id.clone(),
            created: true,
        })
    }

    fn lease_next(&mut self, owner: &str, lease: Duration) -> Result<Option<Lease>, StoreError> {
        let ts = now();
        let row = self
            .conn
            .query_row(
                "UPDATE server_runs
                 SET state = 'leased', lease_owner = ?1, lease_epoch = lease_epoch + 1, lease_expires = ?2
                 WHERE run_id = (
                     SELECT q.run_id FROM server_runs q
                     WHERE (q.state = 'leased' AND q.lease_expires < ?3 AND q.lease_owner IS NOT ?1)
                        OR (q.state = 'queued' AND NOT EXISTS (
                                SELECT 1 FROM server_runs o
                                WHERE o.session_id = q.session_id AND o.state = 'leased'))
                     ORDER BY q.state = 'queued', q.created_at, q.rowid
                     LIMIT 1)
                 RETURNING run_id, session_id, request, lease_epoch",
                params![owner, expiry(lease), ts],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, i64>(3)?,
                    ))
                },
            )
            .optional()?;
        Ok(match row {
            Some((run_id, session_id, request, epoch)) => Some(Lease {
                run_id,
                session_id,
                request: serde_json::from_str(&request)?,
                epoch,
                takeover: epoch > 1,
            }),
            None => None,
        })
    }

    fn renew_lease(
        &mut self,
        run_id: &str,
        owner: &str,
        epoch: i64,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let n = self.conn.execute(
            "UPDATE server_runs SET lease_expires = ?4
             WHERE run_id = ?1 AND lease_owner = ?2 AND lease_epoch = ?3 AND state = 'leased'",
            params![run_id, owner, epoch, expiry(lease)],
        )?;
        Ok(n == 1)
    }

    fn settle(
        &mut self,
        run_id: &str,
        epoch: i64,
        state: &str,
        reason: Option<&str>,
    ) -> Result<bool, StoreError> {
        let n = self.conn.execute(
            "UPDATE server_runs SET state = ?3, reason = ?4, lease_expires = NULL
             WHERE run_id = ?1 AND lease_epoch = ?2 AND state = 'leased'",
            params![run_id, epoch, state, reason],
        )?;
        Ok(n == 1)
    }

    fn cancel_queued(&mut self, run_id: &str) -> Result<bool, StoreError> {
        let n = self.conn.execute(
            "UPDATE server_runs SET state = 'cancelled', reason = 'cancelled before it started'
             WHERE run_id = ?1 AND state = 'queued'",
            [run_id],
        )?;
        Ok(n == 1)
    }

    fn expire_leases(&mut self, owner_gone: &dyn Fn(&str) -> bool) -> Result<usize, StoreError> {
        let owners: Vec<String> = {
            let mut stmt = self.conn.prepare(
                "SELECT DISTINCT lease_owner FROM server_runs WHERE state = 'leased' AND lease_owner IS NOT NULL",
            )?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        let mut expired = 0;
        for owner in owners.iter().filter(|o| owner_gone(o)) {
            expired += self.conn.execute(
                "UPDATE server_runs SET lease_expires = '' WHERE state = 'leased' AND lease_owner = ?1",
                [owner],
            )?;
        }
        Ok(expired)
    }

    fn queued_run(&self, run_id: &str) -> Result<Option<QueueRecord>, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT * FROM server_runs WHERE run_id = ?1",
                [run_id],
                queue_row,
            )
            .optional()?)
    }

    fn queue(&self, session_id: Option<&str>) -> Result<Vec<QueueRecord>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT * FROM server_runs WHERE (?1 IS NULL OR session_id = ?1)
             ORDER BY created_at DESC, rowid DESC",
        )?;
        let rows = stmt.query_map([session_id], queue_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn events_after(&self, run_id: &str, after_seq: u64) -> Result<Vec<StoredEvent>, StoreError> {
        let events = self.stored_events(
            "SELECT id, body FROM entries WHERE run_id = ?1 AND kind = 'event' ORDER BY id",
            [run_id],
        )?;
        Ok(events
            .into_iter()
            .filter(|e| e.event.seq > after_seq)
            .collect())
    }

    fn session_events_after(
        &self,
        session_id: &str,
        after: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        self.stored_events(
            "SELECT e.id, e.body FROM entries e JOIN runs r ON r.id = e.run_id
             WHERE r.session_id = ?1 AND e.kind = 'event' AND e.id > ?2 ORDER BY e.id",
            params![session_id, after],
        )
    }

    fn add_token(&mut self, token: &NewToken) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO server_tokens (id, name, hash, scopes, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                token.id,
                token.name,
                token.hash,
                token.scopes.join(","),
                now()
            ],
        )?;
        Ok(())
    }

    fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, name, hash, scopes, created_at, revoked_at FROM server_tokens ORDER BY created_at, rowid",
        )?;
        let rows = stmt.query_map([], |r| {
            let scopes: String = r.get(3)?;
            Ok(TokenRecord {
                id: r.get(0)?,
                name: r.get(1)?,
                hash: r.get(2)?,
                scopes: scopes
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect(),
                created_at: r.get(4)?,
                revoked_at: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn revoke_token(&mut self, id_or_name: &str) -> Result<usize, StoreError> {
        Ok(self.conn.execute(
            "UPDATE server_tokens SET revoked_at = ?2
             WHERE (id = ?1 OR name = ?1) AND revoked_at IS NULL",
            params![id_or_name, now()],
        )?)
    }

    fn ping(&self) -> Result<(), StoreError> {
        self.conn.query_row("SELECT 1", [], |_| Ok(()))?;
        Ok(())
    }

    fn first_delivery(&mut self, key: &str, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let tx = write_tx(&self.conn)?;
        tx.execute(
            "DELETE FROM webhook_deliveries WHERE seen_at < ?1",
            params![stamp(now - DELIVERY_KEYS_KEPT)],
        )?;
        let inserted = tx.execute(
            "INSERT OR IGNORE INTO webhook_deliveries (key, seen_at) VALUES (?1, ?2)",
            params![key, stamp(now)],
        )?;
        tx.commit()?;
        Ok(inserted == 1)
    }
    fn request_approval(&mut self, a: &ApprovalRecord) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO server_approvals (call_id, run_id, session_id, tool_name, request, owner, requested_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT(run_id, call_id) DO UPDATE SET owner = excluded.owner, request = excluded.request,
                 requested_at = excluded.requested_at, decision = NULL, for_session = 0, decided_at = NULL",
            params![
                a.call_id,
                a.run_id,
                a.session_id,
                a.tool_name,
                a.request.to_string(),
                a.owner,
                a.requested_at
            ],
        )?;
        Ok(())
    }

    fn pending_approvals(&self) -> Result<Vec<ApprovalRecord>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT * FROM server_approvals WHERE decided_at IS NULL ORDER BY requested_at, rowid",
        )?;
        let rows = stmt.query_map([], approval_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn approval(&self, run_id: &str, call_id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT * FROM server_approvals WHERE run_id = ?1 AND call_id = ?2",
                [run_id, call_id],
                approval_row,
            )
            .optional()?)
    }

    fn decide_approval(
        &mut self,
        run_id: &str,
        call_id: &str,
        decision: &serde_json::Value,
        for_session: bool,
    ) -> Result<Option<ApprovalRecord>, StoreError> {
        let tx = write_tx(&self.conn)?;
        let decided = tx
            .query_row(
                "UPDATE server_approvals SET decision = ?3, for_session = ?4, decided_at = ?5
                 WHERE run_id = ?1 AND call_id = ?2 AND decided_at IS NULL
                 RETURNING *",
                params![run_id, call_id, decision.to_string(), for_session, now()],
                approval_row,
            )
            .optional()?;
        if let Some(a) = &decided {
            if for_session && approved(decision) {
                tx.execute(
                    "INSERT OR IGNORE INTO server_grants (session_id, tool_name, granted_at) VALUES (?1, ?2, ?3)",
                    params![a.session_id, a.tool_name, now()],
                )?;
            }
        }
        tx.commit()?;
        Ok(decided)
    }

    fn session_grant(&self, session_id: &str, tool_name: &str) -> Result<bool, StoreError> {
        Ok(self.conn.query_row(
            "SELECT EXISTS(SELECT 1 FROM server_grants WHERE session_id = ?1 AND tool_name = ?2)",
            params![session_id, tool_name],
            |r| r.get(0),
        )?)
    }
}

/// Whether a stored decision approves (`{"approved": true, …}`).
pub(crate) fn approved(decision: &serde_json::Value) -> bool {
    decision["approved"].as_bool() == Some(true)
}

fn approval_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ApprovalRecord> {
    let request: String = r.get("request")?;
    let decision: Option<String> = r.get("decision")?;
    Ok(ApprovalRecord {
        call_id: r.get("call_id")?,
        run_id: r.get("run_id")?,
        session_id: r.get("session_id")?,
        tool_name: r.get("tool_name")?,
        request: serde_json::from_str(&request).unwrap_or(serde_json::Value::Null),
        owner: r.get("owner")?,
        requested_at: r.get("requested_at")?,
        decision: decision.and_then(|d| serde_json::from_str(&d).ok()),
        for_session: r.get("for_session")?,
        decided_at: r.get("decided_at")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(id: &str, session: &str, key: Option<&str>) -> QueuedRun {
        QueuedRun {
            run_id: id.into(),
            session_id: session.into(),
            request: serde_json::json!({"prompt": id}),
            idempotency_key: key.map(str::to_string),
        }
    }

    #[test]
    fn an_idempotency_key_returns_the_first_run() {
        let mut store = SqliteStore::open_in_memory().unwrap();
        let first = store.enqueue(&queued("r1", "s1", Some("k"))).unwrap();
        let again = store.enqueue(&queued("r2", "s2", Some("k"))).unwrap();
        assert!(first.created && !again.created);
        assert_eq!(again.run_id, "r1");
        assert_eq!(again.session_id, "s1");
        assert!(store.queued_run("r2").unwrap().is_none());
    }

    #[test]
    fn one_leased_run_per_session_and_an_expired_lease_is_taken_over_with_the_next_epoch() {
        let mut store = SqliteStore::open_in_memory().unwrap();
        store.enqueue(&queued("a1", "s", None)).unwrap();
        store.enqueue(&queued("a2", "s", None)).unwrap();
        store.enqueue(&queued("b1", "t", None)).unwrap();
        let long = Duration::from_secs(60);
        let first = store.lease_next("w1", long).unwrap().unwrap();
        assert_eq!((first.run_id.as_str(), first.epoch), ("a1", 1));
        assert!(!first.takeover);
        // a2 waits for a1: its session has a leased run.
        let second = store.lease_next("w1", long).unwrap().unwrap();
        assert_eq!(second.run_id, "b1");
        assert!(store.lease_next("w1", long).unwrap().is_none());
        assert!(store.renew_lease("a1", "w1", 1, long).unwrap());
        assert!(!store.renew_lease("a1", "w2", 1, long).unwrap());

        // w1 is gone: its leases expire, a1 is taken over with epoch 2.
        assert_eq!(store.expire_leases(&|o| o == "w1").unwrap(), 2);
        let taken = store.lease_next("w2", long).unwrap().unwrap();
        assert_eq!((taken.run_id.as_str(), taken.epoch), ("a1", 2));
        assert!(taken.takeover);
        // The old epoch is fenced off.
        assert!(!store.settle("a1", 1, "finished", None).unwrap());
        assert!(store.settle("a1", 2, "finished", None).unwrap());
        let b1 = store.lease_next("w2", long).unwrap().unwrap();
        assert_eq!(b1.run_id, "b1");
        let next = store.lease_next("w2", long).unwrap().unwrap();
        assert_eq!(next.run_id, "a2");
    }

    #[test]
    fn a_queued_run_can_be_cancelled_until_it_is_leased() {
        let mut store = SqliteStore::open_in_memory().unwrap();
        store.enqueue(&queued("r1", "s", None)).unwrap();
        store.enqueue(&queued("r2", "t", None)).unwrap();
        assert!(store.cancel_queued("r1").unwrap());
        let lease = store
            .lease_next("w", Duration::from_secs(5))
            .unwrap()
            .unwrap();
        assert_eq!(lease.run_id, "r2");
        assert!(!store.cancel_queued("r2").unwrap());
        assert!(store.queued_run("r1").unwrap().unwrap().is_settled());
    }

    #[test]
    fn tokens_are_listed_and_revoked_by_name() {
        let mut store = SqliteStore::open_in_memory().unwrap();
        store
            .add_token(&NewToken {
                id: "t1".into(),
                name: "ci".into(),
                hash: "h1".into(),
                scopes: vec!["runs:read".into(), "runs:write".into()],
            })
            .unwrap();
        assert_eq!(store.tokens().unwrap()[0].scopes.len(), 2);
        assert_eq!(store.revoke_token("ci").unwrap(), 1);
        assert_eq!(store.revoke_token("ci").unwrap(), 0);
        assert!(store.tokens().unwrap()[0].revoked_at.is_some());
    }

    #[test]
    fn a_delivery_key_is_first_only_once() {
        let mut store = SqliteStore::open_in_memory().unwrap();
        let now = chrono::Utc::now();
        assert!(store.first_delivery("generic:msg_1", now).unwrap());
        assert!(!store.first_delivery("generic:msg_1", now).unwrap());
        assert!(store.first_delivery("slack:msg_1", now).unwrap());
    }
}
