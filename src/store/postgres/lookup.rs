//! The PostgreSQL handle's reads: the store's blocking forms (waited for on the calling thread)
//! and its async forms, awaited on the backend's own runtime from any runtime (no blocking
//! thread between: a REQ is one hop there and one back). A search still runs on the blocking
//! pool: the index's reads block.
//!
//! Owns nothing but these methods of `Pg`; the SQL is `read`'s, the search `search`'s.

use super::{Pg, read, search};
use crate::protocol::{EventId, EventJson, Filter, Timestamp, Viewer};
use crate::store::contract::Mark;
use crate::store::error::StoreError;

impl Pg {
    pub(crate) fn query_as(
        &self,
        filters: &[Filter],
        now: Timestamp,
        viewer: &Viewer,
    ) -> Result<(Vec<EventJson>, Mark), StoreError> {
        let (filters, viewer) = (filters.to_vec(), viewer.clone());
        if filters.iter().any(|f| f.search.is_some()) {
            let search = self.search.clone().ok_or(StoreError::SearchOff)?;
            let events =
                self.blocking_with(move |c| async move { search::query(&search, &c, &filters, now, &viewer).await })?;
            // The index runs up to a commit behind: a subscription is sent every live event after.
            return Ok((events, Mark::default()));
        }
        let mark = self.mark();
        let events = self.blocking(move |c| async move { read::query(&**c, &filters, now, &viewer).await })?;
        Ok((events, mark))
    }

    pub(crate) fn count_as(&self, filters: &[Filter], now: Timestamp, viewer: &Viewer) -> Result<u64, StoreError> {
        let (filters, viewer) = (filters.to_vec(), viewer.clone());
        if filters.iter().any(|f| f.search.is_some()) {
            let search = self.search.clone().ok_or(StoreError::SearchOff)?;
            return self
                .blocking_with(move |c| async move { search::count(&search, &c, &filters, now, &viewer).await });
        }
        self.blocking(move |c| async move { read::count(&**c, &filters, now, &viewer).await })
    }

    pub(crate) fn get_as(
        &self,
        id: &EventId,
        now: Timestamp,
        viewer: &Viewer,
    ) -> Result<Option<EventJson>, StoreError> {
        let (id, viewer) = (*id, viewer.clone());
        self.blocking(move |c| async move { read::get(&**c, &id, now, &viewer).await })
    }

    pub(crate) fn items(
        &self,
        filter: &Filter,
        now: Timestamp,
        viewer: &Viewer,
        max: usize,
    ) -> Result<Option<Vec<(Timestamp, EventId)>>, StoreError> {
        let (filter, viewer) = (filter.clone(), viewer.clone());
        self.blocking(move |c| async move { read::items(&**c, &filter, now, &viewer, max).await })
    }

    /// [`Pg::query_as`] awaited on the backend's runtime; `None` for a search (its index's reads
    /// block: the store runs it on the blocking pool).
    pub(crate) async fn query_async(
        &self,
        filters: &[Filter],
        now: Timestamp,
        viewer: &Viewer,
    ) -> Option<Result<(Vec<EventJson>, Mark), StoreError>> {
        if searches(filters) {
            return None;
        }
        let (filters, viewer) = (filters.to_vec(), viewer.clone());
        let mark = self.mark();
        let events = self.run(move |c| async move { read::query(&**c, &filters, now, &viewer).await }).await;
        Some(events.map(|events| (events, mark)))
    }

    /// [`Pg::count_as`] awaited on the backend's runtime; `None` for a search.
    pub(crate) async fn count_async(
        &self,
        filters: &[Filter],
        now: Timestamp,
        viewer: &Viewer,
    ) -> Option<Result<u64, StoreError>> {
        if searches(filters) {
            return None;
        }
        let (filters, viewer) = (filters.to_vec(), viewer.clone());
        Some(self.run(move |c| async move { read::count(&**c, &filters, now, &viewer).await }).await)
    }

    /// [`Pg::get_as`] awaited on the backend's runtime.
    pub(crate) async fn get_async(
        &self,
        id: &EventId,
        now: Timestamp,
        viewer: &Viewer,
    ) -> Option<Result<Option<EventJson>, StoreError>> {
        let (id, viewer) = (*id, viewer.clone());
        Some(self.run(move |c| async move { read::get(&**c, &id, now, &viewer).await }).await)
    }
}

/// Whether any of `filters` is a NIP-50 search.
fn searches(filters: &[Filter]) -> bool {
    filters.iter().any(|f| f.search.is_some())
}
