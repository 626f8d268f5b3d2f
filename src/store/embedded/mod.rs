//! The embedded backend: sled's catalogue, the event log and its secondary indexes, in the data
//! directory (the default). It implements the Store contract (`store/mod.rs`) with the same
//! method names as `postgres/`, one dispatch line per method; it imports the contract's types
//! (`store::contract`) and the shared floors below (error, format, db, media, progress), never
//! PostgreSQL's.
//!
//! Owns these methods of [`Opened`]: each Store call sent to the part that answers it (the
//! reader, the writer, the audit tree), and what takes more than one call into those parts (a
//! read with or without `search`, the counts read from the index, an audit entry made durable,
//! the stats, a compaction started in the background). Its floors, top to bottom:
//!
//! ```text
//! open        opening a data directory: layouts converted, the log's tail replayed, the index opened
//! write/      the writer thread and its group commit, the NIP-01/09/40 rules, compaction, remap, merges
//! migrate     older layouts carried out and converted
//! search      NIP-50: the search index opened beside the store, caught up, and read
//! items       NIP-77's item sets, read from the index
//! query       the read path: a filter planned onto an index list, records read and rendered
//! view · plan what a read sees together (index, log, places); which lists answer a filter
//! index/      the secondary indexes: the in-memory part, the segments, the merge of both
//! catalogue   which events are stored and where their records are (sled's id buckets, read)
//! ```

pub(crate) mod catalogue;
pub mod index;
mod items;
pub(crate) mod migrate;
pub(crate) mod open;
mod plan;
mod query;
mod search;
mod view;
pub(crate) mod write;

use std::sync::{Arc, PoisonError, RwLockReadGuard};

use self::index::Key;
use self::open::Opened;
use self::view::View;
use self::write::compact::LAST_COMPACTION;
use crate::protocol::{Event, EventId, EventJson, Filter, PubKey, Timestamp, VerifiedEvent, Viewer};
use crate::store::contract::{CompactPolicy, Compacted, Export, Item, Mark, PutOutcome, StoreStats};
use crate::store::error::StoreError;
use crate::store::media::MediaRecords;

