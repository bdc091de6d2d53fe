//! The `memory` and `memory_projection` tables behind the [`Store`](crate::Store)
//! memory methods. Plain storage: which items may be active is decided by
//! `attest_core::memory`, never here.

use crate::sqlite::{now, stamp};
use crate::StoreError;
use attest_protocol::{MemoryItem, MemoryStatus};
use chrono::Utc;
use rusqlite::{params, Connection, OptionalExtension};

fn decode(body: &str) -> Result<MemoryItem, StoreError> {
    Ok(serde_json::from_str(body)?)
}

pub(crate) fn put(conn: &Connection, item: &MemoryItem) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO memory (id, status, provenance, kind, body, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT(id) DO UPDATE SET status = excluded.status,
             provenance = excluded.provenance, kind = excluded.kind,
             body = excluded.body, updated_at = excluded.updated_at",
        params![
            item.id,
            item.status.as_str(),
            item.provenance.as_str(),
            item.kind.as_str(),
            serde_json::to_string(item)?,
            stamp(item.created_at),
            stamp(item.updated_at),
        ],
    )?;
    Ok(())
}

pub(crate) fn list(
    conn: &Connection,
    statuses: &[MemoryStatus],
) -> Result<Vec<MemoryItem>, StoreError> {
    let mut stmt = conn.prepare("SELECT status, body FROM memory ORDER BY created_at, id")?;
    let rows: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    rows.into_iter()
        .filter(|(status, _)| {
            statuses.is_empty() || statuses.iter().any(|s| s.as_str() == status.as_str())
        })
        .map(|(_, body)| decode(&body))
        .collect()
}

