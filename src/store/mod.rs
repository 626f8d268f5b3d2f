//! Durable event storage: the store's one narrow API, and the contract of every backend.
//!
//! [`Store`] is what the relay, the offline commands and the tests hold of a data directory.
//! Its contract, which a second backend (PostgreSQL) implements with the same methods:
//!
//! - **Writes** ([`Store::put`], [`Store::remove`], [`Store::sweep_expired`]) return only once
//!   their outcome is durable: an event acknowledged `Stored` survives a `kill -9` at any moment
//!   after. An event is stored once per id (`Duplicate` after); NIP-01 replaceable and
//!   addressable versions and NIP-09 deletions decide `Superseded` and `Deleted` in the order
//!   the writes arrived (a gift wrap, kind 1059 with one `p` tag, is deleted by its recipient's
//!   request as by its author's); NIP-40 expired events are never served and are removed by the sweep.
//! - **Reads** ([`Store::query`], [`Store::count`], [`Store::get`], [`Store::export`]) see a
//!   consistent snapshot: newest first, ties lowest id first, each filter's `limit` its own, no
//!   event twice; except [`Store::export`], which gives the oldest first and events of the same
//!   second in the order they were stored (an import of it stores them in that order again; the
//!   NIP-29 groups are folded from it in that order); a query's [`Mark`] says which writes it saw, so a subscription's live events
//!   can leave those out. A damaged record is skipped (logged once), never served as garbage.
//!   The plain forms block; the `*_async` forms run off the async reactor. Every read a client
//!   asks for names its [`Viewer`]: an event of a private kind (NIP-42 read restrictions) is
//!   served, counted and matched toward a `limit` only for its author and its `p` recipients; the
//!   plain `query`/`count`/`get` are the operator's view of everything.
//! - **Settings and audit** documents are small, named and durable once saved.
//! - **Media records** ([`Store::media`], [`Store::blob_records`]): which key uploaded which blob
//!   (hash, size, type, date), durable once written; a blob's owners and an owner's blobs are
//!   each one read; a blob's hold keeps every other holder of it waiting (the contract in full:
//!   `media`'s).
//! - **Compaction** gives back dead space while reads and writes go on; one at a time.
//! - [`Store::close`] is the one stop: queued writes finish, everything is flushed.
//!
//! It knows nothing of connections, quotas or the wire.
//!
//! Two backends implement it: the embedded one (sled and the event log, below; the default) and
//! PostgreSQL (`postgres/`, `storage.backend = "postgres"`), which several nodes share. There a
//! write is durable once its transaction has committed (`synchronous_commit` on; the puts that
//! wait together share one transaction, and each is answered after its commit); writes of one
//! replaceable address, or of an event and its deletion, are serialised across nodes; a query's
//! [`Mark`] counts this node's acknowledged writes and the events other nodes stored as they
//! reach it ([`Store::arrived`]); compaction is the database's vacuum; the media records of blobs
//! on the node's disk are the node's own, those of blobs in a bucket every node shares are the
//! database's (`media` table), read alike by every node; an unreachable server is
//! [`StoreError::Unavailable`] until it is back (the pool reconnects).
//!
//! The folder, top to bottom (each floor imports only the floors below it; `tests/layers.rs`):
//!
//! ```text
//! check        hearth check / --repair, over this API and the embedded files
//! mod.rs       this API and contract; `dispatch!` sends each call to the backend, one line each
//! upkeep       the API's upkeep half: settings, audit, media records, stats, compaction, the stop
//! embedded/    the embedded backend (sled, the event log, its indexes; its own floors inside)
//! postgres/    the PostgreSQL backend           (the two never import each other)
//! contract     the types both backends take and give: Tuning, PutOutcome, Mark, StoreStats, Export…
//! media        the media records' contract, and this node's own (its sled); the shared ones are postgres/'s
//! db · error · progress   sled's database and a durable flush; the one error; a slow step's log
//! format/      the bytes on disk: record, event log, segment, keys, buckets, moves, durable sync
//! ```
//!
//! A backend implements the contract as inherent methods named as the [`Store`] methods they
//! answer (`put`, `query_as`, `items`, `compact`, …); a third would add one arm to `dispatch!`.

