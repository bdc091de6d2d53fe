-- attest store, schema version 8: entries and artifacts number their rows
-- without AUTOINCREMENT. Neither table loses rows (entries are
-- append-only, artifacts are never deleted), so SQLite's own next rowid,
-- the largest plus one, never reuses an id; AUTOINCREMENT only added a
-- read and a write of sqlite_sequence to every insert, and so one more
-- page to every step's commit. The tables are rebuilt with the same
-- columns, rows, ids, index and triggers. A store created since schema 8
-- gets them plain from 0001 and skips this file (`PLAIN_ROWIDS` in
-- src/sqlite.rs).
CREATE TABLE entries_v8 (
    id          INTEGER PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES runs(id),
    kind        TEXT NOT NULL,
    type        TEXT NOT NULL,
    body        TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    hash        TEXT
);
INSERT INTO entries_v8 (id, run_id, kind, type, body, created_at, hash)
    SELECT id, run_id, kind, type, body, created_at, hash FROM entries ORDER BY id;
-- Drops the old table's index and triggers with it.
DROP TABLE entries;
ALTER TABLE entries_v8 RENAME TO entries;
CREATE INDEX entries_by_run ON entries(run_id, id);
CREATE TRIGGER entries_no_update BEFORE UPDATE ON entries
BEGIN SELECT RAISE(ABORT, 'entries are append-only'); END;
CREATE TRIGGER entries_no_delete BEFORE DELETE ON entries
BEGIN SELECT RAISE(ABORT, 'entries are append-only'); END;

CREATE TABLE artifacts_v8 (
    id          INTEGER PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES runs(id),
    step        INTEGER,
    kind        TEXT NOT NULL,
    body        TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
INSERT INTO artifacts_v8 (id, run_id, step, kind, body, created_at)
    SELECT id, run_id, step, kind, body, created_at FROM artifacts ORDER BY id;
DROP TABLE artifacts;
ALTER TABLE artifacts_v8 RENAME TO artifacts;
CREATE INDEX artifacts_by_run ON artifacts(run_id, id);

DELETE FROM sqlite_sequence WHERE name IN ('entries', 'artifacts');
