-- attest store, schema version 6: approvals outlive the process that
-- waits for them. A run's approver records each request here; a decision
-- (from the API, a signed callback, or the timeout) is written once, and
-- the waiting worker reads it back, so any server sharing the store can
-- decide. `server_grants` holds the tools a session allowed for good.
CREATE TABLE server_approvals (
    call_id      TEXT PRIMARY KEY,
    run_id       TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    tool_name    TEXT NOT NULL,
    request      TEXT NOT NULL,
    owner        TEXT NOT NULL,
    requested_at TEXT NOT NULL,
    decision     TEXT,
    for_session  INTEGER NOT NULL DEFAULT 0,
    decided_at   TEXT
);
CREATE INDEX server_approvals_pending ON server_approvals(decided_at, requested_at);

CREATE TABLE server_grants (
    session_id  TEXT NOT NULL,
    tool_name   TEXT NOT NULL,
    granted_at  TEXT NOT NULL,
    PRIMARY KEY (session_id, tool_name)
);