pub mod check;
mod contract;
mod db;
pub(crate) mod embedded;
mod error;
pub mod format;
pub mod media;
pub mod postgres;
mod progress;
mod upkeep;

pub use contract::{
    CompactPolicy, Compacted, Export, Flaw, Item, Mark, PgTuning, PutOutcome, SEARCH_DIR, SearchTuning, StoreStats,
    Tuning,
};
pub use embedded::index;
pub use embedded::index::MEM_EVENTS as INDEX_MEMORY_EVENTS;
pub(crate) use embedded::migrate;
pub use error::StoreError;
pub use postgres::PgError;

use std::path::Path;
use std::sync::Arc;

use crate::protocol::{EventId, EventJson, Filter, PubKey, Timestamp, VerifiedEvent, Viewer};
use embedded::open::{self, Opened};
use postgres::Pg;

/// Sends one Store call to the backend the store runs on: `dispatch!(self.backend, b => b.put(e).await)`.
/// Both backends implement the contract as methods of the same names and signatures, so the
/// one expression compiles against each (the compiler checks that both have it). An enum and
/// this macro rather than a trait: the async methods (`put`, `remove`, `save_setting`, …)
/// would need a boxed future per call behind a `dyn` trait, on the hottest path there is, or a
/// `Store<B>` generic through every room that holds one.
macro_rules! dispatch {
    ($backend:expr, $b:ident => $call:expr) => {
        match $backend {
            Backend::Embedded($b) => $call,
            Backend::Postgres($b) => $call,
        }
    };
}
use dispatch;

/// Handle to the store; cheap to clone.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
}

/// The backend a store runs on.
#[derive(Clone)]
enum Backend {
    Embedded(Arc<Opened>),
    Postgres(Arc<Pg>),
}

impl Store {
    /// Opens (or creates) the database in `dir` and starts the writer thread.
    pub fn open(dir: &Path, cache_capacity_mb: u64) -> Result<Store, StoreError> {
        let tuning =
            Tuning { cache_capacity_mb, index_memory_events: INDEX_MEMORY_EVENTS, search: None, postgres: None };
        Store::open_tuned(dir, tuning)
    }

    /// [`Store::open`] with every setting: PostgreSQL when `tuning.postgres` names a database
    /// (`dir` then keeps the node's own files).
    pub fn open_tuned(dir: &Path, tuning: Tuning) -> Result<Store, StoreError> {
        let backend = match &tuning.postgres {
            Some(pg) => Backend::Postgres(Arc::new(Pg::open(dir, pg, tuning.search.as_ref())?)),
            None => Backend::Embedded(Arc::new(open::open_tuned(dir, tuning)?)),
        };
        Ok(Store { backend })
    }

    /// [`Store::open`] of a directory whose migration is unfinished: for the import that
    /// finishes it.
    pub(crate) fn open_migrating(dir: &Path, tuning: Tuning) -> Result<Store, StoreError> {
        Ok(Store { backend: Backend::Embedded(Arc::new(open::open_migrating(dir, tuning)?)) })
    }

    /// An in-memory store for unit tests.
    pub fn temporary() -> Result<Store, StoreError> {
        Ok(Store { backend: Backend::Embedded(Arc::new(open::temporary()?)) })
    }

