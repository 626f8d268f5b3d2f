//! Durable event storage in sled: the store's one narrow API.
//!
//! Owns the sled database: events keyed by id, the secondary indexes (see [`keys`]), NIP-09
//! tombstones, NIP-40 expiry, and replaceable/addressable versions. Writes go through one writer
//! thread ([`writer`]) that applies each event and its index entries as one atomic sled batch and
//! shares one flush between every event that arrived meanwhile (group commit): a `put` returns
//! only once its event is on disk. Reads ([`Store::query`], [`Store::count`], [`Store::get`]) are
//! blocking range scans; async callers run them with `spawn_blocking`.
//!
//! It knows nothing of connections, quotas or the wire: a second backend implements these same
//! methods.

pub mod keys;
mod writer;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use crate::protocol::{Event, EventId, Filter, PubKey, Timestamp, VerifiedEvent};
use keys::IndexPrefix;

/// Current on-disk layout version.
const SCHEMA_VERSION: u8 = 1;
/// Pending writes queued for the writer before `put` waits.
const WRITE_QUEUE: usize = 8192;
/// More author × kind pairs than this are scanned by author only.
const MAX_PAIRS: usize = 256;

/// Store failures. Clients only ever see a generic `error:` for these.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// sled reported an I/O or corruption error.
    #[error("storage: {0}")]
    Sled(#[from] sled::Error),
    /// The data directory holds another layout version.
    #[error("storage: data directory has schema version {found}, this hearth reads {SCHEMA_VERSION}")]
    Schema {
        /// The version found on disk.
        found: u8,
    },
    /// A stored record could not be decoded.
    #[error("storage: corrupt record: {0}")]
    Corrupt(String),
    /// The writer has stopped (shutdown or a fatal error).
    #[error("storage: writer is not running")]
    Closed,
    /// A blocking read task panicked or was cancelled.
    #[error("storage: read task failed: {0}")]
    Task(String),
}

/// What happened to an event given to [`Store::put`].
#[derive(Clone, Debug)]
pub enum PutOutcome {
    /// Newly stored and flushed; the JSON is what subscribers are sent.
    Stored(Arc<RawValue>),
    /// The same id is already stored.
    Duplicate,
    /// A newer version of this replaceable / addressable event is stored.
    Superseded,
    /// Its author deleted it (NIP-09 tombstone).
    Deleted,
}

/// Handle to the store; cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    db: sled::Db,
    tree: sled::Tree,
    /// Small named JSON documents (admin overrides, moderation state).
    settings: sled::Tree,
    /// The admin audit log, keyed by a big-endian sequence number.
    audit: sled::Tree,
    tx: mpsc::Sender<writer::WriteOp>,
}

impl Store {
    /// Opens (or creates) the database in `dir` and starts the writer thread.
    pub fn open(dir: &Path, cache_capacity_mb: u64) -> Result<Store, StoreError> {
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(cache_capacity_mb.saturating_mul(1024 * 1024))
            // Writes dominate a relay's storage work; LowSpace compacts more eagerly.
            .mode(sled::Mode::HighThroughput)
            // Every write is flushed by the writer before it is acknowledged.
            .flush_every_ms(None)
            .open()?;
        Store::from_db(db)
    }

    /// An in-memory store for unit tests.
    pub fn temporary() -> Result<Store, StoreError> {
        Store::from_db(sled::Config::new().temporary(true).flush_every_ms(None).open()?)
    }

    fn from_db(db: sled::Db) -> Result<Store, StoreError> {
        let tree = db.open_tree("events_v1")?;
        match tree.get(keys::meta("schema"))? {
            None => {
                tree.insert(keys::meta("schema"), &[SCHEMA_VERSION])?;
                db.flush()?;
            }
            Some(v) if v.as_ref() == [SCHEMA_VERSION] => {}
            Some(v) => return Err(StoreError::Schema { found: v.first().copied().unwrap_or(0) }),
        }
        let settings = db.open_tree("settings_v1")?;
        let audit = db.open_tree("audit_v1")?;
        let (tx, rx) = mpsc::channel(WRITE_QUEUE);
        writer::spawn(db.clone(), tree.clone(), rx)?;
        Ok(Store { inner: Arc::new(Inner { db, tree, settings, audit, tx }) })
    }

    /// Stores a verified event durably, deduplicated by id; NIP-01 replacement and NIP-09
    /// deletion apply. Returns once the outcome is on disk.
    pub async fn put(&self, event: impl Into<Arc<VerifiedEvent>>) -> Result<PutOutcome, StoreError> {
        let (reply, rx) = oneshot::channel();
        let op = writer::WriteOp::Put { event: event.into(), reply };
        self.inner.tx.send(op).await.map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Deletes events whose NIP-40 expiration is at or before `now`; returns how many.
    pub async fn sweep_expired(&self, now: Timestamp) -> Result<usize, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.inner.tx.send(writer::WriteOp::Sweep { now, reply }).await.map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Removes one stored event and its index entries (moderation); true when it was stored.
    pub async fn remove(&self, id: EventId) -> Result<bool, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.inner.tx.send(writer::WriteOp::Remove { id, reply }).await.map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// A named settings document, if saved.
    pub fn load_setting(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.inner.settings.get(name)?.map(|v| v.to_vec()))
    }

