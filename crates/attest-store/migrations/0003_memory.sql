-- attest store, schema version 3: durable memory with provenance (SPEC G1).
-- `body` holds the whole item as JSON; the columns beside it exist for
-- filtering and ordering. Content is redacted before it gets here.
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

-- The last MEMORY.md projection written, to tell hand edits from our own
-- output. One row.
CREATE TABLE memory_projection (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    text        TEXT NOT NULL,
    written_at  TEXT NOT NULL
);