pub(crate) fn get(conn: &Connection, id_or_prefix: &str) -> Result<MemoryItem, StoreError> {
    let exact: Option<String> = conn
        .query_row(
            "SELECT body FROM memory WHERE id = ?1",
            [id_or_prefix],
            |r| r.get(0),
        )
        .optional()?;
    if let Some(body) = exact {
        return decode(&body);
    }
    let prefix = id_or_prefix.replace(['%', '_'], "");
    if prefix.is_empty() {
        return Err(StoreError::UnknownMemory(id_or_prefix.to_string()));
    }
    let mut stmt = conn.prepare("SELECT body FROM memory WHERE id LIKE ?1 LIMIT 2")?;
    let found: Vec<String> = stmt
        .query_map([format!("{prefix}%")], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    match found.as_slice() {
        [] => Err(StoreError::UnknownMemory(id_or_prefix.to_string())),
        [one] => decode(one),
        _ => Err(StoreError::AmbiguousMemory(id_or_prefix.to_string())),
    }
}

/// Reads, changes and writes one item in a transaction, so a concurrent
/// writer cannot interleave between the read and the write.
pub(crate) fn modify(
    conn: &Connection,
    id: &str,
    change: impl FnOnce(&mut MemoryItem),
) -> Result<MemoryItem, StoreError> {
    let tx = crate::sqlite::write_tx(conn)?;
    let body: Option<String> = tx
        .query_row("SELECT body FROM memory WHERE id = ?1", [id], |r| r.get(0))
        .optional()?;
    let mut item = decode(&body.ok_or_else(|| StoreError::UnknownMemory(id.to_string()))?)?;
    change(&mut item);
    item.updated_at = Utc::now();
    put(&tx, &item)?;
    tx.commit()?;
    Ok(item)
}

pub(crate) fn projection(conn: &Connection) -> Result<Option<String>, StoreError> {
    Ok(conn
        .query_row("SELECT text FROM memory_projection WHERE id = 1", [], |r| {
            r.get(0)
        })
        .optional()?)
}

pub(crate) fn set_projection(conn: &Connection, text: &str) -> Result<(), StoreError> {
    conn.execute(
        "INSERT INTO memory_projection (id, text, written_at) VALUES (1, ?1, ?2)
         ON CONFLICT(id) DO UPDATE SET text = excluded.text, written_at = excluded.written_at",
        params![text, now()],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::{SqliteStore, Store, StoreError, SCHEMA_VERSION};
    use attest_protocol::{
        ConfidenceLevel, ConflictPolicy, MemoryItem, MemoryKind, MemoryProvenance, MemorySourceRef,
        MemoryStatus,
    };
    use chrono::{Duration, Utc};

    fn item(id: &str, status: MemoryStatus, age_days: i64) -> MemoryItem {
        let t = Utc::now() - Duration::days(age_days);
        MemoryItem {
            id: id.into(),
            content: format!("fact {id}"),
            kind: MemoryKind::ProjectFact,
            provenance: MemoryProvenance::ToolReceipt,
            source_ref: MemorySourceRef {
                path: Some("config.toml".into()),
                sha256: Some("ab".repeat(32)),
                ..Default::default()
            },
            verified_at: None,
            expires_at: None,
            confidence: ConfidenceLevel::High,
            conflict_policy: ConflictPolicy::DeferToSource,
            status,
            created_at: t,
            updated_at: t,
        }
    }

    #[test]
    fn put_list_get_and_filter_by_status() {
        let mut store = SqliteStore::open_in_memory().unwrap();
        store
            .put_memory(&item("mem-b1", MemoryStatus::Active, 1))
            .unwrap();
        store
            .put_memory(&item("mem-a2", MemoryStatus::Candidate, 2))
            .unwrap();
        store
            .put_memory(&item("mem-a3", MemoryStatus::Retracted, 0))
            .unwrap();
        let all = store.memory_items(&[]).unwrap();
        let ids: Vec<&str> = all.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, ["mem-a2", "mem-b1", "mem-a3"], "oldest first");
        let active = store.memory_items(&[MemoryStatus::Active]).unwrap();
        assert_eq!(active.len(), 1);
        assert_eq!(active[0], item_like(&all, "mem-b1"));
        let two = store
            .memory_items(&[MemoryStatus::Active, MemoryStatus::Candidate])
            .unwrap();
        assert_eq!(two.len(), 2);

        assert_eq!(store.memory_item("mem-b").unwrap().id, "mem-b1");
        assert!(matches!(
            store.memory_item("mem-a"),
            Err(StoreError::AmbiguousMemory(_))
        ));
        for missing in ["mem-z", "", "%", "_"] {
            assert!(
                matches!(
                    store.memory_item(missing),
                    Err(StoreError::UnknownMemory(_))
                ),
                "{missing:?}"
            );
        }
    }

    fn item_like(all: &[MemoryItem], id: &str) -> MemoryItem {
        all.iter().find(|i| i.id == id).unwrap().clone()
    }

    #[test]
    fn put_replaces_by_id_and_status_changes_touch_updated_at() {
        let mut store = SqliteStore::open_in_memory().unwrap();
        let mut it = item("mem-1", MemoryStatus::Candidate, 3);
        store.put_memory(&it).unwrap();
        it.content = "changed".into();
        store.put_memory(&it).unwrap();
        assert_eq!(store.memory_items(&[]).unwrap().len(), 1);
        assert_eq!(store.memory_item("mem-1").unwrap().content, "changed");

        let before = store.memory_item("mem-1").unwrap().updated_at;
        let after = store
            .set_memory_status("mem-1", MemoryStatus::Active)
            .unwrap();
        assert_eq!(after.status, MemoryStatus::Active);
        assert!(after.updated_at > before);
        assert_eq!(store.memory_item("mem-1").unwrap(), after);
        assert!(matches!(
            store.set_memory_status("nope", MemoryStatus::Active),
            Err(StoreError::UnknownMemory(_))
        ));

        let when = Utc::now();
        let v = store
            .update_memory_verification("mem-1", when, MemoryStatus::Stale)
            .unwrap();
        assert_eq!(v.status, MemoryStatus::Stale);
        assert_eq!(v.verified_at, Some(when));
        assert_eq!(
            v.source_ref.sha256,
            Some("ab".repeat(32)),
            "the recorded hash is never rewritten"
        );
    }

    #[test]
    fn projection_is_one_row() {
        let mut store = SqliteStore::open_in_memory().unwrap();
        assert_eq!(store.memory_projection().unwrap(), None);
        store.set_memory_projection("one").unwrap();
        store.set_memory_projection("two").unwrap();
        assert_eq!(store.memory_projection().unwrap().as_deref(), Some("two"));
    }

    #[test]
    fn a_version_2_store_migrates_and_keeps_its_runs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("attest.db");
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(include_str!("../migrations/0001_init.sql"))
                .unwrap();
            conn.execute_batch(include_str!("../migrations/0002_archive.sql"))
                .unwrap();
            conn.pragma_update(None, "user_version", 2).unwrap();
            conn.execute(
                "INSERT INTO sessions (id, created_at, updated_at) VALUES ('s', 'a', 'a')",
                [],
            )
            .unwrap();
        }
        let mut store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.sessions().unwrap().len(), 1);
        store
            .put_memory(&item("mem-1", MemoryStatus::Active, 0))
            .unwrap();
        drop(store);
        let conn = rusqlite::Connection::open(&path).unwrap();
        let v: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
        assert_eq!(SCHEMA_VERSION, 8);
    }
}
