//! The store's read path: get by id, query and count.
//!
//! Owns planning a filter onto the index list that serves it (`Plan`), walking that list newest
//! first, checking each candidate against the index header (and its record only when tag
//! conditions need it), and rendering the stored JSON. Reads block (a `pread` per record), so
//! async callers use the `*_async` forms, which run on the blocking pool.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use std::sync::RwLock;

use sled::Tree;

use super::catalogue;
use super::index::Key;
use super::plan::{Plan, lists_are_exact};
use super::view::View;
use crate::protocol::{EventId, EventJson, Filter, Timestamp, Viewer};
use crate::store::contract::{Export, ExportPages, Mark};
use crate::store::error::StoreError;
use crate::store::format::log::{Log, LogError};
use crate::store::format::{Serial, keys, record};

/// The read side of one open store: the catalogue, the view, and the damaged records met;
/// cheap to clone.
#[derive(Clone)]
pub(crate) struct Reader {
    pub(crate) tree: Tree,
    pub(crate) view: Arc<RwLock<View>>,
    pub(crate) damaged: Arc<Damaged>,
}

impl Reader {
    /// The view, for a read.
    pub(crate) fn view(&self) -> std::sync::RwLockReadGuard<'_, View> {
        self.view.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The record of a stored event by id.
    pub(super) fn record_by_id(&self, id: &EventId) -> Result<Option<(Serial, Vec<u8>)>, StoreError> {
        let read = {
            let view = self.view();
            let serial = catalogue::get(&self.tree, &view.places, id)?;
            serial.map(|serial| (serial, view.log.read(serial).map_err(StoreError::from)))
        };
        match read {
            Some((serial, stored)) => Ok(self.damaged.served(serial, stored)?.map(|r| (serial, r))),
            None => Ok(None),
        }
    }

    /// One stored event by id, if `viewer` may read it (expired events are not served, nor a
    /// damaged record).
    pub(crate) fn get(&self, id: &EventId, now: Timestamp, viewer: &Viewer) -> Result<Option<EventJson>, StoreError> {
        let Some((serial, stored)) = self.record_by_id(id)? else { return Ok(None) };
        let damaged = &self.damaged;
        let Some(header) = damaged.served(serial, record::header(&stored).map_err(StoreError::from))? else {
            return Ok(None);
        };
        if header.is_expired(now) || !readable(viewer, &header, serial, &stored, damaged)? {
            return Ok(None);
        }
        damaged.served(serial, render(&stored))
    }

    /// `Store::query`, and the [`Mark`] of what the query saw.
    pub(crate) fn query_marked(
        &self,
        filters: &[Filter],
        now: Timestamp,
        viewer: &Viewer,
    ) -> Result<(Vec<EventJson>, Mark), StoreError> {
        let limit_of = |f: &Filter| f.limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
        // The scans see one view; the records are read from its log after the view is let go (a
        // compaction meanwhile replaces the view, and the old log stays open for this read).
        let (hits, log, mark): (Vec<Hit>, _, _) = {
            let view = &*self.view();
            let hits = match filters {
                // One filter's scan is already in order and without repeats.
                [filter] => self.scan(view, filter, limit_of(filter), now, viewer)?,
                _ => {
                    let mut all: BTreeMap<(std::cmp::Reverse<Timestamp>, EventId), Hit> = BTreeMap::new();
                    for filter in filters {
                        for hit in self.scan(view, filter, limit_of(filter), now, viewer)? {
                            all.insert((std::cmp::Reverse(hit.created_at), hit.id), hit);
                        }
                    }
                    all.into_values().collect()
                }
            };
            (hits, view.log.clone(), view.mark)
        };
        Ok((self.rendered(hits, &log)?, mark))
    }

    /// The JSON of `hits`' records, read from `log` where the scan did not read them.
    pub(super) fn rendered(&self, hits: Vec<Hit>, log: &Log) -> Result<Vec<EventJson>, StoreError> {
        let mut out = Vec::with_capacity(hits.len());
        let damaged = &self.damaged;
        for hit in hits {
            // An event removed since the scan is still served: the answer is the store as the
            // scan saw it (its frame stays in the log).
            let stored = match hit.record {
                Some(stored) => Some(stored),
                None => damaged.served(hit.serial, log.read_sized(hit.serial, hit.len).map_err(StoreError::from))?,
            };
            if let Some(json) = stored.map(|r| damaged.served(hit.serial, render(&r))).transpose()?.flatten() {
                out.push(json);
            }
        }
        Ok(out)
    }