impl Opened {
    /// "sled".
    pub(crate) fn backend_name(&self) -> &'static str {
        "sled"
    }

    /// One node's alone.
    pub(crate) fn is_shared(&self) -> bool {
        false
    }

    pub(crate) async fn put(&self, event: Arc<VerifiedEvent>) -> Result<PutOutcome, StoreError> {
        self.writes.put(event).await
    }

    pub(crate) async fn sweep_expired(&self, now: Timestamp) -> Result<usize, StoreError> {
        self.writes.sweep_expired(now).await
    }

    pub(crate) async fn remove(&self, id: EventId) -> Result<bool, StoreError> {
        self.writes.remove(id).await
    }

    /// No other node stores events here.
    pub(crate) fn arrived(&self, _event: &Event) -> Option<Mark> {
        None
    }

    /// No other node stores events here: nothing to catch up with.
    pub(crate) async fn stored_since(&self, _since: f64, _max: i64) -> Result<Option<Vec<EventJson>>, StoreError> {
        Ok(None)
    }

    pub(crate) fn get_as(
        &self,
        id: &EventId,
        now: Timestamp,
        viewer: &Viewer,
    ) -> Result<Option<EventJson>, StoreError> {
        self.reader.get(id, now, viewer)
    }

    pub(crate) fn export(&self, filter: &Filter, now: Timestamp) -> Result<Export, StoreError> {
        self.reader.export(filter, now)
    }

    pub(crate) fn items(
        &self,
        filter: &Filter,
        now: Timestamp,
        viewer: &Viewer,
        max: usize,
    ) -> Result<Option<Vec<Item>>, StoreError> {
        self.reader.items(filter, now, viewer, max)
    }

    pub(crate) async fn contains(&self, id: &EventId) -> Result<bool, StoreError> {
        catalogue::contains(&self.reader.tree, id)
    }

    pub(crate) fn load_setting(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.writes.load_setting(name)
    }

    pub(crate) fn settings(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.writes.settings()
    }

    pub(crate) async fn save_setting(&self, name: &str, value: Vec<u8>) -> Result<(), StoreError> {
        self.writes.save_setting(name, value).await
    }

    pub(crate) fn media(&self) -> &MediaRecords {
        &self.media
    }

    /// One node's store: no records are shared with another.
    pub(crate) fn shared_media(&self) -> Option<&MediaRecords> {
        None
    }

    pub(crate) fn audit_log(&self, limit: usize) -> Result<Vec<Vec<u8>>, StoreError> {
        self.audit.iter().rev().take(limit).map(|item| Ok(item?.1.to_vec())).collect()
    }

    pub(crate) async fn compact(&self) -> Result<Compacted, StoreError> {
        self.writes.compact().await
    }

    pub(crate) fn is_compacting(&self) -> bool {
        self.writes.is_compacting()
    }

    pub(crate) async fn until_compaction_ends(&self) -> Result<(), StoreError> {
        self.writes.until_compaction_ends().await
    }

    pub(crate) fn set_compaction_policy(&self, policy: CompactPolicy) {
        self.writes.set_compaction_policy(policy)
    }

    pub(crate) async fn compaction_due(&self) {
        self.writes.compaction_due().await
    }

    pub(crate) async fn shutdown(&self) -> Result<(), StoreError> {
        self.writes.shutdown().await
    }

    /// The embedded store's check reads its files (`check::check`), not through the API.
    pub(crate) async fn check_database(&self) -> Result<Option<(u64, Vec<crate::store::contract::Flaw>)>, StoreError> {
        Ok(None)
    }

    /// A checkpoint of the catalogue once this is the last handle (see `open::checkpoint`).
    pub(crate) fn checkpoint(self: Arc<Self>, cache_capacity_mb: u64) -> Result<(), StoreError> {
        open::checkpoint(self, cache_capacity_mb);
        Ok(())
    }

    /// The search index and its feed, when the store keeps one.
    pub(crate) fn search_parts(&self) -> Option<(&Arc<crate::search::SearchIndex>, &Arc<crate::search::Feed>)> {
        self.search.as_deref().map(|s| (&s.index, &s.feed))
    }

    /// `Store::query_as`.
    pub(crate) fn query_as(
        &self,
        filters: &[Filter],
        now: Timestamp,
        viewer: &Viewer,
    ) -> Result<(Vec<EventJson>, Mark), StoreError> {
        if filters.iter().any(|f| f.search.is_some()) {
            return self.searching()?.query(&self.reader, filters, now, viewer);
        }
        self.reader.query_marked(filters, now, viewer)
    }

    /// `Store::count_as`.
    pub(crate) fn count_as(&self, filters: &[Filter], now: Timestamp, viewer: &Viewer) -> Result<u64, StoreError> {
        if filters.iter().any(|f| f.search.is_some()) {
            return self.searching()?.count(&self.reader, filters, now, viewer);
        }
        self.reader.count(filters, now, viewer)
    }

    /// `Store::query_async`: `None`, as every read here blocks (the store runs it on the
    /// blocking pool).
    pub(crate) async fn query_async(
        &self,
        _: &[Filter],
        _: Timestamp,
        _: &Viewer,
    ) -> Option<Result<(Vec<EventJson>, Mark), StoreError>> {
        None
    }

    /// `Store::count_async`: `None`, as [`Opened::query_async`].
    pub(crate) async fn count_async(&self, _: &[Filter], _: Timestamp, _: &Viewer) -> Option<Result<u64, StoreError>> {
        None
    }

    /// `Store::get_async`: `None`, as [`Opened::query_async`].
    pub(crate) async fn get_async(
        &self,
        _: &EventId,
        _: Timestamp,
        _: &Viewer,
    ) -> Option<Result<Option<EventJson>, StoreError>> {
        None
    }

    /// `Store::count_by_author`.
    pub(crate) fn count_by_author(&self, author: &PubKey) -> Result<usize, StoreError> {
        self.view().index.len(&Key::Author(*author))
    }

    /// `Store::len`.
    pub(crate) fn len(&self) -> usize {
        self.view().index.events() as usize
    }

    /// `Store::append_audit`.
    pub(crate) async fn append_audit(&self, entry: Vec<u8>) -> Result<(), StoreError> {
        let seq = self.writes.shared.db.generate_id()?;
        self.audit.insert(seq.to_be_bytes(), entry)?;
        self.writes.flush_off_reactor().await
    }

    /// `Store::stats`.
    pub(crate) fn stats(&self) -> Result<StoreStats, StoreError> {
        let (events, live_bytes, log_bytes, log_generation, segments, segment_bytes) = {
            let view = self.view();
            let index = &view.index;
            (index.events(), index.live_bytes(), view.log.end(), view.generation, index.segments(), index.disk_bytes())
        };
        let last_compaction = match self.writes.load_setting(LAST_COMPACTION)? {
            Some(bytes) => serde_json::from_slice(&bytes).ok(),
            None => None,
        };
        Ok(StoreStats {
            events,
            live_bytes,
            dead_bytes: log_bytes.saturating_sub(live_bytes),
            log_bytes,
            index_bytes: self.writes.shared.db.size_on_disk()? + segment_bytes,
            index_segments: segments,
            log_generation,
            compacting: self.writes.is_compacting(),
            last_compaction,
            backend: "sled",
        })
    }

    /// `Store::start_compaction`.
    pub(crate) fn start_compaction(&self) -> bool {
        let Some(running) = self.writes.claim() else { return false };
        let writes = self.writes.clone();
        tokio::spawn(async move {
            match writes.compact_claimed(running).await {
                Err(StoreError::Closed) if writes.stopping() => {
                    tracing::info!("the store stopped during a compaction; the next start finishes or drops it");
                }
                Err(e) => tracing::error!(error = %e, "compaction failed"),
                Ok(_) => {}
            }
        });
        true
    }

    /// The search index, or why a filter with `search` cannot be answered.
    pub(crate) fn searching(&self) -> Result<&search::Searching, StoreError> {
        self.search.as_deref().ok_or(StoreError::SearchOff)
    }

    pub(crate) fn view(&self) -> RwLockReadGuard<'_, View> {
        self.reader.view.read().unwrap_or_else(PoisonError::into_inner)
    }
}
