-- attest store, schema version 4: the entries of each run form a hash
-- chain (SPEC F14). `entries.hash` is sha256 over the previous entry's
-- hash and this entry's stored columns; the first entry's "previous" is a
-- hash of the run's own record (id, session, prompt, settings, versions).
-- `runs.chain_head` is the hash of the run's last entry, so entries cut
-- off the end are noticed too.
--
-- Runs recorded before this version have no hashes (NULL): they are
-- reported as unchained, never as verified. Hashing them now would only
-- bless whatever the file holds today.
ALTER TABLE entries ADD COLUMN hash TEXT;
ALTER TABLE runs ADD COLUMN chain_head TEXT;