    /// How many stored events match any filter (NIP-45); `limit` is ignored. A filter with no
    /// condition besides what names its index lists (and `since`/`until`) is counted from the
    /// lists alone, without reading a record.
    pub(crate) fn count(&self, filters: &[Filter], now: Timestamp, viewer: &Viewer) -> Result<u64, StoreError> {
        self.count_with(HashSet::new(), filters, now, viewer)
    }

    /// [`Reader::count`] of the events in `seen` (of filters counted elsewhere: searches) and
    /// those `filters` match; filters with a `search` are left to that caller.
    pub(super) fn count_with(
        &self,
        mut seen: HashSet<Serial>,
        filters: &[Filter],
        now: Timestamp,
        viewer: &Viewer,
    ) -> Result<u64, StoreError> {
        let view = &*self.view();
        {
            let mut expired = None;
            for filter in filters {
                if filter.search.is_some() {
                    continue;
                }
                match Plan::of(filter) {
                    // A list counts events `viewer` may not read: only a filter that can match
                    // none of those (no private kind, no group withheld) is counted from the
                    // lists alone.
                    Plan::Scan { keys, .. }
                        if !filter.is_empty_set()
                            && lists_are_exact(filter, &keys)
                            && !viewer.private().can_match(filter)
                            && !viewer.screens() =>
                    {
                        let expired = match &mut expired {
                            Some(expired) => expired,
                            None => expired.insert(self.expired_unswept(view, now)?),
                        };
                        for key in &keys {
                            for found in view.index.scan(key, filter.since, filter.until) {
                                let serial = found?.1;
                                if !expired.contains(&serial) {
                                    seen.insert(serial);
                                }
                            }
                        }
                    }
                    _ => {
                        seen.extend(self.scan(view, filter, usize::MAX, now, viewer)?.into_iter().map(|hit| hit.serial))
                    }
                }
            }
            Ok(seen.len() as u64)
        }
    }

    /// The serials of the events that expired at or before `now` and that the sweep has not
    /// removed yet (their `x` entries are still there).
    pub(super) fn expired_unswept(&self, view: &View, now: Timestamp) -> Result<HashSet<Serial>, StoreError> {
        let from = keys::expiry(Timestamp(0), &EventId([0; 32]));
        let to = keys::expiry(now, &EventId([0xff; 32]));
        let mut out = HashSet::new();
        for item in self.tree.range(from..=to) {
            let id = item?.0.get(9..).and_then(|id| id.try_into().ok()).map(EventId);
            let Some(id) = id else { continue };
            if let Some(serial) = catalogue::get(&self.tree, &view.places, &id)? {
                out.insert(serial);
            }
        }
        Ok(out)
    }

    /// Every stored event matching `filter` (its `limit` keeps the newest that many), oldest
    /// first, as a snapshot: which events is fixed now, and each is read as the iterator reaches
    /// it. An event removed meanwhile is still exported (its frame stays in the log), so the
    /// export is the store as it was when it started, while writes go on.
    pub(crate) fn export(&self, filter: &Filter, now: Timestamp) -> Result<Export, StoreError> {
        let limit = filter.limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
        // The export keeps this log open: a compaction meanwhile does not move its records.
        let (hits, log) = {
            let view = &*self.view();
            (self.scan(view, filter, limit, now, &Viewer::everything())?, view.log.clone())
        };
        let mut refs: Vec<(Timestamp, Serial, u32)> =
            hits.into_iter().map(|h| (h.created_at, h.serial, h.len)).collect();
        // Ties in the order they were stored: an import of the export stores them in that order,
        // so exporting the import gives the same lines.
        refs.sort_unstable();
        Ok(Export::paged(Box::new(LogPages { log, refs: refs.into_iter(), damaged: self.damaged.clone() })))
    }