    /// "sled" or "postgres".
    pub fn backend_name(&self) -> &'static str {
        dispatch!(&self.backend, b => b.backend_name())
    }

    /// True when several nodes may share this store (PostgreSQL).
    pub fn is_shared(&self) -> bool {
        dispatch!(&self.backend, b => b.is_shared())
    }

    /// Stores a verified event durably, deduplicated by id; NIP-01 replacement and NIP-09
    /// deletion apply. Returns once the outcome is on disk.
    pub async fn put(&self, event: impl Into<Arc<VerifiedEvent>>) -> Result<PutOutcome, StoreError> {
        dispatch!(&self.backend, b => b.put(event.into()).await)
    }

    /// Deletes events whose NIP-40 expiration is at or before `now`; returns how many.
    pub async fn sweep_expired(&self, now: Timestamp) -> Result<usize, StoreError> {
        dispatch!(&self.backend, b => b.sweep_expired(now).await)
    }

    /// Removes one stored event and its index entries (moderation); true when it was stored.
    pub async fn remove(&self, id: EventId) -> Result<bool, StoreError> {
        dispatch!(&self.backend, b => b.remove(id).await)
    }

    /// The mark of an event another node stored, as it reaches this one for live delivery
    /// (a shared store's); None for a store of this node alone.
    pub fn arrived(&self, event: &crate::protocol::Event) -> Option<Mark> {
        dispatch!(&self.backend, b => b.arrived(event))
    }

    /// The events a shared store (PostgreSQL) stored at or after `since` (Unix seconds, on the
    /// database's clock), oldest first, at most `max`: what a node that lost the live feed
    /// catches up with. None for a store of this node alone.
    pub async fn stored_since(&self, since: f64, max: i64) -> Result<Option<Vec<EventJson>>, StoreError> {
        dispatch!(&self.backend, b => b.stored_since(since, max).await)
    }

    /// One stored event by id, as the operator sees the store (every event: see
    /// [`Store::get_as`]); expired events are not served, nor a damaged record.
    pub fn get(&self, id: &EventId, now: Timestamp) -> Result<Option<EventJson>, StoreError> {
        self.get_as(id, now, &Viewer::everything())
    }

    /// [`Store::get`], if `viewer` may read it (NIP-42 read restrictions).
    pub fn get_as(&self, id: &EventId, now: Timestamp, viewer: &Viewer) -> Result<Option<EventJson>, StoreError> {
        dispatch!(&self.backend, b => b.get_as(id, now, viewer))
    }

    /// Stored events matching any filter, as the operator sees the store (every event: see
    /// [`Store::query_as`]): newest first, ties lowest id first, each filter's `limit` applied to
    /// its own matches (the caller sets and clamps it), no event twice.
    pub fn query(&self, filters: &[Filter], now: Timestamp) -> Result<Vec<EventJson>, StoreError> {
        Ok(self.query_as(filters, now, &Viewer::everything())?.0)
    }

    /// [`Store::query`], and the [`Mark`] of what the query saw.
    pub fn query_marked(&self, filters: &[Filter], now: Timestamp) -> Result<(Vec<EventJson>, Mark), StoreError> {
        self.query_as(filters, now, &Viewer::everything())
    }

    /// [`Store::query_marked`] of what `viewer` may read: an event it may not read is not
    /// served, nor counted toward a filter's `limit`.
    pub fn query_as(
        &self,
        filters: &[Filter],
        now: Timestamp,
        viewer: &Viewer,
    ) -> Result<(Vec<EventJson>, Mark), StoreError> {
        dispatch!(&self.backend, b => b.query_as(filters, now, viewer))
    }

    /// How many stored events match any filter (NIP-45), as the operator sees the store;
    /// `limit` is ignored.
    pub fn count(&self, filters: &[Filter], now: Timestamp) -> Result<u64, StoreError> {
        self.count_as(filters, now, &Viewer::everything())
    }

    /// [`Store::count`] of what `viewer` may read.
    pub fn count_as(&self, filters: &[Filter], now: Timestamp, viewer: &Viewer) -> Result<u64, StoreError> {
        dispatch!(&self.backend, b => b.count_as(filters, now, viewer))
    }

    /// Every stored event matching `filter` (its `limit` keeps the newest that many), oldest
    /// first, as a snapshot taken now and read as the iterator reaches each event, while writes
    /// go on.
    pub fn export(&self, filter: &Filter, now: Timestamp) -> Result<Export, StoreError> {
        if let Some(refusal) = filter.search_refusal() {
            return Err(StoreError::Search(refusal.into()));
        }
        dispatch!(&self.backend, b => b.export(filter, now))
    }

    /// The negentropy items (NIP-77) of `filter` for `viewer`: the created_at and id of every
    /// stored event it matches and `viewer` may read, sorted by created_at then id, read from
    /// the index (not the events: see `items`); None when more than `max` match.
    pub fn items(
        &self,
        filter: &Filter,
        now: Timestamp,
        viewer: &Viewer,
        max: usize,
    ) -> Result<Option<Vec<Item>>, StoreError> {
        if let Some(refusal) = filter.search_refusal() {
            return Err(StoreError::Search(refusal.into()));
        }
        dispatch!(&self.backend, b => b.items(filter, now, viewer, max))
    }

    /// Whether the NIP-50 search index can answer; None when it is not kept (`storage.search`
    /// off).
    pub fn search_state(&self) -> Option<crate::search::SearchState> {
        self.search_parts().map(|(_, feed)| feed.state())
    }

    /// Events the search index holds (committed); 0 when it is not kept.
    pub fn search_documents(&self) -> u64 {
        self.search_parts().map_or(0, |(index, _)| index.len())
    }

    /// Waits until the search index has committed every change the store made before this call
    /// (`hearth search-reindex`, tests); at once when it is not kept.
    pub fn search_flush(&self) {
        if let Some((_, feed)) = self.search_parts() {
            feed.flush();
        }
    }

    /// [`Store::items`] off the async reactor.
    pub async fn items_async(
        &self,
        filter: Filter,
        now: Timestamp,
        viewer: Viewer,
        max: usize,
    ) -> Result<Option<Vec<Item>>, StoreError> {
        self.off_reactor(move |s| s.items(&filter, now, &viewer, max)).await
    }

    /// True when an event with this id is stored (on PostgreSQL, asked together with the other
    /// ids that wait).
    pub async fn contains(&self, id: &EventId) -> Result<bool, StoreError> {
        dispatch!(&self.backend, b => b.contains(id).await)
    }

    /// How many events by `author` are stored.
    pub fn count_by_author(&self, author: &PubKey) -> Result<usize, StoreError> {
        dispatch!(&self.backend, b => b.count_by_author(author))
    }

    /// How many events are stored (0, logged, when PostgreSQL cannot be asked).
    pub fn len(&self) -> usize {
        dispatch!(&self.backend, b => b.len())
    }

    /// True when no event is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// [`Store::query_as`] off the async reactor: awaited where the backend's reads await
    /// (PostgreSQL's, on its own runtime), else on the blocking pool (the embedded store's).
    pub async fn query_async(
        &self,
        filters: Vec<Filter>,
        now: Timestamp,
        viewer: Viewer,
    ) -> Result<(Vec<EventJson>, Mark), StoreError> {
        match dispatch!(&self.backend, b => b.query_async(&filters, now, &viewer).await) {
            Some(answer) => answer,
            None => self.off_reactor(move |s| s.query_as(&filters, now, &viewer)).await,
        }
    }

    /// [`Store::count_as`] off the async reactor, as [`Store::query_async`].
    pub async fn count_async(&self, filters: Vec<Filter>, now: Timestamp, viewer: Viewer) -> Result<u64, StoreError> {
        match dispatch!(&self.backend, b => b.count_async(&filters, now, &viewer).await) {
            Some(answer) => answer,
            None => self.off_reactor(move |s| s.count_as(&filters, now, &viewer)).await,
        }
    }

    /// [`Store::get_as`] off the async reactor, as [`Store::query_async`].
    pub async fn get_async(
        &self,
        id: EventId,
        now: Timestamp,
        viewer: Viewer,
    ) -> Result<Option<EventJson>, StoreError> {
        match dispatch!(&self.backend, b => b.get_async(&id, now, &viewer).await) {
            Some(answer) => answer,
            None => self.off_reactor(move |s| s.get_as(&id, now, &viewer)).await,
        }
    }

    /// [`Store::export`] off the async reactor.
    pub async fn export_async(&self, filter: Filter, now: Timestamp) -> Result<Export, StoreError> {
        self.off_reactor(move |s| s.export(&filter, now)).await
    }

    /// [`Store::count_by_author`] off the async reactor.
    pub async fn count_by_author_async(&self, author: PubKey) -> Result<usize, StoreError> {
        self.off_reactor(move |s| s.count_by_author(&author)).await
    }

    /// Runs blocking read work on the blocking pool, off the async reactor.
    async fn off_reactor<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || work(&store)).await.map_err(|e| StoreError::Task(e.to_string()))?
    }

    /// The search index and its feed, when the store keeps one.
    fn search_parts(&self) -> Option<(&Arc<crate::search::SearchIndex>, &Arc<crate::search::Feed>)> {
        dispatch!(&self.backend, b => b.search_parts())
    }

    /// The embedded backend's parts (unit tests of its insides).
    #[cfg(test)]
    fn embedded(&self) -> &Arc<Opened> {
        match &self.backend {
            Backend::Embedded(s) => s,
            Backend::Postgres(_) => panic!("not the embedded backend"),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
