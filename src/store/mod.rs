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
//! - **Media records** ([`Store::media`]): which key uploaded which blob (hash, size, type,
//!   date), durable once written; a blob's owners and an owner's blobs are each one read.
//! - **Compaction** gives back dead space while reads and writes go on; one at a time.
//! - [`Store::close`] is the one stop: queued writes finish, everything is flushed.
//!
//! It knows nothing of connections, quotas or the wire.
//!
//! This backend, top to bottom (each floor imports only the floors below it):
//!
//! ```text
//! mod.rs (this API) · check (hearth check / --repair, over this API)
//! open        opening a data directory: layouts converted, the log's tail replayed, the index opened
//! write/      the writer thread and its group commit, the NIP-01/09/40 rules, compaction, remap, merges
//! migrate     older layouts carried out and converted
//! query       the read path: a filter planned onto an index list, records read and rendered
//! view        what a read sees together (index, log, places) and the Mark of what it saw
//! index/      the secondary indexes: the in-memory part, the segments, the merge of both
//! catalogue   which events are stored and where their records are (sled's id buckets, read)
//! db · error · progress   sled's database and a durable flush; the one error; a slow step's log
//! format/     the bytes on disk: record, event log, segment, keys, buckets, moves, sync
//! ```

mod catalogue;
pub mod check;
mod db;
mod error;
pub mod format;
pub mod index;
mod items;
pub mod media;
pub mod migrate;
mod open;
mod plan;
mod progress;
mod query;
mod search;
mod view;
mod write;

pub use error::StoreError;
pub use index::MEM_EVENTS as INDEX_MEMORY_EVENTS;
pub use items::Item;
pub use open::Tuning;
pub use query::Export;
pub use search::{SEARCH_DIR, SearchTuning};
pub use view::Mark;
pub use write::apply::PutOutcome;
pub use write::control::{CompactPolicy, Compacted};

use std::path::Path;
use std::sync::{Arc, PoisonError, RwLockReadGuard};

use crate::protocol::{EventId, EventJson, Filter, PubKey, Timestamp, VerifiedEvent, Viewer};
use index::Key;
use open::Opened;
use view::View;
use write::compact::LAST_COMPACTION;

/// What [`Store::stats`] reports.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StoreStats {
    /// Events stored.
    pub events: u64,
    /// Bytes of their frames in the event log.
    pub live_bytes: u64,
    /// Bytes of the log that hold no stored event (replaced, deleted, expired, journal frames).
    pub dead_bytes: u64,
    /// Bytes of the event log up to its committed end.
    pub log_bytes: u64,
    /// Bytes of the catalogue (sled) and the index segments on disk.
    pub index_bytes: u64,
    /// How many index segments there are.
    pub index_segments: usize,
    /// The event log's generation (how many compactions it has been through).
    pub log_generation: u64,
    /// True while a compaction runs.
    pub compacting: bool,
    /// The last compaction, if any.
    pub last_compaction: Option<Compacted>,
}

/// Handle to the store; cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Opened>,
}

impl Store {
    /// Opens (or creates) the database in `dir` and starts the writer thread.
    pub fn open(dir: &Path, cache_capacity_mb: u64) -> Result<Store, StoreError> {
        Store::open_tuned(dir, Tuning { cache_capacity_mb, index_memory_events: INDEX_MEMORY_EVENTS, search: None })
    }

    /// [`Store::open`] with every setting.
    pub fn open_tuned(dir: &Path, tuning: Tuning) -> Result<Store, StoreError> {
        Ok(Store { inner: Arc::new(open::open_tuned(dir, tuning)?) })
    }

    /// [`Store::open`] of a directory whose migration is unfinished: for the import that
    /// finishes it.
    pub(crate) fn open_migrating(dir: &Path, tuning: Tuning) -> Result<Store, StoreError> {
        Ok(Store { inner: Arc::new(open::open_migrating(dir, tuning)?) })
    }

    /// An in-memory store for unit tests.
    pub fn temporary() -> Result<Store, StoreError> {
        Ok(Store { inner: Arc::new(open::temporary()?) })
    }

    /// Stores a verified event durably, deduplicated by id; NIP-01 replacement and NIP-09
    /// deletion apply. Returns once the outcome is on disk.
    pub async fn put(&self, event: impl Into<Arc<VerifiedEvent>>) -> Result<PutOutcome, StoreError> {
        self.inner.writes.put(event.into()).await
    }

    /// Deletes events whose NIP-40 expiration is at or before `now`; returns how many.
    pub async fn sweep_expired(&self, now: Timestamp) -> Result<usize, StoreError> {
        self.inner.writes.sweep_expired(now).await
    }

    /// Removes one stored event and its index entries (moderation); true when it was stored.
    pub async fn remove(&self, id: EventId) -> Result<bool, StoreError> {
        self.inner.writes.remove(id).await
    }

