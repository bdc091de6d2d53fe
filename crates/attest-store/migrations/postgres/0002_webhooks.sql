-- attest store on PostgreSQL, schema version 2: the delivery keys of
-- signed webhook callbacks already accepted (`adapter:id`), as SQLite's
-- 0007_webhooks.sql; the primary key makes a replay lose the race on any
-- server.
CREATE TABLE webhook_deliveries (
    key      TEXT PRIMARY KEY,
    seen_at  TEXT NOT NULL
);
