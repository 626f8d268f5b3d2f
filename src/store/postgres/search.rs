//! NIP-50 on the PostgreSQL backend: a search index on the node's disk, rebuilt from the shared
//! database at open and kept by this node's writes and the events other nodes' writes bring.
//!
//! Owns [`PgSearch`]: the index (`<data_dir>/search`, the same tantivy index the embedded backend
//! keeps) and its feed thread; the rebuild's source (every stored event of the indexed kinds,
//! read in pages of `seq`); and the read path of a filter with `search`: the index ranks, and
//! every id it names is read from the database and checked as any query's row is (still stored,
//! not expired, the filter's other conditions, the viewer's read rules), so an index behind or
//! ahead of the database never serves what the database does not hold.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use deadpool_postgres::Pool;
use tokio::runtime::Handle;

use super::error::PgError;
use super::export::block;
use super::read::{self, Hit};
use crate::protocol::search::{SearchQuery, parse};
use crate::protocol::{Event, EventId, EventJson, Filter, Timestamp, Viewer};
use crate::search::{CatchUp, Change, Feed, Position, SearchIndex, SearchState, Source};
use crate::store::contract::{SEARCH_DIR, SearchTuning};
use crate::store::error::StoreError;

/// Rows a rebuild reads at once.
const REBUILD_PAGE: i64 = 1000;

/// The node's search index over the shared database.
pub(crate) struct PgSearch {
    pub(crate) index: Arc<SearchIndex>,
    pub(crate) feed: Arc<Feed>,
}

