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
//! Copying every piece still costs a look-up per piece, so a run's leading
//! messages are also kept whole (`KeptPrefix`), and their pieces dropped:
//! a request that starts with their items builds only the messages after
//! them, and the body ([`KeptBody`]) holds the kept messages by reference
//! instead of copying them: a long run's body is hundreds of kilobytes,
//! and copying it every step grew the step's cost (and evicted the rest of
//! the step's data from the CPU's caches).
//!
//! [`ModelRequest::history`]: crate::ModelRequest::history

use attest_protocol::{ToolSpec, TranscriptItem};
use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};

/// Kept pieces, by the address of their first item.
#[derive(Debug, Default)]
pub struct Fragments {
    entries: HashMap<usize, Fragment>,
    /// Entries past which the next request prunes (amortized: the bound
    /// doubles when pruning leaves most entries live).
    prune_at: usize,
    /// Kept leading messages, by the address of the history's first item
    /// (one per run whose requests come here).
    prefixes: HashMap<usize, KeptPrefix>,
    prefix_prune_at: usize,
    /// Kept tool lists, by the list's allocation (see [`Fragments::tools`]).
    tools: Vec<KeptTools>,
}

/// A tool list's JSON and the list it is made from, held so that its
/// address names these specs for as long as the JSON is kept.
#[derive(Debug)]
struct KeptTools {
    specs: Arc<[ToolSpec]>,
    /// Which of a wire's forms of the list (Anthropic's marks the last tool
    /// as a cache breakpoint where there is no system prompt).
    form: u8,
    json: Arc<RawValue>,
}

/// Kept tool lists past which the lists only this cache holds are dropped
/// (a run holds its list while it sends requests).
const TOOL_LISTS: usize = 8;

/// The JSON of the messages a run's requests begin with, and what it is
/// made from. Weak references keep the items' allocations, so their
/// addresses cannot be taken by other items, without keeping a finished
/// run's items alive.
#[derive(Debug, Default)]
pub(crate) struct KeptPrefix {
    /// The items the messages are made from, then the item that begins the
    /// message after them: messages end where the next one begins.
    items: Vec<Weak<TranscriptItem>>,
    /// The messages' JSON in runs of comma-separated messages, oldest
    /// first, each run more than twice the length of the next: a new run
    /// swallows the runs before it that are not (like a binary counter's
    /// carry), so there are O(log n) runs, bodies share them, and a byte is
    /// copied again only when its run grows by half.
    runs: Vec<Bytes>,
    /// The tool call ids among the items.
    call_ids: HashSet<String>,
}

impl KeptPrefix {
    /// How many leading items of a history the messages are made from.
    pub(crate) fn covers(&self) -> usize {
        self.items.len().saturating_sub(1)
    }

    /// Whether the messages can go in at byte `at` of `written`: where a
    /// message begins (or there are none).
    pub(crate) fn fits_at(&self, written: &str, at: usize) -> bool {
        self.runs.is_empty() || written.as_bytes().get(at) == Some(&b'{')
    }

    /// The messages' JSON as the runs bodies share.
    pub(crate) fn runs(&self) -> Vec<Bytes> {
        self.runs.clone()
    }

    /// Appends messages' JSON (comma-separated) as the newest run.
    fn push_run(&mut self, json: &str) {
        let mut run = Bytes::copy_from_slice(json.as_bytes());
        while let Some(last) = self.runs.last() {
            if last.len() > 2 * run.len() {
                break;
            }
            let mut joined = Vec::with_capacity(last.len() + 1 + run.len());
            joined.extend_from_slice(last);
            joined.push(b',');
            joined.extend_from_slice(&run);
            self.runs.pop();
            run = Bytes::from(joined);
        }
        self.runs.push(run);
    }

    /// Whether `call_id` is the id of a call among the prefix's items.
    pub(crate) fn has_call(&self, call_id: &str) -> bool {
        self.call_ids.contains(call_id)
    }

    /// Whether `history` begins with the prefix's items and the item after
    /// them (the same allocations: the same items).
    fn begins(&self, history: &[Arc<TranscriptItem>]) -> bool {
        self.items.len() <= history.len()
            && self
                .items
                .iter()
                .zip(history)
                .all(|(kept, item)| std::ptr::eq(kept.as_ptr(), Arc::as_ptr(item)))
    }
}

