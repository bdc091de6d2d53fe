//! [`Store`] on PostgreSQL: sessions, runs, the chained log, memory.

use super::conn::Prepared;
use super::{PgStore, EVENTS_CHANNEL};
use crate::chain::{self, ChainVerdict, RunHeader, StoredEntry};
use crate::records::{Artifact, NewRun, RunRecord, SessionRecord};
use crate::sqlite::{entry_type, item, lease_holds, now, of_kind, stamp, stored_form, trace, Head};
use crate::{Store, StoreError};
use attest_protocol::{EventBody, LogEntry, MemoryItem, MemoryStatus, TraceRecord, TranscriptItem};
use chrono::{DateTime, Utc};
use postgres::{GenericClient, Row, Transaction};

fn run_from_row(row: &Row) -> RunRecord {
    let settings: String = row.get("settings");
    RunRecord {
        id: row.get("id"),
        session_id: row.get("session_id"),
        trace_id: row.get("trace_id"),
        prompt: row.get("prompt"),
        status: row.get("status"),
        reason: row.get("reason"),
        answer: row.get("answer"),
        steps: row.get::<_, i64>("steps").clamp(0, u32::MAX as i64) as u32,
        settings: serde_json::from_str(&settings).unwrap_or(serde_json::Value::Null),
        loop_version: row.get("loop_version"),
        prompt_version: row.get("prompt_version"),
        pid: row
            .get::<_, Option<i64>>("pid")
            .and_then(|p| u32::try_from(p).ok()),
        started_at: row.get("started_at"),
        finished_at: row.get("finished_at"),
    }
}

/// The run's chain head and session as stored (`None`: no such run).
fn read_head(
    c: &mut impl GenericClient,
    run_id: &str,
) -> Result<Option<(Head, String)>, StoreError> {
    let Some(row) = c.query_opt(
        "SELECT id, session_id, trace_id, prompt, settings, loop_version, prompt_version, chain_head
         FROM runs WHERE id = $1",
        &[&run_id],
    )?
    else {
        return Ok(None);
    };
    let session: String = row.get(1);
    let head = match row.get::<_, Option<String>>(7) {
        Some(h) => Head::Stored(h),
        None => {
            let has_entries: bool = c
                .query_one(
                    "SELECT EXISTS(SELECT 1 FROM entries WHERE run_id = $1)",
                    &[&run_id],
                )?
                .get(0);
            if has_entries {
                Head::Legacy
            } else {
                let fields: Vec<String> = (0..7).map(|i| row.get(i)).collect();
                Head::Fresh(chain::genesis(&header(&fields)))
            }
        }
    };
    Ok(Some((head, session)))
}

fn header(fields: &[String]) -> RunHeader<'_> {
    let get = |i: usize| fields.get(i).map_or("", String::as_str);
    RunHeader {
        id: get(0),
        session_id: get(1),
        trace_id: get(2),
        prompt: get(3),
        settings: get(4),
        loop_version: get(5),
        prompt_version: get(6),
    }
}

/// What one append transaction ended with.
enum Appended {
    Done(Head, String),
    /// Another writer moved the run's head: reread it and try again.
    HeadMoved,
}

const FENCE_SQL: &str =
    "SELECT lease_owner, lease_epoch, state FROM server_runs WHERE run_id = $1 FOR SHARE";
const ARCHIVE_SQL: &str =
    "INSERT INTO archive (run_id, call_id, item, created_at) VALUES ($1, $2, $3, $4)";
const ARTIFACT_SQL: &str = "INSERT INTO artifacts (run_id, step, kind, body, created_at) VALUES ($1, $2, $3, $4, $5) RETURNING id";
const MOVE_HEAD_SQL: &str =
    "UPDATE runs SET chain_head = $2 WHERE id = $1 AND chain_head IS NOT DISTINCT FROM $3";
/// A batch's entries in one statement, in order (`id` is a sequence).
const ENTRIES_SQL: &str = "INSERT INTO entries (run_id, kind, type, body, created_at, hash)
     SELECT $1, e.kind, e.type, e.body, e.created_at, e.hash
     FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
          WITH ORDINALITY AS e(kind, type, body, created_at, hash, n)
     ORDER BY e.n";
