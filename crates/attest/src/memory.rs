//! Memory around a run: the memory layer of the system prompt before it
//! (re-verified against the workspace first), consolidation after it, the
//! `MEMORY.md` projection, and every decision into the run's trace. The
//! rules live in `attest_core::memory`; this is the store and file side.
//! Memory never stops a run: its failures are reported and skipped.

use crate::error::Error;
use attest_core::context::skills::{SkillCatalog, SkillMeta};
use attest_core::memory::{
    consolidate, detect_edits, memory_layer, render_projection, verify, DecisionRecord,
    RetrievalLimits, RunSummary, PROJECTION_FILE, PROJECTION_HEADER,
};
use attest_core::tool::Workspace;
use attest_core::Redactor;
use attest_core::{ContextLayer, RunOutcome};
use attest_protocol::{LogEntry, MemoryStatus};
use attest_store::Store;
use chrono::Utc;
use std::path::Path;

/// Name of the memory layer among the context layers (SPEC D1).
pub const LAYER_NAME: &str = "memory";

fn skills(root: &Path) -> Vec<SkillMeta> {
    // Problems were already reported when the catalog was loaded for the
    // prompt; only the usable skills matter here.
    SkillCatalog::load(root).skills
}

/// Re-checks active and stale items against their sources, writing status
/// changes back. Returns the decisions for the changed items.
pub fn reverify(store: &mut dyn Store, root: &Path) -> Result<Vec<DecisionRecord>, Error> {
    let skills = skills(root);
    let mut decisions = Vec::new();
    for item in store.memory_items(&[MemoryStatus::Active, MemoryStatus::Stale])? {
        if let Some(v) = verify(&item, root, &skills) {
            if v.status != item.status {
                let updated = store.update_memory_verification(&item.id, Utc::now(), v.status)?;
                decisions.push(DecisionRecord::new(&updated, v.decision, v.reason));
            }
        }
    }
    Ok(decisions)
}

/// The memory layer for a run about `prompt`, and the decisions made
/// building it (to be traced once the run's log exists).
pub fn layer_for(
    store: &mut dyn Store,
    root: &Path,
    prompt: &str,
) -> Result<(Option<ContextLayer>, Vec<DecisionRecord>), Error> {
    // A file that changed since the last run is stale before it can be
    // injected, whether or not anyone ran `attest memory verify`.
    let mut decisions = reverify(store, root)?;
    let items = store.memory_items(&[MemoryStatus::Active, MemoryStatus::Stale])?;
    let layer = memory_layer(
        &items,
        prompt,
        &skills(root),
        Utc::now(),
        &RetrievalLimits::default(),
    );
    decisions.extend(layer.decisions);
    let layer = (!layer.text.is_empty()).then(|| ContextLayer {
        name: LAYER_NAME.to_string(),
        text: layer.text,
        truncated: false,
    });
    Ok((layer, decisions))
}

/// Consolidates a finished run into memory, traces every decision (those
/// made before the run first) and refreshes `MEMORY.md`.
pub fn after_run(
    store: &mut dyn Store,
    root: &Path,
    outcome: &RunOutcome,
    redactor: &Redactor,
    earlier: Vec<DecisionRecord>,
) -> Result<Option<Projection>, Error> {
    let items = store.items(&outcome.run_id)?;
    let existing = store.memory_items(&[])?;
    let result = consolidate(
        &RunSummary {
            run_id: &outcome.run_id,
            items: &items,
            state: outcome.state,
            answer: outcome.answer.as_deref(),
        },
        &existing,
        &skills(root),
        redactor,
        Utc::now(),
    );
    for item in &result.upserts {
        store.put_memory(item)?;
    }
    for decision in earlier.iter().chain(&result.decisions) {
        store.append(
            &outcome.run_id,
            &LogEntry::Trace {
                trace: decision.to_trace(),
            },
        )?;
    }
    if result.upserts.is_empty() {
        return Ok(None);
    }
    Ok(Some(refresh_projection(store, root)?))
}

/// What happened to `MEMORY.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Projection {
    Written,
    Unchanged,
    /// Nothing is active and there is no file: none is created.
    NotNeeded,
    /// The file has hand edits not yet confirmed; it is left as is.
    PendingEdits(usize),
    /// A `MEMORY.md` attest did not write; it is left as is.
    Foreign,
}

impl Projection {
    /// What a person should be told, when anything.
    pub fn message(&self) -> Option<String> {
        match self {
            Projection::Foreign => Some(format!("{PROJECTION_FILE} was not written by attest; left as is (import it with `attest memory import {PROJECTION_FILE}`)")),
            Projection::PendingEdits(n) => Some(format!("{PROJECTION_FILE} has {n} hand edit(s); review and import them with `attest memory sync`")),
            _ => None,
        }
    }
}

/// Regenerates `MEMORY.md` from the active items, unless that would lose
/// a hand edit or overwrite a file that is not attest's.
pub fn refresh_projection(store: &mut dyn Store, root: &Path) -> Result<Projection, Error> {
    let io = |what: &str, e: &dyn std::fmt::Display| {
        Error::Memory(format!("cannot {what} {PROJECTION_FILE}: {e}"))
    };
    let ws = Workspace::new(root).map_err(|e| io("write", &e))?;
    let path = ws
        .resolve_for_write(PROJECTION_FILE)
        .map_err(|e| io("write", &e))?;
    let current = match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io("read", &e)),
    };
    let last = store.memory_projection()?;
    let active = store.memory_items(&[MemoryStatus::Active])?;
    let text = render_projection(&active);
    match (&current, &last) {
        (Some(cur), _) if !cur.starts_with(PROJECTION_HEADER) => {
            return Ok(Projection::Foreign);
        }
        (Some(cur), Some(last)) => {
            let edits = detect_edits(cur, last);
            if !edits.is_empty() {
                let n = edits.added.len() + edits.removed.len();
                return Ok(Projection::PendingEdits(n));
            }
        }
        (None, _) if active.is_empty() => return Ok(Projection::NotNeeded),
        _ => {}
    }
    if current.as_deref() == Some(text.as_str()) && last.as_deref() == Some(text.as_str()) {
        return Ok(Projection::Unchanged);
    }
    std::fs::write(&path, &text).map_err(|e| io("write", &e))?;
    store.set_memory_projection(&text)?;
    Ok(Projection::Written)
}
