//! The hash chain over each run's log entries (SPEC F14): tamper evidence
//! for what the store cannot prevent.
//!
//! Entry `n` stores `hash_n = sha256(hash_{n-1} ‖ run ‖ kind ‖ type ‖
//! body)`, each field length-prefixed; `hash_0` is a hash of the run's own
//! record (its id, session, trace id, prompt, settings and versions), so
//! changing what `resume` starts from breaks the chain too. The run row
//! keeps the last hash (`chain_head`), so cutting entries off the end is
//! noticed as well. Appending needs only the previous hash, which the
//! store keeps in memory per run: nothing earlier is re-read.
//!
//! Limits: the chain is not keyed. It exposes edits made with a database
//! tool (and forged stores shipped in a repository, whose chains do not
//! add up); someone who recomputes every hash after an edit is not
//! detected. Keeping `.attest/` out of reach of tools is the sandbox's
//! job. Artifacts (raw model outputs, `--raw` only), the archive of
//! compacted items and the receipts index are not in the chain.

use sha2::{Digest, Sha256};

/// What [`crate::Store::verify_chain`] found for a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainVerdict {
    /// Every entry's hash is as recomputed and the head matches.
    Intact { entries: usize },
    /// The run predates the chain (recorded before schema version 4):
    /// nothing can be said about it.
    Unchained { entries: usize },
    /// The first place the chain does not hold.
    Broken(ChainBreak),
}

/// Where and why a run's chain does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainBreak {
    /// The 1-based position of the first bad entry in the run's log
    /// (`entries + 1` when entries are missing from the end).
    pub seq: usize,
    /// The row id of that entry, when there is one.
    pub entry_id: Option<i64>,
    pub reason: String,
}

impl std::fmt::Display for ChainBreak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.entry_id {
            Some(id) => write!(f, "entry {} (row {id}): {}", self.seq, self.reason),
            None => write!(f, "entry {}: {}", self.seq, self.reason),
        }
    }
}

/// The run's record as stored, hashed into the chain's start.
pub(crate) struct RunHeader<'a> {
    pub id: &'a str,
    pub session_id: &'a str,
    pub trace_id: &'a str,
    pub prompt: &'a str,
    pub settings: &'a str,
    pub loop_version: &'a str,
    pub prompt_version: &'a str,
}

fn field(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

/// `hash_0`: binds the chain to its run's record.
pub(crate) fn genesis(run: &RunHeader<'_>) -> String {
    let mut h = Sha256::new();
    field(&mut h, b"attest entry chain v1");
    for part in [
        run.id,
        run.session_id,
        run.trace_id,
        run.prompt,
        run.settings,
        run.loop_version,
        run.prompt_version,
    ] {
        field(&mut h, part.as_bytes());
    }
    hex::encode(h.finalize())
}

/// The hash of one entry's stored columns after `prev`.
pub(crate) fn link(prev: &str, run_id: &str, kind: &str, name: &str, body: &str) -> String {
    let mut h = Sha256::new();
    field(&mut h, prev.as_bytes());
    for part in [run_id, kind, name, body] {
        field(&mut h, part.as_bytes());
    }
    hex::encode(h.finalize())
}

/// One stored entry, as read back for verification.
pub(crate) struct StoredEntry {
    pub id: i64,
    pub kind: String,
    pub name: String,
    pub body: String,
    pub hash: Option<String>,
}

/// Recomputes a run's chain over its stored entries.
pub(crate) fn verify(
    run: &RunHeader<'_>,
    head: Option<&str>,
    entries: &[StoredEntry],
) -> ChainVerdict {
    let Some(head) = head else {
        return match entries.iter().position(|e| e.hash.is_some()) {
            // Nothing appended yet: nothing to doubt.
            None if entries.is_empty() => ChainVerdict::Intact { entries: 0 },
            None => ChainVerdict::Unchained {
                entries: entries.len(),
            },
            Some(i) => ChainVerdict::Broken(ChainBreak {
                seq: i + 1,
                entry_id: Some(entries[i].id),
                reason: "the entry is hashed but the run has no chain head".to_string(),
            }),
        };
    };
    let mut prev = genesis(run);
    for (i, e) in entries.iter().enumerate() {
        let expected = link(&prev, run.id, &e.kind, &e.name, &e.body);
        if e.hash.as_deref() != Some(expected.as_str()) {
            let reason = match (&e.hash, i) {
                (None, _) => "the entry has no hash",
                // The first link also covers the run's record.
                (Some(_), 0) => {
                    "the entry, or the run's record (prompt, settings), does not match its hash"
                }
                _ => "the entry does not match its hash",
            };
            return ChainVerdict::Broken(ChainBreak {
                seq: i + 1,
                entry_id: Some(e.id),
                reason: reason.to_string(),
            });
        }
        prev = expected;
    }
    if prev != head {
        return ChainVerdict::Broken(ChainBreak {
            seq: entries.len() + 1,
            entry_id: None,
            reason: "entries are missing after the last one (the chain head does not match)"
                .to_string(),
        });
    }
    ChainVerdict::Intact {
        entries: entries.len(),
    }
}