    /// One stored event by id, as the operator sees the store (every event: see
    /// [`Store::get_as`]); expired events are not served, nor a damaged record.
    pub fn get(&self, id: &EventId, now: Timestamp) -> Result<Option<EventJson>, StoreError> {
        self.get_as(id, now, &Viewer::everything())
    }

    /// [`Store::get`], if `viewer` may read it (NIP-42 read restrictions).
    pub fn get_as(&self, id: &EventId, now: Timestamp, viewer: &Viewer) -> Result<Option<EventJson>, StoreError> {
        self.inner.reader.get(id, now, viewer)
    }

    /// Stored events matching any filter, as the operator sees the store (every event: see
    /// [`Store::query_as`]): newest first, ties lowest id first, each filter's `limit` applied to
    /// its own matches (the caller sets and clamps it), no event twice.
    pub fn query(&self, filters: &[Filter], now: Timestamp) -> Result<Vec<EventJson>, StoreError> {
        self.inner.reader.query(filters, now, &Viewer::everything())
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
        if filters.iter().any(|f| f.search.is_some()) {
            return self.searching()?.query(&self.inner.reader, filters, now, viewer);
        }
        self.inner.reader.query_marked(filters, now, viewer)
    }

    /// How many stored events match any filter (NIP-45), as the operator sees the store;
    /// `limit` is ignored.
    pub fn count(&self, filters: &[Filter], now: Timestamp) -> Result<u64, StoreError> {
        self.count_as(filters, now, &Viewer::everything())
    }

    /// [`Store::count`] of what `viewer` may read.
    pub fn count_as(&self, filters: &[Filter], now: Timestamp, viewer: &Viewer) -> Result<u64, StoreError> {
        if filters.iter().any(|f| f.search.is_some()) {
            return self.searching()?.count(&self.inner.reader, filters, now, viewer);
        }
        self.inner.reader.count(filters, now, viewer)
    }

    /// Every stored event matching `filter` (its `limit` keeps the newest that many), oldest
    /// first, as a snapshot taken now and read as the iterator reaches each event, while writes
    /// go on.
    pub fn export(&self, filter: &Filter, now: Timestamp) -> Result<Export, StoreError> {
        if let Some(refusal) = filter.search_refusal() {
            return Err(StoreError::Search(refusal.into()));
        }
        self.inner.reader.export(filter, now)
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
        self.inner.reader.items(filter, now, viewer, max)
    }

    /// Whether the NIP-50 search index can answer; None when it is not kept (`storage.search`
    /// off).
    pub fn search_state(&self) -> Option<crate::search::SearchState> {
        self.inner.search.as_ref().map(|s| s.feed.state())
    }

    /// Events the search index holds (committed); 0 when it is not kept.
    pub fn search_documents(&self) -> u64 {
        self.inner.search.as_ref().map_or(0, |s| s.index.len())
    }

