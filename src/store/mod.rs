//! Durable event storage: the store's one narrow API.
//!
//! Owns the data directory: the event log ([`log`], `events.log`), whose frames hold the event
//! records ([`record`]) and are the store's journal; the sled database, which holds the catalogue
//! (an id entry as each event's identity, NIP-09 tombstones, NIP-40 expiry, replaceable and
//! addressable versions; layout in [`keys`]) and the settings and audit trees; and the in-memory
//! secondary indexes ([`index`]) derived from them. Writes go through one writer thread
//! (`writer`) that commits every write that arrived meanwhile with one sync of the log (group
//! commit): a `put` returns only once its event is on disk, and opening the store replays what
//! sled had not yet made durable. Reads ([`Store::query`], [`Store::count`], [`Store::get`]) scan
//! the index and `pread` records; they block, so async callers run them with `spawn_blocking`.
//!
//! It knows nothing of connections, quotas or the wire: a second backend implements these same
//! methods.

mod durable;
pub mod index;
pub mod keys;
pub mod log;
pub mod record;
mod writer;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::protocol::{EventId, EventJson, Filter, PubKey, Timestamp, VerifiedEvent};
use durable::Durable;
use index::{Index, Key, Serial};
use log::Log;

/// Current on-disk layout version.
const SCHEMA_VERSION: u8 = 3;
/// The tree of this layout; older layouts lived in other trees.
const EVENTS_TREE: &str = "events_v3";
/// The trees of older layouts, with their versions.
const OLD_TREES: [(&str, u8); 2] = [("events_v1", 1), ("events_v2", 2)];
/// Pending writes queued for the writer before `put` waits.
const WRITE_QUEUE: usize = 4096;
/// How long [`Store::open`] waits for a just-closed database's file lock.
const LOCK_WAIT: Duration = Duration::from_secs(2);
/// How often it tries meanwhile.
const LOCK_RETRY: Duration = Duration::from_millis(20);
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
    /// A stored event record could not be decoded.
    #[error("storage: corrupt {0}")]
    Record(#[from] record::RecordError),
    /// The event log failed or holds a damaged frame.
    #[error("storage: {0}")]
    Log(#[from] log::LogError),
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
    /// Newly stored and durable.
    Stored,
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
    /// Syncs what sled flushed (`None` for a temporary store).
    durable: Option<Arc<Durable>>,
    /// The event records.
    log: Arc<Log>,
    tx: mpsc::Sender<writer::WriteOp>,
    /// The secondary indexes; written by the writer thread only.
    index: Arc<RwLock<Index>>,
}

impl Store {
    /// Opens (or creates) the database in `dir` and starts the writer thread.
    pub fn open(dir: &Path, cache_capacity_mb: u64) -> Result<Store, StoreError> {
        let config = sled::Config::new()
            .path(dir)
            .cache_capacity(cache_capacity_mb.saturating_mul(1024 * 1024))
            // Writes dominate a relay's storage work; LowSpace compacts more eagerly.
            .mode(sled::Mode::HighThroughput)
            // Every write is flushed by the writer before it is acknowledged.
            .flush_every_ms(None);
        // sled's I/O threads can hold a closed database's file lock for a moment after its last
        // handle is dropped (seen when the same process reopens the directory at once); another
        // process holding it still fails, after this wait.
        let mut waited = Duration::ZERO;
        let db = loop {
            match config.open() {
                Err(e) if lock_busy(&e) && waited < LOCK_WAIT => {
                    std::thread::sleep(LOCK_RETRY);
                    waited += LOCK_RETRY;
                }
                other => break other?,
            }
        };
        let durable = Durable::open(dir).map_err(|e| StoreError::Sled(sled::Error::Io(e)))?;
        Store::from_db(db, Some(Arc::new(durable)), |committed| Log::open(dir, committed))
    }

    /// An in-memory store for unit tests.
    pub fn temporary() -> Result<Store, StoreError> {
        let db = sled::Config::new().temporary(true).flush_every_ms(None).open()?;
        Store::from_db(db, None, |_| Ok(Log::memory()))
    }

    /// The store over an open database; `open_log` opens the event log at its committed end.
    fn from_db(
        db: sled::Db,
        durable: Option<Arc<Durable>>,
        open_log: impl FnOnce(u64) -> Result<Log, log::LogError>,
    ) -> Result<Store, StoreError> {
        let names = db.tree_names();
        if let Some((_, found)) = OLD_TREES.iter().find(|(tree, _)| names.iter().any(|n| n.as_ref() == tree.as_bytes()))
        {
            return Err(StoreError::Schema { found: *found });
        }
        let tree = db.open_tree(EVENTS_TREE)?;
        match tree.get(keys::meta("schema"))? {
            None => {
                tree.insert(keys::meta("schema"), &[SCHEMA_VERSION])?;
                db.flush()?;
            }
            Some(v) if v.as_ref() == [SCHEMA_VERSION] => {}
            Some(v) => return Err(StoreError::Schema { found: v.first().copied().unwrap_or(0) }),
        }
        let committed = match tree.get(keys::meta(keys::LOG_END))? {
            Some(v) => writer::decode_serial(&v)?,
            None => 0,
        };
        let log = Arc::new(open_log(committed)?);
        let tail = log.recover_tail()?;
        if !tail.is_empty() {
            let started = std::time::Instant::now();
            let frames = writer::replay(&tree, &log, &tail)?;
            flush_durably(&db, durable.as_deref())?;
            tracing::info!(frames, ms = started.elapsed().as_millis() as u64, "replayed the event log after a crash");
        }
        let index = Arc::new(RwLock::new(rebuild_index(&tree, &log)?));
        let settings = db.open_tree("settings_v1")?;
        let audit = db.open_tree("audit_v1")?;
        let (tx, rx) = mpsc::channel(WRITE_QUEUE);
        let w = writer::Writer {
            db: db.clone(),
            tree: tree.clone(),
            index: index.clone(),
            log: log.clone(),
            durable: durable.clone(),
        };
        writer::spawn(w, rx)?;
        Ok(Store { inner: Arc::new(Inner { db, tree, settings, audit, durable, log, tx, index }) })
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
        self.flush_durably().await
    }

    /// Appends one entry to the audit log durably.
    pub async fn append_audit(&self, entry: Vec<u8>) -> Result<(), StoreError> {
        let seq = self.inner.db.generate_id()?;
        self.inner.audit.insert(seq.to_be_bytes(), entry)?;
        self.flush_durably().await
    }

    /// [`flush_durably`] off the async reactor.
    async fn flush_durably(&self) -> Result<(), StoreError> {
        self.off_reactor(|s| Ok(flush_durably(&s.inner.db, s.inner.durable.as_deref())?)).await
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
        self.flush_durably().await
    }

    /// True when an event with this id is stored.
    pub fn contains(&self, id: &EventId) -> Result<bool, StoreError> {
        Ok(self.inner.tree.contains_key(keys::id(id))?)
    }

    /// The record of a stored event by id.
    fn record_by_id(&self, id: &EventId) -> Result<Option<Vec<u8>>, StoreError> {
        match self.inner.tree.get(keys::id(id))? {
            Some(serial) => Ok(Some(self.inner.log.read(writer::decode_serial(&serial)?)?)),
            None => Ok(None),
        }
    }

    /// One stored event by id (expired events are not served).
    pub fn get(&self, id: &EventId, now: Timestamp) -> Result<Option<EventJson>, StoreError> {
        match self.record_by_id(id)? {
            Some(stored) if !record::header(&stored)?.is_expired(now) => Ok(Some(render(&stored)?)),
            _ => Ok(None),
        }
    }

    /// Stored events matching any filter: newest first, ties lowest id first, each filter's
    /// `limit` applied to its own matches (the caller sets and clamps it), no event twice.
    pub fn query(&self, filters: &[Filter], now: Timestamp) -> Result<Vec<EventJson>, StoreError> {
        let limit_of = |f: &Filter| f.limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
        let hits: Vec<Hit> = match filters {
            // One filter's scan is already in order and without repeats.
            [filter] => self.scan(filter, limit_of(filter), now)?,
            _ => {
                let mut all: BTreeMap<(std::cmp::Reverse<Timestamp>, EventId), Hit> = BTreeMap::new();
                for filter in filters {
                    for hit in self.scan(filter, limit_of(filter), now)? {
                        all.insert((std::cmp::Reverse(hit.created_at), hit.id), hit);
                    }
                }
                all.into_values().collect()
            }
        };
        let mut out = Vec::with_capacity(hits.len());
        for hit in hits {
            // An event removed since the scan is still served: the answer is the store as the
            // scan saw it (its frame stays in the log).
            let stored = match hit.record {
                Some(stored) => stored,
                None => self.inner.log.read_sized(hit.serial, hit.len)?,
            };
            out.push(render(&stored)?);
        }
        Ok(out)
    }

    /// How many stored events match any filter (NIP-45); `limit` is ignored.
    pub fn count(&self, filters: &[Filter], now: Timestamp) -> Result<u64, StoreError> {
        let mut ids = HashSet::new();
        for filter in filters {
            for hit in self.scan(filter, usize::MAX, now)? {
                ids.insert(hit.id);
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
    pub async fn query_async(&self, filters: Vec<Filter>, now: Timestamp) -> Result<Vec<EventJson>, StoreError> {
        self.off_reactor(move |s| s.query(&filters, now)).await
    }

    /// [`Store::count`] off the async reactor.
    pub async fn count_async(&self, filters: Vec<Filter>, now: Timestamp) -> Result<u64, StoreError> {
        self.off_reactor(move |s| s.count(&filters, now)).await
    }

    /// [`Store::get`] off the async reactor.
    pub async fn get_async(&self, id: EventId, now: Timestamp) -> Result<Option<EventJson>, StoreError> {
        self.off_reactor(move |s| s.get(&id, now)).await
    }

    /// How many events by `author` are stored.
    pub fn count_by_author(&self, author: &PubKey) -> usize {
        self.index().len(&Key::Author(*author))
    }

    /// How many events are stored.
    pub fn len(&self) -> usize {
        self.index().events()
    }

    /// True when no event is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the database and the event log occupy on disk.
    pub fn size_on_disk(&self) -> Result<u64, StoreError> {
        let log = self.inner.log.size().map_err(log::LogError::Io)?;
        Ok(self.inner.db.size_on_disk()? + log)
    }

    fn index(&self) -> std::sync::RwLockReadGuard<'_, Index> {
        self.inner.index.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The newest `limit` events of one filter, in order (ties: lowest id first).
    fn scan(&self, filter: &Filter, limit: usize, now: Timestamp) -> Result<Vec<Hit>, StoreError> {
        if limit == 0 || filter.is_empty_set() {
            return Ok(Vec::new());
        }
        let mut hits = Vec::new();
        match Plan::of(filter) {
            Plan::Ids(ids) => {
                let check_tags = !filter.tags.is_empty();
                for id in ids {
                    let Some(serial) = self.inner.tree.get(keys::id(&id))? else { continue };
                    let serial = writer::decode_serial(&serial)?;
                    // Not yet in the index: a write still in flight, not acknowledged yet.
                    let Some(header) = self.index().header(serial).copied() else { continue };
                    hits.extend(self.hit(filter, serial, &header, check_tags, now)?);
                }
            }
            Plan::Scan { keys, check_tags } => {
                let index = self.index();
                for key in &keys {
                    let mut taken = 0;
                    let mut last = None;
                    for (at, serial) in index.scan(key, filter.since, filter.until) {
                        // Past the limit, only ties of the last time taken can still sort in.
                        if taken >= limit && last != Some(at) {
                            break;
                        }
                        let Some(header) = index.header(serial) else { continue };
                        let Some(hit) = self.hit(filter, serial, header, check_tags, now)? else { continue };
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

    /// The stored event at `serial` as a hit of `filter`, or None when it does not match: its
    /// index header is checked first, and its record is read and decoded only when the filter's
    /// tag conditions must be checked.
    fn hit(
        &self,
        filter: &Filter,
        serial: Serial,
        header: &record::Header,
        check_tags: bool,
        now: Timestamp,
    ) -> Result<Option<Hit>, StoreError> {
        if header.is_expired(now) || !filter.matches_fields(&header.id, &header.pubkey, header.kind, header.created_at)
        {
            return Ok(None);
        }
        let mut record = None;
        if check_tags {
            let stored = self.inner.log.read_sized(serial, header.len)?;
            if !filter.matches(&record::decode(&stored)?) {
                return Ok(None);
            }
            record = Some(stored);
        }
        Ok(Some(Hit { created_at: header.created_at, id: header.id, serial, len: header.len, record }))
    }
}

/// One event a scan found: its sort key, and its record when the scan already read it.
struct Hit {
    created_at: Timestamp,
    id: EventId,
    serial: Serial,
    /// The record's length, from the index.
    len: u32,
    record: Option<Vec<u8>>,
}

/// Which index list serves a filter, and whether the filter's tag conditions must be checked
/// against the record (authors, kinds, times and expiry are checked from the index).
enum Plan {
    Ids(Vec<EventId>),
    Scan { keys: Vec<Key>, check_tags: bool },
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
            let keys = authors.iter().flat_map(|a| kinds.iter().map(move |k| Key::AuthorKind(*a, *k))).collect();
            return Plan::Scan { keys, check_tags: has_tags };
        }
        if let Some(authors) = &f.authors {
            return Plan::Scan { keys: authors.iter().map(|a| Key::Author(*a)).collect(), check_tags: has_tags };
        }
        if let Some((letter, values)) = f.tags.iter().min_by_key(|(_, v)| v.len())
            && letter.is_ascii()
        {
            let letter = *letter as u8;
            let keys = values.iter().map(|v| Key::Tag(letter, v.as_str().into())).collect();
            return Plan::Scan { keys, check_tags: f.tags.len() > 1 };
        }
        if let Some(kinds) = &f.kinds {
            return Plan::Scan { keys: kinds.iter().map(|k| Key::Kind(*k)).collect(), check_tags: has_tags };
        }
        Plan::Scan { keys: vec![Key::All], check_tags: has_tags }
    }
}

/// Reads every stored event's record into a fresh index. An event is stored while its `i`
/// entry exists; its frames are read in log order.
fn rebuild_index(tree: &sled::Tree, log: &Log) -> Result<Index, StoreError> {
    let started = std::time::Instant::now();
    let mut serials = Vec::new();
    for item in tree.scan_prefix([keys::ID]) {
        serials.push(writer::decode_serial(&item?.1)?);
    }
    serials.sort_unstable();
    let mut index = Index::default();
    for serial in serials {
        let stored = log.read(serial)?;
        let header = record::header(&stored)?;
        index.insert(serial, header, index::keys_of(&header, &record::tags(&stored)?));
    }
    tracing::info!(events = index.events(), ms = started.elapsed().as_millis() as u64, "index rebuilt");
    Ok(index)
}

/// sled's error for a data directory whose file lock is held (it has no error kind of its own).
fn lock_busy(e: &sled::Error) -> bool {
    matches!(e, sled::Error::Io(io) if io.to_string().starts_with("could not acquire lock"))
}

/// sled's flush, then the data sync that makes it durable (see [`durable`]; a temporary store
/// has nothing to sync). The writer and the settings/audit paths both end their writes here.
fn flush_durably(db: &sled::Db, durable: Option<&Durable>) -> Result<(), sled::Error> {
    db.flush()?;
    durable.map_or(Ok(()), |d| d.sync().map_err(sled::Error::Io))
}

/// A stored event's JSON. The record's frame passed its CRC check when it was read, and the
/// record's tags and content were written by serde_json when it was stored.
fn render(stored: &[u8]) -> Result<EventJson, StoreError> {
    Ok(EventJson::written_by_hearth(record::render(stored)?))
}

#[cfg(test)]
mod tests;
