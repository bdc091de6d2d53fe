-- attest store, schema version 2: the archive of compacted transcript items.
CREATE TABLE archive (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      TEXT NOT NULL REFERENCES runs(id),
    call_id     TEXT,
    item        TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX archive_by_run ON archive(run_id, id);
