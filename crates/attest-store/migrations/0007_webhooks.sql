-- attest store, schema version 7: the delivery ids of signed webhook
-- callbacks already accepted (`adapter:id`), so a replayed callback is
-- refused also by another server sharing the store.
CREATE TABLE webhook_deliveries (
    key      TEXT PRIMARY KEY,
    seen_at  TEXT NOT NULL
);
