//! The store's contract in types: what every backend takes and gives back.
//!
//! Owns the settings a store opens with ([`Tuning`], [`PgTuning`], [`SearchTuning`]), what a
//! write answers ([`PutOutcome`]) and the [`Mark`] of what a read saw, what the store reports of
//! itself ([`StoreStats`], [`Compacted`]) and how it compacts ([`CompactPolicy`]), a negentropy
//! [`Item`], what `hearth check` finds wrong in a database ([`Flaw`]), and an export's reading ([`Export`], filled by a backend's [`ExportPages`]). Both
//! backends (`embedded/`, `postgres/`) import these from here and nothing from each other.

use crate::protocol::{EventId, EventJson, Kind, Timestamp};
use crate::store::error::StoreError;

pub use crate::search::SEARCH_DIR;
/// How a store is opened (`[storage]` settings).
#[derive(Clone, Debug)]
pub struct Tuning {
    /// sled's page cache, MiB.
    pub cache_capacity_mb: u64,
    /// Events the in-memory part of the index holds before they are written out as a segment.
    pub index_memory_events: usize,
    /// The search index (NIP-50), when it is kept.
    pub search: Option<SearchTuning>,
    /// The PostgreSQL database the events live in (`storage.backend = "postgres"`); None: the
    /// embedded store in the data directory.
    pub postgres: Option<PgTuning>,
}

/// How the PostgreSQL backend is opened (`storage.postgres_url`, `storage.postgres_pool`).
#[derive(Clone, Debug)]
pub struct PgTuning {
    /// The database's URL.
    pub url: String,
    /// Connections the pool holds at most.
    pub pool: usize,
}

/// How a store's search index is kept (`storage.search*`).
#[derive(Clone, Debug)]
pub struct SearchTuning {
    /// The kinds indexed.
    pub kinds: Vec<Kind>,
    /// The index writer's memory, MiB.
    pub memory_mb: u64,
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

/// What happened to an event given to `Store::put`.
#[derive(Clone, Debug)]
pub enum PutOutcome {
    /// Newly stored and durable, readable from the mark given.
    Stored(Mark),
    /// The same id is already stored.
    Duplicate,
    /// A newer version of this replaceable / addressable event is stored.
    Superseded,
    /// Its author deleted it (NIP-09 tombstone).
    Deleted,
}

/// What a compaction did.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Compacted {
    /// When it finished (Unix seconds).
    pub at: u64,
    /// The data directory's bytes before (the store's files, for a temporary store).
    pub before_bytes: u64,
    /// And after.
    pub after_bytes: u64,
    /// How long it took, start to end.
    pub seconds: f64,
    /// How long writes waited for its swap (milliseconds).
    #[serde(default)]
    pub writes_paused_ms: f64,
    /// How long reads waited for its swap (milliseconds): the moment the view changes.
    #[serde(default)]
    pub reads_paused_ms: f64,
}

/// How the store compacts: on its own once the log's dead bytes are at least `dead_ratio` of it
/// and it is at least `min_bytes` long (`storage.compact_dead_ratio`, `storage.compact_min_mb`),
/// and how fast the background copy may read and write (`storage.compact_max_mb_per_sec`). The
/// default never compacts on its own and copies at full speed.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CompactPolicy {
    /// Dead share of the log that makes a compaction due; 0: never on its own.
    pub dead_ratio: f64,
    /// Shorter logs are left alone.
    pub min_bytes: u64,
    /// Bytes per second the copy step writes at most, so that a compaction does not take the
    /// disk from the relay's own reads and writes; 0: no limit. The writer's short last step is
    /// never slowed.
    pub max_bytes_per_sec: u64,
}

impl CompactPolicy {
    /// True when a log of `log_bytes` with `dead_bytes` of them dead is due.
    pub(crate) fn is_due(&self, log_bytes: u64, dead_bytes: u64) -> bool {
        self.dead_ratio > 0.0
            && dead_bytes > 0
            && log_bytes >= self.min_bytes
            && dead_bytes as f64 >= self.dead_ratio * log_bytes as f64
    }
}

/// One item: when, and which event.
pub type Item = (Timestamp, EventId);

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

/// A snapshot of stored events being read out in order (`Store::export`).
pub struct Export(Box<dyn ExportPages>);

/// How a backend reads an export.
pub(crate) trait ExportPages: Send {
    /// How many events are left to read.
    fn remaining(&self) -> usize;
    /// The next event, oldest first; a damaged one is left out (logged), never served.
    fn next_event(&mut self) -> Option<Result<EventJson, StoreError>>;
}

impl Export {
    /// An export `pages` reads.
    pub(crate) fn paged(pages: Box<dyn ExportPages>) -> Export {
        Export(pages)
    }

    /// How many events are left to read.
    pub fn remaining(&self) -> usize {
        self.0.remaining()
    }
}

impl Iterator for Export {
    type Item = Result<EventJson, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next_event()
    }
}

/// What `hearth check` finds wrong with one event a database holds (`Store::check_database`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Flaw {
    /// Its JSON does not decode, or its signature does not verify.
    Unreadable {
        /// The id column.
        id: String,
        /// Its row.
        seq: i64,
        /// Why.
        reason: String,
    },
    /// Its JSON is another event's.
    WrongId {
        /// The id column.
        id: String,
        /// Its row.
        seq: i64,
        /// The id the JSON holds.
        found: String,
    },
    /// Its author (a gift wrap's recipient) deleted it (NIP-09), yet it is stored.
    Deleted {
        /// The id.
        id: String,
    },
}
