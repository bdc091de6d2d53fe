-- attest store, schema version 1.
CREATE TABLE sessions (
    id          TEXT PRIMARY KEY,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);

CREATE TABLE runs (
    id              TEXT PRIMARY KEY,
    session_id      TEXT NOT NULL REFERENCES sessions(id),
    trace_id        TEXT NOT NULL,
    prompt          TEXT NOT NULL,
    -- running, or a terminal state
    status          TEXT NOT NULL,
    reason          TEXT,
    answer          TEXT,
    steps           INTEGER NOT NULL DEFAULT 0,
    -- JSON settings needed to resume (never secrets)
    settings        TEXT NOT NULL,
    loop_version    TEXT NOT NULL,
    prompt_version  TEXT NOT NULL,
    pid             INTEGER,
    started_at      TEXT NOT NULL,
    finished_at     TEXT
);
CREATE INDEX runs_by_session ON runs(session_id, started_at);

-- The append-only log: transcript items, events and trace records in order.
-- Until schema 8 this and `artifacts` were AUTOINCREMENT; 0008 rebuilds
-- the tables of stores created before, and a new store skips it.
CREATE TABLE entries (
    id          INTEGER PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES runs(id),
    kind        TEXT NOT NULL,
    type        TEXT NOT NULL,
    body        TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX entries_by_run ON entries(run_id, id);
CREATE TRIGGER entries_no_update BEFORE UPDATE ON entries
BEGIN SELECT RAISE(ABORT, 'entries are append-only'); END;
CREATE TRIGGER entries_no_delete BEFORE DELETE ON entries
BEGIN SELECT RAISE(ABORT, 'entries are append-only'); END;

CREATE TABLE receipts (
    run_id      TEXT NOT NULL REFERENCES runs(id),
    call_id     TEXT NOT NULL,
    tool_name   TEXT NOT NULL,
    status      TEXT NOT NULL,
    body        TEXT NOT NULL,
    PRIMARY KEY (run_id, call_id)
);

-- Raw model outputs, kept for audit only: nothing reads them into a prompt.
CREATE TABLE artifacts (
    id          INTEGER PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES runs(id),
    step        INTEGER,
    kind        TEXT NOT NULL,
    body        TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX artifacts_by_run ON artifacts(run_id, id);