    /// Saves a named settings document durably.
    pub async fn save_setting(&self, name: &str, value: Vec<u8>) -> Result<(), StoreError> {
        self.inner.settings.insert(name, value)?;
        self.inner.settings.flush_async().await?;
        Ok(())
    }

    /// Appends one entry to the audit log durably.
    pub async fn append_audit(&self, entry: Vec<u8>) -> Result<(), StoreError> {
        let seq = self.inner.db.generate_id()?;
        self.inner.audit.insert(seq.to_be_bytes(), entry)?;
        self.inner.audit.flush_async().await?;
        Ok(())
    }

    /// The newest `limit` audit entries, newest first.
    pub fn audit_log(&self, limit: usize) -> Result<Vec<Vec<u8>>, StoreError> {
        self.inner.audit.iter().rev().take(limit).map(|item| Ok(item?.1.to_vec())).collect()
    }

    /// Finishes queued writes, flushes and stops the writer. Later `put`s fail with `Closed`.
    pub async fn shutdown(&self) -> Result<(), StoreError> {
        let (reply, rx) = oneshot::channel();
        if self.inner.tx.send(writer::WriteOp::Shutdown { reply }).await.is_err() {
            return Ok(());
        }
        rx.await.map_err(|_| StoreError::Closed)?;
        self.inner.db.flush_async().await?;
        Ok(())
    }

    /// True when an event with this id is stored.
    pub fn contains(&self, id: &EventId) -> Result<bool, StoreError> {
        Ok(self.inner.tree.contains_key(keys::event(id))?)
    }

    /// One stored event by id (expired events are not served).
    pub fn get(&self, id: &EventId, now: Timestamp) -> Result<Option<Arc<RawValue>>, StoreError> {
        match self.inner.tree.get(keys::event(id))? {
            Some(value) => {
                let (expiration, json) = split_value(&value)?;
                if is_expired(expiration, now) {
                    return Ok(None);
                }
                Ok(Some(raw_json(json)?))
            }
            None => Ok(None),
        }
    }

    /// Stored events matching any filter: newest first, ties lowest id first, each filter's
    /// `limit` applied to its own matches (the caller sets and clamps it), no event twice.
    pub fn query(&self, filters: &[Filter], now: Timestamp) -> Result<Vec<Arc<RawValue>>, StoreError> {
        let mut all: BTreeMap<(std::cmp::Reverse<Timestamp>, EventId), sled::IVec> = BTreeMap::new();
        for filter in filters {
            let limit = filter.limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
            for (key, json) in self.scan(filter, limit, now)? {
                all.insert(key, json);
            }
        }
        all.into_values().map(|v| raw_json(&v)).collect()
    }

    /// How many stored events match any filter (NIP-45); `limit` is ignored.
    pub fn count(&self, filters: &[Filter], now: Timestamp) -> Result<u64, StoreError> {
        let mut ids = HashSet::new();
        for filter in filters {
            let unlimited = Filter { limit: None, ..filter.clone() };
            for ((_, id), _) in self.scan(&unlimited, usize::MAX, now)? {
                ids.insert(id);
            }
        }
        Ok(ids.len() as u64)
    }