impl PgSearch {
    /// Opens the index in `dir` and rebuilds it in the background from every stored event.
    pub(super) fn open(dir: &Path, tuning: &SearchTuning, pool: Pool, handle: Handle) -> Result<PgSearch, StoreError> {
        let memory = usize::try_from(tuning.memory_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
        let failed = |e: crate::search::SearchError| StoreError::Search(e.to_string());
        let index = Arc::new(SearchIndex::open(&dir.join(SEARCH_DIR), memory).map_err(failed)?.holding(&tuning.kinds));
        let kinds: Vec<i32> = tuning.kinds.iter().map(|k| i32::from(k.0)).collect();
        // A database with nothing to index: an empty index is in step at once (no rebuild for a
        // search to wait on).
        let (asking, wanted) = (pool.clone(), kinds.clone());
        let empty = block(&handle, async move {
            let client = asking.get().await.map_err(PgError::from)?;
            let row =
                client.query_one("SELECT NOT EXISTS (SELECT 1 FROM events WHERE kind = ANY($1))", &[&wanted]).await?;
            Ok::<bool, PgError>(row.get(0))
        })??;
        let catch_up = if empty {
            index.clear().map_err(failed)?;
            None
        } else {
            let source: Source = Box::new(move |apply| rebuild(&pool, &handle, &kinds, apply));
            Some(CatchUp { from_scratch: true, source })
        };
        let feed =
            Feed::start(index.clone(), Position::default(), tuning.kinds.clone(), catch_up).map_err(StoreError::Io)?;
        Ok(PgSearch { index, feed: Arc::new(feed) })
    }

    /// Queues changes of the index (of a write, here or on another node).
    pub(super) fn send(&self, changes: Vec<Change>) {
        let changes: Vec<Change> = changes
            .into_iter()
            .filter(|c| match c {
                Change::Add(event) => self.feed.wants(event.kind),
                Change::Remove(_) => true,
            })
            .collect();
        self.feed.send(changes, None);
    }

    /// `filter`'s search parsed (None: it finds nothing), if the index can answer.
    fn parsed(&self, filter: &Filter) -> Result<Option<SearchQuery>, StoreError> {
        match self.feed.state() {
            SearchState::Ready => {}
            SearchState::Building { events } => return Err(StoreError::SearchBuilding { events }),
            SearchState::Failed { reason } => return Err(StoreError::Search(reason)),
        }
        Ok(filter.search.as_deref().and_then(|text| parse(text, usize::MAX).ok()))
    }

    /// The events of a filter with `search` that `viewer` may read, most relevant first, at most
    /// its `limit`: the index is asked page by page until that many are found or it has no more.
    pub(super) async fn search<C: tokio_postgres::GenericClient>(
        &self,
        client: &C,
        filter: &Filter,
        now: Timestamp,
        viewer: &Viewer,
    ) -> Result<Vec<Hit>, StoreError> {
        let Some(query) = self.parsed(filter)? else { return Ok(Vec::new()) };
        let limit = read::limit_of(filter);
        let page = limit.saturating_mul(2).clamp(32, 1000);
        let (mut hits, mut seen, mut skip) = (Vec::new(), HashSet::new(), 0);
        while hits.len() < limit {
            let found = self.index.search(&query, filter, skip, page).map_err(|e| StoreError::Search(e.to_string()))?;
            let ids: Vec<EventId> = found.iter().map(|f| f.id).filter(|id| seen.insert(*id)).collect();
            let mut held = self.checked(client, filter, ids.clone(), now, viewer).await?;
            for id in ids {
                if let Some(hit) = held.remove(&id) {
                    hits.push(hit);
                    if hits.len() == limit {
                        break;
                    }
                }
            }
            if found.len() < page {
                break;
            }
            skip += page;
        }
        Ok(hits)
    }

    /// Every event a search of `filter` finds that `viewer` may read (NIP-45), as seqs.
    pub(super) async fn all<C: tokio_postgres::GenericClient>(
        &self,
        client: &C,
        filter: &Filter,
        now: Timestamp,
        viewer: &Viewer,
    ) -> Result<HashSet<i64>, StoreError> {
        let Some(query) = self.parsed(filter)? else { return Ok(HashSet::new()) };
        let ids = self.index.all(&query, filter).map_err(|e| StoreError::Search(e.to_string()))?;
        let mut seqs = HashSet::new();
        for chunk in ids.chunks(1000) {
            seqs.extend(self.checked(client, filter, chunk.to_vec(), now, viewer).await?.into_values().map(|h| h.seq));
        }
        Ok(seqs)
    }

    /// The ids the index named that the database holds and `viewer` may read within `filter`;
    /// an id it no longer holds is removed from the index.
    async fn checked<C: tokio_postgres::GenericClient>(
        &self,
        client: &C,
        filter: &Filter,
        ids: Vec<EventId>,
        now: Timestamp,
        viewer: &Viewer,
    ) -> Result<std::collections::HashMap<EventId, Hit>, StoreError> {
        if ids.is_empty() {
            return Ok(Default::default());
        }
        let asked = Filter { ids: Some(ids.clone()), search: None, limit: None, ..filter.clone() };
        let hits = read::scan(client, &asked, now, viewer, usize::MAX, usize::MAX).await?;
        let held: std::collections::HashMap<EventId, Hit> = hits.into_iter().map(|h| (h.id, h)).collect();
        let present = read::present(client, &ids).await?;
        let gone: Vec<Change> = ids.iter().filter(|id| !present.contains(id)).map(|id| Change::Remove(*id)).collect();
        if !gone.is_empty() {
            self.feed.forget(gone, None);
        }
        Ok(held)
    }
}

/// The rebuild's source: every stored event of `kinds`, in pages of `seq`.
fn rebuild(
    pool: &Pool,
    handle: &Handle,
    kinds: &[i32],
    apply: &mut dyn FnMut(Change) -> bool,
) -> Result<Position, String> {
    let mut after = 0i64;
    loop {
        let (pool, kinds) = (pool.clone(), kinds.to_vec());
        let page = block(handle, async move {
            let client = pool.get().await.map_err(PgError::from)?;
            let select = "SELECT seq, json FROM events WHERE kind = ANY($1) AND seq > $2 ORDER BY seq LIMIT $3";
            let rows = client.query(select, &[&kinds, &after, &REBUILD_PAGE]).await?;
            Ok::<_, PgError>(rows.iter().map(|r| (r.get::<_, i64>(0), r.get::<_, String>(1))).collect::<Vec<_>>())
        })
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        let Some((last, _)) = page.last() else { return Ok(Position::default()) };
        after = *last;
        for (_, json) in &page {
            if let Ok(event) = Event::from_json(json)
                && !apply(Change::Add(event))
            {
                return Err("stopped".into());
            }
        }
    }
}

/// `Store::query_as` of filters of which some search: each searching filter's events most
/// relevant first, in the filters' order, then the others' newest first, no event twice.
pub(super) async fn query(
    search: &PgSearch,
    client: &tokio_postgres::Client,
    filters: &[Filter],
    now: Timestamp,
    viewer: &Viewer,
) -> Result<Vec<EventJson>, StoreError> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for filter in filters.iter().filter(|f| f.search.is_some()) {
        for hit in search.search(client, filter, now, viewer).await? {
            if seen.insert(hit.id) {
                out.push(EventJson::written_by_hearth(hit.json));
            }
        }
    }
    let plain: Vec<Filter> = filters.iter().filter(|f| f.search.is_none()).cloned().collect();
    if !plain.is_empty() {
        let shown: HashSet<String> = out.iter().map(|e| e.as_str().to_string()).collect();
        let rest = read::query(client, &plain, now, viewer).await?;
        out.extend(rest.into_iter().filter(|e| !shown.contains(e.as_str())));
    }
    Ok(out)
}

/// `Store::count_as` (NIP-45) of filters of which some search.
pub(super) async fn count(
    search: &PgSearch,
    client: &tokio_postgres::Client,
    filters: &[Filter],
    now: Timestamp,
    viewer: &Viewer,
) -> Result<u64, StoreError> {
    let mut seqs = HashSet::new();
    for filter in filters {
        match filter.search {
            Some(_) => seqs.extend(search.all(client, filter, now, viewer).await?),
            None => {
                let all = Filter { limit: None, ..filter.clone() };
                seqs.extend(
                    read::scan(client, &all, now, viewer, usize::MAX, usize::MAX).await?.into_iter().map(|h| h.seq),
                );
            }
        }
    }
    Ok(seqs.len() as u64)
}
