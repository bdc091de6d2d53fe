//! The state's active items, indexed the way every step reads them: per
//! tail section in newest-first order, and by failure fingerprint. A long
//! run's state holds hundreds of confirmed facts; rendering the tail and
//! taking in a receipt must not visit them all (issue 19: per-step work
//! stays flat as a run grows).

use super::tail::{Section, SECTION_COUNT};
use attest_protocol::{AgentStateItem, StateStatus};
use chrono::{DateTime, Utc};
use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};

/// An item's place in its section: ascending by update time, then id, then
/// position descending (ids given by `add` may repeat): reversed, the
/// tail's order, ties in the order the items were kept.
type Place = (DateTime<Utc>, String, Reverse<usize>);

#[derive(Debug, Clone, Default)]
pub(super) struct ActiveIndex {
    sections: [BTreeSet<Place>; SECTION_COUNT],
    /// Positions of active items with each fingerprint.
    fingerprints: HashMap<String, BTreeSet<usize>>,
}

impl ActiveIndex {
    /// Index the item at `at`, if it is active.
    pub(super) fn insert(&mut self, at: usize, item: &AgentStateItem) {
        if item.status != StateStatus::Active {
            return;
        }
        self.sections[Section::of(item) as usize].insert(place(at, item));
        if let Some(fp) = &item.fingerprint {
            self.fingerprints.entry(fp.clone()).or_default().insert(at);
        }
    }

    /// Forget the item at `at` as it is now (before it changes).
    pub(super) fn remove(&mut self, at: usize, item: &AgentStateItem) {
        if item.status != StateStatus::Active {
            return;
        }
        self.sections[Section::of(item) as usize].remove(&place(at, item));
        if let Some(fp) = &item.fingerprint {
            if let Some(ats) = self.fingerprints.get_mut(fp) {
                ats.remove(&at);
                if ats.is_empty() {
                    self.fingerprints.remove(fp);
                }
            }
        }
    }

    pub(super) fn count(&self, section: Section) -> usize {
        self.sections[section as usize].len()
    }

    /// Positions of `section`'s active items, newest first.
    pub(super) fn newest(&self, section: Section) -> impl Iterator<Item = usize> + '_ {
        self.sections[section as usize].iter().rev().map(|p| p.2 .0)
    }

    /// Positions of the active items with `fingerprint`, oldest first.
    pub(super) fn with_fingerprint(&self, fingerprint: &str) -> impl Iterator<Item = usize> + '_ {
        self.fingerprints
            .get(fingerprint)
            .into_iter()
            .flatten()
            .copied()
    }

    /// Whether any active item is not the goal.
    pub(super) fn has_more_than_goal(&self) -> bool {
        self.sections
            .iter()
            .enumerate()
            .any(|(s, items)| s != Section::Goal as usize && !items.is_empty())
    }
}

fn place(at: usize, item: &AgentStateItem) -> Place {
    (item.updated_at, item.id.clone(), Reverse(at))
}
