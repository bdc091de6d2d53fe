-- attest store on PostgreSQL, schema version 1: the SQLite schema
-- (versions 1-5) in one step, plus what several servers sharing one
-- database need. Bodies are TEXT, never JSONB: the hash chain is over the
-- exact text stored, which JSONB would re-format. Run timestamps are
-- RFC 3339 text as in SQLite; lease expiries are the database's own
-- clock (timestamptz), so servers with skewed clocks agree on them.
CREATE TABLE sessions (
    id          TEXT PRIMARY KEY,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);

CREATE TABLE runs (
    seq             BIGSERIAL UNIQUE,
    id              TEXT PRIMARY KEY,
    session_id      TEXT NOT NULL REFERENCES sessions(id),
    trace_id        TEXT NOT NULL,
    prompt          TEXT NOT NULL,
    status          TEXT NOT NULL,
    reason          TEXT,
    answer          TEXT,
    steps           BIGINT NOT NULL DEFAULT 0,
    settings        TEXT NOT NULL,
    loop_version    TEXT NOT NULL,
    prompt_version  TEXT NOT NULL,
    -- Always NULL here: on several servers a run's owner is its lease.
    pid             BIGINT,
    started_at      TEXT NOT NULL,
    finished_at     TEXT,
    chain_head      TEXT
);
CREATE INDEX runs_by_session ON runs(session_id, started_at);

CREATE TABLE entries (
    id          BIGSERIAL PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES runs(id),
    kind        TEXT NOT NULL,
    type        TEXT NOT NULL,
    body        TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    hash        TEXT
);
CREATE INDEX entries_by_run ON entries(run_id, id);

CREATE FUNCTION attest_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'entries are append-only';
END $$;
CREATE TRIGGER entries_no_update BEFORE UPDATE OR DELETE ON entries
    FOR EACH ROW EXECUTE FUNCTION attest_append_only();

CREATE TABLE receipts (
    run_id      TEXT NOT NULL REFERENCES runs(id),
    call_id     TEXT NOT NULL,
    tool_name   TEXT NOT NULL,
    status      TEXT NOT NULL,
    body        TEXT NOT NULL,
    PRIMARY KEY (run_id, call_id)
);

CREATE TABLE artifacts (
    id          BIGSERIAL PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES runs(id),
    step        BIGINT,
    kind        TEXT NOT NULL,
    body        TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX artifacts_by_run ON artifacts(run_id, id);

CREATE TABLE archive (
    id          BIGSERIAL PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES runs(id),
    call_id     TEXT,
    item        TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX archive_by_run ON archive(run_id, id);

CREATE TABLE memory (
    id          TEXT PRIMARY KEY,
    status      TEXT NOT NULL,
    provenance  TEXT NOT NULL,
    kind        TEXT NOT NULL,
    body        TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
CREATE INDEX memory_by_status ON memory(status, created_at);

CREATE TABLE memory_projection (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    text        TEXT NOT NULL,
    written_at  TEXT NOT NULL
);

-- The run queue (see the SQLite 0005 migration).
CREATE TABLE server_runs (
    seq             BIGSERIAL UNIQUE,
    run_id          TEXT PRIMARY KEY,
    session_id      TEXT NOT NULL,
    request         TEXT NOT NULL,
    state           TEXT NOT NULL,
    reason          TEXT,
    idempotency_key TEXT UNIQUE,
    lease_owner     TEXT,
    lease_epoch     BIGINT NOT NULL DEFAULT 0,
    lease_expires   TIMESTAMPTZ,
    created_at      TEXT NOT NULL
);
CREATE INDEX server_runs_by_state ON server_runs(state, created_at);
CREATE INDEX server_runs_by_session ON server_runs(session_id, created_at);

CREATE TABLE server_tokens (
    seq         BIGSERIAL UNIQUE,
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    hash        TEXT NOT NULL UNIQUE,
    scopes      TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    revoked_at  TEXT
);

-- Approvals waiting on any server, and their decisions (see the SQLite
-- 0006 migration). A decision is written once.
CREATE TABLE server_approvals (
    seq          BIGSERIAL UNIQUE,
    call_id      TEXT PRIMARY KEY,
    run_id       TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    tool_name    TEXT NOT NULL,
    request      TEXT NOT NULL,
    owner        TEXT NOT NULL,
    requested_at TEXT NOT NULL,
    decision     TEXT,
    for_session  BOOLEAN NOT NULL DEFAULT FALSE,
    decided_at   TEXT
);
CREATE INDEX server_approvals_pending ON server_approvals(decided_at, seq);

CREATE TABLE server_grants (
    session_id  TEXT NOT NULL,
    tool_name   TEXT NOT NULL,
    granted_at  TEXT NOT NULL,
    PRIMARY KEY (session_id, tool_name)
);

-- Ids of inbound callbacks seen, so a replayed one is refused.
CREATE TABLE server_deliveries (
    key         TEXT PRIMARY KEY,
    seen_at     TEXT NOT NULL
);
