//! Durable event storage: the store's one narrow API.
//!
//! Owns the data directory: the event log ([`log`], `events.log`), whose frames hold the event
//! records ([`record`]) and are the store's journal; the sled database, which holds the catalogue
//! (an id entry as each event's identity, NIP-09 tombstones, NIP-40 expiry, replaceable and
//! addressable versions; layout in [`keys`]) and the settings and audit trees; and the secondary
//! indexes derived from them (`indexes`: [`segment`] files for most events, [`index`] in memory
//! for the newest). Writes go through one writer thread
//! (`writer`) that commits every write that arrived meanwhile with one sync of the log (group
//! commit): a `put` returns only once its event is on disk, and opening the store replays what
//! sled had not yet made durable. Reads ([`Store::query`], [`Store::count`], [`Store::get`]) scan
//! the index and `pread` records; they block, so async callers run them with `spawn_blocking`.
//!
//! It knows nothing of connections, quotas or the wire: a second backend implements these same
//! methods.

mod apply;
pub mod catalogue;
mod check;
mod compact;
mod durable;
pub mod index;
mod indexes;
pub mod keys;
pub mod log;
mod merger;
pub mod migrate;
mod pending;
mod query;
pub mod record;
pub mod remap;
pub mod segment;
mod writer;

pub use check::{Checked, Problem, Repaired, check, repair};
pub use compact::{CompactPolicy, Compacted, compact};
pub use query::Export;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::protocol::{EventId, EventJson, PubKey, Timestamp, VerifiedEvent};
use durable::Durable;
use index::{Key, Serial};
use indexes::Indexes;
use log::Log;

/// Current on-disk layout version.
pub const SCHEMA_VERSION: u8 = 5;
/// The tree of this layout (and of layout 3, converted in place); older layouts lived in other
/// trees.
const EVENTS_TREE: &str = "events_v3";
/// Small named JSON documents (admin overrides, moderation state, the last compaction).
const SETTINGS_TREE: &str = "settings_v1";
/// The trees of older layouts, with their versions.
const OLD_TREES: [(&str, u8); 2] = [("events_v1", 1), ("events_v2", 2)];
/// Pending writes queued for the writer before `put` waits.
const WRITE_QUEUE: usize = 4096;
/// How long [`Store::open`] waits for a just-closed database's file lock.
const LOCK_WAIT: Duration = Duration::from_secs(2);
/// How often it tries meanwhile.
const LOCK_RETRY: Duration = Duration::from_millis(20);
/// How often a long start-up step logs its progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(3);
/// More author × kind pairs than this are scanned by author only.
const MAX_PAIRS: usize = 256;

