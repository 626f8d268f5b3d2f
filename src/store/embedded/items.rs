//! The negentropy item set (NIP-77): the `(created_at, id)` of every stored event a filter
//! matches and a viewer may read, from the index and the catalogue, without reading the events.
//!
//! Owns answering "which events, as items" for a sync session. A filter its index lists answer
//! exactly (no `ids`, no `limit`, no condition besides the lists it names and `since`/`until`:
//! every event, some kinds, some authors, author × kind pairs, one tag's values) is read from
//! the lists' postings alone: the expired events the sweep has not removed yet and the private
//! kinds' lists are set aside first, and only a private event that an authenticated reader may
//! be a party to has its record read, to check its author and `p` tags. The ids of the newest
//! events are in the in-memory index; the others' come from the catalogue (a walk of its id
//! buckets, when many are wanted) or from their records' first 51 bytes (a few). A segment's
//! list can hold another list's events when the keys' 64-bit hashes collide, which costs a peer
//! one id it then asks for and is refused (COUNT's shortcut takes the same chance). Any other
//! filter is read as a REQ reads it, record by record.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::catalogue::{self, Places};
use super::index::Key;
use super::plan::{Plan, lists_are_exact};
use super::query::{self, Reader};
use crate::protocol::{Filter, Timestamp, Viewer};
use crate::store::contract::Item;
use crate::store::error::StoreError;
use crate::store::format::log::{Log, LogError};
use crate::store::format::{Serial, record};

/// Fewer ids than the store's events divided by this are read from their records; more, from a
/// walk of the catalogue (which reads every bucket once, however few are wanted).
const WALK_FRACTION: usize = 32;

/// How often a walk of the catalogue is tried again when a compaction's swap moved the places it
/// read meanwhile.
const ATTEMPTS: usize = 3;

impl Reader {
    /// The items of `filter` for `viewer`, sorted by created_at then id; None when more than
    /// `max` events match.
    pub(crate) fn items(
        &self,
        filter: &Filter,
        now: Timestamp,
        viewer: &Viewer,
        max: usize,
    ) -> Result<Option<Vec<Item>>, StoreError> {
        if filter.is_empty_set() {
            return Ok(Some(Vec::new()));
        }
        let keys = match Plan::of(filter) {
            // A viewer withheld some groups' events needs each event's tags: read them.
            Plan::Scan { keys, .. }
                if filter.limit.is_none() && lists_are_exact(filter, &keys) && !viewer.screens() =>
            {
                keys
            }
            _ => return self.items_read(filter, now, viewer, max),
        };
        for attempt in 1..=ATTEMPTS {
            match self.items_listed(filter, &keys, now, viewer, max) {
                Err(Moved) if attempt < ATTEMPTS => continue,
                Err(Moved) => break,
                Ok(found) => return found,
            }
        }
        Err(StoreError::Corrupt("the catalogue kept moving under a sync's walk (compactions one after another)".into()))
    }

    /// The items of a filter its lists answer (see the module doc); `Err(Moved)` when a
    /// compaction's swap came between the postings and the catalogue's walk.
    fn items_listed(
        &self,
        filter: &Filter,
        keys: &[Key],
        now: Timestamp,
        viewer: &Viewer,
        max: usize,
    ) -> Result<Result<Option<Vec<Item>>, StoreError>, Moved> {
        let listed = match self.listed(filter, keys, now, viewer, max) {
            Ok(Some(listed)) => listed,
            Ok(None) => return Ok(Ok(None)),
            Err(e) => return Ok(Err(e)),
        };
        let Listed { mut items, unresolved, walk, log, places, generation } = listed;
        // The view is let go: the ids are read from the catalogue or from the log it named.
        let resolved = if walk {
            let walked = self.walk(unresolved, &places, &mut items);
            // A compaction's swap meanwhile renamed the places the walk read: it starts again.
            if self.view().generation != generation {
                return Err(Moved);
            }
            walked
        } else {
            self.read_ids(&log, unresolved, &mut items)
        };
        Ok(resolved.map(|()| {
            items.sort_unstable();
            items.dedup();
            Some(items)
        }))
    }

