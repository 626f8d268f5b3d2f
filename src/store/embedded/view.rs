//! What a read sees together, and where in the order of visibility it looked.
//!
//! Owns [`View`] (the secondary indexes, the event log their serials point into, how the
//! catalogue's places read, the last mark made visible: swapped at once by a compaction) and
//! [`Mark`]. The writer changes a view under its lock; readers hold it for a scan.

use std::sync::Arc;

use super::catalogue::Places;
use super::index::Indexes;
use crate::store::contract::Mark;
use crate::store::format::log::Log;

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
