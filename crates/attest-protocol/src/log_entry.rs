use crate::{Event, TraceRecord, TranscriptItem};
use serde::{Deserialize, Serialize};

/// One entry of a run's append-only log: a transcript item, an event or an
/// audit record, in the order they happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "snake_case")]
// Not boxed: most entries are events, and a box would cost each of them an
// allocation; the other variants are small (an item, since its receipt is
// boxed), so boxing could only shrink the rarer ones' slots.
#[allow(clippy::large_enum_variant)]
pub enum LogEntry {
    Item {
        item: TranscriptItem,
    },
    Event {
        event: Event,
    },
    Trace {
        trace: TraceRecord,
    },
    /// A transcript item compacted out of requests, copied to the archive.
    Archive {
        item: TranscriptItem,
    },
}