    /// Waits until the search index has committed every change the store made before this call
    /// (`hearth search-reindex`, tests); at once when it is not kept.
    pub fn search_flush(&self) {
        if let Some(searching) = &self.inner.search {
            searching.feed.flush();
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

    /// True when an event with this id is stored.
    pub fn contains(&self, id: &EventId) -> Result<bool, StoreError> {
        catalogue::contains(&self.inner.reader.tree, id)
    }

    /// How many events by `author` are stored.
    pub fn count_by_author(&self, author: &PubKey) -> Result<usize, StoreError> {
        self.view().index.len(&Key::Author(*author))
    }

    /// How many events are stored.
    pub fn len(&self) -> usize {
        self.view().index.events() as usize
    }

    /// True when no event is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// [`Store::query_as`] off the async reactor.
    pub async fn query_async(
        &self,
        filters: Vec<Filter>,
        now: Timestamp,
        viewer: Viewer,
    ) -> Result<(Vec<EventJson>, Mark), StoreError> {
        self.off_reactor(move |s| s.query_as(&filters, now, &viewer)).await
    }

    /// [`Store::count_as`] off the async reactor.
    pub async fn count_async(&self, filters: Vec<Filter>, now: Timestamp, viewer: Viewer) -> Result<u64, StoreError> {
        self.off_reactor(move |s| s.count_as(&filters, now, &viewer)).await
    }

    /// [`Store::get_as`] off the async reactor.
    pub async fn get_async(
        &self,
        id: EventId,
        now: Timestamp,
        viewer: Viewer,
    ) -> Result<Option<EventJson>, StoreError> {
        self.off_reactor(move |s| s.get_as(&id, now, &viewer)).await
    }

    /// [`Store::export`] off the async reactor.
    pub async fn export_async(&self, filter: Filter, now: Timestamp) -> Result<Export, StoreError> {
        self.off_reactor(move |s| s.export(&filter, now)).await
    }

    /// [`Store::count_by_author`] off the async reactor.
    pub async fn count_by_author_async(&self, author: PubKey) -> Result<usize, StoreError> {
        self.off_reactor(move |s| s.count_by_author(&author)).await
    }

    /// A named settings document, if saved.
    pub fn load_setting(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.writes.load_setting(name)
    }

    /// Saves a named settings document durably.
    pub async fn save_setting(&self, name: &str, value: Vec<u8>) -> Result<(), StoreError> {
        self.inner.writes.save_setting(name, value).await
    }

    /// Appends one entry to the audit log durably.
    pub async fn append_audit(&self, entry: Vec<u8>) -> Result<(), StoreError> {
        let seq = self.inner.writes.shared.db.generate_id()?;
        self.inner.audit.insert(seq.to_be_bytes(), entry)?;
        self.inner.writes.flush_off_reactor().await
    }

    /// The media server's records.
    pub fn media(&self) -> &media::MediaRecords {
        &self.inner.media
    }

    /// The newest `limit` audit entries, newest first.
    pub fn audit_log(&self, limit: usize) -> Result<Vec<Vec<u8>>, StoreError> {
        self.inner.audit.iter().rev().take(limit).map(|item| Ok(item?.1.to_vec())).collect()
    }

    /// What the store holds and how much of its log is dead space.
    pub fn stats(&self) -> Result<StoreStats, StoreError> {
        let (events, live_bytes, log_bytes, log_generation, segments, segment_bytes) = {
            let view = self.view();
            let index = &view.index;
            (index.events(), index.live_bytes(), view.log.end(), view.generation, index.segments(), index.disk_bytes())
        };
        let last_compaction = match self.load_setting(LAST_COMPACTION)? {
            Some(bytes) => serde_json::from_slice(&bytes).ok(),
            None => None,
        };
        Ok(StoreStats {
            events,
            live_bytes,
            dead_bytes: log_bytes.saturating_sub(live_bytes),
            log_bytes,
            index_bytes: self.inner.writes.shared.db.size_on_disk()? + segment_bytes,
            index_segments: segments,
            log_generation,
            compacting: self.is_compacting(),
            last_compaction,
        })
    }

    /// [`Store::stats`] off the async reactor.
    pub async fn stats_async(&self) -> Result<StoreStats, StoreError> {
        self.off_reactor(|s| s.stats()).await
    }

    /// Compacts the event log now, while reads and writes go on; returns when it is done.
    /// [`StoreError::Compacting`] while another runs.
    pub async fn compact(&self) -> Result<Compacted, StoreError> {
        self.inner.writes.compact().await
    }

    /// Starts a compaction in the background; false when one already runs.
    pub fn start_compaction(&self) -> bool {
        let Some(running) = self.inner.writes.claim() else { return false };
        let store = self.clone();
        tokio::spawn(async move {
            match store.inner.writes.compact_claimed(running).await {
                Err(StoreError::Closed) if store.inner.writes.stopping() => {
                    tracing::info!("the store stopped during a compaction; the next start finishes or drops it");
                }
                Err(e) => tracing::error!(error = %e, "compaction failed"),
                Ok(_) => {}
            }
        });
        true
    }

    /// True while a compaction runs (its background remap included).
    pub fn is_compacting(&self) -> bool {
        self.inner.writes.is_compacting()
    }

    /// Resolves once no compaction runs, a remap resumed at open included;
    /// [`StoreError::Remap`] once a step of that remap fails (a full disk).
    pub(crate) async fn until_compaction_ends(&self) -> Result<(), StoreError> {
        self.inner.writes.until_compaction_ends().await
    }

    /// Sets when the store compacts on its own, and how fast.
    pub fn set_compaction_policy(&self, policy: CompactPolicy) {
        self.inner.writes.set_compaction_policy(policy)
    }

    /// Resolves when the log is due for a compaction under the policy (checked after each write).
    pub async fn compaction_due(&self) {
        self.inner.writes.compaction_due().await
    }

    /// Finishes queued writes, flushes and stops the writer. Later `put`s fail with `Closed`.
    pub async fn shutdown(&self) -> Result<(), StoreError> {
        self.inner.writes.shutdown().await
    }

    /// [`Store::shutdown`], then, off the async reactor, a checkpoint of the catalogue: once this
    /// is the last handle on the store, sled is opened once more so that the next start reads
    /// nothing back (see `open::checkpoint`).
    pub async fn close(self, cache_capacity_mb: u64) -> Result<(), StoreError> {
        self.shutdown().await?;
        tokio::task::spawn_blocking(move || open::checkpoint(self.inner, cache_capacity_mb))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))
    }

    /// Runs blocking read work on the blocking pool, off the async reactor.
    async fn off_reactor<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || work(&store)).await.map_err(|e| StoreError::Task(e.to_string()))?
    }

    /// The search index, or why a filter with `search` cannot be answered.
    fn searching(&self) -> Result<&search::Searching, StoreError> {
        self.inner.search.as_deref().ok_or(StoreError::SearchOff)
    }

    fn view(&self) -> RwLockReadGuard<'_, View> {
        self.inner.reader.view.read().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests;