    /// Runs blocking read work on the blocking pool, off the async reactor.
    async fn off_reactor<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || work(&store)).await.map_err(|e| StoreError::Task(e.to_string()))?
    }

    /// [`Store::query`] off the async reactor.
    pub async fn query_async(&self, filters: Vec<Filter>, now: Timestamp) -> Result<Vec<Arc<RawValue>>, StoreError> {
        self.off_reactor(move |s| s.query(&filters, now)).await
    }

    /// [`Store::count`] off the async reactor.
    pub async fn count_async(&self, filters: Vec<Filter>, now: Timestamp) -> Result<u64, StoreError> {
        self.off_reactor(move |s| s.count(&filters, now)).await
    }

    /// [`Store::get`] off the async reactor.
    pub async fn get_async(&self, id: EventId, now: Timestamp) -> Result<Option<Arc<RawValue>>, StoreError> {
        self.off_reactor(move |s| s.get(&id, now)).await
    }

    /// How many events by `author` are stored.
    pub fn count_by_author(&self, author: &PubKey) -> usize {
        self.inner.tree.scan_prefix(IndexPrefix::Author(*author).bytes()).count()
    }

    /// Bytes the database occupies on disk.
    pub fn size_on_disk(&self) -> Result<u64, StoreError> {
        Ok(self.inner.db.size_on_disk()?)
    }

    /// The newest `limit` events of one filter, in order.
    fn scan(&self, filter: &Filter, limit: usize, now: Timestamp) -> Result<Vec<ScanHit>, StoreError> {
        if limit == 0 || filter.is_empty_set() {
            return Ok(Vec::new());
        }
        let tree = &self.inner.tree;
        let plan = Plan::of(filter);
        let mut hits: BTreeMap<(std::cmp::Reverse<Timestamp>, EventId), sled::IVec> = BTreeMap::new();
        match &plan {
            Plan::Ids(ids) => {
                for id in ids {
                    if let Some(value) = tree.get(keys::event(id))? {
                        let (expiration, json) = split_value(&value)?;
                        if is_expired(expiration, now) {
                            continue;
                        }
                        let event = parse_stored(json)?;
                        if filter.matches(&event) {
                            hits.insert((std::cmp::Reverse(event.created_at), *id), sled::IVec::from(json));
                        }
                    }
                }
            }
            Plan::Scan { prefixes, needs_check } => {
                for prefix in prefixes {
                    let (start, end) = prefix.range(filter.since, filter.until);
                    let mut taken = 0;
                    for item in tree.range(start..=end) {
                        let (index_key, _) = item?;
                        let (at, id) = keys::split_entry(&index_key)
                            .ok_or_else(|| StoreError::Corrupt("short index key".into()))?;
                        let Some(value) = tree.get(keys::event(&id))? else {
                            continue;
                        };
                        let (expiration, json) = split_value(&value)?;
                        if is_expired(expiration, now) {
                            continue;
                        }
                        if *needs_check && !filter.matches(&parse_stored(json)?) {
                            continue;
                        }
                        hits.insert((std::cmp::Reverse(at), id), sled::IVec::from(json));
                        taken += 1;
                        if taken >= limit {
                            break;
                        }
                    }
                }
            }
        }
        Ok(hits.into_iter().take(limit).collect())
    }
}

type ScanHit = ((std::cmp::Reverse<Timestamp>, EventId), sled::IVec);

/// Which index serves a filter, and whether matches must be re-checked against the full filter.
enum Plan {
    Ids(Vec<EventId>),
    Scan { prefixes: Vec<IndexPrefix>, needs_check: bool },
}

impl Plan {
    fn of(f: &Filter) -> Plan {
        if let Some(ids) = &f.ids {
            return Plan::Ids(ids.clone());
        }
        let has_tags = !f.tags.is_empty();
        if let (Some(authors), Some(kinds)) = (&f.authors, &f.kinds)
            && authors.len() * kinds.len() <= MAX_PAIRS
        {
            let prefixes =
                authors.iter().flat_map(|a| kinds.iter().map(move |k| IndexPrefix::AuthorKind(*a, *k))).collect();
            return Plan::Scan { prefixes, needs_check: has_tags };
        }
        if let Some(authors) = &f.authors {
            let prefixes = authors.iter().map(|a| IndexPrefix::Author(*a)).collect();
            return Plan::Scan { prefixes, needs_check: has_tags || f.kinds.is_some() };
        }
        if let Some((letter, values)) = f.tags.iter().min_by_key(|(_, v)| v.len())
            && letter.is_ascii()
        {
            let letter = *letter as u8;
            let prefixes = values.iter().map(|v| IndexPrefix::Tag(letter, v.clone())).collect();
            // Long values are hashed in the key; several tag letters need the others checked.
            let hashed = values.iter().any(|v| v.len() > 64);
            return Plan::Scan { prefixes, needs_check: hashed || f.tags.len() > 1 || f.kinds.is_some() };
        }
        if let Some(kinds) = &f.kinds {
            let prefixes = kinds.iter().map(|k| IndexPrefix::Kind(*k)).collect();
            return Plan::Scan { prefixes, needs_check: has_tags };
        }
        Plan::Scan { prefixes: vec![IndexPrefix::Created], needs_check: has_tags }
    }
}

/// Splits a stored `e` value into its expiration (0 = none) and JSON.
fn split_value(value: &[u8]) -> Result<(u64, &[u8]), StoreError> {
    if value.len() < 8 {
        return Err(StoreError::Corrupt("short event record".into()));
    }
    let (exp, json) = value.split_at(8);
    let exp: [u8; 8] = exp.try_into().map_err(|_| StoreError::Corrupt("short event record".into()))?;
    Ok((u64::from_be_bytes(exp), json))
}

fn is_expired(expiration: u64, now: Timestamp) -> bool {
    expiration != 0 && expiration <= now.0
}

fn parse_stored(json: &[u8]) -> Result<Event, StoreError> {
    let text = std::str::from_utf8(json).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Event::from_json(text).map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn raw_json(json: &[u8]) -> Result<Arc<RawValue>, StoreError> {
    let text = String::from_utf8(json.to_vec()).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    RawValue::from_string(text).map(Arc::from).map_err(|e| StoreError::Corrupt(e.to_string()))
}

#[cfg(test)]
mod tests;
