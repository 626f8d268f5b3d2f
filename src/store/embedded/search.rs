//! The store's side of NIP-50: its search index opened beside it, caught up with it, and read.
//!
//! Owns [`Searching`] (the index and the feed thread that writes it, as one open store holds
//! them), deciding at open whether the index is in step, behind (caught up from the event log's
//! frames after its position) or unusable (rebuilt from every stored event), and the read path
//! of a filter with `search`: the index ranks, and every event it names is read from the store
//! and checked as any query's candidate is (still stored, not expired, the filter's tag
//! conditions, the viewer's read rules), so an index that is behind or ahead of the store after
//! a crash never serves an event the store does not have. An id the store no longer holds is
//! removed from the index as it is met.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use sled::Tree;

use super::catalogue;
use super::query::{Candidate, Hit, Reader, hit};
use crate::protocol::search::{SearchQuery, parse};
use crate::protocol::{EventId, EventJson, Filter, Kind, Timestamp, Viewer};
use crate::search::{CatchUp, Change, Feed, Position, SearchIndex, SearchState, Source};
use crate::store::contract::{Mark, SEARCH_DIR, SearchTuning};
use crate::store::error::StoreError;
use crate::store::format::Serial;
use crate::store::format::log::{FRAME_HEADER, Log};
use crate::store::format::record;

/// The search index of one open store and the thread that writes it.
pub(crate) struct Searching {
    pub(crate) index: Arc<SearchIndex>,
    pub(crate) feed: Arc<Feed>,
}

/// What a rebuild or catch-up reads: the store's catalogue and event log up to `end`.
struct Frames {
    tree: Tree,
    log: Arc<Log>,
    from: Serial,
    end: Serial,
    kinds: Vec<Kind>,
    position: Position,
}

impl Frames {
    /// Each frame from `from` to `end`: a record of an indexed kind still stored is added, one no
    /// longer stored removed (replaced or deleted since), a moderation removal removed; a
    /// deletion's `e` targets no longer stored are removed too.
    fn read(self, apply: &mut dyn FnMut(Change) -> bool) -> Result<Position, String> {
        let mut apply = |change| if apply(change) { Ok(()) } else { Err("stopped".to_string()) };
        let mut at = self.from;
        while at < self.end {
            let frame = match self.log.read(at) {
                Ok(frame) => frame,
                Err(e) => {
                    tracing::warn!(serial = at, error = %e, "a damaged record is left out of the search index");
                    let Some(len) = self.log.claimed_len(at) else { break };
                    at += FRAME_HEADER + len;
                    continue;
                }
            };
            at += FRAME_HEADER + frame.len() as u64;
            if let Some(id) = super::write::replay::removed_by(&frame) {
                apply(Change::Remove(id))?;
                continue;
            }
            if frame.first() != Some(&record::FORMAT) {
                continue;
            }
            let Ok(event) = record::decode(&frame) else { continue };
            let held = |id: &EventId| catalogue::contains(&self.tree, id).map_err(|e| e.to_string());
            if event.kind == Kind::DELETION {
                for target in event.tags.iter().filter(|t| t.first().is_some_and(|n| n == "e")) {
                    if let Some(id) = target.get(1).and_then(|hex| EventId::from_hex(hex))
                        && !held(&id)?
                    {
                        apply(Change::Remove(id))?;
                    }
                }
            }
            if self.kinds.contains(&event.kind) {
                match held(&event.id)? {
                    true => apply(Change::Add(event))?,
                    false => apply(Change::Remove(event.id))?,
                }
            }
        }
        Ok(self.position)
    }
}

