-- attest store, schema version 5: what `attest serve` keeps beside the
-- runs. `server_runs` is the run queue: a run is `queued` when submitted,
-- `leased` while a worker drives it (owner, epoch, expiry: a lease that
-- expires is taken over with the next epoch), then `finished`, `failed`
-- (it never started) or `cancelled` (before it started).
CREATE TABLE server_runs (
    run_id          TEXT PRIMARY KEY,
    session_id      TEXT NOT NULL,
    request         TEXT NOT NULL,
    state           TEXT NOT NULL,
    reason          TEXT,
    idempotency_key TEXT UNIQUE,
    lease_owner     TEXT,
    lease_epoch     INTEGER NOT NULL DEFAULT 0,
    lease_expires   TEXT,
    created_at      TEXT NOT NULL
);
CREATE INDEX server_runs_by_state ON server_runs(state, created_at);
CREATE INDEX server_runs_by_session ON server_runs(session_id, created_at);

-- Bearer tokens: only a SHA-256 hash of each is kept.
CREATE TABLE server_tokens (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    hash        TEXT NOT NULL UNIQUE,
    scopes      TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    revoked_at  TEXT
);
