//! The embedded backend's side of the Store API: what takes more than one call into its parts.
//!
//! Owns these methods of [`Opened`] (sled's catalogue, the event log, the index, the search
//! index): a read with or without `search`, the counts read from the index, an audit entry made
//! durable, the stats, a compaction started in the background.

use std::sync::{PoisonError, RwLockReadGuard};

use super::error::StoreError;
use super::index::Key;
use super::open::Opened;
use super::search;
use super::stats::StoreStats;
use super::view::{Mark, View};
use super::write::compact::LAST_COMPACTION;
use crate::protocol::{EventJson, Filter, PubKey, Timestamp, Viewer};

impl Opened {
    /// `Store::query_as`.
    pub(super) fn query_as(
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
    pub(super) fn count_as(&self, filters: &[Filter], now: Timestamp, viewer: &Viewer) -> Result<u64, StoreError> {
        if filters.iter().any(|f| f.search.is_some()) {
            return self.searching()?.count(&self.reader, filters, now, viewer);
        }
        self.reader.count(filters, now, viewer)
    }

    /// `Store::count_by_author`.
    pub(super) fn count_by_author(&self, author: &PubKey) -> Result<usize, StoreError> {
        self.view().index.len(&Key::Author(*author))
    }

    /// `Store::len`.
    pub(super) fn len(&self) -> usize {
        self.view().index.events() as usize
    }

    /// `Store::append_audit`.
    pub(super) async fn append_audit(&self, entry: Vec<u8>) -> Result<(), StoreError> {
        let seq = self.writes.shared.db.generate_id()?;
        self.audit.insert(seq.to_be_bytes(), entry)?;
        self.writes.flush_off_reactor().await
    }

    /// `Store::stats`.
    pub(super) fn stats(&self) -> Result<StoreStats, StoreError> {
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
    pub(super) fn start_compaction(&self) -> bool {
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
    pub(super) fn searching(&self) -> Result<&search::Searching, StoreError> {
        self.search.as_deref().ok_or(StoreError::SearchOff)
    }

    pub(super) fn view(&self) -> RwLockReadGuard<'_, View> {
        self.reader.view.read().unwrap_or_else(PoisonError::into_inner)
    }
}