/// Store failures. Clients only ever see a generic `error:` for these.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// sled reported an I/O or corruption error.
    #[error("storage: {0}")]
    Sled(#[from] sled::Error),
    /// Another process (a running relay) holds the data directory.
    #[error("data directory {} is in use by a running hearth", path.display())]
    InUse {
        /// The data directory.
        path: std::path::PathBuf,
    },
    /// The data directory holds another layout version.
    #[error(
        "storage: data directory has schema version {found}, this hearth reads {SCHEMA_VERSION}: run `hearth migrate` to carry its events over"
    )]
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
    /// A file of the data directory could not be opened or synced.
    #[error("storage: {0}")]
    Io(#[from] std::io::Error),
    /// The write group this write belonged to did not reach the disk (shared by its writes).
    #[error(transparent)]
    Group(Arc<StoreError>),
    /// The writer has stopped (shutdown or a fatal error).
    #[error("storage: writer is not running")]
    Closed,
    /// A blocking read task panicked or was cancelled.
    #[error("storage: read task failed: {0}")]
    Task(String),
    /// The data directory's files could not be opened or created.
    #[error("storage: data directory {}: cannot open it: {source}", path.display())]
    Open {
        /// The data directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A migration wrote the old layout's events out and has not imported them yet.
    #[error("storage: a migration of {} is unfinished: run `hearth migrate` again", path.display())]
    Migrating {
        /// The data directory.
        path: PathBuf,
    },
    /// An index segment could not be written, or is damaged.
    #[error("storage: {0}")]
    Segment(#[from] segment::SegmentError),
    /// The event log has reached the largest size the index can address (256 TiB).
    #[error("storage: the event log is full")]
    LogFull,
    /// A compaction was asked for while one runs.
    #[error("storage: a compaction is already running")]
    Compacting,
    /// The remap that a cut-off compaction left could not go on (the relay retries it while it
    /// serves; an offline command stops).
    #[error("storage: the rewrite of the catalogue that a cut-off compaction left failed: {0}")]
    Remap(String),
}

impl StoreError {
    /// An I/O failure while opening `dir`, named with the directory (a bare `Permission denied`
    /// says nothing of where).
    fn opening(self, dir: &Path) -> StoreError {
        let path = dir.to_path_buf();
        match self {
            StoreError::Io(source)
            | StoreError::Sled(sled::Error::Io(source))
            | StoreError::Log(log::LogError::Io(source)) => StoreError::Open { path, source },
            other => other,
        }
    }
}

/// What happened to an event given to [`Store::put`].
#[derive(Clone, Debug)]
pub enum PutOutcome {
    /// Newly stored and durable, readable from the mark given.
    Stored(Mark),
    /// The same id is already stored.
    Duplicate,
    /// A newer version of this replaceable / addressable event is stored.
    Superseded,
    /// Its author deleted it (NIP-09 tombstone).
    Deleted,
}

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

pub use indexes::MEM_EVENTS as INDEX_MEMORY_EVENTS;

/// How a store is opened (`[storage]` settings).
#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    /// sled's page cache, MiB.
    pub cache_capacity_mb: u64,
    /// Events the in-memory part of the index holds before they are written out as a segment.
    pub index_memory_events: usize,
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
    /// The data directory (`None` for a temporary store, whose log is in memory).
    dir: Option<PathBuf>,
    tx: mpsc::Sender<writer::WriteOp>,
    /// The index and the log its serials point into; changed by the writer thread only.
    view: Arc<RwLock<View>>,
    /// Whether a compaction runs, and when one is due.
    compaction: Arc<compact::Control>,
    /// The damaged records serving has skipped.
    damaged: Arc<query::Damaged>,
}

/// What a read sees together: the secondary indexes, the event log file their serials (and the
/// catalogue's `i` entries) point into, and how those entries read. A compaction replaces them
/// at once, so a reader that holds a view, or a clone of its log, reads consistent records
/// however long it takes.
pub(in crate::store) struct View {
    pub(super) index: Indexes,
    pub(super) log: Arc<Log>,
    /// Which file the log is (see [`log::file_name`]).
    pub(super) generation: u64,
    /// How the catalogue's stored places read in this generation.
    pub(super) places: remap::Places,
    /// The mark of the last group made visible (see [`Mark`]).
    pub(super) mark: Mark,
}

/// Where in the order of visibility an event became readable, or a query looked: the writer
/// counts up with each group it makes visible. A query that returns mark `w` saw every event
/// stored with a mark ≤ `w` (and matching it), and none stored later; so a subscription's live
/// delivery can leave out the events its own query already answered (see `ws::session`). It is
/// an in-memory count, not a place: it survives a compaction and starts again at each open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Mark(u64);

impl Mark {
    /// The mark after this one.
    fn next(self) -> Mark {
        Mark(self.0 + 1)
    }
}

impl Store {
    /// Opens (or creates) the database in `dir` and starts the writer thread.
    pub fn open(dir: &Path, cache_capacity_mb: u64) -> Result<Store, StoreError> {
        Store::open_tuned(dir, Tuning { cache_capacity_mb, index_memory_events: INDEX_MEMORY_EVENTS })
    }

    /// [`Store::open`] with every setting.
    pub fn open_tuned(dir: &Path, tuning: Tuning) -> Result<Store, StoreError> {
        if dir.join(migrate::PENDING).exists() {
            return Err(StoreError::Migrating { path: dir.to_path_buf() });
        }
        Store::open_migrating(dir, tuning).map_err(|e| e.opening(dir))
    }

    /// [`Store::open`] of a directory whose migration is unfinished: for the import that
    /// finishes it.
    pub(crate) fn open_migrating(dir: &Path, tuning: Tuning) -> Result<Store, StoreError> {
        let started = std::time::Instant::now();
        let db = {
            // sled reads back everything written since its last open: seconds after a long run.
            let _progress = Progress::every_few_seconds("opening the catalogue (sled)");
            open_db(dir, tuning.cache_capacity_mb)?
        };
        tracing::info!(ms = started.elapsed().as_millis() as u64, "catalogue open");
        let durable = Durable::open(dir)?;
        let open_log = |name: &str, committed| Log::open(dir, name, committed);
        let store = Store::from_db(db, Some(Arc::new(durable)), Some((dir, tuning.index_memory_events)), open_log)?;
        log::remove_other_generations(dir, &log::file_name(store.view().generation))?;
        Ok(store)
    }

    /// An in-memory store for unit tests.
    pub fn temporary() -> Result<Store, StoreError> {
        let db = sled::Config::new().temporary(true).flush_every_ms(None).open()?;
        Store::from_db(db, None, None, |_, _| Ok(Log::memory()))
    }

    /// The store over an open database; `open_log` opens the event log file of its generation
    /// at its committed end. `dir` is the data directory and the in-memory index's size (none for a
    /// temporary store).
    fn from_db(
        db: sled::Db,
        durable: Option<Arc<Durable>>,
        dir: Option<(&Path, usize)>,
        open_log: impl FnOnce(&str, u64) -> Result<Log, log::LogError>,
    ) -> Result<Store, StoreError> {
        if let Some((_, found)) = migrate::found(&db) {
            return Err(StoreError::Schema { found });
        }
        let tree = db.open_tree(EVENTS_TREE)?;
        match tree.get(keys::meta("schema"))? {
            None => {
                tree.insert(keys::meta("schema"), &[SCHEMA_VERSION])?;
                db.flush()?;
            }
            Some(v) if v.as_ref() == [SCHEMA_VERSION] => {}
            Some(v) if v.as_ref() == [3] || v.as_ref() == [4] => {
                let started = std::time::Instant::now();
                tracing::info!(layout = v[0], "converting the data directory to layout {SCHEMA_VERSION}");
                let ids = migrate::convert(&tree, v[0])?;
                flush_durably(&db, durable.as_deref())?;
                tracing::info!(
                    ids,
                    ms = started.elapsed().as_millis() as u64,
                    "the data directory has layout {SCHEMA_VERSION} now"
                );
            }
            Some(v) => return Err(StoreError::Schema { found: v.first().copied().unwrap_or(0) }),
        }
        let (places, remap) = remap::load(&tree, dir.map(|(dir, _)| dir))?;
        if let Some((dir, _)) = dir {
            // Moves files no remap names: a compaction's that failed, or one's that finished.
            remap::remove_stale(dir, remap.map(|r| r.generation))?;
        }
        let committed = meta_u64(&tree, keys::LOG_END)?;
        let log_generation = meta_u64(&tree, keys::LOG_GEN)?;
        let log = Arc::new(open_log(&log::file_name(log_generation), committed)?);
        let tail = log.recover_tail()?;
        if !tail.is_empty() {
            tracing::info!(frames = tail.len(), "replaying the event log after a crash");
            let started = std::time::Instant::now();
            let _progress = Progress::every_few_seconds("replaying the event log");
            let frames = writer::replay(&tree, &log, &tail, &places)?;
            flush_durably(&db, durable.as_deref())?;
            tracing::info!(frames, ms = started.elapsed().as_millis() as u64, "replayed the event log after a crash");
        }
        let (index, changed) = Indexes::open(&tree, &log, dir, log_generation, &places)?;
        let dir = dir.map(|(dir, _)| dir);
        if changed {
            flush_durably(&db, durable.as_deref())?;
        }
        if let Some(remap) = &remap {
            tracing::info!(
                buckets_done = remap.cursor,
                old_segments = index.old_segments(),
                "a compaction's rewrite of the catalogue and the index is unfinished; it goes on in the background"
            );
        }
        let view =
            Arc::new(RwLock::new(View { index, log, generation: log_generation, places, mark: Mark::default() }));
        let settings = db.open_tree(SETTINGS_TREE)?;
        let audit = db.open_tree("audit_v1")?;
        let (tx, rx) = mpsc::channel(WRITE_QUEUE);
        let compaction = Arc::new(compact::Control::default());
        if remap.is_some() {
            // The compaction that left it is still running, as far as anyone asking is concerned.
            compaction.resume();
        }
        let dir = dir.map(Path::to_path_buf);
        let w = writer::Writer {
            db: db.clone(),
            tree: tree.clone(),
            view: view.clone(),
            durable: durable.clone(),
            dir: dir.clone(),
            compaction: compaction.clone(),
        };
        writer::spawn(w, rx, remap)?;
        let damaged = Arc::default();
        let inner = Inner { db, tree, settings, audit, durable, dir, tx, view, compaction, damaged };
        Ok(Store { inner: Arc::new(inner) })
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
        self.off_reactor(|s| flush_durably(&s.inner.db, s.inner.durable.as_deref())).await
    }

    /// The newest `limit` audit entries, newest first.
    pub fn audit_log(&self, limit: usize) -> Result<Vec<Vec<u8>>, StoreError> {
        self.inner.audit.iter().rev().take(limit).map(|item| Ok(item?.1.to_vec())).collect()
    }

    /// Finishes queued writes, flushes and stops the writer. Later `put`s fail with `Closed`.
    pub async fn shutdown(&self) -> Result<(), StoreError> {
        self.inner.compaction.stopping.store(true, Ordering::Release);
        let (reply, rx) = oneshot::channel();
        if self.inner.tx.send(writer::WriteOp::Shutdown { reply }).await.is_err() {
            return Ok(());
        }
        rx.await.map_err(|_| StoreError::Closed)?;
        self.flush_durably().await
    }

    /// [`Store::shutdown`], then, off the async reactor, a checkpoint of the catalogue: once this
    /// is the last handle on the store, sled is opened once more so that the next start reads
    /// nothing back (see `checkpoint`).
    pub async fn close(self, cache_capacity_mb: u64) -> Result<(), StoreError> {
        self.shutdown().await?;
        tokio::task::spawn_blocking(move || self.checkpoint(cache_capacity_mb))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))
    }

    /// Once this is the last handle on the store (after [`Store::shutdown`]), closes it and
    /// opens its sled database once more. sled 0.34 writes the snapshot of its page table only
    /// when it opens, and an open reads back everything written since the previous one (seconds
    /// after a long ingest; README, Store size), so a stop that does this leaves the next start
    /// nothing to read back: the wait moves from the start, when clients are refused, to the
    /// stop. Returns without it (logged) while another handle is held, for a temporary store,
    /// or when the open fails (the next start then reads back as before).
    fn checkpoint(self, cache_capacity_mb: u64) {
        let Some(inner) = Arc::into_inner(self.inner) else {
            tracing::debug!("the store is still in use: no checkpoint of the catalogue at this stop");
            return;
        };
        let Some(dir) = inner.dir.clone() else { return };
        drop(inner);
        let started = std::time::Instant::now();
        let opened = {
            let _progress = Progress::every_few_seconds("checkpointing the catalogue (sled)");
            open_db(&dir, cache_capacity_mb)
        };
        match opened {
            Ok(db) => {
                drop(db);
                tracing::info!(ms = started.elapsed().as_millis() as u64, "catalogue checkpointed");
            }
            Err(e) => tracing::warn!(error = %e, "the catalogue's checkpoint failed; the next start reads it back"),
        }
    }

    /// True when an event with this id is stored.
    pub fn contains(&self, id: &EventId) -> Result<bool, StoreError> {
        catalogue::contains(&self.inner.tree, id)
    }

    /// Runs blocking read work on the blocking pool, off the async reactor.
    async fn off_reactor<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || work(&store)).await.map_err(|e| StoreError::Task(e.to_string()))?
    }

    /// How many events by `author` are stored.
    pub fn count_by_author(&self, author: &PubKey) -> Result<usize, StoreError> {
        self.view().index.len(&Key::Author(*author))
    }

    /// [`Store::count_by_author`] off the async reactor.
    pub async fn count_by_author_async(&self, author: PubKey) -> Result<usize, StoreError> {
        self.off_reactor(move |s| s.count_by_author(&author)).await
    }

    /// How many events are stored.
    pub fn len(&self) -> usize {
        self.view().index.events() as usize
    }

    /// True when no event is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the store holds and how much of its log is dead space.
    pub fn stats(&self) -> Result<StoreStats, StoreError> {
        let (events, live_bytes, log_bytes, log_generation, segments, segment_bytes) = {
            let view = self.view();
            let index = &view.index;
            (index.events(), index.live_bytes(), view.log.end(), view.generation, index.segments(), index.disk_bytes())
        };
        let last_compaction = match self.load_setting(compact::LAST_COMPACTION)? {
            Some(bytes) => serde_json::from_slice(&bytes).ok(),
            None => None,
        };
        Ok(StoreStats {
            events,
            live_bytes,
            dead_bytes: log_bytes.saturating_sub(live_bytes),
            log_bytes,
            index_bytes: self.inner.db.size_on_disk()? + segment_bytes,
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

    fn view(&self) -> RwLockReadGuard<'_, View> {
        self.inner.view.read().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A start-up step that says it is still at work: `what` logged at `info` every few seconds until
/// the guard is dropped, so an operator watching a slow start sees which step it is in.
struct Progress {
    done: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    fn every_few_seconds(what: &'static str) -> Progress {
        let (done, rx) = std::sync::mpsc::channel::<()>();
        let started = std::time::Instant::now();
        let thread = std::thread::Builder::new()
            .name("hearth-progress".into())
            .spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(PROGRESS_EVERY) {
                    tracing::info!(seconds = started.elapsed().as_secs(), "{what}: still working");
                }
            })
            .ok();
        Progress { done: Some(done), thread }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Opens the sled database of `dir`. sled's I/O threads can hold a closed database's file lock
/// for a moment after its last handle is dropped (seen when the same process reopens the
/// directory at once); another process holding it is [`StoreError::InUse`], after this wait.
fn open_db(dir: &Path, cache_capacity_mb: u64) -> Result<sled::Db, StoreError> {
    let config = sled::Config::new()
        .path(dir)
        .cache_capacity(cache_capacity_mb.saturating_mul(1024 * 1024))
        // Writes dominate a relay's storage work; LowSpace compacts more eagerly.
        .mode(sled::Mode::HighThroughput)
        // Every write is flushed by the writer before it is acknowledged.
        .flush_every_ms(None);
    let mut waited = Duration::ZERO;
    loop {
        match config.open() {
            Err(e) if lock_busy(&e) && waited < LOCK_WAIT => {
                if waited.is_zero() {
                    // Debug only: the wait is short, and an offline command refused for a
                    // directory in use says that in one line.
                    tracing::debug!(path = %dir.display(), "waiting for the data directory's lock");
                }
                std::thread::sleep(LOCK_RETRY);
                waited += LOCK_RETRY;
            }
            Err(e) if lock_busy(&e) => return Err(StoreError::InUse { path: dir.to_path_buf() }),
            Err(sled::Error::Corruption { .. }) if remove_unfinished_snapshots(dir)? => {
                tracing::warn!(path = %dir.display(), "removed a snapshot of sled's that a kill cut off; opening again");
            }
            other => return Ok(other?),
        }
    }
}

/// Removes the snapshot files that sled was still writing when it was killed; true when there
/// were any. sled 0.34 writes `snap.<lsn>.generating` and renames it when complete, but reads the
/// highest-named `snap.` file at open, unfinished ones included, and then refuses to open as
/// corrupt. Only called after sled, holding the directory's lock, refused the open: no other
/// process's sled was writing one then.
fn remove_unfinished_snapshots(dir: &Path) -> Result<bool, StoreError> {
    let mut removed = false;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("snap.") && name.ends_with(".generating") {
            std::fs::remove_file(entry.path())?;
            removed = true;
        }
    }
    Ok(removed)
}

/// The event log of an open catalogue: the file of its generation, at its committed end. Also
/// returns the generation.
fn open_log(dir: &Path, tree: &sled::Tree) -> Result<(Log, u64), StoreError> {
    let generation = meta_u64(tree, keys::LOG_GEN)?;
    Ok((Log::open(dir, &log::file_name(generation), meta_u64(tree, keys::LOG_END)?)?, generation))
}

/// A u64 of the `m` entries (0 when absent).
fn meta_u64(tree: &sled::Tree, name: &str) -> Result<u64, StoreError> {
    match tree.get(keys::meta(name))? {
        Some(v) => decode_serial(&v),
        None => Ok(0),
    }
}

/// The serial stored under an `i` key.
fn decode_serial(value: &[u8]) -> Result<Serial, StoreError> {
    value.try_into().map(u64::from_be_bytes).map_err(|_| StoreError::Corrupt("id entry".into()))
}

/// sled's error for a data directory whose file lock is held (it has no error kind of its own).
fn lock_busy(e: &sled::Error) -> bool {
    matches!(e, sled::Error::Io(io) if io.to_string().starts_with("could not acquire lock"))
}

/// sled's flush, then the data sync that makes it durable (see [`durable`]; a temporary store
/// has nothing to sync). The writer and the settings/audit paths both end their writes here.
fn flush_durably(db: &sled::Db, durable: Option<&Durable>) -> Result<(), StoreError> {
    db.flush()?;
    Ok(durable.map_or(Ok(()), Durable::sync)?)
}

/// A stored event's JSON. The record's frame passed its CRC check when it was read, and the
/// record's tags and content were written by serde_json when it was stored.
fn render(stored: &[u8]) -> Result<EventJson, StoreError> {
    Ok(EventJson::written_by_hearth(record::render(stored)?))
}

#[cfg(test)]
mod tests;
