//! What the store reports of itself.
//!
//! Owns [`StoreStats`], which both backends fill (`Store::stats`).

use super::write::control::Compacted;

/// What [`crate::store::Store::stats`] reports.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StoreStats {
    /// Events stored.
    pub events: u64,
    /// Bytes of their frames in the event log (PostgreSQL: of the events and tags tables).
    pub live_bytes: u64,
    /// Bytes of the log that hold no stored event (replaced, deleted, expired, journal frames).
    pub dead_bytes: u64,
    /// Bytes of the event log up to its committed end.
    pub log_bytes: u64,
    /// Bytes of the catalogue (sled) and the index segments on disk (PostgreSQL: the indexes).
    pub index_bytes: u64,
    /// How many index segments there are.
    pub index_segments: usize,
    /// The event log's generation (how many compactions it has been through).
    pub log_generation: u64,
    /// True while a compaction runs.
    pub compacting: bool,
    /// The last compaction, if any.
    pub last_compaction: Option<Compacted>,
    /// Which backend: "sled" or "postgres".
    pub backend: &'static str,
}