    /// Under one view: the items whose ids the in-memory index has, the events whose ids are
    /// still to be found, and what finding them needs; None when more than `max` match.
    fn listed(
        &self,
        filter: &Filter,
        keys: &[Key],
        now: Timestamp,
        viewer: &Viewer,
        max: usize,
    ) -> Result<Option<Listed>, StoreError> {
        let view = &*self.view();
        let (since, until) = (filter.since, filter.until);
        let mut skip = self.expired_unswept(view, now)?;
        let mut items: Vec<Item> = Vec::new();
        let check_tags = !filter.tags.is_empty();
        let private = viewer.private().kinds().iter().filter(|k| filter.kinds.as_ref().is_none_or(|ks| ks.contains(k)));
        for kind in private {
            for found in view.index.scan(&Key::Kind(*kind), since, until) {
                let (_, serial, len) = found?;
                if !skip.insert(serial) || viewer.refuses_outright(*kind) {
                    continue;
                }
                // A private event the reader may be a party to: the whole filter and the
                // reader's right are checked against its record.
                let Some(candidate) = self.candidate(view, serial, len)? else { continue };
                let hit = query::hit(filter, viewer, candidate, check_tags, now, &view.log, &self.damaged)?;
                items.extend(hit.map(|h| (h.created_at, h.id)));
            }
        }
        let private_items = items.len();
        let mut seen: HashSet<Serial> = HashSet::new();
        let mut unresolved: Vec<(Serial, Timestamp)> = Vec::new();
        for key in keys {
            for found in view.index.scan(key, since, until) {
                let (at, serial, _) = found?;
                if skip.contains(&serial) || !seen.insert(serial) {
                    continue;
                }
                // Every event seen here is one item (in `items` now or once resolved).
                if private_items + seen.len() > max {
                    return Ok(None);
                }
                match view.index.header(serial) {
                    Some(header) => items.push((header.created_at, header.id)),
                    None => unresolved.push((serial, at)),
                }
            }
        }
        let events = usize::try_from(view.index.events()).unwrap_or(usize::MAX);
        let walk = unresolved.len() > 64 && unresolved.len() > events / WALK_FRACTION;
        let (log, places, generation) = (view.log.clone(), view.places.clone(), view.generation);
        Ok(Some(Listed { items, unresolved, walk, log, places, generation }))
    }

    /// The ids of `unresolved` from a walk of the catalogue, into `items`. An event removed
    /// since the postings were read is not in the catalogue any more: it is left out.
    fn walk(
        &self,
        unresolved: Vec<(Serial, Timestamp)>,
        places: &Places,
        items: &mut Vec<Item>,
    ) -> Result<(), StoreError> {
        let mut wanted: HashMap<Serial, Timestamp> = unresolved.into_iter().collect();
        for entry in catalogue::all(&self.tree, places) {
            let (id, serial) = entry?;
            if let Some(at) = wanted.remove(&serial) {
                items.push((at, id));
            }
        }
        Ok(())
    }

    /// The ids of `unresolved` from their records' first bytes in `log`, into `items`; what is
    /// read there (unchecked by the frame's CRC) is checked against the index's created_at.
    fn read_ids(
        &self,
        log: &Log,
        unresolved: Vec<(Serial, Timestamp)>,
        items: &mut Vec<Item>,
    ) -> Result<(), StoreError> {
        let mut first = [0u8; record::PREFIX];
        for (serial, at) in unresolved {
            let read = log.read_start(serial, &mut first).map_err(StoreError::from);
            if self.damaged.served(serial, read)?.is_none() {
                continue;
            }
            let checked = match record::prefix(&first) {
                Ok((created_at, id)) if created_at == at => Ok(id),
                _ => Err(StoreError::Log(LogError::Corrupt {
                    serial,
                    reason: "its first bytes disagree with the index",
                })),
            };
            if let Some(id) = self.damaged.served(serial, checked)? {
                items.push((at, id));
            }
        }
        Ok(())
    }

    /// The items of any other filter, read as a REQ reads it (its `limit` keeps the newest that
    /// many).
    fn items_read(
        &self,
        filter: &Filter,
        now: Timestamp,
        viewer: &Viewer,
        max: usize,
    ) -> Result<Option<Vec<Item>>, StoreError> {
        let limit = filter.limit.map_or(max.saturating_add(1), |l| usize::try_from(l).unwrap_or(usize::MAX));
        let hits = self.scan(&self.view(), filter, limit, now, viewer)?;
        if hits.len() > max {
            return Ok(None);
        }
        let mut items: Vec<Item> = hits.into_iter().map(|h| (h.created_at, h.id)).collect();
        items.sort_unstable();
        Ok(Some(items))
    }
}

/// A compaction's swap came between reading the postings and walking the catalogue.
struct Moved;

/// What [`Reader::listed`] found under its view.
struct Listed {
    items: Vec<Item>,
    unresolved: Vec<(Serial, Timestamp)>,
    walk: bool,
    log: Arc<Log>,
    places: Places,
    generation: u64,
}