    /// The newest `limit` events of one filter in `view`, in order (ties: lowest id first).
    pub(super) fn scan(
        &self,
        view: &View,
        filter: &Filter,
        limit: usize,
        now: Timestamp,
        viewer: &Viewer,
    ) -> Result<Vec<Hit>, StoreError> {
        if limit == 0 || filter.is_empty_set() {
            return Ok(Vec::new());
        }
        let mut hits = Vec::new();
        let log = &view.log;
        match Plan::of(filter) {
            Plan::Ids(ids) => {
                let check_tags = !filter.tags.is_empty();
                for id in ids {
                    let Some(serial) = catalogue::get(&self.tree, &view.places, &id)? else { continue };
                    // None: a write still in flight, not acknowledged yet.
                    let Some(candidate) = self.candidate(view, serial, 0)? else { continue };
                    if candidate.header.id != id {
                        continue;
                    }
                    hits.extend(hit(filter, viewer, candidate, check_tags, now, log, &self.damaged)?);
                }
            }
            Plan::Scan { keys, check_tags } => {
                for key in &keys {
                    let mut taken = 0;
                    let mut last = None;
                    for found in view.index.scan(key, filter.since, filter.until) {
                        let (at, serial, len) = found?;
                        // Past the limit, only ties of the last time taken can still sort in.
                        if taken >= limit && last != Some(at) {
                            break;
                        }
                        let Some(candidate) = self.candidate(view, serial, len)? else { continue };
                        // A segment's list of a tag may hold another tag's events (a hash
                        // collision): the tags of what it lists are checked.
                        let check = check_tags || (candidate.record.is_some() && matches!(key, Key::Tag(..)));
                        let found = hit(filter, viewer, candidate, check, now, log, &self.damaged)?;
                        let Some(hit) = found else { continue };
                        hits.push(hit);
                        taken += 1;
                        last = Some(at);
                    }
                }
            }
        }
        hits.sort_by_key(|h| (std::cmp::Reverse(h.created_at), h.id));
        hits.dedup_by(|a, b| a.id == b.id);
        hits.truncate(limit);
        Ok(hits)
    }
}

impl Reader {
    /// The header of the event at `serial` in `view`, with its record when that had to be read
    /// for it (the index keeps headers of the in-memory events only; `len` is the record's length
    /// when known, else 0); None when the index does not have it (a write in flight) or its record
    /// is damaged.
    pub(super) fn candidate(&self, view: &View, serial: Serial, len: u32) -> Result<Option<Candidate>, StoreError> {
        if let Some(header) = view.index.header(serial) {
            return Ok(Some(Candidate { serial, header: *header, record: None }));
        }
        if serial >= view.index.covered() {
            return Ok(None);
        }
        let damaged = &self.damaged;
        let read = match len {
            0 => view.log.read(serial),
            len => view.log.read_sized(serial, len),
        };
        let Some(stored) = damaged.served(serial, read.map_err(StoreError::from))? else {
            return Ok(None);
        };
        let Some(header) = damaged.served(serial, record::header(&stored).map_err(StoreError::from))? else {
            return Ok(None);
        };
        Ok(Some(Candidate { serial, header, record: Some(stored) }))
    }
}

/// A stored event's JSON. The record's frame passed its CRC check when it was read, and the
/// record's tags and content were written by serde_json when it was stored.
fn render(stored: &[u8]) -> Result<EventJson, StoreError> {
    Ok(EventJson::written_by_hearth(record::render(stored)?))
}

/// An indexed event a scan met: its header, and its record when that was read for the header.
pub(super) struct Candidate {
    pub(super) serial: Serial,
    pub(super) header: record::Header,
    pub(super) record: Option<Vec<u8>>,
}

/// The damaged records serving has met: each is logged once and skipped, so a reader gets every
/// other event and never garbage (`hearth check` names them, `--repair` drops them).
#[derive(Default)]
pub(crate) struct Damaged(Mutex<HashSet<Serial>>);