const RECEIPT_SQL: &str =
    "INSERT INTO receipts (run_id, call_id, tool_name, status, body) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT DO NOTHING";
const RUN_END_SQL: &str = "UPDATE runs SET status = $2, reason = $3, answer = $4, steps = $5, finished_at = $6 WHERE id = $1";
const NOTIFY_SQL: &str = "SELECT pg_notify($1, $2)";

/// The entries rows of one batch, column by column.
#[derive(Default)]
struct Rows {
    kinds: Vec<String>,
    types: Vec<String>,
    bodies: Vec<String>,
    created: Vec<String>,
    hashes: Vec<Option<String>>,
}

/// Appends `entries` to `run_id` in one transaction (see the module
/// invariants of [`super`]): the fence check, the rows an entry writes
/// beside the log (archive, artifacts, receipts, the run's end), one
/// compare-and-swap of the chain head from where it stood to the batch's
/// last hash, one insert of all entries and one notification, each a
/// statement prepared once per connection.
fn append_in(
    tx: &mut Transaction<'_>,
    prepared: &mut Prepared,
    run_id: &str,
    cached: Option<(Head, String)>,
    fence: Option<(String, i64)>,
    entries: &[LogEntry],
) -> Result<Appended, StoreError> {
    if let Some((owner, epoch)) = &fence {
        let held = prepared
            .query_opt(tx, FENCE_SQL, &[&run_id])?
            .map(|r| (r.get(0), r.get(1), r.get(2)));
        if !lease_holds(held, owner, *epoch) {
            return Err(StoreError::Fenced {
                run: run_id.to_string(),
                epoch: *epoch,
            });
        }
    }
    let (start, session) = match cached {
        Some(h) => h,
        None => read_head(tx, run_id)?.ok_or_else(|| StoreError::UnknownRun(run_id.into()))?,
    };
    let mut head = start.clone();
    let mut rows = Rows::default();
    let mut events = 0;
    for entry in entries {
        if let LogEntry::Archive { item } = entry {
            prepared.execute(
                tx,
                ARCHIVE_SQL,
                &[
                    &run_id,
                    &item.call_id(),
                    &serde_json::to_string(item)?,
                    &now(),
                ],
            )?;
            continue;
        }
        let stored = stored_form(entry, |step, kind, raw| {
            let id: i64 = prepared
                .query_one(
                    tx,
                    ARTIFACT_SQL,
                    &[&run_id, &(step as i64), &kind, &raw, &now()],
                )?
                .get(0);
            Ok(format!("artifact:{id}"))
        })?;
        let body = stored.to_json()?;
        let (kind, name) = entry_type(&stored, &body)?;
        let hash = head
            .prev()
            .map(|prev| chain::link(prev, run_id, &kind, &name, &body));
        match &*stored {
            LogEntry::Item {
                item:
                    TranscriptItem::ToolResult {
                        receipt: Some(r), ..
                    },
            } => {
                prepared.execute(
                    tx,
                    RECEIPT_SQL,
                    &[
                        &run_id,
                        &r.call_id,
                        &r.tool_name,
                        &r.status.as_str(),
                        &r.to_json()?,
                    ],
                )?;
            }
            LogEntry::Event { event } => {
                events += 1;
                if let EventBody::Done {
                    state,
                    reason,
                    answer,
                    steps,
                    ..
                } = &event.body
                {
                    prepared.execute(
                        tx,
                        RUN_END_SQL,
                        &[
                            &run_id,
                            &state.as_str(),
                            &reason.as_str(),
                            answer,
                            &(*steps as i64),
                            &now(),
                        ],
                    )?;
                }
            }
            _ => {}
        }
        rows.kinds.push(kind);
        rows.types.push(name);
        rows.bodies.push(body);
        rows.created.push(now());
        rows.hashes.push(hash.clone());
        head = match hash {
            Some(h) => Head::Stored(h),
            None => Head::Legacy,
        };
    }
    if let Head::Stored(last) = &head {
        if start.stored() != Some(last.as_str()) {
            let moved = prepared.execute(tx, MOVE_HEAD_SQL, &[&run_id, last, &start.stored()])?;
            if moved == 0 {
                return Ok(Appended::HeadMoved);
            }
        }
    }
    if !rows.kinds.is_empty() {
        prepared.execute(
            tx,
            ENTRIES_SQL,
            &[
                &run_id,
                &rows.kinds,
                &rows.types,
                &rows.bodies,
                &rows.created,
                &rows.hashes,
            ],
        )?;
    }
    if events > 0 {
        prepared.execute(
            tx,
            NOTIFY_SQL,
            &[&EVENTS_CHANNEL, &format!("{run_id} {session}")],
        )?;
    }
    Ok(Appended::Done(head, session))
}

