//! [`ServerStore`] on PostgreSQL: the run queue with `FOR UPDATE SKIP
//! LOCKED` leases on the database's clock, tokens, event reads, approvals.

use super::{PgStore, APPROVALS_CHANNEL, QUEUE_CHANNEL};
use crate::server::{
    approved, ApprovalRecord, Enqueued, Lease, NewToken, QueueRecord, QueuedRun, StoredEvent,
    TokenRecord, DELIVERY_KEYS_KEPT,
};
use crate::sqlite::{now, stamp};
use crate::{ServerStore, StoreError};
use attest_protocol::LogEntry;
use chrono::{DateTime, Utc};
use postgres::Row;
use std::time::Duration;

/// How many lease candidates one attempt locks at most.
const CANDIDATES: i64 = 16;

fn queue_row(r: &Row) -> QueueRecord {
    let request: String = r.get("request");
    QueueRecord {
        run_id: r.get("run_id"),
        session_id: r.get("session_id"),
        state: r.get("state"),
        reason: r.get("reason"),
        request: serde_json::from_str(&request).unwrap_or(serde_json::Value::Null),
        lease_owner: r.get("lease_owner"),
        lease_epoch: r.get("lease_epoch"),
        created_at: r.get("created_at"),
    }
}

fn approval_row(r: &Row) -> ApprovalRecord {
    let request: String = r.get("request");
    let decision: Option<String> = r.get("decision");
    ApprovalRecord {
        call_id: r.get("call_id"),
        run_id: r.get("run_id"),
        session_id: r.get("session_id"),
        tool_name: r.get("tool_name"),
        request: serde_json::from_str(&request).unwrap_or(serde_json::Value::Null),
        owner: r.get("owner"),
        requested_at: r.get("requested_at"),
        decision: decision.and_then(|d| serde_json::from_str(&d).ok()),
        for_session: r.get("for_session"),
        decided_at: r.get("decided_at"),
    }
}

fn events(rows: Vec<Row>) -> Result<Vec<StoredEvent>, StoreError> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        if let LogEntry::Event { event } = serde_json::from_str(row.get::<_, &str>(1))? {
            out.push(StoredEvent {
                position: row.get(0),
                event,
            });
        }
    }
    Ok(out)
}

// The hot paths' statements, prepared once per connection.
const ENQUEUE_SQL: &str =
    "INSERT INTO server_runs (run_id, session_id, request, state, idempotency_key, created_at)
     VALUES ($1, $2, $3, 'queued', $4, $5)
     ON CONFLICT (idempotency_key) DO NOTHING
     RETURNING run_id";
const EARLIER_SQL: &str = "SELECT run_id, session_id FROM server_runs WHERE idempotency_key = $1";
const CANDIDATES_SQL: &str = "SELECT q.run_id, q.session_id, q.state FROM server_runs q
     WHERE (q.state = 'leased' AND q.lease_expires < clock_timestamp()
            AND q.lease_owner IS DISTINCT FROM $2)
        OR (q.state = 'queued' AND NOT EXISTS (
                SELECT 1 FROM server_runs o
                WHERE o.session_id = q.session_id AND o.state = 'leased'))
     ORDER BY q.state = 'queued', q.created_at, q.seq
     LIMIT $1
     FOR UPDATE OF q SKIP LOCKED";
const SESSION_LOCK_SQL: &str = "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))";
const SESSION_BUSY_SQL: &str =
    "SELECT EXISTS(SELECT 1 FROM server_runs WHERE session_id = $1 AND state = 'leased')";
const LEASE_SQL: &str = "UPDATE server_runs
     SET state = 'leased', lease_owner = $2, lease_epoch = lease_epoch + 1,
     lease_expires = clock_timestamp() + make_interval(secs => $3)
     WHERE run_id = $1
     RETURNING request, lease_epoch";
const RENEW_SQL: &str =
    "UPDATE server_runs SET lease_expires = clock_timestamp() + make_interval(secs => $4)
     WHERE run_id = $1 AND lease_owner = $2 AND lease_epoch = $3 AND state = 'leased'";
const SETTLE_SQL: &str = "UPDATE server_runs SET state = $3, reason = $4, lease_expires = NULL
     WHERE run_id = $1 AND lease_epoch = $2 AND state = 'leased'";