/// A request body in pieces: the kept messages are shared, not copied
/// (see the module documentation). Sent as one body of a known length
/// (an [`http_body::Body`] whose frames are the pieces).
#[derive(Debug, Clone, Default)]
pub struct KeptBody {
    /// In order; a frame once sent is left empty.
    parts: Vec<Bytes>,
    /// How many parts were sent.
    sent: usize,
}

impl KeptBody {
    /// `written` with the kept messages `runs` (see [`KeptPrefix::runs`])
    /// and a comma each inserted at byte `at`, where the messages after
    /// them begin ([`KeptPrefix::fits_at`]).
    pub(crate) fn spliced(written: String, at: usize, runs: Vec<Bytes>) -> KeptBody {
        let written = Bytes::from(written);
        let mut parts = Vec::with_capacity(2 * runs.len() + 2);
        parts.push(written.slice(..at));
        for run in runs {
            parts.push(run);
            parts.push(Bytes::from_static(b","));
        }
        parts.push(written.slice(at..));
        KeptBody { parts, sent: 0 }
    }

    /// Bytes in all.
    pub fn len(&self) -> usize {
        self.parts.iter().map(Bytes::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pieces, in order.
    pub fn into_parts(self) -> Vec<Bytes> {
        self.parts
    }

    /// The whole body as one string (tests, logs).
    pub fn to_json(&self) -> String {
        let bytes: Vec<u8> = self.parts.concat();
        String::from_utf8(bytes).unwrap_or_default()
    }
}

impl From<String> for KeptBody {
    fn from(body: String) -> Self {
        KeptBody {
            parts: vec![Bytes::from(body)],
            sent: 0,
        }
    }
}

impl http_body::Body for KeptBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let at = self.sent;
        let Some(part) = self.parts.get_mut(at).map(std::mem::take) else {
            return std::task::Poll::Ready(None);
        };
        self.sent += 1;
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(part))))
    }

    fn is_end_stream(&self) -> bool {
        self.sent >= self.parts.len()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.len() as u64)
    }
}

/// Where a body's messages begin: `max_tokens`, a number, is the only
/// field before them on both wires.
pub(crate) fn messages_start(body: &str) -> Option<usize> {
    const MESSAGES: &str = "\"messages\":[";
    Some(body.find(MESSAGES)? + MESSAGES.len())
}