fn json_rows<T: serde::de::DeserializeOwned>(rows: Vec<Row>) -> Result<Vec<T>, StoreError> {
    rows.iter()
        .map(|r| serde_json::from_str(r.get::<_, &str>(0)).map_err(StoreError::from))
        .collect()
}

fn put_memory_in(c: &mut impl GenericClient, item: &MemoryItem) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO memory (id, status, provenance, kind, body, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (id) DO UPDATE SET status = excluded.status,
             provenance = excluded.provenance, kind = excluded.kind,
             body = excluded.body, updated_at = excluded.updated_at",
        &[
            &item.id,
            &item.status.as_str(),
            &item.provenance.as_str(),
            &item.kind.as_str(),
            &serde_json::to_string(item)?,
            &stamp(item.created_at),
            &stamp(item.updated_at),
        ],
    )?;
    Ok(())
}

/// Whether an entry writes nothing beside the log (no artifact, receipt,
/// archive row or run end), so `attest_append` can take it.
fn log_only(entry: &LogEntry) -> bool {
    match entry {
        LogEntry::Archive { .. } => false,
        LogEntry::Trace {
            trace: TraceRecord::RawOutput { .. } | TraceRecord::ProtocolViolation { .. },
        } => false,
        LogEntry::Item {
            item: TranscriptItem::ToolResult {
                receipt: Some(_), ..
            },
        } => false,
        LogEntry::Event { event } => !matches!(event.body, EventBody::Done { .. }),
        _ => true,
    }
}

impl PgStore {
    /// One log-only entry of a run whose chain head this handle knows, in
    /// one round trip (`attest_append`, migration 0003): the fence check,
    /// head compare-and-swap, insert and notification in the database.
    /// False when it does not apply or the head had moved (the caller
    /// takes the transaction path, which rereads the head).
    fn append_one_trip(&mut self, run_id: &str, entry: &LogEntry) -> Result<bool, StoreError> {
        if !log_only(entry) {
            return Ok(false);
        }
        let Some((head, session)) = self.heads.get(run_id).cloned() else {
            return Ok(false);
        };
        let body = entry.to_json()?;
        let (kind, name) = entry_type(entry, &body)?;
        let hash = head
            .prev()
            .map(|prev| chain::link(prev, run_id, &kind, &name, &body));
        let prev = head.stored().map(str::to_string);
        let (owner, epoch) = match self.fences.get(run_id) {
            Some((owner, epoch)) => (Some(owner.clone()), *epoch),
            None => (None, 0),
        };
        let notify = matches!(entry, LogEntry::Event { .. }).then(|| format!("{run_id} {session}"));
        let (run, sent_hash) = (run_id.to_string(), hash.clone());
        let code: i32 = self.conn.call_prepared(move |c, prepared| {
            Ok(prepared
                .query_one(
                    c,
                    "SELECT attest_append($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                    &[
                        &run,
                        &owner,
                        &epoch,
                        &prev,
                        &sent_hash,
                        &kind,
                        &name,
                        &body,
                        &now(),
                        &notify,
                    ],
                )?
                .get(0))
        })?;
        match code {
            0 => {
                let head = match hash {
                    Some(h) => Head::Stored(h),
                    None => Head::Legacy,
                };
                self.heads.insert(run_id.to_string(), (head, session));
                Ok(true)
            }
            1 => Err(StoreError::Fenced {
                run: run_id.to_string(),
                epoch,
            }),
            _ => {
                self.heads.remove(run_id);
                Ok(false)
            }
        }
    }

    /// Read-modify-write of one memory item in a transaction.
    fn modify_memory(
        &self,
        id: &str,
        change: impl FnOnce(&mut MemoryItem) + Send + 'static,
    ) -> Result<MemoryItem, StoreError> {
        let id = id.to_string();
        self.conn.call(move |c| {
            let mut tx = c.transaction()?;
            let body: Option<String> = tx
                .query_opt("SELECT body FROM memory WHERE id = $1 FOR UPDATE", &[&id])?
                .map(|r| r.get(0));
            let body = body.ok_or_else(|| StoreError::UnknownMemory(id.clone()))?;
            let mut item: MemoryItem = serde_json::from_str(&body)?;
            change(&mut item);
            item.updated_at = Utc::now();
            put_memory_in(&mut tx, &item)?;
            tx.commit()?;
            Ok(item)
        })
    }

    fn run_query(&self, sql: &'static str, run_id: &str) -> Result<Vec<Row>, StoreError> {
        let run_id = run_id.to_string();
        self.conn.call(move |c| Ok(c.query(sql, &[&run_id])?))
    }
}