impl Damaged {
    /// `read` of the record at `serial`, or None when the record is damaged (its frame fails its
    /// CRC or it does not decode). I/O failures stay errors.
    pub(super) fn served<T>(&self, serial: Serial, read: Result<T, StoreError>) -> Result<Option<T>, StoreError> {
        match read {
            Ok(value) => Ok(Some(value)),
            Err(e @ (StoreError::Log(LogError::Corrupt { .. }) | StoreError::Record(_))) => {
                if self.0.lock().unwrap_or_else(PoisonError::into_inner).insert(serial) {
                    tracing::error!(serial, error = %e, "a damaged record is skipped; run hearth check");
                }
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// The stored event at `serial` as a hit of `filter` for `viewer`, or None when it does not match
/// or `viewer` may not read it: its header is checked first, and its record's tags (`record`, or
/// read from `log`) are decoded only when the filter's tag conditions must be checked or the
/// event is of a private kind by another author.
pub(super) fn hit(
    filter: &Filter,
    viewer: &Viewer,
    candidate: Candidate,
    check_tags: bool,
    now: Timestamp,
    log: &Log,
    damaged: &Damaged,
) -> Result<Option<Hit>, StoreError> {
    let Candidate { serial, header, mut record } = candidate;
    if header.is_expired(now) || !filter.matches_fields(&header.id, &header.pubkey, header.kind, header.created_at) {
        return Ok(None);
    }
    if viewer.refuses_outright(header.kind) || viewer.withholds(&header.id, &header.pubkey) {
        return Ok(None);
    }
    let parties = viewer.needs_tags(header.kind, &header.pubkey);
    if check_tags || parties {
        let read = match record.take() {
            Some(stored) => Ok(stored),
            None => log.read_sized(serial, header.len).map_err(StoreError::from),
        };
        let Some(stored) = damaged.served(serial, read)? else {
            return Ok(None);
        };
        // The header's fields were checked above: only the tags are decoded.
        let Some(tags) = damaged.served(serial, record::tags(&stored).map_err(StoreError::from))? else {
            return Ok(None);
        };
        if (check_tags && !filter.matches_tags(&tags))
            || (parties && !viewer.may_read(header.kind, &header.pubkey, &tags))
        {
            return Ok(None);
        }
        record = Some(stored);
    }
    Ok(Some(Hit { created_at: header.created_at, id: header.id, serial, len: header.len, record }))
}

/// True when `viewer` may read the stored event `stored` (at `serial`, with `header`); its tags
/// are decoded only when that depends on them. A damaged record is not readable.
fn readable(
    viewer: &Viewer,
    header: &record::Header,
    serial: Serial,
    stored: &[u8],
    damaged: &Damaged,
) -> Result<bool, StoreError> {
    if viewer.refuses_outright(header.kind) || viewer.withholds(&header.id, &header.pubkey) {
        return Ok(false);
    }
    if !viewer.needs_tags(header.kind, &header.pubkey) {
        return Ok(true);
    }
    let tags = damaged.served(serial, record::tags(stored).map_err(StoreError::from))?;
    Ok(tags.is_some_and(|tags| viewer.may_read(header.kind, &header.pubkey, &tags)))
}

/// The embedded backend's export: records of one log, in order.
struct LogPages {
    log: Arc<Log>,
    refs: std::vec::IntoIter<(Timestamp, Serial, u32)>,
    damaged: Arc<Damaged>,
}

impl ExportPages for LogPages {
    fn remaining(&self) -> usize {
        self.refs.len()
    }

    fn next_event(&mut self) -> Option<Result<EventJson, StoreError>> {
        loop {
            let (_, serial, len) = self.refs.next()?;
            let read = self.log.read_sized(serial, len).map_err(StoreError::from).and_then(|r| render(&r));
            // A damaged record is left out (logged once); the export goes on with the next.
            match self.damaged.served(serial, read) {
                Ok(None) => continue,
                other => return other.transpose(),
            }
        }
    }
}

/// One event a scan found: its sort key, and its record when the scan already read it.
pub(super) struct Hit {
    pub(super) created_at: Timestamp,
    pub(super) id: EventId,
    pub(super) serial: Serial,
    /// The record's length, from the index.
    len: u32,
    record: Option<Vec<u8>>,
}