const NOTIFY_SQL: &str = "SELECT pg_notify($1, $2)";

fn seconds(d: Duration) -> f64 {
    d.as_secs_f64().max(0.001)
}

impl ServerStore for PgStore {
    fn enqueue(&mut self, run: &QueuedRun) -> Result<Enqueued, StoreError> {
        let run = run.clone();
        self.conn.call_prepared(move |c, prepared| {
            let mut tx = c.transaction()?;
            let inserted = prepared.query_opt(
                &mut tx,
                ENQUEUE_SQL,
                &[
                    &run.run_id,
                    &run.session_id,
                    &run.request.to_string(),
                    &run.idempotency_key,
                    &now(),
                ],
            )?;
            if inserted.is_none() {
                let earlier = prepared.query_one(&mut tx, EARLIER_SQL, &[&run.idempotency_key])?;
                return Ok(Enqueued {
                    run_id: earlier.get(0),
                    session_id: earlier.get(1),
                    created: false,
                });
            }
            prepared.execute(&mut tx, NOTIFY_SQL, &[&QUEUE_CHANNEL, &run.run_id])?;
            tx.commit()?;
            Ok(Enqueued {
                run_id: run.run_id,
                session_id: run.session_id,
                created: true,
            })
        })
    }

    fn lease_next(&mut self, owner: &str, lease: Duration) -> Result<Option<Lease>, StoreError> {
        let owner = owner.to_string();
        self.conn.call_prepared(move |c, prepared| {
            let mut tx = c.transaction()?;
            // Expired leases first (takeovers: never of this owner's own
            // leases, whose drives are still running however late their
            // renewal), then the oldest queued runs of sessions with no
            // leased run; rows other servers are looking at are skipped, not
            // waited for.
            let candidates = prepared.query(&mut tx, CANDIDATES_SQL, &[&CANDIDATES, &owner])?;
            for candidate in candidates {
                let (run_id, session_id, state): (String, String, String) =
                    (candidate.get(0), candidate.get(1), candidate.get(2));
                if state == "queued" {
                    // One leased run per session, across servers: the
                    // session's lock is held until this transaction ends,
                    // and the check below sees any lease committed before.
                    let locked: bool = prepared
                        .query_one(&mut tx, SESSION_LOCK_SQL, &[&session_id])?
                        .get(0);
                    let busy: bool = locked
                        && prepared
                            .query_one(&mut tx, SESSION_BUSY_SQL, &[&session_id])?
                            .get(0);
                    if !locked || busy {
                        continue;
                    }
                }
                let row =
                    prepared.query_one(&mut tx, LEASE_SQL, &[&run_id, &owner, &seconds(lease)])?;
                tx.commit()?;
                let request: String = row.get(0);
                let epoch: i64 = row.get(1);
                return Ok(Some(Lease {
                    run_id,
                    session_id,
                    request: serde_json::from_str(&request)?,
                    epoch,
                    takeover: epoch > 1,
                }));
            }
            Ok(None)
        })
    }

    fn renew_lease(
        &mut self,
        run_id: &str,
        owner: &str,
        epoch: i64,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let (run_id, owner) = (run_id.to_string(), owner.to_string());
        self.conn.call_prepared(move |c, prepared| {
            Ok(prepared.execute(c, RENEW_SQL, &[&run_id, &owner, &epoch, &seconds(lease)])? == 1)
        })
    }

    fn settle(
        &mut self,
        run_id: &str,
        epoch: i64,
        state: &str,
        reason: Option<&str>,
    ) -> Result<bool, StoreError> {
        let (run_id, state, reason) = (
            run_id.to_string(),
            state.to_string(),
            reason.map(str::to_string),
        );
        self.conn.call_prepared(move |c, prepared| {
            let mut tx = c.transaction()?;
            let n = prepared.execute(&mut tx, SETTLE_SQL, &[&run_id, &epoch, &state, &reason])?;
            // The session's next run may start now, on any server.
            prepared.execute(&mut tx, NOTIFY_SQL, &[&QUEUE_CHANNEL, &run_id])?;
            tx.commit()?;
            Ok(n == 1)
        })
    }

