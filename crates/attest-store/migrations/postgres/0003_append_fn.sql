-- attest store on PostgreSQL, schema version 3: one log entry appended in
-- one round trip. The fence check, the chain-head compare-and-swap, the
-- insert and the event notification of `postgres/runs.rs` run inside the
-- database; the caller sends the entry with its hash. Returns 0 when the
-- entry was appended, 1 when the lease fence refused it (nothing
-- written), 2 when the run's chain head had moved (nothing written: the
-- caller rereads the head). Entries that write more than the log (raw
-- outputs, receipts, a run's end) take the transaction path instead.
CREATE FUNCTION attest_append(
    p_run TEXT, p_owner TEXT, p_epoch BIGINT, p_prev TEXT, p_hash TEXT,
    p_kind TEXT, p_type TEXT, p_body TEXT, p_created TEXT, p_notify TEXT
) RETURNS INTEGER LANGUAGE plpgsql AS $$
DECLARE
    held_owner TEXT;
    held_epoch BIGINT;
    held_state TEXT;
    moved INTEGER;
BEGIN
    IF p_owner IS NOT NULL THEN
        SELECT lease_owner, lease_epoch, state INTO held_owner, held_epoch, held_state
        FROM server_runs WHERE run_id = p_run FOR SHARE;
        IF NOT FOUND OR held_owner IS DISTINCT FROM p_owner
           OR held_epoch <> p_epoch OR held_state <> 'leased' THEN
            RETURN 1;
        END IF;
    END IF;
    IF p_hash IS NOT NULL THEN
        UPDATE runs SET chain_head = p_hash
        WHERE id = p_run AND chain_head IS NOT DISTINCT FROM p_prev;
        GET DIAGNOSTICS moved = ROW_COUNT;
        IF moved = 0 THEN
            RETURN 2;
        END IF;
    END IF;
    INSERT INTO entries (run_id, kind, type, body, created_at, hash)
    VALUES (p_run, p_kind, p_type, p_body, p_created, p_hash);
    IF p_notify IS NOT NULL THEN
        PERFORM pg_notify('attest_events', p_notify);
    END IF;
    RETURN 0;
END $$;