impl Store for PgStore {
    fn ensure_session(&mut self, session_id: &str) -> Result<(), StoreError> {
        let id = session_id.to_string();
        self.conn.call(move |c| {
            c.execute(
                "INSERT INTO sessions (id, created_at, updated_at) VALUES ($1, $2, $2)
                 ON CONFLICT (id) DO UPDATE SET updated_at = excluded.updated_at",
                &[&id, &now()],
            )?;
            Ok(())
        })
    }

    fn begin_run(&mut self, run: &NewRun) -> Result<(), StoreError> {
        let run = run.clone();
        self.conn.call(move |c| {
            c.execute(
                "INSERT INTO runs (id, session_id, trace_id, prompt, status, settings, loop_version, prompt_version, pid, started_at)
                 VALUES ($1, $2, $3, $4, 'running', $5, $6, $7, NULL, $8)",
                &[
                    &run.id,
                    &run.session_id,
                    &run.trace_id,
                    &run.prompt,
                    &run.settings.to_string(),
                    &run.loop_version,
                    &run.prompt_version,
                    &now(),
                ],
            )?;
            Ok(())
        })
    }

    fn append(&mut self, run_id: &str, entry: &LogEntry) -> Result<(), StoreError> {
        self.append_all(run_id, std::slice::from_ref(entry))
    }