/// Bytes of the first `count` elements of a JSON array (`json` starts at
/// the first one), not counting the comma after them; `None` where the
/// array has fewer.
pub(crate) fn message_ends(json: &str, count: usize) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped, mut seen) = (0usize, false, false, 0);
    for (i, b) in json.bytes().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            // The array's own end: fewer elements than asked for.
            b'}' | b']' if depth == 0 => return None,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    seen += 1;
                    if seen == count {
                        return Some(i + 1);
                    }
                }
            }
            _ => {}
        }
    }
    None
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

    /// The JSON of the tool list `specs` in its wire form `form`, written by
    /// `write` the first time that list (the same allocation: a run's
    /// requests share it while their tools stay the same) comes in that
    /// form. The schemas are a fixed part of every body; written once, a
    /// step no longer escapes them again. `None` for no tools (a body then
    /// has no list) and where `write` fails.
    pub(crate) fn tools<T: Serialize>(
        &mut self,
        specs: &Arc<[ToolSpec]>,
        form: u8,
        write: impl FnOnce() -> T,
    ) -> Option<Arc<RawValue>> {
        if specs.is_empty() {
            return None;
        }
        let same = |k: &KeptTools| Arc::ptr_eq(&k.specs, specs) && k.form == form;
        if let Some(kept) = self.tools.iter().find(|k| same(k)) {
            return Some(Arc::clone(&kept.json));
        }
        let json: Arc<RawValue> = serde_json::value::to_raw_value(&write()).ok()?.into();
        if self.tools.len() >= TOOL_LISTS {
            self.tools.retain(|k| Arc::strong_count(&k.specs) > 1);
            if self.tools.len() >= TOOL_LISTS {
                self.tools.remove(0);
            }
        }
        self.tools.push(KeptTools {
            specs: Arc::clone(specs),
            form,
            json: Arc::clone(&json),
        });
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

    /// Moves `prefix` on to `history[..cut]`, which begins with its items,
    /// taking the JSON of the messages it grows by from `written`, the
    /// request just written without the prefix: the prefix goes in at byte
    /// `at`, and the `count` messages from there are made from
    /// `history[prefix.covers()..cut]`.
    ///
    /// The pieces of the items it now covers are dropped: the requests
    /// that begin with those items copy the prefix's messages whole, so
    /// their pieces were the same bytes kept a second time, for the length
    /// of the run. A request that no longer begins with them (after a
    /// compaction) writes them once more.
    pub(crate) fn extend_prefix(
        &mut self,
        prefix: &mut KeptPrefix,
        history: &[Arc<TranscriptItem>],
        cut: usize,
        written: &str,
        at: usize,
        count: usize,
    ) {
        let from = prefix.covers();
        let Some(len) = written.get(at..).and_then(|rest| message_ends(rest, count)) else {
            return;
        };
        if cut <= from {
            return;
        }
        prefix.items.truncate(from);
        prefix
            .items
            .extend(history[from..=cut].iter().map(Arc::downgrade));
        for item in &history[from..cut] {
            if let TranscriptItem::ToolCall { call_id, .. } = &**item {
                prefix.call_ids.insert(call_id.clone());
            }
            self.entries.remove(&(Arc::as_ptr(item) as usize));
        }
        prefix.push_run(&written[at..at + len]);
    }

    /// The kept leading messages of `history`'s run, taken out to be used
    /// and given back with [`Fragments::put_prefix`]: an empty one where
    /// none is kept or the history does not begin with its items.
    pub(crate) fn take_prefix(&mut self, history: &[Arc<TranscriptItem>]) -> KeptPrefix {
        let Some(first) = history.first() else {
            return KeptPrefix::default();
        };
        match self.prefixes.remove(&(Arc::as_ptr(first) as usize)) {
            Some(prefix) if prefix.begins(history) => prefix,
            _ => KeptPrefix::default(),
        }
    }

    /// Keeps `prefix` for the next request of `history`'s run; past a
    /// bound, first drops those of runs whose items are gone.
    pub(crate) fn put_prefix(&mut self, history: &[Arc<TranscriptItem>], prefix: KeptPrefix) {
        let Some(first) = history.first() else { return };
        if prefix.items.is_empty() {
            return;
        }
        if self.prefixes.len() >= self.prefix_prune_at.max(PRUNE_AT) {
            // A run holds its first item as long as it sends requests.
            self.prefixes
                .retain(|_, p| p.items.first().is_some_and(|i| i.strong_count() > 0));
            self.prefix_prune_at = 2 * self.prefixes.len();
        }
        self.prefixes.insert(Arc::as_ptr(first) as usize, prefix);
    }

    /// How many items the kept leading messages of `history`'s run cover.
    pub fn prefix_covers(&self, history: &[Arc<TranscriptItem>]) -> usize {
        history
            .first()
            .and_then(|first| self.prefixes.get(&(Arc::as_ptr(first) as usize)))
            .filter(|p| p.begins(history))
            .map_or(0, KeptPrefix::covers)
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

    /// How many tool lists' JSON is kept.
    pub fn tool_lists(&self) -> usize {
        self.tools.len()
    }

    /// Whether the JSON of the list `specs` (that allocation) is kept.
    pub fn keeps_tools(&self, specs: &Arc<[ToolSpec]>) -> bool {
        self.tools.iter().any(|k| Arc::ptr_eq(&k.specs, specs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// However the new messages' sizes go (growing, shrinking, equal), the
    /// kept runs stay few, each more than twice the next, and hold the
    /// messages in order.
    #[test]
    fn kept_runs_stay_logarithmic_in_the_messages_kept() {
        let sizes: [fn(usize) -> usize; 3] = [|i| 40 + i, |i| 1040 - i, |_| 64];
        for size in sizes {
            let mut prefix = KeptPrefix::default();
            let mut expected = Vec::new();
            for i in 0..1000 {
                let message = format!("{{\"m\":\"{}\"}}", "x".repeat(size(i)));
                prefix.push_run(&message);
                expected.push(message);
            }
            let runs = prefix.runs();
            assert!(runs.len() <= 12, "{} runs", runs.len());
            assert!(runs.windows(2).all(|w| w[0].len() > 2 * w[1].len()));
            assert_eq!(runs.join(&b","[..]), expected.join(",").into_bytes());
        }
    }
}