    fn cancel_queued(&mut self, run_id: &str) -> Result<bool, StoreError> {
        let run_id = run_id.to_string();
        self.conn.call(move |c| {
            Ok(c.execute(
                "UPDATE server_runs SET state = 'cancelled', reason = 'cancelled before it started'
                 WHERE run_id = $1 AND state = 'queued'",
                &[&run_id],
            )? == 1)
        })
    }

    fn expire_leases(&mut self, owner_gone: &dyn Fn(&str) -> bool) -> Result<usize, StoreError> {
        let owners: Vec<String> = self.conn.call(|c| {
            Ok(c.query(
                "SELECT DISTINCT lease_owner FROM server_runs WHERE state = 'leased' AND lease_owner IS NOT NULL",
                &[],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect())
        })?;
        let gone: Vec<String> = owners.into_iter().filter(|o| owner_gone(o)).collect();
        self.conn.call(move |c| {
            let mut expired = 0;
            for owner in &gone {
                expired += c.execute(
                    "UPDATE server_runs SET lease_expires = '-infinity' WHERE state = 'leased' AND lease_owner = $1",
                    &[owner],
                )?;
            }
            Ok(expired as usize)
        })
    }

    fn queued_run(&self, run_id: &str) -> Result<Option<QueueRecord>, StoreError> {
        let run_id = run_id.to_string();
        self.conn.call(move |c| {
            Ok(
                c.query_opt("SELECT * FROM server_runs WHERE run_id = $1", &[&run_id])?
                    .as_ref()
                    .map(queue_row),
            )
        })
    }

    fn queue(&self, session_id: Option<&str>) -> Result<Vec<QueueRecord>, StoreError> {
        let session = session_id.map(str::to_string);
        self.conn.call(move |c| {
            Ok(c.query(
                "SELECT * FROM server_runs WHERE ($1::TEXT IS NULL OR session_id = $1)
                 ORDER BY created_at DESC, seq DESC",
                &[&session],
            )?
            .iter()
            .map(queue_row)
            .collect())
        })
    }

    fn events_after(&self, run_id: &str, after_seq: u64) -> Result<Vec<StoredEvent>, StoreError> {
        let run_id = run_id.to_string();
        let rows = self.conn.call(move |c| {
            Ok(c.query(
                "SELECT id, body FROM entries WHERE run_id = $1 AND kind = 'event' ORDER BY id",
                &[&run_id],
            )?)
        })?;
        Ok(events(rows)?
            .into_iter()
            .filter(|e| e.event.seq > after_seq)
            .collect())
    }

    fn session_events_after(
        &self,
        session_id: &str,
        after: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let session = session_id.to_string();
        let rows = self.conn.call(move |c| {
            Ok(c.query(
                "SELECT e.id, e.body FROM entries e JOIN runs r ON r.id = e.run_id
                 WHERE r.session_id = $1 AND e.kind = 'event' AND e.id > $2 ORDER BY e.id",
                &[&session, &after],
            )?)
        })?;
        events(rows)
    }

    fn add_token(&mut self, token: &NewToken) -> Result<(), StoreError> {
        let token = token.clone();
        self.conn.call(move |c| {
            c.execute(
                "INSERT INTO server_tokens (id, name, hash, scopes, created_at) VALUES ($1, $2, $3, $4, $5)",
                &[&token.id, &token.name, &token.hash, &token.scopes.join(","), &now()],
            )?;
            Ok(())
        })
    }

    fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        self.conn.call(|c| {
            Ok(c.query(
                "SELECT id, name, hash, scopes, created_at, revoked_at FROM server_tokens ORDER BY created_at, seq",
                &[],
            )?
            .iter()
            .map(|r| TokenRecord {
                id: r.get(0),
                name: r.get(1),
                hash: r.get(2),
                scopes: r
                    .get::<_, &str>(3)
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect(),
                created_at: r.get(4),
                revoked_at: r.get(5),
            })
            .collect())
        })
    }

    fn revoke_token(&mut self, id_or_name: &str) -> Result<usize, StoreError> {
        let wanted = id_or_name.to_string();
        self.conn.call(move |c| {
            Ok(c.execute(
                "UPDATE server_tokens SET revoked_at = $2 WHERE (id = $1 OR name = $1) AND revoked_at IS NULL",
                &[&wanted, &now()],
            )? as usize)
        })
    }