    fn append_all(&mut self, run_id: &str, entries: &[LogEntry]) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        if let [entry] = entries {
            if self.append_one_trip(run_id, entry)? {
                return Ok(());
            }
        }
        // Twice at most: when another writer moved the head, reread it.
        for _ in 0..2 {
            let cached = self.heads.get(run_id).cloned();
            let fence = self.fences.get(run_id).cloned();
            let (id, batch) = (run_id.to_string(), entries.to_vec());
            let appended = self.conn.call_prepared(move |c, prepared| {
                let mut tx = c.transaction()?;
                let appended = append_in(&mut tx, prepared, &id, cached, fence, &batch)?;
                if matches!(appended, Appended::Done(..)) {
                    tx.commit()?;
                }
                Ok(appended)
            })?;
            match appended {
                Appended::Done(head, session) => {
                    self.heads.insert(run_id.to_string(), (head, session));
                    return Ok(());
                }
                Appended::HeadMoved => {
                    self.heads.remove(run_id);
                }
            }
        }
        Err(StoreError::Corrupt(format!(
            "run {run_id}: its log keeps changing under this process"
        )))
    }

    fn fence(&mut self, run_id: &str, owner: &str, epoch: i64) {
        self.fences
            .insert(run_id.to_string(), (owner.to_string(), epoch));
        // Another worker may have appended since this handle last did.
        self.heads.remove(run_id);
    }

    fn unfence(&mut self, run_id: &str) {
        self.fences.remove(run_id);
        self.heads.remove(run_id);
    }

    fn claim_run(&mut self, run_id: &str, _seen_pid: Option<u32>) -> Result<(), StoreError> {
        // The lease decides who drives a run here; claiming only reopens it.
        let id = run_id.to_string();
        let claimed = self.conn.call(move |c| {
            Ok(c.execute(
                "UPDATE runs SET status = 'running', finished_at = NULL WHERE id = $1 AND status = 'running'",
                &[&id],
            )?)
        })?;
        if claimed == 0 {
            self.run(run_id)?;
            return Err(StoreError::AlreadyClaimed {
                run: run_id.to_string(),
                pid: 0,
            });
        }
        Ok(())
    }

    fn run(&self, id_or_prefix: &str) -> Result<RunRecord, StoreError> {
        let wanted = id_or_prefix.to_string();
        let found = self.conn.call(move |c| {
            if let Some(row) = c.query_opt("SELECT * FROM runs WHERE id = $1", &[&wanted])? {
                return Ok(vec![run_from_row(&row)]);
            }
            let pattern = format!("{}%", wanted.replace(['%', '_', '\\'], ""));
            Ok(
                c.query("SELECT * FROM runs WHERE id LIKE $1 LIMIT 2", &[&pattern])?
                    .iter()
                    .map(run_from_row)
                    .collect::<Vec<_>>(),
            )
        })?;
        match found.len() {
            0 => Err(StoreError::UnknownRun(id_or_prefix.to_string())),
            1 => Ok(found.into_iter().next().expect("one element")),
            _ => Err(StoreError::AmbiguousRun(id_or_prefix.to_string())),
        }
    }

    fn runs(&self, session_id: Option<&str>) -> Result<Vec<RunRecord>, StoreError> {
        let session = session_id.map(str::to_string);
        self.conn.call(move |c| {
            Ok(c.query(
                "SELECT * FROM runs WHERE ($1::TEXT IS NULL OR session_id = $1) ORDER BY started_at DESC, seq DESC",
                &[&session],
            )?
            .iter()
            .map(run_from_row)
            .collect())
        })
    }

    fn sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        self.conn.call(|c| {
            Ok(c.query(
                "SELECT s.id, s.created_at, s.updated_at,
                        (SELECT COUNT(*) FROM runs r WHERE r.session_id = s.id),
                        (SELECT r.status FROM runs r WHERE r.session_id = s.id ORDER BY r.started_at DESC, r.seq DESC LIMIT 1)
                 FROM sessions s ORDER BY s.updated_at DESC",
                &[],
            )?
            .iter()
            .map(|row| SessionRecord {
                id: row.get(0),
                created_at: row.get(1),
                updated_at: row.get(2),
                runs: row.get::<_, i64>(3) as u32,
                last_status: row.get(4),
            })
            .collect())
        })
    }

    fn entries(&self, run_id: &str) -> Result<Vec<LogEntry>, StoreError> {
        json_rows(self.run_query(
            "SELECT body FROM entries WHERE run_id = $1 ORDER BY id",
            run_id,
        )?)
    }

    fn verify_chain(&self, run_id: &str) -> Result<ChainVerdict, StoreError> {
        let id = run_id.to_string();
        let (fields, head, entries) = self.conn.call(move |c| {
            let Some(row) = c.query_opt(
                "SELECT id, session_id, trace_id, prompt, settings, loop_version, prompt_version, chain_head
                 FROM runs WHERE id = $1",
                &[&id],
            )?
            else {
                return Err(StoreError::UnknownRun(id));
            };
            let fields: Vec<String> = (0..7).map(|i| row.get(i)).collect();
            let head: Option<String> = row.get(7);
            let entries: Vec<StoredEntry> = c
                .query(
                    "SELECT id, kind, type, body, hash FROM entries WHERE run_id = $1 ORDER BY id",
                    &[&id],
                )?
                .iter()
                .map(|r| StoredEntry {
                    id: r.get(0),
                    kind: r.get(1),
                    name: r.get(2),
                    body: r.get(3),
                    hash: r.get(4),
                })
                .collect();
            Ok((fields, head, entries))
        })?;
        Ok(chain::verify(&header(&fields), head.as_deref(), &entries))
    }

    fn traces(&self, run_id: &str, records: &[&str]) -> Result<Vec<TraceRecord>, StoreError> {
        let id = run_id.to_string();
        let names: Vec<String> = records.iter().map(|r| r.to_string()).collect();
        let rows = self.conn.call(move |c| {
            Ok(c.query(
                "SELECT body FROM entries WHERE run_id = $1 AND kind = 'trace' AND type = ANY($2)
                 ORDER BY id",
                &[&id, &names],
            )?)
        })?;
        of_kind(run_id, "trace", json_rows(rows)?, trace)
    }

    fn items(&self, run_id: &str) -> Result<Vec<TranscriptItem>, StoreError> {
        let entries = json_rows(self.run_query(
            "SELECT body FROM entries WHERE run_id = $1 AND kind = 'item' ORDER BY id",
            run_id,
        )?)?;
        of_kind(run_id, "item", entries, item)
    }

    fn archived(&self, run_id: &str) -> Result<Vec<TranscriptItem>, StoreError> {
        json_rows(self.run_query(
            "SELECT item FROM archive WHERE run_id = $1 ORDER BY id",
            run_id,
        )?)
    }

    fn artifacts(&self, run_id: &str) -> Result<Vec<Artifact>, StoreError> {
        Ok(self
            .run_query(
                "SELECT id, step, kind, body, created_at FROM artifacts WHERE run_id = $1 ORDER BY id",
                run_id,
            )?
            .iter()
            .map(|row| Artifact {
                id: row.get(0),
                step: row
                    .get::<_, Option<i64>>(1)
                    .and_then(|s| u32::try_from(s).ok()),
                kind: row.get(2),
                body: row.get(3),
                created_at: row.get(4),
            })
            .collect())
    }

    fn put_memory(&mut self, item: &MemoryItem) -> Result<(), StoreError> {
        let item = item.clone();
        self.conn.call(move |c| put_memory_in(c, &item))
    }

    fn memory_items(&self, statuses: &[MemoryStatus]) -> Result<Vec<MemoryItem>, StoreError> {
        let wanted: Vec<String> = statuses.iter().map(|s| s.as_str().to_string()).collect();
        let rows = self.conn.call(move |c| {
            Ok(c.query(
                "SELECT body FROM memory WHERE cardinality($1::TEXT[]) = 0 OR status = ANY($1)
                 ORDER BY created_at, id",
                &[&wanted],
            )?)
        })?;
        json_rows(rows)
    }

    fn memory_item(&self, id_or_prefix: &str) -> Result<MemoryItem, StoreError> {
        let wanted = id_or_prefix.to_string();
        let found: Vec<String> = self.conn.call(move |c| {
            if let Some(row) = c.query_opt("SELECT body FROM memory WHERE id = $1", &[&wanted])? {
                return Ok(vec![row.get(0)]);
            }
            let prefix = wanted.replace(['%', '_', '\\'], "");
            if prefix.is_empty() {
                return Ok(Vec::new());
            }
            Ok(c.query(
                "SELECT body FROM memory WHERE id LIKE $1 LIMIT 2",
                &[&format!("{prefix}%")],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect())
        })?;
        match found.as_slice() {
            [] => Err(StoreError::UnknownMemory(id_or_prefix.to_string())),
            [one] => Ok(serde_json::from_str(one)?),
            _ => Err(StoreError::AmbiguousMemory(id_or_prefix.to_string())),
        }
    }

    fn set_memory_status(
        &mut self,
        id: &str,
        status: MemoryStatus,
    ) -> Result<MemoryItem, StoreError> {
        self.modify_memory(id, move |item| item.status = status)
    }

    fn update_memory_verification(
        &mut self,
        id: &str,
        verified_at: DateTime<Utc>,
        status: MemoryStatus,
    ) -> Result<MemoryItem, StoreError> {
        self.modify_memory(id, move |item| {
            item.verified_at = Some(verified_at);
            item.status = status;
        })
    }

    fn memory_projection(&self) -> Result<Option<String>, StoreError> {
        self.conn.call(|c| {
            Ok(
                c.query_opt("SELECT text FROM memory_projection WHERE id = 1", &[])?
                    .map(|r| r.get(0)),
            )
        })
    }

    fn set_memory_projection(&mut self, text: &str) -> Result<(), StoreError> {
        let text = text.to_string();
        self.conn.call(move |c| {
            c.execute(
                "INSERT INTO memory_projection (id, text, written_at) VALUES (1, $1, $2)
                 ON CONFLICT (id) DO UPDATE SET text = excluded.text, written_at = excluded.written_at",
                &[&text, &now()],
            )?;
            Ok(())
        })
    }
}