/// Opens the search index in `dir` beside a store whose log (of `generation`) is `log`, and
/// starts its feed: caught up from its position when it is behind in the same generation,
/// rebuilt from every stored event when it is missing, of another version, generation or set of
/// kinds, or ahead of the store (a store restored from a backup).
pub(crate) fn open(
    dir: &Path,
    tuning: &SearchTuning,
    tree: &Tree,
    log: &Arc<Log>,
    generation: u64,
) -> Result<Searching, StoreError> {
    let memory = usize::try_from(tuning.memory_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
    let path = dir.join(SEARCH_DIR);
    let index = match SearchIndex::open(&path, memory) {
        Ok(index) => index,
        // The index is derived from the store: one that cannot be read is built again.
        Err(e) => {
            tracing::warn!(error = %e, "the search index cannot be opened; it is rebuilt");
            std::fs::remove_dir_all(&path)?;
            SearchIndex::open(&path, memory).map_err(search_failed)?
        }
    };
    let index = Arc::new(index.holding(&tuning.kinds));
    let now = Position { generation, end: log.end() };
    let held = index.position().map_err(search_failed)?;
    let from = match held {
        Some(at) if at == now => None,
        // A new store: nothing to read.
        None if now.end == 0 => None,
        Some(at) if at.generation == generation && at.end < now.end => Some((at.end, false)),
        _ => Some((0, true)),
    };
    let catch_up = from.map(|(from, from_scratch)| {
        if from_scratch {
            tracing::info!("the search index is missing or out of date: it is rebuilt in the background");
        } else {
            tracing::info!(
                bytes = now.end - from,
                "the search index is behind the store: it catches up in the background"
            );
        }
        let frames = Frames {
            tree: tree.clone(),
            log: log.clone(),
            from,
            end: now.end,
            kinds: tuning.kinds.clone(),
            position: now,
        };
        let source: Source = Box::new(move |apply| frames.read(apply));
        CatchUp { from_scratch, source }
    });
    // In step: the position is the store's (a new index of a new store too, committed with the
    // first change).
    let at = if catch_up.is_none() { now } else { held.unwrap_or_default() };
    let feed = Feed::start(index.clone(), at, tuning.kinds.clone(), catch_up).map_err(StoreError::Io)?;
    Ok(Searching { index, feed: Arc::new(feed) })
}

fn search_failed(e: crate::search::SearchError) -> StoreError {
    StoreError::Search(e.to_string())
}

impl Searching {
    /// `Store::query_as` of filters of which some search: each searching filter's events most
    /// relevant first, in the filters' order, then the others' newest first, no event twice.
    /// Its mark is the first: the index runs up to a commit interval behind the store, so a
    /// subscription is sent every live event after its query.
    pub(crate) fn query(
        &self,
        reader: &Reader,
        filters: &[Filter],
        now: Timestamp,
        viewer: &Viewer,
    ) -> Result<(Vec<EventJson>, Mark), StoreError> {
        let mut hits = Vec::new();
        for filter in filters.iter().filter(|f| f.search.is_some()) {
            hits.extend(self.search(reader, filter, now, viewer)?);
        }
        let log = reader.view().log.clone();
        // One filter's hits are already without repeats; several filters may find one event.
        let mut seen = HashSet::new();
        hits.retain(|hit| seen.insert(hit.id));
        let mut out = reader.rendered(hits, &log)?;
        let plain: Vec<Filter> = filters.iter().filter(|f| f.search.is_none()).cloned().collect();
        if !plain.is_empty() {
            let (rest, _) = reader.query_marked(&plain, now, viewer)?;
            let shown: HashSet<&str> = out.iter().map(EventJson::as_str).collect();
            let rest: Vec<EventJson> = rest.into_iter().filter(|e| !shown.contains(e.as_str())).collect();
            out.extend(rest);
        }
        Ok((out, Mark::default()))
    }

    /// `Store::count_as` of filters of which some search (NIP-45).
    pub(crate) fn count(
        &self,
        reader: &Reader,
        filters: &[Filter],
        now: Timestamp,
        viewer: &Viewer,
    ) -> Result<u64, StoreError> {
        let mut seen = HashSet::new();
        for filter in filters.iter().filter(|f| f.search.is_some()) {
            let Some(query) = self.parsed(filter)? else { continue };
            for id in self.index.all(&query, filter).map_err(search_failed)? {
                if let Some(hit) = self.checked(reader, filter, &id, now, viewer)? {
                    seen.insert(hit.serial);
                }
            }
        }
        let plain: Vec<Filter> = filters.iter().filter(|f| f.search.is_none()).cloned().collect();
        reader.count_with(seen, &plain, now, viewer)
    }

    /// The events of `filter` (which has a `search`) that `viewer` may read, most relevant
    /// first, at most its `limit`: the index is asked page by page until that many are found
    /// in the store or it has no more.
    fn search(
        &self,
        reader: &Reader,
        filter: &Filter,
        now: Timestamp,
        viewer: &Viewer,
    ) -> Result<Vec<Hit>, StoreError> {
        let Some(query) = self.parsed(filter)? else { return Ok(Vec::new()) };
        let limit = filter.limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
        let page = limit.saturating_mul(2).clamp(32, 1000);
        let mut hits = Vec::new();
        let mut seen = HashSet::new();
        let mut skip = 0;
        while hits.len() < limit {
            let found = self.index.search(&query, filter, skip, page).map_err(search_failed)?;
            for f in found.iter().filter(|f| seen.insert(f.id)) {
                if let Some(hit) = self.checked(reader, filter, &f.id, now, viewer)? {
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

    /// `filter`'s search parsed (None: it finds nothing), if the index can answer.
    fn parsed(&self, filter: &Filter) -> Result<Option<SearchQuery>, StoreError> {
        match self.feed.state() {
            SearchState::Ready => {}
            SearchState::Building { events } => return Err(StoreError::SearchBuilding { events }),
            SearchState::Failed { reason } => return Err(StoreError::Search(reason)),
        }
        // The length limit is the caller's (it was checked before the store was asked).
        Ok(filter.search.as_deref().and_then(|text| parse(text, usize::MAX).ok()))
    }

    /// The event `id` the index found, as a hit of `filter` for `viewer`; an id the store no
    /// longer holds is removed from the index.
    fn checked(
        &self,
        reader: &Reader,
        filter: &Filter,
        id: &EventId,
        now: Timestamp,
        viewer: &Viewer,
    ) -> Result<Option<Hit>, StoreError> {
        let Some((serial, stored)) = reader.record_by_id(id)? else {
            self.feed.forget(vec![Change::Remove(*id)], None);
            return Ok(None);
        };
        let Some(header) = reader.damaged.served(serial, record::header(&stored).map_err(StoreError::from))? else {
            return Ok(None);
        };
        let candidate = Candidate { serial, header, record: Some(stored) };
        let log = reader.view().log.clone();
        hit(filter, viewer, candidate, !filter.tags.is_empty(), now, &log, &reader.damaged)
    }
}
