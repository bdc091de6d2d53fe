//! The JSON of request pieces, kept from one request to the next: a long
//! run's requests repeat all but their newest items, so each piece of a
//! body (an OpenAI message, an Anthropic content block) is serialized once
//! and then copied, and a request's cost no longer grows with the escaping
//! and argument parsing of the whole history.
//!
//! A piece is known by the items it is made from, and an item by its
//! allocation: a run's requests share their items ([`ModelRequest::history`]
//! is `Arc`s of the run's own), and an entry holds its items, so their
//! addresses cannot be reused by other items while it exists. The same
//! allocations therefore mean the same (immutable) items, and the same JSON.
//!
//! [`ModelRequest::history`]: crate::ModelRequest::history

use attest_protocol::TranscriptItem;
use serde::Serialize;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::sync::Arc;

/// Kept pieces, by the address of their first item.
#[derive(Debug, Default)]
pub struct Fragments {
    entries: HashMap<usize, Fragment>,
    /// Entries past which the next request prunes (amortized: the bound
    /// doubles when pruning leaves most entries live).
    prune_at: usize,
}

#[derive(Debug)]
struct Fragment {
    items: Vec<Arc<TranscriptItem>>,
    json: Arc<RawValue>,
}

/// What [`Fragments::piece`] gives for one piece of a body.
pub(crate) type KeptJson = Option<Arc<RawValue>>;

/// A body's piece: written now, or copied from a kept one.
#[derive(Serialize)]
#[serde(untagged)]
pub(crate) enum Piece<'a, T> {
    Fresh(T),
    Kept(&'a RawValue),
}

/// Kept pieces past which a request first drops those of items no request
/// can carry again.
const PRUNE_AT: usize = 256;

impl Fragments {
    /// The JSON of the piece made from `items`: the kept one, or else that of
    /// `value`, kept from now on. `None` where it is not kept: items only
    /// the request holds (a state snapshot, a synthetic result, a wrapper's
    /// rewritten history) can never come back, and are written in place.
    pub(crate) fn piece(
        &mut self,
        items: &[Arc<TranscriptItem>],
        value: &impl Serialize,
    ) -> KeptJson {
        if let Some(json) = self.get(items) {
            return Some(Arc::clone(json));
        }
        let first = items.first()?;
        if items.iter().all(|i| Arc::strong_count(i) == 1) {
            return None;
        }
        let json: Arc<RawValue> = serde_json::value::to_raw_value(value).ok()?.into();
        let fragment = Fragment {
            items: items.to_vec(),
            json: Arc::clone(&json),
        };
        self.entries.insert(Arc::as_ptr(first) as usize, fragment);
        Some(json)
    }

    /// The kept JSON of the piece made from exactly `items`.
    fn get(&self, items: &[Arc<TranscriptItem>]) -> Option<&Arc<RawValue>> {
        let kept = self.entries.get(&(Arc::as_ptr(items.first()?) as usize))?;
        let same = kept.items.len() == items.len()
            && kept.items.iter().zip(items).all(|(a, b)| Arc::ptr_eq(a, b));
        same.then_some(&kept.json)
    }

    /// Before a request of `pieces` pieces: past a bound, drop the pieces
    /// whose items only this cache still holds (their run is over, or it
    /// dropped them), so a long-lived provider does not grow without end.
    pub(crate) fn prune(&mut self, pieces: usize) {
        if self.entries.len() > self.prune_at.max(PRUNE_AT + 2 * pieces) {
            self.entries
                .retain(|_, f| f.items.iter().all(|i| Arc::strong_count(i) > 1));
            self.prune_at = 2 * self.entries.len();
        }
    }

    /// Whether the piece made from exactly `items` is kept.
    pub fn is_kept(&self, items: &[Arc<TranscriptItem>]) -> bool {
        self.get(items).is_some()
    }

    /// How many pieces are kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
