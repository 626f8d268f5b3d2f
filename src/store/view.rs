//! What a read sees together, and where in the order of visibility it looked.
//!
//! Owns [`View`] (the secondary indexes, the event log their serials point into, how the
//! catalogue's places read, the last mark made visible: swapped at once by a compaction) and
//! [`Mark`]. The writer changes a view under its lock; readers hold it for a scan.

use std::sync::Arc;

use super::catalogue::Places;
use super::format::log::Log;
use super::index::Indexes;

/// What a read sees together: the secondary indexes, the event log file their serials (and the
/// catalogue's `i` entries) point into, and how those entries read. A compaction replaces them
/// at once, so a reader that holds a view, or a clone of its log, reads consistent records
/// however long it takes.
pub(crate) struct View {
    pub(crate) index: Indexes,
    pub(crate) log: Arc<Log>,
    /// Which file the log is (see `log::file_name`).
    pub(crate) generation: u64,
    /// How the catalogue's stored places read in this generation.
    pub(crate) places: Places,
    /// The mark of the last group made visible (see [`Mark`]).
    pub(crate) mark: Mark,
}

/// Where in the order of visibility an event became readable, or a query looked: the writer
/// counts up with each group it makes visible. A query that returns mark `w` saw every event
/// stored with a mark ≤ `w` (and matching it), and none stored later; so a subscription's live
/// delivery can leave out the events its own query already answered (see `ws::session`). It is
/// an in-memory count, not a place: it survives a compaction and starts again at each open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Mark(u64);

impl Mark {
    /// The mark after this one.
    pub(crate) fn next(self) -> Mark {
        Mark(self.0 + 1)
    }

    /// The mark counted `n` (a backend that counts its own).
    pub(crate) fn at(n: u64) -> Mark {
        Mark(n)
    }
}