    fn ping(&self) -> Result<(), StoreError> {
        self.conn.call(|c| {
            c.query_one("SELECT 1", &[])?;
            Ok(())
        })
    }

    fn request_approval(&mut self, a: &ApprovalRecord) -> Result<(), StoreError> {
        let a = a.clone();
        self.conn.call(move |c| {
            c.execute(
                "INSERT INTO server_approvals (call_id, run_id, session_id, tool_name, request, owner, requested_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (run_id, call_id) DO UPDATE SET owner = excluded.owner, request = excluded.request,
                     requested_at = excluded.requested_at, decision = NULL, for_session = FALSE, decided_at = NULL",
                &[&a.call_id, &a.run_id, &a.session_id, &a.tool_name, &a.request.to_string(), &a.owner, &a.requested_at],
            )?;
            Ok(())
        })
    }

    fn pending_approvals(&self) -> Result<Vec<ApprovalRecord>, StoreError> {
        self.conn.call(|c| {
            Ok(c.query(
                "SELECT * FROM server_approvals WHERE decided_at IS NULL ORDER BY requested_at, seq",
                &[],
            )?
            .iter()
            .map(approval_row)
            .collect())
        })
    }

    fn approval(&self, run_id: &str, call_id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        let (run_id, call_id) = (run_id.to_string(), call_id.to_string());
        self.conn.call(move |c| {
            Ok(c.query_opt(
                "SELECT * FROM server_approvals WHERE run_id = $1 AND call_id = $2",
                &[&run_id, &call_id],
            )?
            .as_ref()
            .map(approval_row))
        })
    }

    fn decide_approval(
        &mut self,
        run_id: &str,
        call_id: &str,
        decision: &serde_json::Value,
        for_session: bool,
    ) -> Result<Option<ApprovalRecord>, StoreError> {
        let (run_id, call_id, decision) =
            (run_id.to_string(), call_id.to_string(), decision.clone());
        self.conn.call(move |c| {
            let mut tx = c.transaction()?;
            let decided = tx
                .query_opt(
                    "UPDATE server_approvals SET decision = $3, for_session = $4, decided_at = $5
                     WHERE run_id = $1 AND call_id = $2 AND decided_at IS NULL
                     RETURNING *",
                    &[&run_id, &call_id, &decision.to_string(), &for_session, &now()],
                )?
                .as_ref()
                .map(approval_row);
            if let Some(a) = &decided {
                if for_session && approved(&decision) {
                    tx.execute(
                        "INSERT INTO server_grants (session_id, tool_name, granted_at) VALUES ($1, $2, $3)
                         ON CONFLICT DO NOTHING",
                        &[&a.session_id, &a.tool_name, &now()],
                    )?;
                }
                tx.execute(
                    NOTIFY_SQL,
                    &[&APPROVALS_CHANNEL, &format!("{run_id} {call_id}")],
                )?;
            }
            tx.commit()?;
            Ok(decided)
        })
    }

    fn first_delivery(&mut self, key: &str, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let key = key.to_string();
        let (seen, cutoff) = (stamp(now), stamp(now - DELIVERY_KEYS_KEPT));
        self.conn.call(move |c| {
            let mut tx = c.transaction()?;
            tx.execute(
                "DELETE FROM webhook_deliveries WHERE seen_at < $1",
                &[&cutoff],
            )?;
            let inserted = tx.execute(
                "INSERT INTO webhook_deliveries (key, seen_at) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
                &[&key, &seen],
            )?;
            tx.commit()?;
            Ok(inserted == 1)
        })
    }

    fn session_grant(&self, session_id: &str, tool_name: &str) -> Result<bool, StoreError> {
        let (session, tool) = (session_id.to_string(), tool_name.to_string());
        self.conn.call(move |c| {
            Ok(c.query_one(
                "SELECT EXISTS(SELECT 1 FROM server_grants WHERE session_id = $1 AND tool_name = $2)",
                &[&session, &tool],
            )?
            .get(0))
        })
    }
}
